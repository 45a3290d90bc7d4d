"""The exit status of a command stopped by Ctrl-C: 130 (128 + SIGINT, what a shell reports), every time; and Ctrl-C held
while a library that cannot be interrupted safely works.

Run as ``python -m``, CPython ends a process by raising SIGINT against itself once it has finished (status -2 to a
parent, not the 130 it was given) when it holds a Ctrl-C for unhandled, and it marks one so whenever the Ctrl-C
landed inside ``exec`` of a string, which ``dataclasses`` and ``namedtuple`` do as a module is imported, even where
the command then caught it. Measured on ``python -m cutlab.transfer.cli`` stopped as it began its first evaluation
(it imports its task then): -2 in 5 of 160 stops.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

INTERRUPTED_EXIT = 130


def interrupted_exit() -> int:
    """INTERRUPTED_EXIT, for a command to return (or raise as SystemExit) once it has handled Ctrl-C itself."""
    exec("pass")  # each exec of a string begins by clearing that mark, and this one ends without setting it
    return INTERRUPTED_EXIT


class HeldCtrlC:
    """Ctrl-C held while Hydra composes and OmegaConf builds nodes (see ``ctrl_c_held``)."""

    def __init__(self) -> None:
        self.pressed = False

    def hold(self, signum=None, frame=None) -> None:
        if self.pressed:  # a second Ctrl-C stops at once, as everywhere in cutlab (a composition that hangs)
            raise KeyboardInterrupt
        self.pressed = True

    def stop_if_pressed(self) -> None:
        """Raise the held Ctrl-C as KeyboardInterrupt, at a point where nothing is half made."""
        if self.pressed:
            self.pressed = False
            raise KeyboardInterrupt

    @contextmanager
    def released(self) -> Iterator[None]:
        """Ctrl-C as usual within (a held one raised first), held again after: for the work Hydra calls between its
        compositions (a run, which handles Ctrl-C itself)."""
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self.stop_if_pressed()
            yield
        finally:
            signal.signal(signal.SIGINT, self.hold)


_HOLDS: list[HeldCtrlC] = []  # the innermost last


@contextmanager
def ctrl_c_held() -> Iterator[HeldCtrlC]:
    """Within the block a Ctrl-C is held, then raised as KeyboardInterrupt where the block calls ``stop_if_pressed``,
    within its ``released()`` parts, or as the block ends: for Hydra's composition and OmegaConf's nodes. A
    KeyboardInterrupt that lands while OmegaConf builds a node leaves the node half made; OmegaConf's clean-up then
    turns it into an AttributeError, which cutlab reported as a config error (exit 2), and which Hydra, reading its
    config files, let pass as if nothing were pressed (the run went on). Main thread only, and only where Ctrl-C would
    raise KeyboardInterrupt (not where it is ignored or handled already)."""
    if _HOLDS and signal.getsignal(signal.SIGINT) == _HOLDS[-1].hold:  # within one already: that one's
        yield _HOLDS[-1]
        return
    held = HeldCtrlC()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield held
        return
    signal.signal(signal.SIGINT, held.hold)
    _HOLDS.append(held)
    try:
        yield held
    finally:
        _HOLDS.remove(held)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    held.stop_if_pressed()


@contextmanager
def ctrl_c_released() -> Iterator[None]:
    """The innermost ``ctrl_c_held`` block's ``released()``; plain Ctrl-C where none is active."""
    if not _HOLDS or threading.current_thread() is not threading.main_thread():
        yield
        return
    with _HOLDS[-1].released():
        yield


def interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or a stop signal's ``Preempted``) that ``error`` was raised over, if any: OmegaConf's clean-up of a
    node half made when the KeyboardInterrupt landed raises its own error, and that error would be recorded as the
    run's failure, not its stop."""
    causes, seen = [error], set()
    while causes:
        cause = causes.pop()
        if isinstance(cause, KeyboardInterrupt):
            return cause
        if cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            causes += [cause.__cause__, cause.__context__]
    return None


def repost_swallowed_interrupts() -> None:
    """Python ignores an exception raised in a weakref callback or ``__del__`` (it prints "Exception ignored in ..."
    and goes on), so a Ctrl-C that landed in one during garbage collection was lost and the command ran to its end
    (``cutlab-analysis`` stopped at fixed delays: 19 of 81 stops between 2.3 and 4.7 s). This hook (``sys.unraisablehook``)
    sends such a KeyboardInterrupt's signal to the main thread again, to land in the command's own code; other
    exceptions are Python's to report. ``Preempted`` carries the stop signal's number as ``signum``."""
    report = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # from another thread, a moment later: sent from here, it would be handled within this hook, and ignored
            again = threading.Timer(0.05, _thread.interrupt_main,
                                    args=(getattr(unraisable.exc_value, "signum", signal.SIGINT),))
            again.daemon = True
            again.start()
        else:
            report(unraisable)

    sys.unraisablehook = hook
