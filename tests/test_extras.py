"""The heavy libraries only some runs need are pip extras: a run that needs a missing one stops with one line naming
the extra to install. The library is made missing by blocking its import (sys.modules[name] = None)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("module", ["transformers", "av", "peft"])
def test_a_missing_extra_names_itself_and_exists(module, monkeypatch):
    from cutlab.core.errors import CutlabError
    from cutlab.core.extras import EXTRAS, optional_import

    extra = EXTRAS[module][0]
    assert any(re.match(rf"{module}\b", requirement) for requirement in PYPROJECT["project"]["optional-dependencies"][extra]), \
        f"cutlab[{extra}] installs {module}"
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(CutlabError, match=rf"pip install 'cutlab\[{extra}\]'"):
        optional_import(module)


def test_the_dev_install_has_every_extra():
    """`make setup` installs .[dev]: everything the tests use, every extra included."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "cutlab[all]" in extras["dev"]
    named = extras["all"][0].split("[")[1].rstrip("]").split(",")
    assert sorted(named) == sorted(name for name in extras if name not in ("all", "dev"))


def test_a_vit_run_without_transformers_is_one_line(tmp_path):
    code = ("import sys; sys.modules['transformers'] = None; from cutlab.cli import main; "
            "sys.argv = ['cutlab', 'model=vit', 'L=2', 'train.epochs=1', 'train.max_steps_per_epoch=1', "
            f"'wandb.mode=disabled', 'paths.runs_dir={tmp_path / 'runs'}', 'run_name=novit']; main()")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("cutlab: error: transformers is not installed") and "pip install 'cutlab[hf]'" in last, last
    assert not (tmp_path / "runs" / "novit").exists()
