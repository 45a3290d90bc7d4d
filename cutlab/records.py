"""The run record: the folder training writes and analysis reads (DESIGN.md, "The run record is the contract").

Files, all readable by pandas without cutlab:

- ``config.yaml``         the resolved config (written once, when the run starts)
- ``provenance.json``     git commit and dirty flag, seed, host, device, versions, command line
- ``history.csv``         one row per training step: every layer's loss, multiplier, slack, constraint value,
                          the Lagrangian, gradient norm, learning rates, step time
- ``eval.csv``            long format: split, gamma_test, layer, metric, value (metric = rmse|accuracy|loss)
- ``sample_losses.csv``   per-sample, per-layer losses on the test split at every gamma_test (Fig. 12's ratios)
- ``summary.json``        status (running|complete|failed|interrupted), the headline numbers, ratio statistics, the
                          feasibility verdict, W&B run id, record_version. Written last: a run is complete
                          exactly when summary.json says ``"status": "complete"``.
- ``checkpoint.pt``       everything needed to resume (see cutlab.checkpoints)
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

RECORD_VERSION = 1
SUMMARY = "summary.json"
HISTORY = "history.csv"
EVAL = "eval.csv"
SAMPLE_LOSSES = "sample_losses.csv"
CONFIG = "config.yaml"
PROVENANCE = "provenance.json"


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so a crash never leaves a half-written record file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_summary(run_dir: Path) -> dict | None:
    path = run_dir / SUMMARY
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def is_complete(run_dir: Path) -> bool:
    summary = read_summary(run_dir)
    return bool(summary) and summary.get("status") == "complete"


def layer_columns(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}_{layer}" for layer in range(layers)]


class HistoryWriter:
    """Appends one CSV row per step and flushes it, so an interrupted run keeps every step it took.

    On resume the rows after the checkpoint's step are dropped first: those steps are about to be re-run
    (identically, since batches and noise are functions of the step).
    """

    def __init__(self, path: Path, layers: int, resume_from_step: int | None) -> None:
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
        if resume_from_step is not None and path.exists():
            import pandas as pd  # lazy, as every pandas use in cutlab: ~0.2 s of start-up before step 1 otherwise

            kept = pd.read_csv(path)
            kept = kept[kept["step"] <= resume_from_step]
            kept.to_csv(path, index=False)
        fresh = not path.exists()
        self._file = open(path, "a", newline="")
        self._writer = csv.writer(self._file)
        if fresh:
            self._writer.writerow(self.columns)
            self._file.flush()

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow([row.get(column, "") for column in self.columns])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


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


def write_evaluation(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=["split", "gamma_test", "layer", "metric", "value"])
    write_atomic(run_dir / EVAL, frame.to_csv(index=False))


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
