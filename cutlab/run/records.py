"""The run record: the folder training writes and analysis reads. This docstring is the contract between the two
(README, "Where results go", describes the same files to users).

Files, all readable by pandas without cutlab:

- ``config.yaml``         the resolved config (written once, when the run starts)
- ``provenance.json``     the run's identity (run_uid), git commit and dirty flag, source digest, seed, host, device,
                          versions, command line
- ``history.csv``         one row per training step: every layer's loss, multiplier, slack, constraint value,
                          the Lagrangian, gradient norm, learning rates, step time
- ``eval.csv``            long format: split, gamma_test, layer, metric, value (metric = the objective's metric:
                          rmse|accuracy|token_accuracy, or loss, its mean layer loss)
- ``sample_losses.csv``   per-sample, per-layer losses on the test split at every gamma_test (Fig. 12's ratios)
- ``summary.json``        status (running|complete|failed|interrupted|pruned, the last when a search's pruner
                          stopped it), the headline numbers, ratio statistics, the feasibility verdict, W&B run
                          id, record_version. Written last: a run is complete exactly when summary.json says
                          ``"status": "complete"``.
- ``checkpoint.pt``       everything needed to resume (see cutlab.run.checkpoints)
"""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from cutlab.atomic import DiskFull, is_disk_full, write_atomic
from cutlab.errors import CutlabError

RECORD_VERSION = 1
SUMMARY = "summary.json"
HISTORY = "history.csv"
EVAL = "eval.csv"
EVAL_COLUMNS = ["split", "gamma_test", "layer", "metric", "value"]  # eval.csv's, and cutlab-eval's metrics.csv
SAMPLE_LOSSES = "sample_losses.csv"
CONFIG = "config.yaml"
PROVENANCE = "provenance.json"
CHECKPOINT = "checkpoint.pt"
#: provenance.json's key for the run's own identity, drawn once when its folder is first written (kept when it
#: resumes): a folder copied whole from another run holds the same one, so the analysis counts the two as one run
RUN_UID = "run_uid"
#: provenance.json's key for the file and sha256 of a model of the user's own (cutlab.tasks.models.model_source)
MODEL_SOURCE = "model_source"


def linked(path: Path) -> str | None:
    """``"<path> is a symbolic link (to <target>)"`` where ``path`` is one, else None: a record file or folder from
    elsewhere that links out would have its target read or written as the run's own."""
    return f"{path} is a symbolic link (to {os.readlink(path)})" if os.path.islink(path) else None


def not_a_file(path: Path) -> str | None:
    """Why ``path`` is not a record file cutlab wrote: a symbolic link, or no regular file (a FIFO, a device, a folder);
    None for a regular file or nothing there. Every record is written as a regular file (cutlab.atomic); reading
    another kind never ends (a link to /dev/zero) or waits for a writer for ever (a FIFO)."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(mode):
        return linked(path)
    if stat.S_ISREG(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
    return f"{path} is {kind}, not a regular file"


def write_json(path: Path, data: Any) -> None:
    """Atomic; on a disk too full for a temporary copy, an existing file (a few hundred bytes) is rewritten in
    place, so that a run stopped by a full disk can still record ``failed``."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    try:
        write_atomic(path, text)
    except DiskFull:
        if not path.is_file():
            raise
        try:
            with open(path, "r+b") as handle:
                handle.truncate(0)
                handle.write(text.encode())
        except OSError:
            raise DiskFull(path) from None


def read_mapping(path: Path, parse: Callable[[str], Any], errors: tuple[type[Exception], ...], what: str,
                 fix: str | None = None) -> dict | None:
    """A record file holding one mapping (None when absent): a file that is not one, cannot be read or is not
    UTF-8 text stops in one line naming it and the fix, never in a traceback."""
    fix = fix or f"move {path.parent} aside (or pass run_name=<new name>) so this run gets a folder of its own"
    unfit = not_a_file(path)  # a link (to /dev/zero: read for ever; to another run's record) or a FIFO (waits)
    if unfit is not None and not path.is_dir():  # a folder: the read below names it
        raise CutlabError(f"{unfit}; {fix}")
    if not path.exists():
        return None
    try:
        data = parse(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, *errors) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CutlabError(f"{path} is not a readable {what} ({type(error).__name__}: {reason}); {fix}") from None
    if not isinstance(data, dict):
        held = "it is empty" if data is None else f"it holds a {type(data).__name__}, not a mapping"
        raise CutlabError(f"{path} is not a {what}: {held}; {fix}")
    return data


def read_summary(run_dir: Path, resumable: bool = False, fix: str | None = None) -> dict | None:
    """The folder's ``summary.json`` (None when there is none). ``resumable``: read by ``python -m cutlab``, whose same
    command rewrites a summary from the checkpoint and the other records, so a cut one loses no training. ``fix``:
    what the reader's user should do instead (another command reads it)."""
    fix = fix or f"move {run_dir} aside (or pass run_name=<new name>) so this run gets a folder of its own"
    if resumable:
        fix = f"delete it and run the same command again to resume (or re-evaluate) the run from {CHECKPOINT}; or {fix}"
    summary = read_mapping(run_dir / SUMMARY, json.loads, (json.JSONDecodeError,), "run summary", fix)
    if summary is not None and not isinstance(summary.get("status", ""), str):
        raise CutlabError(f"{run_dir / SUMMARY} is not a run summary: its status is {summary['status']!r}; {fix}")
    return summary


