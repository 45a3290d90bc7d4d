"""A project folder's mix as the analysis meets it: a report's W&B-rebuilt records and backups beside the runs they
copy, a run still training, a run killed mid-training. Each test failed at f7e212d, as its docstring says."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from test_hostile_records import finished  # noqa: F401 - the fixture: a complete tiny run, copied by the tests


def _summary(run: Path, **changes) -> dict:
    record = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**record, **changes}))
    return record


def _problems(runs) -> dict[str, str]:
    return {run: problem for run, problem in zip(runs["run"], runs["problem"]) if problem}


def _assert_counted_once(runs, kept: str, copy: str) -> None:
    assert list(runs.loc[runs["usable"], "run"]) == [kept]
    assert _problems(runs) == {copy: f"a copy of run {kept} (the same run_uid in its provenance.json, or the same W&B "
                                     f"run), counted once, as {kept}; move the copy out of the analysed folders"}


def test_a_record_rebuilt_from_wandb_beside_its_run_is_that_run_once(finished, tmp_path):
    """Before: a --wandb-offline report kept in the runs folder left its rebuilt records (no provenance.json) under
    wandb_records/, and the next analysis counted each as another complete run of its cell."""
    from analysis.collect import collect_runs

    original = Path(shutil.copytree(finished, tmp_path / "runs" / "a"))
    rebuilt = Path(shutil.copytree(finished, tmp_path / "runs" / "report" / "wandb_records" / "a"))
    (rebuilt / "provenance.json").unlink()
    for run in (original, rebuilt):
        _summary(run, wandb_id="qca34wqq")
    _assert_counted_once(collect_runs(tmp_path / "runs").runs, "a", "report/wandb_records/a")


def test_the_copy_holding_cutlab_evals_records_is_the_one_counted(finished, tmp_path):
    """Before: the first copy by name was kept, so a backup sorting before the original (Backup/ < base/) was counted
    and the original's cutlab-eval records left out of the report without a word."""
    from analysis.collect import collect_runs

    original = Path(shutil.copytree(finished, tmp_path / "runs" / "run"))
    shutil.copytree(finished, tmp_path / "runs" / "Backup" / "run")
    (original / "evaluations" / "other-data").mkdir(parents=True)
    (original / "evaluations" / "other-data" / "evaluation.json").write_text("{}")
    _assert_counted_once(collect_runs(tmp_path / "runs").runs, "run", "Backup/run")


def test_what_ran_counts_a_copys_steps_once_and_a_stopped_runs_steps_so_far(finished, tmp_path):
    """Before: "What ran" added a copy's steps and wall time to its run's, and gave a run stopped before its final
    summary 0 steps, where the report says partial runs count their steps so far."""
    from analysis.collect import collect_runs
    from analysis.report import write_report

    shutil.copytree(finished, tmp_path / "runs" / "a")
    shutil.copytree(finished, tmp_path / "runs" / "b")
    stopped = Path(shutil.copytree(finished, tmp_path / "runs" / "stopped"))
    (stopped / "provenance.json").write_text(json.dumps({"run_uid": "f" * 32}))
    steps = _summary(stopped, status="interrupted", steps=None)["steps"]
    runs = collect_runs(tmp_path / "runs")
    assert runs.runs.set_index("run").loc["stopped", "steps"] == steps
    write_report(runs, tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"In all: {2 * steps} training steps" in report, report[:3000]


def test_a_run_being_trained_now_is_said_to_be_so_not_sent_back_to_its_command(finished, tmp_path):
    """Before: a run still training read as one killed mid-training ("run the same command again to resume it"),
    which the live run's lock would refuse."""
    from analysis.collect import collect_runs

    live = Path(shutil.copytree(finished, tmp_path / "runs" / "live"))
    _summary(live, status="running")
    descriptor = os.open(live / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.write(descriptor, b"process 4242 on node7")
        problem = _problems(collect_runs(tmp_path / "runs").runs)["live"]
    finally:
        os.close(descriptor)
    assert problem == "being trained now by process 4242 on node7: not finished yet; analyse it once that process ends"
    assert "run the same command again" in _problems(collect_runs(tmp_path / "runs").runs)["live"]


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_lock_that_is_no_file_is_not_waited_on_nor_followed(finished, tmp_path, kind):
    """A folder from elsewhere whose .lock is a FIFO: probing it for a live trainer would wait for ever (cutlab-eval's
    probe of a run not finished did); a link's target is no lock of this run's."""
    import threading

    from analysis.collect import collect_runs

    run = Path(shutil.copytree(finished, tmp_path / "runs" / "odd"))
    _summary(run, status="running")
    if kind == "fifo":
        os.mkfifo(run / ".lock")
    else:
        held = tmp_path / "elsewhere.lock"
        held.write_text("process 1 on elsewhere")
        (run / ".lock").symlink_to(held)
    descriptor = os.open(tmp_path / "elsewhere.lock", os.O_RDWR) if kind == "link" else None
    if descriptor is not None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    found: list = []
    reader = threading.Thread(target=lambda: found.append(collect_runs(tmp_path / "runs").runs), daemon=True)
    reader.start()
    reader.join(timeout=30)
    if descriptor is not None:
        os.close(descriptor)
    assert found, "the analysis waited on the .lock"
    assert "run the same command again" in _problems(found[0])["odd"]
