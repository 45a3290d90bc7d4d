"""Sweeps through the real command line: the plan (golden), the in-process and local launchers, failures that do
not stop a sweep, preemption signals, and bad input refused before any run starts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import GOLDEN, ROOT
from helpers.analysis import run_main
from helpers.cli import cutlab
from helpers.contract import assert_same_records, cutlab_env
from helpers.sweeps import plan_ids, result_config, sweep_outcome

from cutlab.errors import CutlabError
from cutlab.run.lock import RunLock

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "progress=false"]
ABC_REFUSED = "gamma must be a number, got 'abc'; e.g. gamma=0.09"  # the planned problem of gamma=abc


# ------------------------------------------------------------------------------------------- the plan
def test_the_table3_plan_matches_its_golden_file(tmp_path):
    runs = tmp_path / "runs"
    ids = []
    for sweep in ("table3", "table3_vit"):
        started = time.perf_counter()
        result = cutlab(["--plan", "-m", "--config-name", sweep], runs)
        ids += plan_ids(result.stdout)
        assert f"# sweep {sweep}:" in result.stdout and "0 complete (skipped)" in result.stdout
        assert time.perf_counter() - started < 60
    assert len(ids) == 210 == len(set(ids))  # 2 models x 3 depths x 3 data x 5 gamma x 2 arms + ViT's 30
    assert ids == (GOLDEN / "plan_table3.txt").read_text().split()
    assert not runs.exists(), "a plan launches nothing and writes nothing"


@pytest.mark.slow
def test_the_text_sweeps_train_with_the_text_presets(tmp_path):
    """Table 4 and the ablations use the text presets (Table 4 cutlab's text default, the ablations the paper's
    per-model, per-data epsilon, dual lr and resilience), not the video presets."""
    for sweep, count in (("table4_ut", 96), ("table4_pretrained", 48), ("ablation_alpha", 18), ("ablation_dual_lr", 15)):
        ids = plan_ids(cutlab(["--plan", "-m", "--config-name", sweep], tmp_path / "runs").stdout)
        assert len(ids) == count, sweep
        assert all("train=constrained_text" in i or "train=erm_text" in i for i in ids), (sweep, ids[:2])


def test_a_sweeps_line_per_run_names_its_headline_a_text_runs_is_the_accuracy_auc():
    """A text run's line said 'accuracy 1.56': the number was the AUC of its accuracy over gamma_test (Table 4)."""
    from cutlab.launch.outcome import outcome_of

    recorded = ROOT / "benchmarks" / "feasibility_study" / "reproduce_cpu" / "runs"
    text = json.loads(next(recorded.glob("*data=imdb*/summary.json")).read_text())
    video = json.loads(next(recorded.glob("*model=ut*train=constrained/summary.json")).read_text())
    assert text["test_auc"] != text["test_mean_metric"]
    line = outcome_of("imdb-run", lambda: text, None).line()
    assert line == f"complete    imdb-run accuracy AUC {text['test_auc']:.4g}"
    assert outcome_of("video-run", lambda: video, None).line() == f"complete    video-run rmse {video['test_mean_metric']:.4g}"


def test_the_users_form_plans_one_run_per_combination_with_stable_ids(tmp_path):
    runs = tmp_path / "runs"
    first = cutlab(["--plan", "-m", "model=dust,ut", "gamma=0,0.09"], runs)
    again = cutlab(["-m", "gamma=0,0.09", "model=dust,ut", "--plan"], runs)
    assert plan_ids(first.stdout) == ["gamma=0,model=dust", "gamma=0.09,model=dust", "gamma=0,model=ut",
                                      "gamma=0.09,model=ut"]
    assert sorted(plan_ids(again.stdout)) == sorted(plan_ids(first.stdout))
    assert "4 to run" in first.stdout and not runs.exists()


def test_the_sbatch_script_of_a_profile_matches_its_golden_file():
    from cutlab.launch.slurm_profile import sbatch_script, slurm_settings

    script = sbatch_script(slurm_settings({"profile": "gpu"}), Path("/runs/_sweeps/table3-T/submitit"), "cutlab-table3",
                           180, "/venv/bin/python")
    assert script == (GOLDEN / "sbatch_gpu_table3.sh").read_text()
    assert "#SBATCH --array=0-179%8" in script and "#SBATCH --signal=USR2@120" in script


def test_a_slurm_plan_shows_the_sbatch_script_without_a_cluster(tmp_path):
    result = cutlab(["--plan", "-m", "--config-name", "smoke", "launcher=slurm", "launcher.profile=gpu"], tmp_path / "runs")
    assert "(launcher: slurm)" in result.stdout and "#SBATCH --array=0-11%8" in result.stdout
    assert "#SBATCH --gpus-per-node=1" in result.stdout and "#SBATCH --partition=gpu" in result.stdout
    assert "# warning: the submit would be refused: " in result.stdout  # no cluster answers here: said, not silent


