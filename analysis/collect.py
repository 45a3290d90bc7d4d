"""Read folders of run records (cutlab.run.records) into pandas frames.

``collect_runs(*folders)`` accepts one run folder, a sweep folder, or several, walks them for run
records and returns a :class:`RunTable`:

- ``runs``: one row per run folder: config columns, status, verdict, headline metrics, and the
  run's ``state`` (set by ``_classify``): ``complete`` (a result), ``failed`` (stopped with an error),
  ``pruned`` (stopped early by a search's pruner), ``partial`` (half written: still running,
  interrupted, or a record file missing/truncated) or ``unsupported`` (a record format this analysis
  cannot read). Only ``complete`` runs are results (``usable``); the others stay in the frame,
  flagged, with the reason in ``problem``.
- ``metrics``: long frame of eval.csv, ``run, split, gamma_test, layer, metric, value``.
- ``history``: the per-step history.csv of every run that has one (partial ones too: they are what
  a user debugging a run looks at), with a ``run`` column.

Video runs (metric ``rmse``, lower is better) and text runs (metric ``accuracy``, higher is better)
share these frames; ``task`` tells them apart. W&B is not needed: the run folder holds every number
W&B gets; analysis.wandb_source rebuilds run folders from W&B (a server or offline files) for this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from .consistency import mismatch
from .copies import mark_copies
from .data_labels import DATA_PREFIX, label_data_settings
from .provenance import read_provenance
from .selection import VALIDATION, arm_of
from .record_files import refused_problem
from .record_values import CONFIG as CONFIG_RULES, MAX_DEPTH, SUMMARY as SUMMARY_RULES, checked, flatten
from .history import lost_steps, read_history
from .run_folders import AnalysisError, find_run_dirs, quiet_meter
from .run_numbers import headline, summary_columns
from cutlab.run.lock import live_holder
from cutlab.run.records import CONFIG, EVAL, EVAL_COLUMNS, HISTORY, SAMPLE_LOSSES, SUMMARY

#: record versions this module knows how to read (cutlab.run.records.RECORD_VERSION when it was written)
SUPPORTED_RECORD_VERSIONS = (1,)

# Config keys promoted to short column names (the rest stay available as ``cfg.<dotted key>``).
CONFIG_COLUMNS = {
    "model": "model.name", "dataset": "data.name", "L": "L", "gamma_train": "gamma", "seed": "seed",
    "constrained": "train.constrained", "alpha": "train.alpha", "dual_lr": "train.dual_lr", "lr": "train.lr",
    "epochs": "train.epochs", "batch_size": "train.batch_size", "resilience": "train.resilience",
    "resilience_c": "train.resilience_c", "dual_cadence": "train.dual_cadence",
    "warmup_epochs": "train.warmup_epochs", "detach_prev": "train.detach_prev",
    "constraint_form": "train.constraint_form", "constraint_gradient": "train.constraint_gradient",
    "dual_optimizer": "train.dual_optimizer",
    "dual_update": "train.dual_update", "dual_restarts": "train.dual_restarts", "kappa_p": "train.kappa_p",
    "penalty": "train.penalty",
    "precision": "precision",
}


@dataclass
class RunTable:
    """Everything read from a set of run folders. See the module docstring for the frames' columns."""

    runs: pd.DataFrame
    metrics: pd.DataFrame
    history: pd.DataFrame
    folders: list[Path] = field(default_factory=list)
    source: str | None = None  # where the records came from when not run folders (analysis.wandb_source)
    selection: str = VALIDATION  # how tables and figures choose each cell's run (analysis.selection.SELECTION_RULES)
    links: list[str] = field(default_factory=list)  # folder links left out of the search for runs (find_run_dirs)

    @property
    def results(self) -> pd.DataFrame:
        """The complete runs: the only ones counted as results."""
        return self.runs[self.runs["usable"]]

    def run(self, run_id: str) -> pd.Series:
        return self.runs.loc[self.runs["run"] == run_id].iloc[0]

    def curve(self, run_id: str, split: str = "test", metric: str | None = None, layer: int | None = None) -> pd.Series:
        """``metric`` (default: the run's headline metric) against gamma_test at ``layer`` (default: the last)."""
        row = self.run(run_id)
        metric = metric or row["metric"]
        rows = self.metrics[(self.metrics["run"] == run_id) & (self.metrics["split"] == split)
                            & (self.metrics["metric"] == metric)]
        layer = int(rows["layer"].max()) if layer is None and len(rows) else layer
        rows = rows[rows["layer"] == layer].sort_values("gamma_test")
        return pd.Series(rows["value"].to_numpy(), index=rows["gamma_test"].to_numpy(), name=metric)

    def layer_losses(self, run_id: str, gamma_test: float, split: str = "test") -> pd.Series:
        """Mean loss per layer at one gamma_test (the layerwise curves of Figs 1, 7, 13)."""
        rows = self.metrics[(self.metrics["run"] == run_id) & (self.metrics["split"] == split)
                            & (self.metrics["metric"] == "loss") & np.isclose(self.metrics["gamma_test"], gamma_test)]
        rows = rows.sort_values("layer")
        return pd.Series(rows["value"].to_numpy(), index=rows["layer"].to_numpy(), name="loss")

    def sample_losses(self, run_id: str) -> pd.DataFrame | None:
        """The run's sample_losses.csv (gamma_test, sample, loss_0..loss_L), read on demand; None if absent."""
        path = Path(self.run(run_id)["path"]) / SAMPLE_LOSSES
        try:
            frame = pd.read_csv(path)
        except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError):
            return None
        losses = [c for c in frame.columns if c.startswith("loss_")]
        if "gamma_test" not in frame or not losses:
            return None
        return frame.dropna(subset=losses)

    def history_of(self, run_id: str) -> pd.DataFrame:
        frame = self.history[self.history["run"] == run_id]
        return frame.dropna(axis=1, how="all")


