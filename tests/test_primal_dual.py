"""The primal-dual core (paper Sec. 3, Algorithm 1): Cooper as a bit-for-bit oracle, known KKT points,
the resilient equilibrium and the behaviours the experiments rely on (exact resume: test_trainer_resume.py; which
layers the primal step back-propagates through: test_gradient_routing.py).

All problems are tiny and deterministic (fixed batches, CPU), so every assertion is either exact
(``torch.equal``) or against a closed-form / independently computed value with a stated tolerance.
"""

from __future__ import annotations

import copy
import math
import re

import cooper  # the oracle (cooper-optim 1.0.1, a dev dependency)
import pytest
import torch

from helpers.tiny import (
    ScalarLayers, SquaredError, TinyUnrolled, regression_batch, scalar_loss_matrix, scalar_targets, tiny_primal_dual,
)

from cutlab.core.constraints import Constraints
from cutlab.core.primal_dual import DualSettings, NonFiniteLoss, PrimalDual
from cutlab.errors import CutlabError

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def snapshot(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


# --------------------------------------------------------------------------------------------------------------
# 1. Cooper 1.0.1 as the oracle, bit for bit
# --------------------------------------------------------------------------------------------------------------


class DescentCMP(cooper.ConstrainedMinimizationProblem):
    """(P-CUT) written for Cooper: one inequality Constraint with one DenseMultiplier over the constraint vector
    [g_0, g_1 .. g_L] (or [g_1 .. g_L] when epsilon is None), g_0 = l_0 - eps, g_l = l_l - (1-alpha) l_{l-1}."""

    def __init__(self, alpha: float, epsilon: float | None, layers: int, penalty: float = 0.0) -> None:
        super().__init__()
        self.alpha = alpha
        self.epsilon = epsilon
        count = layers if epsilon is not None else layers - 1
        coefficient = {"penalty_coefficient": cooper.penalty_coefficients.DensePenaltyCoefficient(
            init=torch.full((count,), penalty))} if penalty else {}
        self.descent = cooper.Constraint(
            constraint_type=cooper.ConstraintType.INEQUALITY,
            formulation_type=cooper.formulations.AugmentedLagrangian if penalty else cooper.formulations.Lagrangian,
            multiplier=cooper.multipliers.DenseMultiplier(num_constraints=count),
            **coefficient,
        )

    def compute_cmp_state(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> cooper.CMPState:
        layer_losses = SquaredError().loss_matrix(model(x), y).mean(dim=0)
        violation = layer_losses[1:] - (1.0 - self.alpha) * layer_losses[:-1]
        if self.epsilon is not None:
            violation = torch.cat([layer_losses[:1] - self.epsilon, violation])
        return cooper.CMPState(
            loss=layer_losses[-1], observed_constraints={self.descent: cooper.ConstraintState(violation=violation)}
        )


@pytest.mark.parametrize("epsilon", [1.0, None], ids=["with-reference", "descent-only"])
def test_matches_cooper_simultaneous_optimizer_bit_for_bit(epsilon: float | None) -> None:
    # Bit-for-bit is attainable: both sides evaluate the same model graph on the same batch; the primal
    # gradient of sum_l lambda_l g_l reaches each layer loss as a sum of at most two non-zero terms (from g_l and
    # g_{l+1}; plus 1 from the objective at l_L), and two-term float addition is commutative, so the order in
    # which autograd accumulates them cannot matter; the dual gradient is g itself on both sides; both use
    # torch's Adam (single-tensor path on CPU, elementwise) and project with max(., 0).
    alpha, primal_lr, dual_lr, steps = 0.2, 1e-2, 0.05, 32
    x, y = regression_batch()
    ours_model, oracle_model = TinyUnrolled(seed=2), TinyUnrolled(seed=2)
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(), oracle_model.parameters()))

    ours = PrimalDual(
        list(ours_model.parameters()),
        torch.optim.Adam(ours_model.parameters(), lr=primal_lr),
        TinyUnrolled.layers,
        Constraints(alpha=alpha, epsilon=epsilon),
        DualSettings(lr=dual_lr, resilience="off", cadence="batch"),
    )
    cmp = DescentCMP(alpha, epsilon, TinyUnrolled.layers)
    oracle = cooper.optim.SimultaneousOptimizer(
        cmp=cmp,
        primal_optimizers=torch.optim.Adam(oracle_model.parameters(), lr=primal_lr),
        dual_optimizers=torch.optim.Adam(cmp.dual_parameters(), lr=dual_lr, maximize=True),
    )
    # slot 0 of PrimalDual is the reference constraint; without epsilon it is masked and Cooper has no entry for it
    slots = slice(0, None) if epsilon is not None else slice(1, None)

    clamped_after_positive = False
    previous = torch.zeros(TinyUnrolled.layers)
    for step in range(steps):
        result = ours.step(SquaredError().loss_matrix(ours_model(x), y), dual_active=True)
        rollout = oracle.roll(compute_cmp_state_kwargs={"model": oracle_model, "x": x, "y": y})
        oracle_multipliers = cmp.descent.multiplier.weight.detach()

        oracle_values = rollout.cmp_state.observed_constraints[cmp.descent].violation.detach()
        assert torch.equal(result.constraint_values[slots], oracle_values), f"constraint values differ at step {step}"
        for mine, theirs in zip(ours_model.parameters(), oracle_model.parameters()):
            assert torch.equal(mine, theirs), f"primal parameters differ after step {step}"
        assert torch.equal(ours.multipliers[slots], oracle_multipliers), f"multipliers differ after step {step}"
        if epsilon is None:
            assert ours.multipliers[0] == 0 and result.constraint_values[0] == 0
        clamped_after_positive |= bool(((previous > 0) & (ours.multipliers == 0)).any())
        previous = ours.multipliers.clone()

    # the run is not trivial: multipliers moved, and the projection max(lambda, 0) was exercised
    assert (ours.multipliers[slots] > 0).sum() >= 2
    assert clamped_after_positive


