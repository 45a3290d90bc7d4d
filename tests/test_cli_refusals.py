"""Hydra's own flags and keys as a user reaches for them: one line naming cutlab's way, never a traceback, and a run
refused at the door leaves no folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import cutlab

TINY = ["train.epochs=1", "train.max_steps_per_epoch=2", "L=2", "eval.gamma_test=[0]", "threads=1", "progress=false"]


def last_line(result) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_null_wandb_tags_is_no_tags(tmp_path):
    # the checks let null through, then list(None) was a TypeError traceback with the run's folder half written
    runs = tmp_path / "runs"
    cutlab(["wandb.mode=offline", "wandb.tags=null", "run_name=t", *TINY], runs)
    assert json.loads((runs / "t" / "summary.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("swept", ["gamma=0,1", "model=dust,ut"])
def test_cfg_job_of_several_values_says_it_is_a_sweep(tmp_path, swept):
    # it was "Ambiguous value ...; check the key against conf/", as if the key were misspelt
    line = last_line(cutlab(["--cfg", "job", swept], tmp_path / "runs", check=False))
    assert line == (f"cutlab: error: {swept} gives several values, which is a sweep: --cfg shows one run's config, so "
                    f"give one value; python -m cutlab --plan -m {swept} lists the sweep's runs")


@pytest.mark.parametrize(("args", "expected"), [
    (["--resolve"], "--resolve resolves the config --cfg prints: add --cfg (python -m cutlab --cfg job --resolve ...)"),
    (["-m", "--resolve", "gamma=0,1"], "--resolve and -m do not go together"),
    (["--resolve", "--plan", "-m", "gamma=0,1"], "--resolve and --plan do not go together"),
    (["--shell-completion"], "--shell-completion takes one of install=SHELL, uninstall=SHELL or query=SHELL, e.g. "
                             "cutlab --shell-completion install=bash"),
    # Hydra's completion of python SCRIPT.py: it took over every python command's, and completed nothing here
    (["-sc", "install=bash"], "python -m cutlab cannot complete itself (Hydra's completion knows python SCRIPT.py, "
                              "not python -m, and would take over every python command's): install the cutlab "
                              "command's, eval \"$(cutlab --shell-completion install=bash)\""),
    (["-sc", "query=bash"], "query=SHELL is what the installed completion calls, with the shell's COMP_LINE set"),
    (["--cfg", "job", "--info"], "--cfg and --info do not go together: give one of them"),
    # Hydra ignored --package without --cfg: the whole default run started
    (["-p", "train"], "--package picks the part of the config --cfg prints: add --cfg (python -m cutlab --cfg job "
                      "--package train)"),
    (["--plan", "-m", "-p", "train", "gamma=0,1"], "-p and --plan do not go together"),
    # --help, --hydra-help and --info compose the config: Hydra's traceback and its advice to add the key with '+'
    (["--help", "train.alhpa=1"], "the command's config cannot be composed: Could not override 'train.alhpa'; did you "
                                  "mean train.alpha?"),
    (["--hydra-help", "train.alhpa=1"], "the command's config cannot be composed: Could not override 'train.alhpa'"),
    (["--info", "config", "train.alhpa=1"], "the command's config cannot be composed: Could not override"),
    (["--help", "-m", "seed=0,1"], "seed=0,1 gives several values, which is a sweep: --help shows one run's config"),
    (["--info", "all", "seed=0,1"], "seed=0,1 gives several values, which is a sweep: --info shows one run's config"),
], ids=["resolve-alone", "resolve-with-m", "resolve-with-plan", "shell-completion-alone", "completion-install-m",
        "completion-query", "cfg-with-info",
        "package-alone", "package-with-plan", "help-bad-key", "hydra-help-bad-key", "info-bad-key", "help-sweep",
        "info-sweep"])
def test_a_looking_flag_without_what_it_needs_is_one_line(tmp_path, args, expected):
    # Hydra's ValueError tracebacks; --resolve --plan was argparse's "unrecognized arguments: --plan"
    assert last_line(cutlab(args, tmp_path / "runs", check=False)).startswith(f"cutlab: error: {expected}")


def test_the_cutlab_commands_completion_installs_for_cutlab_and_completes_its_groups():
    """What the refusal of python -m cutlab's completion points to works: installed for the cutlab command (not for
    every python command), and its query completes cutlab's own groups."""
    command = str(Path(sys.executable).parent / "cutlab")
    installed = subprocess.run([command, "-sc", "install=bash"], capture_output=True, text=True, check=True).stdout
    assert installed.strip().splitlines()[-1].endswith("-F hydra_bash_completion cutlab"), installed[-500:]
    env = {**os.environ, "COMP_LINE": "cutlab mod", "COMP_POINT": "10"}
    query = subprocess.run([command, "-sc", "query=bash"], capture_output=True, text=True, env=env, check=True)
    assert "model=" in query.stdout.split(), query.stdout


