"""A real single-node SLURM (munge + slurmctld + slurmd, started here, stopped by PID): a grid runs as a job array
through ``python -m cutlab -m ... launcher=slurm``; one task is preempted mid-run, checkpoints, is requeued and
ends with exactly the result of an uninterrupted run; a task stopped by SIGTERM (preemption without SLURM's user
signal) is reported interrupted and resumes; a failing task is FAILED in SLURM's own records and
does not stop the others; a task killed without a result is failed with the state SLURM gives it; a search worker
whose job SLURM suspends past the heartbeat grace hands its trial over; a profile naming a partition the cluster lacks is refused before submitting; launcher
settings given on the command line (launcher.partition=..., submitit's names) reach the submitted job and leave the
run folders as they are without them."""

from __future__ import annotations

import importlib.util
import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import ROOT, unavailable
from helpers.cli import cutlab
from helpers.contract import assert_same_records, cutlab_env
from helpers.sweeps import plan_ids, result_config, sweep_outcome

spec = importlib.util.spec_from_file_location("single_node", ROOT / "slurm" / "single_node.py")
single_node = importlib.util.module_from_spec(spec)
spec.loader.exec_module(single_node)

GRID = ["gamma=0,abc,0.09", "L=2", "train.epochs=2", "train.max_steps_per_epoch=8", "checkpoint.every_steps=1000",
        "eval.gamma_test=[0,0.3]", "progress=false"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = single_node.missing_binaries()
    if missing:
        unavailable(f"SLURM is not installed ({', '.join(missing)} missing): apt-get install munge slurmctld slurmd "
                    "slurm-client (make test does this when run as root)")
    if os.geteuid() != 0:
        unavailable("the single-node SLURM runs its daemons as root (SlurmUser=root); run the tests as root")
    base = tmp_path_factory.mktemp("slurm")
    env = single_node.up(base)
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    try:
        yield base
    finally:
        single_node.down(base)
        os.environ.pop("SLURM_CONF", None)


def profile(folder: Path, **values) -> Path:
    path = folder / "test_profile.yaml"
    body = {"timeout_min": 10, "mem_gb": 1, "array_parallelism": 2, "signal_delay_s": 30, **values}
    path.write_text("".join(f"{k}: {v}\n" for k, v in body.items()))
    return path


def sweep_outcome_folder(runs: Path) -> Path:
    return sorted((runs / "_sweeps").glob("sweep-*"))[-1]


# a run long enough to act on while it trains (60 epochs of the synthetic video, no checkpoint but on a signal)
LONG_RUN = ["L=2", "train.epochs=60", "checkpoint.every_steps=100000", "eval.gamma_test=[0]", "progress=false",
            "wandb.mode=disabled"]


def start_slurm_sweep(grid: list[str], profile_path: Path, tmp_path: Path, path: str | None = None) -> subprocess.Popen:
    env = cutlab_env(tmp_path / "runs", {"CUTLAB_CACHE_DIR": str(tmp_path / "cache"), "PATH": path or os.environ["PATH"]})
    return subprocess.Popen([sys.executable, "-m", "cutlab", "-m", *grid, "launcher=slurm",
                             f"launcher.profile={profile_path}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_steps(run_dir: Path, steps: int, sweep: subprocess.Popen) -> Path:
    """The run's history.csv, once it has ``steps`` rows."""
    history, deadline = run_dir / "history.csv", time.time() + 300
    while not history.exists() or len(pd.read_csv(history)) < steps:
        assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.2)
    return history


def ctrl_c(process: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C on a command whose one SLURM job runs now: (that job's id, the command's stderr once it ended)."""
    [task] = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                            check=True).stdout.split()  # one run or worker: submitit submits a plain job
    process.send_signal(signal.SIGINT)
    return task, process.communicate(timeout=60)[1]


def cancel_queued() -> None:
    """scancel every job the test's cluster still holds (a test that left its job queued on purpose)."""
    queued = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True).stdout.split()
    subprocess.run(["scancel", *queued], check=False)


def scontrol(job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def test_a_grid_runs_as_a_job_array_and_a_preempted_run_resumes_to_the_uninterrupted_result(cluster, tmp_path):
    reference = tmp_path / "reference" / "runs"
    runs = tmp_path / "slurm" / "runs"
    env = cutlab_env(runs, {"CUTLAB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_DIR": str(tmp_path)})
    sweep = subprocess.Popen([sys.executable, "-m", "cutlab", "-m", *GRID, "wandb.mode=offline", "launcher=slurm",
                              f"launcher.profile={profile(tmp_path)}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    # preempt the gamma=0 task (array index 0) once it is a few steps in
    target = next(iter(runs.glob("*gamma=0,*")), None)
    deadline = time.time() + 300
    while target is None or not (target / "history.csv").exists() or len(pd.read_csv(target / "history.csv")) < 3:
        assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.1)
        target = next(iter(runs.glob("*gamma=0,*")), None)
    array = sweep_outcome_folder(runs).joinpath("submitit").glob("*_submission.sh").__next__().name.split("_")[0]
    task = f"{array}_0"
    assert scontrol(task)["JobState"] == "RUNNING"
    subprocess.run(["scancel", "--signal=USR2", task], check=True)  # what SLURM sends before a time limit
    # SLURM holds a requeued job ~2 min before it may start again; release it sooner to keep the test short
    # (not within the second its old credential was revoked: SLURM would refuse to start it)
    while scontrol(task).get("JobState") != "PENDING":
        assert time.time() < deadline, scontrol(task)
        time.sleep(0.2)
    time.sleep(2.5)
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], check=True)
    # meanwhile, the same grid uninterrupted in this process: the reference results
    cutlab(["-m", *GRID, "wandb.mode=disabled"], reference, check=False)
    stdout, stderr = sweep.communicate(timeout=300)

    assert sweep.returncode == 1, stderr[-3000:]  # one run failed: the sweep says so, after finishing the rest
    assert "2 complete, 1 failed" in stderr
    # n/N array tasks done and the time left, one line as each ends
    assert [line.split(": ", 1)[1].split(" jobs done")[0] for line in stderr.splitlines()
            if line.startswith("[cutlab] slurm: ") and " jobs done (" in line] == ["1/3", "2/3", "3/3"], stderr[-3000:]
    assert " jobs done (100%), " in stderr and ", 00:00 left; " in stderr
    outcomes = {o["run_id"].split("gamma=")[1].split(",")[0]: o for o in sweep_outcome(runs)["runs"]}
    assert outcomes["abc"]["status"] == "failed" and "gamma must be a number" in outcomes["abc"]["error"]
    # the bad run, refused by the plan, was submitted as no task; SLURM's own records: the preempted one restarted
    # once and COMPLETED
    assert outcomes["abc"].get("job_id") is None
    assert scontrol(task)["Restarts"] == "1" and scontrol(task)["JobState"] == "COMPLETED"
    completion_log = (cluster / "jobcomp.log").read_text()
    assert "JobState=FAILED" not in completion_log and "JobState=COMPLETED" in completion_log

    for gamma in ("0", "0.09"):
        ours = next(runs.glob(f"*gamma={gamma},*"))
        theirs = reference / ours.name
        assert result_config(ours) == result_config(theirs)
        assert_same_records(ours, theirs)
        assert json.loads((ours / "summary.json").read_text())["test_mean_metric"] == \
            json.loads((theirs / "summary.json").read_text())["test_mean_metric"]
        weights = [torch.load(run / "checkpoint.pt", weights_only=False)["trainer"]["model"] for run in (ours, theirs)]
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[1]), "same final weights"
    preempted = next(runs.glob("*gamma=0,*"))
    log = (preempted / "history.csv").read_text()
    assert log.count("\n") == 17  # header + 16 steps: nothing repeated, nothing lost
    sessions = list((preempted / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(sessions) == 2 and len({p.stem for p in sessions}) == 1, "the requeued job continues the same W&B run"
    # the sbatch script submitit wrote is the one the golden test pins (same writer, same profile keys)
    scripts = list((runs / "_sweeps").glob("*/submitit/*_submission.sh"))
    assert len(scripts) == 1 and "#SBATCH --array=0-1%2" in scripts[0].read_text()  # two tasks: abc is not one


def test_a_profile_naming_a_missing_partition_is_refused_before_anything_is_submitted(cluster, tmp_path):
    runs = tmp_path / "runs"
    before = subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout
    result = cutlab(["-m", "gamma=0,0.09", "launcher=slurm", f"launcher.profile={profile(tmp_path, partition='gpu_a100')}"],
                    runs, check=False)
    assert result.returncode == 2
    assert "names partition 'gpu_a100', which this cluster does not have (sinfo lists: debug)" in result.stderr
    assert subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout == before
    assert not runs.exists()


def test_a_plan_on_the_cluster_warns_of_a_partition_it_lacks_and_says_when_the_cluster_has_it(cluster, tmp_path):
    """--plan runs the submission's checks where SLURM answers: a partition the cluster lacks is said in the plan
    (exit 0: a plan submits nothing), not first met at the real submit."""
    runs = tmp_path / "runs"
    missing = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher=slurm",
                      f"launcher.profile={profile(tmp_path, partition='gpu_a100')}"], runs)
    assert ("# warning: the submit would be refused: launcher=slurm (profile 'test_profile') names partition 'gpu_a100', "
            "which this cluster does not have (sinfo lists: debug)") in missing.stdout, missing.stdout[-2000:]
    present = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher=slurm",
                      f"launcher.profile={profile(tmp_path, partition='debug')}"], runs)
    assert "# checked against this cluster: SLURM answers and has partition 'debug'" in present.stdout
    assert "warning" not in present.stdout and not runs.exists()


