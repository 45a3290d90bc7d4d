"""Input perturbation x~ = x + xi, xi ~ N(mu, (gamma * sigma_x)^2 I) (the paper's Sec. 2 noise model)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

# Distinct streams for training and evaluation noise, so neither depends on how much of the other ran.
TRAIN_STREAM = 0
EVAL_STREAM = 1


@dataclass(frozen=True)
class Perturbation:
    """One run's noise: std ``gamma * sigma`` around ``mean``, drawn from generators seeded by ``seed``.

    The Trainer perturbs at ``gamma`` (gamma_train); evaluation perturbs at every gamma of its grid with the same
    sigma, mean and seed (``at``).
    """

    gamma: float
    sigma: float
    mean: float = 0.0
    seed: int = 0

    def at(self, gamma: float) -> "Perturbation":
        return replace(self, gamma=float(gamma))


def noise_generator(seed: int, stream: int, index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator determined by (seed, stream, index) alone: a resumed run draws the same noise."""
    generator = torch.Generator(device=device)
    generator.manual_seed((seed * 1_000_003 + stream * 7_919 + index) % (2**63 - 1))
    return generator


def perturb(clean: torch.Tensor, gamma: float, sigma: float, mean: float, generator: torch.Generator) -> torch.Tensor:
    """``clean + N(mean, (gamma * sigma)^2)`` elementwise; gamma = 0 and mean = 0 returns ``clean`` itself."""
    if gamma == 0.0 and mean == 0.0:
        return clean
    noise = torch.randn(clean.shape, generator=generator, device=clean.device, dtype=clean.dtype)
    return clean + mean + (gamma * sigma) * noise


def perturbed_forward(model, inputs, gamma: float, sigma: float, mean: float, generator: torch.Generator) -> list:
    """Phi_0..Phi_L of the perturbed input: noise is added where ``model.perturbable`` says (pixels, or embeddings)."""
    return model.unroll(perturb(model.perturbable(inputs), gamma, sigma, mean, generator), inputs)


def perturbed_forward_local(model, inputs, gamma: float, sigma: float, mean: float,
                            generator: torch.Generator) -> tuple[list, list]:
    """:func:`perturbed_forward` and each block's output from its detached input (``LayerwiseModel.unroll_local``)."""
    return model.unroll_local(perturb(model.perturbable(inputs), gamma, sigma, mean, generator), inputs)
