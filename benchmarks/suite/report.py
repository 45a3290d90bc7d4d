"""The benchmark record: machine description, RESULTS.md and the README block."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from suite.harness import say
from suite.paths import ROOT


def machine_info() -> dict:
    from cutlab.run.provenance import cpu_generation, cpu_model

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    try:
        import wandb  # noqa: F401  (version only)
        wandb_version = sys.modules["wandb"].__version__
    except Exception:
        wandb_version = None
    return {
        "cpu": cpu_model(),
        "cpu_generation": cpu_generation(),
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "wandb": wandb_version,
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "loadavg_start": loadavg(),
    }


def loadavg() -> str | None:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


def busy_warning(machine: dict) -> str | None:
    """A warning when other work is running: torch's threads then wait on each other and small ops slow down."""
    try:
        load = float(str(machine.get("loadavg_start") or "0").split()[0])
    except ValueError:
        return None
    cores = machine.get("cores_available") or machine.get("cores") or 1
    if load > 0.5 * cores:
        return (f"load average {load:.2f} on {cores} cores when the benchmark started: other work is running, so "
                "timings (and even ratios) are unreliable; run on an idle machine")
    return None


def fmt_value(fig: dict) -> str:
    value = fig.get("value")
    if value is None:
        return "—"
    unit = fig.get("unit") or ""
    if unit == "ratio":
        return f"{value:.3f}"
    if unit == "fraction":
        return f"{100 * value:.1f} %"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.4g} {unit}"


def fmt_spread(fig: dict) -> str:
    for key, scale, unit in (("pair_ratios", 1, ""), ("pair_differences_s", 1, " s")):
        if key in fig:
            s = fig[key]
            if s["n"] == 1:
                return "1 repeat"
            if fig.get("unit") == "fraction":
                return f"{s['n']} pairs, range {100 * s['min']:.1f}–{100 * s['max']:.1f} %"
            return f"{s['n']} pairs, IQR {s['p25']:.3f}–{s['p75']:.3f}{unit}, range {s['min']:.3f}–{s['max']:.3f}{unit}"
    return "—"


def cpu_text(meta: dict) -> str:
    """The processor's name and, where recorded, its generation (a virtual machine's name alone hides it)."""
    generation = meta.get("cpu_generation")
    if not generation:
        return meta["cpu"]
    return f"{meta['cpu']} ({', '.join(f'{key} {value}' for key, value in generation.items())})"


