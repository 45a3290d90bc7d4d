"""A file system that fails under a run (its folder turned read-only, deleted or moved while it trains) and paths
that are not the folders they name: one line naming the cause and the fix (exit 2), never a traceback, and the same
command goes on once the cause is gone."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from cutlab.atomic import DiskFull, FolderUnwritable, FolderVanished, told_for, write_atomic
from cutlab.errors import CutlabError
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
    assert "[cutlab] resuming " in resumed.stderr
    assert complete_steps(runs / "ro") == list(range(1, 31))


def test_a_record_written_into_a_deleted_folder_names_it_in_one_line(tmp_path):
    """Before: FileNotFoundError naming the temporary file ('.summary.json.x04jpz51.tmp'), as a traceback."""
    folder = tmp_path / "run"
    folder.mkdir()
    folder.rmdir()  # rm -rf of the run folder while the run trains
    with pytest.raises(FolderVanished) as caught:
        write_atomic(folder / "summary.json", "{}")
    assert str(caught.value) == (f"{folder} vanished or was moved while this command wrote summary.json there; run the "
                                 "same command again: it starts the run there anew (or move the folder back first, and "
                                 "it resumes from the folder's last checkpoint)")


def test_a_folder_failure_met_by_an_evaluation_says_what_the_evaluation_does_not_what_a_run_does(tmp_path):
    """Before: cutlab-eval retold a full disk in its own words, but a folder turned read-only, deleted or moved
    under it ended with a run's "the run resumes from its last checkpoint" (nothing resumes in an evaluation)."""
    folder = tmp_path / "evaluations"
    then = "the evaluations written so far are kept, and it does the rest"
    vanished = told_for(FolderVanished(folder / "metrics.csv"), then)
    assert str(vanished) == (f"{folder} vanished or was moved while this command wrote metrics.csv there; move the "
                             f"folder back and run the same command again: {then}")
    read_only_now = OSError(errno.EROFS, "Read-only file system")
    unwritable = told_for(FolderUnwritable(folder / "metrics.csv", read_only_now), then)
    assert str(unwritable) == (f"{folder} became read-only while this command wrote metrics.csv there (read-only "
                               f"file system); make it writable and run the same command again: {then}")
    assert isinstance(unwritable, OSError) and unwritable.errno == errno.EROFS  # the analysis's own fix still applies
    full = str(told_for(DiskFull(folder / "metrics.csv"), then))
    assert full.endswith(f"free space there and run the same command again: {then}") and "runs_dir" not in full
    other = CutlabError("not a folder failure")
    assert told_for(other, then) is other


def test_a_study_folder_turned_read_only_stops_the_search_report_in_the_searchs_words(tmp_path):
    """Before: the report's write ended with a run's "the run resumes from its last checkpoint"."""
    import optuna

    from cutlab.search.report import write_report

    study_dir = tmp_path / "study"
    study_dir.mkdir()
    study = optuna.create_study(study_name="s")
    write_report({None: study}, study_dir)
    before = (study_dir / "search_report.json").read_text()
    with read_only(study_dir), pytest.raises(FolderUnwritable) as caught:
        write_report({None: study}, study_dir)
    assert str(caught.value) == (f"{study_dir} became read-only while this command wrote search_report.json there "
                                 "(read-only file system); make it writable and run the same command again: the "
                                 "search goes on where it stopped, its finished trials kept")
    assert (study_dir / "search_report.json").read_text() == before


@pytest.mark.slow
def test_a_run_folder_moved_mid_run_stops_in_one_line_and_the_same_command_runs_it_anew(tmp_path):
    """Before: a FileNotFoundError traceback naming a temporary file in the vanished folder, exit 1."""
    process, runs, log = started(tmp_path, "moved")
    try:
        (runs / "moved").rename(runs / "elsewhere")
        line = last_line(log, process)
    finally:
        process.kill()
    assert line.startswith(f"cutlab: error: {runs / 'moved'} vanished or was moved while this command wrote "), line
    assert (runs / "elsewhere" / "checkpoint.pt").is_file(), "what the run wrote before is kept where it was moved"
    cutlab([*TINY, "run_name=moved"], runs)
    assert complete_steps(runs / "moved") == list(range(1, 31))



