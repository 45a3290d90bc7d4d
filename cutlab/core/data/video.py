"""Video clips for the video experiments: loading, validation split, frame windows, patch tokens, sigma_x.

Clips stay uint8 ``[frames, H, W]`` numpy arrays end to end (Ped2 is ~117 MB as uint8, 4x that as
float32); conversion to float happens per batch in :func:`to_patch_tokens`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from cutlab.core.data.groups import SampleGroups
from cutlab.core.errors import CutlabError

# data.name -> "module:function" reading that set; the function takes (root, cache_dir, image_size, progress,
# **options) and returns VideoClips. Modules are imported on use (they import VideoClips from this one).
LOADERS = {
    "synthetic": "cutlab.core.data.synthetic:load_synthetic",
    "ucsd_ped2": "cutlab.core.data.ucsd:load_ped2",
    "ucsd_ped1": "cutlab.core.data.ucsd:load_ped1",
    "avenue": "cutlab.core.data.avenue:load_avenue",
    "shanghaitech": "cutlab.core.data.shanghaitech:load_shanghaitech",
    "video_folder": "cutlab.core.data.video_folder:load_video_folder",
}
DATASETS = tuple(LOADERS)
# data.name -> "module:constant" of where data.root must point, as each refusal of that set's loader says it (synthetic
# reads no file): an unset root is refused by the config checks in the loader's own words (check_root_given)
ROOT_HINTS = {
    "ucsd_ped2": "cutlab.core.data.ucsd:PED2_HINT",
    "ucsd_ped1": "cutlab.core.data.ucsd:PED1_HINT",
    "avenue": "cutlab.core.data.avenue:HINT",
    "shanghaitech": "cutlab.core.data.shanghaitech:HINT",
    "video_folder": "cutlab.core.data.video_folder:HINT",
}


@dataclass
class VideoClips:
    """Preprocessed clips: name -> uint8 array [frames, 160, 160] (grayscale, already resized)."""

    train: dict[str, np.ndarray]
    test: dict[str, np.ndarray]
    source: str  # human-readable description of where they came from


def check_video_loader(name: str) -> None:
    """``data.name`` must name one of LOADERS: a data config's file may have any name, its ``name:`` may not."""
    if name not in LOADERS:
        raise CutlabError(f"data.name={name!r} is not a video loader cutlab has ({', '.join(DATASETS)}); a data "
                          "config of your own keeps the name of the loader that reads it: name: video_folder, with "
                          "root: the folder of your footage")


def load_video_clips(
    name: str, root: str | None, cache_dir: str | None, image_size: int = 160, progress: bool = True, **options
) -> VideoClips:
    """Load a video set by name (see LOADERS): ``synthetic`` is generated, the others are read from ``root``.

    UCSD takes a ``.npz`` (keys ``training_NN`` / ``testing_NN``) or the official folder; Avenue,
    ShanghaiTech and video_folder take their folders (see each module). ``cache_dir`` (or None) keeps
    preprocessed copies; ``options`` are set-specific (video_folder: ``test_clips``).
    """
    check_video_loader(name)
    if not isinstance(image_size, int) or isinstance(image_size, bool) or image_size < 1:
        raise CutlabError(f"data.image_size={image_size!r} is not a positive integer; set it to e.g. 160")
    module, function = LOADERS[name].split(":")
    loader = getattr(importlib.import_module(module), function)
    # +data.test_clips=2 on a set whose loader has no such option was the loader's TypeError, a traceback
    unknown = sorted(options.keys() - inspect.signature(loader).parameters.keys())
    if unknown:
        raise CutlabError(f"data.{unknown[0]} is not a setting of data.name={name}; remove it (python -m cutlab "
                          f"data={name} --cfg job shows the set's keys)")
    return loader(root, cache_dir, image_size, progress, **options)


def root_not_set(name: str, hint: str) -> CutlabError:
    """The line of a set read from files whose data.root is unset; ``hint`` says where it should point."""
    return CutlabError(f"data.root is not set but {name} needs its files; {hint}")


def check_root_given(name: str, root) -> None:
    """``root`` unset for a set read from files: the line its loader would stop on as the task is built, raised
    before any file is read (cutlab/config/checks.py), so --plan counts the run refused and says why."""
    if name in ROOT_HINTS and (root is None or not str(root).strip()):
        module, constant = ROOT_HINTS[name].split(":")
        raise root_not_set(name, getattr(importlib.import_module(module), constant))