@pytest.mark.slow  # a profile refused before sbatch: test_a_profile_naming_a_missing_partition_... runs by default
def test_a_profile_asking_more_than_any_node_has_is_refused_in_one_line_not_left_pending(cluster, tmp_path):
    """More CPUs than the node has: this cluster (EnforcePartLimits=NO) accepts the job and leaves it pending for
    ever (PartitionConfig); more memory or a GPU: sbatch refuses it. Each stops before submitting, naming the key."""
    runs = tmp_path / "runs"
    before = subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout
    cpus = int(subprocess.run(["sinfo", "-N", "--noheader", "--format=%c"], capture_output=True, text=True).stdout)
    for key, value, most in (("cpus_per_task", 64 * cpus, f"at most {cpus} CPUs"), ("mem_gb", 100000, "GB of memory"),
                             ("gpus_per_node", 1, "at most 0 GPUs")):
        result = cutlab(["-m", "gamma=0,0.09", "launcher=slurm", f"launcher.profile={profile(tmp_path)}",
                         f"launcher.{key}={value}"], runs, check=False, timeout=60)
        assert result.returncode == 2, result.stderr[-2000:]
        assert f"launcher.{key}={value} asks one node for more than any node of the cluster's default partition" \
               in result.stderr and most in result.stderr and "Traceback" not in result.stderr
        planned = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher=slurm", f"launcher.profile={profile(tmp_path)}",
                          f"launcher.{key}={value}"], runs, timeout=60)
        assert f"# warning: the submit would be refused: launcher.{key}={value}" in planned.stdout
    assert subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout == before
    assert not runs.exists()


