"""Checkpoints: model, both optimisers, multipliers, slacks, RNG, progress and the W&B run id, in one file."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from cutlab.errors import CutlabError

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(run_dir: Path, state: dict) -> Path:
    """Atomic: written to a temporary file, then renamed over the previous checkpoint."""
    path = run_dir / CHECKPOINT
    tmp = path.with_name(f".{CHECKPOINT}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: Path) -> dict | None:
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises several types for a truncated or foreign file
        raise CutlabError(
            f"the checkpoint {path} cannot be read ({type(error).__name__}: {error}); "
            f"move it aside to restart this run from scratch, or choose another run_name=..."
        ) from None
