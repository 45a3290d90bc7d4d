"""The real single-node SLURM of tests/test_slurm.py, on what the queue says of a task: one cancelled before it
started is interrupted (the same command runs it), not failed with a log it never wrote; one SLURM requeued is
waited for while it is queued again, not taken as ended by the result its first start left; and a run's torch
threads are the job's CPUs where SLURM does not bind the job to them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from helpers.cli import cutlab
from helpers.contract import cutlab_env
from helpers.sweeps import sweep_outcome
from test_slurm import (LONG_RUN, cancel_queued, cluster, profile, scontrol, start_slurm_sweep, sweep_outcome_folder,
                        wait_for_steps)

__all__ = ["cluster"]  # the fixture: a single-node SLURM for this module

RUN = "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=1,train.max_steps_per_epoch=2"  # gamma=0 with SHORT
SHORT = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]", "progress=false",
         "wandb.mode=disabled"]


def array_of(runs, sweep: subprocess.Popen) -> str:
    """The job array id of the sweep writing into ``runs``, once submitit has written its script."""
    deadline = time.time() + 120
    while not list((runs / "_sweeps").glob("*/submitit/*_submission.sh")):
        assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.1)
    return next(sweep_outcome_folder(runs).joinpath("submitit").glob("*_submission.sh")).name.split("_")[0]


@pytest.mark.slow  # about 25 s: a task gone from the queue is first waited for (VANISHED_AFTER_S)
def test_a_task_cancelled_before_it_started_is_interrupted_and_names_no_log(cluster, tmp_path):
    """``scancel <array>`` while its tasks wait to start (here held by --begin): SLURM says CANCELLED, no log was
    written. Each was failed, "see .../<task>_log.err", a file that does not exist, and the analysis listed it
    failed."""
    runs = tmp_path / "runs"
    later = profile(tmp_path, additional_parameters="{begin: now+1hour}")
    sweep = start_slurm_sweep(["gamma=0,0.09", *SHORT], later, tmp_path)
    array = array_of(runs, sweep)
    subprocess.run(["scancel", array], check=True)
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 1 and "0 complete, 0 failed, 2 interrupted" in stderr, stderr[-3000:]
    for outcome in sweep_outcome(runs)["runs"]:
        assert scontrol(outcome["job_id"])["JobState"] == "CANCELLED"
        assert outcome["status"] == "interrupted", outcome
        assert outcome["error"] == ("cancelled before it started (SLURM state CANCELLED); run the same command "
                                    "again to run it"), outcome


def test_a_run_without_launcher_threads_gets_the_jobs_cpus_not_every_core_of_the_node(cluster, tmp_path):
    """launcher.threads null ("the job's CPUs"): where SLURM does not bind a job to its CPUs (TaskPlugin=task/none, as
    here) torch took every core of the node, 2 threads in a job of cpus_per_task=1."""
    runs = tmp_path / "runs"
    env = {key: value for key, value in cutlab_env(runs).items() if key != "OMP_NUM_THREADS"}
    result = subprocess.run([sys.executable, "-m", "cutlab", "-m", "gamma=0", *SHORT, "launcher=slurm",
                             f"launcher.profile={profile(tmp_path, cpus_per_task=1)}"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "1 complete" in result.stderr, result.stderr[-3000:]
    assert "[cutlab] slurm: submitted 1 run as job array" in result.stderr, result.stderr[-3000:]  # not "1 runs"
    [run_dir] = [path for path in runs.iterdir() if path.name != "_sweeps"]
    cores = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
    assert cores > 1, "a node of one core proves nothing"
    assert json.loads((run_dir / "provenance.json").read_text())["torch_threads"] == 1


@pytest.mark.slow  # about 40 s
def test_a_task_slurm_requeues_is_waited_for_while_it_is_queued_again(cluster, tmp_path):
    """``scontrol requeue`` of a running task (as PreemptMode=REQUEUE does): its run checkpoints on SIGTERM, the task
    leaves its result (interrupted) and is PENDING again. The sweep took that result as the end, said "run the sweep
    again to resume" and exited while its task was still queued; now it waits on, and reports how the task ends."""
    runs = tmp_path / "runs"
    sweep = start_slurm_sweep(["gamma=0", *LONG_RUN], profile(tmp_path), tmp_path)
    run_dir = runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=60"
    wait_for_steps(run_dir, 2, sweep)
    [task] = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                            check=True).stdout.split()  # one run: submitit submits a plain job
    subprocess.run(["scontrol", "requeue", task], check=True)
    result = sweep_outcome_folder(runs) / "submitit" / f"{task}_0_result.pkl"
    deadline = time.time() + 120
    while not result.exists() or scontrol(task).get("JobState") != "PENDING":
        assert time.time() < deadline and sweep.poll() is None, sweep.communicate()[1][-3000:]
        time.sleep(0.2)
    time.sleep(3)  # a few of the sweep's polls
    assert sweep.poll() is None, sweep.communicate()[1][-3000:]
    subprocess.run(["scancel", task], check=True)  # while it waits to start again: after its run's checkpoint
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 1 and "0 complete, 0 failed, 1 interrupted" in stderr, stderr[-3000:]
    [outcome] = sweep_outcome(runs)["runs"]
    # the result its requeue left is its last: its run stopped at a checkpoint
    assert outcome["status"] == "interrupted", outcome
    assert outcome["error"].endswith("stopped by a signal after checkpointing; run the sweep again to resume"), outcome
    assert scontrol(task)["JobState"] == "CANCELLED"


