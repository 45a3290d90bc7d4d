"""How the analysis names, counts and marks a run's feasibility verdict.

The statuses are the ones ``cutlab.core.evaluation.Verdict`` writes into summary.json, imported from there. A
slack-feasible run meets its constraints only through its resilience slack: it is never counted or shown as
feasible without saying so.
"""

from __future__ import annotations

import math

import pandas as pd

from cutlab.core.evaluation import DEGENERATE, INFEASIBLE, SLACK_FEASIBLE, STRICTLY_FEASIBLE, UNCONSTRAINED

#: the mark a table entry, a legend or a figure title carries for each verdict that is not strictly feasible
MARKS = {INFEASIBLE: "†", SLACK_FEASIBLE: "≈", DEGENERATE: "∅"}
#: the words for each verdict in counts and captions, in the report's order
NAMES = {STRICTLY_FEASIBLE: "strictly feasible", SLACK_FEASIBLE: "slack-feasible", INFEASIBLE: "infeasible",
         DEGENERATE: "degenerate", UNCONSTRAINED: "ERM"}
DEGENERATE_MEANING = ("no descent possible: Φ_{l−1} already equals the target (a descent constraint whose "
                      "right-hand side is 0, e.g. UT at γ_train = 0), so the run is counted neither feasible nor "
                      "infeasible")
SLACK_MEANING = ("feasible only within its resilience slack, not strictly: some constraint misses its right-hand "
                 "side and is met only through the slack")
#: beside a table entry whose verdict on the test split is not its validation verdict (the one its mark shows)
TEST_DIFFERS = "°"
#: one sentence for figure captions: what each mark means
CAPTION = (f"{MARKS[INFEASIBLE]} marks a run that ended infeasible, {MARKS[SLACK_FEASIBLE]} one feasible only within "
           f"its resilience slack, {MARKS[DEGENERATE]} one where no descent was possible (degenerate).")


def mark(verdict) -> str:
    """The verdict's mark ("" for strictly feasible, ERM, or a verdict the record does not hold)."""
    return MARKS.get(verdict, "") if isinstance(verdict, str) else ""


def test_differs(validation, test) -> bool:
    """Whether a run's test verdict is another than its validation verdict (both recorded)."""
    return validation in NAMES and test in NAMES and validation != test


def count_line(verdicts: pd.Series) -> str:
    """``3 strictly feasible, 1 slack-feasible, 2 infeasible, 0 degenerate, 4 ERM`` (+ runs without a verdict)."""
    counts = verdicts.value_counts()
    parts = [f"{int(counts.get(status, 0))} {name}" for status, name in NAMES.items()]
    unknown = int((~verdicts.isin(list(NAMES))).sum())
    if unknown:
        parts.append(f"{unknown} without a verdict (an older record)")
    return ", ".join(parts)


def percent(value) -> str:
    """A relative amount (0.12) as ``12.0 %``; ``?`` when the record does not hold it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "?"
    return f"{100 * float(value):.1f} %"


def with_interval(largest) -> str:
    """``+2.7 % [−2.6, +7.2]``: a relative violation and its interval in percent; ``+2.7 % (2 clips: no interval)``
    where the split had too few groups to resample; ``?`` for an older record."""
    if not isinstance(largest, (tuple, list)):
        return "?"
    value, bounds = largest
    if isinstance(bounds, str):
        return f"{100 * value:+.1f} % ({bounds}: no interval)".replace("-", "−")
    low, high = bounds
    return f"{100 * value:+.1f} % [{100 * low:+.1f}, {100 * high:+.1f}]".replace("-", "−")