@pytest.mark.parametrize("override", ['hydra.sweeper.params={gamma:"0.05,0.07"}', "+hydra.sweeper.params.gamma=0,0.09",
                                      "hydra.sweeper.params.gamma='0,0.09'"])
def test_sweeper_params_on_the_command_line_are_one_line(tmp_path, override):
    # the planner's AttributeError or AssertionError traceback
    line = last_line(cutlab(["--plan", "-m", override], tmp_path / "runs", check=False))
    assert line.startswith(f"cutlab: error: {override.lstrip('+').partition('=')[0]}: hydra.sweeper is set in a "
                           "sweep file") and "give KEY=A,B with -m (python -m cutlab -m gamma=0,0.09)" in line, line


def test_a_sweep_files_hydra_launcher_names_cutlabs_launchers(tmp_path):
    # "Could not find 'hydra/launcher/joblib'; choose a config that exists under conf/"
    (tmp_path / "mine.yaml").write_text("defaults:\n  - config\n  - override hydra/launcher: joblib\n  - _self_\n"
                                        "hydra:\n  sweeper:\n    params:\n      gamma: 0,0.09\n")
    line = last_line(cutlab(["--plan", "-m", "--config-dir", str(tmp_path), "--config-name", "mine"],
                            tmp_path / "runs", check=False))
    assert "cutlab does not use Hydra's launcher plugins; its launchers are launcher=inprocess|local|slurm" in line


def test_a_run_refused_under_hydras_job_logging_leaves_no_folder(tmp_path):
    # Hydra's default job logging made runs/jld/cutlab.log before the refusal, and the empty log stayed
    runs = tmp_path / "runs"
    runs.mkdir()
    result = cutlab(["hydra/job_logging=default", "run_name=jld", "model=ut", "gamma=0", "wandb.mode=disabled", *TINY],
                    runs, check=False)
    assert "train.epsilon=auto is l_0 of the untrained model" in last_line(result)
    assert list(runs.iterdir()) == []


@pytest.mark.parametrize(("variable", "expected"), [
    ("WANDB_RESUME=bogus", "WANDB_RESUME=bogus: W&B cannot read it (input should be 'allow', 'must', 'never' or "
                           "'auto'); correct or unset it, or log without W&B (wandb.mode=disabled)"),
    ("WANDB_INIT_TIMEOUT=abc", "WANDB_INIT_TIMEOUT=abc: W&B cannot read it (input should be a valid number, unable to "
                               "parse string as a number); correct or unset it"),
    # replaced in silence by the W&B name cutlab gives the run
    ("WANDB_NAME=mine", "WANDB_NAME=mine: cutlab names each W&B run from its settings, and run_name=NAME puts NAME "
                        "first (and names the run's folder); unset WANDB_NAME"),
])
def test_a_wandb_variable_wandb_cannot_read_is_one_line_before_the_runs_folder(tmp_path, variable, expected):
    # pydantic's ValidationError traceback as the run's W&B service started, config.yaml and history.csv written
    runs = tmp_path / "runs"
    name, _, value = variable.partition("=")
    line = last_line(cutlab(["wandb.mode=offline", "run_name=v", *TINY], runs, check=False, env={name: value}))
    assert line.startswith(f"cutlab: error: {expected}"), line
    assert not (runs / "v").exists()


