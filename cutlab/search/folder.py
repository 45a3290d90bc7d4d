"""The study folder's own files (``<runs_dir>/search/<study>``): its ask lock, its report and its storage record
(holder.py), never a link's target.

A study folder from elsewhere (copied, unpacked, shared) may hold ``.ask.lock -> ~/thesis.tex``: opening the lock
for writing truncated the link's target, and the report was written through its link. Each is refused in one line
naming the link, as a run folder's ``.lock`` is (cutlab/run/lock.py); the journal's own checks are in storage.py.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from cutlab.atomic import DiskFull, is_disk_full
from cutlab.errors import CutlabError
from cutlab.run.lock import open_lock_file
from cutlab.run.records import not_a_file

ASK_LOCK = ".ask.lock"
REPORT = "search_report.json"
HOLDER = "storage.txt"  # the storage that holds the folder's study (holder.py)
#: what a full disk leaves to do: the search's progress is in its journal
SEARCH_GOES_ON = "the search goes on where it stopped, its finished trials kept"
FIX = "remove it and run the same command again"


def refuse_foreign(path: Path, what: str) -> None:
    """One line where ``path`` is a link, a FIFO or a folder: not ``what`` cutlab-search wrote."""
    problem = not_a_file(path)
    if problem:
        raise CutlabError(f"{problem}; it is not {what} cutlab-search wrote: {FIX}")


def check_study_folder(study_dir: Path) -> None:
    """Before anything runs (also with --dry-run): a report link found only at the end would cost the whole search."""
    refuse_foreign(study_dir / ASK_LOCK, "the study's lock file")
    refuse_foreign(study_dir / REPORT, "the study's report")
    refuse_foreign(study_dir / HOLDER, "the study's storage record")


@contextmanager
def study_lock(study_dir: Path):
    """The study's ask lock (worker.py says what it serialises): an flock(2) on ``.ask.lock``, released on close."""
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DiskFull(study_dir / ASK_LOCK, SEARCH_GOES_ON) if is_disk_full(error) else error
    descriptor = _open_lock(study_dir / ASK_LOCK)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _open_lock(path: Path) -> int:
    """Never a link's target, and never truncated: the lock's content is nothing, its file only a name to lock."""
    try:
        return open_lock_file(path, f"; it is not the study's lock file cutlab-search wrote: {FIX}")
    except OSError as error:
        raise DiskFull(path, SEARCH_GOES_ON) if is_disk_full(error) else error
