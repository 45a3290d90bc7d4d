"""One run: build the task, train (resuming if a checkpoint exists), evaluate, and write the run record."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from cutlab.checkpoints import load_checkpoint, save_checkpoint
from cutlab.config_check import check_config
from cutlab.core.evaluation import Evaluation, evaluate, feasibility_verdict
from cutlab.core.feasibility_clock import FeasibilityClock
from cutlab.core.primal_dual import Constraints, DualSettings, PrimalDual, StepResult
from cutlab.core.training import Progress, Schedule, Trainer
from cutlab.errors import CutlabError
from cutlab.launch.preemption import Preempted, stop_on_signals
from cutlab.provenance import provenance
from cutlab.records import (
    CHECKPOINT, CONFIG, HISTORY, PROVENANCE, RECORD_VERSION, SUMMARY, HistoryWriter, evaluation_rows, read_summary,
    write_atomic, write_evaluation, write_json, write_sample_losses,
)
from cutlab.run_identity import check_same_run
from cutlab.run_lock import RunLock
from cutlab.run_naming import check_run_folder_name
from cutlab.tracking import ServiceStart, Tracker
from cutlab.tasks import Task, build_task, pick_device

log = logging.getLogger("cutlab")

# An initial l_0 below this fraction of the largest initial layer loss is float round-off of an identity Phi_0
NUMERICAL_ZERO = 1e-6

# ``on_epoch_end(epoch, validate)``: called after each epoch's checkpoint; ``validate()`` returns the last
# layer's validation metric at gamma_train (one pass over the validation set, only when called).
EpochEndHook = Callable[[int, Callable[[], float]], None]


class StopRun(Exception):
    """Raised by an ``on_epoch_end`` hook to end a run early; the run is recorded with ``status``.

    A search's pruner uses it (status "pruned"): the checkpoint of the last epoch is kept.
    """

    def __init__(self, status: str, reason: str = "") -> None:
        super().__init__(reason or status)
        self.status = status


def reference_epsilon(cfg: DictConfig, task: Task, device: torch.device, batches: int = 8) -> float | None:
    """``train.epsilon``, or with ``auto`` the mean l_0 of the untrained model on the first training windows.

    ``auto`` reads the reference constraint l_0 <= epsilon as "Phi_0 may not get worse than at
    initialisation": the paper's epsilon (6.5 for DUST) is in its own, unstated loss units.
    """
    if cfg.train.epsilon != "auto":
        return cfg.train.epsilon
    count = min(len(task.train_set), batches * cfg.train.batch_size)
    first = torch.utils.data.Subset(task.train_set, range(count))
    initial = evaluate(task.model, task.objective, first, task.prepare, [float(cfg.gamma)], task.sigma,
                       cfg.noise_mean, cfg.seed, cfg.train.batch_size, device)
    epsilon = float(initial.mean_loss[0, 0])
    largest = float(initial.mean_loss[0].max())
    if cfg.train.constrained and cfg.train.constraint_form != "difference" and epsilon <= NUMERICAL_ZERO * largest:
        raise CutlabError(
            f"train.epsilon=auto is l_0 of the untrained model, {epsilon:.3g}: Phi_0 already equals the target (no "
            f"noise, gamma={cfg.gamma}, and a model whose Phi_0 is its input), so nothing can descend from it and "
            f"train.constraint_form={cfg.train.constraint_form} would divide by it; use gamma > 0, a number for "
            "train.epsilon, or train.constraint_form=difference")
    return epsilon


def constraints_of(cfg: DictConfig, epsilon: float | None) -> Constraints:
    """The run's constraints; ERM gets them too (its verdict and time to feasibility are recorded for comparison)."""
    return Constraints(alpha=cfg.train.alpha, epsilon=epsilon, detach_prev=cfg.train.detach_prev,
                       form=cfg.train.get("constraint_form", "difference"))


def build_primal_dual(cfg: DictConfig, model: torch.nn.Module, epsilon: float | None) -> PrimalDual:
    train = cfg.train
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(parameters, lr=train.lr)
    constraints = dual = None
    if train.constrained:
        constraints = constraints_of(cfg, epsilon)
        dual = DualSettings(
            lr=train.dual_lr, resilience=train.resilience, resilience_c=train.resilience_c, slack_lr=train.slack_lr,
            cadence=train.dual_cadence, resilience_restarts=train.resilience_restarts,
            optimizer=train.dual_optimizer, kappa_p=train.kappa_p, kappa_i=train.kappa_i, nu=train.nu,
            update=train.dual_update, dual_restarts=train.dual_restarts,
        )
    return PrimalDual(parameters, optimizer, cfg.L + 1, constraints, dual, train.grad_clip)


