"""CUHK Avenue (Lu, Shi & Jia, ICCV 2013): 16 training and 21 testing .avi videos (640x360, 25 fps).

Official layout: ``<root>/training_videos/01.avi ...`` and ``<root>/testing_videos/01.avi ...`` (the archive's
top folder ``Avenue Dataset/`` may sit between). Clips are named ``training_01`` / ``testing_01``.
"""

from __future__ import annotations

from pathlib import Path

from cutlab.core.data.clipfiles import describe, existing_folder, load_layout, video_files
from cutlab.core.data.video import VideoClips
from cutlab.core.errors import CutlabError

_SPLITS = (("training_videos", "training"), ("testing_videos", "testing"))
_ARCHIVE_TOPS = ("Avenue Dataset", "Avenue_Dataset", "avenue")
HINT = ("point data.root at the CUHK Avenue folder holding training_videos/01.avi ... and testing_videos/01.avi ... "
        "(e.g. data.root='/data/Avenue Dataset')")


def load_avenue(root, cache_dir: str | None, image_size: int, progress: bool) -> VideoClips:
    folder = _locate(existing_folder(root, "avenue", HINT))
    layout = {}
    for folder_name, split in _SPLITS:
        videos = video_files(folder / folder_name)
        if not videos:
            raise CutlabError(f"data.root: {folder / folder_name} holds no video files ({describe(folder / folder_name)}); {HINT}")
        layout[split] = {f"{split}_{video.stem}": video for video in videos}
    return load_layout(layout, "avenue", folder, cache_dir, image_size, progress, HINT)


def _locate(path: Path) -> Path:
    """The folder holding training_videos/ and testing_videos/: data.root itself or the archive's top folder."""
    for candidate in (path, *(path / top for top in _ARCHIVE_TOPS)):
        if all((candidate / name).is_dir() for name, _ in _SPLITS):
            return candidate
    raise CutlabError(f"data.root={path} {describe(path)}, not the Avenue layout; {HINT}")
