"""Which layers the primal step back-propagates through (paper Sec. 3, Eq. (P-CUT)): detach_prev removes the
gradient through the previous layer's loss, ERM minimises l_L alone, and layers whose Lagrangian weight is zero are
detached without changing a bit (PrimalDual.layers_in_gradient, Trainer's detach_left_out).
"""

from __future__ import annotations

import copy

import pytest
import torch

from helpers.tiny import SquaredError, TinyUnrolled, regression_batch, tiny_primal_dual

from cutlab.core.constraints import Constraints
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.core.training import detach_left_out


class PerLayerParameters(torch.nn.Module):
    """Phi_l = theta_l (a vector per layer): each theta_l affects l_l and nothing else."""

    def __init__(self, layers: int, dim: int = 3) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.thetas = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(dim, generator=generator)) for _ in range(layers)]
        )

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [theta.expand(x.shape[0], -1) for theta in self.thetas]


@pytest.mark.parametrize("detach_prev", [False, True, "first"])
def test_detach_prev_removes_gradient_through_previous_layer(detach_prev: bool | str) -> None:
    alpha = 0.25
    multipliers = torch.tensor([0.7, 1.3, 2.1, 0.4])
    model = PerLayerParameters(4)
    generator = torch.Generator().manual_seed(6)
    x, y = torch.zeros(5, 3), torch.randn(5, 3, generator=generator)
    primal_dual = PrimalDual(list(model.parameters()), torch.optim.SGD(model.parameters(), lr=0.0), 4,
                             Constraints(alpha=alpha, epsilon=0.1, detach_prev=detach_prev), DualSettings(lr=0.1))
    primal_dual.multipliers.copy_(multipliers)

    # reference gradients of each layer loss w.r.t. its own theta, by autograd on a copy
    reference = copy.deepcopy(model)
    layer_losses = SquaredError().loss_matrix(reference(x), y).mean(dim=0)
    own = [torch.autograd.grad(layer_losses[l], reference.thetas[l])[0] for l in range(4)]

    result = primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=False)
    # the forward values do not depend on detaching
    expected_values = torch.cat([layer_losses[:1] - 0.1, layer_losses[1:] - (1 - alpha) * layer_losses[:-1]]).detach()
    assert torch.equal(result.constraint_values, expected_values)
    # theta_l enters g_l (weight lambda_l), g_{l+1} through l_l = "l_{l-1}" of the next constraint (weight
    # -(1-alpha) lambda_{l+1}, absent when detached: every l_l under true, l_0 alone under "first") and the
    # objective when l = L (weight 1)
    for l in range(4):
        weight = multipliers[l].item()
        if l < 3 and (detach_prev is False or (detach_prev == "first" and l > 0)):
            weight -= (1 - alpha) * multipliers[l + 1].item()
        if l == 3:
            weight += 1.0
        torch.testing.assert_close(model.thetas[l].grad, weight * own[l], rtol=1e-6, atol=1e-7)
    # the layer that only affects l_1 (= l_{l-1} of constraint g_2): gradient differs from the attached case by
    # exactly the (1-alpha) lambda_2 term, so detach_prev is visible
    attached = (multipliers[1] - (1 - alpha) * multipliers[2]).item() * own[1]
    assert torch.allclose(model.thetas[1].grad, attached, rtol=1e-6, atol=1e-7) == (detach_prev is not True)


def test_erm_minimises_the_last_layer_only() -> None:
    model, primal_dual = tiny_primal_dual(None, None, seed=4)
    assert not primal_dual.constrained and primal_dual.dual_optimizer is None
    x, y = regression_batch(seed=2)
    reference = copy.deepcopy(model)
    last = SquaredError().loss_matrix(reference(x), y)[:, -1].mean()
    expected = torch.autograd.grad(last, list(reference.parameters()))
    everything = SquaredError().loss_matrix(reference(x), y).mean(dim=0).sum()
    other = torch.autograd.grad(everything, list(reference.parameters()))

    result = primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)
    # tolerance: 1e-6 relative (same graph up to where the column is selected; in practice identical)
    for grad, reference_grad, other_grad in zip((p.grad for p in model.parameters()), expected, other):
        torch.testing.assert_close(grad, reference_grad, rtol=1e-6, atol=1e-8)
    assert any(not torch.allclose(e, o) for e, o in zip(expected, other))  # the other layers would matter
    assert result.lagrangian == pytest.approx(last.item(), rel=1e-6)
    primal_dual.end_epoch(dual_active=True)
    assert torch.equal(primal_dual.multipliers, torch.zeros(4)) and torch.equal(primal_dual.slacks, torch.zeros(4))


