"""Run folders whose record files are not what cutlab writes, read by cutlab-analysis. Each test failed on the code
before its fix, as its docstring says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from helpers.analysis import write_run

READ = ("from analysis.collect import collect_runs; runs = collect_runs(sys.argv[1]).runs; "
        "print(*(f'{r.run}: {r.state}: {r.problem}' for r in runs.itertuples() if not r.usable), sep='\\n')")

CELL = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, selection=15.0)


@pytest.mark.parametrize("name, make", [
    ("eval.csv", lambda path: path.symlink_to("/dev/zero")),
    ("history.csv", lambda path: os.mkfifo(path)),
])
def test_a_record_file_that_is_a_link_or_a_fifo_is_refused_in_one_line_not_read(tmp_path, name, make):
    """Before: ``eval.csv -> /dev/zero`` or a FIFO ``history.csv`` in a run folder had cutlab-analysis read for ever
    (killed here after 20 s); now the run is not counted, with one line naming the file (the warning
    cutlab-analysis prints for it), and the others are read."""
    runs = tmp_path / "runs"
    write_run(runs, "good", **CELL, test=14.9, seed=0)
    bad = write_run(runs, "bad", **CELL, test=14.1, seed=1)
    (bad / name).unlink(missing_ok=True)
    make(bad / name)
    # a process of its own, stopped after 20 s: read in this one, /dev/zero would fill its memory
    result = subprocess.run([sys.executable, "-c", f"import sys; {READ}", str(runs)], cwd=ROOT, capture_output=True,
                            text=True, timeout=20)
    assert result.returncode == 0, result.stderr[-3000:]
    kind = "is a symbolic link (to /dev/zero)" if name == "eval.csv" else "is a FIFO, not a regular file"
    assert result.stdout.splitlines() == [f"bad: unsupported: {bad / name} {kind}: not a record file cutlab wrote, so "
                                          "nothing of the run is read; put the run's own file there, or move the run "
                                          "folder out of the analysed folders"]
