"""Tiny unrolled models and objectives with closed-form answers, for the primal-dual and dual-dynamics tests."""

from __future__ import annotations

import io
import math

import pytest
import torch

from cutlab.core.constraints import Constraints
from cutlab.core.models import LayerwiseModel
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.core.training import Trainer


class TinyUnrolled(LayerwiseModel):
    """Phi_0 = embed(x), Phi_l = Phi_{l-1} + tanh(block_l(Phi_{l-1})); blocks 1 and 2 are tied (one module used
    twice, so its gradient is accumulated from two uses), block 3 is untied. Returns the L+1 = 4 representations."""

    layers = 4  # L + 1

    def __init__(self, dim: int = 6, seed: int = 0) -> None:
        super().__init__()
        generator_state = torch.get_rng_state()
        torch.manual_seed(seed)
        self.embed = torch.nn.Linear(dim, dim)
        self.tied = torch.nn.Linear(dim, dim)
        self.last = torch.nn.Linear(dim, dim)
        torch.set_rng_state(generator_state)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = self.embed(x)
        outputs = [h]
        for block in (self.tied, self.tied, self.last):
            h = h + torch.tanh(block(h))
            outputs.append(h)
        return outputs


def tiny_primal_dual(
    constraints: Constraints | None, dual: DualSettings | None, seed: int = 0
) -> tuple[TinyUnrolled, PrimalDual]:
    """A TinyUnrolled model under PrimalDual with primal Adam at lr 1e-2 (ERM when ``constraints`` is None)."""
    model = TinyUnrolled(seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, PrimalDual(list(model.parameters()), optimizer, TinyUnrolled.layers, constraints, dual)


class SquaredError:
    """The per-sample, per-layer loss matrix [batch, L+1]: f = 1/2 ||Phi_l - y||^2 (sum over features)."""

    def loss_matrix(self, outputs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        return torch.stack([0.5 * (out - target).pow(2).sum(dim=1) for out in outputs], dim=1)


def regression_batch(batch: int = 16, dim: int = 6, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, dim, generator=generator)
    weight = torch.randn(dim, dim, generator=generator)
    y = torch.tanh(x @ weight) + 0.1 * torch.randn(batch, dim, generator=generator)
    return x, y


class ScalarLayers(torch.nn.Module):
    """A layerwise "model" with one scalar parameter theta. ``uses[l]`` says whether Phi_l = theta (True) or a
    fixed 0 (False), broadcast over the batch. With per-sample targets y_{i,l}, the layer loss is

        l_l = mean_i 1/2 (Phi_l - y_{i,l})^2 = 1/2 (Phi_l - mean_l)^2 + k_l,   k_l = 1/2 var_l (population variance),

    so the irreducible part k_l is set by the spread of the targets (two samples at mean_l +- sqrt(2 k_l))."""

    def __init__(self, uses: list[bool], init: float = 0.0) -> None:
        super().__init__()
        self.uses = uses
        self.theta = torch.nn.Parameter(torch.tensor(init))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        batch = x.shape[0]
        return [self.theta.expand(batch) if use else torch.zeros(batch) for use in self.uses]


def scalar_targets(means_and_floors: list[tuple[float, float]]) -> torch.Tensor:
    """Targets [2, L+1]: layer l's two samples at mean_l +- sqrt(2 k_l), giving l_l = 1/2 (Phi_l - mean_l)^2 + k_l."""
    columns = [[mean + math.sqrt(2 * floor), mean - math.sqrt(2 * floor)] for mean, floor in means_and_floors]
    return torch.tensor(columns).T.contiguous()


def scalar_loss_matrix(outputs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    return torch.stack([0.5 * (out - target[:, l]).pow(2) for l, out in enumerate(outputs)], dim=1)


class FixedSamples:
    """A map-style data set of fixed random clean samples."""

    def __init__(self, count: int = 20, dim: int = 6) -> None:
        self.data = torch.randn(count, dim, generator=torch.Generator().manual_seed(11))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


class Interrupted(Exception):
    pass


def checkpoint_at(trainer: Trainer, stop_after: int) -> dict:
    """Run ``trainer`` until step ``stop_after``, then stop it as a kill would; its state as a checkpoint reloads it."""
    saved: dict = {}

    def stop(progress, result, _seconds) -> None:
        if progress.step == stop_after:
            buffer = io.BytesIO()
            torch.save(trainer.state_dict(), buffer)
            saved["state"] = buffer.getvalue()
            raise Interrupted

    with pytest.raises(Interrupted):
        trainer.run(on_step=stop)
    return torch.load(io.BytesIO(saved["state"]), weights_only=True)
