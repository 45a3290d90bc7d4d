"""Run records rebuilt from W&B, so that every table, figure and report reads them like run folders.

Every cutlab run logs to W&B (cutlab.run.tracking): the resolved config (``wandb.init(config=...)``), each
history.csv row as one W&B step, summary.json mirrored in the W&B summary (nested dicts flattened to
``feasibility/status`` keys) and eval.csv as the ``wandb.Table`` "eval". This module turns those back
into run folders (config.yaml, summary.json, history.csv, eval.csv) and hands them to
:func:`analysis.collect.collect_runs`: one code path for analysis, whatever the source. Two readers
fetch the same four things; every conversion is shared:

- ``records_from_offline(RUNS_FOLDER, OUT)``: the offline transaction logs every run leaves in
  ``<run_dir>/wandb/offline-run-*/run-<id>.wandb`` (W&B's default here), read by W&B's own reader
  (``wandb leet inspect --json``; wandb 0.31 has no Python reader left: the Go core reads the log), and
  the eval table's file from the session's ``files/media/table/``. No server needed.
- ``records_from_api("entity/project", OUT, group=None)``: a W&B server through ``wandb.Api()``:
  ``run.config``, ``run.summary``, ``run.scan_history()`` and the eval table's file downloaded.

What W&B does not hold is reported, never guessed: sample_losses.csv and provenance.json are never
logged (Fig. 12 is skipped for such runs); a run whose W&B summary has no cutlab status (killed before
its first summary, or not a cutlab run) stays ``partial``; a complete run logged by a cutlab older than
the flattened summary (no ``feasibility/status``) is ``unsupported``; a complete run without its eval
table becomes ``partial`` (eval.csv missing). W&B itself is needed only here, imported lazily.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd
import yaml

from .collect import AnalysisError, RunTable, collect_runs
from .run_folders import SKIP_DIRS
from .history import lost_steps
from cutlab.atomic import write_atomic
from cutlab.run.records import CONFIG, EVAL, HISTORY, SUMMARY, layer_columns, write_json
from cutlab.run.tracking import RUN_FOLDER_KEY, SUMMARY_SEPARATOR, history_column

#: the W&B key cutlab logs eval.csv under (cutlab.run.experiment: ``tracker.log_table("eval", rows)``)
EVAL_KEY = "eval"
#: a key every summary flattened by this cutlab's Tracker.summarize has once the run is complete
FLATTENED_MARK = f"feasibility{SUMMARY_SEPARATOR}status"
#: history.csv's leading columns, in cutlab.run.records.HistoryWriter's order
HISTORY_HEAD = ["step", "epoch", "phase"]
HISTORY_LAYERED = ["loss", "lambda", "slack", "g"]
HISTORY_TAIL = ["lagrangian", "grad_norm", "lr", "dual_lr", "step_time", "constraints_met", "constraints_met_strictly"]
#: history.csv's integer columns: counters and the 0/1 flags of cutlab.core.feasibility_clock
HISTORY_INTEGERS = ("step", "epoch", "constraints_met", "constraints_met_strictly")
READERS = 4  # W&B logs read at once
RECORDS_DIR = "wandb_records"  # under the report folder: the rebuilt run folders, kept for inspection
Progress = Callable[[int, int], None]


@dataclass
class WandbRun:
    """What one W&B run holds, in the shape ``wandb.Api`` returns it (media values as nested dicts)."""

    name: str  # the run folder's name (from the W&B config's RUN_FOLDER_KEY; the display name is for people)
    run_id: str
    config: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, Any]]  # one dict per W&B step, with "_step"
    eval_table: dict | None  # the table file's JSON ({"columns": [...], "data": [[...]]}), None if not found
    problems: list[str] = field(default_factory=list)  # what could not be read, in words


@dataclass
class Rebuilt:
    """Run folders written from W&B, and what each lacks (applied to the RunTable by :func:`collect_wandb`)."""

    folder: Path
    source: str
    unsupported: dict[Path, str] = field(default_factory=dict)
    partial: dict[Path, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------- conversions

def write_record(run: WandbRun, run_dir: Path, rebuilt: Rebuilt) -> None:
    """One run folder from one W&B run; what W&B lacks is noted in ``rebuilt``, not invented."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in run.config.items() if not k.startswith("_")}  # _wandb: W&B's own
    if config:
        write_atomic(run_dir / CONFIG, yaml.safe_dump(config, sort_keys=False))  # as cutlab writes records
    history, evaluation = history_frame(run.history), eval_frame(run.eval_table)
    for name, frame in ((HISTORY, history), (EVAL, evaluation)):
        if frame is not None:
            write_atomic(run_dir / name, frame.to_csv(index=False))
    summary = summary_record(run.summary, history_keys(run.history))
    if "status" in summary:
        write_json(run_dir / SUMMARY, summary)
    key = run_dir.resolve()
    if "status" not in summary:
        rebuilt.partial[key] = "; ".join(run.problems + [
            "the W&B summary has no cutlab status: the run was killed before W&B wrote its first summary, "
            "or is not a cutlab run"])
    elif summary["status"] == "complete" and not _has_flattened_summary(run.summary):
        rebuilt.unsupported[key] = (f"the W&B summary lacks {FLATTENED_MARK} (logged by a cutlab that kept scalar "
                                    "summary keys only): the feasibility details cannot be rebuilt; analyse the "
                                    "run folder instead")
    elif summary["status"] == "complete" and evaluation is None:
        rebuilt.partial[key] = "; ".join(run.problems) or f"the W&B run has no '{EVAL_KEY}' table"
    elif summary["status"] == "complete" and (lost := lost_steps(history, summary.get("steps"))):
        rebuilt.partial[key] = (f"W&B lacks training steps {lost} of {summary['steps']} (a session did not log "
                                "them: its W&B service was killed, by SIGKILL or by scancel, which signals the "
                                "service too, or it ran with wandb.mode=disabled; W&B's files cannot tell which); "
                                "the run folder's history.csv has them")


