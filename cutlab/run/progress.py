"""A run's progress lines on stderr."""

from __future__ import annotations

import sys
import time

from cutlab.core.primal_dual import StepResult
from cutlab.core.training import Progress


class ProgressReporter:
    """A progress line on stderr every few seconds and at each epoch end; silent when disabled."""

    def __init__(self, enabled: bool, total_steps: int, epochs: int, every_s: float = 5.0) -> None:
        self.enabled, self.total_steps, self.epochs, self.every_s = enabled, total_steps, epochs, every_s
        self.last = time.perf_counter() - every_s

    def _print(self, text: str) -> None:
        if self.enabled:
            print(f"[cutlab] {text}", file=sys.stderr, flush=True)

    def step(self, progress: Progress, result: StepResult, seconds: float) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every_s or progress.step == self.total_steps:
            self.last = now
            losses = " ".join(f"{v:.3g}" for v in result.layer_losses.tolist())
            self._print(f"epoch {progress.epoch + 1}/{self.epochs} step {progress.step}/{self.total_steps} "
                        f"({seconds:.2f} s/step) layer losses [{losses}] max lambda {float(result.multipliers.max()):.3g}")

    def evaluating(self, split: str):
        def report(done: int, total: int) -> None:
            now = time.perf_counter()
            if now - self.last >= self.every_s or done == total:
                self.last = now
                self._print(f"evaluating {split}: batch {done}/{total}")
        return report

    def done(self, summary: dict) -> None:
        ind = summary["in_distribution"]
        losses = " > ".join(f"{v:.4g}" for v in ind["test_layer_loss"]) if ind["strictly_decreasing"] else \
            ", ".join(f"{v:.4g}" for v in ind["test_layer_loss"]) + " (not decreasing)"
        self._print(f"done: test mean {summary['metric']} over gamma_test {summary['test_mean_metric']:.3f}, "
                    f"verdict {summary['verdict']}; test loss by layer at gamma_test={ind['gamma']:g}: {losses}")
