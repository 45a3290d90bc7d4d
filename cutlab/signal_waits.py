"""Waits in the main thread that still hear stop signals (Ctrl-C, SIGTERM, SIGHUP).

Python runs a signal's handler in the main thread only, between bytecodes. The kernel may hand a signal sent to the
process to any of its threads (a launcher's slot threads, a native thread that torch or a library started); a main
thread blocked without end in a lock or in waitpid is then not woken, and the handler runs only once the wait ends.
A local sweep's SIGTERM so came into effect only after the running run had trained to its end. Waits of at most
SIGNAL_WAIT_S give the handler its turn within that time.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Iterable, Iterator

SIGNAL_WAIT_S = 0.5  # the longest a stop signal waits for the main thread to run its handler


def as_completed_hearing_signals(futures: Iterable[Future]) -> Iterator[Future]:
    """``concurrent.futures.as_completed``, waiting at most SIGNAL_WAIT_S at a time."""
    pending = set(futures)
    while pending:
        finished, pending = wait(pending, timeout=SIGNAL_WAIT_S, return_when=FIRST_COMPLETED)
        yield from finished


def wait_hearing_signals(process: subprocess.Popen) -> int:
    """``process.wait()``, waiting at most SIGNAL_WAIT_S at a time; returns its exit status."""
    while True:
        try:
            return process.wait(timeout=SIGNAL_WAIT_S)
        except subprocess.TimeoutExpired:
            continue
