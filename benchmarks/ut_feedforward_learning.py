"""How many steps one UT layer's feed-forward needs before it descends by the factor UT's constraint asks.

    .venv/bin/python benchmarks/ut_feedforward_learning.py       # lr 1e-3 and 3e-3 at std 0.002, lr 1e-3 at std 0.01
    .venv/bin/python benchmarks/ut_feedforward_learning.py --settings 1e-3:0.002:0.1   # the biases start at 0.1

A UT of depth 1 on UCSD Ped2 at γ 0.09 (attention step β and the rest from conf/model/ut.yaml). Only the layer's
feed-forward S_1, b_1 trains (primal Adam on ℓ_1 alone, the ERM objective; batches as `train=constrained` draws
them), so what is measured is whether the ReLU step Y - ReLU(Y S + b) S (Yang et al. 2022) can learn to remove
the extra share of the loss that the attention smoother leaves: UT's constraint asks ℓ_1 / ℓ_0 <= 1 - α = 0.78
(eq. 3 of the paper; benchmarks/feasibility_study/STAGE5.md). Prints ℓ_1 / ℓ_0 on 8 validation windows every 50
steps, and the share of ReLU units active on them at the end; nothing is written. A third field in a setting
starts the feed-forward biases at that value instead of UT's 0, so that more ReLU units start on.
"""

from __future__ import annotations

import argparse
import time

import torch

import suite.paths  # noqa: F401  points cutlab at the real data and weights beside the checkout
from suite.ped2_windows import ut_on_validation_windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=float, default=0.09)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--settings", nargs="+", default=["1e-3:0.002", "3e-3:0.002", "1e-3:0.01"],
                        help="lr:feedforward_init_std[:bias_init] (bias_init 0 when left out)")
    parser.add_argument("--windows", type=int, default=8, help="validation windows, spread over the split")
    args = parser.parse_args()

    from cutlab.core.perturbation import noise_generator, perturb

    torch.set_num_threads(1)
    cfg, task, val_noisy, val_target = ut_on_validation_windows(1, args.gamma, args.windows)

    for setting in args.settings:
        lr, std, *bias = (float(part) for part in setting.split(":"))
        bias_init = bias[0] if bias else 0.0  # UT's own init is 0
        started = time.time()
        torch.manual_seed(0)
        model = task.model.__class__(1, patch=cfg.model.patch, atoms=cfg.model.atoms,
                                     attention_step=cfg.model.attention_step, feedforward_init_std=std)
        if bias:
            with torch.no_grad():
                for layer_bias in model.biases:
                    layer_bias.fill_(bias_init)
        optimizer = torch.optim.Adam([*model.weights, *model.biases], lr=lr)
        draw = torch.Generator().manual_seed(1)
        ratios = []
        for step in range(args.steps + 1):
            if step % 50 == 0:
                with torch.no_grad():
                    before, after = (((output - val_target) ** 2).mean().item() for output in model(val_noisy))
                ratios.append(f"{step}: {after / before:.3f}")
            if step == args.steps:
                break
            picks = torch.randint(len(task.train_set), (cfg.train.batch_size,), generator=draw)
            clean, target = task.prepare(torch.stack([task.train_set[int(i)] for i in picks]))
            noisy = perturb(clean, args.gamma, task.sigma, 0.0, noise_generator(seed=1, stream=0, index=step))
            loss = ((model(noisy)[-1] - target) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"lr {lr:g}, init std {std:g}, bias init {bias_init:g}: l_1 / l_0 at step {', '.join(ratios)}; "
              f"ReLU units active at the end {active_share(model, val_noisy):.1%} ({time.time() - started:.0f} s)",
              flush=True)


def active_share(model: torch.nn.Module, noisy: torch.Tensor) -> float:
    """The share of the layer's ReLU units that are on for the validation windows: 0 means the step is dead."""
    from cutlab.core.models.base import symmetric_attention, to_sequences

    with torch.no_grad():
        codes = to_sequences(noisy) @ model.encoder
        attended = symmetric_attention(codes, codes @ model.attention.T, model.attention_step, model.attention_scale)
        symmetric = 0.5 * (model.weights[0] + model.weights[0].T)
        return float(((attended @ symmetric + model.biases[0]) > 0).float().mean())


if __name__ == "__main__":
    main()
