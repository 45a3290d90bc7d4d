"""Section 4: start-up of `python -m cutlab`, and where its seconds go."""

from __future__ import annotations

import pstats
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import torch

from cutlab.core.objectives import DenoisingObjective

from suite.harness import BATCH, ENV0, GAMMA, Mode, Results, interleave, say, spread, target_status
from suite.paths import ROOT
from suite.setup import Data, make_model


def cutlab_cmd(*overrides: str, multirun: bool = False) -> list[str]:
    return [sys.executable, "-m", "cutlab", *(["-m"] if multirun else []), *overrides]


TINY = ("data=synthetic", "train.epochs=1", "train.max_steps_per_epoch=1", "eval.gamma_test=[0.0]", "progress=false")


def run_quiet(cmd: list[str], env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def sub_env(workdir: Path) -> dict:
    env = dict(ENV0)
    env["CUTLAB_CACHE_DIR"] = str(workdir / "cutlab-cache")
    env.setdefault("WANDB_SILENT", "true")
    return env


def first_row_time(run_dir: Path) -> tuple[float, float]:
    """(mtime of history.csv, step_time of its single row): with one step, the file's last write is that row."""
    path = run_dir / "history.csv"
    lines = path.read_text().splitlines()
    if len(lines) != 2:
        raise RuntimeError(f"{path} should hold exactly one step, it has {len(lines) - 1}")
    columns = lines[0].split(",")
    return path.stat().st_mtime, float(lines[1].split(",")[columns.index("step_time")])


def section_startup(res: Results, mode: Mode, workdir: Path, data: Data | None) -> None:
    say("4/7 start-up: process start -> first history.csv row of `python -m cutlab` (tiny synthetic run)")
    env = sub_env(workdir)
    counter = iter(range(10**6))
    marker_script = "import sys, torch; open(sys.argv[1], 'w').write('imported')"

    def python_bare() -> float:
        marker = workdir / f"marker_py_{next(counter)}"
        started = time.time()
        run_quiet([sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('x')", str(marker)], env)
        return marker.stat().st_mtime - started

    def import_torch() -> float:
        marker = workdir / f"marker_torch_{next(counter)}"
        started = time.time()
        run_quiet([sys.executable, "-c", marker_script, str(marker)], env)
        return marker.stat().st_mtime - started

    bare_train_script = ("import sys, torch\n"
                         "model = torch.nn.Linear(256, 256)\n"
                         "optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
                         "loss = model(torch.randn(4, 256)).pow(2).mean()\n"
                         "optimizer.zero_grad(); loss.backward(); optimizer.step()\n"
                         "open(sys.argv[1], 'w').write('stepped')\n")

    def bare_training() -> float:
        marker = workdir / f"marker_train_{next(counter)}"
        started = time.time()
        run_quiet([sys.executable, "-c", bare_train_script, str(marker)], env)
        return marker.stat().st_mtime - started

    step_times: dict[str, list[float]] = {"disabled": [], "offline": []}
    exit_times: dict[str, list[float]] = {"disabled": [], "offline": []}

    def app(wandb_mode: str) -> Callable[[], float]:
        def run() -> float:
            runs = workdir / f"startup_{wandb_mode}_{next(counter)}"
            started = time.time()
            run_quiet(cutlab_cmd(*TINY, f"wandb.mode={wandb_mode}", f"paths.runs_dir={runs}", "run_name=s"), env)
            exit_times[wandb_mode].append(time.time() - started)
            written, step_time = first_row_time(runs / "s")
            step_times[wandb_mode].append(step_time)
            return written - started
        return run

    times = interleave({"python": python_bare, "import_torch": import_torch, "bare_training": bare_training,
                        "cutlab_disabled": app("disabled"), "cutlab_offline": app("offline")},
                       mode.startup_reps, 1, "start-up")
    note = ("Wall time from just before the process is spawned to the mtime of history.csv after its first (only) "
            "row; the import-torch arm is timed the same way (a file written right after `import torch`), and so is "
            "a bare torch training script (import torch, Adam, one step). "
            "Tiny run: " + " ".join(TINY) + ". The figure is the difference (seconds above import torch).")
    torch_median = statistics.median(times["import_torch"])
    for wandb_mode in ("disabled", "offline"):
        arm = times[f"cutlab_{wandb_mode}"]
        above = [a - b for a, b in zip(arm, times["import_torch"])]
        value = statistics.median(above)
        status, target = target_status("startup", value)
        to_step_start = [a - s for a, s in zip(arm, step_times[wandb_mode][-len(arm):])]
        res.figures.append({
            "id": f"startup.wandb_{wandb_mode}", "section": 4,
            "title": f"Start-up above import torch, wandb.mode={wandb_mode}", "value": value, "unit": "s",
            "target": target, "status": status, "repeats": len(above), "pair_differences_s": spread(above),
            "first_row_s": spread(arm), "first_step_start_s": spread(to_step_start),
            "import_torch_s": spread(times["import_torch"]), "python_bare_s": spread(times["python"]),
            "bare_training_script_s": spread(times["bare_training"]),
            "process_exit_s": spread(exit_times[wandb_mode][-len(arm):]),
            "above_bare_training_script_s": spread([a - b for a, b in zip(arm, times["bare_training"])]),
            "ratio_to_import_torch": statistics.median(arm) / torch_median, "notes": note})
        say(f"  => startup.wandb_{wandb_mode}: {value:.2f} s above import torch "
            f"(first row at {statistics.median(arm):.2f} s; target {target}: {status})")
    res.details["startup"] = {"medians_s": {k: statistics.median(v) for k, v in times.items()},
                              "first_step_time_s": {k: statistics.median(v) for k, v in step_times.items() if v}}

    say("  import-time breakdown (python -X importtime -m cutlab ..., wandb offline)")
    runs = workdir / "startup_importtime"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "cutlab", *TINY, "wandb.mode=offline",
                           f"paths.runs_dir={runs}", "run_name=s"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    res.details["startup"]["imports"] = summarise_importtime(done.stderr)
    say("  phase breakdown (cProfile of one run, wandb offline)")
    res.details["startup"]["phases"] = profile_phases(workdir, env)
    if data is not None:
        res.details["startup"]["reference_epsilon"] = time_reference_epsilon(data)
    if any(res.status_of(f"startup.wandb_{m}") == "NOT met" for m in ("disabled", "offline")):
        res.profiles["startup"] = {
            "slower arm": "python -m cutlab (tiny run)",
            "table": startup_profile_text(res.details["startup"]),
            "text": "torch.profiler does not see start-up (imports, Hydra, W&B, file I/O), so the profile is the "
                    "import-time breakdown and a cProfile of the run's phases (also under 'What start-up is made of').",
        }


def startup_profile_text(startup: dict) -> str:
    lines = []
    phases = startup.get("phases", {}).get("phases_s", [])
    if phases:
        lines.append("cProfile phases of one run (cumulative s):")
        lines += [f"  {label:<42} {sec:8.3f}" for label, sec in phases]
    imports = startup.get("imports")
    if imports:
        lines.append(f"imports, by package (sum of self times; {imports['total_s']:.2f} s in total):")
        lines += [f"  {name:<42} {sec:8.3f}" for name, sec in imports["by_package_self_s"][:8]]
    return "\n".join(lines)


def summarise_importtime(stderr: str, top: int = 12) -> dict:
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if match:
            rows.append((int(match[1]), int(match[2]), (len(match[3]) - 1) // 2, match[4]))
    top_level = sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])
    by_package: dict[str, int] = {}
    for self_us, _, _, name in rows:
        root = name.split(".")[0]
        by_package[root] = by_package.get(root, 0) + self_us
    return {
        "total_s": sum(r[0] for r in rows) / 1e6,
        "top_level_cumulative_s": [(name, cum / 1e6) for _, cum, _, name in top_level[:top]],
        "by_package_self_s": sorted(((k, v / 1e6) for k, v in by_package.items()), key=lambda kv: -kv[1])[:top],
        "note": "-X importtime adds its own overhead; top-level rows are import statements not nested in another "
                "import (lazy imports inside functions appear here too).",
    }


PHASES = [  # (label, file suffix, function name)
    ("module imports (all, incl. lazy)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("cutlab main() (Hydra + the run)", "cutlab/cli.py", "main"),
    ("run_experiment", "cutlab/run/experiment.py", "run_experiment"),
    ("provenance (git, versions)", "cutlab/run/provenance.py", "provenance"),
    ("build_video_task (data, sigma, model)", "cutlab/tasks/video.py", "build_video_task"),
    ("reference_epsilon (epsilon=auto pass)", "cutlab/run/build.py", "reference_epsilon"),
    ("build_primal_dual", "cutlab/run/build.py", "build_primal_dual"),
    ("Tracker.__init__ (wandb.init)", "cutlab/run/tracking.py", "__init__"),
    ("Trainer.train_step (all steps)", "cutlab/core/training.py", "train_step"),
    ("save_checkpoint", "cutlab/run/checkpoints.py", "save_checkpoint"),
    ("evaluate_and_write", "cutlab/run/results.py", "evaluate_and_write"),
    ("Tracker.finish", "cutlab/run/tracking.py", "finish"),
]


def profile_phases(workdir: Path, env: dict) -> dict:
    """Cumulative time of the main phases of one tiny run, from cProfile (which slows Python code a little)."""
    out = workdir / "startup.prof"
    runs = workdir / "startup_cprofile"
    run_quiet([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "cutlab", *TINY, "wandb.mode=offline",
               f"paths.runs_dir={runs}", "run_name=s"], env)
    stats = pstats.Stats(str(out)).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    phases = []
    for label, suffix, name in PHASES:
        total = sum(v[3] for (file, _, func), v in stats.items() if func == name and file.endswith(suffix))
        phases.append((label, total))
    return {"phases_s": phases, "note": "cProfile cumulative times of one run (profiler overhead included); "
                                         "imports overlap the other phases (lazy imports)."}


def time_reference_epsilon(data: Data) -> dict:
    """epsilon=auto evaluates the untrained model on 8 training batches before the first step: its cost on Ped2."""
    from cutlab.config.compose import compose_run_config
    from cutlab.run.build import reference_epsilon

    # the run's own config, composed: one written here by hand lacked keys reference_epsilon came to read
    cfg = compose_run_config(["train=constrained", "train.epsilon=auto", f"train.batch_size={BATCH}",
                              f"gamma={GAMMA}", "seed=0"])
    task = SimpleNamespace(model=make_model("dust", per_layer=True), objective=DenoisingObjective(),
                           train_set=data.train, prepare=data.prepare, sigma=data.sigma)
    started = time.perf_counter()
    reference_epsilon(cfg, task, torch.device("cpu"))
    seconds = time.perf_counter() - started
    say(f"  epsilon=auto reference pass on {data.source.split(' (')[0]} (DUST, 8 batches of 4): {seconds:.2f} s")
    return {"seconds": seconds, "data": data.source, "model": "dust (per-layer D)",
            "note": "paid once per Ped2 run before its first step (not in the synthetic start-up figure)"}
