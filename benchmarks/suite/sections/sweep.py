"""Section 5: sweep throughput of the launchers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from suite.harness import Mode, Results, interleave, say
from suite.sections.startup import cutlab_cmd, run_quiet, sub_env


GRID = {"model": ["dust", "ut"], "train": ["erm", "constrained"], "seed": ["0", "1", "2"]}
SWEEP_TINY = ("data=synthetic", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0.0,0.5]",
              "progress=false")


# sweeps/smoke.yaml: model=dust,ut x gamma=0,0.09,0.15 x train=constrained,erm, L=2, 1 epoch of 3 steps, synthetic.
SMOKE_QUICK = ("model=dust", "gamma=0,0.09")  # --quick: 4 of its runs (command-line values replace the file's)


def section_sweep(res: Results, mode: Mode, workdir: Path) -> None:
    section_sweep_launcher(res, mode, workdir)
    grid = dict(GRID) if mode.sweep_runs >= 12 else {"model": ["dust"], "train": ["erm", "constrained"],
                                                       "seed": ["0"]}
    combos = [(m, t, s) for m in grid["model"] for t in grid["train"] for s in grid["seed"]]
    say(f"5/7 sweep: {len(combos)}-run grid, one `python -m cutlab -m` process vs {len(combos)} separate processes")
    env = sub_env(workdir)
    counter = iter(range(10**6))

    def serial_multirun() -> float:
        runs = workdir / f"sweep_multi_{next(counter)}"
        started = time.perf_counter()
        run_quiet(cutlab_cmd(*SWEEP_TINY, *(f"{k}={','.join(v)}" for k, v in grid.items()),
                             f"paths.runs_dir={runs}", multirun=True), env)
        elapsed = time.perf_counter() - started
        check_complete(runs, len(combos))
        return elapsed / len(combos)

    def separate() -> float:
        runs = workdir / f"sweep_separate_{next(counter)}"
        started = time.perf_counter()
        for m, t, s in combos:
            run_quiet(cutlab_cmd(*SWEEP_TINY, f"model={m}", f"train={t}", f"seed={s}", f"paths.runs_dir={runs}"), env)
        elapsed = time.perf_counter() - started
        check_complete(runs, len(combos))
        return elapsed / len(combos)

    times = interleave({"multirun": serial_multirun, "separate": separate}, 1, 0, "sweep")
    res.ratio("sweep.serial_in_process", 5,
              f"{len(combos)}-run grid: per-run wall time, serial in one process (Hydra basic launcher) ÷ "
              "one process per run", "python -m cutlab -m (one process)", times["multirun"],
              "separate python -m cutlab processes", times["separate"],
              f"Grid {' '.join(f'{k}={chr(44).join(v)}' for k, v in grid.items())} with "
              + " ".join(SWEEP_TINY) + " and wandb.mode=offline (the default). Single repetition (each arm runs "
              f"{len(combos)} trainings). The per-run fixed cost of a process of its own, which the local launcher "
              "pays for every run with launcher.warm_workers=false (see sweep_launcher).", target_key="sweep_serial")
    res.details["sweep"] = {"runs": len(combos), "per_run_s": {k: v[0] for k, v in times.items()},
                            "total_s": {k: v[0] * len(combos) for k, v in times.items()}}


def section_sweep_launcher(res: Results, mode: Mode, workdir: Path) -> None:
    """The smoke grid with launcher=local (2 processes at a time) vs launcher=inprocess (serial, one process)."""
    narrowed = () if mode.sweep_runs >= 12 else SMOKE_QUICK
    base = ("--config-name", "smoke", *narrowed, "progress=false")
    runs_count = 12 if not narrowed else 4
    say(f"5/7 sweep: the smoke grid ({runs_count} runs), launcher=local launcher.max_parallel=2 vs launcher=inprocess")
    env = sub_env(workdir)
    counter = iter(range(10**6))

    def sweep(*launcher: str) -> Callable[[], float]:
        def run() -> float:
            runs = workdir / f"sweep_{launcher[0].split('=')[1]}_{next(counter)}"  # fresh: nothing skipped as complete
            started = time.perf_counter()
            run_quiet(cutlab_cmd(*base, *launcher, f"paths.runs_dir={runs}", multirun=True), env)
            elapsed = time.perf_counter() - started
            check_complete(runs, runs_count)
            return elapsed / runs_count
        return run

    times = interleave({"local": sweep("launcher=local", "launcher.max_parallel=2"),
                        "inprocess": sweep("launcher=inprocess")}, 1, 0, "sweep launcher")
    res.ratio("sweep_launcher", 5,
              f"{runs_count}-run smoke grid: per-run wall time, local parallel launcher (2 at a time) ÷ serial in one "
              "process", "launcher=local launcher.max_parallel=2", times["local"], "launcher=inprocess",
              times["inprocess"],
              f"`python -m cutlab -m --config-name smoke {' '.join(narrowed)} progress=false launcher=...` "
              "(sweeps/smoke.yaml: synthetic video, L=2, 1 epoch of 3 steps, gamma_test {0, 0.5}; W&B offline), "
              "each arm into a fresh runs folder, wall time from spawn to exit ÷ the number of runs. The local "
              "launcher runs the runs in 2 warm workers (launcher.warm_workers=true, its default: long-lived "
              "processes that import cutlab once and run their runs one after another, each as `python -m cutlab` "
              "would) with launcher.threads=1 (its default); in-process runs use torch's default threads. "
              "Single repetition.")
    res.details["sweep_launcher"] = {"runs": runs_count, "per_run_s": {k: v[0] for k, v in times.items()},
                                     "total_s": {k: v[0] * runs_count for k, v in times.items()}}
    if res.status_of("sweep_launcher") == "NOT met":
        local, inprocess = times["local"][0], times["inprocess"][0]
        res.profiles["sweep_launcher"] = {
            "slower arm": "launcher=local",
            "table": (f"per run: local {local:.2f} s, in-process {inprocess:.2f} s; local x 2 parallel slots = "
                      f"{2 * local:.2f} s of slot time per run, i.e. {2 * local - inprocess:.2f} s per run above the "
                      "in-process run itself"),
            "text": "torch.profiler does not see process start-up. Each of the 2 warm workers pays the start-up of "
                    "section 4 (imports of torch and Hydra, W&B's service) once, as the in-process sweep does, plus "
                    "the launcher's own process; with 12 runs of about a second that fixed cost is still a large "
                    "share, and 2 workers only halve the wall time when 2 cores are free (other load on the machine "
                    "takes them). With launcher.warm_workers=false every run pays the start-up (see "
                    "sweep.serial_in_process below for the cost of one process per run).",
        }


def check_complete(runs: Path, expected: int) -> None:
    complete = [p for p in runs.glob("*/summary.json") if json.loads(p.read_text()).get("status") == "complete"]
    if len(complete) != expected:
        raise RuntimeError(f"{runs}: {len(complete)} of {expected} runs complete")
