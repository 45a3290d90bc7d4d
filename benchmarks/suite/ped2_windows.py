"""UT on UCSD Ped2 validation windows at one training noise: the set-up the UT benchmarks share."""

from __future__ import annotations

import torch


def ut_on_ped2(depth: int, gamma: float):
    """(config, task): ``model=ut`` at depth ``depth`` on UCSD Ped2, composed as ``python -m cutlab`` would
    (``train=constrained``, the default)."""
    from cutlab.config.compose import compose_run_config  # registers the config's resolvers itself
    from cutlab.tasks.video import build_video_task

    cfg = compose_run_config(["data=ucsd_ped2", "model=ut", f"L={depth}", f"gamma={gamma}", "progress=false"])
    return cfg, build_video_task(cfg)


def ut_on_validation_windows(depth: int, gamma: float, windows: int):
    """(config, task, noisy, target): :func:`ut_on_ped2`, and ``windows`` validation windows spread over the split
    with the noise draw of seed 0 at ``gamma``."""
    from cutlab.core.perturbation import noise_generator, perturb

    cfg, task = ut_on_ped2(depth, gamma)
    every = max(1, len(task.val_set) // windows)
    clean, target = task.prepare(torch.stack([task.val_set[i] for i in range(0, len(task.val_set), every)][:windows]))
    noisy = perturb(clean, gamma, task.sigma, 0.0, noise_generator(seed=0, stream=0, index=0))
    return cfg, task, noisy, target
