"""UCSD Anomaly Detection (Ped1 / Ped2) readers: the official .tif layout and the preprocessed .npz.

Official layout (both sets): ``UCSDped2/Train/Train001/001.tif ...`` and ``UCSDped2/Test/Test001/*.tif``;
``TestNNN_gt`` folders hold ground-truth masks and are skipped. Clips from either form are named like
the npz keys (``training_01``, ``testing_01``) so the two sources are interchangeable.
"""

from __future__ import annotations

import os
import re
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from cutlab.core.data import cache
from cutlab.core.data.video import VideoClips, grayscale_frame, root_not_set
from cutlab.core.progress import Meter
from cutlab.core.errors import CutlabError

_NPZ_KEY = re.compile(r"(training|testing)_(\d+)")
_SPLIT_DIRS = (("Train", "training"), ("Test", "testing"))
_FRAME_SUFFIXES = (".tif", ".tiff")
# Where the official archive may put the set below data.root (UCSD_Anomaly_Dataset.v1p2 is the tarball's top folder).
_ARCHIVE_TOP = "UCSD_Anomaly_Dataset.v1p2"

Clips = dict[str, np.ndarray]


def load_ucsd(
    variant: str, root: str | os.PathLike | None, cache_dir: str | None, image_size: int, progress: bool
) -> VideoClips:
    """Load UCSD ``variant`` ('ped1' or 'ped2') from an official-layout folder or a .npz under ``root``."""
    kind, path = _locate(variant, root)
    if kind == "npz":
        return load_npz(path, cache_dir, image_size, progress, hint=_hint(variant))
    return load_official(path, cache_dir, image_size, progress, hint=_hint(variant))


def load_ped1(root, cache_dir: str | None, image_size: int, progress: bool) -> VideoClips:
    """data=ucsd_ped1 (the registry's entry point, cutlab/core/data/video.py LOADERS)."""
    return load_ucsd("ped1", root, cache_dir, image_size, progress)


def load_ped2(root, cache_dir: str | None, image_size: int, progress: bool) -> VideoClips:
    """data=ucsd_ped2 (the registry's entry point, cutlab/core/data/video.py LOADERS)."""
    return load_ucsd("ped2", root, cache_dir, image_size, progress)


def _hint(variant: str) -> str:
    """The fix shown in every error: what data.root should point at."""
    return f"point data.root at the folder that holds UCSD{variant}/ or at {variant}_gray160_uint8.npz"


PED1_HINT, PED2_HINT = _hint("ped1"), _hint("ped2")  # each set's, for an unset root (video.py ROOT_HINTS)


def _locate(variant: str, root: str | os.PathLike | None) -> tuple[str, Path]:
    """Resolve data.root to ('npz', file) or ('official', the UCSDpedN folder)."""
    hint = _hint(variant)
    if root is None or not str(root).strip():
        raise root_not_set(f"ucsd_{variant}", hint)
    path = Path(root).expanduser()
    if not path.exists():
        raise CutlabError(f"data.root={path} does not exist; {hint}")
    if path.is_file():
        return "npz", path
    folder = f"UCSD{variant}"
    for candidate in (path / folder, path / _ARCHIVE_TOP / folder, path):
        if (candidate / "Train").is_dir() or (candidate / "Test").is_dir():
            _check_variant(candidate, variant, hint)
            return "official", candidate
    for candidate in (path / f"{variant}_gray160_uint8.npz", path / f"ucsd_{variant}" / f"{variant}_gray160_uint8.npz"):
        if candidate.is_file():
            return "npz", candidate
    raise CutlabError(
        f"data.root={path} {_describe_contents(path)}; expected {path}/{folder}/Train/Train001/001.tif ...; {hint}"
    )


def _check_variant(folder: Path, variant: str, hint: str) -> None:
    """Refuse e.g. a UCSDped1 folder when ucsd_ped2 was asked for: the sets differ in scene and size."""
    match = re.fullmatch(r"ucsd(ped\d)", folder.name, re.IGNORECASE)
    if match and match[1].lower() != variant:
        raise CutlabError(f"data.root={folder} is UCSD {match[1]} but the dataset is ucsd_{variant}; {hint}")


def _describe_contents(path: Path) -> str:
    """'is empty' or 'holds a, b, c ...': shows the user what the loader saw."""
    names = sorted(entry.name for entry in path.iterdir())
    if not names:
        return "is an empty folder"
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"does not have the UCSD layout (it holds {shown})"


# --------------------------------------------------------------------------- official .tif layout


