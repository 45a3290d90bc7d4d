"""Data: video (UCSD Ped1/Ped2, Avenue, ShanghaiTech, folders, a synthetic set, caching, frame windows, patch
tokens), text classification (IMDb, MNLI) and instruction data (Alpaca). The video names are re-exported here."""

from cutlab.core.data.cache import CACHE_VERSION
from cutlab.core.data.synthetic import make_synthetic_clips
from cutlab.core.data.video import (
    DATASETS,
    FrameWindows,
    VideoClips,
    from_patch_tokens,
    load_video_clips,
    pixel_std,
    split_validation,
    to_patch_tokens,
)

__all__ = [
    "CACHE_VERSION",
    "DATASETS",
    "FrameWindows",
    "VideoClips",
    "from_patch_tokens",
    "load_video_clips",
    "make_synthetic_clips",
    "pixel_std",
    "split_validation",
    "to_patch_tokens",
]
