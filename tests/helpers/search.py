"""Running cutlab-search in a test, and waiting for what it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from conftest import ROOT


# tiny runs on the embedded synthetic video: about a second each
TINY = ["L=2", "train.epochs=4", "train.max_steps_per_epoch=2", "data.stride=10", "eval.gamma_test=[0,0.5]",
        "wandb.mode=disabled", "progress=false", "threads=1"]


FAST_HEARTBEAT = ["search.heartbeat.interval_s=1", "search.heartbeat.grace_s=3"]


def search_env(tmp: Path) -> dict:
    return {**os.environ, "CUTLAB_RUNS_DIR": str(tmp / "runs"), "CUTLAB_CACHE_DIR": str(tmp / "cache"),
            "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}


def search_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "cutlab.search", *args]


def run_search(args: list[str], tmp: Path, check: bool = True, timeout: float = 300,
               extra_env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(search_command(args), cwd=ROOT, env={**search_env(tmp), **(extra_env or {})},
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"cutlab.search {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


def start_search(args: list[str], tmp: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(search_command(args), cwd=ROOT, env=search_env(tmp), stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def wait_for(predicate, timeout: float, what: str, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def assert_run_complete(run_dir: Path, steps: int) -> dict:
    """A finished trial's run record: complete summary, every step once, the evaluation table."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete", (run_dir, summary.get("status"), summary.get("error"))
    history = pd.read_csv(run_dir / "history.csv")
    assert list(history["step"]) == list(range(1, steps + 1)), run_dir
    assert (run_dir / "eval.csv").exists() and (run_dir / "config.yaml").exists()
    return summary


def study_of(tmp: Path, study: str, storage: str | None = None):
    import optuna

    from cutlab.search.storage import default_storage_url, open_storage

    url = storage or default_storage_url(tmp / "runs" / "search" / study)
    return optuna.load_study(study_name=study, storage=open_storage(url, {"interval_s": 1, "grace_s": 3}))


def best_value(study) -> float:
    """The least validation RMSE among the strictly feasible complete trials, or among all when none is feasible
    (the search ranks feasible trials first: cutlab/search/verdict.py)."""
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert all("verdict" in t.user_attrs for t in complete)
    feasible = [t for t in complete if all(v <= 0 for v in t.constraints.values())]
    return min(t.value for t in feasible or complete)


def current_folder(log: Path) -> Path | None:
    """The run folder of the trial a worker is on (its last "trial N (worker i): ... -> FOLDER" line)."""
    lines = [line for line in log.read_text().splitlines() if " -> " in line and "(worker " in line]
    return Path(lines[-1].rsplit(" -> ", 1)[1]) if lines else None
