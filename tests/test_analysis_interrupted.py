"""A report folder holds one report whole: a report stopped midway (Ctrl-C, a full disk) leaves the earlier one as it
was, never its report.md beside new tables and figures, nor one figure's PNG beside another input's PDF."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from helpers.analysis import write_run

CELL = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, selection=15.0)


def contents(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha1(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def write_runs(root: Path, test: float) -> Path:
    for constrained in (True, False):
        write_run(root, f"{'c' if constrained else 'e'}_{test:g}", **CELL, constrained=constrained, test=test)
    return root


def test_a_report_stopped_midway_leaves_the_earlier_report_whole(tmp_path, monkeypatch):
    from analysis import report
    from analysis.collect import collect_runs

    out = tmp_path / "report"
    report.write_report(collect_runs(write_runs(tmp_path / "first", 14.0)), out)
    earlier = contents(out)
    assert "tables/table3_video_mean_rmse.csv" in earlier and any(name.endswith(".pdf") for name in earlier)
    drawn = report.make_figures

    def stopped_after_drawing(*args, **kwargs):  # every figure drawn, then Ctrl-C before report.md is written
        drawn(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "make_figures", stopped_after_drawing)
    with pytest.raises(KeyboardInterrupt):
        report.write_report(collect_runs(write_runs(tmp_path / "second", 18.0)), out)
    assert contents(out) == earlier  # no staging folder left behind either
    monkeypatch.setattr(report, "make_figures", drawn)
    written = report.write_report(collect_runs(tmp_path / "second"), out)
    assert "18.000" in (out / "tables" / "table3_video_mean_rmse.md").read_text()
    assert written.path == out / "report.md" and all(path.parent == out / "figures" and path.is_file()
                                                     for figure in written.figures for path in figure.paths)
    assert written.html == out / "report.html" and set(contents(out)) >= {"report.md", "report.html"}
    assert not [path for path in out.iterdir() if path.name.startswith(".report-")]


def test_a_staging_folder_left_by_a_killed_report_is_removed_and_a_live_ones_kept(tmp_path):
    from analysis.collect import collect_runs
    from analysis.report import write_report

    out = tmp_path / "report"
    killed, live = out / ".report-999999999-abc", out / f".report-{os.getppid()}-abc"  # no such pid; pytest's parent
    for folder in (killed, live):
        (folder / "tables").mkdir(parents=True)
    write_report(collect_runs(write_runs(tmp_path / "runs", 14.0)), out)
    assert not killed.exists() and live.is_dir()


def test_python_m_analysis_ends_a_ctrl_c_in_one_line_as_cutlab_analysis_does(tmp_path, monkeypatch, capsys):
    """The README's ``python -m analysis`` (in a clone) ended a Ctrl-C in a 60-line traceback, exit -2, where the
    installed cutlab-analysis says one line and exits 130. The Ctrl-C lands as the runs are read."""
    import logging
    import runpy
    import signal
    import sys

    import analysis.collect

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis.collect, "collect_runs", pressed)
    runs = write_runs(tmp_path / "runs", 14.0)
    monkeypatch.setattr(sys, "argv", ["analysis", str(runs), "--out", str(tmp_path / "r")])
    kept = signal.getsignal(signal.SIGINT), sys.unraisablehook, logging.raiseExceptions  # what the command sets
    try:
        runpy.run_module("analysis", run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        code = exit.code
    except KeyboardInterrupt:  # not pytest's to see: it would end the whole session
        code = "a traceback"
    finally:
        signal.signal(signal.SIGINT, kept[0])
        sys.unraisablehook, logging.raiseExceptions = kept[1], kept[2]
    assert code == 130
    assert capsys.readouterr().err.splitlines() == [
        "analysis: interrupted (Ctrl-C); run the same command again to go on"]
