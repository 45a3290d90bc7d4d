"""eval.iterate=best: the iterate a run evaluates is the best one checked on validation (feasible first, then the
smaller largest violation, then l_L), checking does not change training, the choice survives a kill and resume, and
cutlab-eval evaluates the same weights. Through the real command line on the embedded default (DUST, whose power
iteration changes a buffer at every forward: the checks must put it back)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT
from helpers.cli import cutlab
from helpers.contract import assert_same_records, cutlab_env, start_and_kill
from helpers.tiny import TinyUnrolled

from cutlab.core.iterate_selection import IterateSelector
from cutlab.core.constraints import Constraints

# gamma_train (0.09) alone in the grid: the validation pass at the end makes the same forwards with the same noise as
# the checks did (with more gammas DUST's power iteration, refined at every forward, would advance more per batch)
BUDGET = ["train.epochs=3", "train.max_steps_per_epoch=4", "eval.gamma_test=[0.09]", "wandb.mode=disabled",
          "threads=1"]
BEST = ["eval.iterate=best", "eval.check_every_steps=2"]


def only_run(runs: Path) -> Path:
    (run,) = [p for p in runs.iterdir() if not p.name.startswith("_")]
    return run


@pytest.fixture(scope="module")
def last_and_best(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("iterate")
    cutlab(BUDGET, base / "last" / "runs")
    cutlab(BUDGET + BEST, base / "best" / "runs")
    return only_run(base / "last" / "runs"), only_run(base / "best" / "runs")


def test_checks_leave_training_unchanged_and_the_best_ranked_check_is_evaluated(last_and_best):
    last, best = last_and_best
    drop_time = lambda frame: frame.drop(columns=["step_time"])  # noqa: E731
    pd.testing.assert_frame_equal(drop_time(pd.read_csv(best / "history.csv")),
                                  drop_time(pd.read_csv(last / "history.csv")))
    summary = json.loads((best / "summary.json").read_text())
    iterate = summary["iterate"]
    checks = iterate["checks"]
    # the warm-up epoch (steps 1-4, lambda frozen) has no candidates; then every 2 steps, the last step included
    assert [c["step"] for c in checks] == [6, 8, 10, 12] and summary["steps"] == 12
    ranked = min(checks, key=lambda c: (not c["strictly_feasible"],
                                        0.0 if c["strictly_feasible"] else c["largest_violation"], c["layer_losses"][-1]))
    assert iterate["selected_step"] == ranked["step"]
    assert iterate["selected_step"] != 12  # this budget's last iterate misses; an earlier one was feasible
    # what was evaluated is the selected iterate: its validation losses at gamma_train are the check's
    evaluation = pd.read_csv(best / "eval.csv")
    losses = evaluation.query("split == 'val' and gamma_test == 0.09 and metric == 'loss'").sort_values("layer")
    np.testing.assert_allclose(losses["value"], ranked["layer_losses"], rtol=1e-6)
    assert summary["verdict"] == "feasible"  # the selected check was strictly feasible on the same losses
    assert summary["in_distribution"]["test_verdict"] in ("feasible", "infeasible")
    own = json.loads((last / "summary.json").read_text())
    assert own["iterate"] == {"mode": "last"} and own["test_mean_metric"] != summary["test_mean_metric"]


@pytest.mark.slow  # the resume contract: test_a_killed_run_resumes_and_ends_identical_... (test_cli.py) by default
def test_a_killed_best_iterate_run_resumes_to_the_same_choice_and_numbers(last_and_best, tmp_path):
    _, reference = last_and_best
    runs = tmp_path / "runs"
    args = BUDGET + BEST + ["checkpoint.every_steps=1"]
    run_dir = runs / reference.name
    start_and_kill(args, run_dir, rows=9)  # after the checks at steps 6 and 8, before the rest
    cutlab(args, runs)
    assert_same_records(run_dir, reference)
    resumed = json.loads((run_dir / "summary.json").read_text())["iterate"]
    assert resumed == json.loads((reference / "summary.json").read_text())["iterate"]


@pytest.mark.parametrize("arm,selected", [pytest.param(["train=erm", "model.lr=3e-3"], 2, marks=pytest.mark.slow),
                                          (["train=constrained", "eval.check_every_steps=5"], 12)])
def test_cutlab_eval_evaluates_the_selected_iterate(tmp_path, arm: list[str], selected: int):
    # ERM is early stopping on validation l_L: UT at this primal lr is best after its 2nd step. Constrained UT checked
    # at steps 5 and 10 ranks the end-of-training check (step 12, after the last checkpoint of training) best, so
    # the checkpoint must be written again with the final choice. UT has no buffer that a forward changes, so
    # cutlab-eval must reproduce the run's own test numbers exactly
    runs = tmp_path / "runs"
    cutlab(BUDGET + BEST + ["model=ut", *arm], runs)
    run = only_run(runs)
    iterate = json.loads((run / "summary.json").read_text())["iterate"]
    assert iterate["selected_step"] == selected
    result = subprocess.run([sys.executable, "-m", "cutlab.transfer.cli", str(run)], cwd=ROOT,
                            env=cutlab_env(runs), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    (folder,) = (run / "evaluations").iterdir()
    mine = pd.read_csv(folder / "metrics.csv").sort_values(["gamma_test", "layer", "metric"]).reset_index(drop=True)
    own = pd.read_csv(run / "eval.csv").query("split == 'test'").sort_values(["gamma_test", "layer", "metric"])
    np.testing.assert_allclose(mine["value"], own["value"], rtol=1e-6)


def test_a_record_from_before_eval_iterate_is_still_the_same_run_with_the_last_iterate(last_and_best, tmp_path):
    last, _ = last_and_best
    runs = tmp_path / "runs"
    old = runs / "old"
    old.mkdir(parents=True)
    for name in ("config.yaml", "summary.json", "checkpoint.pt", "history.csv", "eval.csv"):
        (old / name).write_bytes((last / name).read_bytes())
    config = yaml.safe_load((old / "config.yaml").read_text())
    del config["eval"]["iterate"], config["eval"]["check_every_steps"]
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    skipped = cutlab(BUDGET + ["run_name=old"], runs)
    assert "is complete; skipped" in skipped.stderr
    refused = cutlab(BUDGET + BEST + ["run_name=old"], runs, check=False)
    assert refused.returncode != 0 and "eval.iterate: 'last' -> 'best'" in refused.stderr


def test_every_added_or_inert_key_exists_and_compares_as_the_behaviour_it_names() -> None:
    """identity's tables: a key missing from an older config compares equal to its stated value, an inert key's
    value is ignored while its switch holds; a misspelt key in either table would match nothing, so each must exist."""
    import copy

    from omegaconf import OmegaConf

    from cutlab.config.compose import compose_run_config
    from cutlab.run.identity import ADDED_KEYS, INERT_KEYS, comparable, differences

    current = OmegaConf.to_container(compose_run_config(["wandb.mode=disabled"]))

    def edited(**changes) -> dict:  # dotted key (with "__" for ".") -> value; None deletes the key
        config = copy.deepcopy(current)
        for dotted, value in changes.items():
            *parents, leaf = dotted.split("__")
            node = config
            for part in parents:
                node = node[part]
            assert leaf in node, f"{dotted} is not a key of the composed config"
            node.pop(leaf) if value is None else node.__setitem__(leaf, value)
        return config

    for key, then in ADDED_KEYS.items():
        key = key.replace(".", "__")
        assert differences(comparable(edited(**{key: None})), comparable(edited(**{key: then}))) == []
    for key, (switch, value) in INERT_KEYS.items():
        key, switch = key.replace(".", "__"), switch.replace(".", "__")
        inert = comparable(edited(**{switch: value})), comparable(edited(**{switch: value, key: 987654}))
        assert differences(*inert) == []
        live = comparable(edited(**{switch: "another"})), comparable(edited(**{switch: "another", key: 987654}))
        assert differences(*live) != []  # compared wherever the switch holds another value


def test_feasible_beats_a_lower_loss_then_smaller_violation_then_lower_loss_and_ties_keep_the_earlier() -> None:
    """Infeasible checks rank by their largest violation over the layers (not their smallest); feasible ones by
    l_L alone, however much room they leave under their bounds; an equal check leaves the earlier one chosen."""
    model = TinyUnrolled()
    scripted: list[torch.Tensor] = []
    selector = IterateSelector(model, Constraints(alpha=0.25), 0.02, lambda: scripted.pop(0))
    best: list[int] = []

    def check(step: int, *losses: float) -> None:
        with torch.no_grad():
            model.last.bias.fill_(float(step))  # a parameter that tells the iterates apart
        scripted.append(torch.tensor(losses))
        selector.check(step, torch.zeros(4))
        best.append(selector.best.step)

    check(1, 1.0, 0.9, 0.8, 0.5)    # infeasible: 0.9 > 0.75; violations 0.2, 0.19, -0.17
    check(2, 1.0, 0.85, 0.6, 0.4)   # infeasible, smaller largest violation (0.13) but a larger smallest (-0.11)
    check(3, 1.0, 0.7, 0.5, 0.37)   # feasible
    check(4, 1.0, 0.9, 0.5, 0.1)    # infeasible, much lower l_L
    check(5, 1.0, 0.7, 0.5, 0.37)   # feasible, equal: the earlier stays
    check(6, 1.0, 0.7, 0.5, 0.36)   # feasible, lower l_L
    check(7, 1.0, 0.74, 0.55, 0.35)  # feasible, lower l_L, less room: largest violation -0.009 against 6's -0.04
    assert [c.strictly_feasible for c in selector.checks] == [False, False, True, False, True, True, True]
    assert best == [1, 2, 3, 3, 3, 6, 7]
    selector.restore_best()
    assert float(model.last.bias.detach()[0]) == 7.0
    erm = IterateSelector(model, None, 0.02, lambda: scripted.pop(0))
    for step, last_loss in ((1, 0.5), (2, 0.2), (3, 0.3)):
        scripted.append(torch.tensor([9.0, 9.0, 9.0, last_loss]))
        erm.check(step, torch.zeros(4))
    assert erm.best.step == 2  # ERM: early stopping on validation l_L


def test_bad_iterate_settings_stop_in_one_line(tmp_path) -> None:
    for override, expected in (("eval.iterate=first", "eval.iterate must be one of last, best, got 'first'"),
                               ("eval.check_every_steps=0", "eval.check_every_steps must be >= 1, got 0")):
        result = cutlab(BUDGET + [override], tmp_path / "runs", check=False)
        assert result.returncode != 0
        assert expected in result.stderr and len([l for l in result.stderr.splitlines() if "Error" in l]) <= 1


def test_a_check_draws_the_noise_the_verdict_draws_where_gamma_train_is_not_first_in_the_grid(tmp_path):
    """A check evaluated gamma_train alone, so with the noise of the grid's first gamma, and the verdict with that of
    gamma_train's place in the grid: the same iterate had two sets of losses (143.2751 against 143.2714 here), and a
    borderline one could be chosen as feasible and then judged infeasible."""
    runs = tmp_path / "runs"
    cutlab(["train.epochs=3", "train.max_steps_per_epoch=3", "train.alpha=0.8", "train.epsilon=100",
            "train.warmup_epochs=0", "eval.gamma_test=[0,0.2,0.4]", "wandb.mode=disabled", "threads=1", *BEST], runs)
    run = only_run(runs)
    iterate = json.loads((run / "summary.json").read_text())["iterate"]
    (selected,) = [check for check in iterate["checks"] if check["step"] == iterate["selected_step"]]
    evaluation = pd.read_csv(run / "eval.csv")
    losses = evaluation.query("split == 'val' and gamma_test == 0.09 and metric == 'loss'").sort_values("layer")
    assert losses["value"].tolist() == pytest.approx(selected["layer_losses"], rel=1e-6)
