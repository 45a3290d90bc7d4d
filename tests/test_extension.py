"""A new model is one module and one yaml, outside the package: ``python -m cutlab model=<it>`` trains and evaluates it.

The module and its config live in a temporary folder: the config joins Hydra's search path (``hydra.searchpath``
or ``--config-dir``), the module joins PYTHONPATH, and the model config's ``_target_`` names the class.
"""

from __future__ import annotations

import json
import os
import shutil

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


MISTAKES = '''
import torch
from torch import nn

from smoothing import TemporalSmoother


class SkipsPhi0(TemporalSmoother):  # returns Phi_1..Phi_L
    def forward(self, tokens):
        return super().forward(tokens)[1:]


class MeansOverTime(TemporalSmoother):  # each Phi_l [B, 1, P, n]: would broadcast against the clean [B, T, P, n]
    def forward(self, tokens):
        return [out.mean(dim=1, keepdim=True) for out in super().forward(tokens)]


class TwoBlocksAlways(TemporalSmoother):
    def __init__(self, depth: int, step: float = 0.3) -> None:
        super().__init__(2, step)


class PlainModule(nn.Module):
    def __init__(self, depth: int, step: float = 0.3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))


class NoGradForward(TemporalSmoother):
    @torch.no_grad()
    def forward(self, tokens):
        return super().forward(tokens)


class Detached(TemporalSmoother):
    def forward(self, tokens):
        return [out.detach() for out in super().forward(tokens)]


class IgnoresParameters(TemporalSmoother):
    def forward(self, tokens):
        return [tokens] * (self.depth + 1)


class NoneFirst(TemporalSmoother):
    def forward(self, tokens):
        return [None] + super().forward(tokens)[1:]


class LayersNotDepth(TemporalSmoother):  # its own name for the depth
    def __init__(self, step: float = 0.3, layers: int = 3) -> None:
        super().__init__(layers, step)


class AssertsInInit(TemporalSmoother):  # as torch's own layers check their sizes (nn.MultiheadAttention's heads)
    def __init__(self, depth: int, step: float = 0.3) -> None:
        assert step < 0.2, "step must stay below 0.2"
        super().__init__(depth, step)


def make_smoother(depth, step=0.3):  # builds a model, but says nothing of what it returns
    return TemporalSmoother(depth, step)
'''


