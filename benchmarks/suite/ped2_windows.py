"""UT on UCSD Ped2 validation windows at one training noise: the set-up the UT benchmarks share."""

from __future__ import annotations

import torch


def ut_on_validation_windows(depth: int, gamma: float, windows: int):
    """(config, task, noisy, target): ``model=ut`` at depth ``depth`` composed as ``python -m cutlab`` would, and
    ``windows`` validation windows spread over the split with the noise draw of seed 0 at ``gamma``."""
    from cutlab.config.compose import compose_run_config  # registers the config's resolvers itself
    from cutlab.core.perturbation import noise_generator, perturb
    from cutlab.tasks.video import build_video_task

    cfg = compose_run_config(["data=ucsd_ped2", "model=ut", f"L={depth}", f"gamma={gamma}", "progress=false"])
    task = build_video_task(cfg)
    every = max(1, len(task.val_set) // windows)
    clean, target = task.prepare(torch.stack([task.val_set[i] for i in range(0, len(task.val_set), every)][:windows]))
    noisy = perturb(clean, gamma, task.sigma, 0.0, noise_generator(seed=0, stream=0, index=0))
    return cfg, task, noisy, target
