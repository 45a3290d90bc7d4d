"""Section 6: data loading and peak memory."""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cutlab.core.data.video import load_video_clips

from suite.harness import BATCH, IMAGE, K_GAMMAS, Mode, Results, say
from suite.paths import ROOT
from suite.sections.startup import cutlab_cmd, sub_env


def section_data_load(res: Results, mode: Mode, ped2: Path, workdir: Path) -> None:
    say("6/7 data: load_video_clips('ucsd_ped2') with an empty cache vs the cached second load")
    if not ped2.is_file():
        res.not_measured("data.cached_over_first", 6, "Ped2 load: cached ÷ first", f"{ped2} missing")
        return
    counter = iter(range(10**6))
    pending: list[Path] = []

    def first() -> float:
        cache = workdir / f"load_cache_{next(counter)}"
        pending.append(cache)
        started = time.perf_counter()
        clips = load_video_clips("ucsd_ped2", str(ped2), str(cache), IMAGE, progress=False)
        elapsed = time.perf_counter() - started
        del clips
        return elapsed

    def second() -> float:
        cache = pending[-1]
        started = time.perf_counter()
        clips = load_video_clips("ucsd_ped2", str(ped2), str(cache), IMAGE, progress=False)
        elapsed = time.perf_counter() - started
        if "cached in" not in clips.source:
            raise RuntimeError(f"second load did not come from the cache: {clips.source}")
        del clips
        return elapsed

    times = {"first": [], "second": []}
    first()  # warm the page cache of the source file and the imports
    for rep in range(mode.data_reps):
        gc.collect()
        times["first"].append(first())
        gc.collect()
        times["second"].append(second())
        say(f"  data: repetition {rep + 1}/{mode.data_reps}: first {times['first'][-1]:.2f} s, "
            f"cached {times['second'][-1]:.2f} s")
    size = sum(p.stat().st_size for p in pending[-1].glob("*.npz"))
    res.ratio("data.cached_over_first", 6, "Full Ped2 load: second (cached) ÷ first (empty cache)",
              "cached load", times["second"], "first load (decompress + write cache)", times["first"],
              f"{ped2.name} ({ped2.stat().st_size / 1e6:.0f} MB deflated) -> uncompressed cache of {size / 1e6:.0f} MB. "
              "Each repetition starts from an empty cache folder; the source file is in the page cache (one "
              "unmeasured load first).", target_key="data")
    res.details["data_load"] = {"first_s": statistics.median(times["first"]),
                                "cached_s": statistics.median(times["second"]), "cache_bytes": size}


# Runs the command as its own child and prints that child's rusage. Linux keeps a process's max RSS across
# exec, and a child forked from this (large) benchmark process would inherit our high-water mark, so the
# measured process must be forked from this small launcher instead.
RSS_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, usage = os.wait4(proc.pid, 0)
tail = proc.stderr.read().decode(errors="replace")[-3000:]
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss,
                  "wall_s": time.perf_counter() - started, "stderr": tail}))
"""


def peak_rss(cmd: list[str], env: dict) -> tuple[float, float]:
    """(max RSS in MiB, wall seconds) of one child process, from os.wait4's rusage of that process alone."""
    done = subprocess.run([sys.executable, "-c", RSS_LAUNCHER, *cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the RSS launcher failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with {report['rc']}:\n{report['stderr']}")
    return report["maxrss_kib"] / 1024.0, report["wall_s"]  # ru_maxrss is in KiB on Linux


def section_peak_memory(res: Results, mode: Mode, ped2: Path, workdir: Path) -> None:
    say("6/7 data: peak memory (max RSS) of the default run and of a 1-epoch Ped2 run")
    env = sub_env(workdir)
    runs = workdir / "memory"
    baseline, _ = peak_rss([sys.executable, "-c", "import torch"], env)
    res.value("memory.import_torch", 6, "Peak RSS of `python -c 'import torch'` (baseline)", baseline, "MiB")
    args = list(mode.default_run_args)
    rss, wall = peak_rss(cutlab_cmd(*args, f"paths.runs_dir={runs}", "run_name=default"), env)
    res.value("memory.default_run", 6, "Peak RSS of the default run `python -m cutlab`", rss, "MiB",
              f"args: {' '.join(args) or '(none: the embedded default, 20 epochs on synthetic video)'}; "
              f"wall {wall:.1f} s. max RSS of the cutlab process (os.wait4); the W&B service process is separate.",
              extra={"wall_s": wall})
    if not ped2.is_file():
        res.not_measured("memory.ped2_1epoch", 6, "Peak RSS of a 1-epoch Ped2 run", f"{ped2} missing")
        return
    # a typical run: the preprocessed cache exists (the first-ever load is measured in the data-load figure)
    load_video_clips("ucsd_ped2", str(ped2), env["CUTLAB_CACHE_DIR"], IMAGE, progress=False)
    args = ["model=dust", "data=ucsd_ped2", f"data.root={ped2}", *mode.ped2_run_args]
    rss, wall = peak_rss(cutlab_cmd(*args, f"paths.runs_dir={runs}", "run_name=ped2"), env)
    res.value("memory.ped2_1epoch", 6, "Peak RSS of a 1-epoch-capped Ped2 run at data.stride=100", rss, "MiB",
              f"args: {' '.join(args)}; wall {wall:.1f} s. The whole set is in memory and train/eval batches have "
              f"the usual shapes ({BATCH} and {BATCH}×{K_GAMMAS} windows), but a larger data.stride also thins the "
              "evaluation's batches, over which the peak grows: a run at the default stride peaks higher (README, "
              "Performance).", extra={"wall_s": wall})
