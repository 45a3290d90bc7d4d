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
    return f"{lost[0]}-{lost[-1]}" if lost == list(range(lost[0], lost[-1] + 1)) and len(lost) > 1 else str(lost)


def read_history(run_dir: Path) -> pd.DataFrame | None:
    try:
        frame = pd.read_csv(run_dir / HISTORY)
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
        return None
    if "step" not in frame.columns:
        return None
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce")
    return frame.dropna(subset=["step"])  # a line cut by a crash mid-write
