"""``benchmarks/run.py --merge``, the README's way to add a GPU's section 8 to the CPU suite's record."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="section 8 measures on a CUDA GPU; here it would run for minutes")
def test_a_merge_that_measured_nothing_keeps_the_record_and_reports_its_own_time(tmp_path):
    # `python benchmarks/run.py --only 8 --merge` on a machine without a GPU took 8 s and said "wrote ... in 8.9 min":
    # the recorded base run's wall time, read back from the merged record
    out = tmp_path / "results.json"
    shutil.copy(ROOT / "benchmarks" / "results.json", out)
    before = json.loads(out.read_text())
    result = subprocess.run([sys.executable, "benchmarks/run.py", "--only", "8", "--merge", "--out", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    minutes = float(re.search(r"wrote .* in ([0-9.]+) min", result.stdout + result.stderr).group(1))
    assert minutes < 2 and before["wall_s"] > 120 * 2
    after = json.loads(out.read_text())
    assert after["figures"] == before["figures"] and after["wall_s"] == before["wall_s"]