def stopped_at_checkpoint(run_dir: Path) -> bool:
    """Whether the run stopped on a signal with a checkpoint (its summary says interrupted): the same command resumes
    it from there. False for an unreadable summary (the command then says why)."""
    try:
        summary = read_summary(run_dir)
    except CutlabError:
        return False
    return bool(summary) and summary.get("status") == "interrupted" and (run_dir / CHECKPOINT).exists()


class SkippedSummary(dict):
    """A complete run's summary as ``python -m cutlab`` found it and returned it, training nothing: a sweep counts the
    run skipped, not complete (an identical sweep started at the same time may have finished it after the plan)."""


def layer_columns(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}_{layer}" for layer in range(layers)]


class HistoryWriter:
    """Appends one CSV row per step and flushes it, so an interrupted run keeps every step it took.

    ``start_step``: the step training starts after (the checkpoint's, or 0 for a fresh start). Rows after it
    are dropped first: those steps are about to be re-run (identically, since batches and noise are functions
    of the step); a fresh start therefore begins a fresh file, never appending to a killed attempt's rows.
    """

    def __init__(self, path: Path, layers: int, start_step: int) -> None:
        self.path = path
        self.columns = (
            ["step", "epoch", "phase"]
            + layer_columns("loss", layers)
            + layer_columns("lambda", layers)
            + layer_columns("slack", layers)
            + layer_columns("g", layers)
            + ["lagrangian", "grad_norm", "lr", "dual_lr", "step_time",
               # the smoothed training constraints met (within slack / strictly): cutlab.core.feasibility_clock
               "constraints_met", "constraints_met_strictly"]
        )
        write_atomic(path, _csv_text([self.columns, *self._rows_through(start_step)]))
        self._file = open(path, "a", newline="")
        self._writer = csv.writer(self._file)

    def _rows_through(self, step: int) -> list[list[str]]:
        """The file's complete rows of steps 1..``step``, the checkpoint's (a row cut by a kill mid-write is not
        complete; rows after ``step`` re-run). A history without all of them would end a "complete" record with gaps."""
        if not step:  # a fresh start (0, or None: no checkpoint)
            return []
        fix = "pass run_name=<new name> to train the run again (or move its folder aside)"
        if not self.path.exists():
            raise CutlabError(f"{self.path} is missing, but the checkpoint is at step {step}: the history of steps "
                              f"1..{step} is lost, so the run cannot resume with a whole record; {fix}")
        try:
            with open(self.path, newline="", encoding="utf-8") as handle:
                header, *rows = list(csv.reader(handle)) or [[]]
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise CutlabError(f"{self.path} cannot be read ({error}); {fix}") from None
        if header != self.columns:
            raise CutlabError(f"{self.path} has other columns than this run writes (another run's history?); {fix}")
        kept = [row for row in rows if len(row) == len(header) and row[0].isdigit() and int(row[0]) <= step]
        if [int(row[0]) for row in kept] != list(range(1, step + 1)):
            raise CutlabError(f"{self.path} does not hold steps 1..{step} (the checkpoint's) once each, in order; {fix}")
        return kept

    def write(self, row: dict[str, Any]) -> None:
        try:
            self._writer.writerow([row.get(column, "") for column in self.columns])
            self._file.flush()
        except OSError as error:
            raise DiskFull(self.path) if is_disk_full(error) else error

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as error:  # the row a full disk refused is lost with it: its step re-runs on resume
            if not is_disk_full(error):
                raise


def _csv_text(rows: list[list[Any]]) -> str:
    import io

    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def evaluation_rows(split: str, evaluation) -> list[dict[str, Any]]:
    """Long-format rows of one split's Evaluation: its metric and its mean loss per gamma and layer."""
    rows = []
    for g, gamma in enumerate(evaluation.gammas):
        for layer in range(evaluation.metric.shape[1]):
            rows.append({"split": split, "gamma_test": gamma, "layer": layer, "metric": evaluation.metric_name,
                         "value": float(evaluation.metric[g, layer])})
            rows.append({"split": split, "gamma_test": gamma, "layer": layer, "metric": "loss",
                         "value": float(evaluation.mean_loss[g, layer])})
    return rows


def write_evaluation(run_dir: Path, rows: list[dict[str, Any]], name: str = EVAL) -> None:
    """``rows`` (evaluation_rows) as ``run_dir/name``: a run's eval.csv, or an evaluation's metrics.csv."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=EVAL_COLUMNS)
    write_atomic(run_dir / name, frame.to_csv(index=False))


def write_sample_losses(run_dir: Path, evaluation) -> None:
    import pandas as pd

    frames = []
    for g, gamma in enumerate(evaluation.gammas):
        losses = evaluation.sample_losses[g].numpy()
        frame = pd.DataFrame(losses, columns=layer_columns("loss", losses.shape[1]))
        frame.insert(0, "sample", range(len(frame)))
        frame.insert(0, "gamma_test", gamma)
        frames.append(frame)
    write_atomic(run_dir / SAMPLE_LOSSES, pd.concat(frames).to_csv(index=False))
