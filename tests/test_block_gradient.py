"""train.constraint_gradient=block: l_l in g_l trains block l alone (its input detached).

Checked against autograd of the formula (each form), on the real DUST blocks through a whole PrimalDual step, and
through the Trainer on the real DUST (resumed bit-identically); a model that cannot re-run one block is refused.
"""

from __future__ import annotations

import copy

from omegaconf import OmegaConf
import pytest
import torch

from cutlab.core.constraints import Constraints
from cutlab.core.errors import CutlabError
from cutlab.core.models import LayerwiseModel
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.tasks.models import check_model_supports_training

from helpers.tiny import checkpoint_at
from test_local_prev import (ALPHA, EPSILON, VALUE_EPSILON, dust_trainer, lagrangian_written_out, patch_batch, small,
                             squared_error, written_out)


@pytest.mark.parametrize("form", ["difference", "ratio", "log_ratio"])
def test_values_are_the_full_losses_and_the_gradient_of_l_l_is_the_local_copys(form: str) -> None:
    losses = torch.tensor([3.0, 2.0, 1.2, 0.5], dtype=torch.float64, requires_grad=True)
    local = losses.detach().clone().requires_grad_(True)  # equal in value, a graph of its own
    weights = torch.tensor([0.7, 1.3, 0.4, 2.0], dtype=torch.float64)
    constraints = Constraints(alpha=ALPHA, epsilon=VALUE_EPSILON, detach_prev=True, form=form, gradient="block")
    got = constraints.values(losses, local)
    full_grad, local_grad = torch.autograd.grad((weights * got).sum(), [losses, local])

    # the formula: each numerator l_l from the local copy, l_{l-1} detached, l_0's reference from the full loss
    a, b = losses.detach().clone().requires_grad_(True), local.detach().clone().requires_grad_(True)
    expected = written_out(form, a[:1], b[1:], a[:-1].detach())
    expected_full, expected_local = torch.autograd.grad((weights * expected).sum(), [a, b])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(full_grad, expected_full)
    torch.testing.assert_close(local_grad, expected_local)
    assert torch.equal(full_grad[1:], torch.zeros(3, dtype=torch.float64))  # no l_l of the full pass is trained
    # without the local copy (the primal warm-up) it is the full gradient
    torch.testing.assert_close(constraints.values(losses), Constraints(ALPHA, 2.0, True, form).values(losses))


MULTIPLIERS = torch.tensor([0.2, 0.9, 1.7, 0.6])


def step_and_written_out(kind: str, gradient: str, objective_of) -> None:
    """One primal-dual step on a small real model at MULTIPLIERS; each parameter's gradient must equal autograd of
    the Lagrangian written out, with l_L taken by ``objective_of(full, own)`` (full pass, each block's own loss)."""
    model = small(kind)
    reference = copy.deepcopy(model)
    noisy, clean = patch_batch(seed=6)
    primal_dual = PrimalDual(list(model.parameters()), torch.optim.SGD(model.parameters(), lr=1e-2), 4,
                             Constraints(ALPHA, EPSILON, True, "ratio", gradient=gradient),
                             DualSettings(lr=0.1, optimizer="sgd"))
    primal_dual.multipliers.copy_(MULTIPLIERS)
    assert primal_dual.uses_local_losses
    outputs, local = model.unroll_local(noisy, noisy)
    result = primal_dual.step(squared_error(outputs, clean), dual_active=False,
                              local_loss_matrix=squared_error(local, clean))

    full, own = (squared_error(o, clean).mean(dim=0) for o in reference.unroll_local(noisy, noisy))
    lagrangian = lagrangian_written_out(objective_of(full, own), MULTIPLIERS, own[1:], full[:-1].detach())
    assert result.lagrangian == pytest.approx(float(lagrangian.detach()))
    expected = torch.autograd.grad(lagrangian, list(reference.parameters()), allow_unused=True)
    for parameter, grad in zip(model.parameters(), expected):
        torch.testing.assert_close(parameter.grad, grad if grad is not None else torch.zeros_like(parameter))


def test_a_primal_dual_step_descends_on_the_lagrangian_with_each_blocks_own_loss() -> None:
    # l_L + lambda_0 (l_0/eps - 1) + sum_l lambda_l (l_l^own / l_{l-1} - (1 - alpha)): D_l gets the objective's
    # gradient through every later block and the constraints' through g_l alone
    step_and_written_out("dust", "block", lambda full, own: full)