def run_experiment(cfg: DictConfig, run_dir: Path, on_epoch_end: EpochEndHook | None = None) -> dict:
    """Train and evaluate ``cfg`` in ``run_dir``; a complete record is returned as is, a partial one resumed.

    The folder is locked for this process from the first read to the last write (cutlab.run_lock)."""
    check_config(cfg)
    pick_device(cfg.device)  # an unknown or absent device stops here, before anything is written
    check_run_folder_name(run_dir, cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    with RunLock(run_dir):
        check_same_run(run_dir, resolved)
        existing = read_summary(run_dir)
        if existing and existing.get("status") == "complete":
            log.info("%s is complete; skipped (pass run_name=<new name> to train it again)", run_dir)
            return existing
        checkpoint = load_checkpoint(run_dir)
        wandb_service = ServiceStart(cfg.wandb.mode, run_dir)  # starts while the task is built; the Tracker waits
        try:
            task, trainer, epsilon = _prepare(cfg, run_dir, checkpoint, resolved)
        except BaseException:
            wandb_service.abandon()
            raise
        return _train_and_record(cfg, run_dir, task, trainer, checkpoint, resolved, epsilon, on_epoch_end,
                                 wandb_service)


def _prepare(cfg: DictConfig, run_dir: Path, checkpoint: dict | None, resolved: dict) -> tuple[Task, Trainer, float | None]:
    """The task, the trainer (resumed from ``checkpoint`` if any) and epsilon; a fresh run's folder gets its config."""
    device = pick_device(cfg.device)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)  # oversubscribed cores slow small ops by up to 20x (benchmarks/)
    torch.manual_seed(cfg.seed)
    task = build_task(cfg)
    task.model.to(device)
    epsilon = checkpoint["epsilon"] if checkpoint else reference_epsilon(cfg, task, device)
    trainer = Trainer(
        task.model, task.objective, build_primal_dual(cfg, task.model, epsilon), task.train_set,
        Schedule(cfg.train.epochs, cfg.train.batch_size, cfg.train.warmup_epochs, cfg.train.max_steps_per_epoch),
        task.prepare, cfg.gamma, task.sigma, cfg.noise_mean, cfg.seed, device,
    )
    if checkpoint:
        try:
            trainer.load_state_dict(checkpoint["trainer"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:  # a checkpoint of another model or config
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CutlabError(f"the checkpoint {run_dir / CHECKPOINT} does not fit this run's configuration "
                              f"({type(error).__name__}: {reason[:200]}); move it aside to restart this run from "
                              "scratch") from None
        log.info("resuming %s from step %d (epoch %d)", run_dir, trainer.progress.step, trainer.progress.epoch)
    else:
        write_atomic(run_dir / CONFIG, OmegaConf.to_yaml(resolved))
        write_json(run_dir / PROVENANCE, provenance(cfg.seed, device))
    return task, trainer, epsilon


def _train_and_record(cfg, run_dir: Path, task: Task, trainer: Trainer, checkpoint: dict | None, resolved: dict,
                      epsilon: float | None, on_epoch_end: EpochEndHook | None = None,
                      wandb_service: ServiceStart | None = None) -> dict:
    layers = cfg.L + 1
    tracker = Tracker(
        cfg.wandb.mode, run_dir, run_dir.name, resolved, cfg.wandb.project, cfg.wandb.entity, cfg.wandb.group,
        cfg.wandb.tags, run_id=checkpoint.get("wandb_id") if checkpoint else None, service=wandb_service,
    )
    summary = {"record_version": RECORD_VERSION, "status": "running", "wandb_id": tracker.run_id,
               "wandb_mode": cfg.wandb.mode, "data_source": task.source, "sigma_x": task.sigma,
               "epsilon": epsilon}
    write_json(run_dir / SUMMARY, summary)
    tracker.summarize(summary)  # W&B mirrors summary.json at every write (analysis.wandb_source reads it back)
    history = HistoryWriter(run_dir / HISTORY, layers, trainer.progress.step if checkpoint else 0)
    clock = FeasibilityClock(constraints_of(cfg, epsilon), cfg.eval.feasibility_tol)
    if checkpoint and "feasibility_clock" in checkpoint:
        clock.load_state_dict(checkpoint["feasibility_clock"])
    # wall time accumulates over resumptions: the checkpoint carries what earlier sessions spent
    started = time.perf_counter() - (checkpoint.get("wall_time_s", 0.0) if checkpoint else 0.0)
    total_steps = trainer.steps_per_epoch() * cfg.train.epochs
    reporter = _ProgressReporter(enabled=cfg.progress, total_steps=total_steps, epochs=cfg.train.epochs)

    def checkpoint_now() -> None:
        save_checkpoint(run_dir, {"trainer": trainer.state_dict(), "wandb_id": tracker.run_id,
                                  "epsilon": epsilon, "record_version": RECORD_VERSION,
                                  "feasibility_clock": clock.state_dict(),
                                  "wall_time_s": time.perf_counter() - started})

    def on_step(progress: Progress, result: StepResult, seconds: float) -> None:
        row = _history_row(progress, result, trainer, seconds)
        met, strictly = clock.update(progress.step, result.layer_losses, trainer.primal_dual.effective_slacks())
        row.update(constraints_met=int(met), constraints_met_strictly=int(strictly))
        history.write(row)
        tracker.log({k: v for k, v in row.items() if k != "step"}, step=progress.step)
        reporter.step(progress, result, seconds)
        if progress.step % cfg.checkpoint.every_steps == 0 or stop.requested:
            checkpoint_now()
        if stop.requested:  # SLURM's time-limit/preemption signal: stop at a step boundary, checkpointed
            raise Preempted(f"stopped by {stop.signal_name} after step {progress.step} (checkpoint saved)")

    def validate() -> float:
        val = evaluate(task.model, task.objective, task.val_set, task.prepare, [float(cfg.gamma)], task.sigma,
                       cfg.noise_mean, cfg.seed, cfg.eval.batch_size, trainer.device)
        return float(val.metric[0, layers - 1])

    def epoch_end(progress: Progress) -> None:
        checkpoint_now()
        if on_epoch_end:
            on_epoch_end(progress.epoch, validate)

    try:
        with stop_on_signals() as stop:
            trainer.run(on_step=on_step, on_epoch_end=epoch_end)
        history.close()
        summary.update(_evaluate_and_write(cfg, run_dir, task, trainer, tracker, reporter, epsilon))
        # time to feasibility: the first step of the met streak that lasted to the end (None: never reached)
        summary.update(steps_to_feasibility=clock.since, steps_to_strict_feasibility=clock.strictly_since)
        summary.update(status="complete", steps=trainer.progress.step, epochs=trainer.progress.epoch,
                       wall_time_s=time.perf_counter() - started)
        write_json(run_dir / SUMMARY, summary)
        tracker.summarize(summary)
        tracker.finish()
        reporter.done(summary)
        return summary
    except BaseException as error:
        history.close()
        # an interrupted run resumes from its last checkpoint when the same command runs again
        stopped = isinstance(error, (KeyboardInterrupt, SystemExit))
        status = error.status if isinstance(error, StopRun) else "interrupted" if stopped else "failed"
        summary.update(status=status, error=f"{type(error).__name__}: {error}", steps=trainer.progress.step)
        write_json(run_dir / SUMMARY, summary)
        tracker.summarize(summary)
        tracker.finish(failed=not isinstance(error, StopRun))
        raise


def _history_row(progress: Progress, result: StepResult, trainer: Trainer, seconds: float) -> dict:
    row = {"step": progress.step, "epoch": progress.epoch,
           "phase": "constrained" if trainer.primal_dual.constrained and trainer.dual_active(progress.epoch) else "primal",
           "lagrangian": result.lagrangian, "grad_norm": result.grad_norm, "step_time": seconds,
           "lr": trainer.primal_dual.primal_optimizer.param_groups[0]["lr"],
           "dual_lr": trainer.primal_dual.dual.lr if trainer.primal_dual.dual else 0.0}
    for name, values in (("loss", result.layer_losses), ("lambda", result.multipliers),
                         ("slack", result.slacks), ("g", result.constraint_values)):
        row.update({f"{name}_{layer}": float(value) for layer, value in enumerate(values)})
    return row


def _evaluate_and_write(cfg, run_dir: Path, task: Task, trainer: Trainer, tracker: Tracker, reporter,
                        epsilon: float | None) -> dict:
    grid = [float(g) for g in cfg.eval.gamma_test]
    common = dict(sigma=task.sigma, noise_mean=cfg.noise_mean, seed=cfg.seed, batch_size=cfg.eval.batch_size,
                  device=trainer.device)
    # validation: the grid for model selection, plus gamma_train for the feasibility verdict
    val_grid = grid + ([float(cfg.gamma)] if float(cfg.gamma) not in grid else [])
    validation = evaluate(task.model, task.objective, task.val_set, task.prepare, val_grid,
                          progress=reporter.evaluating("validation"), **common)
    # test: the grid (Table 3/4's numbers), plus gamma_train for the in-distribution check of descent; that extra
    # point stays out of eval.csv so that means over the grid are the grid's
    test = evaluate(task.model, task.objective, task.test_set, task.prepare, val_grid,
                    progress=reporter.evaluating("test"), **common)
    in_distribution = _in_distribution(test, val_grid.index(float(cfg.gamma)), constraints_of(cfg, epsilon))
    test = test.restricted(len(grid))
    rows = evaluation_rows("val", validation) + evaluation_rows("test", test)
    write_evaluation(run_dir, rows)
    write_sample_losses(run_dir, test)
    tracker.log_evaluation(rows)  # the table, scalars per gamma_test and a line plot
    verdict = feasibility_verdict(
        validation.mean_loss[val_grid.index(float(cfg.gamma))], constraints_of(cfg, epsilon),
        trainer.primal_dual.effective_slacks(), cfg.eval.feasibility_tol, trainer.primal_dual.constrained,
    )
    return {**_headline(validation, test, grid, verdict), "in_distribution": in_distribution}


def _in_distribution(test: Evaluation, index: int, constraints: Constraints) -> dict:
    """Test layer losses at gamma_test = gamma_train: does the model descend where it was trained, and the largest
    layer-to-layer ratio l_l / l_{l-1} (a middle layer inflated between two good ones shows here)."""
    losses = test.mean_loss[index]
    ratios = losses[1:] / losses[:-1].clamp_min(torch.finfo(losses.dtype).tiny)
    return {
        "gamma": test.gammas[index],
        "test_layer_loss": [float(v) for v in losses],
        "strictly_decreasing": bool((losses[1:] < losses[:-1]).all()),
        "meets_descent_factor": bool((constraints.relative_violations(losses)[1:] <= 0).all()),
        "max_layer_ratio": float(ratios.max()),
        "degenerate": bool((losses[:-1] <= 0).any()),  # a layer already reproduces the target: nothing to descend
        **test.ratio_stats(index),
    }


def _headline(validation: Evaluation, test: Evaluation, grid: list[float], verdict) -> dict:
    last = test.metric.shape[1] - 1
    layer_means = test.mean_loss.mean(dim=0)
    return {
        "metric": test.metric_name,
        "selection_mode": "min" if test.metric_name == "rmse" else "max",
        "test_mean_metric": float(test.metric[:, last].mean()),  # Table 3's number: mean over the gamma_test grid
        "test_metric_by_gamma": {str(g): float(test.metric[i, last]) for i, g in enumerate(grid)},
        "selection_metric": float(validation.metric[: len(grid), last].mean()),
        "test_layer_loss_mean_over_gamma": [float(v) for v in layer_means],
        "descends_in_mean": bool((layer_means[1:] < layer_means[:-1]).all()),
        "ratio_stats_by_gamma": {str(g): test.ratio_stats(i) for i, g in enumerate(grid)},
        **_accuracy_auc(test, grid),
        "verdict": verdict.status,
        "feasibility": verdict.as_dict(),
    }


def _accuracy_auc(test: Evaluation, grid: list[float]) -> dict:
    """Table 4's number: the area under accuracy(gamma_test) of the last layer, trapezoid, not normalised."""
    if test.metric_name != "accuracy":
        return {}
    last = test.metric[:, test.metric.shape[1] - 1]
    gammas = torch.tensor(grid, dtype=last.dtype)
    order = torch.argsort(gammas)
    return {"test_auc": float(torch.trapezoid(last[order], gammas[order])) if len(grid) > 1 else float("nan")}


class _ProgressReporter:
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