def collect_runs(*folders: str | os.PathLike) -> RunTable:
    """Read every run record under ``folders`` (each a run folder or a folder of them, searched recursively).

    Raises :class:`AnalysisError` for a missing folder, an empty one, or one without run records. A run
    that cannot be counted as a result (failed, half-written, unknown record format) is kept in
    ``runs`` with ``usable = False`` and the reason in ``problem``; it is never dropped silently.
    """
    if not folders:
        raise AnalysisError("no runs folder given; pass the folder that holds the run records (e.g. runs/)")
    if any(not str(folder).strip() for folder in folders):  # "$RUNS" unset: Path('') would read the current folder
        raise AnalysisError("a runs folder given is empty; pass the folder that holds the run records (e.g. runs/)")
    roots = [Path(folder) for folder in folders]
    run_dirs: list[Path] = []
    links: list[str] = []
    for root in roots:
        run_dirs += find_run_dirs(root, links)
    run_dirs = sorted(set(path.resolve() for path in run_dirs))
    ids = _run_ids(run_dirs)
    rows, metrics, histories = [], [], []
    meter = quiet_meter("reading runs", len(run_dirs), "run")
    for index, (run_dir, run_id) in enumerate(zip(run_dirs, ids)):
        meter.update(index)
        row, evaluation, history = read_run(run_dir)
        row["run"] = run_id
        rows.append(row)
        if evaluation is not None:
            metrics.append(evaluation.assign(run=run_id))
        if history is not None:
            histories.append(history.assign(run=run_id))
    runs = mark_copies(label_data_settings(_runs_frame(rows)))
    metric_frame = (pd.concat(metrics, ignore_index=True)[["run", *EVAL_COLUMNS]] if metrics
                    else pd.DataFrame(columns=["run", *EVAL_COLUMNS]))
    history_frame = pd.concat(histories, ignore_index=True) if histories else pd.DataFrame(columns=["run", "step"])
    return RunTable(runs, metric_frame, history_frame, roots, links=links)