def test_layerwise_trains_only_block_L_with_the_objective() -> None:
    # as block, but the objective is block L's own loss; on UT, whose blocks change the loss (the small DUST's soft
    # threshold leaves it flat, so an objective through every block would pass there too)
    step_and_written_out("ut", "layerwise", lambda full, own: torch.cat([full[:-1], own[-1:]]))


def test_the_trainer_feeds_each_blocks_loss_and_resumes_bit_identically() -> None:
    block, full = dust_trainer(True, gradient="block"), dust_trainer(True)
    block_steps, full_steps = [], []
    block.run(on_step=lambda progress, result, _: block_steps.append(result))
    full.run(on_step=lambda progress, result, _: full_steps.append(result))
    assert (block.primal_dual.multipliers > 0).any()
    for mine, theirs in zip(block_steps[:5], full_steps[:5]):  # the same until multipliers reach the primal step
        assert torch.equal(mine.layer_losses, theirs.layer_losses)
    assert not torch.equal(block_steps[-1].layer_losses, full_steps[-1].layer_losses)

    state = checkpoint_at(dust_trainer(True, gradient="block"), 6)
    resumed = dust_trainer(True, model_seed=99, gradient="block")
    resumed.load_state_dict(state)
    resumed_steps = []
    resumed.run(on_step=lambda progress, result, _: resumed_steps.append(result))
    for mine, theirs in zip(resumed_steps, block_steps[6:], strict=True):
        assert torch.equal(mine.layer_losses, theirs.layer_losses) and torch.equal(mine.multipliers, theirs.multipliers)


def test_an_unknown_constraint_gradient_is_one_line() -> None:
    with pytest.raises(CutlabError, match="train.constraint_gradient must be one of full, block, layerwise, got 'blocks'"):
        Constraints(ALPHA, EPSILON, True, "ratio", gradient="blocks")


def test_a_model_that_cannot_rerun_one_block_is_refused_in_one_line() -> None:
    class WholeStack(LayerwiseModel):  # unroll() only, as the text encoders: no block can be re-run on its own
        def forward(self, x):
            return [x]

    cfg = OmegaConf.create({"model": {"name": "whole"}, "train": {"constrained": True, "detach_prev": True,
                                                                   "constraint_gradient": "block"}})
    with pytest.raises(CutlabError, match="train.constraint_gradient=block re-runs each block on its detached input, "
                                          "which DUST, UT and ViT can and model=whole cannot"):
        check_model_supports_training(cfg, WholeStack())
    check_model_supports_training(cfg, small("dust"))  # DUST can


@pytest.mark.parametrize(("overrides", "expected"), [
    (["model=dust", "L=3"], ("full", 0.1, 1, 0.0)),
    (["model=dust", "L=4"], ("full", 0.1, 1, 0.0)),
    (["model=dust", "L=5"], ("block", 0.3, 0, 3.0)),
    (["model=dust", "L=9"], ("block", 0.3, 0, 3.0)),
    (["model=ut", "L=7"], ("full", 0.1, 1, 0.0)),  # no deep_from_layers: never deep
    (["model=dust", "L=7", "train.dual_lr=0.05", "train.constraint_gradient=full"], ("full", 0.05, 0, 3.0)),
    (["model=dust", "L=7", "train.warmup_epochs=1"], ("block", 0.3, 1, 3.0)),
    (["model=dust", "L=7", "train.penalty=0"], ("block", 0.3, 0, 0.0)),  # the deep default before 2026-11-29
    (["model=dust", "L=3", "model.deep_from_layers=3"], ("block", 0.3, 0, 3.0)),
    (["model=dust", "L=7", "model.deep_from_layers=null"], ("full", 0.1, 1, 0.0)),
    # the paper's settings stay one override away
    (["model=dust", "L=7", "train=constrained_paper"], ("full", 0.01, 1, 0.0)),
])
def test_train_constrained_lets_each_block_answer_for_itself_from_the_models_deep_depth(overrides, expected) -> None:
    from cutlab.config.compose import compose_run_config

    cfg = compose_run_config(["train=constrained", *overrides])
    assert (cfg.train.constraint_gradient, cfg.train.dual_lr, cfg.train.warmup_epochs, cfg.train.penalty) == expected


def test_a_deep_depth_that_is_not_a_depth_is_one_line() -> None:
    from cutlab.config.compose import compose_run_config

    with pytest.raises(CutlabError, match="model.deep_from_layers must be a depth of at least 1 or null"):
        compose_run_config(["model=dust", "train=constrained", "model.deep_from_layers=0"])
