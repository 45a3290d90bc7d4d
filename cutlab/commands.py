"""The installed commands' entry points (pyproject's ``[project.scripts]``; ``python -m cutlab`` comes here too).

Each command handles Ctrl-C where it does work (a run checkpoints, a sweep records its runs, cutlab-eval keeps its
evaluations whole). These entry points catch the Ctrl-C that comes before any of that has begun: while torch, pandas
and Hydra import (up to seconds), while a sweep is planned or Hydra starts. That Ctrl-C ended in a traceback and exit
-2; it now ends in one line and 130, like every other. The command's module is imported inside the handler, which is
why this module imports nothing of cutlab at its top. A Ctrl-C that Python itself would ignore (one that lands in a
weakref callback) is sent again (cutlab.interrupted).
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
from typing import Callable

HELP_OR_VERSION = {"-h", "--help", "--version"}  # which need no torch: they stay quick


def _command(name: str, module: str | Callable[[], int]) -> None:
    """Run the command ``name``: ``module``'s main (imported here), or a main given itself."""
    # A log handler that cannot write (W&B's debug.log on a full disk) must not print a traceback per record: W&B's
    # console capture echoed each one back into it, 20 000 lines ahead of cutlab's own one-line error.
    logging.raiseExceptions = False
    try:
        from cutlab.interrupted import ctrl_c_held, repost_swallowed_interrupts

        repost_swallowed_interrupts()  # a Ctrl-C landing in a weakref callback is not lost
        if not HELP_OR_VERSION & set(sys.argv[1:]):  # every other use of every command imports torch
            # A Ctrl-C while torch imports is held until it has: torch imports numpy from C and goes on without it
            # when that import fails (a Ctrl-C landing there was lost: the command ran to its end, exit 0), and a
            # KeyboardInterrupt reaching torch's C++ start-up aborts the process ("terminate called after throwing
            # an instance of 'pybind11::error_already_set'", exit -6).
            with ctrl_c_held():
                import torch  # noqa: F401

        try:
            status = (module if callable(module) else importlib.import_module(module).main)()
        finally:
            sys.stdout.flush()  # a reader gone (`| head`) shows here, not as Python's "Exception ignored" at exit
    except BrokenPipeError:
        status = _reader_gone()
    except OSError as error:  # a full disk where no record's own writer names it (a sweep's record, a report table)
        from cutlab.atomic import NO_SPACE

        if error.errno not in NO_SPACE:
            raise
        where = f" (while writing {error.filename})" if error.filename else ""
        print(f"{name}: error: no space left on the device{where}; free space there and run the same command again",
              file=sys.stderr, flush=True)
        status = 2
    except KeyboardInterrupt:
        from cutlab.interrupted import interrupted_exit

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while it exits would end in a traceback
        print(f"{name}: interrupted (Ctrl-C); run the same command again to go on", file=sys.stderr, flush=True)
        status = interrupted_exit()
    sys.exit(status)


def _reader_gone() -> int:
    """The reader of the command's output went away (``| head``, a pager quit): stop quietly, as a program killed by
    SIGPIPE does (Python ignores that signal, so each later write would raise again and the exit end in a
    traceback). Output to a file or a terminal never comes here."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere at exit, not into an error
    return 128 + signal.SIGPIPE


def cutlab() -> None:
    _command("cutlab", "cutlab.cli")


def cutlab_analysis() -> None:
    _command("cutlab-analysis", "cutlab_analysis.__main__")


def as_command(name: str, main: Callable[[], int]) -> None:
    """``main`` run as the command ``name`` is, in a clone, where it is not installed (``python -m analysis``)."""
    _command(name, main)


def cutlab_reproduce() -> None:
    _command("cutlab-reproduce", "cutlab.reproduce")


def cutlab_search() -> None:
    _command("cutlab-search", "cutlab.search.__main__")


def cutlab_eval() -> None:
    _command("cutlab-eval", "cutlab.transfer.cli")
