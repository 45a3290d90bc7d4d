"""How a run's process tells the launcher that ran it (local or SLURM) that it trained nothing: the run was complete
when its turn came, finished after the sweep's plan by an identical sweep started with this one.

Its exit status is 0 either way and its summary.json the same, so the launcher counted such a run complete; the
in-process launcher sees the run's SkippedSummary itself. A launcher sets :data:`SKIPPED_ENV` in its runs'
environment (cutlab/launch/job.py's ``child_env``), and a run that skipped writes :data:`SKIPPED_MARKER` on stderr
as its last line, which the launcher reads and does not echo. A run started by hand prints nothing more.
"""

from __future__ import annotations

import os
import sys

from cutlab.run.records import SkippedSummary

SKIPPED_ENV = "CUTLAB_SAY_SKIPPED"  # "1" in a launcher's run processes
SKIPPED_MARKER = "\x1e[cutlab run] skipped: complete when its turn came"  # \x1e: no run prints it


def say_if_skipped(summary: dict | None) -> None:
    """Write the marker when ``summary`` is a skipped run's (``python -m cutlab`` found it complete) and a launcher
    asked for it."""
    if isinstance(summary, SkippedSummary) and os.environ.get(SKIPPED_ENV) == "1":
        print(SKIPPED_MARKER, file=sys.stderr, flush=True)
