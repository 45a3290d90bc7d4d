"""Per-layer objectives: representations Phi_0..Phi_L -> the per-sample, per-layer loss matrix [batch, L+1].

Each objective carries its metric, the metric's direction and the run's headline number, so that whatever ranks,
selects or summarises runs reads them here instead of guessing from a metric's name.
"""

from __future__ import annotations

from typing import Protocol

import torch

from cutlab.core.objectives.base import Headline, headline_of
from cutlab.core.objectives.classification import ClassificationObjective
from cutlab.core.objectives.denoising import DenoisingObjective
from cutlab.core.objectives.language_model import TokenCrossEntropyObjective


class Objective(Protocol):
    metric_name: str          # the evaluation metric (rmse, accuracy, token_accuracy)
    higher_is_better: bool    # its direction: selection maximises it when True

    def loss_matrix(self, outputs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor: ...

    def evaluation_terms(self, outputs: list[torch.Tensor], target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]: ...

    def metric_from_sums(self, sums: torch.Tensor, count: int) -> torch.Tensor: ...

    def headline_key(self) -> str: ...       # the summary key of the run's one number (Headline)

    def headline_name(self) -> str: ...      # what that number is called: rmse, or accuracy AUC (Table 4)

    def selection_mode(self) -> str: ...     # "min" or "max", from higher_is_better

    def headline(self, last_layer: torch.Tensor, grid: list[float]) -> dict: ...


OBJECTIVES = (DenoisingObjective, ClassificationObjective, TokenCrossEntropyObjective)


def objective_of_metric(metric_name: str):
    """The objective whose metric a run record names (``summary.json: metric``)."""
    for objective in OBJECTIVES:
        if objective.metric_name == metric_name:
            return objective
    raise KeyError(f"no objective has the metric {metric_name!r}; metrics: {', '.join(o.metric_name for o in OBJECTIVES)}")


__all__ = ["Objective", "OBJECTIVES", "objective_of_metric", "Headline", "headline_of", "DenoisingObjective",
           "ClassificationObjective", "TokenCrossEntropyObjective"]
