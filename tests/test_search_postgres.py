"""A search on a real PostgreSQL server: two workers at once, one killed mid-trial, no trial lost.

The server is started here (tests/helpers/postgres_server.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.postgres_server import postgres_server
from helpers.search import (FAST_HEARTBEAT, TINY, assert_run_complete, best_value, current_folder, run_search,
                            start_search, study_of, wait_for)


@pytest.fixture(scope="module")
def postgres_url():
    with postgres_server() as url:
        yield url


def test_two_workers_on_postgresql_one_killed_mid_trial_lose_no_trial(tmp_path, postgres_url):
    args = ["search=dust_video", "--storage", postgres_url, "--n-trials", "4", "search.pruner=null",
            *FAST_HEARTBEAT, *TINY]
    first = start_search(args, tmp_path, tmp_path / "worker-a.log")
    second = start_search(args, tmp_path, tmp_path / "worker-b.log")

    def killable_folder():
        if first.poll() is not None:
            raise AssertionError("worker A ended early:\n" + (tmp_path / "worker-a.log").read_text()[-4000:])
        folder = current_folder(tmp_path / "worker-a.log")
        return folder if folder and (folder / "checkpoint.pt").exists() else None

    victim = wait_for(killable_folder, 180, "worker A's trial to write its first checkpoint")
    first.kill()  # SIGKILL: no clean-up at all, its trial stays RUNNING until its heartbeat goes stale
    first.wait(timeout=30)
    assert '"status": "complete"' not in (victim / "summary.json").read_text()
    assert second.wait(timeout=300) == 0, (tmp_path / "worker-b.log").read_text()[-4000:]

    resumed = run_search(args, tmp_path)  # the same command again: nothing is left to run
    assert "trial 5" not in resumed.stderr and "| search | dust_video | 4/0/" in resumed.stderr
    study = study_of(tmp_path, "dust_video", postgres_url)
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE"] * 4 + ["FAIL"], states  # the killed trial, failed by heartbeat and re-run
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    folders = {Path(t.user_attrs["run_dir"]) for t in complete}
    assert len(folders) == 4 and victim in folders
    failed = next(t for t in study.trials if t.state.name == "FAIL")
    retried = next(t for t in complete if Path(t.user_attrs["run_dir"]) == victim)
    assert retried.params == failed.params and retried.number > failed.number
    for folder in folders:
        assert_run_complete(folder, steps=8)  # every step once: the killed run resumed from its checkpoint
    for trial in complete:  # every trial's verdict is in the database, where optuna-dashboard reads it
        summary = json.loads((Path(trial.user_attrs["run_dir"]) / "summary.json").read_text())
        assert trial.user_attrs["verdict"] == summary["verdict"] and trial.user_attrs["run_dir"] in map(str, folders)
        assert trial.user_attrs["test_mean_metric"] == summary["test_mean_metric"]
        assert (max(trial.constraints.values()) <= 0) == (summary["verdict"] == "feasible")
    assert study.best_trial.value == best_value(study)  # feasible first, read from PostgreSQL
    log_b = (tmp_path / "worker-b.log").read_text()
    assert f"-> {victim}" in log_b  # worker B picked the dead worker's trial up
