"""What several sections share: the Ped2-shaped data, the models, and steps built by the app's own code."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import Callable

import torch

from cutlab.core.data.video import FrameWindows, denoising_batch, load_video_clips, pixel_std, split_validation, to_patch_tokens
from cutlab.core.objectives import DenoisingObjective
from cutlab.core.perturbation import TRAIN_STREAM, noise_generator, perturb
from cutlab.core.constraints import Constraints
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.core.training import Schedule, Trainer, collate, epoch_batches

from suite.harness import BATCH, DEPTH, FRAMES, GAMMA, IMAGE, PATCH
from suite.paths import ROOT


def conf_alpha(model: str, fallback: float) -> float:
    try:
        from omegaconf import OmegaConf

        return float(OmegaConf.load(ROOT / "conf" / "model" / f"{model}.yaml").paper.alpha)
    except Exception:  # the benchmark must not depend on the config layout
        return fallback


ALPHA = {"ut": conf_alpha("ut", 0.22), "dust": conf_alpha("dust", 0.25)}


class Data:
    """Ped2 clips (or, without the file, synthetic 160x160 clips of the same shapes) and a fixed batch."""

    def __init__(self, ped2: Path, cache_dir: Path) -> None:
        if ped2.is_file():
            clips = load_video_clips("ucsd_ped2", str(ped2), str(cache_dir), IMAGE, progress=False)
            self.source = f"UCSD Ped2 ({ped2})"
            self.ped2: Path | None = ped2
        else:
            clips = load_video_clips("synthetic", None, None, IMAGE, progress=False)
            self.source = f"synthetic 160x160 clips (Ped2 file {ped2} missing)"
            self.ped2 = None
        train_clips, _ = split_validation(clips.train, 2 if len(clips.train) > 2 else 1)
        self.train = FrameWindows(train_clips, FRAMES, 10)
        self.test = FrameWindows(clips.test, FRAMES, 10)
        self.sigma = pixel_std(train_clips)
        self.tokens = partial(to_patch_tokens, patch=PATCH)
        self.prepare = partial(denoising_batch, patch=PATCH)  # (input, target) for Trainer and evaluate()
        first = epoch_batches(len(self.train), BATCH, 0, 0)[0]
        self.clean = self.tokens(collate(self.train, first))
        self.noisy = perturb(self.clean, GAMMA, self.sigma, 0.0, noise_generator(0, TRAIN_STREAM, 0))


def make_model(kind: str, per_layer: bool = False) -> torch.nn.Module:
    """UT or DUST at depth DEPTH as a run builds it: its yaml (conf/model/<kind>.yaml) composed and instantiated
    by cutlab.tasks.models.instantiate_model; ``per_layer``: DUST's per_layer_dictionary, which its yaml ties to
    train.constrained."""
    from cutlab.config.compose import compose_run_config
    from cutlab.tasks.models import instantiate_model

    overrides = [f"model={kind}", f"L={DEPTH}", "data=synthetic", f"data.patch={PATCH}"]
    if kind == "dust":
        overrides.append(f"model.per_layer_dictionary={str(per_layer).lower()}")
    cfg = compose_run_config(overrides)
    torch.manual_seed(0)
    return instantiate_model(cfg.model, depth=DEPTH, patch=PATCH)


def primal_dual_step(kind: str, constrained: bool, per_layer: bool, data: Data, full_backward: bool = False):
    """One training step of the core objects: forward, per-layer loss matrix, PrimalDual.step (Adam primal;
    with constraints: the Lagrangian, the backward, the dual Adam ascent and the slack step).

    ERM mirrors ``Trainer.train_step``: Phi_0 ... Phi_{L-1} are detached before the loss matrix, so the backward
    carries l_L alone. ``full_backward`` (ERM only) is cutlab's ERM before that change, kept as a reference arm:
    it back-propagates the exact zeros of every non-final layer's loss and readout (bit-identical update)."""
    model = make_model(kind, per_layer)
    model.train()
    objective = DenoisingObjective()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    if constrained:
        with torch.no_grad():
            epsilon = float(objective.loss_matrix(model(data.noisy), data.clean).mean(dim=0)[0])  # epsilon=auto
        pd = PrimalDual(params, optimizer, DEPTH + 1, Constraints(alpha=ALPHA[kind], epsilon=epsilon),
                        DualSettings(lr=1e-2, resilience="slack", resilience_c=1.0))
    else:
        pd = PrimalDual(params, optimizer, DEPTH + 1)

    def step() -> None:
        outputs = model(data.noisy)
        if not constrained and not full_backward:  # as Trainer.train_step
            outputs = [out.detach() for out in outputs[:-1]] + [outputs[-1]]
        pd.step(objective.loss_matrix(outputs, data.clean), dual_active=True)

    return model, step


