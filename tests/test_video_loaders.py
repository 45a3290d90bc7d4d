"""Avenue, ShanghaiTech and video_folder loaders on fixtures written in each set's real layout and codecs.

The real sets cannot be had on these machines, so each test writes a small copy in the official on-disk
layout (Avenue: 640x360 XVID .avi; ShanghaiTech: 856x480 .avi training videos and .jpg test frames) with
PyAV and Pillow, and checks names, shapes and pixels against the preprocessing applied to the frames written.
UCSD Ped1 is covered by tests/test_video_data.py::test_ped1_shaped_frames_load_as_160 (238x158 .tif).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from helpers.cli import cutlab

from cutlab.core.data.video import DATASETS, load_video_clips
from cutlab.errors import CutlabError


def make_frames(count: int, width: int, height: int, seed: int) -> list[np.ndarray]:
    """RGB frames: a colour gradient with a bright square moving down (smooth content the codecs keep well)."""
    rng = np.random.default_rng(seed)
    base = np.zeros((height, width, 3), np.uint8)
    base[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)[None]
    base[..., 1] = np.linspace(40, 200, height, dtype=np.uint8)[:, None]
    base[..., 2] = rng.integers(60, 120)
    frames = []
    for i in range(count):
        frame = base.copy()
        top = height // 8 + i * height // 30
        frame[top : top + height // 4, width // 5 : width // 5 + height // 4] = 255
        frames.append(frame)
    return frames


def write_video(path: Path, frames: list[np.ndarray], codec: str = "mpeg4") -> Path:
    """An .avi (or .mp4) as the real sets ship them: MPEG-4 Part 2 tagged XVID, or MJPEG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=25)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        stream.options = {"qscale": "2"}  # high quality, so decoded pixels stay close to the frames written
        if codec == "mpeg4" and path.suffix == ".avi":
            stream.codec_context.codec_tag = "XVID"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path


def write_jpgs(folder: Path, frames: list[np.ndarray], name=lambda i: f"{i:03d}.jpg") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name(i) for i in range(len(frames))]
    for path, frame in zip(paths, frames):
        Image.fromarray(frame).save(path, quality=95)
    return paths


def preprocessed(frames: list[np.ndarray], size: int = 160) -> np.ndarray:
    """What the loaders must produce: PIL grayscale, bilinear resize, uint8 (the UCSD preprocessing)."""
    return np.stack([np.asarray(Image.fromarray(f).convert("L").resize((size, size), Image.BILINEAR)) for f in frames])


def assert_close_to(decoded: np.ndarray, expected: np.ndarray, tolerance: float = 3.0) -> None:
    """Lossy codecs: shape and dtype exact, pixels within a few grey levels on average."""
    assert decoded.dtype == np.uint8 and decoded.shape == expected.shape
    error = np.abs(decoded.astype(float) - expected.astype(float)).mean()
    assert error < tolerance, f"mean absolute error {error:.2f} grey levels"


def test_registry_lists_every_set():
    assert DATASETS == ("synthetic", "ucsd_ped2", "ucsd_ped1", "avenue", "shanghaitech", "video_folder")


@pytest.fixture
def avenue_root(tmp_path) -> tuple[Path, dict[str, list[np.ndarray]]]:
    """<tmp>/Avenue Dataset/{training,testing}_videos/NN.avi, 640x360 XVID like the release."""
    top = tmp_path / "Avenue Dataset"
    written = {}
    for split, count in (("training", 2), ("testing", 1)):
        for number in range(1, count + 1):
            frames = make_frames(5 + number, 640, 360, seed=number)
            write_video(top / f"{split}_videos" / f"{number:02d}.avi", frames)
            written[f"{split}_{number:02d}"] = frames
    (top / "testing_vol").mkdir()  # ground-truth folders of the release sit beside the videos
    return tmp_path, written


def test_avenue_decodes_the_official_layout_and_caches_it(avenue_root, tmp_path):
    root, written = avenue_root
    clips = load_video_clips("avenue", str(root), cache_dir=str(tmp_path / "cache"), progress=False)
    assert sorted(clips.train) == ["training_01", "training_02"] and sorted(clips.test) == ["testing_01"]
    for name, clip in {**clips.train, **clips.test}.items():
        assert_close_to(clip, preprocessed(written[name]))
    again = load_video_clips("avenue", str(root / "Avenue Dataset"), cache_dir=str(tmp_path / "cache"), progress=False)
    assert "cached" in again.source
    for name in clips.train:
        np.testing.assert_array_equal(again.train[name], clips.train[name])


