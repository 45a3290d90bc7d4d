"""Evaluation over a gamma_test grid, per-sample descent ratios, and the feasibility verdict.

Each clean batch is read once and perturbed at every gamma of the grid; one forward per gamma yields every
layer at once (no per-layer recomputation).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np
import torch

from cutlab.core.data.groups import SampleGroups
from cutlab.core.errors import NonFiniteLoss
from cutlab.core.perturbation import EVAL_STREAM, Perturbation, noise_generator, perturbed_forward
from cutlab.core.constraints import Constraints
from cutlab.core.precision import DEFAULT_PRECISION, as_float32, forward_precision
from cutlab.core.training import SampleSource, collate, to_device

STREAMS_PER_BATCH = 1_000  # a batch's noise streams: batch * 1000 + 0..999, one per gamma (at most 998 + gamma_train)
BATCHES_PER_STREAM = 2**20  # a stream past those (a gamma named by its value): stream * 2**20 + batch


def noise_index(batch_index: int, stream: int) -> int:
    """The evaluation noise's index (cutlab.core.perturbation.noise_seed) of a batch and a gamma's stream: a grid's
    place (< STREAMS_PER_BATCH) as every record drew it; a larger stream (cutlab.transfer.evaluate.noise_streams) an
    index of its own per batch, past the linear range (hashed), so that no two such gammas share a draw."""
    if stream < STREAMS_PER_BATCH:
        return batch_index * STREAMS_PER_BATCH + stream
    return stream * BATCHES_PER_STREAM + batch_index


class EvaluatedObjective(Protocol):
    metric_name: str

    def evaluation_terms(
        self, outputs: list[torch.Tensor], target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, int]: ...

    def metric_from_sums(self, sums: torch.Tensor, count: int) -> torch.Tensor: ...


@dataclass
class Evaluation:
    """Results on one split. ``metric`` and ``mean_loss`` are [k gammas, L+1]; ``sample_losses`` [k, N, L+1];
    ``sample_groups``: the split's groups of dependent samples (video clips), None when its samples are independent."""

    gammas: list[float]
    metric_name: str
    metric: torch.Tensor
    mean_loss: torch.Tensor
    sample_losses: torch.Tensor
    sample_groups: SampleGroups | None = None

    def ratios(self, gamma_index: int) -> torch.Tensor:
        """Per-sample descent ratios l_l / l_{l-1}, [N, L] (Fig. 12)."""
        losses = self.sample_losses[gamma_index]
        return losses[:, 1:] / losses[:, :-1].clamp_min(torch.finfo(losses.dtype).tiny)

    def restricted(self, count: int) -> "Evaluation":
        """The first ``count`` gammas only."""
        return Evaluation(self.gammas[:count], self.metric_name, self.metric[:count], self.mean_loss[:count],
                          self.sample_losses[:count], self.sample_groups)

    def ratio_stats(self, gamma_index: int) -> dict[str, float]:
        """Mean, median and fraction < 1 of the per-sample ratios (Fig. 12), over the pairs whose l_{l-1} > 0: a
        sample that layer l-1 already reproduces (a float32 cross-entropy of exactly 0) has no ratio, and dividing
        by the smallest float would make the mean 1e28 and count 0/0 as descent; ``ratio_pairs_left_out`` counts them."""
        losses = self.sample_losses[gamma_index]
        defined = (losses[:, :-1] > 0).flatten()
        ratios = self.ratios(gamma_index).flatten()[defined]
        nan = float("nan")
        return {
            "ratio_mean": float(ratios.mean()) if len(ratios) else nan,
            # numpy's median, as Fig. 12's annotation: torch.median returns the lower middle value of an even count
            "ratio_median": float(np.median(ratios.detach().cpu().double().numpy())) if len(ratios) else nan,
            "fraction_decreasing": float((ratios < 1.0).float().mean()) if len(ratios) else nan,
            "ratio_pairs_left_out": int((~defined).sum()),
        }


