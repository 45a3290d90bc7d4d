"""Surveillance footage in miniature: a fixed textured scene with shapes walking across it.

Needs no files, so the whole video pipeline runs (and is tested) on any machine. One static camera
background is shared by all clips, as in UCSD; each clip has a few rectangles ("pedestrians") and
discs moving at constant velocity and bouncing off the borders. Each test clip also carries one
fast, large object: a miniature anomaly, like a cyclist among pedestrians in Ped2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cutlab.core.data.video import VideoClips
from cutlab.core.progress import Meter
from cutlab.core.errors import CutlabError

# the generated training set of every measurement made before data.training_clips existed
DEFAULT_TRAINING_CLIPS = 6


@dataclass
class _Shape:
    """One moving object: top-left corner, velocity (pixels/frame), extent, kind and grey level."""

    y: float
    x: float
    vy: float
    vx: float
    height: int
    width: int
    disc: bool
    level: float


def make_synthetic_clips(
    n_train: int = DEFAULT_TRAINING_CLIPS,
    n_test: int = 2,
    frames: int = 40,
    size: int = 160,
    seed: int = 0,
    progress: bool = False,
) -> VideoClips:
    """Deterministic moving-shapes clips, uint8 [frames, size, size], named ``training_NN`` / ``testing_NN``."""
    for what, value, low in (("n_train", n_train, 1), ("n_test", n_test, 1), ("frames", frames, 1), ("size", size, 16)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise CutlabError(f"synthetic video: {what}={value!r} must be an integer >= {low}")
    rng = np.random.default_rng(seed)
    background = _background(size, rng)
    meter = Meter("generating synthetic clips", n_train + n_test, "clip", enabled=progress)
    train, test = {}, {}
    for index in range(n_train + n_test):
        is_test = index >= n_train
        shapes = _random_shapes(size, rng, anomaly=is_test)
        clip = _render(background, shapes, frames)
        if is_test:
            test[f"testing_{index - n_train + 1:02d}"] = clip
        else:
            train[f"training_{index + 1:02d}"] = clip
        meter.update(index + 1)
    meter.close()
    source = f"synthetic moving shapes (seed={seed}, {n_train} train + {n_test} test clips of {frames}x{size}x{size})"
    return VideoClips(train=train, test=test, source=source)


def load_synthetic(
    root, cache_dir: str | None, image_size: int, progress: bool, training_clips: int = DEFAULT_TRAINING_CLIPS
) -> VideoClips:
    """data=synthetic (the registry's entry point): generated, so root and cache_dir are not used.

    The test clips are drawn after the training clips, so ``training_clips`` changes them too.
    """
    if isinstance(training_clips, bool) or not isinstance(training_clips, int) or training_clips < 2:
        raise CutlabError(f"data.training_clips={training_clips!r} must be an integer >= 2 (one or more validate)")
    return make_synthetic_clips(n_train=training_clips, size=image_size, progress=progress)


def _background(size: int, rng: np.random.Generator) -> np.ndarray:
    """Static scene, float32 in [0, 255]: a lighting gradient, low-frequency blobs and a faint texture."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    gx, gy = rng.uniform(-40, 40, size=2)
    scene = 120 + gx * (x - 0.5) + gy * (y - 0.5)
    for _ in range(6):
        cy, cx = rng.uniform(0, 1, size=2)
        width = rng.uniform(0.08, 0.25)
        scene += rng.uniform(-45, 45) * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * width**2))
    for _ in range(3):  # mild mid-frequency texture (paving, grass) so the scene is not flat
        fy, fx = rng.uniform(4, 12, size=2)
        scene += rng.uniform(2, 6) * np.sin(2 * np.pi * (fy * y + fx * x) + rng.uniform(0, 2 * np.pi))
    return np.clip(scene, 0, 255).astype(np.float32)


def _random_shapes(size: int, rng: np.random.Generator, anomaly: bool) -> list[_Shape]:
    """3-5 slow objects, plus one fast large one for test clips; dark or bright so they stand out."""
    shapes = [_one_shape(size, rng, speed=rng.uniform(0.7, 2.5), scale=1.0) for _ in range(int(rng.integers(3, 6)))]
    if anomaly:
        shapes.append(_one_shape(size, rng, speed=rng.uniform(5.0, 7.0), scale=1.5))
    return shapes


def _one_shape(size: int, rng: np.random.Generator, speed: float, scale: float) -> _Shape:
    """A tall rectangle (pedestrian-like) or a disc at a random place, moving in a random direction."""
    scale *= size / 160  # sizes and speeds are tuned for 160x160 frames
    speed *= size / 160
    disc = bool(rng.random() < 0.4)
    if disc:
        height = width = max(2, int(rng.integers(8, 18) * scale))
    else:
        height, width = max(2, int(rng.integers(14, 28) * scale)), max(2, int(rng.integers(6, 14) * scale))
    level = float(rng.uniform(10, 60) if rng.random() < 0.5 else rng.uniform(190, 250))
    angle = rng.uniform(0, 2 * np.pi)
    return _Shape(
        y=float(rng.uniform(0, size - height)),
        x=float(rng.uniform(0, size - width)),
        vy=float(speed * np.sin(angle)),
        vx=float(speed * np.cos(angle)),
        height=height,
        width=width,
        disc=disc,
        level=level,
    )


def _render(background: np.ndarray, shapes: list[_Shape], frames: int) -> np.ndarray:
    """Draw every frame; shapes advance one step per frame and reflect at the borders."""
    size = background.shape[0]
    clip = np.empty((frames, size, size), dtype=np.uint8)
    for t in range(frames):
        frame = background.copy()
        for shape in shapes:
            _draw(frame, shape)
            _step(shape, size)
        clip[t] = np.rint(frame).astype(np.uint8)
    return clip


def _draw(frame: np.ndarray, shape: _Shape) -> None:
    """Paint one shape in place (discs via a mask over their bounding box)."""
    top, left = int(round(shape.y)), int(round(shape.x))
    box = frame[top : top + shape.height, left : left + shape.width]
    if shape.disc:
        radius = shape.height / 2
        yy, xx = np.ogrid[: box.shape[0], : box.shape[1]]
        box[(yy + 0.5 - radius) ** 2 + (xx + 0.5 - radius) ** 2 <= radius**2] = shape.level
    else:
        box[...] = shape.level


def _step(shape: _Shape, size: int) -> None:
    """Constant-velocity motion with elastic bounces off the frame borders."""
    shape.y, shape.vy = _bounce(shape.y + shape.vy, shape.vy, size - shape.height)
    shape.x, shape.vx = _bounce(shape.x + shape.vx, shape.vx, size - shape.width)


def _bounce(position: float, velocity: float, upper: float) -> tuple[float, float]:
    """Reflect a coordinate that left [0, upper] back inside and flip its velocity."""
    if position < 0:
        return min(-position, upper), -velocity
    if position > upper:
        return max(2 * upper - position, 0.0), -velocity
    return position, velocity
