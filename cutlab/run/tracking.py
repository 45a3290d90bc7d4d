"""Weights & Biases logging, offline by default, imported only when used (``import wandb`` costs ~0.5 s)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from cutlab.config.checks import WANDB_MODES as MODES
from cutlab.errors import CutlabError
from cutlab.redaction import redact_values, redacted_argv
from cutlab.run.records import read_summary

# W&B's folders outside wandb.init's dir: its service logs (cache), the data folder where it stages each logged
# table as an artifact file (left there offline, for `wandb sync`) and where artifacts download. By default they
# are ~/.cache/wandb, ~/.local/share/wandb and ./artifacts; each run's go to its own wandb/ folder instead, so
# that its record is self-contained and nothing piles up in the user's home. A folder the user chose is kept
# (read at import: cutlab sets these variables itself, run after run in one process).
RUN_WANDB_DIRS = {"WANDB_CACHE_DIR": "cache", "WANDB_DATA_DIR": "data", "WANDB_ARTIFACT_DIR": "artifacts"}
USER_WANDB_DIRS = {variable: os.environ.get(variable) for variable in RUN_WANDB_DIRS}


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
        self._new_dirs: list[Path] = []  # the folders this start creates in the run folder
        self._previous = {variable: os.environ.get(variable) for variable in RUN_WANDB_DIRS}
        if mode == "disabled":
            return
        for variable, name in RUN_WANDB_DIRS.items():
            folder = Path(USER_WANDB_DIRS[variable] or (run_dir / "wandb" / name).absolute())
            if not USER_WANDB_DIRS[variable] and not folder.exists():
                self._new_dirs.append(folder)
            os.environ[variable] = str(folder)
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

    def restore_environment(self) -> None:
        """The WANDB_*_DIR variables as they were before this run: a process started later (a sweep's next worker)
        must not take this run's folders for folders the user chose."""
        for variable, value in self._previous.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value

    def abandon(self) -> None:
        """The run stopped before its Tracker existed: stop the service and remove the folders it began in the
        run folder, so that a run refused at the door leaves nothing behind (W&B's error, if any, is moot)."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        import wandb

        wandb.teardown()
        self.restore_environment()
        for folder in self._new_dirs:
            shutil.rmtree(folder, ignore_errors=True)
        if self._new_dirs:
            with contextlib.suppress(OSError):
                self._new_dirs[0].parent.rmdir()  # <run_dir>/wandb, when these were all it held


def _service_gone() -> tuple[type[BaseException], ...]:
    """What a call raises when W&B's service process is gone: its socket reset (OSError), its mailbox closed."""
    from wandb.sdk.mailbox.mailbox import MailboxClosedError
    from wandb.sdk.mailbox.mailbox_handle import HandleAbandonedError

    return OSError, MailboxClosedError, HandleAbandonedError


# W&B's words for a server it could not reach (the login advice does not help there)
UNREACHABLE = ("dial tcp", "no such host", "connection refused", "network is unreachable")


class Tracker:
    """A W&B run in the run folder (``<run_dir>/wandb``), resumable by id; a no-op when disabled.

    ``service``: a ``ServiceStart`` begun earlier for this run (else one is started here and waited for);
    ``start_step``: the training step a resumed session starts from (its checkpoint's).
    """

    def __init__(self, mode: str, run_dir: Path, name: str, config: dict, project: str, entity: str | None,
                 group: str | None, tags: list[str] | None, run_id: str | None, service: ServiceStart | None = None,
                 start_step: int = 0) -> None:
        _check_mode(mode)
        self.run = None
        self._run_id = run_id  # kept when W&B's service is gone: the resumed session continues this W&B run
        self.mode = mode
        self._run_dir = run_dir
        self._last_step = start_step  # W&B's offline session starts at step 0 again: the earlier sessions' steps
        self._service: ServiceStart | None = None
        if mode == "disabled":
            return
        self._service = service or ServiceStart(mode, run_dir)
        self._service.wait()
        import wandb

        if mode == "online":  # W&B says nothing while it retries an unreachable server
            print("[cutlab] W&B: starting the online run (a server out of reach takes W&B about 100 s to give up; "
                  "WANDB_INIT_TIMEOUT=SECONDS shortens it)", file=sys.stderr, flush=True)
        try:
            with redacted_argv():  # W&B records the command line in the run's metadata
                self.run = wandb.init(
                    mode=mode, dir=str(run_dir), name=display_name(name, config),
                    config={**redact_values(config), RUN_FOLDER_KEY: name}, project=project,
                    entity=entity, group=group, id=run_id, resume="allow" if run_id else None, reinit="create_new",
                    tags=list(tags or []) or None,  # not []: an empty list overrode W&B's own $WANDB_TAGS; null
                    # (what ~wandb.tags's advice leads to) is no tags, as the checks take it
                )
        except wandb.errors.Error as error:  # online: no API key, a refused key, an unreachable server
            wandb.teardown()  # W&B's "Find logs at" lines now, not after the one line below
            self._service.restore_environment()
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
            unreachable = any(text in reason.lower() for text in UNREACHABLE)
            fix = ("this machine did not reach W&B's server: check its network (and WANDB_BASE_URL, where set)"
                   if unreachable else "run `wandb login` (or set WANDB_API_KEY)")
            raise CutlabError(f"W&B could not start this run (wandb.mode={mode}): {reason}; {fix} and run the same "
                              f"command again, or log offline (wandb.mode=offline, the default; upload later with "
                              f"wandb sync) or not at all (wandb.mode=disabled)") from None
        self._run_id = self.run.id
        # the keys the earlier session mirrored, those of the summary.json this session replaces: a resumed
        # offline run's W&B summary starts empty, yet W&B merges the sessions' summaries
        self._mirrored = set(flat_summary(read_summary(run_dir) or {})) if run_id else set()
        # each section plotted against its own axis in W&B's UI: training curves against the step, the
        # evaluation against gamma_test (the noise level of Fig. 3/4, not a time)
        self.run.define_metric(STEP_KEY)
        for section in (*LAYER_SECTIONS.values(), TRAIN_SECTION):
            self.run.define_metric(f"{section}/*", step_metric=STEP_KEY)
        self.run.define_metric(GAMMA_KEY)
        self.run.define_metric(f"{EVAL_SECTION}/*", step_metric=GAMMA_KEY)

    @contextlib.contextmanager
    def _while_service_lives(self) -> Iterator[None]:
        """W&B mirrors the run record; it must not end the run. Its service is a process of its own, and SLURM's
        scancel (or a preemption) signals every process of the job: the service is gone at once, while the run
        still has to reach its next step boundary to checkpoint and stop as interrupted (cutlab.run.preemption).
        A call that finds the service gone drops W&B for the rest of the run, in one line."""
        try:
            yield
        except _service_gone() as error:
            from cutlab.atomic import is_disk_full

            why = ("W&B cannot write its files: no space left on the device" if is_disk_full(error) else
                   f"W&B's service is gone ({type(error).__name__}: {error})")
            print(f"[cutlab] {why}; the run goes on without W&B (its own record, in {self._run_dir}, keeps "
                  "everything W&B would)", file=sys.stderr, flush=True)
            self.run = None
            import wandb

            with contextlib.suppress(Exception):  # a fresh service for the next run of this process
                wandb.teardown()

    @property
    def run_id(self) -> str | None:
        """The W&B run's id (None with W&B disabled), also once its service is gone."""
        return self._run_id

    @property
    def url(self) -> str | None:
        """The run's page on the W&B server (online only: an offline run has none until ``wandb sync``)."""
        return self.run.url if self.run and self.mode == "online" else None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """One history.csv row at training step ``step``, its keys in W&B sections (``wandb_key``)."""
        if self.run:
            with self._while_service_lives():
                self.run.log({STEP_KEY: step, **{wandb_key(k): v for k, v in metrics.items()}}, step=step)
            self._last_step = step

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        if self.run and rows:
            import wandb

            columns = list(rows[0])
            with self._while_service_lives():
                self.run.log({key: wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])},
                             step=step)

    def log_evaluation(self, rows: list[dict[str, Any]]) -> None:
        """eval.csv's rows (cutlab.run.records.evaluation_rows) three ways: the table ``eval`` (analysis reads it back),
        one W&B step per gamma_test with the last layer's metric and loss per split as scalars
        (``eval/test/rmse`` against ``eval/gamma_test``), and a line plot of the metric against gamma_test."""
        if not self.run or not rows:
            return
        import wandb

        # after the last training step, of an earlier session too: a session that only evaluates (resumed after
        # its training ended) must not log over training steps, which the sessions' merge would replace
        step = max(self.run.step, self._last_step + 1)
        self.log_table(EVAL_TABLE, rows, step)
        if self.run:
            with self._while_service_lives():
                self._log_curves(wandb, rows, step)

    def _log_curves(self, wandb, rows: list[dict[str, Any]], step: int) -> None:
        last = max(row["layer"] for row in rows)
        points: dict[float, dict[str, float]] = {}
        for row in rows:
            if row["layer"] == last:
                points.setdefault(row["gamma_test"], {})[f"{EVAL_SECTION}/{row['split']}/{row['metric']}"] = row["value"]
        for gamma in sorted(points):
            self.run.log({GAMMA_KEY: gamma, **points[gamma]}, step=step)
            step += 1
        metric = next(row["metric"] for row in rows if row["metric"] != "loss")
        keys = {split: f"{EVAL_SECTION}/{split}/{metric}" for split in dict.fromkeys(row["split"] for row in rows)}
        grid = [g for g in sorted(points) if all(key in points[g] for key in keys.values())]  # not val's gamma_train
        plot = wandb.plot.line_series(xs=grid, ys=[[points[g][key] for g in grid] for key in keys.values()],
                                      keys=list(keys), title=f"last layer's {metric} against gamma_test",
                                      xname="gamma_test")
        self.run.log({f"{EVAL_PLOT}/{metric}": plot}, step=step)

    def summarize(self, summary: dict[str, Any]) -> None:
        """Mirror summary.json in the W&B summary, nested dicts flattened to ``feasibility/status`` keys, so that
        analysis can rebuild summary.json from W&B alone (analysis.wandb_source). The verdict also becomes a tag,
        so W&B's run table can filter on it. A key mirrored earlier that this summary lacks (the ``error`` of a
        session stopped and then resumed to completion) is removed from the W&B summary."""
        if self.run:
            with self._while_service_lives():
                flat = flat_summary(summary)
                for key, value in flat.items():
                    self.run.summary[key] = value
                for key in sorted(self._mirrored - set(flat)):
                    if not _wandb_own(key):
                        del self.run.summary[key]
                self._mirrored = set(flat)
                verdict = summary.get("verdict")
                if verdict and verdict not in self.run.tags:
                    self.run.tags = (*self.run.tags, verdict)

    def finish(self, failed: bool = False) -> None:
        if self.run:
            with self._while_service_lives():
                self.run.finish(exit_code=1 if failed else 0)
            self.run = None
        if self._service:
            self._service.restore_environment()