# PIL modes whose samples are not 8-bit: convert("L") clips them to 0 or 255, so 16-bit or float footage would be
# read as a blank video and trained on without a word.
_WIDE_SAMPLES = {"I": "32-bit integer", "F": "32-bit float", "I;16": "16-bit", "I;16L": "16-bit", "I;16B": "16-bit",
                 "I;16N": "16-bit"}


def grayscale_frame(image: Image.Image, image_size: int, path) -> np.ndarray:
    """The UCSD preprocessing of one frame: PIL grayscale, bilinear resize, uint8 [image_size, image_size]."""
    if image.mode in _WIDE_SAMPLES:
        raise CutlabError(
            f"data.root: frame {path} has {_WIDE_SAMPLES[image.mode]} samples (PIL mode {image.mode}), which cutlab "
            "does not scale to 0-255 itself (their range is the camera's); save the frames as 8-bit images"
        )
    return np.asarray(image.convert("L").resize((image_size, image_size), Image.BILINEAR), dtype=np.uint8)


def natural_order(name: str) -> list:
    """Order 2.jpg before 10.jpg (and 01_001 before 01_002): digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def split_validation(
    clips: dict[str, np.ndarray], val_clips: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Hold out the last ``val_clips`` clips (in natural order of their names, as the test clips of a flat
    video_folder are chosen: clip9 before clip10) as validation: returns (train, val)."""
    if len(clips) < 2:  # one clip cannot be both trained on and validated on
        raise CutlabError(
            f"the training split has {len(clips)} clip, and validation holds out whole clips (data.val_clips) with at "
            "least one left to train on: give the data more clips (a video_folder: more clip folders or files, or "
            "fewer of them for data.test_clips)"
        )
    if isinstance(val_clips, bool) or not isinstance(val_clips, int) or not 1 <= val_clips < len(clips):
        raise CutlabError(
            f"data.val_clips={val_clips!r} must be an integer in [1, {len(clips) - 1}] for {len(clips)} training "
            "clips (at least one clip must stay for training); change data.val_clips"
        )
    names = sorted(clips, key=natural_order)
    keep, held = names[: len(names) - val_clips], names[len(names) - val_clips :]
    return {n: clips[n] for n in keep}, {n: clips[n] for n in held}


class FrameWindows(Dataset):
    """Every window of ``frames`` consecutive frames inside one clip, at starts 0, stride, 2*stride, ...

    Windows never cross clip boundaries; items are uint8 tensors ``[frames, H, W]`` (copies, so a
    consumer writing into a batch cannot corrupt the stored clips).
    """

    def __init__(self, clips: dict[str, np.ndarray], frames: int, stride: int):
        _check_positive("frames", frames)
        _check_positive("stride", stride)
        if not clips:
            raise CutlabError("FrameWindows got no clips; check data.root and the train/validation split")
        self.clips = {name: _check_clip(name, clip) for name, clip in clips.items()}
        self.frames, self.stride = frames, stride
        # (clip name, start frame) per sample, in clip order then time order.
        self.index: list[tuple[str, int]] = [
            (name, start) for name, clip in self.clips.items() for start in range(0, len(clip) - frames + 1, stride)
        ]
        if not self.index:
            shortest = min(len(clip) for clip in self.clips.values())
            longest = max(len(clip) for clip in self.clips.values())
            raise CutlabError(
                f"no window of data.frames={frames} fits in the {len(self.clips)} clip(s) (the longest has {longest} "
                f"frames, the shortest {shortest}); set data.frames={longest} or less, or give longer clips"
            )
        # windows of one clip show the same scene, so they are not independent samples: the verdict's interval
        # resamples whole clips (cutlab.core.evaluation.violation_intervals)
        clip_number = {name: number for number, name in enumerate(self.clips)}
        self.sample_groups = SampleGroups(torch.tensor([clip_number[name] for name, _ in self.index]), "clip")

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> torch.Tensor:
        name, start = self.index[i]  # list indexing gives IndexError / negative indices for free
        return torch.from_numpy(self.clips[name][start : start + self.frames].copy())


