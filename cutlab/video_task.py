"""Builds the video denoising task from config: clips, windows, sigma_x, model and objective."""

from __future__ import annotations

from functools import partial

from omegaconf import DictConfig

from cutlab.core.data.video import FrameWindows, denoising_batch, load_video_clips, pixel_std, split_validation
from cutlab.core.models import DUST, UT, LayerwiseModel
from cutlab.core.objectives import DenoisingObjective
from cutlab.tasks import Task


def build_model(cfg: DictConfig, depth: int) -> LayerwiseModel:
    model = cfg.model
    if model.name == "vit":
        from cutlab.core.models.vit import build_vit  # lazy: transformers costs seconds to import

        return build_vit(
            str(model.pretrained), depth, mean=_optional_list(model.mean), std=_optional_list(model.std),
            pad_mode=model.pad_mode,
        )
    if model.name == "dust":
        return DUST(
            depth=depth, patch=model.patch, atoms=model.atoms, threshold=model.threshold,
            attention_step=model.attention_step, attention_scale=model.attention_scale,
            lipschitz_margin=model.lipschitz_margin, per_layer_dictionary=bool(model.per_layer_dictionary),
        )
    return UT(
        depth=depth, patch=model.patch, atoms=model.atoms, attention_step=model.attention_step,
        attention_scale=model.attention_scale, feedforward_init_std=model.feedforward_init_std,
    )


def _optional_list(value) -> tuple[float, ...] | None:
    return None if value is None else tuple(float(v) for v in value)


def build_video_task(cfg: DictConfig) -> Task:
    data = cfg.data
    options = {"test_clips": data.test_clips} if "test_clips" in data else {}  # video_folder's flat layout
    clips = load_video_clips(data.name, data.root, cfg.paths.cache_dir, data.image_size, progress=cfg.progress, **options)
    train_clips, val_clips = split_validation(clips.train, data.val_clips)
    return Task(
        model=build_model(cfg, cfg.L),
        objective=DenoisingObjective(),
        train_set=FrameWindows(train_clips, data.frames, data.stride),
        val_set=FrameWindows(val_clips, data.frames, data.stride),
        test_set=FrameWindows(clips.test, data.frames, data.stride),
        prepare=partial(denoising_batch, patch=data.patch),
        # sigma_x of the clean training clips that are trained on (SPEC section 2)
        sigma=pixel_std(train_clips),
        source=clips.source,
    )
