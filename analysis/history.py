"""A run record's training history (history.csv): read, and checked for the steps it lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from cutlab.run.records import HISTORY


def lost_steps(history: pd.DataFrame | None, steps: Any) -> str | None:
    """The steps 1..steps missing from ``history``, as a short range text; None if none are."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        return None
    present = set() if history is None else set(history["step"])
    lost = [step for step in range(1, steps + 1) if step not in present]
    if not lost:
        return None
    if len(lost) == 1:
        return str(lost[0])
    return f"{lost[0]}-{lost[-1]}" if lost == list(range(lost[0], lost[-1] + 1)) else str(lost)


def read_history(run_dir: Path) -> pd.DataFrame | None:
    try:
        frame = pd.read_csv(run_dir / HISTORY)
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
        return None
    if "step" not in frame.columns:
        return None
    if len(frame) and not _ends_with_newline(run_dir / HISTORY):
        frame = frame.iloc[:-1]  # the last line was cut mid-write (the writer ends every row with its newline)
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce")
    return frame.dropna(subset=["step"])  # a line cut by a crash mid-write


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(0, 2)
        if file.tell() == 0:
            return True
        file.seek(-1, 2)
        return file.read(1) == b"\n"
