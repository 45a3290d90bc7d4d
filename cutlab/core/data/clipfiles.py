"""Clips from files on disk: video files (PyAV) and frame folders (Pillow), preprocessed and cached.

Every set read this way gets the UCSD preprocessing (cutlab/core/data/ucsd.py): grayscale (PIL "L"), bilinear
resize to image_size x image_size, uint8 — and the same content-keyed cache (cutlab/core/data/cache.py), so
the second run over an unchanged folder reads one uncompressed .npz instead of decoding the videos again.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image

from cutlab.core.data import cache
from cutlab.core.data.video import VideoClips, grayscale_frame, natural_order, root_not_set
from cutlab.core.progress import Meter
from cutlab.core.errors import CutlabError
from cutlab.core.extras import optional_import

VIDEO_SUFFIXES = (".avi", ".mp4", ".mov", ".mkv", ".mpg", ".mpeg", ".m4v", ".webm", ".wmv")
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")

# One clip's source: a video file, or the sorted frame files of a frame folder.
ClipSource = Union[Path, list[Path]]
# {"training" | "testing": {clip name: source}}
Layout = dict[str, dict[str, ClipSource]]


def natural_key(path: Path) -> list:
    """A path's name in natural order (cutlab.core.data.video.natural_order)."""
    return natural_order(path.name)


def is_visible_file(path: Path, suffixes: tuple[str, ...]) -> bool:
    """A file with one of ``suffixes``, not a hidden/AppleDouble one (``._01.avi``) that archives carry."""
    return path.suffix.lower() in suffixes and not path.name.startswith(".") and path.is_file()


def video_files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if is_visible_file(p, VIDEO_SUFFIXES)), key=natural_key)


def frame_files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if is_visible_file(p, FRAME_SUFFIXES)), key=natural_key)


def load_layout(layout: Layout, label: str, root: Path, cache_dir: str | None, image_size: int, progress: bool,
                hint: str) -> VideoClips:
    """Decode every clip of ``layout`` (or load the cached result for unchanged files) into VideoClips."""
    for split in ("training", "testing"):
        if not layout.get(split):
            raise CutlabError(f"data.root={root}: no {split} clips found; {hint}")
    files = [f for clips in layout.values() for source in clips.values() for f in _as_list(source)]
    described = f"{label} at {root}"
    target = None
    if cache_dir is not None:
        key = cache.cache_key({"kind": label, "root": str(root.resolve()), "image_size": image_size,
                               "clips": {s: sorted(c) for s, c in layout.items()},
                               "files": cache.file_fingerprint(root, files)})
        target = cache.cache_path(cache_dir, f"{label}{image_size}", key)
        cached = cache.load_clips(target, key, image_size)
        if cached is not None:
            return VideoClips(train=cached[0], test=cached[1], source=f"{described} (cached in {target})")
    train, test = _decode_all(layout, label, image_size, progress, hint)
    if target is not None:
        cache.save_clips(target, key, train, test)
        described += f" (cached in {target})"
    return VideoClips(train=train, test=test, source=described)


def _as_list(source: ClipSource) -> list[Path]:
    return source if isinstance(source, list) else [source]


def _decode_all(layout: Layout, label: str, image_size: int, progress: bool, hint: str):
    """Decode clips on a thread pool (FFmpeg and PIL release the GIL while decoding and resizing)."""
    jobs = [(split, name, source) for split, clips in layout.items() for name, source in clips.items()]
    meter = Meter(f"preprocessing {label}", len(jobs), "clip", enabled=progress)
    out: dict[str, dict[str, np.ndarray]] = {"training": {}, "testing": {}}
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        decoded = pool.map(lambda job: decode_clip(job[2], image_size, hint), jobs)
        for done, ((split, name, _), clip) in enumerate(zip(jobs, decoded), start=1):
            out[split][name] = clip
            meter.update(done)
    meter.close()
    return out["training"], out["testing"]


def decode_clip(source: ClipSource, image_size: int, hint: str) -> np.ndarray:
    """uint8 [frames, image_size, image_size] from a video file or a list of frame files."""
    if isinstance(source, list):
        return np.stack([_decode_image(path, image_size, hint) for path in source])
    return decode_video(source, image_size, hint)


def _decode_image(path: Path, image_size: int, hint: str) -> np.ndarray:
    try:
        with Image.open(path) as image:
            return grayscale_frame(image, image_size, path)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise CutlabError(f"data.root: cannot read frame {path} ({exc}); restore the file or {hint}") from exc


def decode_video(path: Path, image_size: int, hint: str) -> np.ndarray:
    """Every frame of the first video stream, through FFmpeg (PyAV), preprocessed like a frame file."""
    av = optional_import("av")  # FFmpeg's libraries; imported only when a set of video files is read

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise CutlabError(f"data.root: {path} has no video stream; {hint}")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            frames = [grayscale_frame(frame.to_image(), image_size, path) for frame in container.decode(stream)]
    except av.FFmpegError as exc:
        raise CutlabError(f"data.root: cannot decode video {path} ({exc}); restore the file or {hint}") from exc
    if not frames:
        raise CutlabError(f"data.root: video {path} holds no frames; restore the file or {hint}")
    return np.stack(frames)


def describe(path: Path) -> str:
    """'is an empty folder' or 'holds a, b, c ...': shows the user what the loader saw."""
    names = sorted(entry.name for entry in path.iterdir())
    if not names:
        return "is an empty folder"
    return "holds " + ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")


def existing_folder(root, name: str, hint: str) -> Path:
    """data.root as an existing folder, or a CutlabError naming the key and the expected layout."""
    if root is None or not str(root).strip():
        raise root_not_set(name, hint)
    path = Path(str(root)).expanduser()
    if not path.is_dir():
        raise CutlabError(f"data.root={path} is not an existing folder; {hint}")
    return path