def test_shanghaitech_reads_training_videos_and_test_frame_folders_in_order(tmp_path):
    top = tmp_path / "shanghaitech"
    train_frames = {name: make_frames(4, 856, 480, seed=i) for i, name in enumerate(("01_001", "01_002"))}
    for name, frames in train_frames.items():
        write_video(top / "training" / "videos" / f"{name}.avi", frames, codec="mjpeg")
    test_frames = make_frames(12, 856, 480, seed=7)  # 12 frames: 010.jpg must come after 009.jpg, not after 001.jpg
    paths = write_jpgs(top / "testing" / "frames" / "01_0014", test_frames, name=lambda i: f"{i}.jpg")
    (top / "testing" / "test_frame_mask").mkdir()
    np.save(top / "testing" / "test_frame_mask" / "01_0014.npy", np.zeros(12, np.uint8))
    clips = load_video_clips("shanghaitech", str(tmp_path), cache_dir=None, progress=False)
    assert sorted(clips.train) == ["training_01_001", "training_01_002"] and list(clips.test) == ["testing_01_0014"]
    for name, frames in train_frames.items():
        assert_close_to(clips.train[f"training_{name}"], preprocessed(frames))
    # .jpg frames go through exactly the UCSD preprocessing, in natural order
    from_files = np.stack([np.asarray(Image.open(p).convert("L").resize((160, 160), Image.BILINEAR)) for p in paths])
    np.testing.assert_array_equal(clips.test["testing_01_0014"], from_files)


def test_video_folder_split_layout_mixes_videos_and_frame_folders(tmp_path):
    root = tmp_path / "mine"
    a, b, c = (make_frames(n, 320, 240, seed=n) for n in (6, 7, 11))
    write_video(root / "train" / "street.mp4", a)
    write_jpgs(root / "train" / "lobby", b, name=lambda i: f"frame{i}.png")
    write_jpgs(root / "test" / "night", c, name=lambda i: f"{i}.png")
    clips = load_video_clips("video_folder", str(root), cache_dir=None, image_size=64, progress=False)
    assert sorted(clips.train) == ["training_lobby", "training_street"] and list(clips.test) == ["testing_night"]
    assert_close_to(clips.train["training_street"], preprocessed(a, 64))
    np.testing.assert_array_equal(clips.train["training_lobby"], preprocessed(b, 64))  # png: lossless
    np.testing.assert_array_equal(clips.test["testing_night"], preprocessed(c, 64))  # 10.png after 9.png


def test_video_folder_flat_layout_holds_out_the_last_clips(tmp_path):
    root = tmp_path / "flat"
    for number in (1, 2, 10):  # natural order: cam10 is the last clip, not cam2
        write_video(root / f"cam{number}.avi", make_frames(3, 160, 120, seed=number), codec="mjpeg")
    clips = load_video_clips("video_folder", str(root), cache_dir=None, progress=False, test_clips=1)
    assert sorted(clips.train) == ["training_cam1", "training_cam2"] and list(clips.test) == ["testing_cam10"]
    with pytest.raises(CutlabError, match=r"data.test_clips=3 must be an integer in \[1, 2\]"):
        load_video_clips("video_folder", str(root), cache_dir=None, progress=False, test_clips=3)
    for video in ("cam2.avi", "cam10.avi"):  # one clip left: nothing to hold out ("an integer in [1, 0]" before)
        (root / video).unlink()
    with pytest.raises(CutlabError, match=r"holds one clip \(cam1\), and a flat folder needs at least three"):
        load_video_clips("video_folder", str(root), cache_dir=None, progress=False, test_clips=1)


def test_video_folder_says_which_folders_it_skips_as_holding_no_frames(tmp_path, capsys):
    """An empty clip folder, or one holding a video file, was skipped without a word: in a flat folder that changes
    which clip is held out for testing."""
    root = tmp_path / "flat"
    for number in (1, 2):
        write_jpgs(root / f"cam{number}", make_frames(3, 64, 48, seed=number), name=lambda i: f"{i}.png")
    (root / "empty").mkdir()
    write_video(root / "nested" / "cam3.avi", make_frames(3, 160, 120, seed=3), codec="mjpeg")
    clips = load_video_clips("video_folder", str(root), cache_dir=None, image_size=32, progress=False, test_clips=1)
    assert sorted(clips.train) == ["training_cam1"] and list(clips.test) == ["testing_cam2"]
    assert capsys.readouterr().err.splitlines() == [
        f"[cutlab] data.root: skipped 2 folder(s) of {root} without frame images (empty, nested): a clip is a video "
        "file or a folder of frames"]


