"""Builds the video denoising task from config: clips, windows, sigma_x, model and objective."""

from __future__ import annotations

from functools import partial

from omegaconf import DictConfig

from cutlab.core.data.video import FrameWindows, denoising_batch, load_video_clips, pixel_std, split_validation
from cutlab.core.objectives import DenoisingObjective
from cutlab.core.out_of_memory import settings_named_on_out_of_memory
from cutlab.tasks import Task
from cutlab.tasks.models import model_for


def build_video_task(cfg: DictConfig) -> Task:
    data = cfg.data
    # set-specific loader options: video_folder's flat layout, the generated set's size
    options = {key: data[key] for key in ("test_clips", "training_clips") if key in data}
    # every frame is held in memory at data.image_size squared; the generated set's, data.training_clips of them too
    # (video_folder's test_clips only splits the clips it has)
    sizes = "data.image_size" + (" or data.training_clips" if "training_clips" in data else "")
    with settings_named_on_out_of_memory("the loading of the video clips", sizes):
        clips = load_video_clips(data.name, data.root, cfg.paths.cache_dir, data.image_size, progress=cfg.progress,
                                 **options)
    train_clips, val_clips = split_validation(clips.train, data.val_clips)
    return Task(
        model=model_for(cfg, patch=data.patch),  # the patch size its tokens have, to a model that takes one
        objective=DenoisingObjective(),
        train_set=FrameWindows(train_clips, data.frames, data.stride),
        val_set=FrameWindows(val_clips, data.frames, data.stride),
        test_set=FrameWindows(clips.test, data.frames, data.stride),
        prepare=partial(denoising_batch, patch=data.patch),
        # sigma_x of the clean training clips that are trained on (the paper's noise scale, Sec. 4)
        sigma=pixel_std(train_clips),
        source=clips.source,
    )
