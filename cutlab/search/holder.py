"""Which storage holds a study folder's study: ``storage.txt`` in the folder, written as the study is first opened.

Before: a study name reused with another storage (``--study st1 --storage sqlite:///a.db``, then ``--study st1``
with the default journal) shared one folder: the second study's report replaced the first's, and its trial 0, which
drew the same parameters, took the first study's complete ``trial-0000`` as its own result without training. A
command whose storage is not the one recorded is now refused before anything runs (also with --dry-run). A folder
from before the record is taken as it is, and gets the record.
"""

from __future__ import annotations

import re
from pathlib import Path

from cutlab.atomic import FOLDER_FAILURES, os_reason, told_for, write_atomic
from cutlab.errors import CutlabError
from cutlab.redaction import HIDDEN, redact
from cutlab.search.folder import FIX, HOLDER, SEARCH_GOES_ON, refuse_foreign
from cutlab.search.storage import DATABASES, default_storage_url, journal_path

WHAT = "the study's storage record"


def storage_identity(url: str) -> str:
    """``url`` as the record keeps it: a journal's or an SQLite file's path made absolute (the same file however the
    command wrote it, from whichever folder), a database's address without its password or its driver's name."""
    if url.startswith("sqlite:///"):
        path, mark, query = url.removeprefix("sqlite:///").partition("?")
        return f"sqlite:///{Path(path).resolve()}{mark}{query}"
    if not url.startswith(DATABASES):
        return str(journal_path(url).resolve())
    return redact(re.sub(r"^([A-Za-z]+)\+[A-Za-z0-9_]+://", r"\1://", url))


def check_holder(study_dir: Path, url: str) -> None:
    """One line where the study folder records another storage than ``url``; nothing where it records none."""
    recorded, given = recorded_storage(study_dir), storage_identity(url)
    if recorded is None or recorded == given:
        return
    if recorded == storage_identity(default_storage_url(study_dir)):
        resume = "drop --storage (and $CUTLAB_STORAGE, search.storage) to resume this one, in its folder's journal"
    else:
        password = " (with its password, e.g. in $CUTLAB_STORAGE)" if HIDDEN in recorded else ""
        resume = f"--storage {recorded}{password} to resume this one"
    raise CutlabError(f"the study folder {study_dir} holds the study {study_dir.name} of the storage {recorded}, and "
                      f"this command's storage is {given}: a study folder holds one study's trials; give --study "
                      f"NEW for a new study, or {resume}")


def record_holder(study_dir: Path, url: str) -> None:
    """Under the study's ask lock, as the study is opened: checked again (another command may have recorded its
    storage since the plan), then recorded where nothing is yet."""
    check_holder(study_dir, url)
    if recorded_storage(study_dir) is not None:
        return
    try:  # whole or not at all
        write_atomic(study_dir / HOLDER, storage_identity(url) + "\n")
    except FOLDER_FAILURES as failure:
        raise told_for(failure, SEARCH_GOES_ON, "paths.runs_dir") from None


def recorded_storage(study_dir: Path) -> str | None:
    """The storage the study folder records, or None (no record, or an empty one); a link or a FIFO is refused."""
    path = study_dir / HOLDER
    refuse_foreign(path, WHAT)
    try:
        return path.read_text(errors="replace").strip() or None
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CutlabError(f"{path} cannot be read ({os_reason(error)}); it is {WHAT}: {FIX}") from None