def render_markdown(data: dict) -> str:
    meta, mode = data["machine"], data["mode"]
    lines = ["# cutlab benchmark results", ""]
    if mode != "full":
        lines += [f"> **{mode} mode**: tiny repeats for developing the suite; these numbers are not meaningful.", ""]
    if busy_warning(meta):
        lines += [f"> **Warning**: {busy_warning(meta)}.", ""]
    lines += [
        "Written by `python benchmarks/run.py` (see benchmarks/README.md). Every ratio is the median of per-repetition "
        "ratios A_i/B_i with the arms interleaved in the same run.", "",
        "| machine | |", "|---|---|",
        f"| CPU | {cpu_text(meta)} |", f"| cores | {meta['cores']} (available to this process: {meta['cores_available']}) |",
        *([f"| GPU | {meta['gpu']} |"] if meta.get("gpu") else []),
        f"| torch | {meta['torch']}, {meta['torch_threads']} threads |",
        f"| python / numpy / wandb | {meta['python']} / {meta['numpy']} / {meta['wandb']} |",
        f"| date (UTC) | {meta['date']} |",
        f"| git commit | {meta['git_commit']}{' (dirty tree)' if meta['git_dirty'] else ''} |",
        f"| load average at start / end | {meta['loadavg_start']} / {meta.get('loadavg_end')} |",
        f"| benchmark wall time | {data['wall_s'] / 60:.1f} min |", "",
        *merged_lines(data),
        "## Figures", "",
        "| # | figure | value | target | status | repeats and spread |", "|---|---|---|---|---|---|",
    ]
    for fig in data["figures"]:
        status = fig["status"]
        shown = f"**{status}**" if status == "NOT met" else status
        lines.append(f"| {fig['section']} | {fig['title']} (`{fig['id']}`) | {fmt_value(fig)} | {fig['target']} | "
                     f"{shown} | {fmt_spread(fig)} |")
    lines += ["", "## Details", ""]
    for fig in data["figures"]:
        if fig.get("notes") or "arms" in fig:
            lines.append(f"- **`{fig['id']}`** — {fig.get('notes', '')}")
            if "arms" in fig:
                a, b = fig["arms"]["A"], fig["arms"]["B"]
                lines.append(f"  A = {a['name']}: median {a['seconds']['median'] * 1e3:.1f} ms; "
                             f"B = {b['name']}: median {b['seconds']['median'] * 1e3:.1f} ms; "
                             f"ratio of medians {fig['ratio_of_medians']:.3f}.")
            if "first_row_s" in fig:
                lines.append(f"  first history row at {fig['first_row_s']['median']:.2f} s (first step starts at "
                             f"{fig['first_step_start_s']['median']:.2f} s); `import torch` "
                             f"{fig['import_torch_s']['median']:.2f} s; a bare torch training script (import torch, "
                             f"Adam, one step — Adam's first use imports torch._dynamo) "
                             f"{fig['bare_training_script_s']['median']:.2f} s, so cutlab adds "
                             f"{fig['above_bare_training_script_s']['median']:.2f} s above that; bare python "
                             f"{fig['python_bare_s']['median']:.3f} s. The whole tiny run (1 step, evaluation at "
                             f"one gamma, records) exits after {fig['process_exit_s']['median']:.2f} s: the fixed "
                             "cost of a run.")
    details = data["details"]
    if "framework_overhead" in details:
        lines += ["", "### Framework overhead, per step", "", "| model | cutlab step (no ckpt) | core step in bare loop | "
                  "bare step | on_step callback | checkpoint | checkpoint amortised (Ped2 / synthetic default) |",
                  "|---|---|---|---|---|---|---|"]
        for kind in ("dust", "ut"):
            d = details["framework_overhead"].get(kind)
            if d:
                lines.append(f"| {kind} | {d['cutlab_step_ms_median_without_checkpoint']:.1f} ms | "
                             f"{d['core_step_ms_median']:.1f} ms | {d['bare_step_ms_median']:.1f} ms | {d['on_step_callback_ms_median']:.2f} ms | "
                             f"{d['checkpoint_ms_median']:.1f} ms ({d['checkpoint_bytes'] / 1e6:.1f} MB) | "
                             f"{d['checkpoint_amortised_ms_per_step_ped2']:.2f} / "
                             f"{d['checkpoint_amortised_ms_per_step_synthetic_default']:.2f} ms |")
    if "startup" in details:
        s = details["startup"]
        lines += ["", "### What start-up is made of", ""]
        if "imports" in s:
            imp = s["imports"]
            lines += [f"`python -X importtime -m cutlab` (tiny run, W&B offline): {imp['total_s']:.2f} s of imports in "
                      "total. " + imp["note"], "",
                      "| top-level import | cumulative s |", "|---|---|"]
            lines += [f"| {name} | {sec:.3f} |" for name, sec in imp["top_level_cumulative_s"]]
            lines += ["", "| package (sum of self times) | s |", "|---|---|"]
            lines += [f"| {name} | {sec:.3f} |" for name, sec in imp["by_package_self_s"]]
        if "phases" in s:
            lines += ["", "cProfile of one tiny run (" + s["phases"]["note"] + "):", "",
                      "| phase | cumulative s |", "|---|---|"]
            lines += [f"| {label} | {sec:.3f} |" for label, sec in s["phases"]["phases_s"]]
        if "reference_epsilon" in s:
            r = s["reference_epsilon"]
            lines += ["", f"`epsilon=auto` reference pass ({r['model']}, {r['data']}): {r['seconds']:.2f} s — {r['note']}."]
    if "sweep" in details or "sweep_launcher" in details:
        lines += ["", "### Sweep", ""]
        if "sweep_launcher" in details:
            sl = details["sweep_launcher"]
            lines.append(f"Smoke grid, {sl['runs']} runs: launcher=local (2 at a time) {sl['total_s']['local']:.1f} s in "
                         f"total ({sl['per_run_s']['local']:.2f} s per run); launcher=inprocess "
                         f"{sl['total_s']['inprocess']:.1f} s ({sl['per_run_s']['inprocess']:.2f} s per run).")
        if "sweep" in details:
            sw = details["sweep"]
            lines.append(f"{sw['runs']} runs: one process {sw['total_s']['multirun']:.1f} s in total "
                         f"({sw['per_run_s']['multirun']:.2f} s per run); separate processes "
                         f"{sw['total_s']['separate']:.1f} s ({sw['per_run_s']['separate']:.2f} s per run).")
    if any(isinstance(v, dict) and "cutlab_fp32" in v for v in details.get("cuda", {}).values()):
        arms = ("cutlab_fp32", "cutlab_tf32", "cutlab_bf16", "cutlab_fp32_default_kernels", "bare")
        lines += ["", f"### CUDA step times ({details['cuda']['device']}, torch {details['cuda']['torch']}, "
                  f"CUDA {details['cuda']['cuda']}; cutlab arms with deterministic kernels, as a run)", "",
                  "| model | cutlab fp32 | cutlab tf32 | cutlab bf16 | cutlab fp32, default kernels | bare loop (fp32) |",
                  "|---|---|---|---|---|---|"]
        for name, d in details["cuda"].items():
            if isinstance(d, dict) and "cutlab_fp32" in d:
                lines.append(f"| {name} | " + " | ".join(f"{d[a]:.2f} ms" if a in d else "—" for a in arms) + " |")
    if data["profiles"]:
        lines += ["", "## Profiles of targets not met", ""]
        for fid, prof in data["profiles"].items():
            lines += [f"### `{fid}` — slower arm: {prof['slower arm']}", "",
                      "Top ops by self CPU time (torch.profiler, one call):", "", "```", prof["table"].rstrip(), "```"]
            if prof.get("differences"):
                lines += ["", "Largest self-CPU differences between the arms:", "", "```", prof["differences"], "```"]
            if prof.get("text"):
                lines += ["", prof["text"]]
            lines.append("")
    if data["errors"]:
        lines += ["", "## Sections that failed", ""]
        for name, text in data["errors"].items():
            lines += [f"### {name}", "", "```", text.rstrip()[-2000:], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def merged_lines(data: dict) -> list[str]:
    """One line per later run whose sections were merged into this record (`run.py --merge`), naming its machine."""
    runs: dict[str, list[str]] = {}
    for section, entry in sorted(data.get("merged", {}).items(), key=lambda item: int(item[0])):
        m = entry["machine"]
        described = (f"{m.get('gpu') or 'no GPU'}; CPU {cpu_text(m)}, {m['cores']} cores; torch {m['torch']}; python "
                     f"{m['python']}; {m['date']}; commit {str(m['git_commit'])[:10]}"
                     f"{' (dirty tree)' if m['git_dirty'] else ''}; {entry['mode']} mode, {entry['wall_s'] / 60:.1f} min")
        runs.setdefault(described, []).append(section)
    return [f"Section{'s' if len(s) > 1 else ''} {', '.join(s)} measured in a later run merged into this record: "
            f"{described}." for described, s in runs.items()] + ([""] if runs else [])


def readme_block(data: dict, results_md: str) -> str:
    lines = ([f"> {busy_warning(data['machine'])}.", ""] if busy_warning(data["machine"]) else []) + [f"Measured on {data['machine']['cpu']} ({data['machine']['cores']} cores, torch "
             f"{data['machine']['torch']}, {data['machine']['torch_threads']} threads), {data['machine']['date'][:10]}, "
             f"commit {str(data['machine']['git_commit'])[:10]}; {data['mode']} mode. Full record: `{results_md}`.", "",
             *merged_lines(data), "| figure | value | target | status |", "|---|---|---|---|"]
    for fig in data["figures"]:
        lines.append(f"| {fig['title']} | {fmt_value(fig)} | {fig['target']} | {fig['status']} |")
    return "\n".join(lines)


def update_readme(path: Path, block: str) -> None:
    text = path.read_text()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    if begin not in text or end not in text:
        say(f"README {path} has no {begin} ... {end} block; not updated")
        return
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{block}\n{end}{tail}")
    say(f"updated the performance block of {path}")
