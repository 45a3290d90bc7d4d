"""The step recorder: what a run does around every training step and epoch, as one named object.

After each step: the history row (history.csv), the feasibility clock, the W&B log, the progress line, a checkpoint
every ``every_steps`` steps, and the stop requested by SLURM's signal (a checkpoint, then :class:`Preempted`).
After each epoch: a checkpoint, then the caller's ``on_epoch_end`` hook (a search's pruner). The benchmarks time
this same object, so what they measure is what a run does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from cutlab.core.feasibility_clock import FeasibilityClock
from cutlab.core.iterate_selection import IterateSelector
from cutlab.core.primal_dual import StepResult
from cutlab.core.training import Progress, Trainer
from cutlab.run.checkpoints import save_checkpoint
from cutlab.run.preemption import Preempted
from cutlab.run.progress import ProgressReporter
from cutlab.run.records import RECORD_VERSION, HistoryWriter

# ``on_epoch_end(epoch, validate)``: called after each epoch's checkpoint; ``validate()`` returns the last
# layer's validation metric at gamma_train (one pass over the validation set, only when called).
EpochEndHook = Callable[[int, Callable[[], float]], None]


def history_row(progress: Progress, result: StepResult, trainer: Trainer, seconds: float) -> dict:
    row = {"step": progress.step, "epoch": progress.epoch,
           "phase": "constrained" if trainer.primal_dual.constrained and trainer.dual_active(progress.epoch) else "primal",
           "lagrangian": result.lagrangian, "grad_norm": result.grad_norm, "step_time": seconds,
           "lr": trainer.primal_dual.primal_optimizer.param_groups[0]["lr"],
           "dual_lr": trainer.primal_dual.dual.lr if trainer.primal_dual.dual else 0.0}
    for name, values in (("loss", result.layer_losses), ("lambda", result.multipliers),
                         ("slack", result.slacks), ("g", result.constraint_values)):
        row.update({f"{name}_{layer}": float(value) for layer, value in enumerate(values)})
    return row


class StepRecorder:
    """``trainer.run(on_step=recorder.on_step, on_epoch_end=recorder.on_epoch_end)`` records one run's training.

    ``started`` is the ``perf_counter`` time the run's wall clock counts from (earlier sessions of a resumed run
    included); ``stop`` is the preemption watcher (cutlab.run.preemption.stop_on_signals), None outside a run.
    """

    def __init__(self, run_dir: Path, trainer: Trainer, history: HistoryWriter, tracker, reporter: ProgressReporter,
                 clock: FeasibilityClock, epsilon: float | None, every_steps: int, started: float,
                 validate: Callable[[], float] | None = None, on_epoch_end: EpochEndHook | None = None,
                 selector: IterateSelector | None = None, check_every_steps: int = 0,
                 reference_at_target: bool = False) -> None:
        self.run_dir, self.trainer, self.history, self.tracker = run_dir, trainer, history, tracker
        self.reporter, self.clock, self.epsilon, self.every_steps = reporter, clock, epsilon, every_steps
        self.started, self.validate, self.hook = started, validate, on_epoch_end
        self.selector, self.check_every_steps = selector, check_every_steps  # eval.iterate=best
        self.stop = None
        self.reference_at_target = reference_at_target  # kept with epsilon: the verdict of a resumed run needs both

    def checkpoint(self) -> None:
        save_checkpoint(self.run_dir, {"trainer": self.trainer.state_dict(), "wandb_id": self.tracker.run_id,
                                       "epsilon": self.epsilon, "reference_at_target": self.reference_at_target,
                                       "record_version": RECORD_VERSION,
                                       "feasibility_clock": self.clock.state_dict(),
                                       "wall_time_s": time.perf_counter() - self.started,
                                       **({"iterate_selection": self.selector.state_dict()} if self.selector else {})})

    def on_step(self, progress: Progress, result: StepResult, seconds: float) -> None:
        row = history_row(progress, result, self.trainer, seconds)
        met, strictly = self.clock.update(progress.step, result.layer_losses,
                                          self.trainer.primal_dual.effective_slacks())
        row.update(constraints_met=int(met), constraints_met_strictly=int(strictly))
        self.history.write(row)
        self.tracker.log({k: v for k, v in row.items() if k != "step"}, step=progress.step)
        self.reporter.step(progress, result, seconds)
        if self.selector and progress.step % self.check_every_steps == 0 and self.candidate(progress):
            self.check_iterate(progress.step)
        stopping = self.stop is not None and self.stop.requested
        if progress.step % self.every_steps == 0 or stopping:
            self.checkpoint()
        if stopping:
            self._stop(progress.step)

    def stop_if_requested(self) -> None:
        """After the last step: a stop asked for during the last epoch's end (its checkpoint, a search's pruning
        validation) is kept, not lost to the evaluation that follows."""
        if self.stop is not None and self.stop.requested:
            self.checkpoint()
            self._stop(self.trainer.progress.step)

    def _stop(self, step: int) -> None:
        if self.stop.signal_name == "SIGINT":  # Ctrl-C: the user's stop, not to be requeued
            raise KeyboardInterrupt(f"stopped by Ctrl-C after step {step} (checkpoint saved)")
        # SLURM's time-limit/preemption signal: stop at a step boundary, checkpointed
        raise Preempted(f"stopped by {self.stop.signal_name} after step {step} (checkpoint saved)")

    def candidate(self, progress: Progress) -> bool:
        """Iterates of the primal-dual algorithm are candidates; those of the primal warm-up (lambda frozen at 0, the
        constraints not yet enforced) are not. Every ERM iterate is."""
        return not self.trainer.primal_dual.constrained or self.trainer.dual_active(progress.epoch)

    def check_iterate(self, step: int) -> None:
        """eval.iterate=best: validate the iterate after ``step`` (cutlab.core.iterate_selection; the checks reach
        summary.json, and W&B through it)."""
        self.selector.check(step, self.trainer.primal_dual.effective_slacks())

    def on_epoch_end(self, progress: Progress) -> None:
        self.checkpoint()
        if self.hook:
            self.hook(progress.epoch, self.validate)