def test_a_slurm_plans_job_array_holds_only_the_runs_it_launches(tmp_path):
    """The array was sized by every run not complete, refused ones too: a GPU task each (queue wait, node start-up)
    only to stop in one line. The plan's counts and the array agree."""
    result = cutlab(["--plan", "-m", "gamma=0.09,-1,0.15,abc", "launcher=slurm", "launcher.profile=gpu"],
                    tmp_path / "runs")
    assert "#SBATCH --array=0-1%2" in result.stdout, result.stdout  # it was 0-3%4
    assert "# 0 complete (skipped), 2 to run, 2 refused (not launched, each recorded failed: see above)" in \
        result.stdout.splitlines(), result.stdout


# ---------------------------------------------------------------------------------- running sweeps
@pytest.fixture(scope="module")
def inprocess_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """Three runs in one process, the middle one bad (gamma=abc): it fails, the other two finish."""
    runs = tmp_path_factory.mktemp("inprocess") / "runs"
    result = cutlab(["-m", "gamma=0,abc,0.09", *TINY, "wandb.mode=offline"], runs, check=False)
    return runs, result


def test_a_failed_run_is_reported_and_does_not_stop_the_sweep(inprocess_sweep):
    runs, result = inprocess_sweep
    assert result.returncode == 1, result.stderr[-2000:]
    assert "2 complete, 1 failed" in result.stderr
    # n/N done and the time left as each run ends (the failed one too: it has ended)
    tallies = [line for line in result.stderr.splitlines() if line.startswith("[cutlab] sweep ") and "runs done" in line]
    assert [re.search(r": (\d)/3 runs done", line)[1] for line in tallies] == ["1", "2", "3"], tallies
    # the refused run (gamma=abc) first, as the sweep begins; it is not run, so it gives no time left yet
    assert ", ? left; failed " in tallies[0] and tallies[0].endswith(f" {ABC_REFUSED}"), tallies[0]
    assert all(re.search(r", \d\d:\d\d elapsed, \d\d:\d\d left; (complete|failed) ", line) for line in tallies[1:])
    assert "cutlab: error:" not in result.stderr, "the refused run is not run (it stopped in that line at its turn)"
    outcome = {o["run_id"].split("gamma=")[1].split(",")[0]: o for o in sweep_outcome(runs)["runs"]}
    assert outcome["abc"]["status"] == "failed" and outcome["abc"]["error"] == ABC_REFUSED
    assert outcome["0"]["status"] == outcome["0.09"]["status"] == "complete"
    for gamma in ("0", "0.09"):
        summary = json.loads(next(runs.glob(f"*gamma={gamma},*/summary.json")).read_text())
        assert summary["status"] == "complete"


def test_the_report_lists_a_run_refused_before_it_started(inprocess_sweep, tmp_path, capsys):
    """The refused run (gamma=abc) leaves no folder, only its line in the sweep's outcome.json: the report counts
    and lists it with the failed runs, with its reason (before, it was left out of the report)."""
    runs, _ = inprocess_sweep
    assert not list(runs.glob("*gamma=abc*")), "a run refused at the door leaves no folder"
    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0 and "failed before it wrote a run folder: gamma must be a number" in err, err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "2 run folders and 1 sweep run that left none: 2 complete" in report and ", 1 failed, " in report
    failed = report.split("## Failed runs")[1].split("\n## ")[0]
    (row,) = [line for line in failed.splitlines() if "gamma=abc" in line]
    assert "no run record (sweep sweep-" in row and "gamma must be a number" in row, row


def test_runs_of_a_sweep_share_a_wandb_group_named_after_the_sweep_and_are_named_by_their_overrides(inprocess_sweep):
    runs, _ = inprocess_sweep
    groups, names = set(), set()
    for run_dir in runs.glob("*gamma=*"):
        config = (run_dir / "config.yaml").read_text()
        groups |= {line.split(": ", 1)[1] for line in config.splitlines() if line.strip().startswith("group:")}
        wandb_files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
        assert wandb_files, "offline W&B files stay in the run folder"
        names.add(run_dir.name)
    assert len(groups) == 1 and next(iter(groups)).startswith("sweep-")
    assert names == {"L=2,eval.gamma_test=_0,0.5_,gamma=0,train.epochs=1,train.max_steps_per_epoch=2",
                     "L=2,eval.gamma_test=_0,0.5_,gamma=0.09,train.epochs=1,train.max_steps_per_epoch=2"}