@pytest.mark.parametrize("target, extra, expected", [
    ("mistakes.SkipsPhi0", "", "SkipsPhi0 returned 2 representations; a LayerwiseModel of depth L=2 returns the list "
                               "[Phi_0, ..., Phi_L] of L+1 = 3"),
    ("mistakes.MeansOverTime", "", "Phi_0 has shape [4, 1, 16, 256] but the clean video tokens have [4, 10, 16, 256]"),
    ("mistakes.TwoBlocksAlways", "", "was asked for L=3 blocks and built model.depth=2"),
    ("mistakes.PlainModule", "", "built a PlainModule, not a LayerwiseModel; subclass cutlab.core.models.LayerwiseModel"),
    ("smoothing.TemporalSmoother", "stepp: 0.5\n", "has key(s) stepp that smoothing.TemporalSmoother does not take "
                                                   "(its parameters: depth, step)"),
    ("smoothing.TemporalSmootherr", "", "cannot be imported: module 'smoothing' has no 'TemporalSmootherr'"),
    ("nosuchmodule.TemporalSmoother", "", "cannot be imported: no module named 'nosuchmodule'; put the folder that "
                                          "holds it on PYTHONPATH"),
    # a module that is found and fails as it runs: the real error, not Hydra's "is it installed?" (PYTHONPATH advice)
    ("typo.Model", "", "importing it raised ImportError: cannot import name 'LayerwisModel' from 'cutlab.core.models'"),
    ("syntax.Model", "", "importing it raised SyntaxError: "),
    ("attribute.Model", "", "importing it raised AttributeError: module 'os' has no attribute 'nonexistent_attr'"),
    ("smoothing.NOT_A_CLASS", "", "model._target_=smoothing.NOT_A_CLASS is a int, not a class or function"),
    ("smoothing.TemporalSmoother", "DROP paper", "train.alpha reads model.paper.alpha, which model=smoother's yaml "
                                                  "does not give; with data=synthetic use train=constrained|"
                                                  "constrained_paper|erm (the presets for video data), or add it to "
                                                  "the model's yaml"),
    ("smoothing.TemporalSmoother", "DROP task", "model.task must be one of video, text, instruction, got None"),
    ("mistakes.NoneFirst", "", "NoneFirst returned a list holding a NoneType as Phi_0; a LayerwiseModel returns the "
                               "list [Phi_0, ..., Phi_L] of tensors"),  # was AttributeError's traceback
    ("mistakes.LayersNotDepth", "", "mistakes.LayersNotDepth takes no depth argument (its parameters: step, layers), "
                                    "so it cannot build the L=2 blocks asked for; add a parameter depth to its "
                                    "__init__"),  # was "built model.depth=3; build the depth it is given"
    # not train.constraint_gradient=block, which the user never set
    ("smoothing.TemporalSmoother", "deep_from_layers: 2\n", "model=smoother's yaml sets deep_from_layers: 2, so at "
                                                             "L=2 each constraint trains its own block"),
    # was a 41-line traceback (only ValueError and TypeError were said)
    ("mistakes.AssertsInInit", "", "model=smoother cannot be built: an assertion failed: step must stay below 0.2"),
    # trained without a word, then cutlab-eval refused to rebuild it, advising to copy the run folder again
    ("mistakes.make_smoother", "", "model._target_=mistakes.make_smoother is a function not declared to return a "
                                   "LayerwiseModel"),
    # trained at L=2 while its config.yaml recorded model.depth: 6 beside L: 2
    ("smoothing.TemporalSmoother", "depth: 6\n", "model=smoother's yaml sets depth: 6, but a model's depth is the "
                                                 "run's L (here L=2); remove depth from the model's yaml and pass L=6"),
    # a copy of conf/model/ut.yaml keeping its name: the tables set its runs in UT's cells, beside the paper's UT
    ("smoothing.TemporalSmoother", "NAME ut", "model.name=ut is cutlab's own model (cutlab.core.models.UT), but this "
                                              "model's _target_ is smoothing.TemporalSmoother"),
], ids=["without-phi0", "wrong-shape", "ignores-depth", "not-layerwise", "misspelled-key", "misspelled-class",
        "missing-module", "import-error-inside", "syntax-error-inside", "attribute-error-inside", "not-callable",
        "no-paper", "no-task", "none-in-list", "no-depth-parameter", "deep-without-unroll-local", "assert-in-init",
        "unannotated-function", "depth-in-yaml", "named-as-cutlabs"])
def test_a_model_of_ones_own_with_a_mistake_is_refused_in_one_line_leaving_no_folder(tmp_path, target, extra, expected):
    """Each mistake a user makes with their own model stops the run in one line naming it, where it once trained on
    silently (a shape that broadcasts, a misspelled key) or ended in a traceback."""
    runs = _refused_in_one_line(tmp_path, target, extra, expected)
    assert not [p for p in runs.glob("*") if not p.name.startswith("_")] if runs.exists() else True


@pytest.mark.parametrize("name", ["NoGradForward", "Detached", "IgnoresParameters"])
def test_a_model_whose_outputs_carry_no_gradient_is_refused_in_one_line_at_its_first_step(tmp_path, name):
    """It ended in torch's "element 0 of tensors does not require grad" traceback at the backward pass. Found as the
    first step checks its outputs (the set-up's passes run without gradients), the run's record says why it failed."""
    expected = (f"{name}'s Phi_1 carries no gradient; Phi_1..Phi_L must depend on the model's parameters (no "
                "torch.no_grad() or .detach() in its forward)")
    runs = _refused_in_one_line(tmp_path, f"mistakes.{name}", "", expected)
    (summary,) = [json.loads(p.read_text()) for p in runs.glob("*/summary.json")]
    assert summary["status"] == "failed" and summary["error"] == f"CutlabError: {expected}"


