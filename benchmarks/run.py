"""cutlab's benchmark suite (issue 6): every figure is a ratio of two arms timed in the same run.

    python benchmarks/run.py                 # full measurement (~10 min on 2 idle cores)
    python benchmarks/run.py --quick         # tiny repeats, for developing the suite (numbers are not meaningful)
    python benchmarks/run.py --only 1,7      # a subset of the sections (1..8)
    python benchmarks/run.py --only 8 --merge --out results.json   # add a GPU's section 8 to an existing record

Arms are interleaved (A, B, B, A, A, B, ...: the order alternates every repetition so neither arm always runs
first) and every figure reports the median of the per-repetition ratios A_i / B_i, the number of repetitions and
their spread. Writes ``results.json`` (machine-readable) and ``RESULTS.md`` (human-readable) next to ``--out``;
``--readme README.md`` also rewrites the block between the ``bench:begin`` / ``bench:end`` markers of the README.
Sections: 1 constraint overhead, 2 framework overhead, 3 evaluation, 4 start-up, 5 sweep throughput,
6 data loading and peak memory, 7 hardware utilisation, 8 CUDA GPU (skipped in one line without one). See
benchmarks/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from suite.harness import DEFAULT_PED2, FULL, QUICK, Results, say  # noqa: E402
from suite.report import busy_warning, fmt_value, loadavg, machine_info, readme_block, render_markdown, update_readme  # noqa: E402
from suite.sections.constraint import section_constraint  # noqa: E402
from suite.sections.cuda import section_cuda  # noqa: E402
from suite.sections.data import section_data_load, section_peak_memory  # noqa: E402
from suite.sections.evaluation import section_evaluation  # noqa: E402
from suite.sections.flops import section_flops  # noqa: E402
from suite.sections.framework import section_framework  # noqa: E402
from suite.sections.startup import section_startup  # noqa: E402
from suite.sections.sweep import section_sweep  # noqa: E402
from suite.setup import Data  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny repeats for development (numbers not meaningful)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON (default benchmarks/results.json; --quick: benchmarks/results_quick.json); "
                             "RESULTS.md (RESULTS_quick.md) is written beside it")
    parser.add_argument("--only", default="1,2,3,4,5,6,7,8", help="comma-separated sections to run (default all)")
    parser.add_argument("--ped2", type=Path, default=DEFAULT_PED2, help="the preprocessed Ped2 npz")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in this process (default: torch's)")
    parser.add_argument("--readme", type=Path, default=None,
                        help="also rewrite the bench:begin/bench:end block of this README with the figures")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the temporary run folders")
    parser.add_argument("--merge", action="store_true",
                        help="keep the entries of the sections not measured now from the existing --out file "
                             "(e.g. a GPU machine's section 8 added to the CPU suite's record)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    here = Path(__file__).resolve().parent
    out = args.out or here / ("results_quick.json" if args.quick else "results.json")
    md_path = out.with_name("RESULTS_quick.md" if out.name == "results_quick.json" else
                            ("RESULTS.md" if out.name == "results.json" else out.stem + ".md"))
    sections = {int(s) for s in args.only.split(",") if s.strip()}
    previous = json.loads(out.read_text()) if args.merge and out.is_file() else None
    if previous is not None and previous.get("mode") != mode.name:
        parser.error(f"--merge: {out} holds a {previous.get('mode')}-mode record and this is a {mode.name}-mode run")
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info()
    say(f"cutlab benchmarks, {mode.name} mode, sections {sorted(sections)}: {machine['cpu']}, {machine['cores']} cores, "
        f"torch {machine['torch']} ({machine['torch_threads']} threads), load {machine['loadavg_start']}")
    busy = busy_warning(machine)
    if busy:
        say(f"WARNING: {busy}")
    res = Results(mode.name)
    workdir = Path(tempfile.mkdtemp(prefix="cutlab-bench-"))
    os.environ.setdefault("WANDB_SILENT", "true")
    started = time.perf_counter()
    data: Data | None = None
    skipped: set[int] = set()  # sections that measured nothing here (8 without a CUDA GPU)

    def guarded(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            res.errors[name] = traceback.format_exc()
            say(f"  !! section {name} failed:\n{res.errors[name]}")

    def cuda_section() -> None:
        if not section_cuda(res, mode, data, workdir):
            skipped.add(8)

    try:
        if sections & {6}:
            guarded("6 data load", lambda: section_data_load(res, mode, args.ped2, workdir))
        if sections & {1, 2, 3, 4, 7} or (8 in sections and torch.cuda.is_available()):
            say(f"loading the benchmark data ({args.ped2.name})")
            data = Data(args.ped2, workdir / "cutlab-cache")
            say(f"  data: {data.source}; {len(data.train)} training windows, {len(data.test)} test windows")
        # in this order: the timing sections first, the process-spawning ones (start-up, sweep, memory) last
        runs = [
            (1, "1 constraint overhead", lambda: section_constraint(res, mode, data, workdir)),
            (2, "2 framework overhead", lambda: section_framework(res, mode, data, workdir)),
            (3, "3 evaluation", lambda: section_evaluation(res, mode, data)),
            (7, "7 hardware utilisation", lambda: section_flops(res, mode, data)),
            (8, "8 cuda", cuda_section),
            (4, "4 start-up", lambda: section_startup(res, mode, workdir, data)),
            (5, "5 sweep", lambda: section_sweep(res, mode, workdir)),
            (6, "6 peak memory", lambda: section_peak_memory(res, mode, args.ped2, workdir)),
        ]
        for number, name, section in runs:
            if number in sections:
                guarded(name, section)
    finally:
        if args.keep_workdir:
            say(f"run folders kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    res.figures.sort(key=lambda f: f["section"])
    machine["loadavg_end"] = loadavg()
    wall_s = time.perf_counter() - started  # this run's: a merged record's wall_s is its base run's
    payload = {"mode": mode.name, "machine": machine, "wall_s": wall_s,
               "sections": sorted(sections - skipped), "figures": res.figures, "details": res.details,
               "profiles": res.profiles, "errors": res.errors}
    if previous is not None:
        say(f"merging sections {payload['sections']} into the record of {out} (its other sections kept)")
        payload = merge_records(previous, payload)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(render_markdown(payload))
    if args.readme and mode.name != "full":
        say(f"--readme ignored in {mode.name} mode: the README quotes full measurements only")
    elif args.readme:
        try:
            shown = md_path.resolve().relative_to(args.readme.resolve().parent)
        except ValueError:
            shown = md_path
        update_readme(args.readme, readme_block(payload, str(shown)))
    say(f"wrote {out} and {md_path} in {wall_s / 60:.1f} min")
    for fig in res.figures:
        print(f"  {fig['id']:<42} {fmt_value(fig):>14}  target {fig['target']:<26} {fig['status']}")
    if res.errors:
        print(f"  sections failed: {', '.join(res.errors)}", file=sys.stderr)
    return 1 if res.errors else 0


def merge_records(previous: dict, new: dict) -> dict:
    """``previous`` with the sections ``new`` measured replaced by ``new``'s entries; the rest is kept as it was.

    ``machine`` and ``wall_s`` describe the record's base run; ``merged`` names, per section measured by a later
    run, that run's machine, mode and wall time (RESULTS.md prints it). A run that re-measures every section of the
    base run becomes the base (e.g. the CPU suite run again, keeping a GPU's section 8)."""
    replaced = set(new["sections"])
    old_ids = [f["id"] for f in previous["figures"] if f["section"] in replaced]
    figures = sorted([f for f in previous["figures"] if f["section"] not in replaced] + new["figures"],
                     key=lambda f: f["section"])
    profiles = {key: value for key, value in previous["profiles"].items()
                if not any(fid == key or fid.startswith(key + ".") for fid in old_ids)}
    errors = {key: value for key, value in previous["errors"].items()
              if not (key.split()[0].isdigit() and int(key.split()[0]) in replaced)}
    merged = {key: value for key, value in previous.get("merged", {}).items() if int(key) not in replaced}
    base = set(previous["sections"]) - {int(key) for key in previous.get("merged", {})}
    if base <= replaced:
        previous = {**previous, "machine": new["machine"], "wall_s": new["wall_s"]}
    else:
        merged.update({str(s): {"machine": new["machine"], "wall_s": new["wall_s"], "mode": new["mode"]}
                       for s in sorted(replaced)})
    return {**previous, "sections": sorted(set(previous["sections"]) | replaced), "figures": figures,
            "details": {**previous["details"], **new["details"]}, "profiles": {**profiles, **new["profiles"]},
            "errors": {**errors, **new["errors"]}, "merged": merged}


if __name__ == "__main__":
    sys.exit(main())
