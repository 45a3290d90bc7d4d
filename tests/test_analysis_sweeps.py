"""The report reads sweep records (``<runs>/_sweeps/<sweep>-<time>/outcome.json``, written by cutlab's own
cutlab.launch.sweep.finish_record): a run that failed before it wrote a run folder is counted and listed with the
failed runs, once, with its latest reason; a record that is not cutlab's is named and not read.

A real sweep with a refused run: tests/test_sweeps.py (test_the_report_lists_a_run_refused_before_it_started).
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.analysis import run_main, write_run

from cutlab.launch.outcome import Outcome
from cutlab.launch.sweep import finish_record

CELL = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, test=15.0, selection=15.0)


def record(runs: Path, name: str, outcomes: list[Outcome]) -> Path:
    folder = runs / "_sweeps" / name
    folder.mkdir(parents=True)
    finish_record(folder, [outcome.as_dict() for outcome in outcomes], skipped=0, seconds=1.0)
    return folder / "outcome.json"


def section(report: str, title: str) -> str:
    return report.split(f"## {title}")[1].split("\n## ")[0]


def test_a_run_refused_before_it_started_is_a_failed_run_of_the_report(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "done", **CELL)
    write_run(runs, "crashed", **CELL, status="failed", evaluation=False, error="NonFiniteLoss: nan at step 3")
    # an earlier sweep refused "refused" for another reason; the later record's reason is the one shown
    record(runs, "sweep-a-20260101T000000.000000Z", [Outcome("refused", "failed", error="the old reason")])
    record(runs, "sweep-a-20260102T000000.000000Z", [
        Outcome("done", "complete", metric="rmse", value=15.0), Outcome("crashed", "failed", error="NonFiniteLoss"),
        Outcome("refused", "failed", error="gamma must be a number, got '<b>x</b> | y'")])
    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0 and "refused: failed before it wrote a run folder: gamma must be a number" in err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "2 run folders and 1 sweep run that left none: 1 complete" in report and ", 2 failed, " in report
    failed = section(report, "Failed runs")
    rows = [line for line in failed.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0] for row in rows] == ["| crashed", "| refused"], failed  # each run once
    assert ("no run record (sweep sweep-a-20260102T000000.000000Z): gamma must be a number, got "
            "'&lt;b&gt;x&lt;/b&gt; \\| y'") in rows[1], "record text is escaped like any other"
    assert "the old reason" not in report and "Sweep records not read" not in report
    what_ran = section(report, "What ran")  # its setting is unknown (it has no config): counted under the table
    assert "| ? |" not in what_ran and "Not in this table: 1 run whose task" in what_ran, what_ran


def test_runs_whose_setting_is_unknown_are_counted_under_what_ran_not_shown_as_question_marks(tmp_path, capsys):
    """Before: runs a sweep refused before they started (and other runs of unknown task, model and data set) made a
    row ``| ? | ? | ? | 0 | 0 | 0 | 2 | 1 | ...`` of the report's "What ran" table. Now they are left out of it and
    counted under it, by why; each stays listed with its reason in Failed runs or Partial and unreadable runs."""
    runs = tmp_path / "runs"
    write_run(runs, "done", **CELL)
    (runs / "unread").mkdir()
    (runs / "unread" / "summary.json").write_text(json.dumps({"record_version": 1, "status": "running"}))
    record(runs, "sweep-f-20260101T000000.000000Z", [
        Outcome("done", "complete", metric="rmse", value=15.0), Outcome("refused", "failed", error="gamma: not a number"),
        Outcome("refused_too", "failed", error="L: not a number"), Outcome("stopped", "interrupted", error="SIGINT")])
    code, _ = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    report = (tmp_path / "report" / "report.md").read_text()
    what_ran = section(report, "What ran")
    rows = [line for line in what_ran.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert code == 0 and [row.split(" | ")[:3] for row in rows] == [["| video", "dust", "ucsd_ped2"]], what_ran
    assert ("Not in this table: 4 runs whose task, model and data set are unknown: 2 failed before writing a run "
            "folder (refused at the start), 1 stopped by a sweep before writing a run folder, 1 with a run folder "
            "whose config.yaml is missing or was not read; each is listed below, under Failed runs or Partial and "
            "unreadable runs, with why.") in what_ran, what_ran
    assert "2 run folders and 3 sweep runs that left none: 1 complete" in what_ran


def test_a_sweep_record_that_is_not_cutlabs_is_named_and_not_read(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "done", **CELL)
    cut = record(runs, "sweep-b-20260101T000000.000000Z", [Outcome("lost", "failed", error="refused")])
    cut.write_text(cut.read_text()[:30])  # cut mid-write
    odd = record(runs, "sweep-c-20260101T000000.000000Z", [Outcome("odd", "failed", error="refused")])
    odd.write_text(json.dumps({"runs": [{"run_id": "odd", "status": "<b>exploded</b>"}]}))
    nameless = record(runs, "sweep-d-20260101T000000.000000Z", [])
    nameless.write_text(json.dumps({"runs": [{"status": "failed", "error": "no id"}, "text"]}))
    listless = record(runs, "sweep-e-20260101T000000.000000Z", [])
    listless.write_text(json.dumps(["not", "a", "record"]))
    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0 and err.count("sweep record not read: ") == 4, err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "1 run folders: 1 complete" in report and "0 failed" in report, "nothing from them is counted"
    failed = section(report, "Failed runs")
    assert "Sweep records not read (their runs are not counted):" in failed and failed.rstrip().endswith("None.")
    lines = {line.split("sweep-")[1][0]: line for line in failed.splitlines() if line.startswith("- ")}
    assert "cannot be read as JSON" in lines["b"]
    assert "run 0 status = '&lt;b&gt;exploded&lt;/b&gt;' is not a valid value" in lines["c"] and "<b>" not in report
    assert "run 0 has no run_id" in lines["d"]
    assert "holds no list of runs" in lines["e"]


def test_a_run_interrupted_before_its_first_record_is_a_partial_run_of_the_report(tmp_path, capsys):
    # Ctrl-C while the run set up: its folder empty, its sweep's record 'interrupted'; the report named it nowhere
    runs = tmp_path / "runs"
    write_run(runs, "done", **CELL)
    (runs / "stopped").mkdir()
    record(runs, "sweep-d-20260101T000000.000000Z", [Outcome("done", "complete", metric="rmse", value=15.0),
                                                     Outcome("stopped", "interrupted", error="KeyboardInterrupt")])
    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0 and "stopped: interrupted before it wrote a run record; run the same sweep command again" in err
    report = (tmp_path / "report" / "report.md").read_text()
    partial = section(report, "Partial and unreadable runs (not counted as results)")
    assert "| stopped | " in partial and "interrupted before it wrote a run record (sweep sweep-d-" in partial, partial
    assert "1 complete" in report and "1 partial" in report
