"""A model and data of one's own, as a researcher extending cutlab meets them past the first run: the record names the
module that built the weights, and the run's first steps say what is the model's doing, not the learning rates'.

Each test was written against a defect seen at c19138b (the docstrings say what happened there).
"""

from __future__ import annotations

import hashlib
import json
import os

from conftest import ROOT
from helpers.cli import cutlab
from helpers.contract import cutlab_env
from helpers.forked import run_python_m
from test_extension import CONFIG, MODULE

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "wandb.mode=disabled",
        "threads=1"]

EXTRA = '''
import torch

from smoothing import TemporalSmoother


class NaNOut(TemporalSmoother):  # a forward with a bug: its last layer is NaN from the start
    def forward(self, tokens):
        outputs = super().forward(tokens)
        return outputs[:-1] + [outputs[-1] * torch.nan]


class ReadsPatches(TemporalSmoother):  # reads its tokens as patch x patch pixels, as a video model does
    def __init__(self, depth: int, patch: int = 16, step: float = 0.3) -> None:
        super().__init__(depth, step)
        self.patch = patch

    def forward(self, tokens):
        return super().forward(tokens.reshape(*tokens.shape[:3], self.patch, self.patch).flatten(-2))
'''


def _project(tmp_path, target: str = "smoothing.TemporalSmoother"):
    """my_project/ (smoothing.py, extra.py, conf/model/mine.yaml naming ``target``) and the environment to run it."""
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "smoothing.py").write_text(MODULE)
    (outside / "extra.py").write_text(EXTRA)
    (outside / "conf" / "model" / "mine.yaml").write_text(CONFIG.replace("smoothing.TemporalSmoother", target))
    return outside, {"PYTHONPATH": os.pathsep.join([str(outside), str(ROOT)])}


def _error_lines(result) -> list[str]:
    return [line for line in result.stderr.strip().splitlines() if not line.startswith(("[cutlab]", "wandb:"))]


def test_cutlab_eval_refuses_a_model_whose_module_changed_since_training_and_evaluates_it_once_restored(tmp_path):
    """Before: with one line of the module edited, cutlab-eval gave other numbers on the run's own data and grid
    (49.2 against the run's 95.4), and once the module was restored it skipped that evaluation as already done."""
    outside, env = _project(tmp_path)
    runs = tmp_path / "runs"
    cutlab(["--config-dir", str(outside / "conf"), "model=mine", "run_name=mine", *TINY], runs, env=env)
    run = runs / "mine"
    module = outside / "smoothing.py"
    trained = json.loads((run / "provenance.json").read_text())["model_source"]
    assert trained == {"file": str(module.resolve()), "sha256": hashlib.sha256(module.read_bytes()).hexdigest()}

    module.write_text(MODULE.replace("previous + step *", "previous + 0.5 * step *"))
    edited = run_python_m("cutlab.transfer.cli", [str(run)], ROOT, cutlab_env(runs, env), 600)
    assert edited.returncode == 2 and "Traceback" not in edited.stderr, edited.stderr[-2000:]
    (line,) = _error_lines(edited)
    assert line.startswith(f"cutlab-eval: error: mine: model._target_=smoothing.TemporalSmoother is defined in "
                           f"{module.resolve()}, which has changed since the run was trained (sha256 "
                           f"{trained['sha256'][:12]} then, "), line
    assert not (run / "evaluations").exists()

    module.write_text(MODULE)
    restored = run_python_m("cutlab.transfer.cli", [str(run)], ROOT, cutlab_env(runs, env), 600)
    assert restored.returncode == 0, restored.stderr[-2000:]
    own = json.loads((run / "summary.json").read_text())["test_mean_metric"]
    assert f"mean rmse over gamma_test [0,0.5] {own:.3f}" in restored.stdout + restored.stderr


