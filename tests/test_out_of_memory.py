"""A run that runs out of memory as it trains: one line naming the settings to lower, the run recorded failed, its
last checkpoint kept. It was torch's traceback (exit 1), "DefaultCPUAllocator: can't allocate memory"."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

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
