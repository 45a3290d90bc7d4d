"""Run folders copied whole from one run (summary, eval, history, config and provenance alike) are that run once.

Each run draws its identity when its folder is first written (provenance.json's ``run_uid``, cutlab.run.records);
a copy holds the same one. Counted as runs of their own, copies would add seeds that never ran to a cell: its n
and the spread over seeds behind the error bars (Tables 3-4's cells, App. D's seeds) would be made up. Of each
identity, one complete run is counted (the first by name); the other complete ones stay in the runs frame,
``unsupported``, each naming the run it copies (a copy not complete is not counted anyway, and keeps its own
reason). Runs recorded before the identity existed have none: each is read as its own run, as before.
"""

from __future__ import annotations

import pandas as pd

from cutlab.run.records import PROVENANCE, RUN_UID


def run_uids(runs: pd.DataFrame) -> list[str | None]:
    """Each run's identity from its provenance.json (as read by analysis.collect); None where it has none (an older
    record, or not a text)."""
    uids = [record.get(RUN_UID) if isinstance(record, dict) else None for record in runs["provenance"]]
    return [uid if isinstance(uid, str) and uid else None for uid in uids]


def mark_copies(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with every complete copy of a counted run made ``unsupported``, its problem naming the run it copies."""
    complete = runs[runs["usable"]]
    uids = pd.Series(run_uids(complete), index=complete.index, dtype=object)
    for _, group in complete.assign(uid=uids).dropna(subset=["uid"]).groupby("uid", sort=False):
        kept = group["run"].iloc[0]
        for index in group.index[1:]:
            runs.loc[index, ["state", "usable", "partial"]] = ["unsupported", False, False]
            runs.loc[index, "problem"] = (f"a copy of run {kept} (the same {RUN_UID} in its {PROVENANCE}), counted "
                                          f"once, as {kept}; move the copy out of the analysed folders")
    return runs
