"""Section 7: hardware utilisation (matrix-product FLOP rate)."""

from __future__ import annotations

import statistics
import time

import torch

from suite.harness import Mode, Results, count_flops, interleave, say, spread, timed
from suite.setup import Data, primal_dual_step


def section_flops(res: Results, mode: Mode, data: Data) -> None:
    say("7/7 hardware utilisation: FLOP/s of a training step ÷ measured float32 matmul FLOP/s")
    steps = {"ut": primal_dual_step("ut", True, False, data)[1], "dust": primal_dual_step("dust", True, True, data)[1]}
    flops = {kind: count_flops(step) for kind, step in steps.items()}
    n = mode.matmul_size
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)

    def matmul() -> float:
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        return time.perf_counter() - started

    times = interleave({"ut": timed(steps["ut"]), "dust": timed(steps["dust"]), "matmul": matmul},
                       mode.flops_reps, 1, "flops")
    peak = 2 * n**3 / statistics.median(times["matmul"])
    res.value("hardware.matmul_peak", 7, f"Measured dense float32 matmul ({n}×{n})", peak / 1e9, "GFLOP/s",
              f"median of {len(times['matmul'])} torch.mm calls, {torch.get_num_threads()} threads",
              extra={"seconds": spread(times["matmul"])})
    for kind in ("ut", "dust"):
        achieved = [flops[kind] / t for t in times[kind]]
        ratios = [flops[kind] / t / (2 * n**3 / m) for t, m in zip(times[kind], times["matmul"])]
        res.value(f"hardware.{kind}_utilisation", 7,
                  f"{kind.upper()} constrained training step: achieved FLOP/s ÷ matmul FLOP/s",
                  statistics.median(ratios), "fraction",
                  f"{flops[kind] / 1e9:.2f} GFLOP per step (FlopCounterMode: matrix products of forward + backward; "
                  f"elementwise ops not counted) in {statistics.median(times[kind]) * 1e3:.0f} ms = "
                  f"{statistics.median(achieved) / 1e9:.1f} GFLOP/s vs {peak / 1e9:.1f} GFLOP/s matmul.",
                  extra={"flops_per_step": flops[kind], "achieved_gflops": statistics.median(achieved) / 1e9,
                         "matmul_gflops": peak / 1e9, "step_seconds": spread(times[kind]),
                         "pair_ratios": spread(ratios), "repeats": len(ratios)})
