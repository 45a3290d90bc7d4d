"""Parts of the benchmark suite (``benchmarks/run.py``) that call cutlab's own code: they must keep up with it."""

from __future__ import annotations

from conftest import ROOT


def test_the_start_up_sections_epsilon_pass_runs_on_the_config_cutlab_reads(tmp_path, monkeypatch):
    """Section 4 built a config by hand that lacked train.constrained once reference_epsilon read it: the suite
    stopped there ("section 4 start-up failed", exit 1) and its record lost the section."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from suite.sections.startup import time_reference_epsilon
    from suite.setup import Data

    result = time_reference_epsilon(Data(tmp_path / "no_ped2.npz", tmp_path / "cache"))  # synthetic clips
    assert result["seconds"] > 0 and result["data"].startswith("synthetic")