def test_a_job_array_that_sbatch_refuses_stops_in_one_line_naming_sbatchs_reason(cluster, tmp_path):
    result = cutlab(["-m", "gamma=0,0.09", "launcher=slurm", f"launcher.profile={profile(tmp_path)}",
                     "launcher.additional_parameters={begin:notatime}"], tmp_path / "runs", check=False, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1].startswith("cutlab: error: sbatch refused the job array (")
    assert "Invalid --begin specification" in result.stderr.splitlines()[-1]
    # nothing was submitted, so no sweep record: its command and plan, with no outcome, read as a killed submitter's
    assert list((tmp_path / "runs" / "_sweeps").iterdir()) == []


def test_slurm_conf_naming_no_file_is_said_at_once_in_one_line(cluster, tmp_path):
    """sinfo retried the missing file for 30 s, and the line then blamed an unreachable controller."""
    conf = tmp_path / "no_such" / "slurm.conf"
    result = cutlab(["-m", "gamma=0,0.09", "launcher=slurm", f"launcher.profile={profile(tmp_path)}"],
                    tmp_path / "runs", check=False, timeout=60, env={"SLURM_CONF": str(conf)})
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"cutlab: error: SLURM_CONF={conf} names no file: SLURM's commands read the cluster's configuration from it; "
        "point it at the cluster's slurm.conf, or unset it for SLURM's own default"), result.stderr[-2000:]


