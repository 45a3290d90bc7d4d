"""The runs the report's "What ran" table cannot place: their task, model and data set are all unknown.

A sweep's run refused before it started (a bad value for that combination, cutlab.launch.sweep) leaves no run
folder, only its line in the sweep's record; a run folder whose config.yaml is missing or refused unread (a link, a
FIFO: analysis.record_files) has no setting either. A row of ``? | ? | ?`` for them says nothing, so they are left
out of the table and counted in one sentence under it, by why; the report lists each with its reason.
"""

from __future__ import annotations

import pandas as pd

SETTING = ("task", "model", "dataset")  # the table's row keys


def known_settings(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the runs with any of task, model, data set known, the unknown ones shown as ``?``; the sentence, after a blank
    line, counting the others, or [] when there are none)."""
    unknown = frame[list(SETTING)].isna().all(axis=1)
    known = frame[~unknown].assign(**{key: frame.loc[~unknown, key].fillna("?") for key in SETTING})
    if not unknown.any():
        return known, []
    left = frame[unknown]
    no_folder = left["path"].isna()
    reasons = [f"{int(rows.sum())} {why}" for rows, why in (
        (no_folder & (left["state"] == "failed"), "failed before writing a run folder (refused at the start)"),
        (no_folder & (left["state"] != "failed"), "stopped by a sweep before writing a run folder"),
        (~no_folder, "with a run folder whose config.yaml is missing or was not read")) if rows.any()]
    runs = "run" if len(left) == 1 else "runs"
    return known, ["", f"Not in this table: {len(left)} {runs} whose task, model and data set are unknown: "
                   f"{', '.join(reasons)}; each is listed below, under Failed runs or Partial and unreadable runs, "
                   "with why."]