def load_official(folder: Path, cache_dir: str | None, image_size: int, progress: bool, hint: str) -> VideoClips:
    """Decode every .tif (grayscale, bilinear resize), or load the cached result for unchanged files."""
    layout = scan_official(folder, hint)
    files = [frame for split in layout.values() for frames in split.values() for frame in frames]
    described = f"{folder.name} official layout at {folder}"
    target = None
    if cache_dir is not None:
        key = cache.cache_key(
            {
                "kind": "ucsd-official",
                "root": str(folder.resolve()),
                "files": cache.file_fingerprint(folder, files),
                "image_size": image_size,
            }
        )
        target = cache.cache_path(cache_dir, f"{folder.name.lower()}_tif{image_size}", key)
        cached = cache.load_clips(target, key, image_size)
        if cached is not None:
            return VideoClips(train=cached[0], test=cached[1], source=f"{described} (cached in {target})")
    train, test = _decode_layout(layout, folder.name, image_size, progress, hint)
    if target is not None:
        cache.save_clips(target, key, train, test)
        described += f" (cached in {target})"
    return VideoClips(train=train, test=test, source=described)


def scan_official(folder: Path, hint: str) -> dict[str, dict[str, list[Path]]]:
    """{'training'|'testing': {clip name: sorted frame files}}; TestNNN_gt mask folders never match."""
    layout: dict[str, dict[str, list[Path]]] = {}
    for split_dir, split in _SPLIT_DIRS:
        base = folder / split_dir
        if not base.is_dir():
            raise CutlabError(
                f"data.root: {base} is missing (the UCSD layout has Train/ and Test/ side by side); {hint}"
            )
        clips: dict[str, list[Path]] = {}
        for entry in sorted(base.iterdir()):
            match = re.fullmatch(rf"{split_dir}(\d+)", entry.name, re.IGNORECASE)
            if not match or not entry.is_dir():
                continue
            frames = sorted((f for f in entry.iterdir() if _is_frame(f)), key=_natural_key)
            if not frames:
                raise CutlabError(
                    f"data.root: clip folder {entry} holds no .tif frames; restore it from the UCSD archive or {hint}"
                )
            clips[f"{split}_{int(match[1]):02d}"] = frames
        if not clips:
            raise CutlabError(f"data.root: {base} holds no {split_dir}NNN clip folders; {hint}")
        layout[split] = clips
    return layout


def _is_frame(path: Path) -> bool:
    """A .tif frame, not a hidden/AppleDouble file (``._001.tif``) that archives sometimes carry."""
    return path.suffix.lower() in _FRAME_SUFFIXES and not path.name.startswith(".") and path.is_file()


def _natural_key(path: Path) -> tuple[int, str]:
    """Numeric order for 1.tif, 2.tif, ..., 10.tif as well as zero-padded 001.tif names."""
    return (int(path.stem), path.name) if path.stem.isdigit() else (1 << 62, path.name)


def _decode_layout(
    layout: dict[str, dict[str, list[Path]]], label: str, image_size: int, progress: bool, hint: str
) -> tuple[Clips, Clips]:
    """Decode all frames on a thread pool (PIL releases the GIL while decoding and resizing)."""
    jobs = [(split, name, frames) for split, clips in layout.items() for name, frames in clips.items()]
    total = sum(len(frames) for _, _, frames in jobs)
    meter = Meter(f"preprocessing {label}", total, "frame", enabled=progress)
    out: dict[str, Clips] = {"training": {}, "testing": {}}
    done = 0
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for split, name, frames in jobs:
            decoded = []
            for frame in pool.map(lambda p: decode_frame(p, image_size, hint), frames):
                decoded.append(frame)
                done += 1
                meter.update(done)
            out[split][name] = np.stack(decoded)
    meter.close()
    return out["training"], out["testing"]


def decode_frame(path: Path, image_size: int, hint: str = "") -> np.ndarray:
    """PIL open -> grayscale -> bilinear resize to image_size x image_size -> uint8 array."""
    try:
        with Image.open(path) as image:
            return grayscale_frame(image, image_size, path)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise CutlabError(
            f"data.root: cannot read frame {path} ({exc}); re-extract it from the UCSD archive or {hint}"
        ) from exc


# --------------------------------------------------------------------------- preprocessed .npz


def load_npz(path: Path, cache_dir: str | None, image_size: int, progress: bool, hint: str) -> VideoClips:
    """Read a training_NN/testing_NN .npz; a compressed or resized one is cached uncompressed when possible."""
    described = f"{path.name} at {path}"
    target = None
    if cache_dir is not None:
        # Keyed on the file's identity only, so a cache hit never opens the (slow, compressed) source.
        stat = path.stat()
        key = cache.cache_key(
            {
                "kind": "ucsd-npz",
                "root": str(path.resolve()),
                "files": [(path.name, stat.st_size, stat.st_mtime_ns)],
                "image_size": image_size,
            }
        )
        target = cache.cache_path(cache_dir, f"{path.stem.lower()}_{image_size}", key)
        cached = cache.load_clips(target, key, image_size)
        if cached is not None:
            return VideoClips(train=cached[0], test=cached[1], source=f"{described} (cached in {target})")
    # An uncompressed npz at the right size already loads at disk speed: a cached copy would only cost space.
    slow = _is_compressed(path, hint) or _stored_size(path, hint) != image_size
    train, test = _read_npz(path, image_size, progress and slow, hint)
    if target is not None and slow:
        cache.save_clips(target, key, train, test)
        described += f" (cached in {target})"
    return VideoClips(train=train, test=test, source=described)


