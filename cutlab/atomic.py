"""Files written whole or not at all: a temporary file unique to this process, then a rename over the target.

A crash leaves the previous version intact; a failure (a full disk, a folder turned read-only, deleted or moved
meanwhile) removes the temporary file and names the problem in one line instead of a chained traceback.
"""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from cutlab.errors import CutlabError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
_UMASK = os.umask(0o022)  # read once (it can only be read by setting it) and put back at once
os.umask(_UMASK)


RUN_GOES_ON = "the run resumes from its last checkpoint"


class DiskFull(CutlabError):
    """No space (or quota) left where a command writes. ``then``: what the same command does once there is space;
    ``elsewhere``: the setting that writes to another disk instead ("" where there is none)."""

    def __init__(self, path: Path, then: str = RUN_GOES_ON, elsewhere: str = "paths.runs_dir") -> None:
        self.path = Path(path)
        instead = f" (or point {elsewhere} elsewhere)" if elsewhere else ""
        super().__init__(f"no space left on the device holding {self.path.parent} (while writing {self.path.name}); "
                         f"free space there{instead} and run the same command again: {then}")


class _FolderFailure(CutlabError, OSError):
    """A write its folder refused, in one line; still the OSError it was (errno, the file's name), so that a caller
    naming its own fix for one (the analysis's "pass a writable --out") goes on doing so."""

    def __init__(self, path: Path, number: int, message: str) -> None:
        OSError.__init__(self, number, os.strerror(number), str(path))
        self.path, self.message = Path(path), message

    def __str__(self) -> str:
        return self.message


class FolderUnwritable(_FolderFailure):
    """The folder a command writes into stopped taking files while it ran: its file system remounted read-only (ext4's
    errors=remount-ro after a disk error), its permissions taken away. ``then`` as for DiskFull."""

    def __init__(self, path: Path, error: OSError, then: str = RUN_GOES_ON) -> None:
        became = "became read-only" if error.errno == errno.EROFS else "can no longer be written"
        super().__init__(path, error.errno, f"{Path(path).parent} {became} while this command wrote {Path(path).name} "
                         f"there ({os_reason(error)}); make it writable and run the same command again: {then}")
        self.cause = error


class FolderVanished(_FolderFailure):
    """The folder a command writes into was deleted or moved (renamed) while it ran. ``then``: what the same command
    does once the folder is back (None: a run's words, which also say what it does without it)."""

    def __init__(self, path: Path, then: str | None = None) -> None:
        fix = (f"move the folder back and run the same command again: {then}" if then else "run the same command "
               "again: it starts the run there anew (or move the folder back first, and it resumes from the folder's "
               "last checkpoint)")
        super().__init__(path, errno.ENOENT, f"{Path(path).parent} vanished or was moved while this command wrote "
                         f"{Path(path).name} there; {fix}")


#: the folder's own failures: the run's record cannot be written, so its summary cannot say why either
FOLDER_FAILURES = (DiskFull, FolderUnwritable, FolderVanished)


def told_for(error: CutlabError, then: str, elsewhere: str = "") -> CutlabError:
    """A folder failure in the words of a command that is not a run (an evaluation, a search): ``then`` and
    ``elsewhere`` as for DiskFull. Any other error as it was."""
    if isinstance(error, DiskFull):
        return DiskFull(error.path, then, elsewhere)
    if isinstance(error, FolderUnwritable):
        return FolderUnwritable(error.path, error.cause, then)
    if isinstance(error, FolderVanished):
        return FolderVanished(error.path, then)
    return error


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE


def write_failure(path: Path, error: BaseException | None) -> CutlabError | None:
    """The one line for a write of ``path`` that ``error`` stopped for a reason outside the command (a full disk, a
    folder turned read-only, deleted or moved), or None for any other error."""
    if is_disk_full(error):
        return DiskFull(path)
    if isinstance(error, OSError) and error.errno in NOT_WRITABLE:
        return FolderUnwritable(path, error)
    if isinstance(error, FileNotFoundError) and not Path(path).parent.is_dir():
        return FolderVanished(path)
    return None


class _RecordingFile:
    """A file that remembers the OSError of a failed write: torch.save reports it only as a RuntimeError."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.error = handle, None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.handle.flush()


@contextmanager
def atomic_file(path: Path) -> Iterator[_RecordingFile]:
    """A binary file to write ``path``'s new content into; renamed over ``path`` when the block ends normally."""
    path = Path(path)
    try:
        descriptor, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise write_failure(path, error) or error
    os.fchmod(descriptor, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the record from other readers
    handle = os.fdopen(descriptor, "wb")
    recording = _RecordingFile(handle)
    try:
        with handle:
            yield recording
        os.replace(tmp, path)
    except BaseException as error:
        try:
            Path(tmp).unlink(missing_ok=True)
        except OSError:  # its folder turned read-only: the next lock of the folder removes it (cutlab.run.lock)
            pass
        failure = write_failure(path, error) or write_failure(path, recording.error)
        if failure is not None:
            raise failure from None
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file and a rename, so a crash never leaves a half-written file."""
    with atomic_file(path) as handle:
        handle.write(text.encode())


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be made or take files (``read-only file system``), or None when it can. Probed by making
    and at once removing a folder in it, or in its nearest existing parent: os.access says yes to root on a read-only
    mount, and nothing but trying tells /proc or /sys apart. Leaves nothing behind."""
    folder = Path(folder).expanduser().absolute()
    existing = next(part for part in (folder, *folder.parents) if part.exists() or part.is_symlink())
    if problem := not_a_folder(existing):
        return problem
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=existing))
    except OSError as error:
        # an existing folder that answers "no such file" to a new entry is a kernel's view (/proc, /sys)
        reason = "takes no new files (a virtual file system)" if error.errno == errno.ENOENT else os_reason(error)
        return reason if existing == folder else f"{existing}: {reason}"
    return None


def not_a_folder(path: Path) -> str | None:
    """Why ``path`` can be no folder (``<path> is a file``, or a symbolic link to nothing, where a mkdir fails with
    "file exists"), or None: a folder, a link to one, or nothing there."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{path} is a file"
    return None


def os_reason(error: OSError) -> str:
    """What the system said, as a message's parenthesis: ``read-only file system``, ``permission denied``."""
    return os.strerror(error.errno).lower() if error.errno else str(error) or type(error).__name__