# --------------------------------------------------------------------------------------------------------------
# Layers with zero multipliers are not back-propagated (PrimalDual.layers_in_gradient), exactly
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("detach_prev", [False, True, "first"], ids=["through-previous", "detach-prev", "detach-first"])
def test_layers_in_gradient_are_those_with_a_nonzero_weight(detach_prev: bool | str) -> None:
    _, erm = tiny_primal_dual(None, None)
    assert erm.layers_in_gradient() == [False, False, False, True]
    constraints = Constraints(alpha=0.2, epsilon=0.5, detach_prev=detach_prev)
    _, primal_dual = tiny_primal_dual(constraints, DualSettings(lr=0.1))
    assert primal_dual.layers_in_gradient() == [False, False, False, True]  # lambda = 0: the Lagrangian is l_L
    primal_dual.multipliers.copy_(torch.tensor([0.0, 0.0, 0.3, 0.0]))
    # dLambda/dl_l = lambda_l - (1 - alpha) lambda_{l+1} (+1 for l = L): l_2 through lambda_2, l_1 through g_2's
    # "l_{l-1}" unless that is detached
    assert primal_dual.layers_in_gradient() == [False, detach_prev is not True, True, True]
    # l_0 through g_1's "l_{l-1}": detached under true and under "first"
    primal_dual.multipliers.copy_(torch.tensor([0.0, 0.3, 0.0, 0.0]))
    assert primal_dual.layers_in_gradient() == [detach_prev is False, True, False, True]


@pytest.mark.parametrize("dual", [DualSettings(lr=0.5, resilience="slack"), DualSettings(lr=0.5, penalty=5.0)],
                         ids=["lagrangian", "augmented"])
@pytest.mark.parametrize("kind", ["tiny", "dust"])
def test_detaching_zero_weight_layers_changes_no_bit(kind: str, dual: DualSettings) -> None:
    """Trainer-style steps that detach the layers PrimalDual.layers_in_gradient leaves out end bit for bit where
    steps that back-propagate every layer (their zero-weighted losses included) end, while multipliers come and go.
    With the augmented Lagrangian a violated constraint pushes at lambda = 0, so no layer may be left out then."""
    from cutlab.core.models import DUST

    torch.manual_seed(0)
    if kind == "tiny":
        model, x, y = TinyUnrolled(seed=3), *regression_batch(seed=4)
        loss_matrix, rounds = SquaredError().loss_matrix, 12
    else:  # the real DUST, one dictionary per layer, on a few 4x4-pixel patch tokens
        model = DUST(depth=3, patch=4, atoms=16, per_layer_dictionary=True)
        generator = torch.Generator().manual_seed(4)
        y = torch.rand(2, 3, 2, 16, generator=generator)
        x = y + 0.1 * torch.randn(y.shape, generator=generator)
        loss_matrix, rounds = (lambda outputs, clean: torch.stack(
            [0.5 * (out - clean).pow(2).sum(dim=(1, 3)).mean(dim=1) for out in outputs], dim=1)), 8
    twin = copy.deepcopy(model)

    def primal_dual(module: torch.nn.Module) -> PrimalDual:
        optimizer = torch.optim.Adam(module.parameters(), lr=5e-2)
        return PrimalDual(list(module.parameters()), optimizer, 4, Constraints(alpha=0.9, epsilon=None), dual)

    pruned, full = primal_dual(model), primal_dual(twin)
    left_out = kept = 0
    for step in range(rounds):
        dual_active = step >= 2
        needed = pruned.layers_in_gradient(dual_active)
        left_out, kept = left_out + needed.count(False), kept + needed[:-1].count(True)
        outputs = detach_left_out(model(x), needed)  # the Trainer's own line
        a = pruned.step(loss_matrix(outputs, y), dual_active=dual_active)
        b = full.step(loss_matrix(twin(x), y), dual_active=dual_active)
        assert a.lagrangian == b.lagrangian and torch.equal(a.multipliers, b.multipliers)
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p, q), f"step {step}: parameters differ"
    assert left_out > 0 and kept > 0  # layers were left out (warm-up: all but l_L), and some came back