def test_rerunning_a_sweep_skips_complete_runs_and_keeps_every_earlier_sweep_record(inprocess_sweep, tmp_path):
    runs, _ = inprocess_sweep
    plan = cutlab(["--plan", "-m", "gamma=0,0.09,0.15", *TINY, "wandb.mode=offline"], runs)
    assert [line.split()[1] for line in plan.stdout.splitlines() if not line.startswith("#")] == ["complete"] * 2 + ["new"]
    assert "2 complete (skipped), 1 to run" in plan.stdout
    assert "for the 1 measured runs" in plan.stdout, "a new run is priced from its complete peers"
    # one run to run takes its own time however many slots there are (it was once halved over 2 slots)
    parallel = cutlab(["--plan", "-m", "gamma=0,0.09,0.15", *TINY, "wandb.mode=offline", "launcher=local",
                       "launcher.max_parallel=2"], runs)
    estimate = re.search(r"estimated (.+?) of run time for the 1 measured runs \(about (.+?) of wall time with 2 in "
                         r"parallel\)", parallel.stdout)
    assert estimate and estimate.group(1) == estimate.group(2), parallel.stdout
    rerun = cutlab(["-m", "gamma=0,0.09", *TINY, "wandb.mode=offline"], runs)
    assert rerun.stderr.count("complete; skipped") == 2
    assert len(list((runs / "_sweeps").glob("sweep-*/outcome.json"))) == 2


