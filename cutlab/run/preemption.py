"""Turn SIGTERM/SIGUSR2 (SLURM's time-limit and preemption signals) and SIGHUP (a closed terminal, cutlab/hangup.py)
into "checkpoint at the next step, then stop".
Ctrl-C (SIGINT) while a run trains does the same, once: a second Ctrl-C stops at once. Outside the training loop
(the run's set-up, its evaluation) SIGTERM/SIGUSR2 stop it at once, recorded interrupted (``stop_now_on_signals``).

SLURM sends SIGUSR2 ``signal_delay_s`` before a time limit (submitit's ``--signal=USR2@90``) and SIGTERM on
preemption. Stopping inside a step would checkpoint half-updated weights, so the handler only sets a flag;
the training loop checks it after each complete step, writes the checkpoint and raises :class:`Preempted`.
The run then resumes exactly where it stopped when the same command runs again (or SLURM requeues it).
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from cutlab.core.progress import PREFIX
from cutlab.hangup import repeated_hang_up, silence_terminal, stop_signals

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)  # and SIGHUP, unless ignored (nohup): stop_signals
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
    """Within the block, SIGTERM/SIGUSR2/SIGHUP set the flag instead of killing the process (main thread only)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return

    def handler(signum, frame) -> None:
        if signum == signal.SIGHUP:
            silence_terminal()
        flag.signal_name = signal.Signals(signum).name

    def interrupt(signum, frame) -> None:  # Ctrl-C: as SIGTERM, but the stop is the user's (exit 130, no requeue)
        if flag.requested:
            raise KeyboardInterrupt
        flag.signal_name = "SIGINT"
        print(f"{PREFIX}Ctrl-C: stopping after this step, with a checkpoint (Ctrl-C again stops at once)",
              file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, handler) for sig in stop_signals(*STOP_SIGNALS)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where SIGINT is ignored (a worker's)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def stop_now_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGUSR2 raise :class:`Preempted` at once (main thread only): for a run's set-up and
    evaluation, which have no step to finish and nothing new to checkpoint; the same command resumes from the last
    checkpoint (or starts the run, before its first). Without it the run died silently, its summary left
    ``running``. A stop that ``stops_held_between_runs`` held as the run began is raised on entry. ``stop_on_signals``
    within the block takes over for the training loop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if repeated_hang_up(signum):
            return
        raise _stopped_outside_the_loop(signal.Signals(signum))

    previous = {sig: signal.signal(sig, handler) for sig in stop_signals(*STOP_SIGNALS)}
    try:
        if _HELD and _HELD[-1].requested:  # it came as the run began, before this block: held till now
            raise _stopped_outside_the_loop(signal.Signals[_HELD[-1].signal_name])
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _stopped_outside_the_loop(sent: signal.Signals) -> Preempted:
    stop = Preempted(f"stopped by {sent.name} outside the training loop (set-up or evaluation)")
    stop.signum = int(sent)  # sent again if it lands where Python ignores it (cutlab.interrupted)
    return stop


_HELD: list[StopFlag] = []  # the stops_held_between_runs blocks now active, the innermost last


@contextmanager
def stops_held_between_runs() -> Iterator[StopFlag]:
    """Within the block, SIGTERM/SIGUSR2/SIGHUP only note their name (main thread only): for an in-process sweep,
    whose process Hydra keeps between its runs (it composes the next one there). There, with no run's handler
    installed, the signal's default action ended the sweep before it wrote its record, though its runs had
    checkpointed. Each run installs its own handlers within the block and restores these after it; the caller stops
    the sweep before its next run (or after its last) when a signal was noted. A single run is held so too, from
    Hydra's composition (which makes its folder) to its set-up's ``stop_now_on_signals``: there SIGTERM's default
    action killed it silently, leaving its new folder empty or holding only its lock."""
    held = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum, frame) -> None:
        if repeated_hang_up(signum):
            return
        held.signal_name = held.signal_name or signal.Signals(signum).name

    previous = {sig: signal.signal(sig, hold) for sig in stop_signals(*STOP_SIGNALS)}
    _HELD.append(held)
    try:
        yield held
    finally:
        _HELD.remove(held)
        for sig, old in previous.items():
            signal.signal(sig, old)
