"""How much of the noise UT's descent constraints ask it to remove, beside what a Wiener filter removes, on Ped2.

    .venv/bin/python benchmarks/wiener_reference.py            # gamma 0.09 0.15, L 3 5 7; about 15 s on 2 cores

UT's Φ_0 is its noisy input (its encoder starts as the decoder's right inverse) and ``train.epsilon=auto`` sets
ε to that input's loss, so the chain of constraints (eq. 3 of the paper), ℓ_L ≤ (1 − α)^L ℓ_0 ≤ (1 − α)^L ε,
asks the last layer to leave at most (1 − α)^L of the noise energy. The reference is the linear minimum-mean-
square-error estimator x̂ = μ + (x̃ − μ) C (C + σ²I)⁻¹, with the clean mean μ and covariance C measured on the
training clips and the noise variance σ² known: per token (one 16×16 patch, what a per-token layer could reach
linearly) and per sequence (the 10 frames of one patch position, what attention over time adds). It is scored
on the validation clips, where the feasibility verdict is taken. Prints one line per γ; nothing is written.
"""

from __future__ import annotations

import argparse

import torch

import suite.paths  # noqa: F401  points cutlab at the real data and weights beside the checkout
from suite.ped2_windows import ut_on_ped2


def _tokens(video: torch.Tensor) -> torch.Tensor:
    """[B, T, P, n] -> [B*T*P, n]: every patch of every frame on its own."""
    return video.reshape(-1, video.shape[-1]).double()


def _sequences(video: torch.Tensor) -> torch.Tensor:
    """[B, T, P, n] -> [B*P, T*n]: the T frames of one patch position together, as UT's attention sees them."""
    batch, frames, patches, width = video.shape
    return video.permute(0, 2, 1, 3).reshape(batch * patches, frames * width).double()


def clean_statistics(flatten, train_clean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The clean training data's mean and covariance in one layout (they do not depend on the noise level)."""
    clean = flatten(train_clean)
    mean = clean.mean(0)
    return mean, torch.cov((clean - mean).T)


def wiener_loss(flatten, statistics, val_clean, val_noisy, noise_variance: float) -> float:
    """The Wiener estimate's loss on validation, in cutlab's units (½ Σ over a patch position's frames and pixels,
    averaged over the windows' patch positions)."""
    mean, covariance = statistics
    identity = torch.eye(covariance.shape[0], dtype=covariance.dtype)
    gain = torch.linalg.solve(covariance + noise_variance * identity, covariance)  # symmetric C: x̂ = μ + (x̃ − μ)·gain
    estimate = mean + (flatten(val_noisy) - mean) @ gain
    return sequence_loss(estimate - flatten(val_clean), val_clean)


def sequence_loss(error: torch.Tensor, video: torch.Tensor) -> float:
    """½ ‖error‖² per patch position of ``video`` [B, T, P, n], whatever the error's layout."""
    return float(0.5 * (error**2).sum() / (video.shape[0] * video.shape[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gammas", type=float, nargs="+", default=[0.09, 0.15])
    parser.add_argument("--depths", type=int, nargs="+", default=[3, 5, 7])
    args = parser.parse_args()

    from cutlab.core.perturbation import noise_generator, perturb

    torch.set_num_threads(2)
    cfg, task = ut_on_ped2(max(args.depths), args.gammas[0])  # the split and α do not depend on L or γ
    train_clean, _ = task.prepare(torch.stack([task.train_set[i] for i in range(len(task.train_set))]))
    val_clean, _ = task.prepare(torch.stack([task.val_set[i] for i in range(len(task.val_set))]))
    layouts = [(flatten, clean_statistics(flatten, train_clean)) for flatten in (_tokens, _sequences)]
    alpha = float(cfg.train.alpha)
    asked = "  ".join(f"L={depth}: {(1 - alpha) ** depth:.3f}" for depth in args.depths)
    print(f"UT's constraints (alpha {alpha}) ask the last layer to leave at most this fraction of the noisy input's "
          f"loss: {asked}", flush=True)
    for gamma in args.gammas:
        val_noisy = perturb(val_clean, gamma, task.sigma, 0.0, noise_generator(seed=0, stream=0, index=0))
        variance = float((gamma * task.sigma) ** 2)
        noise = sequence_loss(val_noisy - val_clean, val_clean)
        token, sequence = (wiener_loss(flatten, statistics, val_clean, val_noisy, variance)
                           for flatten, statistics in layouts)
        print(f"gamma {gamma}: the noisy input's loss {noise:.3f}; the Wiener filter's per token {token:.3f} "
              f"({token / noise:.3f} of it), per sequence {sequence:.3f} ({sequence / noise:.3f})", flush=True)


if __name__ == "__main__":
    main()
