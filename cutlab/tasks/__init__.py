"""A task is everything one run trains and evaluates: model, objective, splits, batch preparation, sigma.

Each family of experiments builds its task in its own module; ``data.task`` picks the module and
``model.task`` must name the same family (a text model cannot read video). The model itself is instantiated
from its config's ``_target_`` (cutlab.tasks.models), so a new model is one module and one yaml.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig

from cutlab.config.groups import TASK_KINDS, task_kind
from cutlab.core.models import LayerwiseModel
from cutlab.core.progress import print_line

# data.task -> "module:function" building that family's Task (imported only when used: transformers is slow)
BUILDERS = {
    "video": "cutlab.tasks.video:build_video_task",
    "text": "cutlab.tasks.text:build_text_task",
    "instruction": "cutlab.tasks.instruction:build_instruction_task",
}
assert tuple(BUILDERS) == TASK_KINDS


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


def say(cfg: DictConfig, message: str) -> None:
    """A line of a task's building on stderr (its model loaded, its data read), unless progress=false."""
    if cfg.progress:
        print_line(message)


def build_task(cfg: DictConfig) -> Task:
    module, function = BUILDERS[task_kind(cfg)].split(":")
    return getattr(importlib.import_module(module), function)(cfg)


def objective_of(kind: str):
    """The objective class of a family of experiments (its metric and direction), without building the task."""
    from cutlab.core.objectives import ClassificationObjective, DenoisingObjective, TokenCrossEntropyObjective

    return {"video": DenoisingObjective, "text": ClassificationObjective,
            "instruction": TokenCrossEntropyObjective}[kind]