def _run_ids(run_dirs: list[Path]) -> list[str]:
    """Short unique names: each run's path relative to the folder that holds them all."""
    if len(run_dirs) == 1:
        return [run_dirs[0].name]
    common = Path(os.path.commonpath([str(p) for p in run_dirs]))
    return [str(p.relative_to(common)) if p != common else p.name for p in run_dirs]


def read_run(run_dir: Path) -> tuple[dict[str, Any], pd.DataFrame | None, pd.DataFrame | None]:
    """One run folder: its row for ``runs``, its eval.csv (or None) and its history.csv (or None)."""
    refused = refused_problem(run_dir)
    if refused:  # a link or a FIFO among its record files: none of them is read (analysis.record_files)
        row = {"path": str(run_dir), **_config_columns({}), **summary_columns(None), "has_history": False,
               "has_sample_losses": False, "provenance": None, "state": "unsupported", "problem": refused}
        return {**row, **headline(row, None)}, None, None
    config, config_problem = _read_config(run_dir)
    flat_config, bad_values = checked(flatten(config), CONFIG_RULES, CONFIG)
    summary, summary_problem = _read_summary(run_dir)
    summary, bad_summary = _checked_summary(summary)
    bad_values += bad_summary
    row: dict[str, Any] = {"path": str(run_dir)}
    row.update(_config_columns(flat_config))
    row.update(summary_columns(summary))
    evaluation, eval_problem = _read_eval(run_dir, row)
    history = read_history(run_dir)
    row["has_history"] = history is not None
    row["has_sample_losses"] = (run_dir / SAMPLE_LOSSES).exists()
    row["provenance"] = read_provenance(run_dir)  # read once: its run_uid (analysis.copies) and the report's line
    if evaluation is not None and len(evaluation):
        if row.get("L") is None:
            row["L"] = int(evaluation["layer"].max())  # pretrained models may leave L to the model
        if row.get("gamma_test_grid") is None:
            row["gamma_test_grid"] = tuple(sorted(set(evaluation.loc[evaluation["split"] == "test", "gamma_test"])))
    row["state"], row["problem"] = _classify(summary, summary_problem, config_problem, eval_problem)
    if row["state"] == "partial":
        row["problem"] = _still_training(run_dir) or row["problem"]
        if row.get("steps") is None and history is not None and len(history):  # stopped, or training now
            row["steps"] = int(history["step"].max())  # its steps so far, as "What ran" counts them
    if bad_values:  # a record cutlab did not write this way (edited, or another program's): never a result
        row["state"], row["problem"] = "unsupported", ("; ".join(bad_values) + ": correct the record file "
                                                       "or move the run folder out of the analysed folders")
    borrowed = mismatch(row, evaluation, summary) if row["state"] == "complete" else None
    if borrowed:  # e.g. eval.csv copied from another run: its numbers would be tabled under this run's config
        row["state"], row["problem"] = "unsupported", f"{borrowed}; copy the run folder again from where it was trained"
    row.update(headline(row, evaluation if row["state"] == "complete" else None))
    # a history cut after the run (one left out on purpose, as stored records do, is no history, not a cut one): its
    # evaluation is whole, but the losses and multipliers over training would be drawn with a gap
    lost = lost_steps(history, (summary or {}).get("steps")) if row["state"] == "complete" and history is not None \
        else None
    if lost:
        row["state"], row["usable"], row["partial"] = "partial", False, True
        row["problem"] = (f"{HISTORY} lacks training steps {lost} of {summary['steps']}: it was cut or replaced after "
                          "the run; restore it, or train the run again into a new folder")
    return row, evaluation, history


