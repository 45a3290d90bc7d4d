"""A task is everything one run trains and evaluates: model, objective, splits, batch preparation, sigma.

Each family of experiments builds its task in its own module; ``data.task`` picks the module and
``model.task`` must name the same family (a text model cannot read video).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from cutlab.core.models import LayerwiseModel
from cutlab.errors import CutlabError

# data.task -> "module:function" building that family's Task (imported only when used: transformers is slow)
BUILDERS = {
    "video": "cutlab.video_task:build_video_task",
    "text": "cutlab.text_task:build_text_task",
    "instruction": "cutlab.instruction_task:build_instruction_task",
}


@dataclass
class Task:
    """Everything the training loop and the evaluation need, independent of the model family.

    ``prepare(batch)`` turns a collated batch (already on the device) into (model input, target);
    ``sigma`` scales the perturbation (sigma_x of the clean data, or of the embeddings for text).
    """

    model: LayerwiseModel
    objective: Any
    train_set: Any
    val_set: Any
    test_set: Any
    prepare: Callable
    sigma: float
    source: str


def task_kind(cfg: DictConfig) -> str:
    data_kind, model_kind = cfg.data.get("task"), cfg.model.get("task")
    if data_kind not in BUILDERS:
        raise CutlabError(f"data.task must be one of {', '.join(BUILDERS)}, got {data_kind!r} (data={cfg.data.name})")
    if model_kind != data_kind:
        raise CutlabError(
            f"model={cfg.model.name} is for {model_kind} data and data={cfg.data.name} is {data_kind} data; choose "
            f"data={'|'.join(_choices('data', model_kind)) or '?'} for this model, or "
            f"model={'|'.join(_choices('model', data_kind)) or '?'} for this data"
        )
    return data_kind


def _choices(group: str, kind: str) -> list[str]:
    """The config names of ``group`` whose ``task`` is ``kind`` (for the mismatch message)."""
    folder = Path(__file__).resolve().parent.parent / "conf" / group
    return [path.stem for path in sorted(folder.glob("*.yaml")) if _task_of(folder, path.stem) == kind]


def _task_of(folder: Path, name: str, depth: int = 0):
    """A group config's ``task``, following its defaults list (distilbert.yaml extends hf_encoder.yaml)."""
    node = OmegaConf.load(folder / f"{name}.yaml")
    if "task" in node or depth > 4:
        return node.get("task")
    parents = [entry for entry in node.get("defaults", []) if isinstance(entry, str) and entry != "_self_"]
    return _task_of(folder, parents[0], depth + 1) if parents and (folder / f"{parents[0]}.yaml").exists() else None


def build_task(cfg: DictConfig) -> Task:
    module, function = BUILDERS[task_kind(cfg)].split(":")
    return getattr(importlib.import_module(module), function)(cfg)


TRAINING_DEVICES = ("cpu", "cuda", "mps", "xpu")


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when present, else CPU) or a device this machine has; anything else stops in one line."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(str(name))
        if device.type not in TRAINING_DEVICES:
            raise ValueError(device.type)
    except (RuntimeError, ValueError):
        raise CutlabError(f"device={name!r} is not a device; use device=auto (CUDA when present, else CPU), "
                          "device=cpu, device=cuda or device=cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise CutlabError(f"device={name} but this machine has no usable CUDA GPU (torch {torch.__version__}, "
                              "torch.cuda.is_available() is False); use device=auto or device=cpu")
        if device.index is not None and device.index >= count:
            raise CutlabError(f"device={name} but this machine has {count} CUDA GPU(s), cuda:0..cuda:{count - 1}; "
                              "use device=auto or one of those")
    elif device.type != "cpu" and not _available(device):
        raise CutlabError(f"device={name} is not available on this machine; use device=auto or device=cpu")
    return device


def _available(device: torch.device) -> bool:
    """Whether a device of another kind (mps, xpu, ...) exists here: a one-element tensor can be made on it."""
    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError):
        return False
    return True
