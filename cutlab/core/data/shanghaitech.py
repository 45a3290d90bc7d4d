"""ShanghaiTech Campus (Liu et al., CVPR 2018): 330 training videos and 107 testing clips given as frames.

Official layout: ``<root>/training/videos/01_001.avi ...`` and ``<root>/testing/frames/01_0014/000.jpg ...``
(the archive's top folder ``shanghaitech/`` may sit between; ``testing/test_frame_mask`` and other ground
truth are ignored). Clips are named ``training_01_001`` / ``testing_01_0014``.
"""

from __future__ import annotations

from pathlib import Path

from cutlab.core.data.clipfiles import describe, existing_folder, frame_files, load_layout, video_files
from cutlab.core.data.video import VideoClips
from cutlab.core.errors import CutlabError

_TRAIN, _TEST = Path("training", "videos"), Path("testing", "frames")
_ARCHIVE_TOPS = ("shanghaitech", "ShanghaiTech", "ShanghaiTech_Campus")
HINT = ("point data.root at the ShanghaiTech Campus folder holding training/videos/01_001.avi ... and "
        "testing/frames/01_0014/000.jpg ... (e.g. data.root=/data/shanghaitech)")


def load_shanghaitech(root, cache_dir: str | None, image_size: int, progress: bool) -> VideoClips:
    folder = _locate(existing_folder(root, "shanghaitech", HINT))
    videos = video_files(folder / _TRAIN)
    if not videos:
        raise CutlabError(f"data.root: {folder / _TRAIN} holds no video files ({describe(folder / _TRAIN)}); {HINT}")
    test = {}
    for clip in sorted(p for p in (folder / _TEST).iterdir() if p.is_dir() and not p.name.startswith(".")):
        frames = frame_files(clip)
        if not frames:
            raise CutlabError(f"data.root: test clip folder {clip} holds no .jpg frames; {HINT}")
        test[f"testing_{clip.name}"] = frames
    layout = {"training": {f"training_{video.stem}": video for video in videos}, "testing": test}
    return load_layout(layout, "shanghaitech", folder, cache_dir, image_size, progress, HINT)


def _locate(path: Path) -> Path:
    """The folder holding training/videos/ and testing/frames/: data.root itself or the archive's top folder."""
    for candidate in (path, *(path / top for top in _ARCHIVE_TOPS)):
        if (candidate / _TRAIN).is_dir() and (candidate / _TEST).is_dir():
            return candidate
    raise CutlabError(f"data.root={path} {describe(path)}, not the ShanghaiTech layout; {HINT}")