def test_video_folder_says_it_skips_frames_lying_directly_in_its_root(tmp_path, capsys):
    """Frames beside the clips were ignored without a word, and the next line counted the clips as too few."""
    root = tmp_path / "flat"
    write_jpgs(root, make_frames(3, 64, 48, seed=1), name=lambda i: f"{i}.png")
    write_jpgs(root / "cam1", make_frames(3, 64, 48, seed=2), name=lambda i: f"{i}.png")
    with pytest.raises(CutlabError, match=r"holds one clip \(cam1\), and a flat folder needs at least three"):
        load_video_clips("video_folder", str(root), cache_dir=None, image_size=32, progress=False, test_clips=1)
    assert capsys.readouterr().err.splitlines() == [
        f"[cutlab] data.root: skipped 3 frame image(s) lying directly in {root}: a clip's frames go in a folder of "
        "their own (one folder a clip)"]


def test_video_folder_reads_your_own_npz_in_ucsds_layout(tmp_path):
    """data=video_folder data.root=mine.npz: "is not an existing folder" though the file was there, so the only route
    was data=ucsd_ped2, and the report compared one's own footage with the paper's Ped2 numbers."""
    clips = {f"{split}_{n:02d}": np.random.default_rng(n).integers(0, 256, (5, 48, 48), dtype=np.uint8)
             for split, count in (("training", 2), ("testing", 1)) for n in range(1, count + 1)}
    np.savez(tmp_path / "mine.npz", **clips)
    loaded = load_video_clips("video_folder", str(tmp_path / "mine.npz"), cache_dir=None, image_size=48, progress=False)
    assert sorted(loaded.train) == ["training_01", "training_02"] and list(loaded.test) == ["testing_01"]
    np.testing.assert_array_equal(loaded.test["testing_01"], clips["testing_01"])
    np.savez(tmp_path / "other.npz", clip=clips["testing_01"])  # the keys name the split: other keys say so
    with pytest.raises(CutlabError, match=r"other.npz has no training_NN arrays \(it holds clip\).*or at an .npz"):
        load_video_clips("video_folder", str(tmp_path / "other.npz"), cache_dir=None, progress=False)


def test_validation_is_held_out_in_the_same_natural_order_as_the_test_clips():
    from cutlab.core.data.video import split_validation

    clips = {f"training_clip{number}": np.zeros(1) for number in range(1, 13)}
    train, val = split_validation(clips, 2)  # by string order it was clip8 and clip9, keeping clip10 to clip12
    assert sorted(val) == ["training_clip11", "training_clip12"] and len(train) == 10


def test_two_videos_of_one_name_are_refused_instead_of_one_replacing_the_other(tmp_path):
    root = tmp_path / "flat"
    for name in ("cam1.avi", "cam1.mp4", "cam2.avi"):
        write_video(root / name, make_frames(3, 160, 120, seed=len(name)), codec="mjpeg")
    with pytest.raises(CutlabError, match=r"cam1.avi and cam1.mp4 both name clip 'cam1'"):
        load_video_clips("video_folder", str(root), cache_dir=None, progress=False, test_clips=1)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("avenue", "training_videos/01.avi ... and testing_videos/01.avi"),
        ("shanghaitech", "training/videos/01_001.avi ... and testing/frames/01_0014/000.jpg"),
        ("video_folder", "no video files or frame folders"),
    ],
)
def test_a_wrong_layout_names_the_expected_one(tmp_path, name, expected):
    (tmp_path / "videos").mkdir()
    (tmp_path / "notes.txt").write_text("not a dataset")
    with pytest.raises(CutlabError, match="data.root") as error:
        load_video_clips(name, str(tmp_path), cache_dir=None, progress=False)
    assert expected in str(error.value) and "notes.txt" in str(error.value)  # says what it saw, too
    with pytest.raises(CutlabError, match="data.root is not set"):
        load_video_clips(name, None, cache_dir=None, progress=False)
    with pytest.raises(CutlabError, match="is not an existing folder"):
        load_video_clips(name, str(tmp_path / "absent"), cache_dir=None, progress=False)


