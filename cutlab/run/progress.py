"""What a run says on stderr: where its record goes (at the start) and what to do with it (at the end), its
training and evaluation progress (cutlab.core.progress: a bar on a terminal, plain lines in logs) and, last, its
verdict."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Callable

from cutlab.core.primal_dual import StepResult
from cutlab.core.progress import Meter, counted, duration, print_line
from cutlab.core.training import Progress
from cutlab.run.records import CHECKPOINT


def shown_path(path: Path) -> str:
    """A path as a person would type it here: relative to the working folder when inside it, shell-quoted, and
    ``./`` before a leading '-' (``cutlab-analysis -lead2/run`` reads it as options)."""
    path = Path(path).resolve()
    try:
        text = str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        text = str(path)
    return shlex.quote(f".{os.sep}{text}" if text.startswith("-") else text)


def offline_folders(run_dir: Path, wandb_id: str | None = None) -> list[Path]:
    """W&B's offline folders of this run (``<run>/wandb/offline-run-<time>-<id>``): one per session, so a resumed
    run has several and ``wandb sync`` takes them all; with ``wandb_id``, that W&B run's alone (a run killed before
    its first checkpoint starts again under a new id, its first session's folder left behind)."""
    return sorted((run_dir / "wandb").glob(f"offline-run-*-{wandb_id}" if wandb_id else "offline-run-*"))


def next_commands(run_dir: Path, wandb_mode: str, wandb_url: str | None = None,
                  wandb_id: str | None = None) -> list[str]:
    """The commands that pick up a finished record: the report, evaluation on other data, and the upload of an
    offline W&B run (or the online run's page)."""
    folder = shown_path(run_dir)
    lines = [f"report:      cutlab-analysis {folder} --out {shown_path(run_dir / 'report')}",
             f"other data:  cutlab-eval {folder} data=NAME"]
    offline = offline_folders(run_dir, wandb_id)
    if wandb_mode == "offline" and offline:
        every = f"{folder}/wandb/offline-run-*" + (f"-{wandb_id}" if wandb_id else "")
        target = shown_path(offline[0]) if len(offline) == 1 else every
        lines.append(f"upload W&B:  wandb sync {target}")
    if wandb_url:
        lines.append(f"W&B page:    {wandb_url}")
    return lines


def announce_start(run_dir: Path, resuming: bool, wandb_mode: str) -> None:
    """The first thing a run says: where its record goes (before the data are prepared, which can take minutes)."""
    how = "resuming from its checkpoint" if resuming else "starting"
    print_line(f"run {how}; record in {shown_path(run_dir)}{os.sep} (W&B {wandb_mode})")


def evaluation_progress(label: str, enabled: bool = True, about: str = "",
                        then: tuple[str, int] | None = None) -> Callable[[int, int], None]:
    """A callback ``(batches done, of total)`` for one evaluation pass (cutlab.core.evaluation.evaluate calls it with
    0 first): a line as the pass starts, ``LABEL: N batches, ABOUT``, then the meter's, whose elapsed time counts from
    that start and whose rate leaves out the first batch (its one-off costs: the first batch's data and kernels).
    ``then``: (what, batches) of the pass that follows, named at the start and, with the time it takes at this
    pass's rate, in each line: each meter's time left is its own pass's."""
    meter: Meter | None = None
    after = f"; then {then[0]}: {counted(then[1], 'batch')}" if then else ""

    def following() -> str:
        rate = meter.rate if meter is not None else None
        return f"then {then[0]}: {counted(then[1], 'batch')}" + (f", about {duration(then[1] / rate)} at this rate"
                                                                  if rate else "")

    def report(done: int, total: int) -> None:
        nonlocal meter
        if not enabled:
            return
        if meter is None:
            meter = Meter(label, total, "batch", warmup=1 if done == 0 else 0, initial=done)
            meter.write(f"{label}: {counted(total, 'batch')}{', ' + about if about else ''}{after}")
        meter.update(done, following if then else "")
        if done >= total:
            meter.close()
    return report


