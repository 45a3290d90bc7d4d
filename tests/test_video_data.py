"""Video data layer: UCSD readers (npz and official .tif layout), cache, windows, patch tokens, sigma_x, synthetic."""

from __future__ import annotations

import os
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import PED2_TINY, require_shared
from cutlab.core.data import (
    FrameWindows,
    from_patch_tokens,
    load_video_clips,
    make_synthetic_clips,
    pixel_std,
    split_validation,
    to_patch_tokens,
)
from cutlab.errors import CutlabError

TINY_NPZ = PED2_TINY


@pytest.fixture
def _tiny_npz() -> None:
    require_shared(TINY_NPZ)  # skips here, fails under CI=true, when ../shared is absent


needs_shared = pytest.mark.usefixtures("_tiny_npz")


def tiny_arrays() -> dict[str, np.ndarray]:
    """The 3 real 8-frame Ped2 clips, straight from numpy."""
    with np.load(TINY_NPZ) as archive:
        return {key: archive[key] for key in archive.files}


def corrupt_keeping_stat(path: Path) -> None:
    """Overwrite a file with garbage of the same size and restore its mtime: the cache key cannot tell."""
    stat = path.stat()
    path.write_bytes(b"\x00garbage" * (stat.st_size // 8) + b"\x00" * (stat.st_size % 8))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def write_official_layout(root: Path, variant: str, clips: dict[str, np.ndarray], size_wh: tuple[int, int]) -> Path:
    """UCSD<variant>/Train/TrainNNN/NNN.tif and Test/TestNNN (+ TestNNN_gt masks) from uint8 clips."""
    folder = root / f"UCSD{variant}"
    counters = {"training": 0, "testing": 0}
    for name in sorted(clips):
        split = name.split("_")[0]
        counters[split] += 1
        split_dir, prefix = ("Train", "Train") if split == "training" else ("Test", "Test")
        clip_dir = folder / split_dir / f"{prefix}{counters[split]:03d}"
        clip_dir.mkdir(parents=True)
        for t, frame in enumerate(clips[name], start=1):
            Image.fromarray(frame).resize(size_wh, Image.BILINEAR).save(clip_dir / f"{t:03d}.tif")
        if split == "testing":  # ground-truth masks: a different frame count and format, must be skipped
            gt_dir = clip_dir.parent / f"{clip_dir.name}_gt"
            gt_dir.mkdir()
            for t in range(1, 4):
                Image.fromarray(np.full(size_wh[::-1], 255, np.uint8)).save(gt_dir / f"{t:03d}.bmp")
    return folder


def expected_from_tifs(clip_dir: Path, size: int = 160) -> np.ndarray:
    """PIL's own decode + bilinear resize of every .tif in a clip folder: the reference result."""
    frames = sorted(clip_dir.glob("*.tif"))
    return np.stack([np.asarray(Image.open(f).convert("L").resize((size, size), Image.BILINEAR)) for f in frames])


# --------------------------------------------------------------------------- real tiny npz


@needs_shared
def test_tiny_real_npz_loads_names_shapes_dtype():
    clips = load_video_clips("ucsd_ped2", str(TINY_NPZ), cache_dir=None, progress=False)
    reference = tiny_arrays()
    assert list(clips.train) == ["training_01", "training_02"]
    assert list(clips.test) == ["testing_01"]
    for name, clip in {**clips.train, **clips.test}.items():
        assert clip.dtype == np.uint8 and clip.shape == (8, 160, 160)
        np.testing.assert_array_equal(clip, reference[name])
    assert "ped2_gray160_tiny.npz" in clips.source


@needs_shared
def test_a_cache_folder_that_cannot_be_made_names_the_setting_that_moves_or_drops_it(tmp_path):
    source = tmp_path / "ped2.npz"
    shutil.copyfile(TINY_NPZ, source)
    in_the_way = tmp_path / "cache"
    in_the_way.write_text("")  # once "data.cache_dir=... ([Errno 17] File exists: ...)": a key cutlab does not have
    with pytest.raises(CutlabError) as refused:
        load_video_clips("ucsd_ped2", str(source), str(in_the_way), progress=False)
    assert str(refused.value) == (f"the data cache folder {in_the_way} cannot be written (a file is in its way); point "
                                  "CUTLAB_CACHE_DIR (or paths.cache_dir) at a writable folder, or give "
                                  "paths.cache_dir=null to read the data without a cache")


@needs_shared
def test_compressed_npz_is_cached_uncompressed_and_served_from_cache(tmp_path):
    source = tmp_path / "ped2.npz"
    shutil.copyfile(TINY_NPZ, source)
    cache_dir = tmp_path / "cache"
    first = load_video_clips("ucsd_ped2", str(source), str(cache_dir), progress=False)
    (cached,) = list(cache_dir.iterdir())
    with zipfile.ZipFile(cached) as archive:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
    corrupt_keeping_stat(source)  # a second load that touched the npz would now fail
    second = load_video_clips("ucsd_ped2", str(source), str(cache_dir), progress=False)
    for name in first.train:
        np.testing.assert_array_equal(second.train[name], first.train[name])
    np.testing.assert_array_equal(second.test["testing_01"], first.test["testing_01"])
    assert str(cached) in second.source


@needs_shared
def test_npz_resized_to_other_image_size_matches_pil(tmp_path):
    clips = load_video_clips("ucsd_ped2", str(TINY_NPZ), str(tmp_path), image_size=80, progress=False)
    frame = tiny_arrays()["training_02"][5]
    expected = np.asarray(Image.fromarray(frame).resize((80, 80), Image.BILINEAR))
    assert clips.train["training_02"].shape == (8, 80, 80)
    np.testing.assert_array_equal(clips.train["training_02"][5], expected)
    assert len(list(tmp_path.glob("*.npz"))) == 1


# --------------------------------------------------------------------------- official .tif layout


@needs_shared
def test_official_layout_decodes_exactly_skips_gt_and_second_call_uses_cache(tmp_path):
    folder = write_official_layout(tmp_path / "data", "ped2", tiny_arrays(), size_wh=(360, 240))
    cache_dir = tmp_path / "cache"
    first = load_video_clips("ucsd_ped2", str(tmp_path / "data"), str(cache_dir), progress=False)

    assert list(first.train) == ["training_01", "training_02"] and list(first.test) == ["testing_01"]
    np.testing.assert_array_equal(first.train["training_02"], expected_from_tifs(folder / "Train" / "Train002"))
    np.testing.assert_array_equal(first.test["testing_01"], expected_from_tifs(folder / "Test" / "Test001"))
    assert first.test["testing_01"].shape == (8, 160, 160)  # 8 frames, not the 3 masks of Test001_gt

    (cached,) = list(cache_dir.iterdir())
    cached_mtime = cached.stat().st_mtime_ns
    tifs = sorted(folder.rglob("*.tif"))
    for tif in tifs:  # same size and mtime, so the same cache key, but undecodable
        corrupt_keeping_stat(tif)
    second = load_video_clips("ucsd_ped2", str(folder), str(cache_dir), progress=False)  # root = UCSDped2 itself
    for name in first.train:
        np.testing.assert_array_equal(second.train[name], first.train[name])
    assert list(cache_dir.iterdir()) == [cached] and cached.stat().st_mtime_ns == cached_mtime

    # A changed file (new mtime) changes the key: the loader decodes again and reports the broken frame.
    os.utime(tifs[0], ns=(time.time_ns(), time.time_ns()))
    with pytest.raises(CutlabError, match="data.root") as error:
        load_video_clips("ucsd_ped2", str(folder), str(cache_dir), progress=False)
    assert "cannot read frame" in str(error.value) and str(folder) in str(error.value)


def test_corrupt_cache_is_discarded_with_warning_and_rebuilt(tmp_path):
    clips = {
        "training_01": np.arange(3 * 20 * 30, dtype=np.uint8).reshape(3, 20, 30),
        "testing_01": np.zeros((2, 20, 30), np.uint8),
    }
    write_official_layout(tmp_path / "data", "ped2", clips, size_wh=(30, 20))
    cache_dir = tmp_path / "cache"
    first = load_video_clips("ucsd_ped2", str(tmp_path / "data"), str(cache_dir), image_size=32, progress=False)
    (cached,) = list(cache_dir.iterdir())
    cached.write_bytes(b"PK\x03\x04 truncated")
    with pytest.warns(UserWarning, match="corrupt video cache"):
        again = load_video_clips("ucsd_ped2", str(tmp_path / "data"), str(cache_dir), image_size=32, progress=False)
    np.testing.assert_array_equal(again.train["training_01"], first.train["training_01"])
    with zipfile.ZipFile(cached) as archive:  # rebuilt as a valid archive under the same name
        assert archive.testzip() is None
    assert not list(cache_dir.glob("*.tmp"))


def test_ped1_shaped_frames_load_as_160(tmp_path):
    rng = np.random.default_rng(1)
    clips = {
        "training_01": rng.integers(0, 256, (4, 158, 238), dtype=np.uint8),
        "testing_01": rng.integers(0, 256, (3, 158, 238), dtype=np.uint8),
    }
    folder = write_official_layout(tmp_path, "ped1", clips, size_wh=(238, 158))
    loaded = load_video_clips("ucsd_ped1", str(tmp_path), cache_dir=None, progress=False)
    assert loaded.train["training_01"].shape == (4, 160, 160) and loaded.test["testing_01"].shape == (3, 160, 160)
    np.testing.assert_array_equal(loaded.train["training_01"], expected_from_tifs(folder / "Train" / "Train001"))
    with pytest.raises(CutlabError, match="ucsd_ped2"):  # a Ped1 folder is not Ped2
        load_video_clips("ucsd_ped2", str(folder), cache_dir=None, progress=False)


# --------------------------------------------------------------------------- windows, tokens, sigma_x, split


def labelled_clips(lengths: dict[str, int]) -> dict[str, np.ndarray]:
    """Clip k, frame t is filled with 50*k + t, so every window says where it came from."""
    return {
        name: np.stack([np.full((4, 6), 50 * k + t, np.uint8) for t in range(length)])
        for k, (name, length) in enumerate(lengths.items())
    }


def test_frame_windows_count_and_content_never_cross_clips():
    clips = labelled_clips({"a": 10, "b": 5, "c": 3})
    windows = FrameWindows(clips, frames=4, stride=3)
    # a: starts 0, 3, 6; b: start 0 only; c: too short.
    assert len(windows) == 4
    expected = [(0, 0), (0, 3), (0, 6), (1, 0)]
    for i, (clip, start) in enumerate(expected):
        item = windows[i]
        assert item.dtype == torch.uint8 and item.shape == (4, 4, 6)
        assert item[:, 0, 0].tolist() == [50 * clip + start + t for t in range(4)]
    assert windows.clips["a"].dtype == np.uint8
    with pytest.raises(IndexError):
        windows[4]


def test_frame_windows_without_any_window_names_frames_and_shortest_clip():
    with pytest.raises(CutlabError, match=r"frames=6.*shortest 3"):
        FrameWindows(labelled_clips({"a": 5, "b": 3}), frames=6, stride=1)


def test_patch_tokens_round_trip_and_row_major_order():
    frames = torch.randint(0, 256, (2, 3, 160, 160), dtype=torch.uint8)
    tokens = to_patch_tokens(frames)
    assert tokens.dtype == torch.float32 and tokens.shape == (2, 3, 100, 256)
    assert torch.equal(from_patch_tokens(tokens, 160, 160), frames.float() / 255)

    marked = torch.zeros(1, 1, 160, 160, dtype=torch.uint8)
    marked[0, 0, 37, 85] = 255  # patch row 2, col 5 -> patch 25; inside it row 5, col 5 -> position 85
    tokens = to_patch_tokens(marked)
    assert tokens[0, 0, 25, 5 * 16 + 5] == 1.0 and tokens.sum() == 1.0

    floats = torch.rand(1, 2, 32, 48)
    assert torch.equal(from_patch_tokens(to_patch_tokens(floats), 32, 48), floats)  # float passed through unscaled
    with pytest.raises(CutlabError, match="divisible"):
        to_patch_tokens(torch.zeros(1, 1, 150, 160, dtype=torch.uint8))


def test_pixel_std_matches_numpy():
    rng = np.random.default_rng(3)
    clips = {f"c{k}": rng.integers(0, 256, (n, 16, 16), dtype=np.uint8) for k, n in enumerate((7, 130, 1))}
    reference = np.std(np.concatenate([c.reshape(-1) for c in clips.values()]).astype(np.float64) / 255)
    assert abs(pixel_std(clips) - reference) < 1e-9


def test_split_validation_holds_out_last_clips_sorted_by_name():
    names = ("training_03", "training_01", "training_04", "training_02")  # deliberately unsorted
    clips = {name: np.zeros((1, 2, 2), np.uint8) for name in names}
    train, val = split_validation(clips, 1)
    assert list(train) == ["training_01", "training_02", "training_03"] and list(val) == ["training_04"]
    train, val = split_validation(clips, 3)
    assert list(train) == ["training_01"] and list(val) == ["training_02", "training_03", "training_04"]
    for bad in (0, 4, -1):
        with pytest.raises(CutlabError, match="val_clips"):
            split_validation(clips, bad)
    # one training clip: 'must be an integer in [1, 0]' named no way out
    with pytest.raises(CutlabError, match=r"the training split has 1 clip.*give the data more clips"):
        split_validation({"only": np.zeros((1, 2, 2), np.uint8)}, 1)


def test_clips_too_short_for_the_window_name_the_key_and_the_length_that_fits():
    from cutlab.core.data.video import FrameWindows

    clips = {"a": np.zeros((5, 8, 8), np.uint8), "b": np.zeros((3, 8, 8), np.uint8)}
    with pytest.raises(CutlabError, match=r"no window of data.frames=10 fits.*longest has 5 frames.*"
                                          r"set data.frames=5 or less"):
        FrameWindows(clips, frames=10, stride=1)


# --------------------------------------------------------------------------- user errors


def assert_names_path(path: Path, error: pytest.ExceptionInfo) -> None:
    """Messages must name the bad path and the setting to fix."""
    assert str(path) in str(error.value) and "data.root" in str(error.value)


def test_missing_root(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(CutlabError) as error:
        load_video_clips("ucsd_ped2", str(missing), None, progress=False)
    assert_names_path(missing, error)
    with pytest.raises(CutlabError, match="data.root"):
        load_video_clips("ucsd_ped2", None, None, progress=False)


def test_folder_with_wrong_layout_and_empty_folder(tmp_path):
    (tmp_path / "frames").mkdir()
    (tmp_path / "notes.txt").write_text("not a dataset")
    with pytest.raises(CutlabError, match="notes.txt") as error:
        load_video_clips("ucsd_ped2", str(tmp_path), None, progress=False)
    assert_names_path(tmp_path, error)
    empty = tmp_path / "frames"
    with pytest.raises(CutlabError, match="empty") as error:
        load_video_clips("ucsd_ped2", str(empty), None, progress=False)
    assert_names_path(empty, error)
    (tmp_path / "UCSDped2" / "Train").mkdir(parents=True)  # layout started but without clip folders
    with pytest.raises(CutlabError, match="data.root"):
        load_video_clips("ucsd_ped2", str(tmp_path), None, progress=False)


def test_corrupt_npz(tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CutlabError) as error:
        load_video_clips("ucsd_ped2", str(bad), str(tmp_path / "cache"), progress=False)
    assert_names_path(bad, error)


def test_npz_without_expected_keys_or_with_wrong_dtype(tmp_path):
    keyless = tmp_path / "keys.npz"
    np.savez(keyless, frames=np.zeros((2, 160, 160), np.uint8))
    with pytest.raises(CutlabError, match="training_") as error:
        load_video_clips("ucsd_ped2", str(keyless), None, progress=False)
    assert_names_path(keyless, error)
    floats = tmp_path / "floats.npz"
    np.savez(floats, training_01=np.zeros((2, 160, 160), np.float32), testing_01=np.zeros((2, 160, 160), np.float32))
    with pytest.raises(CutlabError, match="uint8") as error:
        load_video_clips("ucsd_ped2", str(floats), None, progress=False)
    assert_names_path(floats, error)


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(CutlabError, match="synthetic.*ucsd_ped2.*ucsd_ped1"):
        load_video_clips("imagenet", None, None)


# --------------------------------------------------------------------------- synthetic


def test_synthetic_is_generated_in_well_under_two_seconds():
    """The embedded default needs no file: generating it must stay cheap (a timing check, kept apart)."""
    start = time.perf_counter()
    load_video_clips("synthetic", None, None, progress=False)
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0  # typically ~0.06 s; generous for loaded CI machines


def test_synthetic_is_deterministic_moving_and_spans_a_range():
    clips = load_video_clips("synthetic", None, None, progress=False)
    assert list(clips.train) == [f"training_{k:02d}" for k in range(1, 7)]
    assert list(clips.test) == ["testing_01", "testing_02"]
    again = make_synthetic_clips()
    other = make_synthetic_clips(seed=1)
    for name, clip in clips.train.items():
        assert clip.dtype == np.uint8 and clip.shape == (40, 160, 160)
        np.testing.assert_array_equal(clip, again.train[name])
        assert not np.array_equal(clip, other.train[name])
        assert all(np.any(clip[t] != clip[t + 1]) for t in range(len(clip) - 1))  # something moves every frame
        assert clip.max() - clip.min() > 120 and clip.std() > 10


def test_synthetic_size_is_a_config_key_whose_default_is_the_set_measured_before_it():
    """data.training_clips reaches the generator through the task (6: the clips every earlier run trained on);
    more clips keep the first ones and draw the test clips after them; a bad size is one line naming the key."""
    from cutlab.config.compose import compose_run_config
    from cutlab.core.data.synthetic import DEFAULT_TRAINING_CLIPS
    from cutlab.core.data.video import split_validation
    from cutlab.tasks import build_task

    assert compose_run_config([]).data.training_clips == DEFAULT_TRAINING_CLIPS == 6
    default = make_synthetic_clips(size=64)
    cfg = compose_run_config(["data.training_clips=9"])
    task = build_task(cfg)
    nine = make_synthetic_clips(n_train=9, size=64)
    nine_training, _ = split_validation(nine.train, cfg.data.val_clips)
    assert len(nine_training) == 8
    assert len(task.train_set) == len(FrameWindows(nine_training, cfg.data.frames, cfg.data.stride))
    for name, clip in default.train.items():
        np.testing.assert_array_equal(clip, nine.train[name])
    assert not np.array_equal(default.test["testing_01"], nine.test["testing_01"])
    np.testing.assert_array_equal(
        load_video_clips("synthetic", None, None, image_size=64, progress=False).test["testing_01"],
        default.test["testing_01"])
    for bad in (1, 0, "many", True):
        with pytest.raises(CutlabError, match=r"^data\.training_clips=.* must be an integer >= 2"):
            load_video_clips("synthetic", None, None, image_size=64, progress=False, training_clips=bad)
