"""Turn SIGTERM/SIGUSR2 (SLURM's time-limit and preemption signals) into "checkpoint at the next step, then stop".

SLURM sends SIGUSR2 ``signal_delay_s`` before a time limit (submitit's ``--signal=USR2@90``) and SIGTERM on
preemption. Stopping inside a step would checkpoint half-updated weights, so the handler only sets a flag;
the training loop checks it after each complete step, writes the checkpoint and raises :class:`Preempted`.
The run then resumes exactly where it stopped when the same command runs again (or SLURM requeues it).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
PREEMPTED_EXIT = 75  # EX_TEMPFAIL: "try again later"; the launchers requeue a run that exits with it


class Preempted(KeyboardInterrupt):
    """The run stopped on a signal after checkpointing; a KeyboardInterrupt so no ``except Exception`` eats it."""


class StopFlag:
    def __init__(self) -> None:
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


@contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """Within the block, SIGTERM/SIGUSR2 set the flag instead of killing the process (main thread only)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return

    def handler(signum, frame) -> None:
        flag.signal_name = signal.Signals(signum).name

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