def _refused_in_one_line(tmp_path, target: str, extra: str, expected: str):
    """Runs model=mine (``target`` with the yaml's ``extra``) and checks its one line; returns the runs folder."""
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "smoothing.py").write_text(MODULE)
    (outside / "mistakes.py").write_text(MISTAKES)
    (outside / "typo.py").write_text("from cutlab.core.models import LayerwisModel\n")
    (outside / "syntax.py").write_text("def f(:\n")
    (outside / "attribute.py").write_text("import os\nos.nonexistent_attr\n")
    (outside / "smoothing.py").write_text(MODULE + "\nNOT_A_CLASS = 1\n")
    config = CONFIG.replace("smoothing.TemporalSmoother", target)
    if extra.startswith("NAME "):
        config = config.replace("name: smoother", f"name: {extra.split()[1]}")
    elif extra.startswith("DROP "):
        key = extra.split()[1]
        config = "\n".join(line for line in config.splitlines()
                           if not line.startswith(f"{key}:") and not (key == "paper" and line.startswith("  ")))
    else:
        config += extra
    (outside / "conf" / "model" / "mine.yaml").write_text(config)
    runs = tmp_path / "runs"
    depth = "L=3" if "TwoBlocks" in target else "L=2"
    result = cutlab(["--config-dir", str(outside / "conf"), "model=mine", depth, "train.epochs=1",
                     "train.max_steps_per_epoch=2", "wandb.mode=disabled", "threads=1"], runs,
                    env={"PYTHONPATH": os.pathsep.join([str(outside), str(ROOT)])}, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(("[cutlab]", "wandb:"))]
    assert len(lines) == 1 and lines[0].startswith("cutlab: error: ") and expected in lines[0], result.stderr[-2000:]
    return runs


def test_a_sweep_of_ones_own_model_is_planned_launched_and_summarised_by_cutlab(tmp_path):
    """--config-dir goes through cutlab's sweep machinery like any other command: --plan lists the runs, the chosen
    launcher runs them, and a failed run fails the sweep (it once fell through to plain Hydra, which ignored
    launcher=, and exited 0)."""
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "smoothing.py").write_text(MODULE)
    (outside / "conf" / "model" / "smoother.yaml").write_text(CONFIG)
    runs = tmp_path / "runs"
    env = {"PYTHONPATH": os.pathsep.join([str(outside), str(ROOT)])}
    sweep = ["--config-dir", str(outside / "conf"), "-m", "model=smoother", "train.epochs=1",
             "train.max_steps_per_epoch=2", "wandb.mode=disabled", "threads=1", "eval.gamma_test=[0.09]"]

    info = cutlab(["--info", "defaults", "--config-dir", str(outside / "conf"), "model=smoother"], runs, env=env)
    assert "launcher: inprocess" in info.stdout, info.stdout[-2000:]  # once "not known (Could not find 'model/smoother')"

    plan = cutlab(["--plan", *sweep, "gamma=0,0.09"], runs, env=env)
    assert plan.stdout.count(" new ") == 2 and "# 0 complete (skipped), 2 to run" in plan.stdout, plan.stdout

    # gamma=0 is refused by the run itself (the ratio form would divide by l_0 = 0), so the sweep must say so
    result = cutlab([*sweep, "gamma=0,0.09", "launcher=local", "launcher.max_parallel=1"], runs, env=env, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "1 complete, 1 failed" in result.stderr and "local:" in result.stderr
    assert len(list((runs / "_sweeps").iterdir())) == 1
    assert not (runs / "multirun.yaml").exists()


def test_a_forward_that_raises_leaves_no_folder_and_a_local_sweep_records_its_exception(tmp_path):
    """A forward raising in the epsilon=auto reference pass left an empty run folder (which --plan listed as new), and
    launcher=local recorded Hydra's "Set the environment variable HYDRA_FULL_ERROR=1 ..." as the run's error."""
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "smoothing.py").write_text(MODULE + "\n\nclass Raises(TemporalSmoother):\n    def forward(self, x):\n"
                                          "        raise RuntimeError('my bug in forward')\n")
    (outside / "conf" / "model" / "raises.yaml").write_text(CONFIG.replace("TemporalSmoother", "Raises"))
    runs = tmp_path / "runs"
    env = {"PYTHONPATH": os.pathsep.join([str(outside), str(ROOT)])}
    args = ["--config-dir", str(outside / "conf"), "model=raises", "L=2", "train.epochs=1",
            "train.max_steps_per_epoch=2", "wandb.mode=disabled", "threads=1", "eval.gamma_test=[0.09]"]
    single = cutlab(args, runs, env=env, check=False)
    assert single.returncode == 1 and "RuntimeError: my bug in forward" in single.stderr, single.stderr[-2000:]
    assert not runs.exists()  # nor the runs folder the run made
    sweep = cutlab(["-m", *args, "launcher=local"], runs, env=env, check=False)
    assert sweep.returncode == 1, sweep.stderr[-2000:]
    (outcome,) = [json.loads(path.read_text()) for path in runs.glob("_sweeps/*/outcome.json")]
    assert [run["error"] for run in outcome["runs"]] == ["exit 1: RuntimeError: my bug in forward"], outcome
    assert not [p for p in runs.iterdir() if not p.name.startswith("_")]


