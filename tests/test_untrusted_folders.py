"""Issue 13, as exploits: a run folder from a stranger, two commands that map to one folder, two writers at once, a
kill before the first checkpoint, a full disk (a password on the command line: test_secrets.py). Each test failed on
the code before the fix (in the way its docstring says) and now ends in one clear line, a correct record, or both.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import PED2_TINY, ROOT, require_shared
from helpers.cli import as_another_run, cutlab, folder_fingerprint, start, wait_until
from helpers.contract import cutlab_env
from helpers.mounts import fill, small_tmpfs

# six steps on the embedded synthetic video, a few seconds
TINY = ["L=2", "train.epochs=2", "train.max_steps_per_epoch=3", "eval.gamma_test=[0,0.3]", "wandb.mode=disabled",
        "progress=false", "threads=1"]


def one_line_error(result: subprocess.CompletedProcess, expected: str) -> str:
    """The command stopped with exit 2 and one ``cutlab: error:`` line holding ``expected``, no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("cutlab: error: ") and expected in line, result.stderr[-3000:]
    return line


def history_steps(run_dir: Path) -> list[int]:
    return list(pd.read_csv(run_dir / "history.csv")["step"])


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.tmp")]


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> Path:
    """``runs/base``: a complete tiny run, copied by the tests that tamper with it."""
    runs = tmp_path_factory.mktemp("complete") / "runs"
    cutlab([*TINY, "run_name=base"], runs)
    return runs / "base"


def copied(run_dir: Path, tmp_path: Path, name: str = "base") -> Path:
    """A copy of ``run_dir`` that stands for another run (its own run_uid): the tests tamper with it as such."""
    target = tmp_path / "runs" / name
    shutil.copytree(run_dir, target)
    return as_another_run(target)


# ------------------------------------------------------------------------------ 1. safe loading


