"""A run folder whose record files are not all regular files is refused before any of them is read.

cutlab writes every record file as a regular file (cutlab.atomic); one that is a symbolic link or a FIFO came from
elsewhere. Reading it would read another file as the run's, never end (a link to /dev/zero) or wait for a writer for
ever (a FIFO), so the run is kept in the runs frame as ``unsupported``, with the file named, and nothing else of it
is read.
"""

from __future__ import annotations

from pathlib import Path

from cutlab.run.records import CONFIG, EVAL, HISTORY, PROVENANCE, SAMPLE_LOSSES, SUMMARY, not_a_file

#: the record files the analysis reads (collect, history, provenance, the figures' sample losses)
READ = (SUMMARY, CONFIG, EVAL, HISTORY, SAMPLE_LOSSES, PROVENANCE)


def refused_problem(run_dir: Path) -> str | None:
    """Why the run is refused, naming its first record file that is not a regular file; None if all are (or absent)."""
    problems = [problem for problem in (not_a_file(run_dir / name) for name in READ) if problem]
    if not problems:
        return None
    return (f"{problems[0]}: not a record file cutlab wrote, so nothing of the run is read; put the run's own file "
            "there, or move the run folder out of the analysed folders")