def test_augmented_lagrangian_matches_coopers_step_for_step() -> None:
    # train.penalty = rho against Cooper's AugmentedLagrangian formulation (Nocedal & Wright eq. 17.65): the primal
    # step on l_L + sum [relu(lambda + rho g)^2 - lambda^2] / (2 rho), the dual step on lambda^T g. Cooper sums the
    # penalty terms in another order (einsum), so the comparison is to float32 rounding, not bit for bit; 32 steps
    # with multipliers rising from 0 and violations changing sign keep any wrong term from hiding under it.
    alpha, primal_lr, dual_lr, rho, steps = 0.2, 1e-2, 0.05, 4.0, 32
    x, y = regression_batch()
    ours_model, oracle_model = TinyUnrolled(seed=2), TinyUnrolled(seed=2)
    ours = PrimalDual(list(ours_model.parameters()), torch.optim.Adam(ours_model.parameters(), lr=primal_lr),
                      TinyUnrolled.layers, Constraints(alpha=alpha, epsilon=1.0),
                      DualSettings(lr=dual_lr, optimizer="sgd", penalty=rho))
    cmp = DescentCMP(alpha, 1.0, TinyUnrolled.layers, penalty=rho)
    oracle = cooper.optim.SimultaneousOptimizer(
        cmp=cmp,
        primal_optimizers=torch.optim.Adam(oracle_model.parameters(), lr=primal_lr),
        dual_optimizers=torch.optim.SGD(cmp.dual_parameters(), lr=dual_lr, maximize=True),
    )
    plain_model = TinyUnrolled(seed=2)  # the same run without the penalty, which must end elsewhere
    plain = PrimalDual(list(plain_model.parameters()), torch.optim.Adam(plain_model.parameters(), lr=primal_lr),
                       TinyUnrolled.layers, Constraints(alpha=alpha, epsilon=1.0),
                       DualSettings(lr=dual_lr, optimizer="sgd"))
    signs = set()
    for step in range(steps):
        result = ours.step(SquaredError().loss_matrix(ours_model(x), y), dual_active=True)
        plain.step(SquaredError().loss_matrix(plain_model(x), y), dual_active=True)
        oracle.roll(compute_cmp_state_kwargs={"model": oracle_model, "x": x, "y": y})
        signs |= set(torch.sign(result.constraint_values[1:]).tolist())
        for mine, theirs in zip(ours_model.parameters(), oracle_model.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6, msg=f"primal parameters differ after step {step}")
        torch.testing.assert_close(ours.multipliers, cmp.descent.multiplier.weight.detach(), rtol=1e-5, atol=1e-6)
    assert signs >= {-1.0, 1.0} and (ours.multipliers > 0).sum() >= 2
    assert max(float((a - b).detach().abs().max()) for a, b in zip(ours_model.parameters(), plain_model.parameters())) > 1e-3