class RunsCode:
    """A pickle that runs a shell command when unpickled in full (``weights_only=False``)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_malicious_checkpoint_in_an_unfinished_folder_never_runs(complete_run, tmp_path):
    """Before: ``torch.load(weights_only=False)`` ran the pickle's ``os.system`` as the re-run resumed the folder."""
    run = copied(complete_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    marker = tmp_path / "MARKER"
    torch.save({"trainer": RunsCode(f"touch {marker}"), "epsilon": None, "record_version": 1}, run / "checkpoint.pt")
    torch.load(run / "checkpoint.pt", weights_only=False)  # the exploit is real: a full unpickle runs it
    assert marker.exists()
    marker.unlink()

    result = cutlab([*TINY, "run_name=base"], tmp_path / "runs", check=False)
    one_line_error(result, "holds more than tensors and numbers")
    assert not marker.exists()


@pytest.mark.parametrize("content, expected", [
    (b"[1, 2]", "is not a run summary: it holds a list"),
    (b"\xff\xfe\x00garbage", "is not a readable run summary"),
    (None, "is not a readable run summary"),  # a directory named summary.json
    ("FIFO", "summary.json is a FIFO, not a regular file"),  # the run and the plan waited for a writer for ever
    ("LINK", "summary.json is a symbolic link (to "),  # read as this run's (a link to /dev/zero: memory for ever)
], ids=["json-list", "not-utf8", "directory", "fifo", "link"])
def test_a_summary_that_is_not_one_gets_one_line_in_the_run_and_in_the_plan(complete_run, tmp_path, content,
                                                                           expected):
    """Before: ``[1,2]``, non-UTF-8 bytes or a directory as summary.json were tracebacks (in ``--plan`` too)."""
    run = copied(complete_run, tmp_path)
    (run / "summary.json").unlink()
    if content is None:
        (run / "summary.json").mkdir()
    elif content == "FIFO":
        os.mkfifo(run / "summary.json")
    elif content == "LINK":
        (tmp_path / "theirs.json").write_text((complete_run / "summary.json").read_text())
        (run / "summary.json").symlink_to(tmp_path / "theirs.json")
    else:
        (run / "summary.json").write_bytes(content)
    one_line_error(cutlab([*TINY, "run_name=base"], tmp_path / "runs", check=False), expected)
    plan = cutlab(["--plan", *TINY, "run_name=base,other"], tmp_path / "runs", check=False)
    assert plan.returncode == 0 and "Traceback" not in plan.stderr, plan.stderr[-3000:]
    assert "refused" in plan.stdout + plan.stderr


@pytest.mark.parametrize("damage, expected", [
    ("cut", "does not hold steps 1..6 (the checkpoint's) once each, in order"),
    ("delete", "is missing, but the checkpoint is at step 6: the history of steps 1..6 is lost"),
], ids=["history-cut-short", "history-deleted"])
def test_a_history_that_lost_rows_stops_the_resume_and_the_analysis_counts_no_such_run(complete_run, tmp_path,
                                                                                      damage, expected):
    """Before: the resume kept whatever rows were left (none, or steps 1-2) and wrote steps 7.. after them, and the run
    ended "complete" with a gap in its history; the analysis counted a complete run whose history was cut."""
    from analysis.collect import read_run

    run = copied(complete_run, tmp_path)
    history = run / "history.csv"
    lines = history.read_text().splitlines(keepends=True)
    if damage == "cut":
        history.write_text("".join(lines[:3]))  # the header and steps 1-2 of 6
    else:
        history.unlink()
    row, _, _ = read_run(run)
    if damage == "cut":
        assert row["state"] == "partial" and not row["usable"] and row["problem"].startswith(
            "history.csv lacks training steps 3-6 of 6"), row["problem"]
    else:  # no history at all (stored records leave it out on purpose): still a result, drawn without training curves
        assert row["state"] == "complete" and row["usable"] and not row["has_history"]

    (run / "summary.json").unlink()  # the run now resumes from its last checkpoint, at step 6
    one_line_error(cutlab([*TINY, "run_name=base"], tmp_path / "runs", check=False), expected)
    assert not (run / "summary.json").exists()  # nothing was written: put the history back and the run resumes
    assert (history.read_text() if history.exists() else None) == ("".join(lines[:3]) if damage == "cut" else None)


def test_a_history_of_a_fresh_start_needs_no_earlier_rows(tmp_path):
    """A start step of 0 or None (no checkpoint; the benchmarks pass None) writes a new history: only a checkpoint's
    step asks for earlier rows."""
    from cutlab.run.records import HistoryWriter

    for start_step in (0, None):
        folder = tmp_path / str(start_step)
        folder.mkdir()
        HistoryWriter(folder / "history.csv", 3, start_step).close()
        assert (folder / "history.csv").read_text().startswith("step,")


def test_a_cut_evaluation_or_summary_names_the_fix_that_keeps_the_training_and_it_works(complete_run, tmp_path):
    """Before: a complete run whose eval.csv was cut was skipped by the same command and reported partial with no fix,
    and a cut summary.json was refused with only "move the folder aside", which throws the training away."""
    from analysis.collect import read_run

    run = copied(complete_run, tmp_path)
    evaluation = (run / "eval.csv").read_text()
    (run / "eval.csv").write_text(evaluation[: len(evaluation) // 3])
    row, _, _ = read_run(run)
    assert row["state"] == "partial" and row["problem"].endswith(
        "delete the run's summary.json and run the same command again: it evaluates the run's final checkpoint anew")
    (run / "summary.json").unlink()
    cutlab([*TINY, "run_name=base"], tmp_path / "runs")
    assert (run / "eval.csv").read_text() == evaluation and read_run(run)[0]["state"] == "complete"

    summary = (run / "summary.json").read_text()
    (run / "summary.json").write_text(summary[:40])
    one_line_error(cutlab([*TINY, "run_name=base"], tmp_path / "runs", check=False),
                   "delete it and run the same command again to resume (or re-evaluate) the run from checkpoint.pt")
    (run / "summary.json").unlink()
    cutlab([*TINY, "run_name=base"], tmp_path / "runs")
    assert read_run(run)[0]["state"] == "complete" and (run / "eval.csv").read_text() == evaluation


def test_a_garbage_config_and_a_checkpoint_of_another_model_get_one_line(complete_run, tmp_path):
    """Before: a garbage config.yaml, or a checkpoint whose shapes belong to another config, were tracebacks."""
    run = copied(complete_run, tmp_path)
    (run / "config.yaml").write_text("L: [unclosed\n  - : :\n")
    one_line_error(cutlab([*TINY, "run_name=base"], tmp_path / "runs", check=False), "is not a readable run config")

    deeper = [*TINY[1:], "L=3", "train.epochs=1", "train.max_steps_per_epoch=1", "run_name=deeper"]
    cutlab(deeper, tmp_path / "runs")  # an L=3 run, made unfinished, given the L=2 run's checkpoint
    other = tmp_path / "runs" / "deeper"
    summary = json.loads((other / "summary.json").read_text())
    (other / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    shutil.copy(complete_run / "checkpoint.pt", other / "checkpoint.pt")
    line = one_line_error(cutlab(deeper, tmp_path / "runs", check=False), "does not fit this run's configuration")
    # torch names what does not fit on the lines after its first, which alone said only "Error(s) in loading ..."
    assert "Missing key(s) in state_dict:" in line or "size mismatch for" in line, line


# ------------------------------------------------------------------------------ 3. run identity (2. secrets: test_secrets.py)


@pytest.mark.slow
def test_two_data_root_spellings_never_share_a_folder_or_its_results(tmp_path):
    """Before: ``data.root=/d/a/b.npz`` then ``data.root=/d/a_b.npz`` (other data, the same folder name) answered
    "complete; skipped", exit 0, with the first file's results; so did another ``eval.batch_size``."""
    require_shared(PED2_TINY)
    data = Path(tempfile.mkdtemp(prefix="d", dir="/tmp"))  # short: a folder name over 200 characters gets a hash
    try:
        (data / "a").mkdir()
        for name in ("a/b.npz", "a_b.npz"):
            shutil.copy(PED2_TINY, data / name)
        ped2 = ["data=ucsd_ped2", "data.val_clips=1", "data.frames=4", "data.stride=4", *TINY]
        runs = tmp_path / "runs"
        cutlab([*ped2, f"data.root={data}/a/b.npz"], runs)
        (run,) = runs.iterdir()
        before = folder_fingerprint(run)
        other = cutlab([*ped2, f"data.root={data}/a_b.npz"], runs, check=False)
        one_line_error(other, f"data.root: '{data}/a/b.npz' -> '{data}/a_b.npz'")
        batch = cutlab([*ped2, f"data.root={data}/a/b.npz", "eval.batch_size=8"], runs, check=False)
        one_line_error(batch, "eval.batch_size: 4 -> 8")
        assert folder_fingerprint(run) == before and list(runs.iterdir()) == [run]
    finally:
        shutil.rmtree(data)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../escape"])
def test_run_name_is_one_folder_inside_the_runs_folder(tmp_path, name):
    """Before: ``run_name=..`` wrote the record into the runs folder's parent, ``run_name=.`` into the runs folder
    itself (hiding every other run from the analysis); slashes were silently replaced."""
    runs = tmp_path / "runs"
    one_line_error(cutlab([*TINY, f"run_name={name}"], runs, check=False), "is not a single folder name")
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["runs"]) and not any(runs.rglob("*"))


def test_hydras_job_chdir_is_refused_in_one_line(tmp_path):
    """Before: the run's relative paths.runs_dir was read from inside the run's own folder, and the run refused as
    "not inside paths.runs_dir" (its folder was)."""
    (tmp_path / "work").mkdir()
    result = subprocess.run([sys.executable, "-m", "cutlab", *TINY, "hydra.job.chdir=true", "paths.runs_dir=runs"],
                            cwd=tmp_path / "work", env=cutlab_env(tmp_path / "runs"), capture_output=True, text=True,
                            timeout=600)
    one_line_error(result, "hydra.job.chdir=true: a run works in the folder its command runs in")
    assert not any((tmp_path / "work").iterdir())


@pytest.mark.parametrize("args", [["-m", "gamma=0,0.09", "hydra.sweep.subdir=fixed"], ["hydra.run.dir=elsewhere"],
                                  ["-m", "gamma=0", "hydra.sweep.dir=mine"], ["--plan", "+hydra.run.dir=elsewhere"]])
def test_hydras_folder_keys_are_refused_in_one_line(tmp_path, args):
    """Before: ``-m gamma=0,0.09 hydra.sweep.subdir=fixed`` trained gamma=0 into ``_sweeps/<record>/fixed``, refused
    gamma=0.09 there (another configuration) and reported "0 complete"; the same command trained it again.
    ``hydra.sweep.dir`` gave way to the sweep's own record folder, and ``--plan`` listed ``hydra.run.dir``'s run as
    ``default``."""
    runs = tmp_path / "runs"
    key = args[-1].lstrip("+").partition("=")[0]
    one_line_error(cutlab([*TINY, *args], runs, check=False), f"{key} is cutlab's to set: each run's folder is "
                                                              "paths.runs_dir/<run_name>")
    assert not any(runs.rglob("*")) and not (ROOT / "elsewhere").exists()


# ------------------------------------------------------------------------------ 4. one writer per run folder


def test_ctrl_c_stops_a_run_in_one_line_and_the_same_command_resumes_it(tmp_path):
    """Before: Ctrl-C (SIGINT) ended the run with a Python traceback, exit 1."""
    runs = tmp_path / "runs"
    args = [*TINY, "train.epochs=40", "checkpoint.every_steps=100000", "run_name=ctrlc"]
    log = tmp_path / "ctrlc.log"
    # as from a terminal: SIGINT at its default (a pytest-xdist worker ignores it, and its children would inherit that)
    process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=cutlab_env(runs),
                               stdout=log.open("w"), stderr=subprocess.STDOUT,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    history = runs / "ctrlc" / "history.csv"
    wait_until(lambda: history.exists() and len(history.read_text().splitlines()) >= 4, process, "three steps")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 130
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert "[cutlab] Ctrl-C: stopping after this step, with a checkpoint (Ctrl-C again stops at once)" in text
    assert text.strip().splitlines()[-1] == ("cutlab: interrupted (Ctrl-C); run the same command again to resume "
                                             "ctrlc from its last checkpoint")
    assert json.loads((runs / "ctrlc" / "summary.json").read_text())["status"] == "interrupted"
    # checkpointed at the step it stopped, as SIGTERM does: before, Ctrl-C kept only the last periodic checkpoint
    from cutlab.run.checkpoints import load_checkpoint

    assert load_checkpoint(runs / "ctrlc")["trainer"]["progress"]["step"] == len(history_steps(runs / "ctrlc")) >= 3
    cutlab(args, runs)
    assert history_steps(runs / "ctrlc") == list(range(1, 121))


def test_a_sweep_stopped_by_a_signal_keeps_its_outcome_record(tmp_path):
    """Before: an in-process sweep stopped by SIGTERM (or Ctrl-C) left its record without outcome.json."""
    runs = tmp_path / "runs"
    process = start(["-m", "L=1,2", *TINY[1:], "train.epochs=40", "checkpoint.every_steps=2"], runs,
                    tmp_path / "sweep.log")
    wait_until(lambda: any(runs.glob("L=1,*/checkpoint.pt")), process, "the first run's first checkpoint")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 75  # the exit status of the stop, as for a single run
    (record,) = (runs / "_sweeps").iterdir()
    outcome = json.loads((record / "outcome.json").read_text())
    # the run it never began is listed too, as the local launcher lists it
    assert [(run["run_id"].split(",")[0], run["status"]) for run in outcome["runs"]] == [("L=1", "interrupted"),
                                                                                         ("L=2", "interrupted")]
    assert outcome["runs"][1]["error"] == "not started, the sweep was stopped; run it again to resume"


def test_two_identical_commands_at_once_leave_one_clean_record(tmp_path):
    """Before: both processes wrote the same temporary files (one died with a traceback) and history.csv
    interleaved (steps 1, 2, 3, 4, 8, 5, 9, ...)."""
    runs = tmp_path / "runs"
    args = [*TINY, "train.epochs=8", "checkpoint.every_steps=1", "run_name=twice"]
    run = runs / "twice"
    first = start(args, runs, tmp_path / "first.log")
    # the lock file, or (before the fix, without one) the first history row
    wait_until(lambda: (run / ".lock").exists() or (run / "history.csv").exists(), first, "the first run to start")
    second = start(args, runs, tmp_path / "second.log")
    codes = first.wait(timeout=600), second.wait(timeout=600)
    logs = [(tmp_path / f"{which}.log").read_text() for which in ("first", "second")]
    assert codes == (0, 2), logs
    assert "Traceback" not in logs[0] + logs[1]
    assert f"is being written by process {first.pid} on" in logs[1].strip().splitlines()[-1]
    assert history_steps(run) == list(range(1, 25))
    assert json.loads((run / "summary.json").read_text())["status"] == "complete"
    assert not temp_files(run) and not (run / ".lock").exists()
    again = cutlab(args, runs)
    assert "complete; skipped" in again.stderr  # and the same command afterwards just skips


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_starts_a_fresh_history(tmp_path):
    """Before: the restart (from step 0) appended to the killed attempt's history.csv: steps 1-5, then 1-18."""
    runs = tmp_path / "runs"
    args = [*TINY, "train.epochs=3", "checkpoint.every_steps=1000", "train.max_steps_per_epoch=4", "run_name=early"]
    run = runs / "early"
    process = start(args, runs, tmp_path / "killed.log")
    wait_until(lambda: (run / "history.csv").exists() and len(pd.read_csv(run / "history.csv")) >= 2, process,
               "two history rows")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run / "checkpoint.pt").exists(), "killed too late: the test needs a kill before the first checkpoint"
    cutlab(args, runs)
    assert history_steps(run) == list(range(1, 13))
    assert json.loads((run / "summary.json").read_text())["status"] == "complete"


def test_a_second_lock_on_a_run_folder_names_the_holder_and_temp_files_are_per_process(tmp_path):
    from cutlab.atomic import atomic_file
    from cutlab.errors import CutlabError
    from cutlab.run.lock import RunLock

    run = tmp_path / "run"
    with RunLock(run):
        with pytest.raises(CutlabError, match=f"is being written by process {os.getpid()} on"):
            RunLock(run).acquire()
        with atomic_file(run / "x.json") as one, atomic_file(run / "x.json") as two:
            assert one.handle.name != two.handle.name  # no two writers ever share a temporary file
            one.write(b"1")
            two.write(b"2")
    assert (run / "x.json").read_bytes() in (b"1", b"2") and sorted(p.name for p in run.iterdir()) == ["x.json"]
    (run / ".checkpoint.pt.k1ll3d.tmp").write_bytes(b"half a checkpoint")  # a write a kill cut short
    (run / "notes.tmp").write_text("the user's")
    with RunLock(run):
        assert sorted(p.name for p in run.iterdir()) == [".lock", "notes.tmp", "x.json"]  # the stale copy is gone
    (run / "notes.tmp").unlink()
    with RunLock(tmp_path / "fresh"):
        pass
    assert not (tmp_path / "fresh").exists()  # a lock that created its folder and wrote nothing leaves nothing
    with RunLock(tmp_path / "runs" / "fresh"):
        pass
    assert not (tmp_path / "runs").exists()  # nor the runs folder it made for it
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "earlier").mkdir()
    with RunLock(tmp_path / "runs" / "fresh"):
        pass
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["earlier"]  # a folder it found is kept


# ------------------------------------------------------------------------------ 5. analysis of a stranger's folder


def limited_memory(gigabytes: float):
    limit = int(gigabytes * 2**30)
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_strangers_records_are_reported_unsupported_and_the_report_goes_on(complete_run, tmp_path):
    """Before: ``L: 1e30`` made ``set(range(L+1))`` (killed at 22 GB); ``L: abc`` or a list ``gamma`` aborted the
    whole report with a traceback; a model name holding HTML landed raw in report.md and hid every figure."""
    runs = tmp_path / "runs"
    copied(complete_run, tmp_path, "good")
    edits = {"huge_L": ("\nL: 2\n", "\nL: 1.0e+30\n"), "text_L": ("\nL: 2\n", "\nL: abc\n"),
             "list_gamma": ("\ngamma: 0.09\n", "\ngamma: [0.1, 0.2]\n"),
             "html": ("\n  name: dust\n", "\n  name: '<!-- <img src=x onerror=alert(1)>'\n")}
    for name, (old, new) in edits.items():
        config = copied(complete_run, tmp_path, name) / "config.yaml"
        assert old in config.read_text()
        config.write_text(config.read_text().replace(old, new))
    # run_name=. by an older cutlab: a record at the root of the runs folder must not hide the runs below it
    for file in ("config.yaml", "summary.json", "eval.csv", "history.csv"):
        shutil.copy(complete_run / file, runs / file)

    result = subprocess.run([sys.executable, "-m", "analysis", str(runs), "--out", str(tmp_path / "report")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limited_memory(4),
                            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "6 run folders: 3 complete" in report
    for name, value in (("huge_L", "L = 1e+30"), ("text_L", "L = 'abc'"), ("list_gamma", "gamma = (0.1, 0.2)")):
        row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
        assert "| unsupported |" in row and value in row, row
    assert "<img" not in report and "<!--" not in report and "&lt;!-- &lt;img src=x" in report
    assert report.count("![") >= 3  # the figures are there, not swallowed by an HTML comment


# ------------------------------------------------------------------------------ 6. clean failure


@pytest.mark.parametrize("args, expected", [
    (["device=cuda"], "no usable CUDA GPU"),
    (["device=cuda:3"], "CUDA GPU"),
    (["device=banana"], "device='banana' is not a device"),
    (["eval.gamma_test=[0,inf]"], "eval.gamma_test must list finite numbers >= 0, got inf in it"),
], ids=["cuda", "cuda3", "banana", "inf-gamma"])
def test_unusable_devices_and_infinite_gamma_test_stop_at_the_door(tmp_path, args, expected):
    """Before: tracebacks leaving an empty run folder; ``gamma_test=[0,inf]`` ended "complete" with RMSE nan."""
    if args[0].startswith("device=cuda") and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: device=cuda is valid here")
    runs = tmp_path / "runs"
    one_line_error(cutlab([*TINY, *args], runs, check=False), expected)
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow
def test_a_disk_filled_by_another_process_under_an_offline_wandb_run_ends_in_one_line(tmp_path):
    """W&B writes its offline files and its debug.log into the run folder. Before: once another process had filled
    the disk, W&B's log handler failed once per record and its console capture echoed each traceback back into it
    (21 000 lines of "--- Logging error ---"), and a line said the run's record was complete as the run failed."""
    with small_tmpfs(tmp_path / "disk", "64m") as disk:
        args = [arg for arg in TINY if not arg.startswith(("wandb.mode=", "train.max_steps_per_epoch="))]
        args += ["train.max_steps_per_epoch=20", "checkpoint.every_steps=2", "run_name=full", "wandb.mode=offline"]
        env = cutlab_env(disk / "runs", {"CUTLAB_CACHE_DIR": str(tmp_path / "cache")})
        process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while not (disk / "runs" / "full" / "checkpoint.pt").exists() and process.poll() is None:
            assert time.monotonic() < deadline, "no first checkpoint in 300 s"
            time.sleep(0.02)
        fill(disk)  # the run's later checkpoint, and W&B's own files, find no space
        stdout, stderr = process.communicate(timeout=300)
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        one_line_error(result, "no space left on the device holding")
        assert list((disk / "runs" / "full" / "wandb").glob("offline-run-*")), "W&B wrote its offline run there"
        assert "Logging error" not in stderr and len(stderr.splitlines()) < 80, stderr[-3000:]  # W&B summary: ~40
        assert "is complete" not in stderr, stderr[-3000:]


@pytest.mark.slow
def test_a_full_disk_fails_in_one_line_and_the_same_command_resumes_once_space_is_back(tmp_path):
    """Before: a 54-line chained traceback, no "disk full" sentence, summary left ``running`` and a 2 MB
    ``.checkpoint.pt.tmp`` left behind. Here a tmpfs holds one checkpoint (about 4.7 MB) but not a second."""
    with small_tmpfs(tmp_path / "disk", "8m") as disk:
        runs = disk / "runs"
        args = [*TINY, "checkpoint.every_steps=2", "run_name=full"]
        env = {"CUTLAB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_DIR": str(tmp_path)}
        result = cutlab(args, runs, check=False, env=env)
        one_line_error(result, "no space left on the device holding")
        run = runs / "full"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "failed" and "no space left" in summary["error"]
        assert not temp_files(run) and not [p for p in run.iterdir() if p.name.startswith(".checkpoint")]
        from cutlab.run.checkpoints import load_checkpoint

        assert load_checkpoint(run)["trainer"]["progress"]["step"] == 2  # the last checkpoint, intact

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        resumed = cutlab(args, runs, env=env)
        assert "[cutlab] resuming " in resumed.stderr
        assert json.loads((run / "summary.json").read_text())["status"] == "complete"
        assert history_steps(run) == list(range(1, 7))
