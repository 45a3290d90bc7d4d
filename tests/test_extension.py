"""A new model is one module and one yaml, outside the package: ``python -m cutlab model=<it>`` trains and evaluates it.

The module and its config live in a temporary folder: the config joins Hydra's search path (``hydra.searchpath``
or ``--config-dir``), the module joins PYTHONPATH, and the model config's ``_target_`` names the class.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from helpers.cli import cutlab

MODULE = '''
import torch
from torch import nn

from cutlab.core.models import LayerwiseModel


class TemporalSmoother(LayerwiseModel):
    """Phi_0 = x~; Phi_l = Phi_{l-1} + a_l (mean over frames of Phi_{l-1} - Phi_{l-1}): one learned step per layer."""

    def __init__(self, depth: int, step: float = 0.3) -> None:
        super().__init__()
        self.depth = depth
        self.steps = nn.Parameter(torch.full((depth,), float(step)))

    def forward(self, tokens: torch.Tensor) -> list[torch.Tensor]:  # [B, T, P, n] patch tokens
        outputs = [tokens]
        for step in self.steps:
            previous = outputs[-1]
            outputs.append(previous + step * (previous.mean(dim=1, keepdim=True) - previous))
        return outputs
'''

CONFIG = '''
_target_: smoothing.TemporalSmoother
name: smoother
task: video
step: 0.3
paper:
  alpha: 0.25
  epsilon: 1.0
'''


@pytest.mark.parametrize("how", ["hydra.searchpath", "--config-dir"])
def test_a_model_of_ones_own_trains_and_evaluates_with_a_complete_record(tmp_path, how):
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "smoothing.py").write_text(MODULE)
    (outside / "conf" / "model" / "smoother.yaml").write_text(CONFIG)
    where = ([f"hydra.searchpath=[file://{outside / 'conf'}]"] if how == "hydra.searchpath"
             else ["--config-dir", str(outside / "conf")])
    runs = tmp_path / "runs"
    env = {"PYTHONPATH": os.pathsep.join([str(outside), str(ROOT)])}
    cutlab([*where, "model=smoother", "L=2", "train.epochs=1", "train.max_steps_per_epoch=3", "eval.gamma_test=[0,0.5]",
            "wandb.mode=disabled", "threads=1"], runs, env=env)

    (run,) = [p for p in runs.iterdir() if not p.name.startswith("_")]
    assert run.name == "L=2,eval.gamma_test=_0,0.5_,model=smoother,train.epochs=1,train.max_steps_per_epoch=3"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["steps"] == 3 and summary["metric"] == "rmse"
    assert 0 < summary["test_mean_metric"] < 255 and summary["selection_mode"] == "min"
    assert len(summary["in_distribution"]["test_layer_loss"]) == 3  # Phi_0..Phi_2
    history = pd.read_csv(run / "history.csv")
    assert list(history["step"]) == [1, 2, 3] and {"loss_2", "lambda_2", "constraints_met"} <= set(history.columns)
    evaluation = pd.read_csv(run / "eval.csv")
    assert set(evaluation["split"]) == {"val", "test"} and sorted(evaluation["layer"].unique()) == [0, 1, 2]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["_target_"] == "smoothing.TemporalSmoother" and config["model"]["step"] == 0.3
    assert json.loads((run / "provenance.json").read_text())["seed"] == 0


def test_a_model_config_without_a_target_is_refused_in_one_line(tmp_path):
    outside = tmp_path / "conf"
    (outside / "model").mkdir(parents=True)
    (outside / "model" / "nameless.yaml").write_text("name: nameless\ntask: video\npaper: {alpha: 0.25}\n")
    result = cutlab(["--config-dir", str(outside), "model=nameless", "wandb.mode=disabled"], tmp_path / "runs",
                    check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "cutlab: error: model=nameless has no _target_; set model._target_ to the class or function that builds it, "
        "e.g. _target_: cutlab.core.models.DUST")
