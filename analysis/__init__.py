"""Turns cutlab run records into the paper's tables and figures, and one report (no training, no W&B needed).

Public API::

    from . import collect_runs, build_tables, make_figures, write_report

    runs = collect_runs("runs/")                 # RunTable: .runs, .metrics, .history frames
    for table in build_tables(runs):             # Table 3 (video) and Table 4 (text)
        print(table.to_markdown())
    make_figures(runs, "figures/")               # [FigureResult]: PNG+PDF paths, or why skipped
    write_report(runs, "report/")                # report/report.md + tables/ + figures/

The command line is ``python -m analysis RUNS_FOLDER... --out REPORT_DIR`` (or ``cutlab-analysis``);
``--wandb-offline`` reads the runs' offline W&B files instead, ``--wandb ENTITY/PROJECT`` a W&B server
(analysis.wandb_source rebuilds run folders from W&B, then the same code reads them).
``make_figures`` and ``write_report`` import matplotlib on first use.
"""

from __future__ import annotations

from typing import Any

from .collect import AnalysisError, RunTable, collect_runs
from .selection import select_best
from .tables import TABLE3, TABLE4, Table, build_table, build_tables

__all__ = [
    "AnalysisError", "RunTable", "collect_runs", "select_best", "TABLE3", "TABLE4", "Table", "build_table",
    "build_tables", "make_figures", "write_report",
]


def __getattr__(name: str) -> Any:
    # matplotlib loads only when figures are asked for: collecting and tables stay light
    if name == "make_figures":
        from .figures import make_figures
        return make_figures
    if name == "write_report":
        from .report import write_report
        return write_report
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
