"""Checkpoints: model, both optimisers, multipliers, slacks, RNG, progress and the W&B run id, in one file.

The file holds only tensors, numbers, strings and containers of them, and is read with ``weights_only=True``:
a checkpoint from someone else's folder cannot run code (a full unpickle would run whatever it names).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from cutlab.atomic import atomic_file
from cutlab.errors import CutlabError
from cutlab.run.records import CHECKPOINT
# what every checkpoint cutlab writes holds, with its type
REQUIRED = {"trainer": dict, "record_version": int, "epsilon": (float, int, type(None))}


def save_checkpoint(run_dir: Path, state: dict) -> Path:
    """Atomic: written to a temporary file of this process, then renamed over the previous checkpoint."""
    path = run_dir / CHECKPOINT
    with atomic_file(path) as handle:
        torch.save(state, handle)
    return path


def load_checkpoint(run_dir: Path) -> dict | None:
    """The checkpoint in ``run_dir`` (None if there is none); anything else than cutlab's own is refused in one line."""
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    fix = f"move {path} aside to restart this run from scratch, or choose another run_name=..."
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:  # weights_only refused an object: it never ran
        paragraphs = [part.strip() for part in str(error).split("\n\n") if part.strip()]
        refused = paragraphs[1 if len(paragraphs) > 2 else 0].splitlines()[-1]  # torch's reason, between its advice
        raise CutlabError(f"the checkpoint {path} holds more than tensors and numbers ({refused}); it was not "
                          f"loaded, since unpickling it could run code: {fix}") from None
    except Exception as error:  # torch raises several types for a truncated or foreign file
        raise CutlabError(f"the checkpoint {path} cannot be read ({type(error).__name__}: "
                          f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}); {fix}") from None
    if not isinstance(state, dict) or any(key not in state or not isinstance(state[key], kind)
                                             for key, kind in REQUIRED.items()):
        raise CutlabError(f"the checkpoint {path} is not one cutlab wrote (it lacks {', '.join(REQUIRED)}); {fix}")
    return state


def mismatch_reason(error: Exception, limit: int = 300) -> str:
    """Why saved weights do not fit a model, in one line: torch's load_state_dict names the missing and unexpected
    keys on the lines after its first ("Error(s) in loading state_dict for ..."), which alone says nothing."""
    text = " ".join(line.strip() for line in str(error).strip().splitlines()) or type(error).__name__
    return f"{type(error).__name__}: {text[:limit]}{' ...' if len(text) > limit else ''}"