# --------------------------------------------------------------------------------------------------------------
# 2. A known KKT point
# --------------------------------------------------------------------------------------------------------------


def test_converges_to_closed_form_kkt_point_with_active_descent_constraint() -> None:
    # Model: one scalar theta, Phi_0 = Phi_1 = theta. Targets: layer 0 both samples at 0, layer 1 at 1 +- sqrt(2k):
    #     l_0 = 1/2 theta^2,   l_1 = 1/2 (theta - 1)^2 + k.
    # Problem (L = 1): minimise l_1  s.t.  g_1 = l_1 - (1-alpha) l_0 <= 0,  g_0 = l_0 - eps <= 0.
    #     g_1(theta) = (alpha/2) theta^2 - theta + 1/2 + k      (convex: the theta^2 coefficient is alpha/2 > 0)
    # g_1 <= 0 on [(1 - sqrt(D))/alpha, (1 + sqrt(D))/alpha] with D = 1 - alpha (1 + 2k). The unconstrained
    # minimiser theta = 1 is infeasible when g_1(1) = k - (1-alpha)/2 > 0, so the descent constraint is ACTIVE and
    #     theta* = (1 - sqrt(D)) / alpha                         (the feasible point nearest to 1)
    # Stationarity: l_1'(theta*) + lambda_1 g_1'(theta*) = (theta* - 1) + lambda_1 (alpha theta* - 1) = 0, so
    #     lambda_1* = (theta* - 1) / (1 - alpha theta*) = (theta* - 1) / sqrt(D).
    # Slater holds (the interval has interior), so (theta*, lambda*) is the unique KKT pair. With alpha = 1/2,
    # k = 0.4: D = 0.1, theta* = 2 - 2 sqrt(0.1) = 1.36754..., lambda_1* = 1/sqrt(0.1) - 2 = 1.16228...
    # eps = 2 > l_0(theta*) = 0.935 keeps the reference constraint inactive: l_0 <= 1.4 along the whole run
    # (theta rises from 0), so g_0 < 0 at every step and its multiplier must stay exactly 0.
    # Note g_1 depends on theta through l_0 too: an implementation that detached l_{l-1} would converge elsewhere.
    alpha, floor, epsilon = 0.5, 0.4, 2.0
    discriminant = 1.0 - alpha * (1.0 + 2.0 * floor)
    theta_star = (1.0 - math.sqrt(discriminant)) / alpha
    lambda_star = (theta_star - 1.0) / math.sqrt(discriminant)
    assert floor - (1 - alpha) / 2 > 0  # the constraint is active at the solution

    model = ScalarLayers([True, True], init=0.0)
    targets = scalar_targets([(0.0, 0.0), (1.0, floor)])
    primal_dual = PrimalDual(
        [model.theta],
        torch.optim.Adam([model.theta], lr=0.01),
        2,
        Constraints(alpha=alpha, epsilon=epsilon),
        DualSettings(lr=0.01),
    )
    inputs = torch.zeros(2, 1)
    for _ in range(2500):
        result = primal_dual.step(scalar_loss_matrix(model(inputs), targets), dual_active=True)
        assert result.constraint_values[0] < 0
        assert primal_dual.multipliers[0] == 0

    # tolerance: 1e-4 relative (the run reaches ~3e-6; float32 Adam noise floor is ~1e-7)
    assert model.theta.item() == pytest.approx(theta_star, rel=1e-4)
    assert primal_dual.multipliers[1].item() == pytest.approx(lambda_star, rel=1e-4)
    assert result.constraint_values[1].abs().item() < 1e-4  # complementary slackness: active constraint is tight


# --------------------------------------------------------------------------------------------------------------
# 3. The resilient equilibrium (both forms)
# --------------------------------------------------------------------------------------------------------------