RUN = "train.epochs=2,train.max_steps_per_epoch=3"  # the folder of the run these overrides name


@pytest.mark.parametrize("where", ["runs", "run"])
@pytest.mark.parametrize("what", ["dangling link", "file"])
def test_a_runs_or_run_folder_that_is_a_file_or_a_dangling_link_is_refused_in_one_line(tmp_path, where, what):
    """Before: Hydra's FileExistsError traceback as it made the run's folder (a runs folder that is a file was
    refused already). The command's own check, in this process (the command prints its CutlabError as one line)."""
    from cutlab.errors import CutlabError
    from cutlab.launch.plan import check_run, parse_command

    runs = tmp_path / "runs"
    target = runs if where == "runs" else runs / RUN
    target.parent.mkdir(exist_ok=True)
    if what == "file":
        target.write_text("")
    else:
        target.symlink_to("nowhere")
    problem = f"{target} is a file" if what == "file" else \
        f"{target} is a symbolic link to nowhere, which does not exist"
    with pytest.raises(CutlabError) as refused:
        check_run(parse_command([f"paths.runs_dir={runs}", *RUN.split(","), "wandb.mode=disabled"]))
    if where == "runs":
        assert str(refused.value).startswith(f"paths.runs_dir={runs} cannot hold run folders: {problem}; ")
    else:
        assert str(refused.value) == (f"the run's folder {problem}; move it aside (or pass run_name=<new name>) so "
                                      "this run gets a folder of its own")


def test_a_file_where_a_sweeps_run_folder_goes_is_refused_in_the_plan_and_before_any_inprocess_run(tmp_path):
    """Before: the plan called that run new, and Hydra's basic launcher (launcher=inprocess, the default), which makes
    every run's folder, a refused one's too, stopped the sweep there in a FileExistsError traceback after the runs
    before it had run, calling the ones after it interrupted."""
    runs = tmp_path / "runs"
    sweep = ["-m", "gamma=0,0.09", *TINY]
    planned = cutlab(["--plan", *sweep], runs).stdout.splitlines()
    ids = [line.split()[2] for line in planned if line[:1].isdigit()]
    runs.mkdir()
    (runs / ids[1]).write_text("")
    planned = cutlab(["--plan", *sweep], runs).stdout.splitlines()
    assert f"1 refused     {ids[1]} (not launched: the run's folder {runs / ids[1]} is a file; move it aside (or pass " \
           "run_name=<new name>) so this run gets a folder of its own)" in planned, planned
    result = cutlab(sweep, runs, check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"cutlab: error: {runs / ids[1]} is a file, where a run of this sweep keeps its record; move it aside and run "
        "the same command again (launcher=inprocess makes every run's folder and would stop there; launcher=local "
        "runs the other runs without it)"], result.stderr[-3000:]
    assert [p.name for p in runs.iterdir()] == [ids[1]], "no run started"


def test_a_sweeps_record_folder_that_is_a_file_is_refused_in_one_line(tmp_path):
    """Before: a NotADirectoryError traceback as the sweep made its record folder, exit 1."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "_sweeps").write_text("")
    result = cutlab(["-m", "gamma=0,0.09", *TINY], runs, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (f"cutlab: error: {runs / '_sweeps'} is a file, where sweeps keep "
                                                      "their records; move it aside and run the same command again")
    assert [p.name for p in runs.iterdir()] == ["_sweeps"], "no run started"


def test_a_lock_file_that_is_a_folder_is_refused_in_one_line(tmp_path):
    """Before: an IsADirectoryError traceback as the run (even a complete one's copy) took its folder's lock."""
    from cutlab.errors import CutlabError
    from cutlab.run.lock import RunLock

    (tmp_path / ".lock").mkdir()
    with pytest.raises(CutlabError) as refused:
        RunLock(tmp_path).acquire()
    assert str(refused.value) == (f"{tmp_path / '.lock'} is a folder, not a lock file cutlab wrote; remove it and run "
                                  "the same command again")
