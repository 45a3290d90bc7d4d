"""The installed commands' entry points (pyproject's ``[project.scripts]``; ``python -m cutlab`` comes here too).

Each command handles Ctrl-C where it does work (a run checkpoints, a sweep records its runs, cutlab-eval keeps its
evaluations whole). These entry points catch the Ctrl-C that comes before any of that has begun: while torch, pandas
and Hydra import (up to seconds), while a sweep is planned or Hydra starts. That Ctrl-C ended in a traceback and exit
-2; it now ends in one line and 130, like every other. The command's module is imported inside the handler, which is
why this module imports nothing of cutlab at its top.
"""

from __future__ import annotations

import importlib
import signal
import sys


def _command(name: str, module: str) -> None:
    try:
        # numpy first: torch imports it from C and, when that import fails, goes on without it, so a Ctrl-C that
        # landed while torch imported numpy was swallowed and the command ran on to the end as if never stopped.
        # Imported here, that Ctrl-C is a KeyboardInterrupt like any other.
        import numpy  # noqa: F401

        status = importlib.import_module(module).main()
    except KeyboardInterrupt:
        from cutlab.interrupted import interrupted_exit

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while it exits would end in a traceback
        print(f"{name}: interrupted (Ctrl-C); run the same command again to go on", file=sys.stderr, flush=True)
        status = interrupted_exit()
    sys.exit(status)


def cutlab() -> None:
    _command("cutlab", "cutlab.cli")


def cutlab_analysis() -> None:
    _command("cutlab-analysis", "cutlab_analysis.__main__")


def cutlab_reproduce() -> None:
    _command("cutlab-reproduce", "cutlab.reproduce")


def cutlab_search() -> None:
    _command("cutlab-search", "cutlab.search.__main__")


def cutlab_eval() -> None:
    _command("cutlab-eval", "cutlab.transfer.cli")