def test_wandb_run_id_given_to_a_sweep_is_refused_before_any_run(tmp_path):
    # every run of the sweep took it as its W&B id: W&B merges what one id logs into one run
    runs = tmp_path / "runs"
    line = last_line(cutlab(["-m", "seed=5,6", "wandb.mode=offline", *TINY], runs, check=False,
                            env={"WANDB_RUN_ID": "fixedid1"}))
    assert line == ("cutlab: error: WANDB_RUN_ID=fixedid1 names one W&B run, and every run of this sweep would log "
                    "into it; unset it: each run gets a W&B id of its own (wandb_id in its summary.json)")
    assert not runs.exists()


UNSET = "seed=${oc.env:CUTLAB_TEST_UNSET}"


@pytest.mark.parametrize("args", [[UNSET], ["--cfg", "job", "--resolve", UNSET], ["--plan", "-m", UNSET, "gamma=0,1"]],
                         ids=["run", "cfg-resolve", "plan"])
def test_an_unset_variable_in_a_given_value_is_one_line_naming_it(tmp_path, args):
    # a run and --cfg --resolve: Hydra's 84-213 line traceback as it named the run's folder; the plan said "check the
    # key against conf/" of a key that was right
    line = last_line(cutlab([*args, *TINY], tmp_path / "runs", check=False))
    assert line.endswith("KeyError raised while resolving interpolation: \"Environment variable 'CUTLAB_TEST_UNSET' "
                         "not found\"; set CUTLAB_TEST_UNSET, or give ${oc.env:CUTLAB_TEST_UNSET} a default: "
                         "${oc.env:CUTLAB_TEST_UNSET,DEFAULT}"), line
    assert not (tmp_path / "runs").exists()


def test_a_forced_override_of_a_key_the_config_has_names_the_folder_as_the_plain_one(tmp_path):
    # ++seed=1 and seed=1 set the same value, but the folder was named as typed: the same run trained twice
    runs = tmp_path / "runs"
    cutlab(["++seed=1", "wandb.mode=disabled", *TINY], runs)
    (folder,) = [path.name for path in runs.iterdir() if not path.name.startswith("_")]
    assert "seed=1" in folder.split(",") and "++" not in folder, folder
    planned = cutlab(["--plan", "-m", "++seed=1,2", "wandb.mode=disabled", *TINY], runs).stdout.splitlines()
    assert f"0 complete    {folder}" in planned, planned


@pytest.mark.parametrize("args, expected", [
    (["--bogus-flag", "seed=1"], "unrecognized arguments: --bogus-flag; --help lists the flags"),
    (["--plan", "-m", "seed=0,1", "--bogus-flag"], "unrecognized arguments: --bogus-flag; --help lists the flags"),
    (["--info", "seed=0"], "argument --info/-i: invalid choice: 'seed=0' (choose from 'all', 'config', 'defaults', "
                           "'defaults-tree', 'plugins', 'searchpath'); give one before the overrides (--info config "
                           "KEY=VALUE); --help lists the flags"),
], ids=["unknown-flag", "unknown-flag-with-plan", "info-without-its-choice"])
def test_a_flag_hydras_parser_refuses_is_one_line(tmp_path, args, expected):
    # Hydra's parser printed its usage (a dozen lines, the program named __main__.py), and with --plan named cutlab's
    # own flag among the unrecognized ones
    result = cutlab(args, tmp_path / "runs", check=False)
    assert result.returncode == 2 and result.stderr.strip() == f"cutlab: error: {expected}", result.stderr[-2000:]
    assert not (tmp_path / "runs").exists()