@pytest.mark.slow  # a sweep's own record: test_rerunning_a_sweep_skips_complete_runs_and_keeps_... runs by default
def test_each_in_process_sweep_keeps_hydras_multirun_yaml_in_its_own_record(tmp_path):
    """Hydra writes multirun.yaml into its sweep folder, which was paths.runs_dir for every sweep: each sweep into the
    same folder rewrote the last one's (two started together kept one; an earlier one was moved aside under its file's
    time, apart from its sweep's record). Each sweep's record is now Hydra's sweep folder; the runs stay where they
    were. A space in the folder: the record's override is written for Hydra's grammar."""
    import yaml

    runs = tmp_path / "my runs"
    for gamma in ("0", "0.09"):
        cutlab(["-m", f"gamma={gamma}", *TINY, "wandb.mode=disabled"], runs)
    assert sorted(p.name for p in runs.iterdir()) == [
        "L=2,eval.gamma_test=_0,0.5_,gamma=0,train.epochs=1,train.max_steps_per_epoch=2",
        "L=2,eval.gamma_test=_0,0.5_,gamma=0.09,train.epochs=1,train.max_steps_per_epoch=2", "_sweeps"]
    records = list((runs / "_sweeps").iterdir())
    swept = set()
    for record in records:
        task = yaml.safe_load((record / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
        [gamma] = [override for override in task if override.startswith("gamma=")]
        assert f",{gamma},train." in (record / "plan.txt").read_text(), "the multirun.yaml of the record's own sweep"
        swept.add(gamma)
    assert len(records) == 2 and swept == {"gamma=0", "gamma=0.09"}


@pytest.mark.slow  # the plan's text: test_the_table3_plan_matches_its_golden_file runs by default
def test_a_sweep_records_the_plan_it_printed_with_its_parallel_slots(tmp_path):
    """plan.txt in the sweep's record is ``--plan``'s text: the wall-time estimate over the launcher's slots (it was
    once written for 1 slot whatever launcher.max_parallel said)."""
    runs = tmp_path / "runs"
    cutlab(["gamma=0", *TINY, "wandb.mode=disabled"], runs)  # one measured run to price the sweep's new one
    args = ["-m", "gamma=0,0.09", *TINY, "wandb.mode=disabled", "launcher=local", "launcher.max_parallel=2"]
    printed = cutlab(["--plan", *args], runs).stdout
    cutlab(args, runs)
    recorded = next((runs / "_sweeps").glob("sweep-*/plan.txt")).read_text()
    assert "with 2 in parallel" in printed and recorded == printed, (printed, recorded)


@pytest.mark.parametrize("warm_workers", ["true", pytest.param("false", marks=pytest.mark.slow)],
                         ids=["warm-workers", "process-per-run"])
def test_the_local_launcher_runs_in_parallel_processes_with_the_same_results(inprocess_sweep, warm_workers):
    reference, _ = inprocess_sweep
    runs = reference.parent.parent / f"local-{warm_workers}" / "runs"
    result = cutlab(["-m", "gamma=0,abc,0.09", *TINY, "wandb.mode=disabled", "launcher=local",
                     "launcher.max_parallel=2", f"launcher.warm_workers={warm_workers}"], runs, check=False)
    assert result.returncode == 1 and "2 complete, 1 failed" in result.stderr
    done = r"\n\[L=2,[^\]]*gamma=0\.09,[^\]]*\] \[cutlab\] done: "
    assert re.search(done, result.stderr), "a run's messages carry its id"
    # the refused run started in no worker (it printed its one line there, prefixed with its id, and said 'exit 2')
    assert "gamma=abc" not in "".join(re.findall(r"^\[[^\]]*\] ", result.stderr, re.M)), result.stderr[-2000:]
    assert re.search(r"\[cutlab\] local: 1/3 runs done \(33%\), .*; failed +\S*gamma=abc\S* ", result.stderr)
    assert re.search(r"\[cutlab\] local: 3/3 runs done \(100%\), .*, 00:00 left; ", result.stderr), result.stderr[-2000:]
    failed = [o for o in sweep_outcome(runs)["runs"] if o["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["error"] == ABC_REFUSED, failed
    for run_dir in reference.glob("*gamma=*"):
        ours, theirs = runs / run_dir.name, run_dir
        assert result_config(ours) == result_config(theirs)
        pd.testing.assert_frame_equal(pd.read_csv(ours / "eval.csv"), pd.read_csv(theirs / "eval.csv"))
        assert "threads: 1" in (ours / "config.yaml").read_text(), "local runs get one torch thread each"


@pytest.mark.slow
def start_run_until_rows(args: list[str], runs: Path, rows: int) -> tuple[subprocess.Popen, Path]:
    """``python -m cutlab ARGS`` (a run named ``stopped``) started and left running once its history has ``rows``."""
    env = {**os.environ, "CUTLAB_RUNS_DIR": str(runs), "CUTLAB_CACHE_DIR": str(runs.parent / "cache"),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    stopped = runs / "stopped"
    deadline = time.time() + 300
    while not (stopped / "history.csv").exists() or len(pd.read_csv(stopped / "history.csv")) < rows:
        assert process.poll() is None and time.time() < deadline, "the run ended before it could be stopped"
        time.sleep(0.05)
    return process, stopped


def write_frame_clips(root: Path, names: list[str], seed: int = 0) -> None:
    """Folders of 8-bit PNG frames (video_folder's flat layout), noise over a gradient: one clip per name."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in names:
        (root / name).mkdir(parents=True)
        for index in range(6):
            frame = np.linspace(0, 200, 32 * 32).reshape(32, 32) + rng.integers(0, 50, (32, 32))
            Image.fromarray(frame.astype(np.uint8)).save(root / name / f"{index:03d}.png")


def test_a_run_whose_data_changed_since_it_began_is_not_resumed_until_they_are_restored(tmp_path):
    """A clip added to data.root moves the held-out clips: the resumed run trained on on other data, without a word."""
    root, runs = tmp_path / "footage", tmp_path / "runs"
    write_frame_clips(root, ["clip1", "clip2", "clip3", "clip4"])
    args = ["model=ut", "data=video_folder", f"data.root={root}", "data.image_size=32", "data.frames=3", "L=1",
            "train.epochs=30", "eval.gamma_test=[0]", "wandb.mode=disabled", "progress=false", "threads=1",
            "run_name=stopped"]
    process, stopped = start_run_until_rows(args, runs, rows=2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr[-2000:]
    recorded = json.loads((stopped / "provenance.json").read_text())["data_files"]
    assert recorded["files"] == 24

    write_frame_clips(root, ["clip5"], seed=1)
    refused = cutlab(args, runs, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"cutlab: error: data.root={root} changed since {stopped} began (24 files then, 30 now, or other sizes or "
        "modification times), so resuming would finish it on other data: restore the files as they were (a copy "
        "keeps their times with cp -p or rsync -a), or pass run_name=<new name> to start a separate run (the "
        "existing one is kept)")
    assert json.loads((stopped / "summary.json").read_text())["status"] == "interrupted"

    for frame in (root / "clip5").iterdir():  # restored: the same command resumes it
        frame.unlink()
    (root / "clip5").rmdir()
    resumed = cutlab(args, runs, timeout=600)
    assert "[cutlab] resuming " in resumed.stderr
    assert json.loads((stopped / "summary.json").read_text())["status"] == "complete"


def test_ctrl_c_in_an_in_process_sweep_records_the_runs_it_never_began_too(tmp_path):
    """Stopped in its first of two runs, the sweep's summary and outcome.json listed that run alone."""
    runs = tmp_path / "runs"
    env = {**os.environ, "CUTLAB_RUNS_DIR": str(runs), "CUTLAB_CACHE_DIR": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "cutlab", "-m", "gamma=0,0.09", "train.epochs=50", "threads=1",
                                "wandb.mode=disabled", "progress=false"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's
    first = runs / "gamma=0,train.epochs=50" / "history.csv"
    deadline = time.time() + 300
    while not first.exists() or len(pd.read_csv(first)) < 2:
        assert process.poll() is None and time.time() < deadline, "the sweep ended before it could be stopped"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert "0 complete, 0 failed, 2 interrupted" in stderr, stderr[-2000:]
    outcome = {run["run_id"]: run for run in sweep_outcome(runs)["runs"]}
    assert outcome["gamma=0,train.epochs=50"]["error"] == "interrupted (Ctrl-C)"
    assert outcome["gamma=0.09,train.epochs=50"] == {
        "run_id": "gamma=0.09,train.epochs=50", "status": "interrupted", "metric": None, "value": None,
        "error": "not started, the sweep was stopped; run it again to resume", "job_id": None}


def test_sigterm_checkpoints_at_a_step_boundary_and_the_same_command_resumes_to_the_same_result(tmp_path):
    runs = tmp_path / "runs"
    args = ["L=2", "train.epochs=2", "train.max_steps_per_epoch=6", "checkpoint.every_steps=1000", "eval.gamma_test=[0]", "wandb.mode=offline",
            "progress=false"]
    cutlab([*args, "run_name=reference"], runs)
    process, stopped = start_run_until_rows([*args, "run_name=stopped"], runs, rows=3)
    process.send_signal(signal.SIGTERM)  # what SLURM sends on preemption (SIGUSR2 before a time limit)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr[-2000:]
    summary = json.loads((stopped / "summary.json").read_text())
    steps_done = len(pd.read_csv(stopped / "history.csv"))
    assert summary["status"] == "interrupted" and "SIGTERM" in summary["error"]
    assert torch.load(stopped / "checkpoint.pt", weights_only=False)["trainer"]["progress"]["step"] == steps_done, \
        "checkpointed at the step it stopped after (every_steps=1000 would not have)"
    resumed = cutlab([*args, "run_name=stopped"], runs)
    assert f"from step {steps_done}" in resumed.stdout + resumed.stderr
    assert_same_records(stopped, runs / "reference")
    wandb_ids = {p.stem for p in (stopped / "wandb").glob("offline-run-*/run-*.wandb")}
    assert len(list((stopped / "wandb").glob("offline-run-*"))) == 2 and len(wandb_ids) == 1, \
        "the resumed session continues the same W&B run"


@pytest.mark.slow  # SIGTERM in a sweep: test_sigterm_checkpoints_at_a_step_boundary_... runs by default
def test_sigterm_while_a_run_evaluates_records_it_interrupted_and_the_same_command_completes_it(tmp_path):
    """SIGTERM after training, during a long evaluation (20 noise levels, one clip a batch): the run is recorded
    interrupted and exits 75, as in training. Before, it died silently (exit -15), its summary left "running" and its
    W&B run unfinished."""
    runs = tmp_path / "runs"
    levels = ",".join(f"{0.01 * i:.2f}" for i in range(100))
    args = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", f"eval.gamma_test=[{levels}]", "eval.batch_size=1",
            "wandb.mode=offline", "run_name=stopped"]
    env = {**cutlab_env(runs), "CUTLAB_PROGRESS": "lines"}  # a line as each evaluation ends
    process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    stopped = runs / "stopped"
    # the validation split's evaluation has ended, so the test split's has begun (6 s of it on 2 cores of an Intel
    # Xeon; a fixed sleep after training, once 2 s, came after the whole evaluation on a fast machine)
    while not re.search(r"evaluating validation: (\d+)/\1 ", process.stderr.readline()):  # its last line
        assert process.poll() is None, "the run ended before its evaluation"
    assert process.poll() is None, "the evaluation ended before it could be stopped"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr[-2000:]
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "SIGTERM outside the training loop" in summary["error"], summary
    assert "Traceback" not in stderr, stderr[-2000:]
    cutlab(args, runs)  # the same command: evaluates the last checkpoint anew
    assert json.loads((stopped / "summary.json").read_text())["status"] == "complete"


@pytest.mark.slow  # SIGTERM in a sweep: test_sigterm_checkpoints_at_a_step_boundary_... runs by default
def test_a_stop_that_also_ends_the_wandb_service_still_checkpoints_and_reports_interrupted(tmp_path):
    """SLURM's scancel and preemption signal every process of the job, W&B's service among them: the service is gone
    at once, and the run's next log to it must not fail the run before it reaches its step boundary to checkpoint."""
    runs = tmp_path / "runs"
    args = ["L=2", "train.epochs=2", "train.max_steps_per_epoch=30", "checkpoint.every_steps=1000", "eval.gamma_test=[0]",
            "wandb.mode=offline", "progress=false", "run_name=stopped"]
    process, stopped = start_run_until_rows(args, runs, rows=3)
    service = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
    assert service, "W&B's service runs as a child of the run"
    for pid in [*service, str(process.pid)]:  # the service first: it is gone before the run's next step
        os.kill(int(pid), signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr[-2000:]
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "SIGTERM" in summary["error"], summary
    steps_done = len(pd.read_csv(stopped / "history.csv"))
    checkpoint = torch.load(stopped / "checkpoint.pt", weights_only=False)
    assert checkpoint["trainer"]["progress"]["step"] == steps_done
    # the W&B run's id is kept (it was dropped with the service, and the resumed session began a second W&B run)
    assert checkpoint["wandb_id"] == summary["wandb_id"] is not None
    cutlab(args, runs)
    assert json.loads((stopped / "summary.json").read_text())["wandb_id"] == summary["wandb_id"]
    assert {folder.name.rsplit("-", 1)[1] for folder in (stopped / "wandb").glob("offline-run-*")} == {
        summary["wandb_id"]}


@pytest.mark.parametrize("launcher", ["inprocess", pytest.param("local", marks=pytest.mark.slow)])
def test_a_run_still_written_by_an_earlier_sweeps_job_is_left_to_it_not_run_again_or_failed(tmp_path, launcher):
    """The same command again while an earlier sweep's job still writes one of its runs (its submitter was stopped,
    the job was not): that run is left to the job, said so, and recorded busy, not submitted again to be refused at
    its folder's lock and reported failed; the other runs go on."""
    runs = tmp_path / "runs"
    grid = ["gamma=0", "L=2", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]", "wandb.mode=disabled",
            "progress=false"]
    env = {**os.environ, "CUTLAB_RUNS_DIR": str(runs), "CUTLAB_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    earlier = subprocess.Popen([sys.executable, "-m", "cutlab", "train.epochs=400", *grid], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        written = runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=400,train.max_steps_per_epoch=2"
        deadline = time.time() + 300
        while not (written / "history.csv").exists():
            assert earlier.poll() is None and time.time() < deadline, "the earlier run ended before the sweep began"
            time.sleep(0.05)
        sweep = ["train.epochs=400,2", *grid, f"launcher={launcher}"]
        planned = cutlab(["-m", "--plan", *sweep], runs)
        assert re.search(r"busy +L=2,.*train.epochs=400,.* \(written now by process \d+ on .*: not run again\)",
                         planned.stdout), planned.stdout
        result = cutlab(["-m", *sweep], runs, check=False)
        assert earlier.poll() is None, "the earlier run was not disturbed"
    finally:
        earlier.kill()
        earlier.wait()
    assert result.returncode == 1 and "1 complete, 0 failed, 0 interrupted, 1 busy" in result.stderr, result.stderr[-3000:]
    statuses = {run["run_id"].split("train.epochs=")[1].split(",")[0]: run["status"]
                for run in sweep_outcome(runs)["runs"]}
    assert statuses == {"400": "busy", "2": "complete"}, statuses
    # killed (SIGKILL above): its summary still says running, and the plan said "running", no resume point
    replanned = cutlab(["-m", "--plan", *sweep], runs)
    assert re.search(r"killed +L=2,.*train.epochs=400,.* \(its process died(: resumes from its checkpoint| before its "
                     r"first checkpoint: starts again)\)", replanned.stdout), replanned.stdout


# each launcher, one run at a time: the local variants (12-15 s each) in the slow sample, so the default run stays
# < 20 min
ONE_AT_A_TIME = pytest.mark.parametrize("launcher", [
    ["launcher=inprocess"],
    pytest.param(["launcher=local", "launcher.max_parallel=1"], marks=pytest.mark.slow),
    pytest.param(["launcher=local", "launcher.max_parallel=1", "launcher.warm_workers=false"], marks=pytest.mark.slow),
], ids=["inprocess", "local-warm-workers", "local-process-per-run"])


@ONE_AT_A_TIME
def test_a_run_an_identical_sweep_finished_after_the_plan_is_counted_skipped_not_complete(tmp_path, launcher):
    """Two identical sweeps started together: the runs one found complete when their turn came (the other had just
    finished them) were counted complete, and its last line said "0 skipped". Made deterministic here: the sweep is
    paused (SIGSTOP) in its first run while the same command's second run is run to its end by hand. The local
    launcher's run processes are not paused with it: they say the run was skipped (cutlab/launch/skipped.py)."""
    runs = tmp_path / "runs"
    grid = ["L=2", "train.epochs=1", "eval.gamma_test=[0]", "wandb.mode=disabled", "progress=false", "threads=1",
            *launcher]
    sweep = subprocess.Popen([sys.executable, "-m", "cutlab", "-m", "train.max_steps_per_epoch=40,2", *grid], cwd=ROOT,
                             env=cutlab_env(runs), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = runs / "L=2,eval.gamma_test=_0_,train.epochs=1,train.max_steps_per_epoch=40" / "history.csv"
    try:
        deadline = time.time() + 300
        while not first.exists() or len(pd.read_csv(first)) < 1:
            assert sweep.poll() is None and time.time() < deadline, "the sweep ended before it could be paused"
            time.sleep(0.05)
        sweep.send_signal(signal.SIGSTOP)
        cutlab(["train.max_steps_per_epoch=2", *grid], runs)  # the second run, finished as by an identical sweep
    finally:
        sweep.send_signal(signal.SIGCONT)
    _, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, stderr[-2000:]
    assert "1 complete, 0 failed, 0 interrupted, 1 skipped (already complete)" in stderr, stderr[-2000:]
    outcome = sweep_outcome(runs)
    assert outcome["skipped"] == 1 and sorted(run["status"] for run in outcome["runs"]) == ["complete", "skipped"]


@ONE_AT_A_TIME
def test_a_run_an_overlapping_sweep_writes_when_its_turn_comes_is_busy_not_failed(tmp_path, launcher):
    """Two overlapping sweeps started together on one runs folder: the run of both that the other began first, after
    this one's plan, was recorded busy by the in-process launcher but failed by the local launcher (its run's
    process exited 2 at the folder's lock), in the progress line, the tally and outcome.json. Made deterministic
    here: this test's process is the other writer, holding that run's folder from the moment the plan is made."""
    runs = tmp_path / "runs"
    grid = ["gamma=0,0.09", "L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]",
            "wandb.mode=disabled", "progress=false", "threads=1", *launcher]
    sweep = subprocess.Popen([sys.executable, "-m", "cutlab", "-m", *grid], cwd=ROOT, env=cutlab_env(runs),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not list((runs / "_sweeps").glob("*/plan.txt")):  # the plan is made: both runs new, none held
        assert sweep.poll() is None and time.time() < deadline, "the sweep ended before its plan was recorded"
        time.sleep(0.02)
    with RunLock(runs / "L=2,eval.gamma_test=_0_,gamma=0.09,train.epochs=1,train.max_steps_per_epoch=2"):
        _, stderr = sweep.communicate(timeout=300)
    holder = f"written by process {os.getpid()} on "
    assert sweep.returncode == 1 and "1 complete, 0 failed, 0 interrupted, 1 busy" in stderr, stderr[-3000:]
    assert re.search(rf"runs done .*; busy +L=2,.*gamma=0\.09,.* {holder}", stderr), stderr[-3000:]  # progress line
    statuses = {run["run_id"].split("gamma=")[1].split(",")[0]: (run["status"], run["error"])
                for run in sweep_outcome(runs)["runs"]}
    assert statuses["0"] == ("complete", None) and statuses["0.09"][0] == "busy", statuses
    assert statuses["0.09"][1].startswith(holder), statuses

# -------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "args, expected",
    [
        (["-m", "gamma=0,0.09", "no_such_key=1,2"], "Could not override 'no_such_key'"),
        (["-m", "train.no_such_key=1"], "Could not override 'train.no_such_key'"),
        (["-m", "gamma=range(0,0)"], "the sweep expands to no runs (gamma=range(0,0) has no values)"),
        (["-m", "model=dust,transformerx"], "unknown model 'transformerx'"),
        (["-m", "gamma=0,0.09", "launcher=slurm", "launcher.profile=nope"], "no SLURM profile 'nope'"),
        (["-m", "--config-name", "no_such_sweep"], "Cannot find primary config 'no_such_sweep'"),
        # each run said so in turn, the sweep's record and runs folder made for nothing
        (["-m", "seed=0,0"], "the sweep lists the run seed=0 twice: give each swept value once"),
        (["-m", "gamma=0,0.09", "train.epochs=abc"], "every run the sweep would run is refused; the first, "
         "gamma=0,train.epochs=abc: train.epochs must be a whole number, got 'abc'; e.g. train.epochs=20 (and 1 more; "
         "--plan lists each)"),
        # data that are not on this machine, where the runs run (not SLURM's): 11 lines, Hydra's launch, every run
        # failed in turn
        (["-m", "gamma=0,0.09", "data=ucsd_ped2", "data.root=/no/such/ped2.npz"], "every run the sweep would run is "
         "refused; the first, data.root=_no_such_ped2.npz,data=ucsd_ped2,gamma=0: data.root=/no/such/ped2.npz does "
         "not exist on this machine"),
    ],
    ids=["unknown-key", "unknown-nested-key", "empty-sweep", "unknown-model", "unknown-profile", "unknown-sweep",
         "repeated-value", "every-run-refused", "data-not-here"],
)
def test_bad_sweeps_get_one_clear_message_before_any_run_starts(tmp_path, args, expected):
    runs = tmp_path / "runs"
    result = cutlab(args, runs, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") <= 2, result.stderr
    assert not runs.exists(), "nothing is written before the sweep is known to be valid"


def test_the_plan_says_which_runs_will_stop_and_why(tmp_path):
    # gamma=-1 was planned 'new' beside the good run, and met its one-line refusal only when the sweep ran it
    result = cutlab(["--plan", "-m", "gamma=0.09,-1"], tmp_path / "runs")
    lines = result.stdout.splitlines()
    assert any(line.split()[1:] == ["new", "gamma=0.09"] for line in lines if line[:1].isdigit()), result.stdout
    assert "1 refused     gamma=-1 (not launched: gamma must be >= 0, got -1; e.g. gamma=0.09)" in lines, result.stdout
    # the totals counted it to run
    assert "# 0 complete (skipped), 1 to run, 1 refused (not launched, each recorded failed: see above)" in lines, \
        result.stdout
    assert not (tmp_path / "runs").exists()


def loaders_line(name: str) -> str:
    """What data=name's loader says with data.root unset: the one line a run met as its task was built."""
    from cutlab.core.data.alpaca import load_examples
    from cutlab.core.data.video import load_video_clips

    with pytest.raises(CutlabError) as error:
        load_examples(None) if name == "alpaca" else load_video_clips(name, None, cache_dir=None, progress=False)
    return str(error.value)


UNSET_ROOTS = ("avenue", "shanghaitech", "ucsd_ped1", "video_folder")  # their yaml's data.root: null until given


def test_the_plan_counts_apart_runs_of_data_whose_root_is_not_set(tmp_path):
    """data=avenue (data.root: null until given) was planned 'new' and stopped only as its task was built; the plan
    counts it refused, in its loader's words. A set with a root (ucsd_ped2, in CUTLAB_DATA_DIR) or with no files to
    read (synthetic) plans as before; so does a SLURM plan's (whose data may be elsewhere, but are not named)."""
    result = cutlab(["--plan", "-m", f"data={','.join(UNSET_ROOTS)},ucsd_ped2,synthetic"], tmp_path / "runs")
    lines = result.stdout.splitlines()
    for name in UNSET_ROOTS:
        assert [line.split()[1] for line in lines if line.endswith(f" data={name} (not launched: "
                                                                  f"{loaders_line(name)})")] == ["refused"], name
    for name in ("ucsd_ped2", "synthetic"):
        assert any(line.split()[1:] == ["new", f"data={name}"] for line in lines if line[:1].isdigit()), result.stdout
    assert "# 0 complete (skipped), 2 to run, 4 refused (not launched, each recorded failed: see above)" in lines, \
        result.stdout
    slurm = cutlab(["--plan", "-m", "--config-name", "fig6_llm", "launcher=slurm", "launcher.profile=gpu"],
                   tmp_path / "runs")
    refused = [line for line in slurm.stdout.splitlines() if line.endswith(f"(not launched: {loaders_line('alpaca')})")]
    assert len(refused) == 2 and "# 0 complete (skipped), 0 to run, 2 refused" in slurm.stdout, slurm.stdout
    assert not (tmp_path / "runs").exists()


def test_a_sweep_of_data_whose_root_is_not_set_is_refused_before_it_launches(tmp_path):
    """Each run started, stopped in its loader's line as its task was built, and was recorded failed."""
    runs = tmp_path / "runs"
    result = cutlab(["-m", "data=avenue,shanghaitech"], runs, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "cutlab: error: every run the sweep would run is refused; the first, data=avenue: "
        f"{loaders_line('avenue')} (and 1 more; --plan lists each)"], result.stderr[-2000:]
    assert not runs.exists(), "nothing is written before the sweep is known to be valid"


def test_a_text_run_with_its_root_cleared_is_refused_in_one_line(tmp_path):
    """data.root=null over IMDb's default was planned 'new' and its run ended in the readers' TypeError traceback."""
    result = cutlab(["data=imdb", "model=ut_text", "data.root=null"], tmp_path / "runs", check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == ["cutlab: error: data.root is not set but imdb needs its files; give "
                                                  "data.root=PATH (or hf:ID), or leave it out for data=imdb's own"]
    assert not (tmp_path / "runs").exists()