@pytest.mark.slow
def test_a_run_that_slurm_stops_with_sigterm_is_interrupted_and_the_same_command_resumes_it(cluster, tmp_path):
    """SIGTERM to a running task (what SLURM sends on preemption where preempt_send_user_signal is not set): the run
    checkpoints at its step, SLURM records the task FAILED, and the sweep reports it interrupted with the line that
    says how to resume, not failed; the same command then finishes it from its checkpoint. With W&B offline: scancel
    signals W&B's service too, which is gone before the run's next log (the run failed on it)."""
    grid = ["gamma=0", *(arg for arg in LONG_RUN if not arg.startswith("wandb.mode=")), "wandb.mode=offline"]
    runs = tmp_path / "runs"
    sweep = start_slurm_sweep(grid, profile(tmp_path), tmp_path)
    history = wait_for_steps(runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=60", 3, sweep)
    [task] = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                            check=True).stdout.split()  # one run: submitit submits a plain job, not an array
    cancel = subprocess.run(["scancel", "--signal=TERM", task], capture_output=True, text=True)
    assert cancel.returncode == 0, (cancel.stderr, scontrol(task))
    _, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 1 and "0 complete, 0 failed, 1 interrupted" in stderr, stderr[-3000:]
    [outcome] = sweep_outcome(runs)["runs"]
    assert outcome["status"] == "interrupted" and outcome["error"].endswith("run the sweep again to resume"), outcome
    assert scontrol(task)["JobState"] == "FAILED"
    stopped_at = len(pd.read_csv(history))
    assert json.loads((history.parent / "summary.json").read_text())["status"] == "interrupted"
    again = cutlab(["-m", *grid], runs, check=False)  # here, in this process: launcher keys never change a run
    assert again.returncode == 0 and "1 complete" in again.stderr, again.stderr[-3000:]
    assert len(pd.read_csv(history)) > stopped_at > 2  # resumed after the steps it had, not from the start


@pytest.mark.slow
def test_a_requeued_task_cancelled_while_pending_is_interrupted_not_failed(cluster, tmp_path):
    """scancel of a task that SLURM requeued after its checkpoint (SIGUSR2, the time limit's signal) and that waits to
    start again: no result file, SLURM says CANCELLED. It was reported failed, though its run stands at its
    checkpoint and the same command resumes it."""
    runs = tmp_path / "runs"
    sweep = start_slurm_sweep(["gamma=0", *LONG_RUN], profile(tmp_path), tmp_path)
    run_dir = runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=60"
    wait_for_steps(run_dir, 3, sweep)
    [task] = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                            check=True).stdout.split()
    subprocess.run(["scancel", "--signal=USR2", task], check=True)
    deadline = time.time() + 120
    while scontrol(task).get("JobState") != "PENDING":  # requeued: SLURM holds it ~2 min before it may start
        assert time.time() < deadline and sweep.poll() is None, scontrol(task)
        time.sleep(0.2)
    subprocess.run(["scancel", task], check=True)
    _, stderr = sweep.communicate(timeout=300)
    assert scontrol(task)["JobState"] == "CANCELLED"
    assert sweep.returncode == 1 and "0 complete, 0 failed, 1 interrupted" in stderr, stderr[-3000:]
    [outcome] = sweep_outcome(runs)["runs"]
    assert outcome["status"] == "interrupted", outcome
    assert outcome["error"].endswith("run the same command again to resume it"), outcome
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert (run_dir / "checkpoint.pt").exists()


def test_ctrl_c_on_the_submitting_command_stops_the_waiting_not_the_job_and_the_record_says_so(cluster, tmp_path):
    """Ctrl-C while the sweep waits on its job: one line naming the job and how to stop it, exit 130, the run
    recorded busy (left to its job) in outcome.json, and the job goes on. It was a traceback,
    with no outcome.json; the tally also counted runs not finished as done."""
    grid = ["gamma=0", *LONG_RUN]
    runs = tmp_path / "runs"
    run_dir = runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=60"
    sweep = start_slurm_sweep(grid, profile(tmp_path), tmp_path)
    wait_for_steps(run_dir, 2, sweep)
    task, stderr = ctrl_c(sweep)
    try:
        assert sweep.returncode == 130, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        assert (f"[cutlab] slurm: SIGINT: stopped waiting; 1 of the 1 tasks go on on the cluster (scancel {task} "
                "stops them)") in stderr, stderr[-3000:]
        [outcome] = sweep_outcome(runs)["runs"]
        assert (outcome["status"], outcome["job_id"]) == ("busy", task), outcome
        assert f"left running on the cluster as job {task}" in outcome["error"], outcome
        assert "0 complete, 0 failed, 0 interrupted, 1 busy" in stderr, stderr[-3000:]
        assert scontrol(task)["JobState"] == "RUNNING", "the job goes on"
    finally:
        subprocess.run(["scancel", task], check=False)


