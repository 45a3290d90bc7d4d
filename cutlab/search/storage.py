"""The study's storage: a journal file (default), sqlite, or PostgreSQL (many machines), all with heartbeats.

Heartbeats let a surviving or later worker notice a trial whose worker died (its heartbeat stops), mark it
failed and re-queue its parameters (Optuna's RetryFailedTrialCallback); the retry trains in the same run
folder, so it resumes from the dead trial's checkpoint. Optuna implements heartbeats for its database
storage only; :class:`HeartbeatJournalStorage` adds the same contract to the journal file.
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from cutlab.errors import CutlabError
from cutlab.redaction import redact, scrub, with_encoded_password

try:  # renamed in Optuna 4.9
    from optuna.storages import RetryHeartbeatStaleTrialCallback as RetryCallback
except ImportError:  # pragma: no cover - Optuna < 4.9
    from optuna.storages import RetryFailedTrialCallback as RetryCallback

# heartbeats, retries and stale-trial checks have been "experimental" in Optuna since 2.8-3.0
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

HEARTBEAT_ATTR = "cutlab:heartbeat"  # wall-clock time of the last heartbeat of a running trial
FORMS = "journal:PATH (default: a journal file in the study folder), sqlite:///PATH, or postgresql://USER@HOST:PORT/DB"


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal-file storage plus heartbeats recorded as a trial system attribute."""

    def __init__(self, backend, heartbeat_interval: int, grace_period: int, stale_callback) -> None:
        super().__init__(backend)
        self._interval, self._grace, self._stale_callback = heartbeat_interval, grace_period, stale_callback

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

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
    if url.startswith("journal:"):
        path = Path(url[len("journal:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return HeartbeatJournalStorage(JournalFileBackend(str(path)), interval, grace, retry)
    if url.startswith(("sqlite:", "postgresql:", "postgresql+psycopg2:", "mysql:", "mysql+pymysql:")):
        engine_kwargs = {}
        given, url = url, _with_postgres_driver(with_encoded_password(url))
        if url.startswith("postgresql"):
            engine_kwargs = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        try:
            return _open_database(url, engine_kwargs, interval, grace, retry)
        except ImportError:
            raise CutlabError(f"the storage {redact(given)} needs its database driver: for PostgreSQL "
                              "pip install 'cutlab[postgres]' (psycopg2)") from None
        except Exception as error:
            reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
            raise CutlabError(f"cannot open the search storage {redact(given)}: {scrub(reason, given)}. Start the database and check "
                              "host, port, user and database name, or drop --storage to use the default journal "
                              f"file; accepted forms: {FORMS}") from None
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", url)
    # only the scheme is shown: the rest of an address may hold a password
    raise CutlabError(f"unknown search storage scheme {scheme.group(0) if scheme else '(none)'} (the rest of the "
                      f"address is not shown: it may hold a password); use {FORMS}")


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
    return f"journal:{study_dir / 'optuna.journal'}"


def trial_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name.lower()] = counts.get(trial.state.name.lower(), 0) + 1
    return dict(sorted(counts.items()))
