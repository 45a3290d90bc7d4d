"""A run that runs out of memory as it trains: one line naming the settings to lower, the run recorded failed, its
last checkpoint kept. It was torch's traceback (exit 1), "DefaultCPUAllocator: can't allocate memory". So is one in
the run's set-up (its data, its model, the untrained model's evaluation), the run failed as a refused configuration
is."""

from __future__ import annotations

import functools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from helpers.contract import cutlab_env

from cutlab.run.checkpoints import load_checkpoint


def address_space(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def test_out_of_memory_in_training_is_one_line_with_the_run_failed_and_its_checkpoint_kept(tmp_path) -> None:
    # a checkpoint every step; once one is written, the process may grow by 16 MiB more, less than a step of 8
    # samples through 10 layers needs: the next step's allocation fails, as a batch too large for the host does
    runs = tmp_path / "runs"
    args = ["threads=1", "L=10", "train.batch_size=8", "train.epochs=1", "train.max_steps_per_epoch=200",
            "checkpoint.every_steps=1", "wandb.mode=disabled", "progress=false", "eval.gamma_test=[0.1]"]
    process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=cutlab_env(runs),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    while not list(runs.glob("*/checkpoint.pt")) and process.poll() is None and time.monotonic() - started < 120:
        time.sleep(0.1)
    limit = address_space(process.pid) + 16 * 2**20
    resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("cutlab: error: out of host memory in a training step "
                                                      "allocating "), stderr[-3000:]
    assert stderr.strip().endswith("; lower train.batch_size (or L)"), stderr[-3000:]
    (run_dir,) = runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("OutOfMemory: out of host memory")
    assert load_checkpoint(run_dir)["trainer"]["progress"]["step"] == summary["steps"] >= 1  # the last step's


@functools.cache
def fresh_address_space() -> int:
    """The address space of a fresh process that has imported torch and cutlab's command line. Not this test's own:
    a test worker's grows with the tests it ran before, and in the full suite the cap was so much looser than alone
    that the validation check's gigabyte fitted and the run ended complete."""
    code = ("import pathlib, torch, cutlab.cli; print(next(line.split()[1] for line in "
            "pathlib.Path('/proc/self/status').read_text().splitlines() if line.startswith('VmSize:')))")
    return int(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                              timeout=120).stdout) * 1024


def capped_run(runs: Path, args: list[str], spare: int = 2 * 2**30) -> subprocess.CompletedProcess:
    """``python -m cutlab`` whose address space may grow ``spare`` bytes past a fresh process's (torch and cutlab's
    command line imported): room for the set-up of a small run, none for an allocation of gigabytes."""
    limit = fresh_address_space() + spare
    return subprocess.run([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=cutlab_env(runs), text=True,
                          capture_output=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))


SMALL = ["threads=1", "train.epochs=1", "train.max_steps_per_epoch=3", "wandb.mode=disabled", "progress=false",
         "eval.gamma_test=[0.1]"]


@pytest.mark.slow  # the same one line: the training's and the model's out of memory run by default
def test_out_of_memory_in_the_auto_epsilon_evaluation_names_train_batch_size_and_the_sweep_records_it_failed(
        tmp_path) -> None:
    # train.epsilon=auto evaluates the untrained model on the training windows in batches of train.batch_size:
    # 32 (all 35 windows, 10240 tokens each at patch 2) asks for an attention map of 10240^2 floats per window,
    # gigabytes. It was torch's traceback, and the sweep's record named a RuntimeError
    runs = tmp_path / "runs"
    result = capped_run(runs, ["-m", *SMALL, "data.patch=2", "train.batch_size=32"])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = "out of host memory in the untrained model's evaluation (train.epsilon=auto) allocating "
    assert f"cutlab: error: {line}" in result.stderr and "; lower train.batch_size\n" in result.stderr, result.stderr
    (outcome,) = [json.loads(path.read_text()) for path in runs.glob("_sweeps/*/outcome.json")]
    (run,) = outcome["runs"]
    assert run["status"] == "failed" and run["error"].startswith(line), run


def test_out_of_memory_loading_the_video_clips_names_the_data_keys(tmp_path) -> None:
    # generated clips of 32768^2 pixels: one frame is 8 GiB. It was a traceback of numpy's MemoryError
    result = capped_run(tmp_path / "runs", [*SMALL, "data.image_size=32768"])
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == ("cutlab: error: out of host memory in the loading of the video "
                                                       "clips; lower data.image_size or data.training_clips")
    assert not (tmp_path / "runs").exists()  # nothing was written: the set-up failed, as a refused config does


def test_out_of_memory_building_the_model_names_its_sizes(tmp_path) -> None:
    # UT's feed-forward weight is model.atoms squared per layer: 200000 atoms ask 160 GB. It was torch's traceback
    result = capped_run(tmp_path / "runs", [*SMALL, "model=ut", "L=1", "model.atoms=200000"])
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == ("cutlab: error: out of host memory in the building of model=ut "
                                                       "allocating 160000000000 bytes; lower L or model.atoms")


@pytest.mark.parametrize("warmup, steps", [pytest.param("0", 1, marks=pytest.mark.slow), ("1", 2)],
                         ids=["check-in-the-loop", "final-check"])
def test_out_of_memory_in_a_validation_check_names_eval_batch_size(tmp_path, warmup, steps) -> None:
    # eval.iterate=best checks each iterate on the 42 validation windows, in one batch of eval.batch_size=64: an
    # attention map of 2560^2 floats per window, where a training step of train.batch_size=1 needs one. The checks in
    # the loop (the primal-dual steps: warm-up 0) said "lower train.batch_size (or L)"; the check of the last iterate
    # after it (a warm-up that covers the run leaves only that one) was torch's traceback
    runs = tmp_path / "runs"
    result = capped_run(runs, [*SMALL, "train.max_steps_per_epoch=2", "data.patch=4", "train.batch_size=1",
                               "eval.batch_size=64", "data.training_clips=12", "data.val_clips=6", "eval.iterate=best",
                               "eval.check_every_steps=1", "train.epsilon=1.0", f"train.warmup_epochs={warmup}"],
                        spare=2**30)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("cutlab: error: out of host memory in a validation check allocating "), last
    assert last.endswith("; lower eval.batch_size"), last
    (run_dir,) = runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == steps, summary
    assert summary["error"] == f"OutOfMemory: {last.removeprefix('cutlab: error: ')}", summary
