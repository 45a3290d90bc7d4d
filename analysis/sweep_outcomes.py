"""Runs of a sweep that failed before they wrote a run record (a bad config for that combination, refused at the
door), or were interrupted while they set up: they leave no run record, only a line in the sweep's record,
``<runs_dir>/_sweeps/<sweep>-<time>/outcome.json`` (cutlab.launch.sweep.finish_record). Read here, so that the report
counts and lists them with the other failed (or partial) runs instead of losing them.

A run that has a folder is read from that folder alone (it is never counted twice); of a run several sweeps failed,
the latest record's reason is kept. A record that is not what cutlab writes is not read, and said so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .collect import RunTable
from .run_folders import SKIP_DIRS
from .record_values import OUTCOME, checked
from cutlab.launch.outcome import OUTCOME_FILE, SWEEP_RECORDS
from cutlab.run.records import not_a_file

REQUIRED = ("run_id", "status")


@dataclass
class SweepOutcomes:
    """``failed`` / ``interrupted``: one dict per run without a run record that its latest sweep record calls so
    (``run``, ``sweep``, ``error``; interrupted: stopped while it set up, before its first record); ``unread``: one
    line per sweep record that could not be read (``<path>: why``)."""

    failed: list[dict] = field(default_factory=list)
    interrupted: list[dict] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)


def sweep_outcomes(runs: RunTable) -> SweepOutcomes:
    """The failed runs that the sweep records under ``runs.folders`` name and that have no run folder there."""
    found = SweepOutcomes()
    if runs.source:  # rebuilt from W&B: no sweep records beside them
        return found
    with_folder = {Path(path).resolve() for path in runs.runs["path"].dropna()}
    latest: dict[Path, dict] = {}
    for path in sorted(_outcome_files(runs.folders), key=lambda p: (_stamp(p.parent.name), str(p))):
        entries, problem = _read(path)
        if problem:
            found.unread.append(f"{path}: {problem}")
            continue
        runs_dir = path.parent.parent.parent
        for entry in entries:
            folder = (runs_dir / entry["run_id"]).resolve()
            if folder in with_folder:
                continue
            latest[folder] = {"run": entry["run_id"], "sweep": path.parent.name, "status": entry["status"],
                              "error": entry.get("error") or "failed without an error message"}
    found.failed = [run for run in latest.values() if run["status"] == "failed"]
    found.interrupted = [run for run in latest.values() if run["status"] == "interrupted"]
    return found


def with_not_started(frame: pd.DataFrame, outcomes: SweepOutcomes) -> pd.DataFrame:
    """``frame`` (the runs frame) plus one row per run without a record, failed or (interrupted) partial: its path
    empty, its setting unknown."""
    if not outcomes.failed and not outcomes.interrupted:
        return frame
    empty = dict.fromkeys(frame.columns)  # None, as a run without a config has it (NaN would print as "nan")
    rows = pd.DataFrame([{**empty, "run": run["run"], "state": "failed", "usable": False, "partial": False,
                          "status": "failed", "problem": f"no run record (sweep {run['sweep']}): {run['error']}"}
                         for run in outcomes.failed]
                        + [{**empty, "run": run["run"], "state": "partial", "usable": False, "partial": True,
                            "status": "interrupted", "problem": f"interrupted before it wrote a run record (sweep "
                            f"{run['sweep']}); run the same sweep command again to train it"}
                           for run in outcomes.interrupted], columns=frame.columns, dtype=object)
    return pd.concat([frame.astype(object), rows], ignore_index=True)


def _outcome_files(roots: list[Path]) -> list[Path]:
    """Every ``_sweeps/<record>/outcome.json`` under ``roots``, walked as collect walks them for run folders."""
    files = set()
    for root in roots:
        for current, dirs, names in os.walk(root):
            here = Path(current)
            if OUTCOME_FILE in names and here.parent.name == SWEEP_RECORDS:
                files.add((here / OUTCOME_FILE).resolve())
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
    return list(files)


def _stamp(record: str) -> str:
    """A record's time (``<sweep>-<%Y%m%dT%H%M%S.%fZ>``): its order among records, whatever the sweep's name."""
    return record.rsplit("-", 1)[-1]


def _read(path: Path) -> tuple[list[dict], str | None]:
    """(the record's runs, None) or ([], why it is not one cutlab wrote)."""
    refused = not_a_file(path)  # a link or a FIFO: reading it would read another file, or never end
    if refused:
        return [], f"{refused}, not a sweep record cutlab wrote"
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return [], f"cannot be read as JSON ({error})"
    if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
        return [], "holds no list of runs (not a sweep record cutlab wrote)"
    for index, entry in enumerate(record["runs"]):
        if not isinstance(entry, dict):
            return [], f"run {index} is not an object (not a sweep record cutlab wrote)"
        missing = [key for key in REQUIRED if entry.get(key) is None]
        _, problems = checked(entry, OUTCOME, f"run {index}")
        if missing or problems:
            return [], "; ".join([*(f"run {index} has no {key}" for key in missing), *problems])
    return record["runs"], None