class ProgressReporter:
    """The run's voice; ``enabled`` (the config's ``progress``) switches the step and evaluation progress only:
    the record's folder and the verdict are always said."""

    def __init__(self, enabled: bool, total_steps: int, epochs: int, initial_step: int = 0) -> None:
        self.enabled, self.total_steps, self.epochs, self.initial_step = enabled, total_steps, epochs, initial_step
        self.meter = Meter("train", total_steps, "step", initial=initial_step) if enabled else None

    def step(self, progress: Progress, result: StepResult, seconds: float) -> None:
        if self.meter is None:
            return
        short = self.meter.bar is not None  # one terminal line: the last layer's loss; a log line has room for all
        epoch = f"epoch {progress.epoch + 1}/{self.epochs}"  # now: the trainer moves ``progress`` on

        def note() -> str:  # made only when a line is written or the bar drawn (cutlab.core.progress.Note);
            # the step's tensors are its own copies (StepResult), so a later note reads this step's values
            losses, lam = result.layer_losses.tolist(), float(result.multipliers.max())
            if short:
                return f"{epoch}, loss {losses[-1]:.3g}, max lambda {lam:.3g}"
            return f"{epoch}, layer losses [{' '.join(f'{v:.3g}' for v in losses)}], max lambda {lam:.3g}"
        self.meter.update(progress.step, note)

    def evaluating(self, split: str, about: str = "", then: tuple[str, int] | None = None):
        """A callback ``(batches done, of total)`` for the evaluation of ``split`` (evaluation_progress)."""
        self.close()
        return evaluation_progress(f"evaluating {split}", self.enabled, about, then)

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()
            self.meter = None

    def stopped(self, run_dir: Path, status: str) -> None:
        self.close()
        how, again = status, ""
        if status == "interrupted":  # stopped before its first checkpoint (as W&B started, say): nothing to resume
            resumes = (run_dir / CHECKPOINT).exists()
            how += "" if resumes else " before its first checkpoint"
            again = " (the same command resumes it from its last checkpoint)" if resumes else \
                " (the same command starts it again)"
        print_line(f"run {how}; record in {shown_path(run_dir)}{os.sep}{again}")

    def done(self, run_dir: Path, summary: dict, wandb_url: str | None = None) -> None:
        """The record's folder and the next commands, then the verdict: the run's last line."""
        self.close()
        print_line(f"run complete; record in {shown_path(run_dir)}{os.sep}")
        for line in next_commands(run_dir, summary.get("wandb_mode", "disabled"), wandb_url, summary.get("wandb_id")):
            print_line(f"  {line}")
        if summary["verdict"] == "infeasible" and summary["feasibility"].get("last_layer_bound") is not None:
            print_line(chain_note(summary["feasibility"]))
        ind = summary["in_distribution"]
        losses = " > ".join(f"{v:.4g}" for v in ind["test_layer_loss"]) if ind["strictly_decreasing"] else \
            ", ".join(f"{v:.4g}" for v in ind["test_layer_loss"]) + " (not decreasing)"
        print_line(f"done: test mean {summary['metric']} over gamma_test {summary['test_mean_metric']:.3f}, "
                   f"verdict {summary['verdict']}; test loss by layer at gamma_test={ind['gamma']:g}: {losses}")


def chain_note(feasibility: dict) -> str:
    """Why an infeasible run missed: short of the total descent the constraints ask, or some layers out of step."""
    reached, bound = feasibility["last_layer_loss"], feasibility["last_layer_bound"]
    violated = feasibility["violated_layers"]
    layers = f"layer{'s' if len(violated) != 1 else ''} {', '.join(str(layer) for layer in violated)}"
    where = (f"infeasible at {layers}: validation l_L is {reached:.4g}, and the constraints together allow at "
             f"most epsilon (1 - alpha)^L = {bound:.4g}")
    if reached > bound:
        return f"{where}, so more total descent is needed over the L layers"
    return f"{where}, so the total descent is there and those layers miss their own step"