def _resilient_reference(alpha: float, c: float) -> tuple[float, list[float]]:
    """The resilient problem min l_L + (c/2)||u||^2 s.t. g <= u, u >= 0 has u* = [g]_+ and equals minimising
    P(theta) = l_2 + (c/2) sum_l [g_l]_+^2 (convex here); its multipliers are lambda_l = c [g_l(theta*)]_+.
    Solved independently in float64 by bisection on P'(theta) = 0."""

    def losses(theta: float) -> list[float]:
        return [1.0, 0.5 * theta**2 + 0.6, 0.5 * (theta - 1.0) ** 2 + 0.4]

    def constraint_values(theta: float) -> list[float]:
        l0, l1, l2 = losses(theta)
        return [l1 - (1 - alpha) * l0, l2 - (1 - alpha) * l1]

    def derivative(theta: float) -> float:
        g1, g2 = constraint_values(theta)
        dg1, dg2 = theta, (theta - 1.0) - (1 - alpha) * theta
        return (theta - 1.0) + c * max(g1, 0.0) * dg1 + c * max(g2, 0.0) * dg2

    low, high = -2.0, 2.0
    assert derivative(low) < 0 < derivative(high)
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if derivative(middle) < 0 else (low, middle)
    theta = 0.5 * (low + high)
    return theta, [c * max(g, 0.0) for g in constraint_values(theta)]


@pytest.mark.parametrize("resilience", ["slack", "weight_decay"])
def test_resilient_equilibrium_on_infeasible_constraints(resilience: str) -> None:
    # l_0 = 1 (Phi_0 does not depend on theta), l_1 = 1/2 theta^2 + 0.6, l_2 = 1/2 (theta - 1)^2 + 0.4, alpha = 1/2:
    # g_1 = l_1 - 0.5 >= 0.1 for every theta, so the descent constraints cannot all be met. At the resilient
    # equilibrium every active layer has g_l = u_l = lambda_l / c, i.e. l_l = (1-alpha) l_{l-1} + lambda_l / c.
    alpha, c = 0.5, 2.0
    model = ScalarLayers([False, True, True], init=0.0)
    targets = scalar_targets([(0.0, 1.0), (0.0, 0.6), (1.0, 0.4)])
    primal_dual = PrimalDual(
        [model.theta],
        torch.optim.Adam([model.theta], lr=0.01),
        3,
        Constraints(alpha=alpha),  # epsilon None: slot 0 masked
        DualSettings(lr=0.003, resilience=resilience, resilience_c=c, slack_lr=0.1, resilience_restarts=False),
    )
    inputs = torch.zeros(2, 1)
    for _ in range(1500):
        result = primal_dual.step(scalar_loss_matrix(model(inputs), targets), dual_active=True)
    # the losses at the final parameters (result.layer_losses are those *before* the last step)
    layer_losses = scalar_loss_matrix(model(inputs), targets).mean(dim=0).detach()
    multipliers = primal_dual.multipliers
    assert layer_losses[1] > (1 - alpha) * layer_losses[0]  # still infeasible, as designed
    assert (multipliers[1:] > 0.05).all(), "both descent constraints must be active for the identity to bite"
    assert multipliers[0] == 0

    # tolerance: 1e-5 absolute on l_l - (1-alpha) l_{l-1} - lambda_l / c (the runs reach ~1e-6)
    residual = layer_losses[1:] - (1 - alpha) * layer_losses[:-1] - multipliers[1:] / c
    assert residual.abs().max() < 1e-5, residual
    if resilience == "slack":
        assert (primal_dual.slacks[1:] - multipliers[1:] / c).abs().max() < 1e-5
        assert primal_dual.slacks[0] == 0
    else:
        assert torch.equal(primal_dual.slacks, torch.zeros(3))  # no explicit slacks in this form
    torch.testing.assert_close(primal_dual.effective_slacks()[1:], multipliers[1:] / c, rtol=0, atol=1e-5)

    # and it is the equilibrium of the resilient problem, solved independently: 1e-4 absolute
    theta_ref, multipliers_ref = _resilient_reference(alpha, c)
    assert model.theta.item() == pytest.approx(theta_ref, abs=1e-4)
    assert multipliers[1:].tolist() == pytest.approx(multipliers_ref, abs=1e-4)


# --------------------------------------------------------------------------------------------------------------
# 4. Behaviour
# --------------------------------------------------------------------------------------------------------------


def test_warmup_keeps_multipliers_at_zero() -> None:
    model, primal_dual = tiny_primal_dual(Constraints(alpha=0.2, epsilon=0.5), DualSettings(lr=0.1))
    x, y = regression_batch()
    before = snapshot(model)
    for _ in range(5):
        result = primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=False)
        assert (result.constraint_values > 0).any()  # there is something the dual would react to
        assert torch.equal(primal_dual.multipliers, torch.zeros(4))
    primal_dual.end_epoch(dual_active=False)
    assert torch.equal(primal_dual.multipliers, torch.zeros(4))
    assert not primal_dual.dual_optimizer.state  # the dual Adam never stepped
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the primal did
    # and the first dual-active step moves them
    primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)
    assert (primal_dual.multipliers > 0).any()


