"""Under CI=true a test whose real data or server is missing fails instead of skipping (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.parametrize("ci, outcome", [("true", "1 failed"), ("", "1 skipped")])
def test_missing_shared_data_fails_under_ci_and_skips_elsewhere(tmp_path, ci, outcome):
    (tmp_path / "test_needs_data.py").write_text(
        "from conftest import require_shared\nfrom pathlib import Path\n\n"
        "def test_needs_data():\n    require_shared(Path('/nonexistent/ped2.npz'))\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT / "tests")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                             str(tmp_path / "test_needs_data.py")], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert outcome in result.stdout, result.stdout[-2000:]
    if ci:
        assert "CI=true but /nonexistent/ped2.npz is missing" in result.stdout
