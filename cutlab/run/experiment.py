"""One run: build the task, train (resuming if a checkpoint exists), evaluate, and write the run record."""

from __future__ import annotations

import json
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from cutlab.atomic import FOLDER_FAILURES
from cutlab.config.checks import check_config
from cutlab.config.naming import check_run_folder_name
from cutlab.config.paths import with_absolute_root
from cutlab.core.evaluation import Evaluation, buffers_kept
from cutlab.core.feasibility_clock import FeasibilityClock
from cutlab.core.iterate_selection import IterateSelector
from cutlab.core.out_of_memory import settings_named_on_out_of_memory
from cutlab.core.precision import check_precision, configure_matmul
from cutlab.core.primal_dual import DualSettings
from cutlab.core.training import Trainer
from cutlab.errors import CutlabError
from cutlab.interrupted import interrupt_behind
from cutlab.run.build import (Evaluator, build_trainer, check_before_building,
                              constraints_of, perturbation_of, make_reproducible, pick_device, precision_of,
                              recorded_reference, reference_of, reference_samples)
from cutlab.run.checkpoints import load_checkpoint, mismatch_reason
from cutlab.run.identity import check_same_data, check_same_model_source, check_same_run, data_fingerprint
from cutlab.run.lock import RunLock
from cutlab.run.preemption import stop_now_on_signals, stop_on_signals
from cutlab.run.progress import ProgressReporter, announce_start, evaluation_progress, print_line, shown_path
from cutlab.run.provenance import provenance
from cutlab.run.recorder import EpochEndHook, StepRecorder
from cutlab.run.records import (
    CHECKPOINT, CONFIG, HISTORY, MODEL_SOURCE, PROVENANCE, RECORD_VERSION, RUN_UID, SUMMARY, HistoryWriter,
    SkippedSummary,
    linked, read_mapping, read_summary, write_atomic, write_json,
)
from cutlab.run.results import evaluate_and_write, validation_grid
from cutlab.run.tracking import ServiceStart, Tracker
from cutlab.tasks import Task, build_task
from cutlab.tasks.models import model_source

class StopRun(Exception):
    """Raised by an ``on_epoch_end`` hook to end a run early; the run is recorded with ``status``.

    A search's pruner uses it (status "pruned"): the checkpoint of the last epoch is kept.
    """

    def __init__(self, status: str, reason: str = "") -> None:
        super().__init__(reason or status)
        self.status = status


def run_experiment(cfg: DictConfig, run_dir: Path, on_epoch_end: EpochEndHook | None = None) -> dict:
    """Train and evaluate ``cfg`` in ``run_dir``; a complete record is returned as is, a partial one resumed.

    The folder is locked for this process from the first read to the last write (cutlab.run.lock)."""
    try:
        return _run_experiment(cfg, run_dir, on_epoch_end)
    except Exception as error:
        stop = interrupt_behind(error)  # a Ctrl-C or stop signal OmegaConf turned into its own error
        if stop is None:
            raise
        raise stop from None


