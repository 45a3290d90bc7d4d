"""What the report writes in ``--out`` must be its own files there: no symbolic link among them.

A report folder may come with a folder of runs from someone else (``cutlab-analysis runs/ --out runs/report``). A
``report.md`` there that links to ``~/.bashrc``, or a ``figures/`` that links to another folder, would have the
report written (and stale figures deleted) through the link, outside --out. ``--out`` itself may be a link: the
user typed it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# report.REPORT, html_report.HTML, report.TABLES_DIR, report.FIGURES_DIR, wandb_source.RECORDS_DIR (named here, so
# that the check runs before the modules that draw, and import matplotlib, are loaded)
OUTPUTS = ("report.md", "report.html", "tables", "figures", "wandb_records")
OUTPUT_FOLDERS = ("tables", "figures")
# how a report.md and a report.html of this command begin: a file of those names that does not is someone's own
REPORT_HEADING = "# cutlab analysis report"
HTML_TITLE = "cutlab report"


def not_ours(out: Path) -> list[Path]:
    """``report.md`` or ``report.html`` in ``out`` that this command did not write (one's notes, another tool's
    report): the report would replace it, and it would be lost."""
    marks = {"report.md": REPORT_HEADING, "report.html": f"<title>{HTML_TITLE}</title>"}
    found = []
    for name, mark in marks.items():
        path = out / name
        if path.is_file() and not path.is_symlink():
            with path.open(encoding="utf-8", errors="replace") as handle:
                if mark not in handle.read(2048):  # the heading is the first line; the title within the <head>
                    found.append(path)
    return found


def raised_writing(error: BaseException, folder: Path) -> bool:
    """Whether ``error`` is the system's refusal of a file under ``folder`` (a read-only part, a full disk)."""
    return isinstance(error, OSError) and bool(error.filename) and \
        Path(error.filename).absolute().is_relative_to(Path(folder).absolute())


def symbolic_links(out: Path) -> list[Path]:
    """The paths the report writes or deletes under ``out`` that are symbolic links."""
    found = [out / name for name in OUTPUTS if (out / name).is_symlink()]
    for folder in OUTPUT_FOLDERS:
        if (out / folder).is_dir() and not (out / folder).is_symlink():
            found += [path for path in sorted((out / folder).iterdir()) if path.is_symlink()]
    return found


STAGING_PREFIX = ".report-"


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A folder inside ``out`` where a report is built whole, removed as the block ends however it ends: an earlier
    report in ``out`` stays as it was until the new one is moved in (``move_into_place``). Built in place, a Ctrl-C
    midway left the earlier report.md beside new tables and figures, and one figure's PNG beside another's PDF.
    Folders left by a process that was killed (its pid gone) are removed first."""
    for old in out.glob(f"{STAGING_PREFIX}*"):
        pid = old.name.removeprefix(STAGING_PREFIX).split("-")[0]
        if old.is_dir() and not old.is_symlink() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def move_into_place(staging: Path, out: Path, last: tuple[str, ...]) -> None:
    """Every file built in ``staging`` renamed to its place in ``out`` (one file system: each rename is whole), the
    files named in ``last`` (the report itself) after the tables and figures it shows, with Ctrl-C held meanwhile."""
    from cutlab.interrupted import ctrl_c_held

    files = sorted((path for path in staging.rglob("*") if path.is_file()),
                   key=lambda path: (path.relative_to(staging).as_posix() in last, str(path)))
    with ctrl_c_held():
        for path in files:
            target = out / path.relative_to(staging)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