def test_after_ctrl_c_a_run_whose_task_still_waits_in_the_queue_is_busy_not_submitted_again(cluster, tmp_path):
    """Ctrl-C on the submitting command while its task waits to start: the run is recorded busy with its job. Its
    folder is locked only once the task starts, so the same command planned it new and submitted it a second time;
    now the plan asks squeue about the job the record names and leaves the run to it."""
    runs = tmp_path / "runs"
    grid = ["gamma=0", *SHORT]
    later = profile(tmp_path, additional_parameters="{begin: now+1hour}")
    sweep = start_slurm_sweep(grid, later, tmp_path)
    array_of(runs, sweep)
    sweep.send_signal(signal.SIGINT)
    _, stderr = sweep.communicate(timeout=60)
    try:
        assert sweep.returncode == 130, stderr[-3000:]
        [outcome] = sweep_outcome(runs)["runs"]
        task = outcome["job_id"]
        assert outcome["status"] == "busy" and scontrol(task)["JobState"] == "PENDING", outcome
        args = ["-m", *grid, "launcher=slurm", f"launcher.profile={later}"]
        planned = cutlab(["--plan", *args], runs).stdout
        assert f" busy        {RUN} (written now by SLURM job {task}, still queued: not run again)" in planned, planned
        again = cutlab(args, runs, check=False)
        assert again.returncode == 1 and "0 to run with launcher=slurm, 1 busy" in again.stderr, again.stderr[-3000:]
        assert "submitted" not in again.stderr
        [outcome] = sweep_outcome(runs)["runs"]
        assert (outcome["status"], outcome["job_id"]) == ("busy", task), outcome  # a third command finds it too
        assert subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                              check=True).stdout.split() == [task]
    finally:
        cancel_queued()


