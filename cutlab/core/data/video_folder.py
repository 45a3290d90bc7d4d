"""Your own footage: a folder of video files and/or frame folders, or an .npz (data=video_folder, data.root=...).

Two folder layouts are read:

- split:  ``<root>/train/`` and ``<root>/test/`` (or ``training/`` and ``testing/``), each holding clips;
- flat:   clips directly in ``<root>``; the last ``data.test_clips`` of them (sorted by name) are the test split.

A clip is a video file (.avi, .mp4, .mov, .mkv, ...) or a folder of frame images (.jpg, .png, .tif, ...,
read in natural order: 2.jpg before 10.jpg). Clips are named ``training_<name>`` / ``testing_<name>``.

An .npz in UCSD's npz layout (arrays ``training_NN`` / ``testing_NN``, uint8 [frames, H, W]) is read by the Ped2
reader (cutlab/core/data/ucsd.py load_npz): footage already preprocessed is trained on without posing as Ped2.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cutlab.core.data.clipfiles import (
    FRAME_SUFFIXES,
    VIDEO_SUFFIXES,
    ClipSource,
    describe,
    existing_folder,
    frame_files,
    load_layout,
    natural_key,
    video_files,
)
from cutlab.core.data.ucsd import load_npz
from cutlab.core.data.video import VideoClips
from cutlab.core.errors import CutlabError

_SPLIT_NAMES = (("train", "test"), ("training", "testing"))
HINT = (f"point data.root at a folder of clips (video files {', '.join(VIDEO_SUFFIXES[:4])}, ... or folders of "
        f"{', '.join(FRAME_SUFFIXES[:3])}, ... frames), either split as <root>/train/ and <root>/test/ or flat in "
        "<root> with the last data.test_clips clips held out for testing; or at an .npz of uint8 [frames, H, W] "
        "arrays named training_01 ... and testing_01 ...")


def load_video_folder(root, cache_dir: str | None, image_size: int, progress: bool, test_clips: int = 1) -> VideoClips:
    given = Path(str(root)).expanduser() if root is not None else None
    if given is not None and given.is_file():  # an .npz: its keys are its split
        return load_npz(given, cache_dir, image_size, progress, HINT)
    folder = existing_folder(root, "video_folder", HINT)
    for train_name, test_name in _SPLIT_NAMES:
        if (folder / train_name).is_dir() and (folder / test_name).is_dir():
            layout = {"training": _prefixed("training", find_clips(folder / train_name)),
                      "testing": _prefixed("testing", find_clips(folder / test_name))}
            break
    else:
        clips = find_clips(folder)
        if len(clips) < 2:
            raise CutlabError(f"data.root: {folder} holds one clip ({next(iter(clips))}), and a flat folder needs at "
                              "least three: one to train on, data.val_clips held out for validation and "
                              "data.test_clips for testing; add clips, or split them into train/ and test/")
        if isinstance(test_clips, bool) or not isinstance(test_clips, int) or not 1 <= test_clips < len(clips):
            raise CutlabError(
                f"data.test_clips={test_clips!r} must be an integer in [1, {len(clips) - 1}] for the {len(clips)} clips "
                f"in {folder} (at least one clip must stay for training); or split them into train/ and test/"
            )
        names = sorted(clips, key=lambda name: natural_key(Path(name)))
        held = set(names[len(names) - test_clips :])
        layout = {"training": _prefixed("training", {n: clips[n] for n in names if n not in held}),
                  "testing": _prefixed("testing", {n: clips[n] for n in names if n in held})}
    return load_layout(layout, "video_folder", folder, cache_dir, image_size, progress, HINT)


def find_clips(folder: Path) -> dict[str, ClipSource]:
    """{clip name: video file or sorted frame files} for every clip directly in ``folder``."""
    clips: dict[str, ClipSource] = {}
    for video in video_files(folder):
        if video.stem in clips:  # a.avi and a.mp4: one would silently replace the other
            raise CutlabError(f"data.root: {clips[video.stem].name} and {video.name} both name clip {video.stem!r} in "
                              f"{folder}; rename or remove one")
        clips[video.stem] = video
    skipped = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        frames = frame_files(sub)
        if frames:
            if sub.name in clips:
                raise CutlabError(f"data.root: {sub} and a video file both name clip {sub.name!r} in {folder}; rename one")
            clips[sub.name] = frames
        else:
            skipped.append(sub.name)
    loose = frame_files(folder)
    if loose:  # frames beside the clips are no clip of their own: said, or the clips counted look too few
        print(f"[cutlab] data.root: skipped {len(loose)} frame image(s) lying directly in {folder}: a clip's frames go "
              "in a folder of their own (one folder a clip)", file=sys.stderr)
    if not clips:
        raise CutlabError(f"data.root: {folder} has no video files or frame folders (it {describe(folder)}); {HINT}")
    if skipped:  # said, since in a flat folder they would change which clips are held out if they counted
        print(f"[cutlab] data.root: skipped {len(skipped)} folder(s) of {folder} without frame images "
              f"({', '.join(skipped)}): a clip is a video file or a folder of frames", file=sys.stderr)
    return clips


def _prefixed(split: str, clips: dict[str, ClipSource]) -> dict[str, ClipSource]:
    return {f"{split}_{name}": source for name, source in clips.items()}
