"""Weights & Biases logging, offline by default, imported only when used (``import wandb`` costs ~0.5 s)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cutlab.errors import CutlabError

MODES = ("offline", "online", "disabled")
# A cache folder the user chose is kept; otherwise each run's W&B cache lives in that run's own folder.
USER_CACHE_DIR = os.environ.get("WANDB_CACHE_DIR")


class Tracker:
    """A W&B run in the run folder (``<run_dir>/wandb``), resumable by id; a no-op when disabled."""

    def __init__(self, mode: str, run_dir: Path, name: str, config: dict, project: str, entity: str | None,
                 group: str | None, tags: list[str], run_id: str | None) -> None:
        if mode not in MODES:
            raise CutlabError(f"wandb.mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.run = None
        self.mode = mode
        if mode == "disabled":
            return
        os.environ["WANDB_CACHE_DIR"] = USER_CACHE_DIR or str(run_dir / "wandb" / "cache")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(
            mode=mode, dir=str(run_dir), name=name, config=config, project=project, entity=entity,
            group=group, tags=list(tags), id=run_id, resume="allow" if run_id else None, reinit="create_new",
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