@pytest.mark.parametrize("cadence", ["batch", "epoch"])
def test_multipliers_are_projected_onto_nonnegative(cadence: str) -> None:
    # slot 1: l_1 = 0 << (1-alpha) l_0 = 5 (strongly satisfied from the start); slot 2: violated for the first
    # 5 steps then strongly satisfied, so its multiplier first grows then is pushed down past 0.
    primal_dual = PrimalDual([], torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), 3,
                             Constraints(alpha=0.5), DualSettings(lr=0.5, cadence=cadence))
    grew = False
    for step in range(20):
        slot2 = 3.0 if step < 5 else -20.0
        layer_losses = torch.tensor([10.0, 0.0, slot2])  # g_1 = 0 - 0.5 * 10 = -5, g_2 = l_2 - 0.5 * l_1 = slot2
        primal_dual.step(layer_losses.expand(4, 3).clone().requires_grad_(), dual_active=True)
        if cadence == "epoch":
            primal_dual.end_epoch(dual_active=True)
        assert (primal_dual.multipliers >= 0).all(), primal_dual.multipliers
        assert primal_dual.multipliers[1] == 0
        grew |= bool(primal_dual.multipliers[2] > 0.5)
    assert grew
    assert primal_dual.multipliers[2] == 0


def _adam_maximize(gradients: list[torch.Tensor], lr: float) -> torch.Tensor:
    """Hand-written Adam ascent (torch defaults betas=(0.9, 0.999), eps=1e-8) from lambda=0, projected on >= 0
    after each step, in float64."""
    beta1, beta2 = ADAM_BETAS
    value = torch.zeros_like(gradients[0], dtype=torch.float64)
    first = torch.zeros_like(value)
    second = torch.zeros_like(value)
    for t, gradient in enumerate(gradients, start=1):
        g = gradient.double()
        first = beta1 * first + (1 - beta1) * g
        second = beta2 * second + (1 - beta2) * g * g
        value = value + lr * (first / (1 - beta1**t)) / ((second / (1 - beta2**t)).sqrt() + ADAM_EPS)
        value = value.clamp(min=0.0)
    return value


def test_epoch_cadence_steps_once_per_epoch_on_the_mean() -> None:
    # A "model" whose layer losses are parameters plus fixed per-batch offsets, so the constraint values swing.
    # Epoch 1 has 3 batches, epoch 2 has 2: Adam's first step only sees sign(mean), its second step sees the
    # ratio of the two epoch means, which differs between mean and sum (different batch counts) and from any
    # single batch's value.
    lr = 0.1
    weights = torch.nn.Parameter(torch.tensor([1.0, 1.0, 1.0, 1.0]))
    primal_dual = PrimalDual([weights], torch.optim.SGD([weights], lr=0.01), 4,
                             Constraints(alpha=0.5, epsilon=1.5), DualSettings(lr=lr, cadence="epoch"))
    offsets = [
        [
            torch.tensor([2.0, 1.5, -0.5, 0.3]),
            torch.tensor([-1.0, 0.0, 1.0, 2.0]),
            torch.tensor([-0.8, -1.0, 2.5, -0.4]),
        ],
        [torch.tensor([1.0, 3.0, 0.0, 0.2]), torch.tensor([0.0, -2.0, 1.0, 0.1])],
    ]
    epoch_means = []
    frozen = primal_dual.multipliers.clone()
    for epoch_offsets in offsets:
        values = []
        for offset in epoch_offsets:
            loss_matrix = (weights + offset).expand(2, 4)  # both rows equal: the layer losses are weights + offset
            result = primal_dual.step(loss_matrix, dual_active=True)
            values.append(result.constraint_values)
            # within an epoch the multipliers do not move
            assert torch.equal(primal_dual.multipliers, frozen)
        mean = torch.stack(values).double().mean(dim=0)
        epoch_means.append(mean)
        primal_dual.end_epoch(dual_active=True)
        expected_so_far = _adam_maximize(epoch_means, lr)
        frozen = primal_dual.multipliers.clone()  # the next epoch's batches must leave these untouched
        # tolerance: float32 implementation vs float64 hand computation, 1e-6 relative + 1e-7 absolute
        torch.testing.assert_close(primal_dual.multipliers.double(), expected_so_far, rtol=1e-6, atol=1e-7)
        if len(epoch_means) == 1:
            # the test discriminates: some slot's last batch has the opposite sign to the epoch mean, and one
            # mean is negative (projected to 0)
            assert ((values[-1] > 0) != (mean > 0)).any()
            assert (mean < 0).any() and (mean > 0).any()
            assert (primal_dual.multipliers == 0).any()
    # the second step really depends on the means' magnitudes: the sum would give a different answer
    sums = [epoch_means[0] * 3, epoch_means[1] * 2]
    assert not torch.allclose(_adam_maximize(sums, lr), expected_so_far, rtol=1e-3)
    # end_epoch outside the dual phase does nothing to the multipliers
    frozen = primal_dual.multipliers.clone()
    primal_dual.step((weights + offsets[0][0]).expand(2, 4), dual_active=False)
    primal_dual.end_epoch(dual_active=False)
    assert torch.equal(primal_dual.multipliers, frozen)


