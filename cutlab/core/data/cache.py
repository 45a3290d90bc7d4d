"""On-disk cache of preprocessed clips (and tokenized text: cutlab.core.data.token_cache): content-keyed, written
atomically, self-healing when corrupt.

A cache file is one *uncompressed* ``.npz`` (uint8 clips load at disk/page-cache speed, no inflate)
holding ``train__<clip>`` / ``test__<clip>`` arrays plus a ``__meta__`` JSON string that repeats the
full key, so a file can never be mistaken for another input's cache.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from cutlab.core.errors import CutlabError

# Bump whenever preprocessing changes (resize filter, naming, layout): old cache files then miss.
CACHE_VERSION = 1

# Everything a damaged or foreign .npz can raise while being opened or read.
NPZ_READ_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    zlib.error,
    ValueError,
    OSError,
    EOFError,
    KeyError,
    NotImplementedError,
)

_META_KEY = "__meta__"
_SPLITS = ("train", "test")


def file_fingerprint(base: Path, files: list[Path]) -> list[tuple[str, int, int]]:
    """Sorted (path relative to ``base``, size, mtime_ns) per file: changes whenever a file does."""
    rows = []
    for path in files:
        stat = path.stat()
        rows.append((path.relative_to(base).as_posix(), stat.st_size, stat.st_mtime_ns))
    return sorted(rows)


def data_files(root) -> dict | None:
    """How many files a ``data.root`` holds and a digest of their paths, sizes and modification times (the
    fingerprint above); None for data that is not a local file or folder. A run records it when it starts and
    compares it when resumed; cutlab-eval, with each evaluation."""
    path = Path(str(root)).expanduser() if root else None
    if path is None or not path.exists():
        return None
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    rows = file_fingerprint(path if path.is_dir() else path.parent, files)
    return {"files": len(rows), "digest": hashlib.sha1(json.dumps(rows).encode()).hexdigest()}


def cache_key(parts: dict) -> str:
    """Hex SHA-256 of a JSON-able description of the input (always includes CACHE_VERSION)."""
    payload = json.dumps({**parts, "cache_version": CACHE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def cache_path(cache_dir: str | os.PathLike, prefix: str, key: str) -> Path:
    """Where the cache file for ``key`` lives; the prefix only makes the folder readable to humans."""
    return Path(cache_dir).expanduser() / f"{prefix}_{key[:24]}.npz"


def save_clips(path: Path, key: str, train: dict[str, np.ndarray], test: dict[str, np.ndarray]) -> None:
    """Write clips to ``path`` atomically (save_arrays)."""
    save_arrays(path, key, {f"{split}__{name}": clip for split, clips in zip(_SPLITS, (train, test))
                            for name, clip in clips.items()})


def save_arrays(path: Path, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` and ``key`` to ``path`` atomically: a temp file in the same folder, fsync, then os.replace.

    A crash mid-write leaves at most a stray ``*.tmp`` file, never a truncated cache under the real name.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        in_the_way = exc.errno in (errno.EEXIST, errno.ENOTDIR)  # mkdir met a file of the folder's name
        reason = "a file is in its way" if in_the_way else os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise CutlabError(
            f"the data cache folder {path.parent} cannot be written ({reason}); point CUTLAB_CACHE_DIR (or "
            "paths.cache_dir) at a writable folder, or give paths.cache_dir=null to read the data without a cache"
        ) from exc
    arrays = {**arrays, _META_KEY: np.array(json.dumps({"key": key}))}
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def load_clips(path: Path, key: str, image_size: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """Read a cache file; None when absent. A corrupt or mismatching file is deleted with a warning."""
    if not path.is_file():
        return None
    try:
        return _read_checked(path, key, image_size)
    except NPZ_READ_ERRORS as exc:
        warnings.warn(f"discarding corrupt video cache {path} ({exc!r}); rebuilding it", stacklevel=3)
        path.unlink(missing_ok=True)
        return None


def load_arrays(path: Path, key: str, what: str) -> dict[str, np.ndarray] | None:
    """The arrays a ``save_arrays`` file holds for ``key``; None when absent. A corrupt file, or one of another key,
    is deleted with a warning naming ``what`` it cached."""
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
            if _META_KEY not in archive.files or json.loads(str(archive[_META_KEY])).get("key") != key:
                raise ValueError("cache key mismatch")
            return {name: archive[name] for name in archive.files if name != _META_KEY}
    except NPZ_READ_ERRORS as exc:
        warnings.warn(f"discarding corrupt {what} cache {path} ({exc!r}); rebuilding it", stacklevel=3)
        path.unlink(missing_ok=True)
        return None


def _read_checked(path: Path, key: str, image_size: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Load every array and verify key, dtype and shape; raises ValueError on any mismatch."""
    train: dict[str, np.ndarray] = {}
    test: dict[str, np.ndarray] = {}
    # Our own handle: np.load leaks the file it opened when the zip directory is unreadable.
    with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
        if _META_KEY not in archive.files or json.loads(str(archive[_META_KEY])).get("key") != key:
            raise ValueError("cache key mismatch")
        for name in archive.files:
            if name == _META_KEY:
                continue
            split, _, clip_name = name.partition("__")
            clip = archive[name]
            square = clip.ndim == 3 and clip.shape[1:] == (image_size, image_size)
            if split not in _SPLITS or clip.dtype != np.uint8 or not square:
                raise ValueError(f"unexpected cache entry {name} {clip.dtype} {clip.shape}")
            (train if split == "train" else test)[clip_name] = clip
    if not train or not test:
        raise ValueError("cache holds no train or no test clips")
    return train, test