def _is_compressed(path: Path, hint: str) -> bool:
    """True if any member is deflated; also the first check that the file is a zip (npz) at all."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist())
    except cache.NPZ_READ_ERRORS as exc:
        raise _npz_error(path, exc, hint) from exc


def _stored_size(path: Path, hint: str) -> int | None:
    """Frame side of the first training clip from its .npy header (no decompression of the data)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = sorted(n for n in archive.namelist() if _NPZ_KEY.fullmatch(n.removesuffix(".npy")))
            if not members:
                return None
            with archive.open(members[0]) as handle:
                version = np.lib.format.read_magic(handle)
                fmt = np.lib.format
                read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                shape, _, _ = read_header(handle)
    except cache.NPZ_READ_ERRORS as exc:
        raise _npz_error(path, exc, hint) from exc
    return shape[1] if len(shape) == 3 and shape[1] == shape[2] else None


def check_npz_layout(path: Path, hint: str) -> None:
    """That ``path`` is a zip (npz) holding training_NN and testing_NN arrays, from its directory alone (no array is
    read): what cutlab-reproduce checks of an input before it plans the grids that read it."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name.removesuffix(".npy") for name in archive.namelist()]
    except cache.NPZ_READ_ERRORS as exc:
        raise _npz_error(path, exc, hint) from exc
    _require_both_splits(path, sorted(k for k in names if _NPZ_KEY.fullmatch(k)), names, hint)


def _read_npz(path: Path, image_size: int, progress: bool, hint: str) -> tuple[Clips, Clips]:
    """Load, validate (uint8 [frames, H, W]) and, if needed, resize every training_/testing_ clip."""
    out: dict[str, Clips] = {"training": {}, "testing": {}}
    try:
        # Our own handle: np.load leaks the file it opened when the zip directory is unreadable.
        with open(path, "rb") as handle:
            archive = np.load(handle, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("it is a single .npy array, not an .npz archive")
            keys = sorted(k for k in archive.files if _NPZ_KEY.fullmatch(k))
            _require_both_splits(path, keys, archive.files, hint)
            meter = Meter(f"loading {path.name}", len(keys), "clip", enabled=progress)
            for done, key in enumerate(keys, start=1):
                clip = _check_npz_clip(path, key, archive[key], hint)
                out[_NPZ_KEY.fullmatch(key)[1]][key] = _resize_clip(clip, image_size)
                meter.update(done)
            meter.close()
    except cache.NPZ_READ_ERRORS as exc:
        raise _npz_error(path, exc, hint) from exc
    return out["training"], out["testing"]


def _require_both_splits(path: Path, keys: list[str], all_keys: list[str], hint: str) -> None:
    """Both training_NN and testing_NN keys must be present."""
    for split in ("training", "testing"):
        if not any(k.startswith(split) for k in keys):
            shown = ", ".join(sorted(all_keys)[:8]) or "nothing"
            raise CutlabError(
                f"data.root={path} has no {split}_NN arrays (it holds {shown}); expected keys training_01 ... "
                f"and testing_01 ...; {hint}"
            )


def _check_npz_clip(path: Path, key: str, clip: np.ndarray, hint: str) -> np.ndarray:
    """uint8 [frames>=1, H, W] or a CutlabError naming the key."""
    if clip.dtype != np.uint8 or clip.ndim != 3 or clip.shape[0] < 1:
        raise CutlabError(
            f"data.root={path}: array {key} is {clip.dtype} {clip.shape}, expected uint8 [frames, H, W] "
            f"grayscale; {hint}"
        )
    return clip


def _resize_clip(clip: np.ndarray, image_size: int) -> np.ndarray:
    """Bilinear-resize every frame with PIL (the same filter as the .tif path) unless already the size."""
    if clip.shape[1:] == (image_size, image_size):
        return clip
    frames = [Image.fromarray(frame).resize((image_size, image_size), Image.BILINEAR) for frame in clip]
    return np.stack([np.asarray(frame, dtype=np.uint8) for frame in frames])


def _npz_error(path: Path, exc: BaseException, hint: str) -> CutlabError:
    """Uniform message for unreadable archives."""
    return CutlabError(f"data.root={path} is not a readable .npz archive ({type(exc).__name__}: {exc}); {hint}")
