"""How a figure tells runs apart: each run's own α and ε in its title, a line or bar style for runs that are not
strictly feasible (so the plot says it, not only the legend's †), and integer ticks on axes that count.

The style goes on top of the arm's (analysis.figures.ARM_STYLE): colour and marker stay the arm's, the line turns
dotted and the markers hollow; a histogram's bars are hatched. ERM is unconstrained and keeps its own dashes.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axis import Axis
from matplotlib.ticker import MaxNLocator

from . import verdicts

#: the line of a constrained run that misses its constraints on validation (infeasible, slack-only, degenerate)
NOT_FEASIBLE_LINE = {"linestyle": (0, (1, 1.2)), "markerfacecolor": "white"}
NOT_FEASIBLE_BARS = {"hatch": "////", "edgecolor": "black", "linewidth": 0.3}
CAPTION = ("Constrained runs that are not strictly feasible on validation are drawn dotted with hollow markers "
           "(hatched bars in histograms), besides their mark in the legend.")


def not_feasible(run: pd.Series | dict) -> bool:
    """A constrained run whose verdict is anything but strictly feasible (ERM's `unconstrained` is not)."""
    return run.get("verdict") in (verdicts.INFEASIBLE, verdicts.SLACK_FEASIBLE, verdicts.DEGENERATE)


def line_style(run: pd.Series | dict) -> dict:
    return dict(NOT_FEASIBLE_LINE) if not_feasible(run) else {}


def bar_style(run: pd.Series | dict) -> dict:
    return dict(NOT_FEASIBLE_BARS) if not_feasible(run) else {}


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(number) else number


def settings(run: pd.Series | dict) -> str:
    """The run's own constraint settings, e.g. ``α=0.25 · ε=auto=166.3 · seed 0``: ε as the run resolved it
    (summary.json's epsilon), never the paper's reference value; ERM says it has none."""
    seed = _number(run.get("seed"))
    tail = f" · seed {int(seed)}" if seed is not None else ""
    if run.get("arm") == "erm" or run.get("constrained") is False:
        return "ERM, no constraints" + tail
    alpha, epsilon = _number(run.get("alpha")), _number(run.get("epsilon"))
    text = f"α={alpha:g}" if alpha is not None else "α=?"
    configured = run.get("epsilon_config")
    if epsilon is None:
        text += " · no ε" if configured in (None, "null", "None") else " · ε=?"  # ?: the record lacks it
    elif configured == "auto":
        text += f" · ε=auto={epsilon:.4g}"
    else:
        text += f" · ε={epsilon:.4g}"
    return text + tail


def integer_ticks(*axes: Axis) -> None:
    """Ticks at whole numbers only, for axes that count (training steps, layers, depth, samples)."""
    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))