def _check_positive(what: str, value: int) -> None:
    """Window length and stride must be positive integers."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CutlabError(f"FrameWindows {what}={value!r} must be a positive integer; fix the data.{what} setting")


def _check_clip(name: str, clip: np.ndarray) -> np.ndarray:
    """Clips must be uint8 [frames, H, W]; anything else would silently change memory use or scaling."""
    if not isinstance(clip, np.ndarray) or clip.dtype != np.uint8 or clip.ndim != 3:
        got = f"{clip.dtype} {clip.shape}" if isinstance(clip, np.ndarray) else type(clip).__name__
        raise CutlabError(
            f"clip {name!r} is {got}; FrameWindows needs uint8 arrays [frames, H, W] from load_video_clips"
        )
    return clip


def denoising_batch(frames: torch.Tensor, patch: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """A video batch's (model input, target): the clean patch tokens are both (the noise comes later)."""
    tokens = to_patch_tokens(frames, patch)
    return tokens, tokens


def to_patch_tokens(frames: torch.Tensor, patch: int = 16) -> torch.Tensor:
    """[B, T, H, W] -> [B, T, P, patch*patch]: non-overlapping patches, row-major, values in [0, 1].

    uint8 is divided by 255 into float32; floating input is passed through unscaled in its own dtype.
    """
    if frames.ndim != 4:
        raise CutlabError(f"to_patch_tokens needs frames [B, T, H, W], got shape {tuple(frames.shape)}")
    batch, time_steps, height, width = frames.shape
    if patch < 1 or height % patch or width % patch:
        raise CutlabError(
            f"frames of {height}x{width} do not split into {patch}x{patch} patches; "
            "choose data.image_size divisible by the patch size"
        )
    if frames.dtype == torch.uint8:
        frames = frames.to(torch.float32) / 255.0
    elif not frames.is_floating_point():
        raise CutlabError(f"to_patch_tokens needs uint8 or floating frames, got {frames.dtype}")
    rows, cols = height // patch, width // patch
    tokens = frames.reshape(batch, time_steps, rows, patch, cols, patch).permute(0, 1, 2, 4, 3, 5)
    return tokens.reshape(batch, time_steps, rows * cols, patch * patch)


def from_patch_tokens(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Exact inverse of :func:`to_patch_tokens`: [B, T, P, patch*patch] -> [B, T, H, W]."""
    if tokens.ndim != 4:
        raise CutlabError(f"from_patch_tokens needs tokens [B, T, P, patch*patch], got shape {tuple(tokens.shape)}")
    batch, time_steps, count, dim = tokens.shape
    patch = int(round(dim**0.5))
    if patch * patch != dim or height % patch or width % patch or count != (height // patch) * (width // patch):
        raise CutlabError(
            f"tokens {tuple(tokens.shape)} do not tile a {height}x{width} frame; pass the height and width "
            "the tokens were made from"
        )
    rows, cols = height // patch, width // patch
    grid = tokens.reshape(batch, time_steps, rows, cols, patch, patch).permute(0, 1, 2, 4, 3, 5)
    return grid.reshape(batch, time_steps, height, width)


def pixel_std(clips: dict[str, np.ndarray]) -> float:
    """sigma_x: std of all clean pixels on the [0, 1] scale, streamed clip by clip (no float copy of the set).

    uint8 clips accumulate exact integer sums (so no cancellation error); float clips are taken as [0, 1].
    """
    if not clips:
        raise CutlabError("pixel_std got no clips; check data.root and the train/validation split")
    count, total, squares = 0, 0, 0  # sums in units of 1/255; Python ints stay exact for uint8 data
    exact = True
    for name, clip in clips.items():
        if clip.dtype != np.uint8 and not np.issubdtype(clip.dtype, np.floating):
            raise CutlabError(
                f"pixel_std: clip {name!r} has dtype {clip.dtype}; pass uint8 clips from load_video_clips"
            )
        exact = exact and clip.dtype == np.uint8
        for chunk in _frame_chunks(clip):
            wide = chunk.astype(np.uint64) if clip.dtype == np.uint8 else chunk.astype(np.float64) * 255.0
            total += wide.sum().item()
            squares += (wide * wide).sum().item()
        count += clip.size
    if count == 0:
        raise CutlabError("pixel_std got only empty clips; check data.root")
    if exact:
        variance = (count * squares - total * total) / (count * count)  # integer numerator: no cancellation
    else:
        variance = squares / count - (total / count) ** 2
    return float(np.sqrt(max(variance, 0.0)) / 255.0)


def _frame_chunks(clip: np.ndarray, frames_per_chunk: int = 64):
    """Views of at most ``frames_per_chunk`` frames: bounds the temporary wide-dtype copies to a few MB."""
    for start in range(0, len(clip), frames_per_chunk):
        yield clip[start : start + frames_per_chunk]