@pytest.mark.parametrize("restarts", [True, False])
def test_resilience_restarts_reset_slacks_at_epoch_end(restarts: bool) -> None:
    model, primal_dual = tiny_primal_dual(
        Constraints(alpha=0.2, epsilon=0.5),
        DualSettings(lr=0.05, resilience="slack", resilience_c=1.0, slack_lr=0.5, resilience_restarts=restarts),
    )
    x, y = regression_batch()
    for _ in range(6):
        primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)
    slacks, multipliers = primal_dual.slacks.clone(), primal_dual.multipliers.clone()
    assert (slacks > 0).any() and (multipliers > 0).any()
    primal_dual.end_epoch(dual_active=True)
    if restarts:
        assert torch.equal(primal_dual.slacks, torch.zeros(4))
    else:
        assert torch.equal(primal_dual.slacks, slacks)
    assert torch.equal(primal_dual.multipliers, multipliers)  # the restart touches the slacks only


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_loss_raises_and_leaves_parameters_unchanged(bad: float) -> None:
    model, primal_dual = tiny_primal_dual(Constraints(alpha=0.2, epsilon=0.5), DualSettings(lr=0.1))
    x, y = regression_batch()
    primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)  # optimiser state exists
    before, multipliers = snapshot(model), primal_dual.multipliers.clone()
    adam_state = copy.deepcopy(primal_dual.primal_optimizer.state_dict())

    loss_matrix = SquaredError().loss_matrix(model(x), y)
    poison = torch.zeros_like(loss_matrix)
    poison[3, 2] = bad
    with pytest.raises(NonFiniteLoss, match=r"train\.lr") as caught:
        primal_dual.step(loss_matrix + poison, dual_active=True)
    assert isinstance(caught.value, CutlabError)
    assert "layer 2" in str(caught.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(primal_dual.multipliers, multipliers)
    after_state = primal_dual.primal_optimizer.state_dict()["state"]
    for key, entry in adam_state["state"].items():
        assert all(torch.equal(entry[name], after_state[key][name]) for name in entry)


def test_a_non_finite_gradient_at_finite_losses_raises_before_the_step() -> None:
    """Losses finite, their gradient NaN (sqrt at 0 times 0): the primal step would write NaN into every weight, and a
    checkpoint due at that step would keep them; it must stop first, the weights and multipliers untouched."""
    model, primal_dual = tiny_primal_dual(Constraints(alpha=0.2, epsilon=0.5), DualSettings(lr=0.1))
    x, y = regression_batch()
    primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)
    before, multipliers = snapshot(model), primal_dual.multipliers.clone()
    loss_matrix = SquaredError().loss_matrix(model(x), y)
    nan_gradient = torch.sqrt(0.0 * next(model.parameters()).sum())  # value 0, gradient inf * 0 = NaN
    poisoned = loss_matrix + torch.nn.functional.pad(nan_gradient.reshape(1, 1), (2, loss_matrix.shape[1] - 3, 3,
                                                                                    loss_matrix.shape[0] - 4))
    assert torch.isfinite(poisoned).all()
    with pytest.raises(NonFiniteLoss, match=r"gradient \(norm nan\).*train\.lr"):
        primal_dual.step(poisoned, dual_active=True)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(primal_dual.multipliers, multipliers)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Constraints(alpha=1.5),
        lambda: Constraints(alpha=0.0),
        lambda: Constraints(alpha=0.2, epsilon=-1.0),
        lambda: DualSettings(lr=0.0),
        lambda: DualSettings(lr=-0.1),
        lambda: DualSettings(lr=0.1, resilience="bogus"),
        lambda: DualSettings(lr=0.1, resilience="slack", resilience_c=0.0),
        # float32 rounds c to 0: lambda / c was NaN, and the verdict called met layers infeasible
        lambda: DualSettings(lr=0.1, resilience="slack", resilience_c=1e-300),
        lambda: DualSettings(lr=0.1, resilience="weight_decay", resilience_c=1e-40),  # 1/c beyond float32
        # c = inf in float32: the slack's gradient c u - lambda was NaN at its first step (inf * 0)
        lambda: DualSettings(lr=0.1, resilience="slack", resilience_c=1e300),
        lambda: DualSettings(lr=0.1, cadence="step"),
        lambda: PrimalDual([], torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), 3, Constraints(0.2), None),
    ],
    ids=["alpha>1", "alpha=0", "eps<0", "dual-lr-0", "dual-lr<0", "unknown-resilience", "c=0", "c-underflows",
         "1/c-overflows", "c-overflows", "cadence", "no-dual"],
)
def test_bad_settings_raise_cutlab_error(make) -> None:
    with pytest.raises(CutlabError):
        make()