SUMMARY_SEPARATOR = "/"  # W&B's own grouping separator in its UI
#: history.csv's per-layer columns (loss_0, lambda_0, slack_0, g_0, ...) -> W&B sections (loss/l0, ...)
LAYER_SECTIONS = {"loss": "loss", "lambda": "lambda", "slack": "slack", "g": "constraint"}
TRAIN_SECTION = "train"  # every other history.csv column: train/lagrangian, train/lr, ...
STEP_KEY = f"{TRAIN_SECTION}/step"  # the x-axis of every training section
EVAL_SECTION = "eval"  # eval/<split>/<metric> per gamma_test
GAMMA_KEY = f"{EVAL_SECTION}/gamma_test"  # the x-axis of the evaluation section
EVAL_TABLE = "eval"  # eval.csv as a wandb.Table (analysis.wandb_source reads it back)
EVAL_PLOT = "eval_plot"  # the line plot (a chart, outside the eval section: W&B charts have no step axis)
RUN_FOLDER_KEY = "_run_folder"  # the run folder's name, in the W&B config (the display name is for people)
SHOWN_KEYS = ("model", "data", "train", "L", "gamma", "seed", "train.alpha")  # in display_name's label already
MAX_DISPLAY = 96  # characters of a display name: W&B's run list shows about this many
HIDDEN_KEYS = ("wandb", "paths", "threads", "progress", "device", "launcher", "run_name", "checkpoint", "eval")


