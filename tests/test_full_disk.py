"""A full disk under each command's own writes (a run's lock, a sweep's record, the analysis's report, cutlab-eval's
evaluation): one line, not a traceback, and nothing left that a later command would take for a result. The disk is
a 1 MB tmpfs filled to the last byte (tests/helpers/mounts.py); a disk that fills in the middle of a run:
tests/test_untrusted_folders.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from helpers.analysis import run_main, write_run
from helpers.cli import cutlab, folder_fingerprint
from helpers.contract import cutlab_env
from helpers.mounts import fill, full_disk, small_tmpfs  # noqa: F401 - a fixture

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.3]", "wandb.mode=disabled",
        "progress=false", "threads=1"]


def installed(command: str, args: list[str], runs: Path) -> subprocess.CompletedProcess:
    """An installed command (cutlab-analysis, cutlab-eval) through its entry point, from this checkout."""
    entry = f"import sys; from cutlab.commands import {command.replace('-', '_')} as main; main()"
    return subprocess.run([sys.executable, "-c", entry, *args], cwd=ROOT, env=cutlab_env(runs, None),
                          capture_output=True, text=True, timeout=600)


def error_lines(result) -> list[str]:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return [line for line in result.stderr.splitlines() if ": error: " in line]


def test_a_run_and_a_sweep_on_a_full_disk_stop_in_one_line_leaving_no_folder(tmp_path, full_disk):
    """Before: the run's lock write was a 21-line OSError traceback that left the run's folder holding .lock; the
    sweep's record a 20-line one."""
    runs = full_disk / "runs"
    runs.mkdir()
    fill(full_disk)
    env = {"CUTLAB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_DIR": str(tmp_path)}
    lines = error_lines(cutlab([*TINY, "run_name=full"], runs, check=False, env=env))
    assert lines == [f"cutlab: error: no space left on the device holding {runs / 'full'} (while writing .lock); "
                     "free space there (or point paths.runs_dir elsewhere) and run the same command again: the run "
                     "resumes from its last checkpoint"]
    assert list(runs.iterdir()) == []
    lines = error_lines(cutlab(["-m", *TINY, "gamma=0.09,0.15"], runs, check=False, env=env))
    assert len(lines) == 1 and lines[0].startswith(f"cutlab: error: no space left on the device holding {runs}"), lines
    assert lines[0].endswith("run the same command again: no run of this sweep has started yet"), lines
    assert not list((runs / "_sweeps").glob("*/*")), "a sweep record without its plan and outcome was left"


def test_a_report_and_an_evaluation_on_a_full_disk_stop_in_one_line(tmp_path, full_disk):
    """Before: the analysis was a 27-line traceback, and cutlab-eval's line said its run would resume from a
    checkpoint, where nothing resumes."""
    runs = tmp_path / "runs"
    cutlab([*TINY, "run_name=done"], runs)
    filler = fill(full_disk)
    lines = error_lines(installed("cutlab-analysis", [str(runs), "--out", str(full_disk / "report")], runs))
    assert len(lines) == 1 and lines[0].startswith("cutlab-analysis: error: no space left on the device"), lines
    filler.unlink()
    shutil.rmtree(full_disk / "report", ignore_errors=True)
    evaluations = runs / "done" / "evaluations"  # where cutlab-eval writes: the full disk mounted there
    evaluations.mkdir()
    subprocess.run(["mount", "--bind", str(full_disk), str(evaluations)], check=True)
    try:
        fill(full_disk)
        lines = error_lines(installed("cutlab-eval", [str(runs / "done"), "eval.gamma_test=[0.5]"], runs))
    finally:
        subprocess.run(["umount", "-l", str(evaluations)], check=False)
    assert len(lines) == 1 and "no space left on the device holding" in lines[0], lines
    assert lines[0].endswith("run the same command again: the evaluations written so far are kept, and it does the "
                             "rest") and "paths.runs_dir" not in lines[0], lines


def test_a_report_on_a_disk_that_fills_keeps_the_earlier_report_and_leaves_no_cut_file(tmp_path, capsys):
    """Before: an earlier report's figures were deleted first, the new ones written onto their paths until the disk
    filled, and the figure cut off listed as "could not be drawn (OSError: [Errno 28] ...)" with exit 0; on a disk
    full from the start, report.md and the PNGs were left empty, and the line named no folder."""
    runs = tmp_path / "runs"
    for gamma in (0.0, 0.09):
        for constrained in (True, False):
            write_run(runs, f"dust_g{gamma}_{'con' if constrained else 'erm'}", model="dust", dataset="ucsd_ped2", L=3,
                      gamma=gamma, constrained=constrained, test=15.0 + gamma, selection=15.0)
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        report = disk / "report"
        assert run_main(str(runs), "--out", str(report), capsys=capsys)[0] == 0
        earlier = folder_fingerprint(report)
        assert any(name.endswith(".pdf") for name in earlier), earlier
        filler = fill(disk)
        lines = report_errors(runs, report, capsys)
        assert len(lines) == 1 and lines[0].startswith(f"cutlab-analysis: error: no space left on the device "
                                                       f"holding {report}"), lines
        assert "(or point --out elsewhere)" in lines[0] and lines[0].endswith("it writes the whole report anew"), lines
        assert folder_fingerprint(report) == earlier, "the earlier report was changed"
        filler.unlink()
        shutil.rmtree(report)
        fill(disk)
        lines = report_errors(runs, report, capsys)
        assert len(lines) == 1 and f"holding {report}" in lines[0], lines
        assert [path for path in report.rglob("*") if path.is_file()] == [], "a file cut off or left empty"


def report_errors(runs: Path, report: Path, capsys) -> list[str]:
    """The error lines of cutlab-analysis RUNS --out REPORT, run in this process (no torch to import: seconds)."""
    code, err = run_main(str(runs), "--out", str(report), capsys=capsys)
    assert code == 2 and "Traceback" not in err, err[-3000:]
    return [line for line in err.splitlines() if ": error: " in line]
