"""Exact resume at the Trainer level (a primal-dual run stopped and continued is the run that never stopped), and the
refusal to continue a run on another kind of device.

The problem is tiny and deterministic (fixed batches, CPU), so every assertion is exact (``torch.equal``).
"""

from __future__ import annotations

import pytest
import torch

from helpers.tiny import (
    FixedSamples, SquaredError, TinyUnrolled, checkpoint_at, regression_batch, tiny_primal_dual,
)

from cutlab.core.constraints import Constraints
from cutlab.core.perturbation import Perturbation
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.core.training import Schedule, Trainer
from cutlab.errors import CutlabError


def _build_trainer(cadence: str, model_seed: int) -> Trainer:
    model, primal_dual = tiny_primal_dual(
        Constraints(alpha=0.3, epsilon=1.0),
        # epoch cadence keeps its slack through the epoch (a restart at the end would undo its only step)
        DualSettings(lr=0.05, resilience="slack", resilience_c=2.0, slack_lr=0.2, cadence=cadence,
                     resilience_restarts=cadence == "batch"),
        seed=model_seed,
    )
    return Trainer(
        model=model,
        objective=SquaredError(),
        primal_dual=primal_dual,
        train_set=FixedSamples(),
        schedule=Schedule(epochs=3, batch_size=4, warmup_epochs=1),  # 5 steps per epoch
        prepare=lambda batch: (batch.float(), batch.float()),
        noise=Perturbation(gamma=0.3, sigma=0.8, seed=7),
    )


def _final_state(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()] + [
        trainer.primal_dual.multipliers.clone(),
        trainer.primal_dual.slacks.clone(),
    ]


@pytest.mark.parametrize("cadence", ["batch", "epoch"])
@pytest.mark.parametrize("stop_after", [5, 8], ids=["end-of-warmup-epoch", "mid-epoch"])
def test_resume_is_exact(cadence: str, stop_after: int) -> None:
    uninterrupted = _build_trainer(cadence, model_seed=0)
    reference_steps = []
    uninterrupted.run(on_step=lambda progress, result, _: reference_steps.append(result))
    assert uninterrupted.progress.step == 15
    reference = _final_state(uninterrupted)
    assert (reference[-2] > 0).any()  # the multipliers moved ...
    # ... and the slacks (epoch cadence: the slack's first step follows lambda's first, at the last epoch's end)
    assert any((result.slacks > 0).any() for result in reference_steps) or (reference[-1] > 0).any()
    # warm-up: lambda frozen at 0 through epoch 0; the first dual step comes at the first step of epoch 1 (batch
    # cadence) or at the end of epoch 1 (epoch cadence)
    first_dual = 5 if cadence == "batch" else 10
    assert all(torch.equal(r.multipliers, torch.zeros(4)) for r in reference_steps[:first_dual])
    assert (reference_steps[first_dual].multipliers > 0).any()

    state = checkpoint_at(_build_trainer(cadence, model_seed=0), stop_after)
    resumed = _build_trainer(cadence, model_seed=99)  # fresh model, optimisers, multipliers
    resumed.load_state_dict(state)
    resumed_steps = []
    resumed.run(on_step=lambda progress, result, _: resumed_steps.append(result))

    assert resumed.progress.step == 15
    assert len(resumed_steps) == 15 - stop_after
    for mine, theirs in zip(resumed_steps, reference_steps[stop_after:]):
        assert torch.equal(mine.layer_losses, theirs.layer_losses)
        assert torch.equal(mine.multipliers, theirs.multipliers)
        assert torch.equal(mine.slacks, theirs.slacks)
    final = _final_state(resumed)
    assert len(final) == len(reference)
    for mine, theirs in zip(final, reference):
        assert torch.equal(mine, theirs)


def test_a_checkpoint_from_another_kind_of_device_is_refused_in_one_line() -> None:
    # the noise generators differ between CPU and CUDA, so a run cannot continue on the other kind (Trainer)
    state = checkpoint_at(_build_trainer("batch", model_seed=0), 5)
    assert state["noise_device"] == "cpu"
    state["noise_device"] = "cuda"
    with pytest.raises(CutlabError, match="this run trained on cuda and would resume on cpu.*resume it with device=cuda"):
        _build_trainer("batch", model_seed=0).load_state_dict(state)
    del state["noise_device"]  # a checkpoint written before the key: trained on the CPU
    _build_trainer("batch", model_seed=0).load_state_dict(state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_constrained_step_runs_on_cuda_like_on_cpu() -> None:
    # The constraint mask lives on the CPU; multiplying it with CUDA constraint values must not fail.
    x, y = regression_batch()
    results = {}
    for device in ("cpu", "cuda"):
        model = TinyUnrolled(seed=2).to(device)
        primal_dual = PrimalDual(list(model.parameters()), torch.optim.Adam(model.parameters(), lr=1e-2),
                                 TinyUnrolled.layers, Constraints(alpha=0.2), DualSettings(lr=0.05))
        for _ in range(3):
            result = primal_dual.step(SquaredError().loss_matrix(model(x.to(device)), y.to(device)), dual_active=True)
        results[device] = (result.constraint_values, primal_dual.multipliers.clone())
    # tolerance: CUDA kernels sum in another order; 1e-4 absolute after 3 steps
    for cpu, cuda in zip(results["cpu"], results["cuda"]):
        assert cuda.device.type == "cpu"
        torch.testing.assert_close(cuda, cpu, rtol=1e-4, atol=1e-4)
