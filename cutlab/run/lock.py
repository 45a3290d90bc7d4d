"""One writer per run folder: an OS advisory lock on ``<run_dir>/.lock``, released by the OS when its holder dies.

A second process on the same folder refuses at once, in one line naming the holder's process id and host,
instead of writing the same files at the same time (interleaved history, a crash on a shared temporary file).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from pathlib import Path

from cutlab.atomic import DiskFull, is_disk_full
from cutlab.errors import CutlabError
from cutlab.run.records import linked

LOCK = ".lock"


class RunFolderBusy(CutlabError):
    """Another live process holds the run folder (``holder`` names it: process id and host)."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def _holder(descriptor: int) -> str:
    """What the lock's holder wrote in it: ``process P on HOST``."""
    return os.read(descriptor, 200).decode(errors="replace").strip() or "another process"


def live_holder(run_dir: Path) -> str | None:
    """The process writing ``run_dir`` now (``process P on HOST``), or None: a probe of its lock that takes nothing
    (a run folder whose summary says running may have a live writer, such as an earlier sweep's SLURM job, or none)."""
    path = Path(run_dir) / LOCK
    try:  # a link or a FIFO in a folder from elsewhere is no lock: never followed, never waited on
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(descriptor)
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return None
    finally:
        os.close(descriptor)


def open_lock_file(path: Path, refusal: str) -> int:
    """``path`` opened to be locked (made if missing), never a link's target: a folder from elsewhere holding
    ``.lock -> ~/thesis.tex`` had that file truncated and overwritten by the same command that merely skipped its
    run. A link or a folder is refused in one line: its name, then ``refusal``."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EISDIR):
            raise
        raise CutlabError(f"{linked(path) or f'{path} is a folder'}{refusal}") from None


class RunLock:
    """Hold ``run_dir``'s lock from ``acquire()`` to ``release()`` (or the end of a ``with`` block).

    The folder is created if needed; ``release`` removes the lock file, and the folders too (the run's and any
    parents, such as ``runs/``) that this lock created and nothing else was written to (a run refused at the door
    leaves nothing behind).
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.path = Path(run_dir), Path(run_dir) / LOCK
        self._descriptor: int | None = None
        self._created: list[Path] = []  # the folders acquire() made, deepest first

    def acquire(self) -> RunLock:
        self._created = [folder for folder in (self.run_dir, *self.run_dir.parents) if not folder.exists()]
        try:
            return self._lock()
        except (OSError, DiskFull):  # a folder that cannot be written (a read-only mount; the caller names it), a
            self._remove_created_folders()  # full disk: nothing left
            raise

    def _lock(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            descriptor = self._open()
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(descriptor)
                os.close(descriptor)
                self._remove_created_folders()
                raise RunFolderBusy(f"{self.run_dir} is being written by {holder}; wait for it to end (or stop it), "
                                    "then run the same command again: a run folder takes one writer at a time",
                                    holder) from None
            if self._still_the_lock_file(descriptor):
                break
            os.close(descriptor)  # its holder removed the file while we waited for it: lock the new one
        try:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
        except OSError as error:  # a full disk: the lock file (ours, locked) goes, so its folder can too
            self.path.unlink(missing_ok=True)
            os.close(descriptor)
            raise DiskFull(self.path) if is_disk_full(error) else error
        self._descriptor = descriptor
        self._remove_stale_temporaries()
        return self

    def _open(self) -> int:
        try:
            return open_lock_file(self.path, ", not a lock file cutlab wrote; remove it and run the same command again")
        except CutlabError:
            self._remove_created_folders()
            raise

    def _remove_stale_temporaries(self) -> None:
        """The temporary files of record writes that a kill cut short (cutlab.atomic): with the lock held, no writer of
        this folder is alive, so they are partial copies nobody will finish (a checkpoint's are megabytes each)."""
        for stale in self.run_dir.glob(".*.tmp"):
            try:
                stale.unlink()
            except OSError:
                pass

    def _still_the_lock_file(self, descriptor: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._descriptor is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # removed while still held: a waiter then sees a stale file and retries
        except OSError:  # the folder turned read-only (the run's error names it): closing still ends the lock, and
            pass  # the file left is locked afresh by the next run
        os.close(self._descriptor)
        self._descriptor = None
        self._remove_created_folders()

    def _remove_created_folders(self) -> None:
        for folder in self._created:
            try:
                folder.rmdir()
            except OSError:
                return  # the run wrote its record there (or another run shares the parent): kept
        self._created = []

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