@pytest.mark.slow  # Ctrl-C on SLURM: test_ctrl_c_on_the_submitting_command_... runs by default
def test_ctrl_c_while_the_sweep_submits_waits_for_sbatch_and_records_the_job_it_submitted(cluster, tmp_path):
    """Ctrl-C while sbatch submits the job array (here an sbatch that answers after 3 s): the array is submitted
    whole, then the sweep stops waiting as on a Ctrl-C later: one line naming the job, exit 130, the run recorded
    busy with its job id. It was a KeyboardInterrupt traceback, with no record of the job left running."""
    slow = tmp_path / "slow_sbatch"
    slow.mkdir()
    started = tmp_path / "sbatch-started"
    (slow / "sbatch").write_text(f"#!/bin/sh\ntouch {started}\nsleep 3\nexec {single_node._binary('sbatch')} \"$@\"\n")
    (slow / "sbatch").chmod(0o755)
    runs = tmp_path / "runs"
    sweep = start_slurm_sweep(["gamma=0", *LONG_RUN], profile(tmp_path), tmp_path,
                              path=f"{slow}{os.pathsep}{os.environ['PATH']}")
    deadline = time.time() + 120
    while not started.exists():
        assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.05)
    sweep.send_signal(signal.SIGINT)
    stderr = sweep.communicate(timeout=60)[1]
    try:
        assert sweep.returncode == 130, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        [outcome] = sweep_outcome(runs)["runs"]
        task = outcome["job_id"]
        assert outcome["status"] == "busy" and task, outcome
        assert "[cutlab] slurm: SIGINT: stopping once sbatch has answered" in stderr, stderr[-3000:]
        assert (f"[cutlab] slurm: SIGINT: stopped waiting; 1 of the 1 tasks go on on the cluster (scancel {task} "
                "stops them)") in stderr, stderr[-3000:]
        assert scontrol(task)["JobState"] in ("PENDING", "RUNNING"), "the job submitted goes on"
    finally:  # whatever was submitted, recorded or not
        cancel_queued()


@pytest.mark.slow
def test_launcher_settings_on_the_command_line_reach_the_submitted_job_and_leave_the_run_ids_unchanged(cluster, tmp_path):
    """launcher.partition/timeout_min/mem_gb/additional_parameters win over the profile (which names a partition this
    cluster lacks), are in the sbatch script submitit wrote and in SLURM's record of each job, and the runs' folders
    are the ones the same grid gets without them."""
    grid = ["gamma=0,0.09", "L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]",
            "progress=false", "wandb.mode=disabled"]
    settings = [f"launcher.profile={profile(tmp_path, partition='gpu_a100')}", "launcher.partition=debug",
                "launcher.timeout_min=7", "launcher.mem_gb=1.5", "launcher.additional_parameters={comment:cutlab-test}"]
    runs = tmp_path / "runs"
    without = plan_ids(cutlab(["--plan", "-m", *grid], runs).stdout)
    planned = cutlab(["--plan", "-m", *grid, "launcher=slurm", *settings], runs).stdout.split("# the sbatch script")[0]
    assert plan_ids(planned) == without == [f"L=2,eval.gamma_test=_0_,gamma={g},train.epochs=1,train.max_steps_per_epoch=2"
                                            for g in ("0", "0.09")]
    result = cutlab(["-m", *grid, "launcher=slurm", *settings], runs)
    assert "2 complete" in result.stderr, result.stderr[-3000:]
    assert sorted(p.name for p in runs.iterdir() if p.name != "_sweeps") == sorted(without)
    for run_id in without:
        assert json.loads((runs / run_id / "summary.json").read_text())["status"] == "complete"
    script = next((runs / "_sweeps").glob("*/submitit/*_submission.sh")).read_text()
    for line in ("#SBATCH --partition=debug", "#SBATCH --time=7", "#SBATCH --mem=1536MB", "#SBATCH --comment=cutlab-test",
                 "#SBATCH --array=0-1%2"):
        assert line + "\n" in script, script
    for outcome in sweep_outcome(runs)["runs"]:
        job = scontrol(outcome["job_id"])
        assert (job["Partition"], job["TimeLimit"], job["Comment"]) == ("debug", "00:07:00", "cutlab-test"), job
        assert job["MinMemoryNode"] == "1.50G", job  # 1536 MB as SLURM prints it


