"""The benchmark harness: modes, interleaved timing, targets, results, and the timing helpers."""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from suite.paths import ROOT


BATCH, FRAMES, PATCH, IMAGE, DEPTH = 4, 10, 16, 160, 3
GAMMA = 0.09
K_GAMMAS = 11
GAMMA_GRID = [round(0.1 * i, 1) for i in range(K_GAMMAS)]
DEFAULT_PED2 = ROOT.parent / "shared" / "data" / "ucsd_ped2" / "ped2_gray160_uint8.npz"
ENV0 = dict(os.environ)  # subprocesses get the environment as it was at start (cutlab.run.tracking edits os.environ)

TARGETS = {  # figure id prefix -> (operator, bound, text)
    "constraint_overhead": ("<=", 1.10, "<= 1.10"),
    "framework_overhead": ("<=", 1.05, "<= 1.05"),
    "evaluation": ("<=", 1.20, "<= 1.2"),
    "startup": ("<=", 1.5, "<= 1.5 s above import torch"),
    "sweep_launcher": ("<=", 0.6, "<= 0.6"),
}


@dataclass(frozen=True)
class Mode:
    name: str
    cons_reps: int
    cons_warmup: int
    app_reps: int
    app_warmup: int
    fw_reps: int
    fw_steps: int
    eval_reps: int
    eval_samples: int
    startup_reps: int
    sweep_runs: int
    data_reps: int
    flops_reps: int
    matmul_size: int
    default_run_args: tuple[str, ...]
    ped2_run_args: tuple[str, ...]
    # section 8 (CUDA): repetitions, steps per repetition, matmul size and products per repetition, and the
    # shared-GPU arm's runs, parallel runs and training steps per run
    cuda_reps: int = 7
    cuda_steps: int = 10
    cuda_matmul: int = 8192
    cuda_matmul_calls: int = 10
    cuda_runs: int = 8
    cuda_parallel: int = 4
    cuda_run_steps: int = 40


FULL = Mode("full", cons_reps=12, cons_warmup=2, app_reps=8, app_warmup=1, fw_reps=8, fw_steps=2, eval_reps=4, eval_samples=4,
            startup_reps=5, sweep_runs=12, data_reps=3, flops_reps=5, matmul_size=2048,
            default_run_args=(),
            ped2_run_args=("train.epochs=1", "data.stride=100"))
QUICK = Mode("quick", cons_reps=2, cons_warmup=1, app_reps=2, app_warmup=1, fw_reps=2, fw_steps=1, eval_reps=1, eval_samples=4,
             startup_reps=1, sweep_runs=2, data_reps=1, flops_reps=2, matmul_size=2048,
             default_run_args=("train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0.0,0.5]"),
             ped2_run_args=("train.epochs=1", "train.max_steps_per_epoch=2", "data.stride=150",
                            "eval.gamma_test=[0.0,0.5]"),
             cuda_reps=2, cuda_steps=2, cuda_matmul=1024, cuda_matmul_calls=2, cuda_runs=2, cuda_parallel=2,
             cuda_run_steps=2)


T_START = time.perf_counter()


def say(text: str) -> None:
    elapsed = time.perf_counter() - T_START
    print(f"[bench {int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {text}", flush=True)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: list[float]) -> dict:
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values),
            "p25": quantile(values, 0.25), "p75": quantile(values, 0.75)}


def interleave(arms: dict[str, Callable[[], float]], reps: int, warmup: int, label: str) -> dict[str, list[float]]:
    """Each arm returns the seconds it measured. Warm-up rounds first, then ``reps`` rounds, the order of the
    arms reversed every other round (A B, B A, A B ...), so load drift and ordering effects hit both arms."""
    names = list(arms)
    for w in range(warmup):
        for name in names:
            arms[name]()
        say(f"  {label}: warm-up {w + 1}/{warmup} done")
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in (names if rep % 2 == 0 else names[::-1]):
            gc.collect()
            times[name].append(arms[name]())
        say(f"  {label}: repetition {rep + 1}/{reps}: "
            + ", ".join(f"{n} {times[n][-1] * 1e3:.0f} ms" for n in names))
    return times


def target_status(prefix: str, value: float | None) -> tuple[str, str]:
    if prefix not in TARGETS:
        return "no target", "-"
    op, bound, text = TARGETS[prefix]
    if value is None:
        return "not measured", text
    return ("met" if value <= bound else "NOT met"), text


@dataclass
class Results:
    mode: str
    figures: list[dict] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    profiles: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)

    def status_of(self, fid: str) -> str | None:
        """The status of the figure ``fid`` recorded so far (None if it is not recorded)."""
        return next((f["status"] for f in self.figures if f["id"] == fid), None)

    def ratio(self, fid: str, section: int, title: str, a_name: str, a: list[float], b_name: str,
              b: list[float], notes: str = "", target_key: str | None = None) -> dict:
        pairs = [x / y for x, y in zip(a, b)]
        value = statistics.median(pairs)
        status, target = target_status(target_key or fid.split(".")[0], value)
        figure = {"id": fid, "section": section, "title": title, "value": value, "unit": "ratio",
                  "target": target, "status": status, "repeats": len(pairs), "pair_ratios": spread(pairs),
                  "ratio_of_medians": statistics.median(a) / statistics.median(b),
                  "arms": {"A": {"name": a_name, "seconds": spread(a), "raw_s": a},
                           "B": {"name": b_name, "seconds": spread(b), "raw_s": b}},
                  "notes": notes}
        self.figures.append(figure)
        say(f"  => {fid}: {value:.3f} (target {target}: {status})")
        return figure

    def value(self, fid: str, section: int, title: str, value: float | None, unit: str, notes: str = "",
              status: str | None = None, target: str = "-", extra: dict | None = None) -> dict:
        figure = {"id": fid, "section": section, "title": title, "value": value, "unit": unit,
                  "target": target, "status": status or ("no target" if value is not None else "not measured"),
                  "notes": notes, **(extra or {})}
        self.figures.append(figure)
        shown = f"{value:.4g} {unit}" if isinstance(value, (int, float)) else "—"
        say(f"  => {fid}: {shown} ({figure['status']})")
        return figure

    def not_measured(self, fid: str, section: int, title: str, reason: str, target: str = "-") -> None:
        self.figures.append({"id": fid, "section": section, "title": title, "value": None, "unit": None,
                             "target": target, "status": "not measured", "notes": reason})
        say(f"  => {fid}: not measured ({reason})")


def count_flops(fn: Callable[[], object]) -> int:
    """Matrix-product FLOPs of one call (torch.utils.flop_counter; elementwise ops are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started
    return run


@contextlib.contextmanager
def quiet_stderr_fd():
    """Silence file descriptor 2 (the profiler's native start/stop lines bypass sys.stderr)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def torch_profile(fn: Callable[[], object], rows: int = 12) -> str:
    """Top ops by self CPU time of one call of ``fn`` (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr_fd(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)


def op_self_times(fn: Callable[[], object]) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr_fd(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}


def op_deltas(slow: dict[str, float], fast: dict[str, float], rows: int = 8) -> str:
    deltas = sorted(((slow.get(k, 0.0) - fast.get(k, 0.0), k) for k in set(slow) | set(fast)), reverse=True)
    lines = [f"{'op':<40} {'slower arm ms':>14} {'faster arm ms':>14} {'difference ms':>14}"]
    for delta, key in deltas[:rows]:
        lines.append(f"{key[:40]:<40} {slow.get(key, 0.0):>14.2f} {fast.get(key, 0.0):>14.2f} {delta:>14.2f}")
    return "\n".join(lines)
