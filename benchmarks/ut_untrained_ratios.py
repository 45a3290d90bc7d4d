"""The untrained UT's layer-to-layer loss ratios on UCSD Ped2 validation windows, for several attention steps β.

    .venv/bin/python benchmarks/ut_untrained_ratios.py                  # L = 7, gamma 0.09, beta 0.1 0.2 0.3 0.5
    .venv/bin/python benchmarks/ut_untrained_ratios.py --scales 0.00390625 0.0625 1 --betas 0.1 0.3 0.5

With its feed-forward weights at std 0.002 the untrained UT is its attention smoother, so these ratios
ℓ_l / ℓ_{l-1} are what the constraint ℓ_l <= (1 - α) ℓ_{l-1} (eq. 3 of the paper) starts from
(benchmarks/feasibility_study/STAGE5.md). ``--scales`` sets the softmax scale s of softmax(s Q Q^T) (UT's
``model.attention_scale``; its default is 1/n = 1/256). Prints, per s, how far the first layer's attention is
from a plain mean over the frames, and one line per (s, β); nothing is trained or written.
"""

from __future__ import annotations

import argparse

import torch

import suite.paths  # noqa: F401  points cutlab at the real data and weights beside the checkout
from suite.ped2_windows import ut_on_validation_windows


def first_layer_attention(model, noisy: torch.Tensor) -> str:
    """How far the untrained first layer's attention over the T frames is from uniform: its mean largest weight
    (uniform: 1/T) and its mean entropy ÷ log T (uniform: 1)."""
    from cutlab.core.models.base import attention_weights, to_sequences

    codes = to_sequences(noisy) @ model.encoder
    weights = attention_weights(codes @ model.attention.T, model.attention_scale)
    frames = weights.shape[-1]
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1) / torch.log(torch.tensor(float(frames)))
    return (f"largest weight {weights.max(-1).values.mean():.3f} of {frames} frames (uniform {1 / frames:.3f}), "
            f"entropy / log T {entropy.mean():.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--gamma", type=float, default=0.09)
    parser.add_argument("--betas", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.5])
    parser.add_argument("--scales", type=float, nargs="+", default=[None],
                        help="attention softmax scales s (default: the model's own, 1/n)")
    parser.add_argument("--windows", type=int, default=8, help="validation windows, spread over the split")
    args = parser.parse_args()

    torch.set_num_threads(1)
    cfg, task, noisy, target = ut_on_validation_windows(args.depth, args.gamma, args.windows)
    for scale in args.scales:
        for beta in args.betas:
            torch.manual_seed(0)
            model = task.model.__class__(args.depth, patch=cfg.model.patch, atoms=cfg.model.atoms, attention_step=beta,
                                         attention_scale=scale, feedforward_init_std=cfg.model.feedforward_init_std)
            with torch.no_grad():
                losses = [((output - target) ** 2).mean().item() for output in model(noisy)]
                if beta == args.betas[0]:  # the first layer's weights do not depend on β
                    print(f"scale {model.attention_scale:.4g}: first layer's attention: "
                          f"{first_layer_attention(model, noisy)}", flush=True)
            ratios = " ".join(f"{after / before:.3f}" for before, after in zip(losses, losses[1:]))
            print(f"scale {model.attention_scale:.4g}, beta {beta}: l_l / l_(l-1), l = 1..{args.depth}: {ratios}",
                  flush=True)


if __name__ == "__main__":
    main()
