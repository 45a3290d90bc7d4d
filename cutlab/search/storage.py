"""The study's storage: a journal file (default), sqlite, or PostgreSQL (many machines), all with heartbeats.

Addresses take Optuna's own forms, so the same string opens the study in optuna-dashboard: a journal file's
path, ``sqlite:///PATH`` or ``postgresql://USER@HOST:PORT/DB``. (``journal:PATH``, cutlab's earlier form, is still
read.) An address in none of these forms stops with one line naming the form it was likely meant to be.

Heartbeats let a surviving or later worker notice a trial whose worker died (its heartbeat stops), mark it
failed and re-queue its parameters (Optuna's RetryFailedTrialCallback); the retry trains in the same run
folder, so it resumes from the dead trial's checkpoint. Optuna implements heartbeats for its database
storage only; :class:`HeartbeatJournalStorage` adds the same contract to the journal file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
import warnings
from pathlib import Path

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from cutlab.atomic import DiskFull, is_disk_full, os_reason, unwritable
from cutlab.errors import CutlabError
from cutlab.redaction import redact, scrub, with_encoded_password
from cutlab.run.records import linked, not_a_file
from cutlab.search.folder import SEARCH_GOES_ON

try:  # renamed in Optuna 4.9
    from optuna.storages import RetryHeartbeatStaleTrialCallback as RetryCallback
except ImportError:  # pragma: no cover - Optuna < 4.9
    from optuna.storages import RetryFailedTrialCallback as RetryCallback

# heartbeats, retries and stale-trial checks have been "experimental" in Optuna since 2.8-3.0
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

HEARTBEAT_ATTR = "cutlab:heartbeat"  # wall-clock time of the last heartbeat of a running trial
FORMS = ("a journal file's path (default: optuna.journal in the study folder), sqlite:///PATH, or "
         "postgresql://USER@HOST:PORT/DB")
DATABASES = ("sqlite:", "postgresql:", "postgresql+psycopg2:", "mysql:", "mysql+pymysql:")
JOURNAL_FIX = ("give a journal file in a folder you can write (--storage PATH), or drop --storage for the study "
               "folder's optuna.journal")


class JournalLock(JournalFileSymlinkLock):
    """Optuna's lock on the journal file (a symlink beside it), released only by the worker that made it.

    A worker stopped while it holds the lock (SIGSTOP, a suspended SLURM job) is taken for gone by the others after
    the lock's grace (30 s), who remove it and go on. Optuna's release, when the stopped worker continues, then
    raised "did not possess lock" (its trial's run failed, its heartbeat thread died) or, had another worker taken the
    lock by then, removed that worker's lock. This one releases the lock only if it is still the one this worker
    made (the same link, by inode and change time); otherwise it leaves it, and says so.
    """

    def __init__(self, filepath: str) -> None:
        super().__init__(filepath)
        self._made: tuple[int, int] | None = None

    def acquire(self) -> bool:
        self._made = None  # acquire() itself releases an abandoned lock (Optuna's own forced release) through release()
        acquired = super().acquire()
        self._made = _link_identity(self._lock_file)
        return acquired

    def release(self) -> None:
        made, self._made = self._made, None
        if made is None:
            return super().release()
        if _link_identity(self._lock_file) != made:
            from cutlab.search.worker import say  # here: the worker imports this module

            say(f"the study's journal lock was taken over while this worker was stopped (past its {self.grace_period} s "
                "grace); its write is in the journal, and the other worker's lock is left in place")
            return
        super().release()


class JournalFile(JournalFileBackend):
    """Optuna's journal file, never written through a link, and read only as a journal.

    A file that is not a journal (another program's, or one a hand edit broke) stops in one line naming it, when it
    is opened: Optuna took a first line it could not read for a record cut short, appended the study's record to the
    file, then raised a JSONDecodeError traceback. A full disk stops in one line too, with any record it cut short
    taken back: the next record, appended after it, would have made one line that no reader parses.
    """

    def __init__(self, file_path: str, lock_obj: JournalLock) -> None:
        self._file_path = file_path
        os.close(self._open(os.O_WRONLY | os.O_CREAT))  # made here: Optuna's open(path, "ab") made a link's target
        super().__init__(file_path, lock_obj)
        # a broken line in the middle stops Optuna's first read; one at either end it read as a record cut short
        if any(line.endswith(b"\n") and not _is_record(line) for line in _end_lines(file_path)):
            raise self._not_a_journal()

    def read_logs(self, log_number_from: int):
        try:
            for log in super().read_logs(log_number_from):
                if not isinstance(log, dict) or "op_code" not in log:
                    raise ValueError(log)
                yield log
        except ValueError:  # json's JSONDecodeError, or a line of JSON that is no record
            raise self._not_a_journal() from None

    def append_logs(self, logs: list[dict]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode()
        try:
            self._lock.acquire()
            try:
                self._append(data)
            finally:
                self._lock.release()
        except OSError as error:
            if is_disk_full(error):
                raise DiskFull(Path(self._file_path), SEARCH_GOES_ON) from None
            raise

    def _append(self, data: bytes) -> None:
        """Optuna's append (one write, then fsync), which takes back what it wrote when the write fails."""
        descriptor = self._open(os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(descriptor).st_size  # under the journal's lock: no other worker appends meanwhile
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view):]
                os.fsync(descriptor)
            except OSError:
                os.ftruncate(descriptor, size)
                raise
        finally:
            os.close(descriptor)

    def _open(self, flags: int) -> int:
        try:  # without waiting: a FIFO made after the checks (check_form) would wait for a reader for ever
            descriptor = os.open(self._file_path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise CutlabError(_linked_journal(Path(self._file_path))) from None
            if error.errno == errno.ENXIO:  # a FIFO with no reader
                raise CutlabError(_foreign_journal(not_a_file(Path(self._file_path)) or self._file_path)) from None
            raise
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise CutlabError(_foreign_journal(not_a_file(Path(self._file_path)) or self._file_path))
        return descriptor

    def _not_a_journal(self) -> CutlabError:
        return CutlabError(f"{self._file_path} is not an Optuna journal (it holds a line that is no journal record); "
                           "move it away, or give the study another journal (--storage FILE, or search.study=<new "
                           "name> for a new study folder), and run the same command again")


def _end_lines(path: str, window: int = 1 << 16) -> tuple[bytes, bytes]:
    """The journal's first and last whole lines (b"" for none): a line still being written has no end yet, and one
    longer than ``window`` is not judged."""
    with open(path, "rb") as journal:
        first = journal.readline(window)
        size = journal.seek(0, os.SEEK_END)
        journal.seek(max(0, size - window))
        tail = journal.read()
    lines = tail.splitlines(keepends=True)
    whole = len(lines) > 1 or size <= window  # the window's first line may be the end of a longer one
    return first, lines[-1] if lines and whole and lines[-1].endswith(b"\n") else b""


def _is_record(line: bytes) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "op_code" in record


def _linked_journal(path: Path) -> str:
    return _foreign_journal(linked(path))


def _foreign_journal(problem: str) -> str:
    return (f"the search storage {problem}; a journal is written only as a file of its own: remove it, or give "
            "the file itself (--storage FILE), and run the same command again")


def _link_identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_ctime_ns


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal-file storage plus heartbeats recorded as a trial system attribute."""

    def __init__(self, backend, heartbeat_interval: int, grace_period: int, stale_callback) -> None:
        super().__init__(backend)
        self._interval, self._grace, self._stale_callback = heartbeat_interval, grace_period, stale_callback
        self._missed = False  # a beat was lost to a full disk, and said so (once, until one is recorded again)

    def record_heartbeat(self, trial_id: int) -> None:
        # a trial given up while its worker was stopped past the grace (SIGSTOP, a suspended SLURM job) is finished:
        # its worker hands it over at its next epoch (cutlab/search/worker.py); until then its beats go nowhere
        trial = self.get_trial(trial_id)
        if trial.state.is_finished():
            return
        try:
            self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())
        except UpdateFinishedTrialError:  # given up between the check and the beat
            pass
        except DiskFull as full:  # Optuna beats from a thread of its own: raised there, it printed the thread's
            self._say_missed(trial.number, full)  # traceback and ended the beats for good
        else:
            self._missed = False

    def _say_missed(self, number: int, full: DiskFull) -> None:
        if self._missed:
            return
        from cutlab.search.worker import say  # here: the worker imports this module

        self._missed = True
        say(f"trial {number}'s heartbeat was not recorded: no space left on the device holding {full.path.parent}; "
            f"the trial goes on and beats again once there is space (after {self._grace} s without a beat, other "
            "workers take it for dead)")

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = trial.system_attrs.get(HEARTBEAT_ATTR)
            if beat is None and trial.datetime_start is not None:
                beat = trial.datetime_start.timestamp()
            if beat is not None and now - beat > self._grace:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self._interval

    def get_heartbeat_stale_trial_callback(self):
        return self._stale_callback


def open_storage(url: str, heartbeat: dict):
    """Open (creating if needed) the storage at ``url``; a storage that cannot be reached stops here, clearly."""
    interval, grace = int(heartbeat["interval_s"]), int(heartbeat["grace_s"])
    # a dead worker's trial is re-queued with the same parameters, at most max_retry times
    retry = RetryCallback(max_retry=heartbeat.get("max_retry", 3))
    check_form(url)
    if not url.startswith(DATABASES):
        path = journal_path(url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            backend = JournalFile(str(path), JournalLock(str(path)))
        except OSError as error:  # checked by check_form; here what changed since, or what only trying tells
            if is_disk_full(error):
                raise DiskFull(path, SEARCH_GOES_ON) from None
            raise CutlabError(f"the search storage {path} cannot be opened ({os_reason(error)}); "
                              f"{JOURNAL_FIX}") from None
        return HeartbeatJournalStorage(backend, interval, grace, retry)
    engine_kwargs = {}
    given, url = url, _with_postgres_driver(with_encoded_password(url))
    if url.startswith("postgresql"):
        engine_kwargs = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        return _open_database(url, engine_kwargs, interval, grace, retry)
    except ImportError:
        driver = ("pip install 'cutlab[postgres]' (psycopg2)" if url.startswith("postgresql") else
                  "pip install pymysql and write mysql+pymysql://USER@HOST:PORT/DB (Optuna's MySQL form; cutlab's "
                  "tests run PostgreSQL, not MySQL)")
        raise CutlabError(f"the storage {redact(given)} needs its database driver: {driver}") from None
    except Exception as error:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        raise CutlabError(f"cannot open the search storage {redact(given)}: {scrub(reason, given)}. Start the database and check "
                          "host, port, user and database name, or drop --storage to use the default journal "
                          f"file; accepted forms: {FORMS}") from None


def check_form(url: str) -> None:
    """A storage address in one of Optuna's forms, else one line naming the fix; a journal file's path also where a
    file can be written (_check_journal_path). Only the scheme of a wrong address is quoted: the rest may hold a
    password."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    if scheme is None or url.startswith("journal:") or len(scheme.group(1)) == 1 and "://" not in url:
        # a journal file's path (C:\\... is a drive letter, not a scheme)
        return _check_journal_path(journal_path(url))
    name = scheme.group(1).lower()
    if url.startswith(DATABASES):
        if name == "sqlite" and not url.startswith("sqlite:///"):
            raise CutlabError(f"the search storage {url} has too few slashes: a SQLite file is sqlite:///PATH "
                              "(three slashes, then a relative path; four for an absolute one, sqlite:////abs/file.db)")
        if name == "sqlite" and _in_memory(url):
            raise CutlabError(f"the search storage {url} is a database in memory: each worker process would have its "
                              "own, and it is gone when the command ends (nothing to resume, no report); give a file, "
                              "sqlite:///PATH, or drop --storage for the study folder's journal")
        if name == "sqlite" and (file := url.removeprefix("sqlite:///")).startswith("~"):  # SQLite made a folder ~
            raise CutlabError(f"the search storage {url}: SQLite takes ~ as written, a folder named ~ here; write the "
                              f"path out: sqlite:///{Path(file).expanduser()}")
        if name != "sqlite" and not url.startswith(f"{scheme.group(0)}//"):
            raise CutlabError(f"the search storage scheme {scheme.group(0)} needs '//' after it: "
                              f"{scheme.group(0)}//USER@HOST:PORT/DB")
        return
    fix = {"postgres": "postgresql://USER@HOST:PORT/DB (SQLAlchemy spells PostgreSQL postgresql://)",
           "file": "the journal file's path itself, without file://"}.get(name, FORMS)
    raise CutlabError(f"unknown search storage scheme {scheme.group(0)} (the rest of the address is not shown: it "
                      f"may hold a password); use {fix}")


def _in_memory(url: str) -> bool:
    """An SQLite address of a database held in memory: no path (``sqlite:///``), ``:memory:`` or a URI's
    ``mode=memory``. Before: accepted, and the heartbeat thread's traceback (no such table) ended in an empty report."""
    path, _, query = url.removeprefix("sqlite:///").partition("?")
    return not path or ":memory:" in path or re.search(r"(?i)(^|&)mode=memory(&|$)", query) is not None


def journal_path(url: str) -> Path:
    return Path(url[len("journal:"):] if url.startswith("journal:") else url).expanduser()


def _check_journal_path(path: Path) -> None:
    """A journal that is a link or a folder, or whose folder cannot be made or written (a read-only mount, /proc):
    one line (it was Optuna's IsADirectoryError or FileNotFoundError traceback as the search began, and a link's
    target had the study's record appended). Makes nothing."""
    if path.is_symlink():
        raise CutlabError(_linked_journal(path))
    if path.is_dir():
        raise CutlabError(f"the search storage {path} is a folder, not a journal file; give a file's path, e.g. "
                          f"--storage {path / 'optuna.journal'}")
    problem = not_a_file(path)  # a FIFO (opening it for writing waited for a reader for ever), a device
    if problem:
        raise CutlabError(_foreign_journal(problem))
    problem = unwritable(path.parent)
    if problem:
        raise CutlabError(f"the search storage {path} cannot be written: {problem}; {JOURNAL_FIX}")


def _open_database(url: str, engine_kwargs: dict, interval: int, grace: int, retry, attempts: int = 5) -> RDBStorage:
    """RDBStorage, retried when workers starting together race to create the same tables on a fresh database."""
    import sqlalchemy.exc

    for attempt in range(attempts):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=interval, grace_period=grace,
                              heartbeat_stale_trial_callback=retry)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def _with_postgres_driver(url: str) -> str:
    """SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; cutlab's extra installs psycopg2: name it."""
    if not url.startswith("postgresql://"):
        return url
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return url
    return "postgresql+psycopg2://" + url[len("postgresql://"):]


def default_storage_url(study_dir: Path) -> str:
    return str(study_dir / "optuna.journal")  # a plain path: optuna-dashboard opens it as it is


ERROR = "error"  # the user attribute of a trial that failed as a result (its run raised): counted, not re-queued


def trial_counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state; a trial failed only because its worker stopped or died, its parameters queued again (Optuna
    records it FAIL), is ``requeued``, not ``fail``: nothing failed."""
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        state = trial.state.name.lower()
        state = "requeued" if state == "fail" and ERROR not in trial.user_attrs else state
        counts[state] = counts.get(state, 0) + 1
    return dict(sorted(counts.items()))


def counts_text(counts: dict[str, int]) -> str:
    """``trial_counts`` as a person reads it: ``1 requeued, 1 waiting``, or ``none``."""
    return ", ".join(f"{number} {state}" for state, number in counts.items()) or "none"