def test_a_run_is_not_resumed_with_a_model_module_that_changed_since_it_began(tmp_path):
    """Before: a run stopped before its summary was written resumed with the edited module (a bug fixed between the
    two sessions) and finished with other code than it began with, saying nothing; the data are checked so already."""
    outside, env = _project(tmp_path)
    runs = tmp_path / "runs"
    command = ["--config-dir", str(outside / "conf"), "model=mine", "run_name=mine", *TINY]
    cutlab(command, runs, env=env)
    (runs / "mine" / "summary.json").unlink()  # as a run stopped after its last checkpoint leaves it
    module = outside / "smoothing.py"
    module.write_text(MODULE.replace("previous + step *", "previous + 0.5 * step *"))
    edited = cutlab(command, runs, env=env, check=False)
    assert edited.returncode == 2 and "Traceback" not in edited.stderr, edited.stderr[-2000:]
    (line,) = _error_lines(edited)
    assert line.startswith("cutlab: error: model._target_=smoothing.TemporalSmoother is defined in "
                           f"{module.resolve()}, which has changed since the run began (sha256 ") and (
        "so resuming would finish the run with other code: restore that file as it was" in line), line
    assert not (runs / "mine" / "summary.json").exists()
    module.write_text(MODULE)
    cutlab(command, runs, env=env)
    assert json.loads((runs / "mine" / "summary.json").read_text())["status"] == "complete"


def test_a_model_whose_phi_0_is_its_input_at_gamma_0_is_degenerate_under_the_papers_form(tmp_path):
    """Before: "train.epsilon must be > 0 or null (off), got 0.0", naming a key the user never set (epsilon=auto
    measured l_0 = 0 exactly), where UT, whose Phi_0 is its input up to round-off, ends degenerate."""
    outside, env = _project(tmp_path)
    runs = tmp_path / "runs"
    cutlab(["--config-dir", str(outside / "conf"), "model=mine", "run_name=mine", "gamma=0", "train=constrained_paper",
            *TINY], runs, env=env)
    summary = json.loads((runs / "mine" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["epsilon"] == 0 and summary["reference_at_target"] is True
    assert summary["verdict"] == "degenerate"


def test_a_forward_that_returns_nan_as_initialised_is_said_to_be_the_models_not_the_learning_rates(tmp_path):
    """Before: "the loss of layer 2 became nan; lower the primal learning rate ..." at the first step, before any
    update, and with epsilon=auto "the model's parameters diverged" of a model never trained."""
    outside, env = _project(tmp_path, "extra.NaNOut")
    runs = tmp_path / "runs"
    for epsilon, expected in (("1.0", "the loss of layer 2 is nan before any training step: the model's forward "
                                      "returns NaN or inf as initialised"),
                              ("auto", "model=smoother: layer 2's loss is nan on the first training windows, "
                                       "before any training step (train.epsilon=auto measures it): the model's "
                                       "forward returns NaN or inf as initialised")):
        result = cutlab(["--config-dir", str(outside / "conf"), "model=mine", f"train.epsilon={epsilon}", *TINY], runs,
                        env=env, check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        (line,) = _error_lines(result)
        assert expected in line and "learning rate" not in line, line


def test_a_video_model_that_takes_patch_gets_the_datas_without_a_yaml_key(tmp_path):
    """Before: a yaml without ``patch:`` (as the README's example was) left the model at its default of 16, and with
    data.patch=8 the first forward pass ended in a shape traceback."""
    outside, env = _project(tmp_path, "extra.ReadsPatches")
    runs = tmp_path / "runs"
    cutlab(["--config-dir", str(outside / "conf"), "model=mine", "run_name=mine", "data.patch=8", *TINY], runs, env=env)
    assert json.loads((runs / "mine" / "summary.json").read_text())["status"] == "complete"


def test_a_data_config_of_ones_own_named_after_itself_is_refused_before_the_run_is_announced(tmp_path):
    """Before: the run was announced (its folder named) and then refused with a list of loaders, without saying that
    a data config of one's own keeps ``name: video_folder``."""
    conf = tmp_path / "conf"
    (conf / "data").mkdir(parents=True)
    own = (ROOT / "conf" / "data" / "video_folder.yaml").read_text().replace("name: video_folder", "name: my_footage")
    (conf / "data" / "my_footage.yaml").write_text(own)
    result = cutlab(["--config-dir", str(conf), "data=my_footage", f"data.root={tmp_path}", *TINY], tmp_path / "runs",
                    check=False)
    assert result.returncode == 2 and "run starting" not in result.stderr, result.stderr[-2000:]
    (line,) = _error_lines(result)
    assert line.startswith("cutlab: error: data.name='my_footage' is not a video loader cutlab has") and (
        "keeps the name of the loader that reads it: name: video_folder" in line), line
