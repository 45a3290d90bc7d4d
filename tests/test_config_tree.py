"""The config tree as a whole: every sweep file and every search preset plans, and the layer contracts hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

SWEEPS = sorted(path.stem for path in (ROOT / "sweeps").glob("*.yaml"))
SEARCHES = sorted(path.stem for path in (ROOT / "searches").glob("*.yaml"))


@pytest.mark.parametrize("name", SWEEPS)
def test_every_sweep_file_plans(name, tmp_path, monkeypatch):
    """``python -m cutlab --plan -m --config-name <sweep>``, in-process: each file composes into runs with unique
    folders (a bad key in a sweep file fails here, not when its run starts)."""
    from cutlab.launch.plan import Command, expand

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    plan = expand(Command(overrides=[], config_name=name, multirun=True, plan=True))
    assert plan.name == name and plan.runs
    assert len({run.run_id for run in plan.runs}) == len(plan.runs)
    # new, or refused only for data not shipped here (Avenue, ShanghaiTech, Alpaca: data.root unset until given)
    assert all(run.status == "new" or run.problem.startswith("data.root is not set") for run in plan.runs), \
        [run.problem for run in plan.runs if run.status != "new"][:3]
    assert not (tmp_path / "runs").exists(), "a plan writes nothing"


@pytest.mark.parametrize("name", SEARCHES)
def test_every_search_preset_plans(name, tmp_path, monkeypatch, capsys):
    """``cutlab-search search=<preset> --dry-run``: the preset, its arms' configs and a sample trial all compose."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    assert main([f"search={name}", "--dry-run"]) == 0, capsys.readouterr().err
    assert "dry run: nothing was run" in capsys.readouterr().err
    assert not list((tmp_path / "runs").rglob("summary.json"))


def test_the_layer_contracts_hold():
    """import-linter's contracts in pyproject.toml: core imports nothing else of cutlab and no Hydra, W&B, Optuna
    or submitit; each package sits above what it uses; nothing imports cutlab.cli."""
    # lint-imports, after importing cutlab: in a checkout that maps cutlab_analysis to analysis/ whatever is
    # installed (cutlab/checkout.py), so the contracts are checked on this checkout's files
    lint = "import sys, cutlab; sys.argv = ['lint-imports']; from importlinter.cli import lint_imports_command; lint_imports_command()"
    result = subprocess.run([sys.executable, "-c", lint], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout, result.stdout[-2000:]


def test_no_module_outside_tests_is_over_400_lines():
    modules = [path for package in ("cutlab", "analysis", "benchmarks") for path in sorted((ROOT / package).rglob("*.py"))]
    too_long = {str(path.relative_to(ROOT)): count for path in modules
                if (count := len(path.read_text().splitlines())) > 400}
    assert not too_long, too_long


@pytest.mark.parametrize("value", ["", "~/x"])
def test_the_composed_data_and_models_folders_are_the_ones_cutlab_reproduce_reads(value, tmp_path, monkeypatch):
    """paths.data_dir / paths.models_dir in the composed config (``cutlab``) and paths.data_dir() / models_dir()
    (``cutlab-reproduce``) are one rule: ~ expanded, an empty variable taken as unset (the per-user folder)."""
    from cutlab.config.compose import compose_run_config
    from cutlab.config.paths import data_dir, models_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("CUTLAB_DATA_DIR", value)
    monkeypatch.setenv("CUTLAB_MODELS_DIR", value)
    cfg = compose_run_config([])
    assert (cfg.paths.data_dir, cfg.paths.models_dir) == (str(data_dir()), str(models_dir()))
    expected = ((tmp_path / ".local" / "share" / "cutlab" / "data", tmp_path / ".local" / "share" / "cutlab" / "models")
                if value == "" else (tmp_path / "x", tmp_path / "x"))
    assert (cfg.paths.data_dir, cfg.paths.models_dir) == tuple(map(str, expected))


def test_every_key_of_a_result_neutral_section_is_left_out_of_folder_names():
    """A stored config is compared without the sections of RESULT_NEUTRAL_SECTIONS whole, while folder names leave
    out the keys of RESULT_NEUTRAL_KEYS one by one: a new key of one of those sections (wandb.notes) missing from the
    second would rename a run's folder while the comparison ignores it, so the same run would be found nowhere."""
    import yaml

    from cutlab.config.neutral import RESULT_NEUTRAL_KEYS, RESULT_NEUTRAL_SECTIONS

    shipped = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    keys = {f"{section}.{key}" for section in RESULT_NEUTRAL_SECTIONS for key in shipped.get(section) or {}}
    assert keys and keys - set(RESULT_NEUTRAL_KEYS) == set()