def _wandb_own(key: str) -> bool:
    """A summary key W&B writes itself (``_runtime``) or keeps as a logged key's last value (``loss/l0``, the eval
    table): never removed by the mirror, whatever a summary.json held."""
    sections = (*LAYER_SECTIONS.values(), TRAIN_SECTION, EVAL_SECTION, EVAL_PLOT)
    return key.startswith("_") or key == EVAL_TABLE or key.split(SUMMARY_SEPARATOR, 1)[0] in sections


def wandb_key(column: str) -> str:
    """``loss_0`` -> ``loss/l0``, ``g_2`` -> ``constraint/l2``, ``lagrangian`` -> ``train/lagrangian``."""
    name, _, layer = column.rpartition("_")
    if name in LAYER_SECTIONS and layer.isdigit():
        return f"{LAYER_SECTIONS[name]}/l{layer}"
    return f"{TRAIN_SECTION}/{column}"


def history_column(key: str) -> str | None:
    """The inverse of ``wandb_key`` (``loss/l0`` -> ``loss_0``); a key of cutlab's flat layout (before W&B
    sections) is returned as it is; None for keys that are no history.csv column (the evaluation, the step)."""
    section, _, leaf = key.partition("/")
    if not leaf:
        return key
    if section == TRAIN_SECTION and key != STEP_KEY:
        return leaf
    names = {v: k for k, v in LAYER_SECTIONS.items()}
    if section in names and leaf[:1] == "l" and leaf[1:].isdigit():
        return f"{names[section]}_{leaf[1:]}"
    return None


