"""The numbers one run contributes to the tables: columns from its summary.json, and the headline from its eval.csv."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from cutlab.core.constraints import chain_bound

# Records of older cutlab versions lack data.task in their config and some lack the metric in their summary: the
# task and direction are then inferred from the metric's name or the dataset's (new records never need these).
TASK_OF_METRIC = {"rmse": "video", "accuracy": "text", "token_accuracy": "instruction"}
DEFAULT_MODE = {"rmse": "min", "accuracy": "max", "token_accuracy": "max"}
TASK_OF_DATASET = {"synthetic": "video", "ucsd_ped1": "video", "ucsd_ped2": "video", "avenue": "video",
                   "shanghaitech": "video", "video_folder": "video", "imdb": "text", "mnli": "text",
                   "alpaca": "instruction"}


def _max_slack_used(feasibility: dict) -> float | None:
    """The largest relative violation among the layers that needed their slack (None: none did)."""
    layers = feasibility.get("slack_layers") or ()
    violations = feasibility.get("relative_violations") or ()
    used = [violations[layer] for layer in layers if isinstance(layer, int) and layer < len(violations)]
    return max(used) if used else None


def _max_descent_violation(feasibility: dict) -> float | None:
    """The largest relative violation among the descent constraints l = 1..L (slot 0 is l_0 <= epsilon)."""
    violations = feasibility.get("relative_violations") or ()
    return max(violations[1:]) if len(violations) > 1 else None


def largest_violation(violations, interval) -> tuple[float, list[float] | str] | None:
    """The active constraint with the largest relative violation and its sampling interval (Verdict.
    violation_interval) as [low, high], or, where the split had too few groups for one, what it had ("2 clips");
    None for a record written before intervals were measured."""
    if not violations or not isinstance(interval, dict) or not interval.get("layers"):
        return None
    if not interval["low"]:
        count, unit = interval["count"], interval["resampled"]
        return max(violations[layer] for layer in interval["layers"]), f"{count} {unit}{'s' * (count != 1)}"
    entries = zip(interval["layers"], interval["low"], interval["high"])
    return max(((violations[layer], [low, high]) for layer, low, high in entries), key=lambda pair: pair[0])


def summary_columns(summary: dict | None) -> dict[str, Any]:
    """The columns one run contributes from its summary.json (the verdict, time to feasibility, the headline)."""
    summary = summary or {}
    feasibility = summary.get("feasibility") or {}
    violated = feasibility.get("violated_layers")
    return {
        "status": summary.get("status", "missing") if summary else "missing",
        "record_version": summary.get("record_version"),
        "verdict": summary.get("verdict"),
        "violated_layers": tuple(violated) if violated else (),
        # a slack-feasible run meets its constraints only through its resilience slack: how much, relative to
        # each right-hand side (cutlab.core.evaluation.Verdict)
        "slack_layers": tuple(feasibility.get("slack_layers") or ()),
        "max_relative_slack_used": _max_slack_used(feasibility),
        # (l_l - rhs_l) / rhs_l with rhs_l = (1 - alpha) l_{l-1} in every form: the run's largest validation ratio
        # l_l / l_{l-1} is (1 - alpha)(1 + this), so the report can say which alpha the run would have met
        "max_descent_violation": _max_descent_violation(feasibility),
        # records written before time to feasibility was measured lack the keys: unknown, not "never"
        "has_time_to_feasibility": "steps_to_feasibility" in summary,
        "steps_to_feasibility": summary.get("steps_to_feasibility"),
        "steps_to_strict_feasibility": summary.get("steps_to_strict_feasibility"),
        "max_layer_ratio_id": (summary.get("in_distribution") or {}).get("max_layer_ratio"),
        "descends_id": (summary.get("in_distribution") or {}).get("strictly_decreasing"),
        # eval.iterate: which iterate was evaluated (best: the step validation chose), and the verdict on test
        "iterate": (summary.get("iterate") or {}).get("mode"),
        "selected_step": (summary.get("iterate") or {}).get("selected_step"),
        "test_verdict": (summary.get("in_distribution") or {}).get("test_verdict"),
        # the largest violation with its bootstrap interval over the held-out samples: is a miss beyond sampling?
        "val_largest_violation": largest_violation(feasibility.get("relative_violations"),
                                                   feasibility.get("violation_interval")),
        "test_largest_violation": largest_violation(
            (summary.get("in_distribution") or {}).get("test_relative_violations"),
            (summary.get("in_distribution") or {}).get("test_violation_interval")),
        "fraction_decreasing_id": (summary.get("in_distribution") or {}).get("fraction_decreasing"),
        "error": summary.get("error"),
        "metric": summary.get("metric"),
        "selection_mode": summary.get("selection_mode"),
        "selection_metric_summary": summary.get("selection_metric"),
        "test_mean_metric_summary": summary.get("test_mean_metric"),
        "epsilon": summary.get("epsilon"),
        "sigma_x": summary.get("sigma_x"),
        "steps": summary.get("steps"),
        "wall_time_s": summary.get("wall_time_s"),
        "wandb_id": summary.get("wandb_id"),
        "data_source": summary.get("data_source"),
    }


def headline(row: dict, evaluation: pd.DataFrame | None) -> dict[str, Any]:
    """Task, selection direction, and the table numbers, computed from eval.csv (the full record)."""
    metric = row.get("metric")
    if metric is None and evaluation is not None:
        metric = next((m for m in TASK_OF_METRIC if m in set(evaluation["metric"])), None)
    out: dict[str, Any] = {
        "metric": metric,
        # the run's own data config names its task; older records: inferred from the metric or the dataset
        "task": row.get("cfg.data.task") or (TASK_OF_METRIC.get(metric, "other") if metric
                                             else TASK_OF_DATASET.get(row.get("dataset"))),
        "selection_mode": row.get("selection_mode") or DEFAULT_MODE.get(metric),
        "test_mean_metric": math.nan, "test_auc": math.nan, "selection_metric": row.get("selection_metric_summary"),
        "val_last_layer_loss": math.nan, "last_layer_bound": math.nan,
        "usable": row["state"] == "complete",
        "partial": row["state"] == "partial",
    }
    if evaluation is None or metric is None:
        return out
    last = int(evaluation["layer"].max())
    test = _last_layer(evaluation, "test", metric, last)
    if len(test):
        out["test_mean_metric"] = float(test.mean())  # Table 3's number: mean over the gamma_test grid
        out["test_auc"] = area_under(test)  # Table 4's number
    out.update(_last_layer_against_chain(row, evaluation, last))
    if out["selection_metric"] is None:
        # older summaries without it: the validation metric averaged over the test grid, as cutlab does
        val = _last_layer(evaluation, "val", metric, last)
        val = val[val.index.isin(test.index)]
        out["selection_metric"] = float(val.mean()) if len(val) else math.nan
    return out


def _last_layer_against_chain(row: dict, evaluation: pd.DataFrame, last: int) -> dict[str, Any]:
    """The validation l_L at gamma_train (the loss the verdict reads) and epsilon (1 - alpha)^L, the most the
    constraints allow it in all: a cell whose bound lies below every l_L reached at its data and gamma_train asks
    for more descent than anything trained there gave (cutlab.core.constraints.chain_bound)."""
    gamma, alpha, epsilon = row.get("gamma_train"), row.get("alpha"), row.get("epsilon")
    rows = evaluation[(evaluation["split"] == "val") & (evaluation["metric"] == "loss") & (evaluation["layer"] == last)]
    at_gamma = rows[np.isclose(rows["gamma_test"], gamma)] if gamma is not None else rows.iloc[:0]
    bound = chain_bound(epsilon, alpha, last) if alpha is not None else None  # both already checked on reading
    return {"val_last_layer_loss": float(at_gamma["value"].iloc[0]) if len(at_gamma) else math.nan,
            "last_layer_bound": math.nan if bound is None else bound}


def _last_layer(evaluation: pd.DataFrame, split: str, metric: str, last: int) -> pd.Series:
    rows = evaluation[(evaluation["split"] == split) & (evaluation["metric"] == metric) & (evaluation["layer"] == last)]
    rows = rows.sort_values("gamma_test")
    return pd.Series(rows["value"].to_numpy(), index=rows["gamma_test"].to_numpy())


def area_under(curve: pd.Series) -> float:
    """Trapezoid area under ``value(gamma_test)`` in gamma units, not normalised (the paper's Table 4 AUC)."""
    curve = curve.sort_index()
    if len(curve) < 2:
        return math.nan
    return float(np.trapezoid(curve.to_numpy(dtype=float), curve.index.to_numpy(dtype=float)))

