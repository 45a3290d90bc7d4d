"""A task is everything one run trains and evaluates: model, objective, splits, batch preparation, sigma.

Each family of experiments builds its task in its own module; ``data.task`` picks the module and
``model.task`` must name the same family (a text model cannot read video).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import torch
from omegaconf import DictConfig

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
            f"model={cfg.model.name} is a {model_kind} model and data={cfg.data.name} is {data_kind} data; "
            f"pair a {data_kind} model with it (see conf/model/*.yaml, key 'task')"
        )
    return data_kind


def build_task(cfg: DictConfig) -> Task:
    module, function = BUILDERS[task_kind(cfg)].split(":")
    return getattr(importlib.import_module(module), function)(cfg)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
