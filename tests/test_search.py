"""``python -m cutlab.search``: bad input, resumable storage, pruning, the fair-comparison preset (tiny real runs).

The helpers at the top are shared with test_search_postgres.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT
from helpers.search import (FAST_HEARTBEAT, TINY, assert_run_complete, best_value, current_folder, start_search,
                            study_of, wait_for)


def search_in_process(args: list[str], tmp: Path, monkeypatch, capsys) -> str:
    """``main(args)`` of the real CLI in this process (saves ~5 s of start-up per call); returns its stderr."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp / "runs"))
    monkeypatch.setenv("CUTLAB_CACHE_DIR", str(tmp / "cache"))
    code = main(args)
    error = capsys.readouterr().err
    assert code == 0, error[-4000:]
    return error


# ---------------------------------------------------------------- bad input: clear messages, nothing run


def write_preset(tmp: Path, space: dict, **extra) -> Path:
    import yaml

    path = tmp / "space.yaml"
    path.write_text(yaml.safe_dump({"n_trials": 2, "space": space, **extra}))
    return path


@pytest.mark.parametrize("space, message", [
    ({"train.lr": {"type": "gaussian", "low": 1e-4, "high": 1e-2}}, "type must be one of float, log_float, int, categorical"),
    ({"train.lr": {"type": "log_float", "low": 1e-2, "high": 1e-4}}, "low (0.01) > high (0.0001)"),
    ({"train.learning_rate": {"type": "float", "low": 0.1, "high": 0.5}}, "'train.learning_rate' is not in the config tree"),
    ({"train.lr": {"type": "log_float", "low": 0, "high": 1e-2}}, "needs low > 0"),
    ({"model": {"type": "categorical", "choices": ["dust", "gpt"]}}, "is a config group"),
])
def test_malformed_space_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, space, message):
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    assert main([f"search={write_preset(tmp_path, space)}", *TINY]) == 2
    error = capsys.readouterr().err
    assert "cutlab-search: error:" in error and message in error, error
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("spec, message", [
    # each passed --dry-run; the run was a traceback from Optuna's suggest, its trial left RUNNING
    ({"type": "log_float", "low": 1e-4, "high": 1e-2, "step": 1e-4}, "search.space.train.lr: a log_float range takes "
     "no step"),
    ({"type": "float", "low": 0.1, "high": 0.5, "step": -0.1}, "search.space.train.lr.step must be > 0, got -0.1"),
    ({"type": "float", "low": 0.1, "high": 0.5, "step": "abc"},
     "search.space.train.lr.step must be a number, got 'abc'"),
    ({"type": "float", "low": 0.1, "high": 0.5, "step": 1.0}, "search.space.train.lr: step 1 is wider than the range"),
    ({"type": "int", "low": 1, "high": 4, "step": 0.5}, "search.space.train.lr.step must be a whole number, got 0.5"),
    ({"type": "categorical", "choices": [0.1, 0.2], "step": 1}, "search.space.train.lr: a categorical takes no step"),
])
def test_a_step_optuna_would_refuse_stops_the_search_in_one_line_with_dry_run_too(tmp_path, capsys, monkeypatch,
                                                                                   spec, message):
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    preset = write_preset(tmp_path, {"train.lr": spec}, pruner=None)
    for dry_run in (["--dry-run"], []):
        assert main([f"search={preset}", *dry_run, *TINY]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("cutlab-search: error: ") and message in error[0], error
        assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("arguments, message", [
    # the preset's numbers: once a TypeError, or passed --dry-run and raised in the worker after the journal was made
    (["search.heartbeat.interval_s=abc"], "search.heartbeat.interval_s must be a whole number, got 'abc'"),
    (["search.sampler.seed=abc"], "search.sampler.seed must be a whole number, got 'abc'; e.g. search.sampler.seed=0"),
    (["search.sampler.seed=-1"], "search.sampler.seed must be from 0 to 2147483647, got -1"),
    (["search.sampler.n_startup_trials=-5"], "search.sampler.n_startup_trials must be >= 0, got -5"),
    (["search.sampler.multivariate=maybe"], "search.sampler.multivariate must be true or false, got 'maybe'"),
    (["search.sampler.n_startup=5"], "search.sampler.n_startup is not an option of optuna.samplers.TPESampler"),
    (["search.heartbeat.max_retry=-1"], "search.heartbeat.max_retry must be >= 0, got -1"),
    (["search.pruner.n_startup_trials=abc"], "search.pruner.n_startup_trials must be a whole number, got 'abc'"),
    (["search.pruner=median"], "search.pruner must be a mapping of options of optuna.pruners.MedianPruner, or null"),
    # the study's folder, as run_name is a run's: 'a/b' nested folders, '..' wrote into the runs folder itself
    (["search.study=a/b"], "search.study='a/b' is not a single folder name"),
    (["search.study=.."], "search.study='..' is not a single folder name"),
    (["--study", "."], "search.study='.' is not a single folder name"),
    (["--study-name", "."], "search.study='.' is not a single folder name"),  # Optuna's spelling: "unrecognized"
    # an unset variable: the trials went to the preset's study, or to a local journal, not the one meant
    (["--study", ""], "--study is empty; give one, or leave it out for the preset's study"),
    (["--storage", ""], "--storage is empty; give one, or leave it out for $CUTLAB_STORAGE"),
    # a flag and its key at odds: the flag won in silence (3 trials, the study a)
    (["--n-trials", "3", "search.n_trials=5"], "--n-trials 3 and search.n_trials=5 set the same setting to different "
     "values; give one of them"),
    (["--study", "a", "search.study=b"], "--study a and search.study=b set the same setting to different values"),
    (["search.study=b", "--study-name", "a"], "--study a and search.study=b set the same setting to different values"),
    # the search would have preferred the worst runs (RMSE is better lower), until its first complete trial stopped it
    (["search.direction=maximize"], "search.direction=maximize goes against the objective: its metric rmse is better "
     "lower, so the search would prefer the worst runs; drop it: auto (the default) picks minimize"),
    # a key the search draws: the plan listed it for every trial, and each trial's drawn value replaced it
    (["train.alpha=0.3"], "train.alpha=0.3 sets a key every trial draws: search=dust_video searches train.alpha float "
     "[0.05, 0.5]; drop train.alpha=0.3, or give a preset whose space leaves train.alpha out"),
    (["search=fair_comparison", "++train.lr=0.01"], "++train.lr=0.01 sets a key every trial draws: arm constrained of "
     "search=fair_comparison searches train.lr log_float [0.0001, 0.01]; drop ++train.lr=0.01"),
    # a mistyped key: one line, as python -m cutlab says it, not Hydra's advice to add it with '+'
    (["train.alhpa=1"], "Could not override 'train.alhpa'; did you mean train.alpha? check the key against conf/"),
    (["runs"], "'runs' is not a setting: settings are KEY=VALUE"),  # Hydra's "Error parsing override 'runs'"
    (["+train.alhpa=1"], "train.alhpa is not a key of cutlab's config, and a key added with '+' would be read by nothing"),
    (["searc.n_trials=3"], "searc.n_trials is not a key of cutlab's config; did you mean search.n_trials=3?"),
    (["+search.study=x"], "+search.study is not a key of cutlab's config; did you mean search.study=x?"),
    # Hydra's deletion of a preset's key: "Could not delete from config. 'search.n_trials' does not exist"
    (["~search.n_trials"], "~search.n_trials is not a key of cutlab's config; did you mean search.n_trials=VALUE?"),
    # a value YAML cannot read: PyYAML's lines with carets, blamed on the preset file
    (["search.n_trials=[1"], "search.n_trials=[1: the value is not valid YAML (while parsing a flow sequence begun at "
     "column 1: expected ',' or ']', but got '<stream end>'); write it whole"),
    (["search.n_trials=${oops}"], "Interpolation key 'oops' not found"),
    # Hydra's "Ambiguous value", answered with "check the key against conf/"
    (["gamma=0,1"], "gamma=0,1 gives several values, which is a sweep: this command takes one value per key"),
])
def test_a_bad_setting_stops_the_search_in_one_line_before_anything_is_written(tmp_path, capsys, monkeypatch,
                                                                               arguments, message):
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    for dry_run in (["--dry-run"], []):
        assert main(["search=dust_video", *arguments, *dry_run, *TINY]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("cutlab-search: error: ") and message in error[0], error
        assert not (tmp_path / "runs").exists()


def test_a_flag_and_its_search_key_given_the_same_value_are_one_setting(tmp_path, capsys, monkeypatch):
    stderr = search_in_process(["search=dust_video", "--n-trials", "3", "search.n_trials=03", "search.study=a",
                                "--study", "a", "--dry-run", *TINY], tmp_path, monkeypatch, capsys)
    assert "study a (dust_video): 3 trials per arm in total" in stderr


def test_a_seeds_arms_first_seed_is_given_with_seed(tmp_path, capsys, monkeypatch):
    """seed= is no searched key: the seeds arm's trial i trains with seed + i."""
    stderr = search_in_process(["search=fair_comparison", "seed=7", "--n-trials", "3", "--dry-run", *TINY], tmp_path,
                               monkeypatch, capsys)
    assert "arm erm [train=erm]: seeds 7..9" in stderr


def test_a_direction_the_objective_agrees_with_is_taken(tmp_path, capsys, monkeypatch):
    stderr = search_in_process(["search=dust_video", "search.direction=minimize", "--dry-run", *TINY], tmp_path,
                               monkeypatch, capsys)
    assert "20 trials per arm in total, minimize the runs' validation selection_metric" in stderr


def test_a_seeds_arm_whose_last_seed_is_past_the_largest_stops_the_search_in_one_line(tmp_path, capsys, monkeypatch):
    """Before: --dry-run passed, and each trial past the largest seed was refused on its own as a worker drew it."""
    from cutlab.core.training import MAX_SEED
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    last = MAX_SEED + 1  # the ERM arm's third seed
    for dry_run in (["--dry-run"], []):
        assert main(["search=fair_comparison", "search.n_trials=3", f"seed={MAX_SEED - 1}", *dry_run, *TINY]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"cutlab-search: error: search=fair_comparison: a trial with seed={last} would be refused: seed must be "
            f"from 0 to {MAX_SEED}, got {last}; e.g. seed=0"]
        assert not (tmp_path / "runs").exists()


def test_wandb_run_id_given_to_a_search_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """Before: every trial took it as its W&B id, and W&B merges what one id logs into one run."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("WANDB_RUN_ID", "fixedid1")
    assert main(["search=dust_video", "--dry-run", *TINY, "wandb.mode=offline"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "cutlab-search: error: WANDB_RUN_ID=fixedid1 names one W&B run, and every run of this search would log into "
        "it; unset it: each run gets a W&B id of its own (wandb_id in its summary.json)"]


@pytest.mark.parametrize("preset, message", [
    ({"n_trials": 2, "overrides": ["train.alpha=0.3"], "space": {"train.alpha": {"type": "float", "low": 0.1,
                                                                                 "high": 0.5}}},
     "search.overrides sets train.alpha=0.3, and the space searches train.alpha: each trial's drawn value would "
     "replace it; drop one of the two from the preset"),
    ({"n_trials": 2, "arms": {"c": {"overrides": ["train=constrained", "train.lr=0.001"],
                                    "space": {"train.lr": {"type": "log_float", "low": 1e-4, "high": 1e-2}}}}},
     "search.arms.c.overrides sets train.lr=0.001, and the space searches train.lr"),
], ids=["space", "arm"])
def test_a_preset_that_fixes_a_key_it_searches_is_refused_in_one_line(tmp_path, capsys, preset, message):
    """Before: each trial's drawn value, given after the preset's fixed one, replaced it in silence."""
    import yaml

    from cutlab.search.__main__ import main

    path = tmp_path / "fixed.yaml"
    path.write_text(yaml.safe_dump(preset))
    assert main([f"search={path}", "--dry-run", *TINY]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"cutlab-search: error: {message}"), error


def test_search_storage_on_the_command_line_wins_over_cutlab_storage_and_differs_from_storage_refused(
        tmp_path, capsys, monkeypatch):
    """Before: $CUTLAB_STORAGE, --storage's default, replaced a search.storage= of the command line in silence, and
    --storage beside a different search.storage= won in silence."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("CUTLAB_STORAGE", f"sqlite:///{tmp_path / 'environment.db'}")
    journal = tmp_path / "typed.journal"
    assert main(["search=dust_video", f"search.storage={journal}", "--dry-run", *TINY]) == 0
    assert f"  storage: {journal}" in capsys.readouterr().err.splitlines()
    assert main(["search=dust_video", "--dry-run", *TINY]) == 0  # the variable where the command names none
    assert f"  storage: sqlite:///{tmp_path / 'environment.db'}" in capsys.readouterr().err.splitlines()
    assert main(["search=dust_video", "--storage", str(tmp_path / "flag.journal"), f"search.storage={journal}",
                 "--dry-run", *TINY]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "cutlab-search: error: --storage and search.storage= name two different storages; give one of them (neither "
        "is shown here: an address may hold a password)"]


def test_a_preset_file_that_is_not_yaml_is_named_in_one_line_with_its_line_and_column(tmp_path, capsys):
    from cutlab.search.__main__ import main

    preset = tmp_path / "space.yaml"
    preset.write_text("n_trials: [1\nspace: {}\n")
    assert main([f"search={preset}", "--dry-run"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"cutlab-search: error: {preset} is not valid YAML at line 2, column 6 (while parsing a flow "
                     "sequence begun at line 1, column 11: expected ',' or ']', but got ':'); fix the file "
                     "there"], error


def test_unknown_preset_and_missing_preset_name_list_the_presets(capsys):
    from cutlab.search.__main__ import main

    assert main(["search=nope"]) == 2
    error = capsys.readouterr().err
    assert "choose one of search=" in error and "dust_video" in error
    assert main(["L=2"]) == 2
    assert "say which search to run: search=<preset>" in capsys.readouterr().err


def test_unreachable_database_stops_before_any_run(tmp_path, capsys, monkeypatch):
    import socket

    from cutlab.search.__main__ import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    started = time.monotonic()
    assert main(["search=dust_video", "--storage", f"postgresql://cutlab:secret@127.0.0.1:{port}/optuna", *TINY]) == 2
    error = capsys.readouterr().err
    assert f"cannot open the search storage postgresql://cutlab:***@127.0.0.1:{port}/optuna" in error, error
    assert "secret" not in error and "Start the database" in error
    assert time.monotonic() - started < 30
    assert not list((tmp_path / "runs").rglob("summary.json"))


def test_a_setting_that_every_trial_drawing_it_would_refuse_stops_the_search_before_any_trial(tmp_path, capsys,
                                                                                              monkeypatch):
    # from L = 5 DUST's default augments its Lagrangian (train.penalty=3), which resilience=slack refuses: before the
    # space's corners were checked, each worker died at its first trial that drew slack
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    space = {"train.resilience": {"type": "categorical", "choices": ["off", "slack"]}}
    preset = write_preset(tmp_path, space, overrides=["model=dust", "train=constrained"])
    assert main([f"search={preset}", "--dry-run", *TINY, "L=5"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "a trial with train.resilience=slack would be refused" in error[0]
    assert "train.penalty=3.0" in error[0] and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("depth", ["L=3", "L=5"])
def test_the_readmes_search_plans_at_both_depths_of_dust(tmp_path, monkeypatch, capsys, depth):
    stderr = search_in_process(["search=dust_video", "--dry-run", "data=ucsd_ped2", depth], tmp_path, monkeypatch,
                               capsys)
    assert "train.penalty float [0, 10]" in stderr and "dry run: nothing was run" in stderr


def test_dry_run_prints_the_plan_and_touches_nothing(tmp_path, monkeypatch, capsys):
    stderr = search_in_process(["search=fair_comparison", "--dry-run", "--n-trials", "3", *TINY], tmp_path,
                               monkeypatch, capsys)
    assert "arm constrained [train=constrained]: train.alpha float [0.05, 0.5]" in stderr
    assert "arm erm [train=erm]: seeds 0..2" in stderr
    assert "3 trials per arm in total, minimize" in stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("preset, change, shown", [
    # a space key is a dotted cutlab key: OmegaConf read search.space.train.lr.low as space: {train: {lr: {low}}}, and
    # the preset check said "search.space.train: unknown fields ['lr']"
    ("dust_video", "search.space.train.lr.low=1e-3", "train.lr log_float [0.001, 0.01]"),
    ("dust_video", "search.space.train.grad_clip={type: float, low: 0.5, high: 2}", "train.grad_clip float [0.5, 2]"),
    ("fair_comparison", "search.arms.constrained.space.train.alpha.high=0.4", "train.alpha float [0.05, 0.4]"),
    ("dust_video", "search.space[train.lr].low=1e-3", "train.lr log_float [0.001, 0.01]"),  # OmegaConf's own form
])
def test_a_space_keys_field_is_changed_with_search_key_value(tmp_path, monkeypatch, capsys, preset, change, shown):
    stderr = search_in_process([f"search={preset}", change, "--dry-run", *TINY], tmp_path, monkeypatch, capsys)
    assert shown in stderr, stderr


def test_a_mistyped_field_of_a_space_key_is_named_with_its_key(tmp_path, monkeypatch, capsys):
    from cutlab.search.__main__ import main

    assert main(["search=dust_video", "search.space.train.lr.lowe=1e-3", "--dry-run", *TINY]) == 2
    assert "search.space.train.lr: unknown fields ['lowe']" in capsys.readouterr().err


def test_dry_run_shows_an_arms_key_the_command_sets_with_the_commands_value(tmp_path, monkeypatch, capsys):
    """The command's overrides come after an arm's: model=ut runs, yet the plan showed the preset's model=dust."""
    stderr = search_in_process(["search=dust_video", "--dry-run", "model=ut", *TINY], tmp_path, monkeypatch, capsys)
    assert "arm search [model=ut (the command's; the preset's model=dust) train=constrained]: train.alpha" in stderr


# ---------------------------------------------------------------- the search itself


def test_journal_search_interrupted_mid_trial_resumes_in_the_same_folder_and_stops_at_the_total(tmp_path, monkeypatch,
                                                                                               capsys):
    """SIGTERM stops the worker mid-trial; the same command resumes that trial from its checkpoint."""
    args = ["search=dust_video", "--n-trials", "3", "search.pruner=null", *FAST_HEARTBEAT, *TINY]
    worker = start_search(args, tmp_path, tmp_path / "first.log")
    trial_1 = tmp_path / "runs" / "search" / "dust_video" / "trial-0001"
    wait_for(lambda: (trial_1 / "checkpoint.pt").exists(), 120, "trial 1's first checkpoint")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 75  # PREEMPTED_EXIT, as one run and a sweep exit on SIGTERM (it was 130)
    stopped = json.loads((trial_1 / "summary.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["steps"] < 8

    resumed = search_in_process(args, tmp_path, monkeypatch, capsys)  # the same command again
    # trial 1 was re-queued when stopped: Optuna records it FAIL, the counts say requeued (nothing failed)
    assert "trials so far 1 complete, 1 requeued, 1 waiting" in resumed, resumed
    study = study_of(tmp_path, "dust_video")
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"], states  # the stopped trial, re-queued once
    folders = sorted(Path(t.user_attrs["run_dir"]).name for t in study.trials if t.state.name == "COMPLETE")
    # trial 2 re-ran trial 1's parameters in trial 1's folder; the next fresh trial is number 3
    assert folders == ["trial-0000", "trial-0001", "trial-0003"]
    retried = next(t for t in study.trials if Path(t.user_attrs["run_dir"]).name == "trial-0001" and t.state.name == "COMPLETE")
    failed = next(t for t in study.trials if t.state.name == "FAIL")
    assert retried.params == failed.params and retried.number != failed.number
    for folder in folders:
        assert_run_complete(trial_1.parent / folder, steps=8)
    assert json.loads((trial_1 / "summary.json").read_text())["wall_time_s"] > 0

    again = search_in_process(args, tmp_path, monkeypatch, capsys)  # a finished study runs nothing more
    assert len(study_of(tmp_path, "dust_video").trials) == 4 and "trial 4" not in again
    report = json.loads((trial_1.parent / "search_report.json").read_text())["search"]
    assert report["trials"] == {"complete": 3, "requeued": 1} and report["best"]["validation"] == best_value(study)


@pytest.mark.slow
def test_sqlite_storage_total_is_per_study_not_per_invocation(tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    args = ["search=dust_video", "--storage", url, "search.pruner=null", "--study", "lite", *TINY]
    search_in_process([*args, "--n-trials", "2"], tmp_path, monkeypatch, capsys)
    again = search_in_process([*args, "--n-trials", "2"], tmp_path, monkeypatch, capsys)  # already at its total
    assert [t.state.name for t in study_of(tmp_path, "lite", url).trials] == ["COMPLETE"] * 2
    assert "trials so far 2 complete" in again and "lite trial 2 " not in again
    widened = search_in_process([*args, "--n-trials", "3"], tmp_path, monkeypatch, capsys)  # one more
    study = study_of(tmp_path, "lite", url)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3 and "lite trial 2 " in widened
    assert study.user_attrs["sampler_seed"] == 0 and all(t.user_attrs["seed"] == 0 for t in study.trials)
    # worker 0 samples with the preset's seed; resumed with 2 trials in the study, 1000 per trial above it, so its
    # sampler does not propose the first session's start-up points again
    assert [t.user_attrs["sampler_seed"] for t in study.trials] == [0, 0, 2000]


def test_hopeless_trial_is_pruned_from_epoch_end_validation(tmp_path, monkeypatch):
    """A sane trial first, then one with a primal learning rate 500x too large: the median rule stops it."""
    from cutlab.search.__main__ import build_plan, parse_args
    from cutlab.search.storage import open_storage
    from cutlab.search.worker import open_study, work

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("CUTLAB_CACHE_DIR", str(tmp_path / "cache"))
    preset = write_preset(tmp_path, {"train.lr": {"type": "log_float", "low": 1e-4, "high": 1.0}}, study="prune",
                          pruner={"n_startup_trials": 1, "n_warmup_steps": 0}, overrides=["train=constrained"])
    plan = build_plan(parse_args([f"search={preset}", *TINY]))
    study = open_study(plan, plan.preset.arms[0], open_storage(plan.storage_url, plan.preset.heartbeat))
    study.enqueue_trial({"train.lr": 1e-3})
    study.enqueue_trial({"train.lr": 0.5})
    assert work(plan) == {"complete": 1, "pruned": 1}
    sane, hopeless = study.trials
    assert sane.state.name == "COMPLETE" and hopeless.state.name == "PRUNED"
    assert hopeless.intermediate_values[1] > sane.intermediate_values[1]
    summary = json.loads((Path(hopeless.user_attrs["run_dir"]) / "summary.json").read_text())
    assert summary["status"] == "pruned" and summary["steps"] == 2  # stopped after its first epoch
    assert "worse than the median" in summary["error"]
    assert_run_complete(Path(sane.user_attrs["run_dir"]), steps=8)
    # the analysis report counts the pruned trial, so its counts add up to the folders
    from analysis.collect import collect_runs
    from analysis.report import write_report

    report = write_report(collect_runs(Path(hopeless.user_attrs["run_dir"]).parent), tmp_path / "report").path
    assert "2 run folders: 1 complete" in report.read_text() and "1 pruned (stopped early" in report.read_text()
    # the pruner's validation after each epoch leaves training as it was: the same overrides run without a pruner
    # give the same history to the last digit (DUST's power iteration updates a buffer at every forward)
    from cutlab.config.compose import compose_run_config
    from cutlab.run.experiment import run_experiment

    unpruned = tmp_path / "runs" / "unpruned"
    run_experiment(compose_run_config(sane.user_attrs["overrides"]), unpruned)
    history = lambda run: pd.read_csv(run / "history.csv").drop(columns=["step_time"])  # noqa: E731
    pd.testing.assert_frame_equal(history(unpruned), history(Path(sane.user_attrs["run_dir"])), check_exact=True)


@pytest.mark.slow  # three sessions of a search, two trials
def test_a_resumed_study_keeps_its_base_config_and_does_not_repropose_its_first_points(tmp_path, monkeypatch, capsys):
    from cutlab.search.__main__ import main

    first = search_in_process(["search=dust_video", "--n-trials", "1", "search.pruner=null", *TINY], tmp_path,
                              monkeypatch, capsys)
    assert "trial 0 complete" in first
    # another base config would mix two problems in one study (its best trial could be the other's)
    assert main(["search=dust_video", "--n-trials", "2", "search.pruner=null", *TINY, "L=3"]) == 2
    refused = capsys.readouterr().err.strip().splitlines()[-1]
    assert "was started with the overrides" in refused and "search.study=<new name>" in refused
    # a preset of one's own that kept the study's name, another space: it resumed the study, its trials mixed in
    import yaml

    own = yaml.safe_load((ROOT / "searches" / "dust_video.yaml").read_text())
    own["space"]["train.lr"] = {"type": "log_float", "low": 2e-2, "high": 5e-2}
    (tmp_path / "my_search.yaml").write_text(yaml.safe_dump(own))
    assert main([f"search={tmp_path / 'my_search.yaml'}", "--n-trials", "2", "search.pruner=null", *TINY]) == 2
    refused = capsys.readouterr().err.strip().splitlines()[-1]
    assert ("was started with the search space train.alpha in [0.05, 0.5], train.lr in [0.0001, 0.01] (log_float)"
            in refused and "train.lr in [0.02, 0.05] (log_float)" in refused), refused
    # keys that do not change a result may differ (a search's workers add their own threads), and the same
    # overrides may come in another order (it was refused as other overrides)
    search_in_process(["search=dust_video", "--n-trials", "2", "search.pruner=null", *TINY[::-1], "threads=2"],
                      tmp_path, monkeypatch, capsys)
    study = study_of(tmp_path, "dust_video")
    trial_0, trial_1 = sorted(study.trials, key=lambda t: t.number)
    # a fresh sampler with the first session's seed would propose trial 0's parameters again
    assert trial_0.user_attrs["sampler_seed"] == 0 and trial_1.user_attrs["sampler_seed"] == 1000
    assert trial_0.params != trial_1.params and [t.state.name for t in (trial_0, trial_1)] == ["COMPLETE"] * 2


def test_a_trial_whose_run_refused_in_one_line_runs_its_parameters_when_the_search_resumes(tmp_path, monkeypatch,
                                                                                            capsys):
    # a model module not on PYTHONPATH: the search stopped at trial 0 in one line; run again once fixed, it counted
    # trial 0 "requeued" but asked fresh parameters, and trial 0's point was never run
    import cutlab.run.experiment as experiment
    from cutlab.errors import CutlabError
    from cutlab.search.__main__ import main

    real = experiment.run_experiment

    def refused(*args, **kwargs):
        raise CutlabError("model._target_=smoothing.TemporalSmoother cannot be imported")

    monkeypatch.setattr(experiment, "run_experiment", refused)
    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    assert main(["search=dust_video", "--n-trials", "1", "search.pruner=null", *TINY]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("cannot be imported")
    monkeypatch.setattr(experiment, "run_experiment", real)
    search_in_process(["search=dust_video", "--n-trials", "1", "search.pruner=null", *TINY], tmp_path, monkeypatch,
                      capsys)
    first, again = sorted(study_of(tmp_path, "dust_video").trials, key=lambda t: t.number)
    assert (first.state.name, again.state.name) == ("FAIL", "COMPLETE") and again.params == first.params


def test_trials_that_fail_as_results_count_toward_the_total(tmp_path, monkeypatch, capsys):
    # a configuration whose every run raises (out of memory, say): before, failed trials were not counted and the
    # search asked new ones forever. The run itself is replaced, since no real run here raises an ordinary error.
    import cutlab.run.experiment as experiment

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    from cutlab.search.__main__ import main

    monkeypatch.setattr(experiment, "run_experiment", out_of_memory)
    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    # no trial completed: it exited 0, and each trial's line named no file or line
    assert main(["search=dust_video", "--n-trials", "3", "search.pruner=null", *TINY]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cutlab-search: no trial completed in dust_video (3 failed)"), err[-1]
    study = study_of(tmp_path, "dust_video")
    assert [t.state.name for t in study.trials] == ["FAIL"] * 3
    line = out_of_memory.__code__.co_firstlineno + 1
    assert all(t.user_attrs["error"] == f"RuntimeError: CUDA out of memory ({__file__}, line {line})"
               for t in study.trials), study.trials[0].user_attrs["error"]


def test_a_diverging_trial_is_a_result_and_the_search_goes_on(tmp_path, monkeypatch, capsys):
    # a real run whose loss became NaN (NonFiniteLoss, a CutlabError): it was taken for a refusal in one line, the
    # search stopped (exit 2) and the same command re-queued and re-ran the same parameters, forever
    from cutlab.search.__main__ import main

    preset = write_preset(tmp_path, {"train.lr": {"type": "log_float", "low": 1e25, "high": 1e30}}, pruner=None,
                          overrides=["model=dust", "train=constrained"])
    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    args = [f"search={preset}", *TINY]
    for failed_lines in (2, 0):  # again: the total is taken, nothing runs again
        assert main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("cutlab-search: no trial completed in space (2 failed)"), err
        assert sum("failed: NonFiniteLoss: the loss of layer 0 became nan" in line for line in err) == failed_lines
    study = study_of(tmp_path, "space")
    assert [t.state.name for t in study.trials] == ["FAIL"] * 2
    assert all(t.user_attrs["error"].startswith("NonFiniteLoss: the loss of layer 0 became nan") for t in study.trials)


def test_a_drawn_combination_the_config_checks_refuse_fails_its_trial_and_the_search_goes_on(tmp_path, monkeypatch,
                                                                                              capsys):
    # every end of the space is a valid run, but a trial drawing train.penalty > 0 with train.resilience=slack is not:
    # its run refused it in one line, the trial was re-queued, and the same command asked it again and stopped, forever
    from cutlab.search.__main__ import main

    space = {"train.penalty": {"type": "float", "low": 0.0, "high": 10.0},
             "train.resilience": {"type": "categorical", "choices": ["off", "slack"]}}
    preset = write_preset(tmp_path, space, n_trials=3, pruner=None, overrides=["model=dust", "train=constrained"])
    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    args = [f"search={preset}", *TINY]
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    err = capsys.readouterr().err
    refused = [line for line in err.splitlines() if " refused " in line]
    assert refused and all("augments strict constraints, and train.resilience=slack relaxes them" in line
                           for line in refused), err[-3000:]
    assert "Traceback" not in err
    study = study_of(tmp_path, "space")
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE"] * (3 - len(refused)) + ["FAIL"] * len(refused), states
    for trial in study.trials:
        if trial.state.name == "FAIL":
            assert trial.params["train.resilience"] == "slack" and trial.params["train.penalty"] > 0
            assert trial.user_attrs["error"].startswith("refused: train.penalty="), trial.user_attrs
    assert main(args) == 0  # again: the total is taken, nothing is asked or run again
    assert " refused " not in capsys.readouterr().err and len(study_of(tmp_path, "space").trials) == 3


def test_a_study_name_hydra_would_split_names_its_trials_w_and_b_group_whole(tmp_path, monkeypatch, capsys):
    # --study ped2,L5 (one folder name): each trial's wandb.group=ped2,L5 override did not compose, outside the run,
    # so the trial stayed RUNNING and the same command asked another one and failed the same way, again and again
    search_in_process(["search=dust_video", "--n-trials", "1", "--study", "ped2,L5", "search.pruner=null", *TINY],
                      tmp_path, monkeypatch, capsys)
    [trial] = study_of(tmp_path, "ped2,L5").trials
    assert trial.state.name == "COMPLETE"
    config = (Path(trial.user_attrs["run_dir"]) / "config.yaml").read_text()
    assert "group: ped2,L5" in config, config


def test_fair_comparison_preset_gives_both_arms_the_same_trials_and_reports_the_best_of_each(tmp_path, monkeypatch,
                                                                                             capsys):
    stderr = search_in_process(["search=fair_comparison", "--n-trials", "2", *TINY], tmp_path, monkeypatch, capsys)
    study_dir = tmp_path / "runs" / "search" / "fair_comparison"
    constrained = study_of(tmp_path, "fair_comparison-constrained", f"journal:{study_dir / 'optuna.journal'}")
    erm = study_of(tmp_path, "fair_comparison-erm", f"journal:{study_dir / 'optuna.journal'}")
    assert [t.state.name for t in constrained.trials] == [t.state.name for t in erm.trials] == ["COMPLETE"] * 2
    assert sorted(t.params["seed"] for t in erm.trials) == [0, 1]
    assert len({t.params["train.alpha"] for t in constrained.trials}) == 2  # searched, not repeated
    for trial in erm.trials:
        config = (Path(trial.user_attrs["run_dir"]) / "config.yaml").read_text()
        assert "constrained: false" in config and f"seed: {trial.params['seed']}" in config
        assert "group: fair_comparison-erm" in config  # W&B groups a study's trials; each is named trial-NNNN
    report = json.loads((study_dir / "search_report.json").read_text())
    for arm, study in (("constrained", constrained), ("erm", erm)):
        best = report[arm]["best"]
        assert best["validation"] == best_value(study) and best["metric"] == "rmse"
        summary = json.loads((Path(best["run_dir"]) / "summary.json").read_text())
        assert best["test_mean_metric"] == summary["test_mean_metric"]
    assert "| constrained | fair_comparison-constrained | 2/0/0 |" in stderr
    assert "| erm | fair_comparison-erm | 2/0/0 |" in stderr
    # each study's trials done out of its total, with the time left
    for arm in ("constrained", "erm"):
        assert re.search(rf"\[cutlab-search\] fair_comparison-{arm}: 1/2 trials done \(50%\), .* left; trial \d+ "
                         "complete", stderr), stderr[-3000:]
        assert f"[cutlab-search] fair_comparison-{arm}: 2/2 trials done (100%)" in stderr
    # widening the total queues the ERM arm's next seed (it once drew a seed it had already run)
    search_in_process(["search=fair_comparison", "--n-trials", "3", *TINY], tmp_path, monkeypatch, capsys)
    erm = study_of(tmp_path, "fair_comparison-erm", f"journal:{study_dir / 'optuna.journal'}")
    assert sorted(t.params["seed"] for t in erm.trials) == [0, 1, 2]


# ---------------------------------------------------------------- feasibility: the verdict steers the search


def test_best_trial_is_the_feasible_one_when_an_infeasible_trial_scores_better(tmp_path, monkeypatch, capsys):
    """Two real trials: a trained one that misses its descent constraints (tolerance 0) with the better validation
    RMSE, and an untrained one (lr 1e-5) that meets them (tolerance 100). The study's best is the feasible one."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from cutlab.search.__main__ import build_plan, parse_args
    from cutlab.search.report import format_report, write_report
    from cutlab.search.storage import open_storage
    from cutlab.search.worker import open_study, work

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("CUTLAB_CACHE_DIR", str(tmp_path / "cache"))
    journal = tmp_path / "plain" / "study.journal"  # Optuna's own form: a journal file's path, no prefix
    preset = write_preset(tmp_path, {"train.lr": {"type": "categorical", "choices": [1e-2, 1e-5]},
                                     "eval.feasibility_tol": {"type": "categorical", "choices": [0.0, 100.0]}},
                          study="verdicts", pruner=None, overrides=["train=constrained"])
    plan = build_plan(parse_args([f"search={preset}", "--storage", str(journal), *TINY]))
    study = open_study(plan, plan.preset.arms[0], open_storage(plan.storage_url, plan.preset.heartbeat))
    study.enqueue_trial({"train.lr": 1e-2, "eval.feasibility_tol": 0.0})
    study.enqueue_trial({"train.lr": 1e-5, "eval.feasibility_tol": 100.0})
    assert work(plan) == {"complete": 2}

    # read back with plain Optuna from the journal file, as optuna-dashboard opens it
    stored = optuna.load_study(study_name="verdicts", storage=JournalStorage(JournalFileBackend(str(journal))))
    trained, untrained = stored.trials
    assert trained.value < untrained.value  # the better score ...
    assert trained.user_attrs["verdict"] == "infeasible" and untrained.user_attrs["verdict"] == "feasible"
    assert max(trained.constraints.values()) > 0 and max(untrained.constraints.values()) <= 0  # ... is infeasible
    assert set(trained.constraints) == {"eps_l0", "descent_l1", "descent_l2"}
    for trial in (trained, untrained):
        summary = json.loads((Path(trial.user_attrs["run_dir"]) / "summary.json").read_text())
        assert trial.user_attrs["verdict"] == summary["verdict"] and trial.user_attrs["metric"] == "rmse"
        assert trial.user_attrs["test_mean_metric"] == summary["test_mean_metric"]
        assert trial.user_attrs["validation"] == summary["selection_metric"] == trial.value
    assert stored.best_trial.number == untrained.number  # Optuna's own best: feasible first

    report = write_report({None: study}, plan.study_dir)["search"]
    assert report["best"]["trial"] == untrained.number and report["best_is_feasible"]
    assert report["best"]["verdict"] == "feasible" and report["verdicts"]["infeasible"] == 1
    assert report["best_by_metric"]["trial"] == trained.number and report["best_by_metric"]["verdict"] == "infeasible"
    assert f"trial {trained.number} scored better ({trained.value:.4g}) but is infeasible" in format_report({"search": report})


def test_slack_feasible_and_degenerate_trials_are_infeasible_to_optuna():
    """How each verdict reaches Optuna: a slack-feasible trial is infeasible by what its slack covered, so it is
    never the best while a strictly feasible trial exists; ERM has no constraints (every trial feasible)."""
    import optuna

    from cutlab.search.verdict import DEGENERATE_VIOLATION, constraint_values, is_feasible, verdict_words

    def summary(verdict, violations, epsilon=1.0):
        return {"verdict": verdict, "epsilon": epsilon,
                "feasibility": {"tolerance": 0.02, "relative_violations": violations}}

    slack = constraint_values(summary("slack_feasible", [-0.5, 0.05, -0.1]))
    assert slack == pytest.approx({"eps_l0": -0.52, "descent_l1": 0.03, "descent_l2": -0.12})
    degenerate = constraint_values(summary("degenerate", [0.0, float("inf")], epsilon=None))
    assert degenerate == {"descent_l1": DEGENERATE_VIOLATION - 0.02}  # no ε: no constraint on layer 0
    # a finite miss beyond DEGENERATE_VIOLATION is capped there: no trial ranks below a degenerate one
    assert constraint_values(summary("infeasible", [5000.0, 0.5])) == pytest.approx(
        {"eps_l0": DEGENERATE_VIOLATION - 0.02, "descent_l1": 0.48})
    assert constraint_values({"verdict": "unconstrained"}) == {}
    assert "not strictly feasible: layers 1 only within their slack" in verdict_words("slack_feasible", [1])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    for value, constraints in ((10.0, slack), (11.0, degenerate), (12.0, constraint_values(summary("feasible", [-0.1, 0.01])))):
        trial = study.ask()
        for name, violation in constraints.items():
            trial.set_constraint(name, violation)
        study.tell(trial, value)
    assert study.best_trial.value == 12.0  # the strictly feasible one, though the slack-feasible one scored 10
    # a constraint value of exactly 0 (a violation exactly at the tolerance) is met, as Optuna reads it
    assert [is_feasible(trial) for trial in study.trials] == [False, False, True]
    edge = study.ask()
    edge.set_constraint("descent_l1", 0.0)
    study.tell(edge, 13.0)
    assert is_feasible(study.trials[-1])


@pytest.mark.parametrize("storage, fix", [
    ("sqlite://study.db", "sqlite:///PATH (three slashes"),
    ("postgres://cutlab:secret@dbhost/optuna", "use postgresql://USER@HOST:PORT/DB"),
    ("file:///tmp/study.journal", "the journal file's path itself, without file://"),
    ("postgresql:cutlab@dbhost/optuna", "needs '//' after it: postgresql://USER@HOST:PORT/DB"),
    # it made a folder named ~ in the current folder, the study's database inside it
    ("sqlite:///~/study.db", f"SQLite takes ~ as written, a folder named ~ here; write the path out: "
                             f"sqlite:///{Path.home() / 'study.db'}"),
])
def test_storage_in_a_wrong_form_stops_with_one_line_naming_the_fix(tmp_path, capsys, monkeypatch, storage, fix):
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    assert main(["search=dust_video", "--storage", storage, "--dry-run", *TINY]) == 2
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if line.startswith("cutlab-search: error:")]
    assert len(lines) == 1 and fix in lines[0], error
    assert "secret" not in error and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("storage", ["sqlite:///:memory:", "sqlite:///", "sqlite:///?timeout=5",
                                     "sqlite:///file::memory:?cache=shared&uri=true",
                                     "sqlite:///file:study?mode=memory&cache=shared&uri=true"])
def test_an_sqlite_database_in_memory_is_refused_in_one_line_before_anything_runs(tmp_path, capsys, monkeypatch,
                                                                                   storage):
    """Before: accepted; each worker had a database of its own, the heartbeat thread's traceback (no such table:
    trial_heartbeats) ran to ~90 lines, the trial trained, and the search exited 0 with an empty report."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    for dry_run in (["--dry-run"], []):
        assert main(["search=dust_video", "--storage", storage, "--n-trials", "1", *dry_run, *TINY]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert error == [f"cutlab-search: error: the search storage {storage} is a database in memory: each worker "
                         "process would have its own, and it is gone when the command ends (nothing to resume, no "
                         "report); give a file, sqlite:///PATH, or drop --storage for the study folder's journal"]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("where, fix", [
    ("FOLDER", "is a folder, not a journal file; give a file's path, e.g. --storage "),
    ("/proc/cutlab/study.journal", "cannot be written: /proc: takes no new files (a virtual file system); "
                                   "give a journal file in a folder you can write"),
    ("FILE/study.journal", "is a file; give a journal file in a folder you can write"),
])
def test_a_journal_that_cannot_be_a_file_stops_in_one_line_with_dry_run_and_without(tmp_path, capsys, monkeypatch,
                                                                                    where, fix):
    """Optuna's IsADirectoryError or FileNotFoundError traceback as the search began, and --dry-run said nothing."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    storage = where.replace("FOLDER", str(tmp_path / "folder")).replace("FILE", str(tmp_path / "file"))
    for dry_run in (["--dry-run"], []):
        assert main(["search=dust_video", "--storage", storage, "--n-trials", "1", *dry_run, *TINY]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cutlab-search: error:")]
        assert len(lines) == 1 and fix in lines[0], lines
    assert not (tmp_path / "runs").exists() and not any((tmp_path / "folder").iterdir())


def test_a_journal_path_with_a_tilde_is_in_the_home_folder_not_in_a_folder_named_tilde(tmp_path, monkeypatch):
    """A quoted --storage '~/study.journal' (or one from $CUTLAB_STORAGE) made a folder named ~ in the current one."""
    from cutlab.search.storage import open_storage

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    open_storage("~/searches/study.journal", {"interval_s": 10, "grace_s": 60})
    assert (tmp_path / "home" / "searches" / "study.journal").is_file() and not (tmp_path / "~").exists()


def test_a_mysql_storage_without_its_driver_names_the_driver_and_hides_the_password(tmp_path, capsys, monkeypatch):
    """It named PostgreSQL's driver (pip install 'cutlab[postgres]') for a MySQL address."""
    from cutlab.search.__main__ import main

    pytest.importorskip("sqlalchemy")
    if importlib.util.find_spec("MySQLdb") or importlib.util.find_spec("pymysql"):
        pytest.skip("a MySQL driver is installed here: the address would be tried, not refused")
    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    storage = "mysql://cutlab:secret@dbhost/optuna"
    assert main(["search=dust_video", "--storage", storage, "--n-trials", "1", *TINY]) == 2
    error = capsys.readouterr().err
    assert "needs its database driver: pip install pymysql and write mysql+pymysql://" in error
    assert "secret" not in error


def test_a_plain_cutlab_run_never_imports_optuna():
    code = "import sys, cutlab.cli, cutlab.run.experiment; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_stopped_trial_is_failed_and_requeued_under_the_ask_lock(tmp_path, monkeypatch):
    """Failing a stopped worker's trial and queueing its parameters again is one step under the lock that asking
    takes: a worker asking in between once counted neither and asked a fresh trial, one over the total. Here the
    lock is held, as an asking worker holds it, while another worker's trial is stopped: nothing moves until it
    is released, then the trial is failed and its parameters wait for the next worker."""
    import threading

    from cutlab.search.__main__ import build_plan, parse_args
    from cutlab.search.storage import counts_text, open_storage, trial_counts
    from cutlab.search.worker import open_study, requeue, study_lock

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    preset = write_preset(tmp_path, {"train.lr": {"type": "log_float", "low": 1e-4, "high": 1e-2}}, study="lock")
    plan = build_plan(parse_args([f"search={preset}", *TINY]))
    study = open_study(plan, plan.preset.arms[0], open_storage(plan.storage_url, plan.preset.heartbeat))
    trial = study.ask()
    trial.suggest_float("train.lr", 1e-4, 1e-2, log=True)
    stopping = threading.Thread(target=requeue, args=(plan.study_dir, study, trial))
    with study_lock(plan.study_dir):
        stopping.start()
        stopping.join(timeout=1.0)
        assert stopping.is_alive() and [t.state.name for t in study.get_trials()] == ["RUNNING"]
    stopping.join(timeout=30)
    assert not stopping.is_alive()
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]
    assert trials[1].params == trial.params and trials[1].system_attrs["failed_trial"] == trial.number
    assert counts_text(trial_counts(study)) == "1 requeued, 1 waiting"  # as the search prints them, not a dict


def test_a_trial_stopped_more_often_than_max_retry_still_resumes_with_its_parameters(tmp_path, monkeypatch):
    """Stopping is not dying: a trial stopped five times (each resume stopped again, as on a preemptible partition)
    is queued again each time with its parameters and its first folder. Once it was abandoned after max_retry (3)
    stops and the next ask drew fresh parameters, its checkpoint unused."""
    from cutlab.search.__main__ import build_plan, parse_args
    from cutlab.search.storage import open_storage
    from cutlab.search.worker import next_trial, open_study, requeue, run_folder

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    preset = write_preset(tmp_path, {"train.lr": {"type": "log_float", "low": 1e-4, "high": 1e-2}}, study="stops",
                          heartbeat={"interval_s": 60, "grace_s": 120, "max_retry": 3})
    plan = build_plan(parse_args([f"search={preset}", *TINY]))
    arm = plan.preset.arms[0]
    study = open_study(plan, arm, open_storage(plan.storage_url, plan.preset.heartbeat))
    first = next_trial(plan, arm, study)
    lr = first.suggest_float("train.lr", 1e-4, 1e-2, log=True)
    trial = first
    for _ in range(5):
        requeue(plan.study_dir, study, trial)
        trial = next_trial(plan, arm, study)
        assert trial.suggest_float("train.lr", 1e-4, 1e-2, log=True) == lr
        assert run_folder(plan, arm, trial) == run_folder(plan, arm, first)
    assert [t.state.name for t in study.get_trials()] == ["FAIL"] * 5 + ["RUNNING"]


def test_workers_started_together_on_a_slow_journal_all_open_the_study(tmp_path, monkeypatch):
    """Two workers started at once (two cutlab-search commands on one new study) on a journal whose writes are slow,
    as on a busy shared file system: the second once read the study's record between the first's writes of it (its
    preset without its overrides) and stopped with "study ... was started with the overrides (none)" (seen once in
    CI; four threads opening one study on a local disk met it 2 times in 20)."""
    from cutlab.search.__main__ import build_plan, parse_args
    from cutlab.search.storage import open_storage
    from cutlab.search.worker import open_study

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    plan = build_plan(parse_args(["search=dust_video", *TINY]))
    arm = plan.preset.arms[0]
    first, second = (open_storage(plan.storage_url, plan.preset.heartbeat) for _ in range(2))
    writing = threading.Event()
    write = first.set_study_user_attr

    def slow_write(study_id, key, value):  # each write of the first worker lands, then the next waits on the disk
        write(study_id, key, value)
        if key == "preset":  # the mark that the study's record is written: the second worker starts to read here
            writing.set()
        time.sleep(0.5)

    monkeypatch.setattr(first, "set_study_user_attr", slow_write)
    opened = []
    opening = threading.Thread(target=lambda: opened.append(open_study(plan, arm, first, 0)))
    opening.start()
    assert writing.wait(timeout=60)
    study = open_study(plan, arm, second, 1)  # raised CutlabError here
    opening.join(timeout=60)
    assert len(opened) == 1, "the first worker opened the study too"
    assert study.user_attrs["overrides"] == list(plan.base_overrides + arm.overrides)
    assert study.user_attrs["preset"] == "dust_video"


@pytest.mark.slow  # a trial handed over: test_a_worker_paused_past_the_heartbeat_grace_... by default
def test_a_worker_waiting_on_a_dead_workers_trial_says_so_then_resumes_it(tmp_path, monkeypatch, capsys):
    """A worker killed (SIGKILL: no clean-up) holds its trial RUNNING until its heartbeat is grace_s old. The same
    command again had the total taken and waited that long in silence under a time left that did not move. A grace
    of 15 s, not FAST_HEARTBEAT's 3: on a busy machine the second command took longer than 3 s to look, found the
    heartbeat already old and re-queued at once, with no wait to speak of."""
    heartbeat = ["search.heartbeat.interval_s=1", "search.heartbeat.grace_s=15"]
    args = ["search=dust_video", "--n-trials", "1", "search.pruner=null", *heartbeat,
            *[o for o in TINY if not o.startswith("train.")], "train.epochs=6", "train.max_steps_per_epoch=4"]
    killed = start_search(args, tmp_path, tmp_path / "killed.log")
    try:
        folder = wait_for(lambda: current_folder(tmp_path / "killed.log"), 180, "the first trial to start")
        wait_for(lambda: (folder / "checkpoint.pt").exists() or killed.poll() is not None, 180, "its first checkpoint")
    finally:
        killed.kill()
        killed.wait()
    err = search_in_process(args, tmp_path, monkeypatch, capsys)
    assert ("dust_video: the total is taken; waiting while trial 0 runs in another worker (one whose worker died is "
            "re-queued here once its heartbeat is 15 s old)") in err, err[-3000:]
    assert_run_complete(folder, steps=24)


def test_the_waiting_line_names_the_running_trials_and_is_not_said_once_none_runs(tmp_path):
    # the trial next_trial saw running could finish before the line was made: "waiting while trial  runs"
    import optuna

    from cutlab.search.preset import load_preset
    from cutlab.search.worker import Plan, waiting_line

    plan = Plan(load_preset("dust_video"), (), tmp_path, "", "minimize", 0)
    study = optuna.create_study(study_name="dust_video")
    running = study.ask()
    assert "waiting while trial 0 runs in another worker" in waiting_line(plan, study)
    study.tell(running, 1.0)
    assert waiting_line(plan, study) is None


def test_a_worker_paused_past_the_heartbeat_grace_hands_its_trial_over_and_no_trial_is_lost(tmp_path):
    """A worker stopped (SIGSTOP: Ctrl-Z, SLURM's suspend) for longer than the heartbeat grace looks dead: another
    worker re-queues its trial, asks it, and finds the trial's folder still held by the paused process. It waits for
    the folder instead of failing, and the paused worker, when it continues, ends its run at the next epoch with a
    checkpoint instead of telling a trial that is no longer its own; the other worker resumes the run there."""
    args = ["search=dust_video", "--n-trials", "3", "search.pruner=null", *FAST_HEARTBEAT,
            *[o for o in TINY if not o.startswith("train.")], "train.epochs=6", "train.max_steps_per_epoch=4"]
    paused = start_search(args, tmp_path, tmp_path / "worker-a.log")
    other = start_search(args, tmp_path, tmp_path / "worker-b.log")

    def pausable_folder():
        assert paused.poll() is None, (tmp_path / "worker-a.log").read_text()[-4000:]
        folder = current_folder(tmp_path / "worker-a.log")
        return folder if folder and (folder / "checkpoint.pt").exists() else None

    victim = wait_for(pausable_folder, 180, "worker A's trial to write its first checkpoint")
    paused.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: "is held by" in (tmp_path / "worker-b.log").read_text() or other.poll() is not None, 180,
                 "worker B to ask the paused worker's trial and meet its held folder")
        assert other.poll() is None, (tmp_path / "worker-b.log").read_text()[-4000:]
    finally:
        paused.send_signal(signal.SIGCONT)
    assert paused.wait(timeout=300) == 0, (tmp_path / "worker-a.log").read_text()[-4000:]
    assert other.wait(timeout=300) == 0, (tmp_path / "worker-b.log").read_text()[-4000:]
    log_a, log_b = ((tmp_path / f"worker-{w}.log").read_text() for w in "ab")
    assert "is held by" in log_b and "handed over" in log_a, (log_a[-3000:], log_b[-3000:])
    assert "Traceback" not in log_a + log_b
    study = study_of(tmp_path, "dust_video")
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE"] * 3 + ["FAIL"], states
    folders = {Path(t.user_attrs["run_dir"]) for t in study.trials if t.state.name == "COMPLETE"}
    assert len(folders) == 3 and victim in folders
    for folder in folders:
        assert_run_complete(folder, steps=24)  # every step once: the handed-over run resumed from its checkpoint


@pytest.mark.parametrize("meanwhile", ["removed", "taken"])
def test_a_worker_stopped_while_it_holds_the_journal_lock_releases_only_its_own(tmp_path, capsys, meanwhile):
    """A worker stopped while it holds the journal's lock past the lock's grace finds it removed by the others (and
    perhaps taken by one of them) when it continues. Optuna's release raised there ("did not possess lock": the
    trial's run failed), or removed the other worker's lock. Here it leaves what is not its own, and goes on."""
    from optuna.storages.journal import JournalFileSymlinkLock

    from cutlab.search.storage import JournalLock

    journal = str(tmp_path / "optuna.journal")
    stopped, other = JournalLock(journal), JournalFileSymlinkLock(journal)
    assert stopped.acquire()
    other.release()  # what another worker's acquire does past the grace: the lock is taken for abandoned
    if meanwhile == "taken":
        assert other.acquire()
    stopped.release()  # the stopped worker continues: no error
    assert os.path.lexists(journal + ".lock") == (meanwhile == "taken"), "the other worker's lock is left in place"
    assert "journal lock was taken over while this worker was stopped" in capsys.readouterr().err
    if meanwhile == "taken":
        other.release()
    assert stopped.acquire() and not stopped.release() and not os.path.lexists(journal + ".lock")  # usable again


def worker_pids(parent: int) -> dict[int, int]:
    """The local workers of the search process ``parent``, by worker index (read from /proc)."""
    workers = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
        if ppid == parent and b"--worker-index" in argv:
            workers[int(argv[argv.index(b"--worker-index") + 1])] = int(stat.parent.name)
    return workers


@pytest.mark.parametrize("killed", [(1,), pytest.param((0, 1), marks=pytest.mark.slow)])
def test_killed_local_workers_leave_the_report_of_the_trials_that_finished(tmp_path, killed):
    """SIGKILL on one of two local workers: the other re-queued its trial and finished every trial, but the command
    exited 2 ("worker exit codes [0, -9]") without writing search_report.json. Both killed: the report of what
    finished, then the error."""
    args = ["search=dust_video", "--n-trials", "3", "--workers", "2", "search.pruner=null", *FAST_HEARTBEAT, *TINY]
    log = tmp_path / "search.log"
    search = start_search(args, tmp_path, log)
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    try:
        wait_for(lambda: all((study_dir / f"trial-000{n}").is_dir() for n in (0, 1)), 120, "both workers' trials")
        workers = wait_for(lambda: len(pids := worker_pids(search.pid)) == 2 and pids, 10, "the workers' processes")
        for index in killed:
            os.kill(workers[index], signal.SIGKILL)
        code = search.wait(timeout=300)
    finally:
        search.kill()
    text = log.read_text()
    report = json.loads((study_dir / "search_report.json").read_text())
    if killed == (1,):
        assert code == 0 and ("cutlab-search: worker 1 (exit code -9) ended early; its trial was re-queued and "
                              "finished by another worker: every trial is done") in text, text[-4000:]
        assert report["search"]["trials"]["complete"] == 3, report
    else:
        assert code == 2 and text.strip().splitlines()[-1] == (
            "cutlab-search: error: worker 0 (exit code -9), worker 1 (exit code -9) ended early, and dust_video has "
            "trials left: see the messages above; run the same command again to resume"), text[-4000:]
        assert report["search"]["trials"].get("running"), report  # the killed workers' trials


@pytest.mark.slow  # a stopped search: test_journal_search_interrupted_mid_trial_... runs by default
def test_ctrl_c_on_a_terminal_stops_each_local_worker_with_one_signal_and_every_trial_is_requeued(tmp_path):
    """A terminal's Ctrl-C goes to its whole process group. The workers got it too, then the command's SIGTERM on
    top: a worker still re-queueing its trial when the second signal came exited mid-way (measured with PostgreSQL:
    a 'SystemExit: 143' traceback and a trial left RUNNING until the heartbeat grace). Each worker now gets only the
    command's one SIGTERM: it checkpoints, re-queues its trial and exits."""
    from helpers.search import search_command, search_env

    args = ["search=dust_video", "--n-trials", "4", "--workers", "2", "search.pruner=null", *TINY, "train.epochs=40"]
    log = tmp_path / "search.log"
    # its own group, as a terminal's job, with SIGINT at its default, as from a terminal: a pytest-xdist worker ignores
    # it once an earlier test has stopped a sweep in-process, and children inherit that (the search ran on to exit 0)
    search = subprocess.Popen(search_command(args), cwd=ROOT, env=search_env(tmp_path), stdout=log.open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    wait_for(lambda: all((study_dir / f"trial-000{n}" / "checkpoint.pt").exists() for n in (0, 1)), 120,
             "both workers' first checkpoints")
    os.killpg(search.pid, signal.SIGINT)  # what Ctrl-C on the terminal does
    assert search.wait(timeout=120) == 130
    text = log.read_text()
    assert "Ctrl-C: stopping after this step" not in text and "Traceback" not in text, text[-3000:]
    assert text.count("cutlab-search: stopped;") == 1, text[-3000:]  # the command's; each worker said it too
    states = sorted(t.state.name for t in study_of(tmp_path, "dust_video").trials)
    assert states == ["FAIL", "FAIL", "WAITING", "WAITING"], states  # both stopped trials re-queued, none RUNNING
    for n in (0, 1):
        assert json.loads((study_dir / f"trial-000{n}" / "summary.json").read_text())["status"] == "interrupted"
