"""``python -m analysis.feasibility_study RUNS_FOLDER... [--out TABLE.csv]``: rank dual settings by validation.

A *dual setting* is one combination of the keys in ``SETTING_KEYS`` (constraint form, detach_prev, dual optimiser,
its learning rate and gains, update order, restarts, resilience). For each, over the cells (model x dataset x L x
gamma_train) it ran on, the table gives

- how many cells ended strictly feasible, feasible only through their resilience slack, infeasible;
- the validation metric against ERM's in the same cell (``val_vs_erm``: the mean of constrained / ERM for RMSE,
  ERM / constrained for accuracy, so below 1 is better in both) and in how many cells the constrained run is better;
- in how many cells the smoothed training constraints came to be met for good (``reached_feasibility``), and the
  median step at which they did, a cell that never did counting as never (``inf`` when half or more never did).

Settings are ranked by strictly feasible cells, then ``val_vs_erm``. Only validation numbers enter: the verdict is
computed on the validation split and the selection metric is the validation mean over the gamma_test grid; the
test split is not read, so a default chosen here is not chosen on test data.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from cutlab.atomic import DiskFull, os_reason, unwritable, write_atomic
from .collect import AnalysisError, collect_runs
from .selection import CELL, SETTING, with_settings
from .selection import DUAL_SETTING_KEYS as SETTING_KEYS
from .verdicts import INFEASIBLE, SLACK_FEASIBLE, STRICTLY_FEASIBLE

# as the report's tables compare runs: on one gamma_test grid, in one precision, at one training budget
CELL_KEYS = CELL + SETTING


def best_erm(complete: pd.DataFrame) -> pd.DataFrame:
    """Each cell's best ERM validation metric (``erm_selection_metric``) in its own direction: the lowest RMSE, the
    highest accuracy (the lowest of both took a text cell's worst ERM seed)."""
    erm = complete[complete["arm"] == "erm"]
    score = np.where(erm["selection_mode"] == "max", -1.0, 1.0) * erm["selection_metric"].astype(float)
    best = erm.assign(_score=score).sort_values("_score", kind="stable").groupby(CELL_KEYS, dropna=False).head(1)
    return best[CELL_KEYS + ["selection_metric"]].rename(columns={"selection_metric": "erm_selection_metric"})


def cell_ratios(runs: pd.DataFrame) -> pd.DataFrame:
    """Constrained runs with their cell's ERM validation metric beside them (``val_vs_erm``, < 1 is better)."""
    complete = with_settings(runs[runs["usable"]])
    constrained = complete[complete["constrained"] == True]  # noqa: E712 (both arms: paper's dual too)
    constrained = constrained.merge(best_erm(complete), on=CELL_KEYS, how="left")
    lower_is_better = constrained["selection_mode"] == "min"
    ratio = constrained["selection_metric"] / constrained["erm_selection_metric"]
    constrained["val_vs_erm"] = ratio.where(lower_is_better, 1.0 / ratio)
    return constrained


def median_with_never(steps: pd.Series) -> float:
    """The median step to feasibility with a cell that never got there as +inf: pandas' own median skips it, and
    a setting feasible in one cell of four would report that cell's step."""
    return float(pd.to_numeric(steps, errors="coerce").fillna(math.inf).median())


def rank_settings(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per dual setting, best first (see the module docstring)."""
    constrained = cell_ratios(runs)
    if constrained.empty:
        raise AnalysisError("no complete constrained runs to rank; run a sweeps/feasibility_*.yaml sweep first")
    keys = [k for k in SETTING_KEYS if k in constrained and constrained[k].notna().any()]
    constrained[keys] = constrained[keys].astype(str)
    grouped = constrained.groupby(keys, dropna=False)
    table = grouped.agg(
        cells=("run", "size"),
        strictly_feasible=("verdict", lambda v: int((v == STRICTLY_FEASIBLE).sum())),
        slack_feasible=("verdict", lambda v: int((v == SLACK_FEASIBLE).sum())),
        infeasible=("verdict", lambda v: int((v == INFEASIBLE).sum())),
        val_vs_erm=("val_vs_erm", "mean"),
        better_than_erm=("val_vs_erm", lambda v: int((v < 1.0).sum())),
        reached_feasibility=("steps_to_strict_feasibility", lambda v: int(v.notna().sum())),
        median_steps_to_feasibility=("steps_to_strict_feasibility", median_with_never),
    ).reset_index()
    return table.sort_values(["strictly_feasible", "val_vs_erm"], ascending=[False, True]).reset_index(drop=True)


def markdown(frame: pd.DataFrame) -> str:
    """A pipe table (pandas' own needs the tabulate package, which cutlab does not depend on)."""
    cell = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def table_file(out: str | None) -> Path | None:
    """Where --out writes the table, checked before the runs are read: '' (an unset variable) wrote nothing, and a
    folder or a path through a file ended in a traceback once the ranking was done."""
    if out is None:
        return None
    if not out.strip():
        raise AnalysisError("--out is empty; pass a file for the table, e.g. --out study.csv")
    path = Path(out).expanduser()  # --out=~/study.csv reaches us unexpanded (bash expands ~ only at a word's start)
    if path.is_dir():
        raise AnalysisError(f"--out {path} is a folder; pass a file for the table, e.g. --out {path / 'study.csv'}")
    problem = unwritable(path.parent)
    if problem:
        raise AnalysisError(f"cannot write the table to {path} ({problem}): pass a writable --out")
    return path


def write_table(table: pd.DataFrame, path: Path) -> None:
    """The CSV through a temporary file and a rename: a link at ``path`` is replaced, its target never written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, table.to_csv(index=False))
    except (OSError, DiskFull) as error:
        reason = "no space left on the device" if isinstance(error, DiskFull) else os_reason(error)
        raise AnalysisError(f"cannot write the table to {path} ({reason}): pass a writable --out") from None


def main(argv: list[str] | None = None) -> int:
    prog = f"{__package__}.feasibility_study"  # as typed: analysis.* in a checkout, cutlab_analysis.* installed
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", help="run folders (searched recursively)")
    parser.add_argument("--out", help="also write the table as CSV to this file (its folder is made)")
    parser.add_argument("--top", type=int, default=20, help="rows printed (default 20)")
    args = parser.parse_args(argv)
    try:
        out = table_file(args.out)
        table = rank_settings(collect_runs(*args.folders).runs)
        if out is not None:
            write_table(table, out)
    except AnalysisError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    print(markdown(table.head(args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