def _still_training(run_dir: Path) -> str | None:
    """Why a run folder that is not finished is no result where a process trains it now (its folder's lock held):
    its command again would be refused at that lock, which the stopped runs' advice says to run."""
    holder = live_holder(run_dir)
    return f"being trained now by {holder}: not finished yet; analyse it once that process ends" if holder else None


def _read_config(run_dir: Path) -> tuple[dict, str | None]:
    path = run_dir / CONFIG
    if not path.exists():
        return {}, f"{CONFIG} missing (the run folder was not written by python -m cutlab, or was copied in part)"
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        return {}, f"{CONFIG} is not valid YAML ({str(error).splitlines()[0]})"
    return (config, None) if isinstance(config, dict) else ({}, f"{CONFIG} is empty")


def _read_summary(run_dir: Path) -> tuple[dict | None, str | None]:
    path = run_dir / SUMMARY
    if not path.exists():
        return None, (f"no {SUMMARY}: the run stopped before training began, or is starting now "
                      "(run the same command again to resume it)")
    try:
        summary = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"{SUMMARY} is not valid JSON ({error}): a half-written record"
    if not isinstance(summary, dict):
        return None, f"{SUMMARY} holds no JSON object: a half-written record"
    return summary, None


def _checked_summary(summary: dict | None) -> tuple[dict | None, list[str]]:
    """The summary without the values that break SUMMARY_RULES (feasibility's layers included), and why."""
    if summary is None:
        return None, []
    feasibility = summary.get("feasibility")
    view = dict(summary)
    if isinstance(feasibility, dict):
        view["feasibility.violated_layers"] = feasibility.get("violated_layers")
    kept, problems = checked(view, SUMMARY_RULES, SUMMARY)
    layers = kept.pop("feasibility.violated_layers", None)
    kept["feasibility"] = {**(kept.get("feasibility") or {}), "violated_layers": layers}
    return kept, problems


def _config_columns(flat: dict[str, Any]) -> dict[str, Any]:
    """The runs-frame columns of a flattened, checked config."""
    row = {column: flat.get(key) for column, key in CONFIG_COLUMNS.items()}
    row["constrained"] = bool(row["constrained"]) if row["constrained"] is not None else None
    row["arm"] = arm_of(row)
    row["epsilon_config"] = flat.get("train.epsilon")
    grid = flat.get("eval.gamma_test")
    row["gamma_test_grid"] = tuple(float(g) for g in grid) if grid else None
    row.update({f"cfg.{key}": value for key, value in flat.items()})
    return row


def _read_eval(run_dir: Path, row: dict) -> tuple[pd.DataFrame | None, str | None]:
    """eval.csv, checked for the rows a complete record has; (frame or None, problem or None)."""
    path = run_dir / EVAL
    if not path.exists():
        return None, f"{EVAL} missing (the run ended before its evaluation was written)"
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as error:
        return None, f"{EVAL} cannot be read ({str(error).splitlines()[0]}): a half-written record"
    missing = [c for c in EVAL_COLUMNS if c not in frame.columns]
    if missing:
        return None, f"{EVAL} lacks the columns {missing}: a half-written record or another format"
    frame = frame[EVAL_COLUMNS].copy()
    frame["gamma_test"] = pd.to_numeric(frame["gamma_test"], errors="coerce")
    frame["layer"] = pd.to_numeric(frame["layer"], errors="coerce")
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    stray = ~frame["layer"].between(0, MAX_DEPTH) | (frame["layer"] % 1 != 0) | np.isinf(frame["gamma_test"])
    if (stray & frame["layer"].notna()).any():
        return None, (f"{EVAL} holds layers outside 0..{MAX_DEPTH}, fractional layers or an infinite gamma_test: "
                      "not a record cutlab wrote")
    broken = frame[["gamma_test", "layer", "value"]].isna().any(axis=1)
    if broken.any():
        return frame[~broken].astype({"layer": int}), f"{EVAL} is truncated ({int(broken.sum())} incomplete rows)"
    frame = frame.astype({"layer": int})
    return frame, _missing_eval_rows(frame, row)