def _run_experiment(cfg: DictConfig, run_dir: Path, on_epoch_end: EpochEndHook | None) -> dict:
    check_config(cfg)
    check_before_building(cfg)  # a model's own refusals, before the run is announced (not after its data are made)
    # an unknown or absent device, or a precision the device cannot run, stops here, before anything is written
    check_precision(precision_of(cfg), pick_device(cfg.device))
    check_run_folder_name(run_dir, cfg)
    # the record names the data wherever the run is resumed from (a relative root read from this folder)
    resolved = with_absolute_root(OmegaConf.to_container(cfg, resolve=True))
    with RunLock(run_dir):
        check_same_run(run_dir, resolved)
        existing = read_summary(run_dir, resumable=True)
        if existing and existing.get("status") == "complete":
            # stderr, as every other line of a run (Hydra's job logging wrote this one to stdout)
            print_line(f"{shown_path(run_dir)} is complete; skipped (pass run_name=<new name> to train it again)")
            return SkippedSummary(existing)
        if cfg.train.constrained:  # about to train: what the config checks leave to training time (old records pass)
            DualSettings.of(cfg.train).check_trainable()
        if cfg.wandb.mode != "disabled" and linked(run_dir / "wandb"):  # W&B would write its files at the target
            raise CutlabError(f"{linked(run_dir / 'wandb')}: W&B writes only inside its run's folder; remove the link "
                              "and run the same command again (or log nothing: wandb.mode=disabled)")
        checkpoint = load_checkpoint(run_dir)
        if checkpoint is not None:
            check_same_data(run_dir, resolved)
            check_same_model_source(run_dir, str(cfg.model._target_))
        announce_start(run_dir, checkpoint is not None, cfg.wandb.mode)
        wandb_service = ServiceStart(cfg.wandb.mode, run_dir)  # starts while the task is built; the Tracker waits
        # one block from the set-up to the end of the evaluation, closed by _train_and_record before the complete
        # record is written: between two blocks SIGTERM killed the run as its W&B run started, and a signal
        # re-posted there (cutlab.interrupted) was dropped
        with ExitStack() as stop_now:
            stop_now.enter_context(stop_now_on_signals())
            try:
                task, trainer, reference = _prepare(cfg, run_dir, checkpoint, resolved)
            except BaseException:
                wandb_service.abandon()
                raise
            return _train_and_record(cfg, run_dir, task, trainer, checkpoint, resolved, reference, on_epoch_end,
                                     wandb_service, stop_now)


def _iterate_selector(cfg: DictConfig, task: Task, trainer: Trainer, evaluator: Evaluator, constraints,
                      checkpoint: dict | None) -> IterateSelector | None:
    """eval.iterate=best: the selector of the best validation iterate (cutlab.core.iterate_selection), resumed."""
    if cfg.eval.iterate != "best":
        return None
    selector = IterateSelector(task.model, constraints if trainer.primal_dual.constrained else None,
                               cfg.eval.feasibility_tol, lambda: _validation(evaluator, task, cfg).mean_loss[0])
    if checkpoint and "iterate_selection" in checkpoint:
        selector.load_state_dict(checkpoint["iterate_selection"])
    return selector


def _validation(evaluator: Evaluator, task: Task, cfg: DictConfig) -> Evaluation:
    """The validation split at gamma_train: an iterate's check (eval.iterate=best) or a search's pruning metric,
    with the noise the final evaluation draws there (its verdict judges the same iterate on the same noise). It
    runs inside the training loop, whose failed allocations name train.batch_size, yet its batches are
    eval.batch_size."""
    gamma = float(cfg.gamma)
    with settings_named_on_out_of_memory("a validation check", "eval.batch_size"):
        return evaluator(task.val_set, [gamma], streams=[validation_grid(cfg).index(gamma)])


