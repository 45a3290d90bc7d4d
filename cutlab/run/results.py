"""A trained run's evaluation and record: validation and test over the gamma_test grid, eval.csv, the verdict and
the summary's headline numbers (what the objective declares: cutlab.core.objectives)."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from cutlab.core.evaluation import Evaluation, batch_count, feasibility_verdict
from cutlab.core.constraints import Constraints
from cutlab.core.primal_dual import PrimalDual
from cutlab.core.progress import counted
from cutlab.run.build import Evaluator
from cutlab.run.progress import ProgressReporter
from cutlab.run.records import evaluation_rows, write_evaluation, write_sample_losses


def validation_grid(cfg: DictConfig) -> list[float]:
    """The gammas of the final evaluation: the grid for model selection, plus gamma_train for the feasibility verdict
    where the grid lacks it. A check at gamma_train during training draws that gamma's noise stream from here."""
    grid = [float(g) for g in cfg.eval.gamma_test]
    return grid + ([float(cfg.gamma)] if float(cfg.gamma) not in grid else [])


def evaluate_and_write(cfg: DictConfig, run_dir: Path, evaluator: Evaluator, primal_dual: PrimalDual, tracker,
                       reporter: ProgressReporter, constraints: Constraints, slacks: torch.Tensor) -> dict:
    """Evaluate on validation and test, write eval.csv and sample_losses, and return the summary's results.

    ``slacks``: the resilience slack of the evaluated iterate's multipliers (PrimalDual.effective_slacks)."""
    task = evaluator.task
    grid = [float(g) for g in cfg.eval.gamma_test]
    gamma = float(cfg.gamma)
    val_grid = validation_grid(cfg)
    each = f"each at {counted(len(val_grid), 'gamma')}"
    # the test pass follows: named as validation starts, with its time at validation's rate (the same batches)
    validation = evaluator(task.val_set, val_grid, progress=reporter.evaluating(
        "validation", each, then=("test", batch_count(len(task.test_set), evaluator.batch_size))))
    # test: the grid (Table 3/4's numbers), plus gamma_train for the in-distribution check of descent; that extra
    # point stays out of eval.csv so that means over the grid are the grid's
    test = evaluator(task.test_set, val_grid, progress=reporter.evaluating("test", each))
    at = val_grid.index(gamma)
    in_distribution = descent_in_distribution(test, at, constraints)
    # the same verdict on test: the validation one may have chosen the iterate (eval.iterate=best), this one did not
    on_test = feasibility_verdict(test.mean_loss[at], constraints, slacks, cfg.eval.feasibility_tol,
                                  primal_dual.constrained, test.sample_losses[at], test.sample_groups)
    in_distribution.update(test_verdict=on_test.status, test_relative_violations=on_test.relative_violations,
                           test_violation_interval=on_test.violation_interval)
    test = test.restricted(len(grid))
    rows = evaluation_rows("val", validation) + evaluation_rows("test", test)
    write_evaluation(run_dir, rows)
    write_sample_losses(run_dir, test)
    tracker.log_evaluation(rows)  # the table, scalars per gamma_test and a line plot
    verdict = feasibility_verdict(validation.mean_loss[at], constraints, slacks, cfg.eval.feasibility_tol,
                                  primal_dual.constrained, validation.sample_losses[at],
                                  validation.sample_groups)
    return {**_headline(task.objective, validation, test, grid, verdict), "in_distribution": in_distribution}


def descent_in_distribution(test: Evaluation, index: int, constraints: Constraints) -> dict:
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


def _headline(objective, validation: Evaluation, test: Evaluation, grid: list[float], verdict) -> dict:
    last = test.metric.shape[1] - 1
    layer_means = test.mean_loss.mean(dim=0)
    headline = objective.headline(test.metric[:, last], grid)  # Table 3's mean over the grid; Table 4's AUC
    return {
        "metric": test.metric_name,
        "selection_mode": objective.selection_mode(),
        "test_mean_metric": headline.pop("test_mean_metric"),
        "test_metric_by_gamma": {str(g): float(test.metric[i, last]) for i, g in enumerate(grid)},
        "selection_metric": float(validation.metric[: len(grid), last].mean()),
        "test_layer_loss_mean_over_gamma": [float(v) for v in layer_means],
        "descends_in_mean": bool((layer_means[1:] < layer_means[:-1]).all()),
        "ratio_stats_by_gamma": {str(g): test.ratio_stats(i) for i, g in enumerate(grid)},
        **headline,
        "verdict": verdict.status,
        "feasibility": verdict.as_dict(),
    }