@pytest.mark.parametrize("resilience", ["off", "slack"])
def test_a_dual_step_that_overflows_a_multiplier_stops_the_run(resilience: str) -> None:
    """A dual lr near float32's largest value sends lambda to inf on the last step with every loss finite: no later
    Lagrangian sees it, and the verdict read lambda / c as an infinite slack (`python -m cutlab train=constrained_paper
    train.dual_optimizer=sgd train.dual_lr=3e38 train.epsilon=100 ...` ended slack_feasible with l_0 53 % above
    epsilon). It must stop as a divergence naming train.dual_lr, with lambda and u as they were."""
    dual = DualSettings(lr=3e38, optimizer="sgd", resilience=resilience)
    model, primal_dual = tiny_primal_dual(Constraints(alpha=0.2, epsilon=1e-3), dual)
    x, y = regression_batch()
    with pytest.raises(NonFiniteLoss, match=r"train\.dual_lr"):
        primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)
    assert torch.equal(primal_dual.multipliers, torch.zeros_like(primal_dual.multipliers))
    assert torch.equal(primal_dual.slacks, torch.zeros_like(primal_dual.slacks))
    assert torch.isfinite(primal_dual.effective_slacks()).all()


def test_a_lagrangian_blown_up_by_its_multipliers_names_the_dual_lr() -> None:
    """Huge multipliers (`python -m cutlab train.dual_lr=1e30 train.warmup_epochs=0 ...`: lambda g finite, its
    gradient inf) were reported with 'lower the primal learning rate (train.lr=...)' alone, the one rate that was
    fine; the fix names the dual lr too, as the held-out check does."""
    model, primal_dual = tiny_primal_dual(Constraints(alpha=0.2, epsilon=0.5), DualSettings(lr=0.1, optimizer="sgd"))
    x, y = regression_batch()
    primal_dual.multipliers.fill_(3e38)
    with pytest.raises(NonFiniteLoss, match=r"train\.lr=\.\.\.\) or the dual one \(train\.dual_lr=\.\.\.\)"):
        primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=True)


@pytest.mark.parametrize("form, epsilon", [("difference", 1e300), ("ratio", 1e-300)])
def test_an_epsilon_beyond_float32_is_named_not_the_learning_rates(form: str, epsilon: float) -> None:
    """l_0 - 1e300 is -inf in float32 and l_0 / 1e-300 inf: 0 * inf made the Lagrangian NaN at the first step and
    `python -m cutlab train=constrained_paper train.epsilon=1e300 ...` was told to lower its learning rates."""
    constraints = Constraints(alpha=0.2, epsilon=epsilon, form=form)
    model, primal_dual = tiny_primal_dual(constraints, DualSettings(lr=0.1, optimizer="sgd"))
    x, y = regression_batch()
    before = snapshot(model)
    shown = re.escape(f"{epsilon:g}")
    with pytest.raises(NonFiniteLoss, match=rf"g_0 is -?inf .*train\.epsilon={shown} is beyond float32's range"):
        primal_dual.step(SquaredError().loss_matrix(model(x), y), dual_active=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