@contextmanager
def buffers_kept(model: torch.nn.Module) -> Iterator[None]:
    """Put back, on leaving, every buffer a forward pass inside updated (DUST's power-iteration vectors).

    For evaluations made *during* training (a search pruner's epoch-end validation, eval.iterate=best's checks):
    without this, validating would change the training that follows it, and a run resumed from the checkpoint
    written before the validation would not continue as the run that validated."""
    kept = {name: buffer.detach().clone() for name, buffer in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(kept[name])


def batch_count(samples: int, batch_size: int) -> int:
    """How many batches ``evaluate`` makes of ``samples`` (the last one short)."""
    return -(-samples // batch_size)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    objective: EvaluatedObjective,
    samples: SampleSource,
    prepare: Callable,
    gammas: list[float],
    noise: Perturbation,
    batch_size: int = 8,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    precision: str = DEFAULT_PRECISION,
    streams: list[int] | None = None,
) -> Evaluation:
    """Metric and mean loss per gamma and layer over ``samples``, with the noise fixed by ``noise.seed``.

    Each gamma of ``gammas`` replaces ``noise.gamma`` (gamma_train); sigma, mean and seed are ``noise``'s. Each
    gamma's noise is drawn from its own stream, by default its position in ``gammas``; ``streams`` names them, so
    that one gamma evaluated alone draws the noise it gets in a longer list. ``progress(done, batches)`` is called
    with 0 before the first batch and after each one."""
    model.eval()
    device = torch.device(device)
    metric_sums: torch.Tensor | None = None
    counts = [0] * len(gammas)
    sample_losses: list[list[torch.Tensor]] = [[] for _ in gammas]
    order = torch.arange(len(samples)).split(batch_size)  # batch_count(len(samples), batch_size) of them
    if progress:  # (0, batches) first: a slow model's evaluation is announced before its first batch, not after
        progress(0, len(order))
    for batch_index, indices in enumerate(order):
        inputs, target = prepare(to_device(collate(samples, indices), device))
        for g, gamma in enumerate(gammas):
            stream = streams[g] if streams is not None else g
            generator = noise_generator(noise.seed, EVAL_STREAM, noise_index(batch_index, stream), device)
            with forward_precision(precision, device):
                per_gamma = perturbed_forward(model, inputs, gamma, noise.sigma, noise.mean, generator)
            per_gamma = as_float32(per_gamma)
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
    _check_finite(losses.mean(dim=1), gammas)
    metric = torch.stack([objective.metric_from_sums(metric_sums[g], counts[g]) for g in range(len(gammas))])
    return Evaluation(list(gammas), objective.metric_name, metric, losses.mean(dim=1), losses,
                      getattr(samples, "sample_groups", None))


def _check_finite(mean_loss: torch.Tensor, gammas: list[float]) -> None:
    """Refuse held-out losses that are NaN or infinite: a NaN compares as neither above nor below a bound, so the
    verdict would read a diverged model as feasible. Training checks each minibatch before its step; this catches
    the parameters the last step left (or a held-out input with NaNs)."""
    bad = ~torch.isfinite(mean_loss)
    if bool(bad.any()):
        g, layer = (int(i) for i in bad.nonzero()[0])
        value = float(mean_loss[g, layer])
        raise NonFiniteLoss(
            f"the held-out loss of layer {layer} at gamma_test={gammas[g]:g} is {value}: the model's "
            "parameters diverged (or its forward returns NaN or inf); lower the primal learning rate (train.lr=...) or "
            "the dual one (train.dual_lr=...), set gradient clipping (train.grad_clip=1.0), or check the input data "
            "for NaNs", layer, value)


STRICTLY_FEASIBLE = "feasible"
SLACK_FEASIBLE = "slack_feasible"
INFEASIBLE = "infeasible"
DEGENERATE = "degenerate"
UNCONSTRAINED = "unconstrained"


@dataclass
class Verdict:
    """Whether every constraint holds on held-out data, and how.

    ``status`` is one of
    - ``feasible``: every active constraint within ``tolerance`` of its right-hand side (strictly feasible);
    - ``slack_feasible``: met only by using the run's resilience slack (``relative_slacks``: how much, as a
      fraction of each right-hand side) on the ``slack_layers``;
    - ``infeasible``: some constraint misses even with its slack (``violated_layers``);
    - ``degenerate``: the only misses are descent constraints whose right-hand side is 0 (l_{l-1} = 0: the
      layer before already reproduces the target, as UT's input at gamma = 0), which no model can meet;
    - ``unconstrained``: ERM, with the same check recorded for comparison.
    """

    status: str
    constraint_values: list[float]
    relative_violations: list[float]
    relative_slacks: list[float]
    violated_layers: list[int]
    slack_layers: list[int]
    degenerate_layers: list[int]
    tolerance: float
    last_layer_loss: float  # l_L on the held-out data the verdict reads
    last_layer_bound: float | None  # epsilon (1 - alpha)^L: the most the constraints allow l_L together (None: no epsilon)
    # how far each relative violation could move with another held-out draw of the same size, at interval_level
    # (violation_intervals: {"layers", "low", "high", "resampled", "count"}); None when no per-sample losses were given
    violation_interval: dict | None = None
    interval_level: float | None = None

    def as_dict(self) -> dict:
        return vars(self).copy()


def misses(constraints: Constraints, layer_losses: torch.Tensor, slacks: torch.Tensor,
           tolerance: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks [L+1] of the active constraints missed by more than ``tolerance`` of their right-hand side (strictly),
    and of those missed even with the run's resilience slack: the one rule of the verdict and the feasibility clock.
    A NaN counts as missed, never as met."""
    losses = layer_losses.detach().cpu()
    violation = constraints.relative_violations(losses)
    active = constraints.active_mask(len(losses))
    beyond_slack = ~(violation <= tolerance + constraints.relative_slacks(slacks, losses))
    if constraints.form == "difference":
        # a zero right-hand side (l_{l-1} = 0) makes both relative numbers inf whatever the slack: read g_l <= u_l
        rhs = constraints.right_hand_sides(losses)
        within = (losses - rhs) <= slacks.detach().cpu().to(losses.dtype)
        beyond_slack = torch.where(rhs > 0, beyond_slack, ~within)
    return active & ~(violation <= tolerance), active & beyond_slack


INTERVAL_LEVEL = 0.9
BOOTSTRAP_RESAMPLES = 1000
# fewer groups (Ped2's 2 validation clips), or samples (a text set of a few rows): no interval, not a misleading one
MIN_INTERVAL_GROUPS = 10


def violation_intervals(sample_losses: torch.Tensor, constraints: Constraints, groups: SampleGroups | None = None,
                        level: float = INTERVAL_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict:
    """A percentile-bootstrap interval of each active constraint's relative violation, from per-sample losses
    [N, L+1]: ``{"layers": [l, ...], "low": [...], "high": [...], "resampled": unit, "count": n}`` (flat lists, so
    W&B's summary holds them).

    The verdict reads means over a finite held-out set; with a few hundred samples a constraint can miss or meet
    its bound by sampling alone (over 1000 IMDb test reviews a last layer's violation has a standard deviation of
    about 3 %). Samples are resampled as independent unless ``groups`` says which belong together: then whole
    groups are (a cluster bootstrap; windows of one video clip show one scene, and on Ped2's test clips resampling
    windows gives intervals about a third as wide). With fewer than MIN_INTERVAL_GROUPS groups (or samples, where
    there are no groups) there is no interval (empty "low" and "high"; "count" says how many there were): a
    bootstrap over a handful of clips cannot say how another draw of clips would fall, and over one sample it is
    that sample's value, an interval of width 0. The evaluation noise is held as drawn (the run's seed fixes it), so the
    interval does not cover another draw of it. Seeded, so a record is reproducible. Inactive slots (l_0 without
    epsilon) are left out; a degenerate one (a zero right-hand side) gets [inf, inf].
    """
    losses = sample_losses.detach().cpu().double()
    if groups is None:
        totals, sizes, unit = losses, torch.ones(len(losses), dtype=losses.dtype), "sample"
    else:
        if len(groups.ids) != len(losses):
            raise ValueError(f"violation_intervals: {len(groups.ids)} group ids for {len(losses)} samples")
        _, member = torch.unique(groups.ids, return_inverse=True)
        count = int(member.max()) + 1
        totals = torch.zeros(count, losses.shape[1], dtype=losses.dtype).index_add_(0, member, losses)
        sizes, unit = torch.bincount(member, minlength=count).to(losses.dtype), groups.unit
    layers = [int(layer) for layer in torch.nonzero(constraints.active_mask(losses.shape[1])).flatten()]
    described = {"layers": layers, "resampled": unit, "count": len(totals)}
    if len(totals) < MIN_INTERVAL_GROUPS:
        return {**described, "low": [], "high": []}
    generator = torch.Generator().manual_seed(seed)
    draws = []
    for _ in range(resamples):
        picked = torch.randint(len(totals), (len(totals),), generator=generator)
        draws.append(constraints.relative_violations(totals[picked].sum(dim=0) / sizes[picked].sum()))
    draws = torch.stack(draws)
    tail = (1.0 - level) / 2
    tails = torch.tensor([tail, 1.0 - tail], dtype=draws.dtype)
    # a degenerate slot (l_{l-1} = 0 in every resample: nothing can descend) is inf throughout, and linear
    # interpolation between two infs gives nan; the nearest order statistic keeps it inf, as its point value is
    low, high = torch.where(torch.isfinite(draws).all(dim=0), torch.quantile(draws, tails, dim=0),
                            torch.quantile(draws, tails, dim=0, interpolation="nearest"))
    return {**described, "low": [float(low[layer]) for layer in layers], "high": [float(high[layer]) for layer in layers]}


def feasibility_verdict(
    layer_losses: torch.Tensor,
    constraints: Constraints,
    slacks: torch.Tensor,
    tolerance: float,
    constrained: bool,
    sample_losses: torch.Tensor | None = None,
    sample_groups: SampleGroups | None = None,
) -> Verdict:
    """Classify held-out layer losses [L+1] against the constraints (see :class:`Verdict`).

    The check is made on relative violations (l_l - rhs_l) / rhs_l, so it is the same for every constraint form
    and the tolerance is relative: 0.02 allows a layer to miss its required descent by 2 % of its target. With the
    per-sample losses [N, L+1] behind ``layer_losses`` (and their groups, for video), the verdict also gives each
    violation's sampling interval (violation_intervals); the status itself reads the point estimates.
    """
    losses = layer_losses.detach().cpu().double()
    violation = constraints.relative_violations(losses)
    relative_slack = constraints.relative_slacks(slacks, losses)
    active = constraints.active_mask(len(losses))
    degenerate_rhs = torch.cat([torch.tensor([False]), losses[:-1] <= 0]) & active
    missed, violated = misses(constraints, losses, slacks, tolerance)
    degenerate = violated & degenerate_rhs
    if constraints.reference_at_target:  # every constraint chains down to a reference that is a round-off of 0
        degenerate_rhs = active.clone()
        degenerate = (violated | missed) & degenerate_rhs
        violated, missed = violated & ~degenerate_rhs, missed & ~degenerate_rhs
    if not constrained:
        status = UNCONSTRAINED
    elif bool((violated & ~degenerate_rhs).any()):
        status = INFEASIBLE
    elif bool(degenerate.any()):
        status = DEGENERATE
    elif bool(missed.any()):
        status = SLACK_FEASIBLE
    else:
        status = STRICTLY_FEASIBLE
    indices = lambda mask: [int(i) for i in torch.nonzero(mask).flatten()]  # noqa: E731
    values = constraints.values(losses) if not bool(degenerate_rhs.any()) or constraints.form == "difference" \
        else torch.full_like(losses, float("nan"))
    return Verdict(status, [float(v) for v in values], [float(v) for v in violation],
                   [float(v) for v in relative_slack], indices(violated & ~degenerate_rhs),
                   indices(missed & ~violated), indices(degenerate), tolerance, float(losses[-1]),
                   constraints.last_layer_bound(len(losses) - 1),
                   None if sample_losses is None else violation_intervals(sample_losses, constraints, sample_groups),
                   None if sample_losses is None else INTERVAL_LEVEL)