def _has_flattened_summary(summary: dict) -> bool:
    return FLATTENED_MARK in summary or isinstance(summary.get("feasibility"), dict)


def summary_record(summary: dict[str, Any], history: set[str]) -> dict[str, Any]:
    """summary.json from a W&B summary: cutlab's keys only (not W&B's ``_*``, not the last value of each
    history key, not media), ``a/b`` keys nested back into ``{"a": {"b": ...}}``."""
    record: dict[str, Any] = {}
    for key, value in summary.items():
        if key.startswith("_") or key in history or isinstance(value, dict) and "_type" in value:
            continue
        *parents, leaf = key.split(SUMMARY_SEPARATOR)
        node = record
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = _numbers_back(value)
    return record


# W&B's summary hands Python JSON's non-finite numbers (a relative violation with no bound: Infinity) back as text
_NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _numbers_back(value: Any) -> Any:
    """``value`` with W&B's 'Infinity', '-Infinity' and 'NaN' strings read as the numbers summary.json holds."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [_numbers_back(item) for item in value]
    if isinstance(value, dict):
        return {key: _numbers_back(item) for key, item in value.items()}
    return value


def history_keys(rows: Iterable[dict[str, Any]]) -> set[str]:
    return {key for row in rows for key in row}


def history_frame(rows: list[dict[str, Any]]) -> pd.DataFrame | None:
    """history.csv from W&B steps: ``_step`` becomes ``step``; W&B's sections become history.csv's columns
    (``loss/l0`` -> ``loss_0``, ``train/lr`` -> ``lr``: cutlab.run.tracking.history_column; runs logged before the
    sections have the columns' own names); W&B's ``_*`` keys, media (the eval table, at the first evaluation step)
    and the evaluation's steps (``eval/*``) are dropped; a step that holds nothing else is dropped too."""
    records = []
    for row in rows:
        values = {history_column(k): v for k, v in row.items()
                  if not k.startswith("_") and not isinstance(v, dict) and history_column(k)}
        if values and "_step" in row:
            records.append({"step": int(row["_step"]), **values})
    if not records:
        return None
    frame = pd.DataFrame(records).drop_duplicates("step", keep="last").sort_values("step")
    # JSON writes 0.0 as 0: every measured value is a float in history.csv (but counters and flags)
    measured = [c for c in frame.select_dtypes("number").columns if c not in HISTORY_INTEGERS]
    frame[measured] = frame[measured].astype(float)
    return frame[_history_order(list(frame.columns))]


def _history_order(columns: list[str]) -> list[str]:
    """HistoryWriter's column order for the columns present; any others after them, sorted."""
    layers = sum(1 for c in columns if c.startswith("loss_") and c[5:].isdigit())
    known = HISTORY_HEAD + [c for p in HISTORY_LAYERED for c in layer_columns(p, layers)] + HISTORY_TAIL
    return [c for c in known if c in columns] + sorted(c for c in columns if c not in known)


def eval_frame(table: dict | None) -> pd.DataFrame | None:
    """eval.csv from the eval table's JSON (wandb.Table's file: ``{"columns": [...], "data": [[...]]}``)."""
    if not table or "columns" not in table or "data" not in table:
        return None
    return pd.DataFrame(table["data"], columns=table["columns"])


def nest_media(item: dict[str, Any]) -> dict[str, Any]:
    """W&B's transaction log reader prints a media value as dotted keys (``eval._type``, ``eval.path``); put
    them back into one dict per media key, as ``wandb.Api`` returns them."""
    media = {key[: -len("._type")] for key in item if key.endswith("._type")}
    out: dict[str, Any] = {}
    for key, value in item.items():
        owner = next((m for m in media if key.startswith(m + ".")), None)
        if owner is None:
            out[key] = value
        else:
            out.setdefault(owner, {})[key[len(owner) + 1:]] = value
    return out


def _unique_dir(folder: Path, name: str, run_id: str, taken: set[str]) -> Path:
    """One folder directly in ``folder`` for the run: its name comes from the W&B project, which anyone who may log
    to it writes (``../../x`` or ``/home/me/x`` put the records outside the report folder)."""
    name, run_id = _one_folder(name), _one_folder(run_id) or "run"
    name = name or run_id
    if name in taken:  # two W&B runs with one name (e.g. the same overrides in two runs folders)
        name = f"{name}-{run_id}"
    taken.add(name)
    return folder / name


def _one_folder(name) -> str:
    """``name`` as a single folder name: separators become ``_``, and ``.`` or ``..`` alone no name at all."""
    name = re.sub(r"[/\\\x00]", "_", str(name or ""))
    return "" if name in (".", "..") else name


def collect_wandb(rebuilt: Rebuilt) -> RunTable:
    """collect_runs on the rebuilt folders, then what W&B could not give marked on each run it concerns."""
    table = collect_runs(rebuilt.folder)
    table.source = rebuilt.source
    runs = table.runs
    resolved = runs["path"].map(lambda p: Path(p).resolve())
    for marks, state in ((rebuilt.partial, "partial"), (rebuilt.unsupported, "unsupported")):
        for path, problem in marks.items():
            rows = resolved == path
            if state == "partial" and runs.loc[rows, "state"].isin(["failed", "pruned"]).all():
                continue  # a failed run is reported as failed; its missing table is no news
            runs.loc[rows, ["state", "problem"]] = [state, problem]
            runs.loc[rows, ["usable", "partial"]] = [False, state == "partial"]
    return table


# ------------------------------------------------------------------------------------- offline reader

def find_offline_runs(root: Path) -> dict[Path, list[Path]]:
    """{run folder: its W&B session folders (``offline-run-*`` holding a ``run-*.wandb``), oldest first}.

    A resumed run writes one session folder per start, all with the run's id; they are merged in order.
    """
    if not root.exists():
        raise AnalysisError(f"{root} does not exist; pass the runs folder python -m cutlab wrote into (e.g. runs/)")
    if not root.is_dir():
        raise AnalysisError(f"{root} is a file, not a folder; pass the runs folder python -m cutlab wrote into")
    found: dict[Path, list[Path]] = {}
    for log in sorted(root.rglob("run-*.wandb")):
        session = log.parent
        if not session.name.startswith(("offline-run-", "run-")):
            continue
        wandb_dir = session.parent
        run_dir = wandb_dir.parent if wandb_dir.name == "wandb" else wandb_dir
        if any(part in SKIP_DIRS - {"wandb"} for part in run_dir.relative_to(root).parts):
            continue
        found.setdefault(run_dir, []).append(session)
    if not found:
        raise AnalysisError(f"{root} holds no W&B run files (no <run>/wandb/offline-run-*/run-*.wandb); pass the "
                            "runs folder of runs trained with wandb.mode=offline (the default) or online")
    # a session folder is named [offline-]run-<YYYYMMDD_HHMMSS>-<id>: ordered by its start time
    return {run_dir: sorted(sessions, key=lambda s: s.name.split("-")[-2])
            for run_dir, sessions in sorted(found.items())}


def read_transaction_log(session: Path) -> list[dict[str, Any]]:
    """The records of one session's .wandb log, as JSON, read by W&B's own reader (``wandb leet inspect``)."""
    command = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(session)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise AnalysisError(f"wandb leet inspect did not finish reading {session} in 300 s") from None
    if result.returncode != 0:
        raise AnalysisError(f"wandb leet inspect could not read {session}: "
                            f"{(result.stderr.strip().splitlines() or ['no message'])[-1]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def offline_run(run_dir: Path, sessions: list[Path]) -> WandbRun:
    """One run from its session folders: the latest run id's sessions, merged in order as a W&B server
    merges a resumed run (config and summary updated, a step logged again replaces the earlier one)."""
    run_id = sessions[-1].name.rsplit("-", 1)[-1]
    sessions = [s for s in sessions if s.name.rsplit("-", 1)[-1] == run_id]
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    steps: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for session in sessions:
        try:
            records = read_transaction_log(session)
        except AnalysisError as error:  # one unreadable log makes its run partial, not the whole analysis fail
            problems.append(str(error))
            continue
        for record in records:
            kind = record.get("type")
            if kind == "run":
                config.update(record["run"].get("config", {}).get("update", {}))
            elif kind == "config":
                config.update(record["config"].get("update", {}))
            elif kind == "summary":
                summary.update(nest_media(record["summary"].get("update", {})))
                for item in record["summary"].get("remove", []):  # removed by cutlab's mirror (a resumed run's error)
                    summary.pop(item.get("key"), None)
            elif kind == "history":
                item = nest_media(record["history"]["item"])
                steps[int(item["_step"])] = item
    table = None
    pointer = summary.get(EVAL_KEY)
    if isinstance(pointer, dict) and "path" in pointer:
        # the table file lies in the files/ of the session that logged it: the latest one that has it
        files = [s / "files" / pointer["path"] for s in reversed(sessions)]
        table, problem = _read_table(next((f for f in files if f.exists()), files[0]))
        problems += [problem] if problem else []
    return WandbRun(run_dir.name, run_id, config, summary, [steps[s] for s in sorted(steps)], table, problems)


def _read_table(file: Path) -> tuple[dict | None, str | None]:
    try:
        return json.loads(file.read_text()), None
    except FileNotFoundError:
        return None, f"the W&B eval table file {file} is missing"
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"the W&B eval table file {file} cannot be read ({error})"


def records_from_offline(root: str | Path, out: str | Path, progress: Progress | None = None) -> Rebuilt:
    """Run folders under ``out`` rebuilt from the offline W&B files of every run under ``root``; each keeps its
    path relative to ``root``, so run names match an analysis of the run folders themselves."""
    _require_wandb()
    root, out = Path(root), Path(out)
    runs = find_offline_runs(root)
    rebuilt = Rebuilt(out, f"W&B offline run files under {root}")
    # each log is read by its own wandb process (~2 s, mostly start-up): a few at once
    with ThreadPoolExecutor(max_workers=min(READERS, os.cpu_count() or 1)) as pool:
        reading = {pool.submit(offline_run, run_dir, sessions): run_dir for run_dir, sessions in runs.items()}
        for k, done in enumerate(as_completed(reading), 1):
            relative = reading[done].relative_to(root)
            write_record(done.result(), out / relative if relative.parts else out / root.name, rebuilt)
            if progress:
                progress(k, len(runs))
    return rebuilt


# ----------------------------------------------------------------------------------------- API reader

def records_from_api(path: str, out: str | Path, group: str | None = None, progress: Progress | None = None) -> Rebuilt:
    """Run folders under ``out`` from the runs of ``entity/project`` on a W&B server (only ``group``'s if given)."""
    _require_wandb()
    import wandb

    if path.count("/") != 1 or not all(path.split("/")):
        raise AnalysisError(f"--wandb takes ENTITY/PROJECT (e.g. my-team/cutlab), got {path!r}")
    try:
        api = wandb.Api(timeout=60)
        runs = list(api.runs(path, filters={"group": group} if group else None))
    except wandb.errors.UsageError as error:  # no API key
        raise AnalysisError(f"cannot use the W&B API ({error}); run `wandb login` (or set WANDB_API_KEY) first") from None
    except (ValueError, wandb.errors.CommError) as error:
        raise AnalysisError(f"W&B project {path} cannot be read ({error}); check ENTITY/PROJECT, your access to "
                            "it, and WANDB_BASE_URL for your own server") from None
    if not runs:
        raise AnalysisError(f"W&B project {path} has no runs" + (f" in group {group!r}" if group else "")
                            + "; check --wandb ENTITY/PROJECT and --wandb-group")
    out = Path(out)
    rebuilt = Rebuilt(out, f"W&B project {path}" + (f", group {group}" if group else ""))
    taken: set[str] = set()
    with tempfile.TemporaryDirectory() as downloads:
        for k, run in enumerate(runs, 1):
            folder = run.config.get(RUN_FOLDER_KEY) or run.name  # W&B's display name is not the folder's
            write_record(_api_run(run, Path(downloads)), _unique_dir(out, folder, run.id, taken), rebuilt)
            if progress:
                progress(k, len(runs))
    return rebuilt


def _api_run(run, downloads: Path) -> WandbRun:
    import wandb

    summary = dict(run.summary_metrics)
    table, problems = None, []
    pointer = summary.get(EVAL_KEY)
    if isinstance(pointer, dict) and "path" in pointer:
        try:
            run.file(pointer["path"]).download(root=str(downloads / run.id), replace=True)
        except (wandb.errors.Error, ValueError, OSError) as error:  # the run stays, partial, with the reason
            problems.append(f"the W&B eval table {pointer['path']} cannot be downloaded ({error})")
        else:
            table, problem = _read_table(downloads / run.id / pointer["path"])
            problems += [problem] if problem else []
    return WandbRun(run.name, run.id, dict(run.config), summary, list(run.scan_history()), table, problems)


def _require_wandb() -> None:
    try:
        import wandb  # noqa: F401  (the offline reader runs its CLI, the API reader its Api)
    except ImportError:
        raise AnalysisError("wandb is not installed, and reading runs from W&B needs it: pip install wandb "
                            "(or analyse the run folders themselves: python -m analysis RUNS_FOLDER --out DIR)")