# The ViT and text-encoder arms of section 1 are built by the app's own code: the config composed from conf/ as
# `python -m cutlab <overrides>` would (Hydra compose API), cutlab.tasks.build_task, reference_epsilon,
# build_primal_dual and Trainer.train_step on one fixed training batch.
VIT_OVERRIDES = ("model=vit", "L=12", "data.frames=2", "train.batch_size=2")
TEXT_OVERRIDES = ("model=hf_encoder", "data=imdb", "L=6", "data.train_file=imdb_train_tiny100.jsonl",
                  "data.test_file=imdb_test_tiny100.jsonl", "data.max_length=128", "train.batch_size=16")


def app_steps(overrides: list[str], train_groups: dict[str, str]) -> dict[str, tuple[torch.nn.Module, Callable]]:
    """{arm: (model, step)}: one Trainer per ``train`` group on the same task, initial weights and batch.

    ``train_groups``: {arm: "group [train.key=value ...]"}, the group and that arm's own train overrides.
    ``train.warmup_epochs=0`` so the constrained arm's dual step is on, as in the UT/DUST arms; its multipliers
    are kept > 0 so that every layer is back-propagated, as in the UT/DUST arms (which never detach a layer)."""
    import copy

    from cutlab.run.build import build_primal_dual, perturbation_of, reference_epsilon
    from cutlab.config.compose import compose_run_config
    from cutlab.tasks import build_task

    configs = {}
    for arm, spec in train_groups.items():
        group, *train_overrides = spec.split()
        configs[arm] = compose_run_config([*overrides, f"train={group}", *train_overrides, "train.warmup_epochs=0",
                                           "progress=false"])
    first = next(iter(configs.values()))
    for arm, cfg in configs.items():  # the arms may differ in their train group only
        if (cfg.model, cfg.data, cfg.train.batch_size) != (first.model, first.data, first.train.batch_size):
            raise RuntimeError(f"arm {arm} composes another model, data or batch size than the first arm")
    torch.manual_seed(first.seed)
    task = build_task(first)
    device = torch.device("cpu")
    batch = collate(task.train_set, epoch_batches(len(task.train_set), first.train.batch_size, first.seed, 0)[0])
    steps = {}
    for arm, cfg in configs.items():
        model = copy.deepcopy(task.model)
        arm_task = dataclasses.replace(task, model=model)
        epsilon = reference_epsilon(cfg, arm_task, device, batches=1) if cfg.train.constrained else None
        trainer = Trainer(model, task.objective, build_primal_dual(cfg, model, epsilon), task.train_set,
                          Schedule(1, cfg.train.batch_size, 0, None), task.prepare, perturbation_of(cfg, task), device)
        steps[arm] = (model, partial(_every_constraint_active if cfg.train.constrained else Trainer.train_step,
                                     trainer, batch))
    return steps


def _every_constraint_active(trainer: Trainer, batch) -> None:
    """A constrained Trainer step with every multiplier > 0, so every layer is back-propagated: the cost the
    overhead figure states. (With lambda = 0, e.g. at the start or for a satisfied constraint, the Trainer leaves
    that layer out of the backward, PrimalDual.layers_in_gradient, and the step costs less, down to ERM's.)"""
    trainer.primal_dual.multipliers.clamp_(min=0.01)
    trainer.train_step(batch)