def test_a_closed_terminal_stops_the_waiting_and_leaves_the_queued_task_to_its_job(cluster, tmp_path):
    """SIGHUP to the submitting command (its terminal closed, an ssh session dropped) while its task waits to start:
    it died without a word and its record named no job, so the same command planned the run new and submitted it a
    second time. Now it stops as on SIGTERM, the run recorded busy with its job, which the same command leaves it to."""
    runs = tmp_path / "runs"
    grid = ["gamma=0", *SHORT]
    later = profile(tmp_path, additional_parameters="{begin: now+1hour}")
    sweep = start_slurm_sweep(grid, later, tmp_path)
    array_of(runs, sweep)
    sweep.send_signal(signal.SIGHUP)
    _, stderr = sweep.communicate(timeout=60)
    try:
        assert sweep.returncode == 75 and "Traceback" not in stderr, stderr[-3000:]
        [outcome] = sweep_outcome(runs)["runs"]
        task = outcome["job_id"]
        assert outcome["status"] == "busy" and scontrol(task)["JobState"] == "PENDING", outcome
        assert f"[cutlab] slurm: SIGHUP: stopped waiting; 1 of the 1 tasks go on on the cluster (scancel {task}" \
            in stderr, stderr[-3000:]
        planned = cutlab(["--plan", "-m", *grid, "launcher=slurm", f"launcher.profile={later}"], runs).stdout
        assert f" busy        {RUN} (written now by SLURM job {task}, still queued: not run again)" in planned, planned
    finally:
        cancel_queued()


def test_a_submitter_killed_once_sbatch_answered_leaves_its_jobs_recorded_and_they_are_not_submitted_again(
        cluster, tmp_path):
    """SIGKILL to the submitting command (a lost login node, the OOM killer) while its task waits: the jobs were
    recorded only as it ended, so the same command planned the run new and submitted it a second time. Now the
    record names each run's job as sbatch answers. The wait's line says where a task is (checked here at the
    source: squeue's state and reason for the task, as the wait prints them every minute no task ends)."""
    from cutlab.launch.slurm import _in_queue, queue_text

    runs = tmp_path / "runs"
    grid = ["gamma=0", *SHORT]
    later = profile(tmp_path, additional_parameters="{begin: now+1hour}")
    sweep = start_slurm_sweep(grid, later, tmp_path)
    array_of(runs, sweep)
    deadline = time.time() + 60
    while not (sweep_outcome_folder(runs) / "outcome.json").exists():
        assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.1)
    sweep.kill()
    sweep.communicate(timeout=60)
    try:
        [outcome] = sweep_outcome(runs)["runs"]
        task = outcome["job_id"]
        assert outcome["status"] == "busy" and scontrol(task)["JobState"] == "PENDING", outcome
        assert queue_text(_in_queue([task]), [task]) == "1 pending (BeginTime)"
        again = cutlab(["-m", *grid, "launcher=slurm", f"launcher.profile={later}"], runs, check=False)
        assert again.returncode == 1 and "0 to run with launcher=slurm, 1 busy" in again.stderr, again.stderr[-3000:]
        assert "submitted" not in again.stderr
        assert subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                              check=True).stdout.split() == [task]
    finally:
        cancel_queued()


def test_a_later_record_that_found_the_run_busy_by_its_lock_keeps_the_job_an_earlier_record_named(tmp_path):
    """A sweep that found the run's folder locked by the task running it recorded it busy with no job: read last,
    that record dropped the job the first sweep had left the run to, so once SLURM requeued that task (a time limit,
    a preemption) the same command planned the run anew and submitted it a second time. A later record of the run
    done or failed still ends the job's claim."""
    from cutlab.launch.queued import _left_to_jobs

    records = tmp_path / "_sweeps"

    def record(name: str, status: str, job_id: str | None, when: float) -> None:
        folder = records / f"{name}-20261207T0000{when:02.0f}.000000Z"
        folder.mkdir(parents=True)
        (folder / "outcome.json").write_text(json.dumps({"runs": [{"run_id": "r", "status": status,
                                                                   "job_id": job_id}]}))
        os.utime(folder / "outcome.json", (when, when))

    record("sweep-a", "busy", "7_0", 1)
    record("sweep-a", "busy", None, 2)
    assert _left_to_jobs(tmp_path, {"r"}) == {"r": ("7_0", "cutlab-sweep-a")}
    record("sweep-a", "complete", None, 3)
    assert _left_to_jobs(tmp_path, {"r"}) == {}