@pytest.mark.parametrize(
    "samples, mode",
    [(lambda gray: gray.astype(np.uint16) * 257, "I;16"), (lambda gray: gray.astype(np.float32) / 255, "F"),
     (lambda gray: gray.astype(np.int32) * 257, "I")],
    ids=["16-bit", "float", "32-bit-integer"],
)
@pytest.mark.parametrize("dataset", ["video_folder", "ucsd_ped2"])
def test_frames_wider_than_8_bit_are_refused_not_read_as_a_blank_video(tmp_path, samples, mode, dataset):
    """PIL's convert("L") clips 16-bit and float samples to 255 or 0: footage read that way trained to a verdict."""
    gray = [frame.mean(axis=2).astype(np.uint8) for frame in make_frames(3, 64, 48, seed=1)]
    if dataset == "video_folder":
        root = tmp_path / "mine"
        folders = [root / "train" / "lobby", root / "test" / "night"]
    else:
        root = tmp_path / "UCSDped2"
        folders = [root / "Train" / "Train001", root / "Test" / "Test001"]
    for folder in folders:
        folder.mkdir(parents=True)
        for index, frame in enumerate(gray):
            Image.fromarray(samples(frame)).save(folder / f"{index:03d}.tif")
    assert Image.open(folders[0] / "000.tif").mode == mode
    with pytest.raises(CutlabError, match=rf"000\.tif has .* samples \(PIL mode {re.escape(mode)}\).*save the frames as 8-bit"):
        load_video_clips(dataset, str(root), cache_dir=None, image_size=32, progress=False)


def test_a_corrupt_or_empty_video_names_the_file(avenue_root):
    root, _ = avenue_root
    broken = root / "Avenue Dataset" / "testing_videos" / "01.avi"
    broken.write_bytes(np.random.default_rng(0).bytes(2000))
    with pytest.raises(CutlabError, match=r"cannot decode video .*01\.avi"):
        load_video_clips("avenue", str(root), cache_dir=None, progress=False)
    for video in (root / "Avenue Dataset" / "testing_videos").iterdir():
        video.unlink()
    with pytest.raises(CutlabError, match="testing_videos holds no video files"):
        load_video_clips("avenue", str(root), cache_dir=None, progress=False)


def test_cli_trains_on_a_folder_of_your_own_videos(tmp_path):
    """python -m cutlab data=video_folder data.root=...: the whole path from .avi files to a run record."""
    root = tmp_path / "footage"
    for number in (1, 2, 3):
        write_video(root / f"clip{number}.avi", make_frames(6, 320, 240, seed=number))
    args = ["model=ut", "data=video_folder", f"data.root={root}", "data.image_size=64", "data.frames=3",
            "data.stride=3", "L=1", "train.epochs=1", "wandb.mode=disabled", "eval.gamma_test=[0]"]
    cutlab(args, tmp_path / "runs", timeout=300)
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["status"] == "complete" and "video_folder" in summary["data_source"]
    for name in ("avenue", "shanghaitech", "video_folder", "ucsd_ped1"):  # none ships here: root must be given
        missing = cutlab([f"data={name}", "wandb.mode=disabled"], tmp_path / "runs", timeout=300, check=False)
        assert missing.returncode == 2, missing.stderr[-2000:]
        assert missing.stderr.strip().splitlines()[-1].startswith(f"cutlab: error: data.root is not set but {name}")


def test_the_config_checks_refuse_an_unset_root_in_the_loaders_words(tmp_path):
    """A set read from files with data.root unset (avenue, shanghaitech, ucsd_ped1, video_folder: null until given)
    passed the config checks and met its loader's line only as the task was built, after the run had begun: the
    checks now refuse it first, in the same words. A root of the default data folder (ucsd_ped2), or no file to read
    (synthetic), passes as before."""
    from cutlab.config.checks import check_config
    from cutlab.config.compose import compose_run_config

    for name in ("avenue", "shanghaitech", "ucsd_ped1", "video_folder", "ucsd_ped2"):
        with pytest.raises(CutlabError) as loader:
            load_video_clips(name, None, cache_dir=None, progress=False)
        with pytest.raises(CutlabError) as checks:
            check_config(compose_run_config([f"data={name}", "data.root=null"]), folders=False)
        assert str(checks.value) == str(loader.value)
    for name in ("ucsd_ped2", "synthetic"):
        check_config(compose_run_config([f"data={name}"]))
    run = cutlab(["data=avenue", "wandb.mode=disabled"], tmp_path / "runs", check=False)
    with pytest.raises(CutlabError) as loader:
        load_video_clips("avenue", None, cache_dir=None, progress=False)
    # one line, before the run announced its record folder
    assert run.returncode == 2 and run.stderr.splitlines() == [f"cutlab: error: {loader.value}"], run.stderr[-2000:]
