"""A file system that fails under a run (its folder turned read-only, deleted or moved while it trains) and paths
that are not the folders they name: one line naming the cause and the fix (exit 2), never a traceback, and the same
command goes on once the cause is gone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from helpers.cli import cutlab, start, wait_until
from helpers.mounts import read_only

TINY = ["L=2", "train.epochs=10", "train.max_steps_per_epoch=3", "eval.gamma_test=[0,0.3]", "wandb.mode=disabled",
        "progress=false", "threads=1", "checkpoint.every_steps=2"]


def last_line(log: Path, process: subprocess.Popen) -> str:
    """The run's last line, once it ended with exit 2 and no traceback."""
    status = process.wait(timeout=120)
    text = log.read_text()
    assert status == 2 and "Traceback" not in text, text[-3000:]
    return text.strip().splitlines()[-1]


def started(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, Path]:
    """A run of 30 steps, returned once it has trained three (and checkpointed at step 2)."""
    runs, log = tmp_path / "runs", tmp_path / f"{name}.log"
    runs.mkdir()
    process = start([*TINY, f"run_name={name}"], runs, log)
    history = runs / name / "history.csv"
    try:
        wait_until(lambda: history.exists() and len(history.read_text().splitlines()) >= 4, process, "three steps")
    except BaseException:
        process.kill()
        raise
    return process, runs, log


def complete_steps(run_dir: Path) -> list[int]:
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "complete"
    return list(pd.read_csv(run_dir / "history.csv")["step"])


@pytest.mark.slow
def test_a_runs_folder_turned_read_only_mid_run_stops_in_one_line_and_the_same_command_resumes(tmp_path):
    """Before: three chained OSError tracebacks (the checkpoint's temporary file, the summary's, then the lock's
    removal), exit 1."""
    process, runs, log = started(tmp_path, "ro")
    try:
        with read_only(runs):  # as ext4's errors=remount-ro after a disk error
            line = last_line(log, process)
    finally:
        process.kill()
    assert line == (f"cutlab: error: {runs / 'ro'} became read-only while this command wrote checkpoint.pt there "
                    "(read-only file system); make it writable and run the same command again: the run resumes from "
                    "its last checkpoint")
    resumed = cutlab([*TINY, "run_name=ro"], runs)
    assert "resuming" in resumed.stderr
    assert complete_steps(runs / "ro") == list(range(1, 31))

