"""Input perturbation x~ = x + xi, xi ~ N(mu, (gamma * sigma_x)^2 I) (the paper's noise model: Sec. 4; Sec. 5 for
text embeddings)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import torch

from cutlab.core.errors import CutlabError

# Distinct streams for training and evaluation noise, so neither depends on how much of the other ran
# (noise_seed keeps them apart).
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


# The linear seed seed * 1_000_003 + stream * 7_919 + index keeps seeds and streams apart only over these index
# ranges: beyond them training step 7 919 + i drew evaluation index i's noise, and seed s + 1's evaluation batch b
# seed s's batch b + 1000. Inside them it is kept, so every record written with it draws the same noise again.
LINEAR_INDICES = {TRAIN_STREAM: 7_919, EVAL_STREAM: 1_000_003 - 7_919}
LINEAR_SEEDS = 2**40
HASHED_FROM = 2**62  # above every linear seed (2**40 * 1_000_003 < 2**62)


def noise_seed(seed: int, stream: int, index: int) -> int:
    """The generator seed of (seed, stream, index): distinct for distinct triples (outside the linear ranges, a
    56-bit hash of the triple, in a range the linear seeds never reach)."""
    if 0 <= seed < LINEAR_SEEDS and 0 <= index < LINEAR_INDICES[stream]:
        return seed * 1_000_003 + stream * 7_919 + index
    digest = hashlib.blake2b(f"{seed}:{stream}:{index}".encode(), digest_size=7).digest()
    return HASHED_FROM + int.from_bytes(digest, "big")


def noise_generator(seed: int, stream: int, index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator determined by (seed, stream, index) alone: a resumed run draws the same noise."""
    generator = torch.Generator(device=device)
    generator.manual_seed(noise_seed(seed, stream, index))
    return generator


def perturb(clean: torch.Tensor, gamma: float, sigma: float, mean: float, generator: torch.Generator) -> torch.Tensor:
    """``clean + N(mean, (gamma * sigma)^2)`` elementwise; gamma = 0 and mean = 0 returns ``clean`` itself."""
    if gamma == 0.0 and mean == 0.0:
        return clean
    noise = torch.randn(clean.shape, generator=generator, device=clean.device, dtype=clean.dtype)
    return clean + mean + (gamma * sigma) * noise


def perturbed_forward(model, inputs, gamma: float, sigma: float, mean: float, generator: torch.Generator) -> list:
    """Phi_0..Phi_L of the perturbed input: noise is added where ``model.perturbable`` says (pixels, or embeddings)."""
    return _all_layers(model, model.unroll(perturb(model.perturbable(inputs), gamma, sigma, mean, generator), inputs))


def perturbed_forward_local(model, inputs, gamma: float, sigma: float, mean: float,
                            generator: torch.Generator) -> tuple[list, list]:
    """:func:`perturbed_forward` and each block's output from its detached input (``LayerwiseModel.unroll_local``)."""
    outputs, local = model.unroll_local(perturb(model.perturbable(inputs), gamma, sigma, mean, generator), inputs)
    return _all_layers(model, outputs), _all_layers(model, local)


def _all_layers(model, outputs) -> list:
    """``outputs``, once it is one representation per layer, Phi_0..Phi_L: a model of the user's own that returns
    another count would otherwise be paired with the wrong constraints (or fail deep inside the dual step)."""
    depth = getattr(model, "depth", None)
    count = len(outputs) if isinstance(outputs, (list, tuple)) else None
    if count is None or (isinstance(depth, int) and count != depth + 1):
        got = f"{count} representations" if count is not None else f"a {type(outputs).__name__}"
        raise CutlabError(f"{type(model).__name__} returned {got}; a LayerwiseModel of depth L={depth} returns the list "
                          f"[Phi_0, ..., Phi_L] of L+1 = {depth + 1 if isinstance(depth, int) else 'L+1'} (Phi_0: before "
                          "the first block)")
    for layer, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            raise CutlabError(f"{type(model).__name__} returned a {type(outputs).__name__} holding a "
                              f"{type(out).__name__} as Phi_{layer}; a LayerwiseModel returns the list "
                              "[Phi_0, ..., Phi_L] of tensors")
    _check_gradient(model, outputs)
    return list(outputs)


def _check_gradient(model, outputs) -> None:
    """In training (grad enabled), each Phi_l past Phi_0 must carry a gradient to the model's parameters: one that
    does not (a forward under torch.no_grad(), a .detach(), outputs that skip the parameters) could not be trained,
    and the backward pass fails in torch's own words. A flag per layer: no work more."""
    if not torch.is_grad_enabled():
        return
    for layer, out in enumerate(outputs[1:], start=1):
        if not out.requires_grad:
            raise CutlabError(f"{type(model).__name__}'s Phi_{layer} carries no gradient; Phi_1..Phi_L must depend "
                              "on the model's parameters (no torch.no_grad() or .detach() in its forward)")