def test_added_keys_that_cutlab_reads_and_a_group_of_ones_own_are_taken(tmp_path):
    """'+' is refused only for a key that nothing reads: train=erm lacks constraint_form (train=constrained has it),
    and +experiment=NAME adds a config group of the user's own (Hydra's pattern) from --config-dir."""
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "quick.yaml").write_text("# @package _global_\nL: 2\n")
    runs = tmp_path / "runs"
    tiny = ["train.epochs=1", "train.max_steps_per_epoch=2", "wandb.mode=disabled", "threads=1", "eval.gamma_test=[0.09]"]
    cutlab(["train=erm", "+train.constraint_form=ratio", *tiny], runs)
    cutlab(["--config-dir", str(conf), "+experiment=quick", *tiny], runs)
    summaries = [json.loads(p.read_text()) for p in runs.glob("*/summary.json")]
    assert len(summaries) == 2 and all(s["status"] == "complete" for s in summaries)
    assert sorted(len(s["in_distribution"]["test_layer_loss"]) for s in summaries) == [3, 4]  # L=2 and the default 3


@pytest.mark.slow  # --config-dir's model: test_a_sweep_of_ones_own_model_... runs by default
def test_a_search_over_a_model_of_ones_own_takes_config_dir_as_python_m_cutlab_does(tmp_path):
    # two workers: each composes its trials with the user's folder too (the flag travels as Hydra's search path)
    from helpers.search import TINY, assert_run_complete, run_search

    outside = tmp_path / "my_project,v=2"  # a ',' or '=' in the folder's name must not split it for Hydra
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "smoothing.py").write_text(MODULE)
    (outside / "conf" / "model" / "smoother.yaml").write_text(CONFIG)
    env_path = os.pathsep.join([str(outside), str(ROOT)])
    args = ["search=dust_video", "--config-dir", str(outside / "conf"), "model=smoother", "--n-trials", "2",
            "--workers", "2", "search.pruner=null", *TINY]
    result = run_search(args, tmp_path, extra_env={"PYTHONPATH": env_path})
    trials = sorted((tmp_path / "runs" / "search" / "dust_video").glob("trial-*"))
    assert len(trials) == 2
    for trial in trials:
        assert_run_complete(trial, steps=8)
        config = yaml.safe_load((trial / "config.yaml").read_text())
        assert config["model"]["_target_"] == "smoothing.TemporalSmoother"
    assert f"hydra.searchpath=['file://{outside / 'conf'}']" in result.stderr


