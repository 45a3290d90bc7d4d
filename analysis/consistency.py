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
