"""The exit status of a command stopped by Ctrl-C: 130 (128 + SIGINT, what a shell reports), every time.

Run as ``python -m``, CPython ends a process by raising SIGINT against itself once it has finished (status -2 to a
parent, not the 130 it was given) when it holds a Ctrl-C for unhandled, and it marks one so whenever the Ctrl-C
landed inside ``exec`` of a string, which ``dataclasses`` and ``namedtuple`` do as a module is imported, even where
the command then caught it. Measured on ``python -m cutlab.transfer.cli`` stopped as it began its first evaluation
(it imports its task then): -2 in 5 of 160 stops.
"""

from __future__ import annotations

INTERRUPTED_EXIT = 130


def interrupted_exit() -> int:
    """INTERRUPTED_EXIT, for a command to return (or raise as SystemExit) once it has handled Ctrl-C itself."""
    exec("pass")  # each exec of a string begins by clearing that mark, and this one ends without setting it
    return INTERRUPTED_EXIT