def test_a_search_over_a_model_whose_module_is_not_on_the_path_stops_before_a_trial(tmp_path):
    # --dry-run passed, and the search then stopped at its first trial, its point left in the study
    from helpers.search import TINY, run_search

    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "smoother.yaml").write_text(CONFIG)  # smoothing.py is nowhere on PYTHONPATH
    for dry_run in (["--dry-run"], []):
        result = run_search(["search=dust_video", "--config-dir", str(tmp_path / "conf"), "model=smoother",
                             "--n-trials", "1", *TINY, *dry_run], tmp_path, check=False)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
            "cutlab-search: error: model._target_=smoothing.TemporalSmoother cannot be imported: no module named "
            "'smoothing'; put the folder that holds it on PYTHONPATH"), result.stderr[-2000:]
    assert not (tmp_path / "runs" / "search").exists()


def test_a_config_of_ones_own_named_as_one_of_cutlabs_is_refused_not_ignored(tmp_path):
    """my_project/conf/model/ut.yaml: Hydra reads cutlab's model=ut and trained the built-in UT without a word."""
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "conf" / "model" / "ut.yaml").write_text(CONFIG)
    result = cutlab(["--config-dir", str(outside / "conf"), "model=ut", "--plan"], tmp_path / "runs", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (f"cutlab: error: {outside / 'conf' / 'model' / 'ut.yaml'} has the name of cutlab's own model=ut, which "
            "Hydra reads instead of yours; rename yours") in result.stderr, result.stderr[-2000:]
    other = cutlab(["--config-dir", str(outside / "conf"), "model=dust", "--plan"], tmp_path / "runs")
    assert other.returncode == 0  # a clash only matters where that config is chosen
    (outside / "conf" / "model" / "dust.yaml").write_text(CONFIG)  # chosen by default, without model=
    default = cutlab(["--config-dir", str(outside / "conf"), "--plan"], tmp_path / "runs", check=False)
    assert default.returncode == 2 and "has the name of cutlab's own model=dust" in default.stderr
    # cutlab's own conf/ (or a copy of it byte for byte) as --config-dir is no clash
    for folder in (ROOT / "conf", shutil.copytree(ROOT / "conf", tmp_path / "copy")):
        same = cutlab(["--config-dir", str(folder), "model=ut", "--plan"], tmp_path / "runs")
        assert same.returncode == 0, same.stderr[-2000:]


@pytest.mark.parametrize("how", [[], ["--plan", "-m"]], ids=["run", "sweep-plan"])
def test_a_config_of_ones_own_that_is_not_valid_yaml_is_one_line_naming_its_line(tmp_path, how):
    """A missing brace in one's own model yaml came out as PyYAML's traceback of some 90 lines, exit 1."""
    outside = tmp_path / "conf"
    (outside / "model").mkdir(parents=True)
    (outside / "model" / "smoother.yaml").write_text(CONFIG.replace("paper:\n  alpha: 0.25\n  epsilon: 1.0\n",
                                                                    "paper: {alpha: 0.25, epsilon: 1.0\n"))
    result = cutlab([*how, "--config-dir", str(outside), "model=smoother", "wandb.mode=disabled"], tmp_path / "runs",
                    check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"cutlab: error: {outside / 'model' / 'smoother.yaml'} is not valid YAML at line 7, column 1 (while parsing a "
        "flow mapping begun at line 6, column 8: expected ',' or '}', but got '<stream end>'); fix the file there")
    assert not (tmp_path / "runs").exists()


def test_a_config_of_ones_own_not_found_says_where_it_was_looked_for(tmp_path):
    """Forgetting --config-dir, or giving the project's folder instead of its conf/, said only 'unknown model'."""
    outside = tmp_path / "my_project"
    (outside / "conf" / "model").mkdir(parents=True)
    (outside / "conf" / "model" / "smoother.yaml").write_text(CONFIG)
    for where, expected in [
        ([], "or give the folder holding your model/smoother.yaml with --config-dir"),
        (["--config-dir", str(outside)],
         f"; {outside / 'conf' / 'model' / 'smoother.yaml'} is there: give --config-dir {outside / 'conf'}"),
    ]:
        result = cutlab(["--plan", *where, "model=smoother"], tmp_path / "runs", check=False)
        assert result.returncode == 2, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("cutlab: error: unknown model 'smoother'; choose one of model=") and last.endswith(expected)
