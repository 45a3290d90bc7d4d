"""Run folders copied whole from one run (summary, eval, history, config and provenance alike) are that run once.

Each run draws its identity when its folder is first written (provenance.json's ``run_uid``, cutlab.run.records);
a copy holds the same one. Counted as runs of their own, copies would add seeds that never ran to a cell: its n
and the spread over seeds behind the error bars (Tables 3-4's cells, App. D's seeds) would be made up. A folder
rebuilt from W&B (analysis.wandb_source: no provenance.json) is the run whose summary names the same W&B run.
Of each identity, one complete run is counted: the one holding cutlab-eval's evaluations, else the one with its
own provenance, else the first by name (a backup sorting first was kept, and the original's evaluations left out
without a word); the other complete ones stay in the runs frame, ``unsupported``, each naming the run it copies
(a copy not complete is not counted anyway, and keeps its own reason). Runs recorded before the identity existed
have none: each is read as its own run, as before.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cutlab.run.records import PROVENANCE, RUN_UID
from cutlab.transfer.record import EVALUATIONS


def run_uids(runs: pd.DataFrame) -> list[str | None]:
    """Each run's identity from its provenance.json (as read by analysis.collect); None where it has none (an older
    record, or not a text)."""
    uids = [record.get(RUN_UID) if isinstance(record, dict) else None for record in runs["provenance"]]
    return [uid if isinstance(uid, str) and uid else None for uid in uids]


def identities(runs: pd.DataFrame) -> pd.Series:
    """Each run's run_uid; for a run without one, the run_uid of a run whose summary names the same W&B run (a
    folder rebuilt from W&B), else None."""
    uids = pd.Series(run_uids(runs), index=runs.index, dtype=object)
    wandb_ids = runs["wandb_id"] if "wandb_id" in runs else pd.Series(None, index=runs.index, dtype=object)
    by_wandb = {wandb_id: uid for wandb_id, uid in zip(wandb_ids, uids) if isinstance(wandb_id, str) and uid}
    return pd.Series([uid or by_wandb.get(wandb_id) if isinstance(wandb_id, str) else uid
                      for uid, wandb_id in zip(uids, wandb_ids)], index=runs.index, dtype=object)


def mark_copies(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with every complete copy of a counted run made ``unsupported``, its problem naming the run it copies."""
    runs["copy_of"] = None
    complete = runs[runs["usable"]]
    owned = pd.Series(run_uids(complete), index=complete.index, dtype=object).notna()
    evaluated = complete["path"].map(_has_evaluations)
    ranked = complete.assign(uid=identities(complete), evaluated=evaluated, owned=owned)
    for _, group in ranked.dropna(subset=["uid"]).groupby("uid", sort=False):
        group = group.sort_values(["evaluated", "owned", "run"], ascending=[False, False, True], kind="stable")
        kept = group["run"].iloc[0]
        for index in group.index[1:]:
            unread = f"; its {EVALUATIONS}/ is not read" if group.loc[index, "evaluated"] else ""
            runs.loc[index, ["state", "usable", "partial", "copy_of"]] = ["unsupported", False, False, kept]
            runs.loc[index, "problem"] = (f"a copy of run {kept} (the same {RUN_UID} in its {PROVENANCE}, or the same "
                                          f"W&B run), counted once, as {kept}{unread}; move the copy out of the "
                                          "analysed folders")
    return runs


def summed_once(runs: pd.DataFrame, column: str) -> float:
    """A column's total over ``runs`` (steps, wall time), a copy mark_copies named counted once, as its run."""
    counted = runs[runs["copy_of"].isna()] if "copy_of" in runs else runs
    return float(pd.to_numeric(counted[column], errors="coerce").fillna(0).sum())


def _has_evaluations(path) -> bool:
    """Whether the run folder holds any of cutlab-eval's records."""
    if not isinstance(path, str):  # a sweep's run that left no folder
        return False
    folder = Path(path) / EVALUATIONS
    return folder.is_dir() and not folder.is_symlink() and any(folder.iterdir())
