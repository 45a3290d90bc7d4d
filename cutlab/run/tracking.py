"""Weights & Biases logging, offline by default, imported only when used (``import wandb`` costs ~0.5 s)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from cutlab.errors import CutlabError
from cutlab.redaction import redact_values, redacted_argv

MODES = ("offline", "online", "disabled")
# A cache folder the user chose is kept; otherwise each run's W&B cache lives in that run's own folder.
USER_CACHE_DIR = os.environ.get("WANDB_CACHE_DIR")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise CutlabError(f"wandb.mode must be one of {', '.join(MODES)}, got {mode!r}")


class ServiceStart:
    """W&B's service process, started in a background thread so that its start-up (~0.2 s of waiting for a
    child process) overlaps the building of the task; ``Tracker`` waits for it before ``wandb.init``.

    ``import wandb`` itself runs here, in the calling thread: the thread only starts the service, which
    imports nothing. A failure to start surfaces from ``wait()``, i.e. from the Tracker, as W&B raised it.
    """

    def __init__(self, mode: str, run_dir: Path) -> None:
        _check_mode(mode)
        self.mode = mode
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._new_cache: Path | None = None  # the cache folder this start creates in the run folder, if any
        if mode == "disabled":
            return
        cache = Path(USER_CACHE_DIR or run_dir / "wandb" / "cache")
        if not USER_CACHE_DIR and not cache.exists():
            self._new_cache = cache
        os.environ["WANDB_CACHE_DIR"] = str(cache)
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        # The mode goes to W&B's process-wide settings too: W&B reads it there to keep its own usage
        # telemetry off in offline mode (passed to init alone, an offline run imports requests and
        # OpenTelemetry, ~0.1 s, and later probes the server).
        settings = wandb.Settings(mode=mode)
        self._thread = threading.Thread(target=self._start, args=(wandb, settings), name="wandb-setup", daemon=True)
        self._thread.start()

    def _start(self, wandb, settings) -> None:
        try:
            wandb.setup(settings=settings)
        except BaseException as error:  # handed to the main thread by wait()
            self._error = error

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error

    def abandon(self) -> None:
        """The run stopped before its Tracker existed: stop the service and remove the log folder it began in
        the run folder, so that a run refused at the door leaves nothing behind (W&B's error, if any, is moot)."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        import wandb

        wandb.teardown()
        if self._new_cache is not None:
            shutil.rmtree(self._new_cache, ignore_errors=True)
            with contextlib.suppress(OSError):
                self._new_cache.parent.rmdir()  # <run_dir>/wandb, when the cache was all it held


class Tracker:
    """A W&B run in the run folder (``<run_dir>/wandb``), resumable by id; a no-op when disabled.

    ``service``: a ``ServiceStart`` begun earlier for this run (else one is started here and waited for).
    """

    def __init__(self, mode: str, run_dir: Path, name: str, config: dict, project: str, entity: str | None,
                 group: str | None, tags: list[str], run_id: str | None, service: ServiceStart | None = None) -> None:
        _check_mode(mode)
        self.run = None
        self.mode = mode
        if mode == "disabled":
            return
        (service or ServiceStart(mode, run_dir)).wait()
        import wandb

        with redacted_argv():  # W&B records the command line in the run's metadata
            self.run = wandb.init(
                mode=mode, dir=str(run_dir), name=name, config=redact_values(config), project=project,
                entity=entity, group=group, tags=list(tags), id=run_id, resume="allow" if run_id else None,
                reinit="create_new",
            )

    @property
    def run_id(self) -> str | None:
        return self.run.id if self.run else None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run:
            self.run.log(metrics, step=step)

    def log_table(self, key: str, rows: list[dict[str, Any]]) -> None:
        if self.run and rows:
            import wandb

            columns = list(rows[0])
            self.run.log({key: wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])})

    def summarize(self, summary: dict[str, Any]) -> None:
        """Mirror summary.json in the W&B summary, nested dicts flattened to ``feasibility/status`` keys, so that
        analysis can rebuild summary.json from W&B alone (analysis.wandb_source)."""
        if self.run:
            for key, value in flat_summary(summary).items():
                self.run.summary[key] = value

    def finish(self, failed: bool = False) -> None:
        if self.run:
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None


SUMMARY_SEPARATOR = "/"  # W&B's own grouping separator in its UI


def flat_summary(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"feasibility": {"status": "feasible"}}`` -> ``{"feasibility/status": "feasible"}``; scalars, None and
    lists of scalars kept, anything else (objects W&B cannot hold as a summary value) dropped."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_summary(value, name + SUMMARY_SEPARATOR))
        elif value is None or isinstance(value, (int, float, str, bool)):
            flat[name] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str, bool)) for v in value):
            flat[name] = list(value)
    return flat
