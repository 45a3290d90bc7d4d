"""How a run's process tells the launcher that ran it (local or SLURM) that it trained nothing: the run was complete
when its turn came, finished after the sweep's plan by an identical sweep started with this one; or it was busy,
its folder being written by another live process (an overlapping sweep on the same runs folder reached it first).

A skipped run's exit status is 0 either way and its summary.json the same, so the launcher counted such a run
complete; a busy run's is 2, a refusal, so the launcher counted it failed. The in-process launcher sees the run's
SkippedSummary or RunFolderBusy itself. A launcher sets :data:`SKIPPED_ENV` in its runs' environment
(cutlab/launch/job.py's ``child_env``), and a run that skipped writes :data:`SKIPPED_MARKER` on stderr as its last
line, one that was busy :data:`BUSY_MARKER` and the holder; the launcher reads them and does not echo them. A run
started by hand prints nothing more.
"""

from __future__ import annotations

import os
import sys

from cutlab.run.records import SkippedSummary

SKIPPED_ENV = "CUTLAB_SAY_SKIPPED"  # "1" in a launcher's run processes
SKIPPED_MARKER = "\x1e[cutlab run] skipped: complete when its turn came"  # \x1e: no run prints it
BUSY_MARKER = "\x1e[cutlab run] busy: written by "  # then the holder: ``process P on HOST``


def say_if_skipped(summary: dict | None) -> None:
    """Write the marker when ``summary`` is a skipped run's (``python -m cutlab`` found it complete) and a launcher
    asked for it."""
    if isinstance(summary, SkippedSummary) and for_a_launcher():
        print(SKIPPED_MARKER, file=sys.stderr, flush=True)


def for_a_launcher() -> bool:
    """Whether this process runs a launcher's run (a sweep's, local or SLURM), not one started by hand."""
    return os.environ.get(SKIPPED_ENV) == "1"


def say_busy(holder: str) -> None:
    """Write the marker of a run whose folder ``holder`` writes (a launcher's run only)."""
    if for_a_launcher():
        print(BUSY_MARKER + holder, file=sys.stderr, flush=True)
