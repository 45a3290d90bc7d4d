"""Whether one run folder's records are one run's: its eval.csv against its config's depth and its summary's numbers.

The tables take their numbers from eval.csv and the verdicts, selection and budgets from summary.json and
config.yaml. A folder whose eval.csv was copied from another run (another depth, another seed) would put that run's
numbers under this run's configuration and verdict; cutlab writes all three from one evaluation, so they agree.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cutlab.run.records import CONFIG, EVAL, SUMMARY

# summary.json's numbers are float32 means; eval.csv holds the float32 values they were taken over
RELATIVE_TOLERANCE = 1e-5
#: summary key -> the eval.csv split whose last-layer metric, averaged over the gamma_test grid, it is
MEANS = {"test_mean_metric": "test", "selection_metric": "val"}


def mismatch(row: dict, evaluation: pd.DataFrame | None, summary: dict | None) -> str | None:
    """Why ``evaluation`` is not the evaluation that ``row``'s config and ``summary`` describe; None when it is."""
    if evaluation is None or not len(evaluation):
        return None
    depth, last = row.get("L"), int(evaluation["layer"].max())
    if isinstance(depth, int) and last != depth:
        return f"{EVAL} holds layers 0..{last} but {CONFIG} says L = {depth}: it is another run's evaluation"
    metric, grid = row.get("metric"), row.get("gamma_test_grid")
    if not metric or not grid:
        return None
    for key, split in MEANS.items():
        recorded = (summary or {}).get(key)
        if not isinstance(recorded, (int, float)) or isinstance(recorded, bool) or not math.isfinite(recorded):
            continue
        rows = evaluation[(evaluation["split"] == split) & (evaluation["metric"] == metric)
                          & (evaluation["layer"] == last)]
        values = [rows.loc[np.isclose(rows["gamma_test"], gamma), "value"] for gamma in grid]
        if not all(len(value) for value in values):
            continue  # a truncated eval.csv: reported as such elsewhere
        mean = float(np.mean([value.iloc[0] for value in values]))
        if not math.isclose(mean, recorded, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9):
            return (f"{SUMMARY} gives {key} {recorded:.6g} but {EVAL}'s {split} {metric} averages {mean:.6g}: the two "
                    "files are not one run's")
    return None


def evaluation_mismatch(run: pd.Series, record: dict, metrics: pd.DataFrame) -> str | None:
    """Why a cutlab-eval record under ``run``'s folder is not an evaluation of that run (one copied, or linked, from
    another run's folder), or why its metrics.csv is not the one its mean was taken over; None when it is."""
    own = {"L": run.get("L"), "model": run.get("model"), "gamma_train": run.get("gamma_train"),
           "seed": run.get("seed")}
    theirs = {**{key: record.get(key) for key in ("L", "model", "gamma_train")},
              "seed": (record.get("request") or {}).get("seed")}
    differ = [f"{key} {theirs[key]!r} (the run's {_plain(own[key])!r})" for key in own
              if _plain(own[key]) is not None and theirs[key] is not None and theirs[key] != _plain(own[key])]
    if differ:
        return f"an evaluation of another run: {', '.join(differ)}"
    rows = metrics[(metrics["metric"] == record.get("metric")) & (metrics["layer"] == metrics["layer"].max())]
    mean = float(rows["value"].mean()) if len(rows) else math.nan
    if not math.isclose(mean, float(record["mean_metric"]), rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9):
        return f"mean_metric {float(record['mean_metric']):.6g} but metrics.csv's last layer averages {mean:.6g}"
    return None


def _plain(value):
    """A value of the runs frame as its record wrote it: numpy scalars as Python's, NaN (no such key) as None."""
    value = value.item() if isinstance(value, np.generic) else value
    return None if isinstance(value, float) and math.isnan(value) else value
