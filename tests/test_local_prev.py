"""train.detach_prev=local: l_{l-1} in g_l reaches the gradient only through block l-1's own computation.

Checked against autograd of the formula (each form), on the real DUST and UT blocks (which parameters a block's
local output reaches), through a whole PrimalDual step, and through the Trainer on the real DUST.
"""

from __future__ import annotations

import copy

import pytest
import torch

from cutlab.core.constraints import Constraints
from cutlab.core.models import DUST, UT
from cutlab.core.perturbation import Perturbation
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.core.training import Schedule, Trainer

from helpers.tiny import checkpoint_at

ALPHA, EPSILON = 0.25, 40.0
VALUE_EPSILON = 2.0  # the reference of the constraint-value tests, whose layer losses are near 1


def squared_error(outputs: list[torch.Tensor], clean: torch.Tensor) -> torch.Tensor:
    """[B, L+1]: half the squared error per token, summed over pixels, averaged over frames and patches."""
    return torch.stack([0.5 * (out - clean).pow(2).sum(dim=-1).mean(dim=(1, 2)) for out in outputs], dim=1)


def patch_batch(seed: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """(noisy, clean) 4x4-pixel patch tokens [B=2, T=3, P=2, n=16]."""
    generator = torch.Generator().manual_seed(seed)
    clean = torch.rand(2, 3, 2, 16, generator=generator)
    return clean + 0.1 * torch.randn(clean.shape, generator=generator), clean


def small(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "dust":
        return DUST(depth=3, patch=4, atoms=16, per_layer_dictionary=True)
    return UT(depth=3, patch=4, atoms=16, feedforward_init_std=0.1)


def written_out(form: str, reference: torch.Tensor, current: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """The constraint values by hand: l_0 against VALUE_EPSILON, then each l_l against (1 - alpha) l_{l-1}."""
    if form == "difference":
        return torch.cat([reference - VALUE_EPSILON, current - (1 - ALPHA) * previous])
    if form == "ratio":
        return torch.cat([reference / VALUE_EPSILON - 1, current / previous - (1 - ALPHA)])
    return torch.cat([torch.log(reference / VALUE_EPSILON), torch.log(current / previous / (1 - ALPHA))])


def lagrangian_written_out(full: torch.Tensor, multipliers: torch.Tensor, current: torch.Tensor,
                           previous: torch.Tensor) -> torch.Tensor:
    """l_L + lambda_0 (l_0/eps - 1) + sum_l lambda_l (current_l / previous_l - (1 - alpha)), the ratio form."""
    descent = multipliers[1:] * (current / previous - (1 - ALPHA))
    return full[-1] + multipliers[0] * (full[0] / EPSILON - 1) + descent.sum()


@pytest.mark.parametrize("form", ["difference", "ratio", "log_ratio"])
def test_values_are_the_full_losses_and_the_gradient_of_l_prev_is_the_local_copys(form: str) -> None:
    losses = torch.tensor([3.0, 2.0, 1.2, 0.5], dtype=torch.float64, requires_grad=True)
    local = losses.detach().clone().requires_grad_(True)  # equal in value, a graph of its own
    weights = torch.tensor([0.7, 1.3, 0.4, 2.0], dtype=torch.float64)
    constraints = Constraints(alpha=ALPHA, epsilon=VALUE_EPSILON, detach_prev="local", form=form)
    got = constraints.values(losses, local)
    full_grad, local_grad = torch.autograd.grad((weights * got).sum(), [losses, local])

    # the formula with l_{l-1} taken from the local copy and every l_l (numerators, l_0's reference) from the full one
    a, b = losses.detach().clone().requires_grad_(True), local.detach().clone().requires_grad_(True)
    expected = written_out(form, a[:1], a[1:], b[:-1])
    expected_full, expected_local = torch.autograd.grad((weights * expected).sum(), [a, b])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(full_grad, expected_full)
    torch.testing.assert_close(local_grad, expected_local)
    assert local_grad[-1] == 0  # l_L divides nothing
    # without the local copy (the primal warm-up) it is detach_prev=true
    torch.testing.assert_close(constraints.values(losses), Constraints(ALPHA, 2.0, True, form).values(losses))
    assert not any(constraints.prev_is_live(layer) for layer in range(3))


@pytest.mark.parametrize("kind", ["dust", "ut"])
def test_a_blocks_local_output_equals_its_output_and_reaches_only_that_block(kind: str) -> None:
    model = small(kind)
    noisy, clean = patch_batch()
    outputs = model(noisy)
    again, local = model.unroll_local(noisy, noisy)
    assert len(local) == len(outputs) == model.depth + 1
    for full, repeated, own in zip(outputs, again, local):
        assert torch.equal(repeated, own)  # the same pass: the same values
        torch.testing.assert_close(full, repeated)  # DUST's power iteration refines c a little at every pass
    for layer in range(1, model.depth + 1):
        model.zero_grad(set_to_none=True)
        squared_error([local[layer]], clean).sum().backward(retain_graph=True)
        if kind == "dust":  # block l is D_l alone (its attention scores and LISTA step both use D_l)
            reached = [d.grad is not None and bool(d.grad.abs().sum() > 0) for d in model.dictionaries]
            assert reached == [index == layer for index in range(model.depth + 1)]
        else:  # block l: S_l, b_l and the attention shared by every block; the decoder reads every layer out
            reached = [w.grad is not None and bool(w.grad.abs().sum() > 0) for w in model.weights]
            assert reached == [index == layer - 1 for index in range(model.depth)]
            assert model.encoder.grad is None  # the encoder is behind the detached input
            assert model.attention.grad is not None and model.decoder.grad is not None


@pytest.mark.parametrize("kind", ["dust", "ut"])
def test_a_primal_dual_step_descends_on_the_lagrangian_with_local_previous_losses(kind: str) -> None:
    model = small(kind)
    reference = copy.deepcopy(model)
    noisy, clean = patch_batch(seed=6)
    multipliers = torch.tensor([0.2, 0.9, 1.7, 0.6])
    primal_dual = PrimalDual(list(model.parameters()), torch.optim.SGD(model.parameters(), lr=1e-2), 4,
                             Constraints(ALPHA, EPSILON, "local", "ratio"), DualSettings(lr=0.1, optimizer="sgd"))
    primal_dual.multipliers.copy_(multipliers)
    assert primal_dual.uses_local_losses
    outputs, local = model.unroll_local(noisy, noisy)
    primal_dual.step(squared_error(outputs, clean), dual_active=False, local_loss_matrix=squared_error(local, clean))

    # the Lagrangian written out: l_L + lambda_0 (l_0/eps - 1) + sum_l lambda_l (l_l / l_{l-1}^local - (1 - alpha))
    full, own = (squared_error(o, clean).mean(dim=0) for o in reference.unroll_local(noisy, noisy))
    lagrangian = lagrangian_written_out(full, multipliers, full[1:], own[:-1])
    expected = torch.autograd.grad(lagrangian, list(reference.parameters()), allow_unused=True, retain_graph=True)
    for parameter, grad in zip(model.parameters(), expected):
        torch.testing.assert_close(parameter.grad, grad if grad is not None else torch.zeros_like(parameter))
    # the previous losses' own term is there: without it (detach_prev=true) block 1 gets another gradient
    detached = torch.autograd.grad(lagrangian_written_out(full, multipliers, full[1:], full[:-1].detach()),
                                   list(reference.parameters()), allow_unused=True)
    assert any(g is not None and not torch.allclose(p.grad, g) for p, g in zip(model.parameters(), detached))


class PatchSamples:
    """Clean 4x4-pixel patch-token windows [T=3, P=2, n=16]; the Trainer adds the run's noise."""

    def __init__(self, count: int = 8) -> None:
        self.data = torch.rand(count, 3, 2, 16, generator=torch.Generator().manual_seed(11))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


class SquaredErrorObjective:
    def loss_matrix(self, outputs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        return squared_error(outputs, target)


def dust_trainer(detach_prev: bool | str, model_seed: int = 0, gradient: str = "full") -> Trainer:
    torch.manual_seed(model_seed)
    model = DUST(depth=3, patch=4, atoms=16, per_layer_dictionary=True)
    primal_dual = PrimalDual(list(model.parameters()), torch.optim.Adam(model.parameters(), lr=1e-2), 4,
                             Constraints(ALPHA, EPSILON, detach_prev, "ratio", gradient),
                             DualSettings(lr=0.5, optimizer="sgd"))
    return Trainer(model, SquaredErrorObjective(), primal_dual, PatchSamples(), Schedule(3, 2, 1),  # 4 steps an epoch
                   lambda batch: (batch, batch), Perturbation(gamma=0.2, sigma=1.0, seed=3))


def test_the_trainer_feeds_the_local_losses_and_resumes_bit_identically() -> None:
    local, detached = dust_trainer("local"), dust_trainer(True)
    local_steps, detached_steps = [], []
    local.run(on_step=lambda progress, result, _: local_steps.append(result))
    detached.run(on_step=lambda progress, result, _: detached_steps.append(result))
    assert (local.primal_dual.multipliers > 0).any()
    # identical through the warm-up and the first step with multipliers (its forward pass precedes the dual step),
    # then the local gradient of l_{l-1} moves the dictionaries elsewhere
    for mine, theirs in zip(local_steps[:5], detached_steps[:5]):
        assert torch.equal(mine.layer_losses, theirs.layer_losses)
    assert not torch.equal(local_steps[-1].layer_losses, detached_steps[-1].layer_losses)

    state = checkpoint_at(dust_trainer("local"), 6)
    resumed = dust_trainer("local", model_seed=99)
    resumed.load_state_dict(state)
    resumed_steps = []
    resumed.run(on_step=lambda progress, result, _: resumed_steps.append(result))
    for mine, theirs in zip(resumed_steps, local_steps[6:], strict=True):
        assert torch.equal(mine.layer_losses, theirs.layer_losses) and torch.equal(mine.multipliers, theirs.multipliers)
    for mine, theirs in zip(resumed.model.parameters(), local.model.parameters()):
        assert torch.equal(mine, theirs)