@pytest.mark.slow
def test_search_workers_run_as_a_slurm_job_array_sharing_one_study(cluster, tmp_path):
    """``cutlab.search launcher=slurm``: two workers as array tasks fill the study's total between them."""
    from helpers.search import TINY, run_search, study_of

    result = run_search(["search=dust_video", "--n-trials", "3", "--workers", "2", "launcher=slurm",
                         f"launcher.profile={profile(tmp_path)}", "launcher.timeout_min=9", "search.pruner=null",
                         "search.heartbeat.interval_s=1", "search.heartbeat.grace_s=3", *TINY], tmp_path)
    assert "submitted 2 runs as job array" in result.stderr
    # the trials as they end, read from the study (the workers' own lines are in SLURM's log files)
    assert re.search(r"\[cutlab-search\] dust_video: [123]/3 trials done .* left; from the study's storage",
                     result.stderr), result.stderr[-3000:]
    study = study_of(tmp_path, "dust_video")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    # worker i samples with seed + i, plus 1000 per trial the study held when it opened it (a worker that starts after
    # the other's first trial is shifted too: which one does depends on SLURM's start order)
    assert {t.user_attrs["sampler_seed"] % 1000 for t in study.trials} <= {0, 1}
    for trial in study.trials:
        assert json.loads((Path(trial.user_attrs["run_dir"]) / "summary.json").read_text())["status"] == "complete"
    assert (tmp_path / "runs" / "search" / "dust_video" / "search_report.json").exists()
    scripts = list((tmp_path / "runs" / "search" / "dust_video" / "slurm").glob("*/*_submission.sh"))
    assert len(scripts) == 1 and "#SBATCH --time=9\n" in scripts[0].read_text()  # the command line's, not the profile's


