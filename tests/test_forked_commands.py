"""The tests' own ``python -m cutlab``, forked from a process that imported torch (tests/helpers/forked.py), must end
as a fresh interpreter's does, or every test that runs a command would check something else than a user gets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from helpers import forked
from helpers.contract import cutlab_env


@pytest.mark.parametrize("args", [["--version"], ["gamma=abc", "wandb.mode=disabled"], ["--cfg", "job", "L=2"]],
                         ids=["version", "refused", "config-printed"])
def test_a_forked_command_prints_and_exits_as_a_fresh_interpreter(tmp_path, args):
    env = {**cutlab_env(tmp_path / "runs"), "CUTLAB_TEST_FORK": str(tmp_path)}  # not a start-up variable: shared
    fresh = subprocess.run([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    forked.run_python_m("cutlab", args, ROOT, env, 120)  # its start-up variables seen: the next one is forked
    result = forked.run_python_m("cutlab", args, ROOT, env, 120)
    assert (os.getpid(), forked.startup_of(env)) in forked._servers, "the second command was not forked"
    assert (result.returncode, result.stdout, result.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_forked_command_past_its_timeout_is_killed_as_subprocess_run_kills_it(tmp_path):
    env = cutlab_env(tmp_path / "runs")
    forked.run_python_m("cutlab", ["--version"], ROOT, env, 120)
    with pytest.raises(subprocess.TimeoutExpired):  # a run of the demo takes a minute
        forked.run_python_m("cutlab", ["wandb.mode=disabled", "progress=false"], ROOT, env, 3)
    assert forked.run_python_m("cutlab", ["--version"], ROOT, env, 120).returncode == 0  # the server goes on