def display_name(folder: str, config: dict) -> str:
    """A short name for W&B's run list: ``dust constrained L3 γ0.09 α0.25 seed0 (synthetic)``, plus the folder when
    it was named by hand or by a search (``trial-0003: ...``), plus any other override the folder name holds.
    Run folders keep their own names (commas and all): they must be unique and stable, this need only be read."""
    train, model, data = (config.get(k) or {} for k in ("train", "model", "data"))
    arm = "constrained" if train.get("constrained") else "erm"
    label = f"{model.get('name', '?')} {arm} L{config.get('L')} γ{config.get('gamma')}"
    if train.get("constrained"):
        label += f" α{train.get('alpha')}"
    label += f" seed{config.get('seed')} ({data.get('name', '?')})"
    if "=" not in folder:
        return label if folder == "default" else f"{folder}: {label}"
    # a folder named from its overrides (a grid): keep those the label does not show, by their last key part
    extra = []
    for override in re.split(r",(?=[A-Za-z_+~][\w.]*=)", folder):
        key = override.lstrip("+~").partition("=")[0]
        if key not in SHOWN_KEYS and not key.startswith(HIDDEN_KEYS):
            extra.append(f"{key.rsplit('.', 1)[-1]}={_shown(config, key)}")
    name = " ".join([label, *extra])
    return name if len(name) <= MAX_DISPLAY else name[: MAX_DISPLAY - 1] + "…"


def flat_summary(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"feasibility": {"status": "feasible"}}`` -> ``{"feasibility/status": "feasible"}``; scalars, None and
    lists kept, a list of dicts (``iterate/checks``) too, as it is: W&B holds JSON values, and the summary must
    mirror summary.json; anything else (objects W&B cannot hold as a summary value) dropped."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_summary(value, name + SUMMARY_SEPARATOR))
        elif _is_json(value):
            flat[name] = list(value) if isinstance(value, tuple) else value
    return flat


def _is_json(value: Any) -> bool:
    """A value JSON (so a W&B summary) holds: None, a scalar, or lists and string-keyed dicts of these."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _is_json(v) for k, v in value.items())


def _shown(config: dict, key: str) -> str:
    """The config's value of a dotted key as a display name shows it (a list without commas: ``[0 0.5]``)."""
    value = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(map(str, value)) + "]"
    return str(value)