def _missing_eval_rows(frame: pd.DataFrame, row: dict) -> str | None:
    """Every gamma_test of the config's grid and every layer 0..L must be there for the headline metric."""
    metric = row.get("metric") or ("rmse" if "rmse" in set(frame["metric"]) else "accuracy")
    test = frame[(frame["split"] == "test") & (frame["metric"] == metric)]
    if test.empty:
        return f"{EVAL} is truncated: no test rows for {metric}"
    layers = row.get("L")
    layers = int(layers) if layers is not None else int(test["layer"].max())
    grid = row.get("gamma_test_grid") or tuple(sorted(set(test["gamma_test"])))
    for gamma in grid:
        present = set(test.loc[np.isclose(test["gamma_test"], gamma), "layer"])
        lacking = sorted(set(range(layers + 1)) - present)
        if lacking:
            return f"{EVAL} is truncated: test {metric} lacks gamma_test={gamma:g}, layers {lacking}"
    return None


def _classify(summary: dict | None, summary_problem: str | None, config_problem: str | None,
              eval_problem: str | None) -> tuple[str, str]:
    """(state, problem): why a run is not a result, in words a user can act on."""
    if summary is None:
        return "partial", summary_problem or ""
    version = summary.get("record_version")
    if version is None:
        return "unsupported", (f"{SUMMARY} has no record_version: an older run-record format this analysis "
                               "cannot read; train the run again with the current cutlab (into a new folder)")
    if version not in SUPPORTED_RECORD_VERSIONS:
        return "unsupported", (f"record_version {version!r} is not one this analysis reads "
                               f"({', '.join(map(str, SUPPORTED_RECORD_VERSIONS))}); update cutlab's analysis")
    status = summary.get("status")
    if status == "failed":
        return "failed", str(summary.get("error") or "failed without an error message")
    if status in ("running", "interrupted"):
        return "partial", (f"{SUMMARY} says status {status!r}: the run is in progress or was stopped before it "
                           "finished (run the same command again to resume it)")
    if status == "pruned":
        reason = summary.get("error") or "hopeless intermediate validation"
        return "pruned", f"stopped early by the search's pruner ({reason}); not a finished run"
    if status != "complete":
        return "unsupported", f"{SUMMARY} has an unknown status {status!r}"
    if config_problem:
        return "partial", config_problem
    if eval_problem:  # the evaluation is redone from the final checkpoint once the summary no longer says complete
        return "partial", (f"{eval_problem}; delete the run's {SUMMARY} and run the same command again: it evaluates "
                           "the run's final checkpoint anew")
    return "complete", ""


def _runs_frame(rows: list[dict]) -> pd.DataFrame:
    first = ["run", "task", "model", "dataset", "L", "gamma_train", "arm", "constrained", "seed", "alpha", "epsilon",
             "dual_lr", "lr", "state", "partial", "usable", "status", "verdict", "violated_layers", "problem",
             "metric", "selection_mode", "selection_metric", "test_mean_metric", "test_auc", "steps", "wall_time_s"]
    frame = pd.DataFrame(rows)
    for column in [c for c in frame.columns if c.startswith(DATA_PREFIX)]:
        # as recorded: beside runs that lack a key, pandas made the others' whole numbers floats (max_length=32.0),
        # so a run's label hung on the runs next to it
        frame[column] = pd.Series([row.get(column, np.nan) for row in rows], index=frame.index, dtype=object)
    for column in first:
        if column not in frame:
            frame[column] = None
    rest = sorted(c for c in frame.columns if c not in first and not c.startswith("cfg."))
    cfg = sorted(c for c in frame.columns if c.startswith("cfg."))
    frame = frame[first + rest + cfg]
    frame["usable"] = frame["usable"].astype(bool)
    frame["partial"] = frame["partial"].astype(bool)
    return frame.sort_values("run", kind="stable").reset_index(drop=True)