@pytest.mark.slow
def test_ctrl_c_on_a_search_with_slurm_workers_stops_the_watching_and_names_the_job_that_goes_on(cluster, tmp_path):
    """Ctrl-C on ``cutlab-search launcher=slurm`` while its worker trains: exit 130, the line of the job that goes
    on (with its scancel), and not the line of a local search, whose stopped trial resumes from its checkpoint."""
    from helpers.search import TINY, search_command, search_env, wait_for

    args = ["search=dust_video", "--n-trials", "2", "launcher=slurm", f"launcher.profile={profile(tmp_path)}",
            "search.pruner=null", *[o for o in TINY if not o.startswith("train.")], "train.epochs=60"]
    search = subprocess.Popen(search_command(args), cwd=ROOT, env=search_env(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    wait_for(lambda: list(study_dir.glob("trial-*/history.csv")) or search.poll() is not None, 300, "a trial's step")
    task, stderr = ctrl_c(search)
    try:
        assert search.returncode == 130, stderr[-3000:]
        assert f"tasks go on on the cluster (scancel {task} stops them)" in stderr, stderr[-3000:]
        assert "cutlab-search: stopped watching the study; its workers go on on the cluster" in stderr
        assert "the stopped one resumes from its checkpoint" not in stderr and "Traceback" not in stderr
        assert scontrol(task)["JobState"] == "RUNNING", "the worker goes on"
    finally:
        subprocess.run(["scancel", task], check=False)


def search_until_a_trial_is_held(tmp_path) -> tuple[subprocess.Popen, Path, int]:
    """``cutlab-search`` of 3 trials on 2 SLURM workers, started and watched until a worker holds a trial's folder
    with its first checkpoint: the search, its study folder and that worker's process id."""
    from helpers.search import FAST_HEARTBEAT, TINY, search_command, search_env, wait_for

    args = ["search=dust_video", "--n-trials", "3", "--workers", "2", "launcher=slurm",
            f"launcher.profile={profile(tmp_path)}", "search.pruner=null", *FAST_HEARTBEAT,
            *[o for o in TINY if not o.startswith("train.")], "train.epochs=12", "train.max_steps_per_epoch=4"]
    search = subprocess.Popen(search_command(args), cwd=ROOT, env=search_env(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    trial_dir = wait_for(lambda: [path.parent for path in study_dir.glob("trial-*/checkpoint.pt")
                                  if (path.parent / ".lock").exists()] or search.poll() is not None, 300,
                         "a trial's first checkpoint")
    assert search.poll() is None, search.communicate()[1][-3000:]
    return search, study_dir, int((trial_dir[0] / ".lock").read_text().split()[1])  # "process PID on HOST"


@pytest.mark.slow
def test_a_search_worker_whose_job_slurm_suspends_hands_its_trial_over_and_no_trial_is_lost(cluster, tmp_path):
    """``scontrol suspend`` (SIGSTOP to the job) past the heartbeat grace: the other worker re-queues the trial and
    waits for its held folder; resumed, the suspended worker hands the run over at its next epoch."""
    from helpers.search import assert_run_complete, study_of, wait_for

    search, study_dir, worker = search_until_a_trial_is_held(tmp_path)
    task = array_task_of(worker)

    def worker_logs() -> str:  # the workers' own stderr, in SLURM's log files
        return "".join(log.read_text() for log in study_dir.glob("slurm/*/*_log.err"))

    subprocess.run(["scontrol", "suspend", task], check=True)  # the worker training that trial, not an idle one
    try:  # past the 3 s grace the other worker takes the suspended one's trial for dead, asks it, and finds it held
        assert scontrol(task)["JobState"] == "SUSPENDED"
        wait_for(lambda: "is held by" in worker_logs() or search.poll() is not None, 300,
                 "the other worker to meet the suspended worker's folder")
    finally:
        subprocess.run(["scontrol", "resume", task], check=True)
    _, stderr = search.communicate(timeout=600)
    assert search.returncode == 0, stderr[-3000:]
    logs = worker_logs()
    # at its next epoch; or, if suspended after its run ended but before it released the folder, with its record
    assert "is held by" in logs and "handed over" in logs, logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]
    study = study_of(tmp_path, "dust_video")
    assert sorted(t.state.name for t in study.trials) == ["COMPLETE"] * 3 + ["FAIL"]
    for trial in study.trials:
        if trial.state.name == "COMPLETE":
            assert_run_complete(Path(trial.user_attrs["run_dir"]), steps=48)  # every step once


@pytest.mark.slow
def test_a_search_worker_whose_job_dies_leaves_the_report_and_names_the_lost_worker(cluster, tmp_path):
    """SIGKILL to the job of the worker training a trial (a node lost, the OOM killer): the other worker re-queued
    that trial and finished every trial, but the command raised "1 worker job(s) failed" without writing
    search_report.json. Now, as with local workers: the report, then one line naming the lost worker."""
    from helpers.search import study_of

    search, study_dir, worker = search_until_a_trial_is_held(tmp_path)
    task = array_task_of(worker)
    job_process = int(_read(Path(f"/proc/{worker}/stat")).rsplit(b")", 1)[1].split()[1])  # its parent
    assert _is_submitit_job(_read(Path(f"/proc/{job_process}/cmdline")).split(b"\0"))
    os.kill(job_process, signal.SIGKILL)  # submitit's own process: nothing is left to write the result
    _, stderr = search.communicate(timeout=600)
    assert search.returncode == 0, stderr[-3000:]
    report = json.loads((study_dir / "search_report.json").read_text())
    assert report["search"]["trials"]["complete"] == 3, report
    [line] = [line for line in stderr.splitlines() if "ended early" in line]
    assert line.startswith(f"cutlab-search: worker {task.split('_')[1]} [job {task}] (the job ended without a "
                           "result (SLURM state"), line
    assert line.endswith("ended early; its trial was re-queued and finished by another worker: every trial is done")
    assert sorted(t.state.name for t in study_of(tmp_path, "dust_video").trials) == ["COMPLETE"] * 3 + ["FAIL"]


@pytest.mark.slow
def test_a_task_killed_without_a_result_is_failed_with_slurms_state_and_the_others_go_on(cluster, tmp_path):
    """SIGKILL to a running task (the OOM killer, a node lost): no result file, so the sweep reports it failed with
    the state SLURM recorded, where it once said only "killed or lost"."""
    runs = tmp_path / "runs"
    sweep = start_slurm_sweep(["gamma=0,0.09", *LONG_RUN], profile(tmp_path, array_parallelism=1), tmp_path)
    wait_for_steps(runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=60", 2, sweep)
    [task] = subprocess.run(["squeue", "--noheader", "--array", "--states=RUNNING", "--format=%i"],
                            capture_output=True, text=True, check=True).stdout.split()
    [job_process] = [int(cmdline.parent.name) for cmdline in Path("/proc").glob("[0-9]*/cmdline")
                     if _is_submitit_job(_read(cmdline).split(b"\0"))]
    os.kill(job_process, signal.SIGKILL)  # submitit's own process: nothing is left to write the result
    _, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 1, stderr[-3000:]
    outcomes = {o["run_id"].split("gamma=")[1].split(",")[0]: o for o in sweep_outcome(runs)["runs"]}
    state = scontrol(task)["JobState"]
    assert outcomes["0"]["status"] == "failed" and f"(SLURM state {state};" in outcomes["0"]["error"], outcomes
    assert outcomes["0.09"]["status"] == "complete"


def array_task_of(pid: int) -> str:
    """The SLURM array task (``JOBID_TASK``) that process ``pid`` runs in, from its environment."""
    env = dict(item.split(b"=", 1) for item in _read(Path(f"/proc/{pid}/environ")).split(b"\0") if b"=" in item)
    return f"{env[b'SLURM_ARRAY_JOB_ID'].decode()}_{env[b'SLURM_ARRAY_TASK_ID'].decode()}"


def _is_submitit_job(argv: list[bytes]) -> bool:
    """submitit's Python process inside the task (not srun's, nor the batch shell's, which name it too)."""
    return Path(argv[0].decode()).name.startswith("python") and b"submitit.core._submit" in argv


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # a process that ended while we looked
        return b""


def test_a_task_slurm_says_completed_is_waited_for_until_its_result_shows():
    """The decision behind the test above, at the times a slow shared file system makes matter: a task gone from
    squeue is failed after VANISHED_AFTER_S with the state SLURM gives, but one SLURM says COMPLETED wrote its result,
    so its file is waited for (NFS shows a new file up to 60 s late) before the folder is named as the cause."""
    from types import SimpleNamespace

    from cutlab.launch.slurm import RESULT_VISIBLE_S, VANISHED_AFTER_S, vanished

    paths = SimpleNamespace(result_pickle=Path("/shared/logs/7_0_result.pkl"), stderr=Path("/shared/logs/7_0.err"))
    asked = []

    def state(value):
        return lambda: asked.append(value) or value

    assert vanished(VANISHED_AFTER_S - 1, state("FAILED"), paths) is None and asked == []
    assert vanished(VANISHED_AFTER_S, state("OUT_OF_MEMORY"), paths) == \
        "the job ended without a result (SLURM state OUT_OF_MEMORY; see /shared/logs/7_0.err)"
    assert vanished(VANISHED_AFTER_S, state(None), paths) == \
        "the job ended without a result (killed or lost; see /shared/logs/7_0.err)"
    assert vanished(RESULT_VISIBLE_S - 1, state("COMPLETED"), paths) is None
    assert vanished(RESULT_VISIBLE_S, state("COMPLETED"), paths).startswith(
        "SLURM says the job COMPLETED, but its result /shared/logs/7_0_result.pkl has not appeared here in 120 s")


@pytest.mark.slow  # about 20 s
def test_a_run_an_identical_sweep_finished_after_the_plan_is_counted_skipped_not_complete(cluster, tmp_path):
    """Two identical SLURM sweeps: a task that found its run complete when it started (the other sweep's job had
    just finished it) was counted complete, and the sweep's last line said "0 skipped". Made deterministic here: one
    task at a time, the second held while its run is run to its end by hand (cutlab/launch/skipped.py)."""
    runs = tmp_path / "runs"
    grid = ["train.max_steps_per_epoch=40,2", "L=2", "train.epochs=1", "eval.gamma_test=[0]", "wandb.mode=disabled",
            "progress=false"]
    sweep = start_slurm_sweep(grid, profile(tmp_path, array_parallelism=1), tmp_path)
    first = next(iter(runs.glob("*max_steps_per_epoch=*")), None)
    deadline = time.time() + 300
    while first is None or not (first / "history.csv").exists():
        assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.1)
        first = next(iter(runs.glob("*max_steps_per_epoch=*")), None)
    array = sweep_outcome_folder(runs).joinpath("submitit").glob("*_submission.sh").__next__().name.split("_")[0]
    subprocess.run(["scontrol", "hold", f"{array}_1"], check=True, capture_output=True)
    try:
        other = "2" if first.name.endswith("=40") else "40"
        cutlab([f"train.max_steps_per_epoch={other}", *grid[1:]], runs)  # finished as by an identical sweep
    finally:
        subprocess.run(["scontrol", "release", f"{array}_1"], check=True, capture_output=True)
    _, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, stderr[-3000:]
    assert "1 complete, 0 failed, 0 interrupted, 1 skipped (already complete)" in stderr, stderr[-3000:]
    outcome = sweep_outcome(runs)
    assert outcome["skipped"] == 1 and sorted(run["status"] for run in outcome["runs"]) == ["complete", "skipped"]
