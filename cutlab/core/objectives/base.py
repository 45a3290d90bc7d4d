"""An objective's direction and headline: the numbers a run's summary leads with, computed in one place."""

from __future__ import annotations

import torch


class Headline:
    """Mixin: ``metric_name``, ``higher_is_better`` and the headline numbers of a run's test evaluation.

    Every objective reports the last layer's mean metric over the gamma_test grid (Table 3's number for video);
    one with ``area_under_gamma`` also reports the area under metric(gamma_test) (Table 4's AUC for text
    classification), and leads with it. The causal LM has none: the paper plots its accuracy (Fig. 6) only.
    """

    metric_name: str
    higher_is_better: bool
    area_under_gamma: bool = False

    @classmethod
    def headline_key(cls) -> str:
        """The summary key of the run's one number (Table 3: test_mean_metric; Table 4: test_auc)."""
        return "test_auc" if cls.area_under_gamma else "test_mean_metric"

    @classmethod
    def headline_name(cls) -> str:
        """What the headline number is called where it stands alone (a sweep's line per run)."""
        return f"{cls.metric_name} AUC" if cls.area_under_gamma else cls.metric_name

    @classmethod
    def selection_mode(cls) -> str:
        return "max" if cls.higher_is_better else "min"

    @classmethod
    def headline(cls, last_layer: torch.Tensor, grid: list[float]) -> dict:
        """``last_layer``: the last layer's test metric at each gamma of ``grid``."""
        numbers = {"test_mean_metric": float(last_layer.mean())}  # mean over the gamma_test grid
        if cls.area_under_gamma:  # trapezoid, not normalised; one gamma has no area
            gammas = torch.tensor(grid, dtype=last_layer.dtype)
            order = torch.argsort(gammas)
            numbers["test_auc"] = (float(torch.trapezoid(last_layer[order], gammas[order])) if len(grid) > 1
                                   else float("nan"))
        return numbers


def headline_of(summary: dict, objective: Headline) -> float | None:
    """A run summary's headline number, as its objective declares it."""
    return summary.get(objective.headline_key())
