"""tests/conftest.py: under CI=true a test whose real data or server is missing fails instead of skipping; a run
without -m includes a sample of the slow tests, chosen by commit."""

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


def run_sample(tmp_path, *args: str, seed: str) -> str:
    """pytest on a file of one quick and five slow tests, with this suite's conftest as a plugin."""
    tests = "".join(f"@pytest.mark.slow\ndef test_slow_{k}():\n    pass\n\n" for k in range(5))
    (tmp_path / "test_sampled.py").write_text(f"import pytest\n\ndef test_quick():\n    pass\n\n{tests}")
    env = {**os.environ, "CUTLAB_SLOW_SEED": seed, "PYTHONPATH": str(ROOT / "tests")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "conftest",
                             "--rootdir", str(tmp_path), "-o", "markers=slow", *args, str(tmp_path / "test_sampled.py")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    return result.stdout


def passed(stdout: str) -> set[str]:
    return {line.split("::")[1].split()[0] for line in stdout.splitlines() if line.endswith("PASSED") or " PASSED " in line}


def test_a_default_run_includes_a_sample_of_the_slow_tests_chosen_by_its_seed(tmp_path):
    first = run_sample(tmp_path, "--slow-sample", "2", seed="commit-a")
    assert len(passed(first)) == 3 and "test_quick" in passed(first) and "3 deselected" in first
    assert "slow tests: 2 of 5 in this run" in first and "CUTLAB_SLOW_SEED=commit-a" in first
    assert passed(run_sample(tmp_path, "--slow-sample", "2", seed="commit-b")) != passed(first), "another sample"
    assert passed(run_sample(tmp_path, "--slow-sample", "0", seed="commit-a")) == {"test_quick"}
    assert len(passed(run_sample(tmp_path, "-m", "slow or not slow", seed="commit-a"))) == 6, "-m decides alone"


@pytest.mark.slow  # the sample itself: test_a_default_run_includes_a_sample_of_the_slow_tests_... runs by default
def test_parallel_workers_run_the_same_sample_and_name_it(tmp_path):
    """`make test` runs the suite on pytest-xdist workers: each collects alone, so each must choose the same sample
    (xdist stops a run whose workers collected different tests), and the controller names it."""
    serial = run_sample(tmp_path, "--slow-sample", "2", seed="commit-a")
    parallel = run_sample(tmp_path, "--slow-sample", "2", "-n", "2", seed="commit-a")
    assert passed(parallel) == passed(serial) and len(passed(parallel)) == 3
    assert "slow tests: 2 of 5 in this run" in parallel and "CUTLAB_SLOW_SEED=commit-a" in parallel
