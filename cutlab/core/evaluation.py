"""Evaluation over a gamma_test grid, per-sample descent ratios, and the feasibility verdict.

Each clean batch is read once and perturbed at every gamma of the grid; one forward per gamma yields every
layer at once (no per-layer recomputation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from cutlab.core.perturbation import EVAL_STREAM, noise_generator, perturbed_forward
from cutlab.core.primal_dual import Constraints
from cutlab.core.training import SampleSource, collate, to_device


class EvaluatedObjective(Protocol):
    metric_name: str

    def evaluation_terms(
        self, outputs: list[torch.Tensor], target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, int]: ...

    def metric_from_sums(self, sums: torch.Tensor, count: int) -> torch.Tensor: ...


@dataclass
class Evaluation:
    """Results on one split. ``metric`` and ``mean_loss`` are [k gammas, L+1]; ``sample_losses`` [k, N, L+1]."""

    gammas: list[float]
    metric_name: str
    metric: torch.Tensor
    mean_loss: torch.Tensor
    sample_losses: torch.Tensor

    def ratios(self, gamma_index: int) -> torch.Tensor:
        """Per-sample descent ratios l_l / l_{l-1}, [N, L] (Fig. 12)."""
        losses = self.sample_losses[gamma_index]
        return losses[:, 1:] / losses[:, :-1].clamp_min(torch.finfo(losses.dtype).tiny)

    def ratio_stats(self, gamma_index: int) -> dict[str, float]:
        ratios = self.ratios(gamma_index).flatten()
        return {
            "ratio_mean": float(ratios.mean()),
            "ratio_median": float(ratios.median()),
            "fraction_decreasing": float((ratios < 1.0).float().mean()),
        }


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    objective: EvaluatedObjective,
    samples: SampleSource,
    prepare: Callable,
    gammas: list[float],
    sigma: float,
    noise_mean: float = 0.0,
    seed: int = 0,
    batch_size: int = 8,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Metric and mean loss per gamma and layer over ``samples``, with the noise fixed by ``seed``."""
    model.eval()
    device = torch.device(device)
    metric_sums: torch.Tensor | None = None
    counts = [0] * len(gammas)
    sample_losses: list[list[torch.Tensor]] = [[] for _ in gammas]
    order = torch.arange(len(samples)).split(batch_size)
    for batch_index, indices in enumerate(order):
        inputs, target = prepare(to_device(collate(samples, indices), device))
        for g, gamma in enumerate(gammas):
            generator = noise_generator(seed, EVAL_STREAM, batch_index * 1_000 + g, device)
            per_gamma = perturbed_forward(model, inputs, gamma, sigma, noise_mean, generator)
            losses, sums, count = objective.evaluation_terms(per_gamma, target)
            if metric_sums is None:
                metric_sums = torch.zeros(len(gammas), sums.numel(), dtype=torch.float64)
            metric_sums[g] += sums.cpu().double()
            counts[g] += count
            sample_losses[g].append(losses.cpu())
        if progress:
            progress(batch_index + 1, len(order))
    if metric_sums is None:
        raise ValueError("evaluate() got an empty split")
    losses = torch.stack([torch.cat(per_gamma) for per_gamma in sample_losses])
    metric = torch.stack([objective.metric_from_sums(metric_sums[g], counts[g]) for g in range(len(gammas))])
    return Evaluation(list(gammas), objective.metric_name, metric, losses.mean(dim=1), losses)


@dataclass
class Verdict:
    """Whether every constraint holds on held-out data, within ``tolerance`` and the run's own slacks."""

    status: str  # "feasible" | "infeasible" | "unconstrained"
    constraint_values: list[float]
    allowed: list[float]
    violated_layers: list[int]
    tolerance: float

    def as_dict(self) -> dict:
        return vars(self).copy()


def feasibility_verdict(
    layer_losses: torch.Tensor,
    constraints: Constraints,
    slacks: torch.Tensor,
    tolerance: float,
    constrained: bool,
) -> Verdict:
    """g_l <= u_l + tolerance * scale_l for every active constraint, on held-out layer losses [L+1].

    ``scale_l`` is the constraint's own right-hand side ((1-alpha) l_{l-1}, or epsilon for g_0), so the
    tolerance is relative: 0.02 allows a layer to miss its required descent by 2 % of its target.
    ERM runs get status "unconstrained", with the same check recorded for comparison.
    """
    values = constraints.values(layer_losses)
    scale = torch.cat(
        [
            torch.tensor([constraints.epsilon if constraints.epsilon is not None else 0.0]),
            (1.0 - constraints.alpha) * layer_losses[:-1].abs(),
        ]
    )
    allowed = slacks + tolerance * scale
    active = constraints.active_mask(len(layer_losses))
    violated = [int(i) for i in torch.nonzero(active & (values > allowed)).flatten()]
    if not constrained:
        status = "unconstrained"
    else:
        status = "infeasible" if violated else "feasible"
    return Verdict(status, values.tolist(), allowed.tolist(), violated, tolerance)
