"""A closed terminal (a dropped ssh session: SIGHUP) stops cutlab as SIGTERM does, with a checkpoint.

Before, every line written after the hang-up failed with EIO: a single run died without a checkpoint (its summary
left 'running'), a local sweep's runs were recorded failed with 'BrokenPipeError' and the sweep wrote no record."""

from __future__ import annotations

import json
import signal
import sys

import pytest

from conftest import ROOT
from helpers.contract import cutlab_env
from helpers.search import TINY, search_command, search_env, study_of, wait_for
from helpers.sweeps import sweep_outcome
from helpers.terminal import Terminal

LONG = ["threads=1", "train.epochs=200", "wandb.mode=disabled"]  # far longer than the test waits


def summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_closed_terminal_stops_a_run_at_a_step_with_a_checkpoint_and_the_same_command_resumes(tmp_path):
    runs = tmp_path / "runs"
    terminal = Terminal([sys.executable, "-m", "cutlab", *LONG], ROOT, cutlab_env(runs))
    wait_for(lambda: any(runs.glob("*/checkpoint.pt")), 120, "the run's first checkpoint", poll=0.2)
    terminal.hang_up()
    assert terminal.wait(120) == 75  # PREEMPTED_EXIT: stopped by a signal after checkpointing
    (run_dir,) = [path for path in runs.iterdir() if path.is_dir()]
    record = summary(run_dir)
    assert record["status"] == "interrupted", record
    assert "stopped by SIGHUP" in record["error"] and "checkpoint saved" in record["error"], record["error"]


def test_a_run_started_under_nohup_goes_on_after_the_terminal_closes_and_keeps_writing_its_log(tmp_path):
    runs, log = tmp_path / "runs", tmp_path / "nohup.out"
    terminal = Terminal([sys.executable, "-m", "cutlab", *LONG], ROOT, cutlab_env(runs, {"CUTLAB_PROGRESS": "lines"}),
                        log=log, nohup=True)
    wait_for(lambda: any(runs.glob("*/checkpoint.pt")), 120, "the run's first checkpoint", poll=0.2)
    terminal.hang_up()
    written = log.stat().st_size
    wait_for(lambda: log.stat().st_size > written, 60, "a progress line after the hang-up", poll=0.2)
    assert terminal.process.poll() is None, log.read_text()[-3000:]  # still training
    terminal.process.terminate()  # stopped as SLURM or a user would: a checkpoint at the next step
    assert terminal.wait(120) == 75, log.read_text()[-3000:]


def test_a_closed_terminal_between_two_runs_of_an_in_process_sweep_still_writes_its_record(tmp_path):
    """The hang-up while Hydra composes the next run, where no run's handler is installed: the sweep died at once
    (SIGHUP's default action) without its record. Made exact by pausing it (SIGSTOP) once its first run is complete
    and before its second run's folder exists; the hang-up lands as it goes on (SIGCONT)."""
    runs = tmp_path / "runs"
    args = ["-m", "seed=1,2", "L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]",
            "threads=1", "wandb.mode=disabled"]
    terminal = Terminal([sys.executable, "-m", "cutlab", *args], ROOT, cutlab_env(runs))
    first, second = (f"L=2,eval.gamma_test=_0_,seed={seed},train.epochs=1,train.max_steps_per_epoch=2"
                     for seed in (1, 2))
    done = runs / first / "summary.json"
    wait_for(lambda: done.exists() and summary(runs / first)["status"] == "complete", 120, "the first run's end",
             poll=0.01)
    terminal.process.send_signal(signal.SIGSTOP)
    try:
        assert not (runs / second).exists(), "paused too late: the second run had begun"
        terminal.hang_up()
    finally:
        terminal.process.send_signal(signal.SIGCONT)
    assert terminal.wait(120) == 75  # PREEMPTED_EXIT, as a sweep stopped within a run
    outcome = {run["run_id"]: run for run in sweep_outcome(runs)["runs"]}
    assert {run_id: run["status"] for run_id, run in outcome.items()} == {first: "complete", second: "interrupted"}
    assert not (runs / second).exists(), "the run it never began leaves no folder"


@pytest.mark.slow
def test_a_closed_terminal_stops_a_local_sweep_whose_runs_checkpoint_and_its_record_is_written(tmp_path):
    runs = tmp_path / "runs"
    args = ["-m", "launcher=local", "launcher.max_parallel=2", "seed=1,2", *LONG]
    terminal = Terminal([sys.executable, "-m", "cutlab", *args], ROOT, cutlab_env(runs))
    wait_for(lambda: len(list(runs.glob("seed=*/checkpoint.pt"))) == 2, 180, "both runs' first checkpoints", poll=0.2)
    terminal.hang_up()
    terminal.wait(180)
    for run_dir in runs.glob("seed=*"):
        record = summary(run_dir)
        assert record["status"] == "interrupted" and "checkpoint saved" in record["error"], record
    outcome = sweep_outcome(runs)
    assert outcome, "the sweep wrote no record"


@pytest.mark.slow
def test_a_closed_terminal_stops_local_search_workers_whose_trials_are_requeued(tmp_path):
    args = ["search=dust_video", "--n-trials", "4", "--workers", "2", "search.pruner=null", *TINY, "train.epochs=5000"]
    terminal = Terminal(search_command(args), ROOT, search_env(tmp_path))
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    wait_for(lambda: all((study_dir / f"trial-000{n}" / "checkpoint.pt").exists() for n in (0, 1)), 180,
             "both workers' first checkpoints", poll=0.2)
    terminal.hang_up()
    terminal.wait(180)
    states = sorted(t.state.name for t in study_of(tmp_path, "dust_video").trials)
    assert states == ["FAIL", "FAIL", "WAITING", "WAITING"], states  # both stopped trials re-queued, none RUNNING
    for n in (0, 1):
        record = summary(study_dir / f"trial-000{n}")
        assert record["status"] == "interrupted", (record["status"], record.get("error"), terminal.text()[-3000:])