def _prepare(cfg: DictConfig, run_dir: Path, checkpoint: dict | None, resolved: dict) -> tuple[Task, Trainer, tuple]:
    """The task, the trainer (resumed from ``checkpoint`` if any) and (epsilon, whether Phi_0 is at the target:
    cutlab.run.build.reference_of); a fresh run's folder gets its config."""
    device = pick_device(cfg.device)
    make_reproducible(device)
    configure_matmul(precision_of(cfg))
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)  # oversubscribed cores slow small ops by up to 20x (benchmarks/)
    torch.manual_seed(cfg.seed)
    task = build_task(cfg)
    task.model.to(device)
    if checkpoint:
        reference = recorded_reference(checkpoint)
    else:  # train.epsilon=auto evaluates the untrained model: minutes for a large one, so it shows its progress
        reference = reference_of(cfg, task, device,
                                 progress=lambda label, about: evaluation_progress(label, bool(cfg.progress), about))
        if cfg.train.epsilon == "auto":
            print_line(f"train.epsilon=auto: epsilon = {reference[0]:.4g}, l_0 of the untrained model on the first "
                       f"{reference_samples(cfg, task)} training samples at gamma_train {float(cfg.gamma):g}")
    trainer = build_trainer(cfg, task, reference[0], device, reference_at_target=reference[1])
    unused = trainer.primal_dual.dual.unused() if trainer.primal_dual.dual is not None else []
    if unused:
        print_line(f"this run ignores {', '.join(unused)}")
    train = cfg.train
    if train.constrained and train.warmup_epochs >= train.epochs:  # the primal warm-up holds lambda at 0 (App. B.2)
        print_line(f"train.warmup_epochs={train.warmup_epochs} covers all train.epochs={train.epochs}: the multipliers "
                   "stay 0, so this constrained run trains l_L alone; set train.warmup_epochs=0 or more epochs")
    if checkpoint:
        try:
            trainer.load_state_dict(checkpoint["trainer"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:  # a checkpoint of another model or config
            raise CutlabError(f"the checkpoint {run_dir / CHECKPOINT} does not fit this run's configuration "
                              f"({mismatch_reason(error)}); move it aside to restart this run from scratch") from None
        print_line(f"resuming {shown_path(run_dir)} from step {trainer.progress.step} (epoch {trainer.progress.epoch})")
        _record_resumption(run_dir, trainer.progress.step, cfg.seed, device)
    else:
        write_atomic(run_dir / CONFIG, OmegaConf.to_yaml(resolved))
        write_json(run_dir / PROVENANCE, {**provenance(cfg.seed, device), RUN_UID: uuid.uuid4().hex,
                                          "data_files": data_fingerprint(resolved),
                                          MODEL_SOURCE: model_source(str(cfg.model._target_))})
    return task, trainer, reference


def _record_resumption(run_dir: Path, step: int, seed: int, device: torch.device) -> None:
    """Add this session's machine to provenance.json's ``resumed`` list: threads, processor and kernels are left out
    of a run's identity (cutlab.config.neutral), yet change its float rounding, so a run resumed elsewhere says so."""
    record = read_mapping(run_dir / PROVENANCE, json.loads, (json.JSONDecodeError,), "run provenance") or {}
    session = {"at_step": step, **{key: value for key, value in provenance(seed, device).items() if key != "seed"}}
    earlier = record.get("resumed")
    write_json(run_dir / PROVENANCE, {**record, "resumed": [*(earlier if isinstance(earlier, list) else []), session]})


def _train_and_record(cfg: DictConfig, run_dir: Path, task: Task, trainer: Trainer, checkpoint: dict | None,
                      resolved: dict, reference: tuple, on_epoch_end: EpochEndHook | None,
                      wandb_service: ServiceStart, stop_now: ExitStack) -> dict:
    """Train, evaluate and write the run record; ``stop_now`` holds stop_now_on_signals from the run's set-up on, and
    is closed once the evaluation ends: a stop after it would record a complete run as interrupted."""
    epsilon, at_target = reference
    # first: a history that lost rows of the checkpoint's steps stops the resume before any record file is written
    history = HistoryWriter(run_dir / HISTORY, cfg.L + 1, trainer.progress.step if checkpoint else 0)
    try:
        tracker = Tracker(
            cfg.wandb.mode, run_dir, run_dir.name, resolved, cfg.wandb.project, cfg.wandb.entity, cfg.wandb.group,
            cfg.wandb.tags, run_id=checkpoint.get("wandb_id") if checkpoint else None, service=wandb_service,
            start_step=trainer.progress.step if checkpoint else 0,
        )
    except BaseException:  # W&B refused the run (online without a key): nothing trained, the same command resumes
        history.close()
        raise
    summary = {"record_version": RECORD_VERSION, "status": "running", "wandb_id": tracker.run_id,
               "wandb_mode": cfg.wandb.mode, "data_source": task.source, "sigma_x": task.sigma,
               "epsilon": epsilon, "reference_at_target": at_target}
    write_json(run_dir / SUMMARY, summary)
    tracker.summarize(summary)  # W&B mirrors summary.json at every write (analysis.wandb_source reads it back)
    constraints = constraints_of(cfg, epsilon, at_target)
    clock = FeasibilityClock(constraints, cfg.eval.feasibility_tol)
    if checkpoint and "feasibility_clock" in checkpoint:
        clock.load_state_dict(checkpoint["feasibility_clock"])
    # wall time accumulates over resumptions: the checkpoint carries what earlier sessions spent
    started = time.perf_counter() - (checkpoint.get("wall_time_s", 0.0) if checkpoint else 0.0)
    reporter = ProgressReporter(enabled=cfg.progress, total_steps=trainer.steps_per_epoch() * cfg.train.epochs,
                                epochs=cfg.train.epochs, initial_step=trainer.progress.step)
    evaluator = Evaluator(task, perturbation_of(cfg, task), cfg.eval.batch_size, trainer.device, trainer.precision)

    def validate() -> float:  # the last layer's validation metric at gamma_train (a search's pruner reads it)
        with buffers_kept(task.model):  # validating must not change the training that follows
            return float(_validation(evaluator, task, cfg).metric[0, cfg.L])

    selector = _iterate_selector(cfg, task, trainer, evaluator, constraints, checkpoint)
    recorder = StepRecorder(run_dir, trainer, history, tracker, reporter, clock, epsilon, cfg.checkpoint.every_steps,
                            started, validate, on_epoch_end, selector, cfg.eval.check_every_steps, at_target)
    try:
        with stop_now:  # set-up and evaluation stop at once, the loop at its next step (inside)
            with stop_on_signals() as recorder.stop:
                with settings_named_on_out_of_memory("a training step", "train.batch_size (or L)"):
                    trainer.run(on_step=recorder.on_step, on_epoch_end=recorder.on_epoch_end)
                recorder.stop_if_requested()
            history.close()
            slacks = trainer.primal_dual.effective_slacks()
            if selector:  # the last iterate is a candidate too; then the best one is what gets evaluated
                if not selector.checked(trainer.progress.step):  # not on the check cadence: check it, and checkpoint
                    recorder.check_iterate(trainer.progress.step)  # the final choice (cutlab-eval loads it)
                    recorder.checkpoint()
                selector.restore_best()
                slacks = selector.best_slacks
                summary.update(iterate=selector.summary(cfg.eval.check_every_steps))
            else:
                summary.update(iterate={"mode": "last"})
            with settings_named_on_out_of_memory("the evaluation", "eval.batch_size"):
                summary.update(evaluate_and_write(cfg, run_dir, evaluator, trainer.primal_dual, tracker, reporter,
                                                  constraints, slacks))
        # time to feasibility: the first step of the met streak that lasted to the end (None: never reached)
        summary.update(steps_to_feasibility=clock.since, steps_to_strict_feasibility=clock.strictly_since)
        summary.update(status="complete", steps=trainer.progress.step, epochs=trainer.progress.epoch,
                       wall_time_s=time.perf_counter() - started)
        write_json(run_dir / SUMMARY, summary)
        tracker.summarize(summary)
        url = tracker.url
        tracker.finish()
        reporter.done(run_dir, summary, url)
        return summary
    except BaseException as error:
        history.close()
        # an interrupted run resumes from its last checkpoint when the same command runs again
        stopped = isinstance(error, (KeyboardInterrupt, SystemExit))
        status = error.status if isinstance(error, StopRun) else "interrupted" if stopped else "failed"
        summary.update(status=status, error=f"{type(error).__name__}: {error}", steps=trainer.progress.step)
        try:
            write_json(run_dir / SUMMARY, summary)
        except FOLDER_FAILURES:
            if not isinstance(error, FOLDER_FAILURES):
                raise
            # the folder that stopped the run (full, read-only, gone) takes no summary either: the first error says why
        tracker.summarize(summary)
        tracker.finish(failed=not isinstance(error, StopRun))
        reporter.stopped(run_dir, status)
        raise
