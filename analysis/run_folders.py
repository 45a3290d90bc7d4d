"""Which folders under a folder given to the analysis are run folders, and which links it passes over."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cutlab.core.progress import Meter
from cutlab.run.records import CONFIG, EVAL, HISTORY, SUMMARY, linked

#: a directory holding any of these files is a run folder
RECORD_FILES = (SUMMARY, CONFIG, EVAL, HISTORY)
QUIET_EVERY_S = 10.0  # between the lines of a long read or drawing (quiet_meter)
#: directories never searched for runs (W&B's offline folders, caches)
SKIP_DIRS = {"wandb", "__pycache__", ".hydra", ".cache"}


class AnalysisError(Exception):
    """Bad input to the analysis (missing or empty folder, no run records): the message names the fix."""


def find_run_dirs(root: Path, links: list[str] | None = None) -> list[Path]:
    """The run folders under ``root`` (``root`` itself if it is one); clear errors when there are none. ``links``
    gets ``<path> is a symbolic link (to <target>)`` for each folder link the search passes over (a run folder
    linked in from elsewhere is not this folder's run: it was left out without a word)."""
    if not root.exists():
        raise AnalysisError(f"{root} does not exist; pass the folder that holds the run records "
                            "(the runs_dir of python -m cutlab, e.g. runs/ or $CUTLAB_RUNS_DIR)")
    if not root.is_dir():
        raise AnalysisError(f"{root} is a file, not a folder; pass the folder that holds the run records")
    if not any(root.iterdir()):
        raise AnalysisError(f"{root} is empty: there are no run records to analyse; train some first "
                            f"(CUTLAB_RUNS_DIR={root} python -m cutlab ...) or pass the folder that holds them")
    found = []
    for current, dirs, files in os.walk(root):
        if any(name in files for name in RECORD_FILES):
            found.append(Path(current))
        # on into a run folder's subfolders too: a run written into another's folder (run_name=.) is still found
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        if links is not None:  # os.walk does not follow them
            links += [linked(Path(current, d)) for d in dirs if os.path.islink(os.path.join(current, d))]
    if not found:
        raise AnalysisError(f"{root} holds no run records (no folder with {SUMMARY} or {CONFIG}); pass the "
                            "folder that python -m cutlab wrote its runs into")
    return found


def quiet_meter(label: str, total: int, unit: str, continues: bool = False) -> Meter:
    """Lines of ``done/total``, rate and time left every 10 s, none before: a folder of a few runs reads in a second,
    one of hundreds took 30 s with nothing said (call ``update`` with what is done before each item, never with the
    total, so that a quick pass prints nothing at all). ``continues``: a later phase of the same analysis, whose 10 s
    count from the last line of the phases before it (or their start), not its own start: reading runs and drawing
    figures had kept up to 20 s of silence between them."""
    meter = _QuietMeter(label, total, unit, bar=False, prefix="cutlab-analysis: ", every_s=QUIET_EVERY_S,
                        first_line=False)
    if continues and _SAID:
        meter.last = _SAID[0]
    else:
        _SAID[:] = [meter.started]
    return meter


_SAID: list[float] = []  # when the analysis's phases last said something, or the first one began


class _QuietMeter(Meter):
    def _print(self, text: str) -> None:
        super()._print(text)
        _SAID[:] = [time.perf_counter()]

