"""Parts of the benchmark suite (``benchmarks/run.py``) that call cutlab's own code: they must keep up with it."""

from __future__ import annotations

import pytest

from conftest import ROOT


def test_the_start_up_sections_epsilon_pass_runs_on_the_config_cutlab_reads(tmp_path, monkeypatch):
    """Section 4 built a config by hand that lacked train.constrained once reference_epsilon read it: the suite
    stopped there ("section 4 start-up failed", exit 1) and its record lost the section."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from suite.sections.startup import time_reference_epsilon
    from suite.setup import Data

    result = time_reference_epsilon(Data(tmp_path / "no_ped2.npz", tmp_path / "cache"))  # synthetic clips
    assert result["seconds"] > 0 and result["data"].startswith("synthetic")


def test_the_suites_ut_and_dust_are_built_from_their_yaml_as_runs_build_them(monkeypatch):
    """The suite's UT was UT(depth=3) with the class's own defaults (beta 0.5, feed-forward init std 0.02), values
    conf/model/ut.yaml had rejected: a model no run trains."""
    from omegaconf import OmegaConf

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from suite.harness import DEPTH
    from suite.setup import make_model

    ut_yaml = OmegaConf.load(ROOT / "conf" / "model" / "ut.yaml")
    ut = make_model("ut")
    assert (ut.depth, ut.attention_step) == (DEPTH, ut_yaml.attention_step)
    assert float(ut.weights[0].std()) == pytest.approx(ut_yaml.feedforward_init_std, rel=0.05)
    shared, per_layer = make_model("dust"), make_model("dust", per_layer=True)
    assert len(list(shared.parameters())) == 1 < len(list(per_layer.parameters()))  # one D, or one per layer
