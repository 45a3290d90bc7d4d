"""Hydra's folder keys as composed, wherever they were set: a sweep file of the user's own, a dict given on the
command line, ``hydra.output_subdir``. cutlab names each run's folder itself (paths.runs_dir/<run_name>), where a
re-run resumes or skips it; each of these is refused in one line before anything is written (cutlab.config.naming)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.cli import cutlab

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0]", "wandb.mode=disabled",
        "progress=false", "threads=1"]


def one_line_error(result, *expected: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("cutlab: error: ") and all(text in line for text in expected), result.stderr[-3000:]
    return line


def sweep_file(folder: Path, hydra_yaml: str) -> Path:
    """``folder/mysweep.yaml``: the base config, a hydra section of the user's own, and a sweep of gamma."""
    folder.mkdir()
    (folder / "mysweep.yaml").write_text("defaults:\n  - config\n  - _self_\nhydra:\n" + hydra_yaml
                                         + "  sweeper:\n    params:\n      gamma: 0.05,0.07\n")
    return folder


def nothing_written(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.rglob("*")), list(runs.rglob("*"))
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("hydra_yaml, key", [
    ("  sweep:\n    subdir: ${hydra.job.num}\n", "hydra.sweep.subdir"),
    ("  job:\n    chdir: true\n", "hydra.job.chdir"),
    ("  output_subdir: .\n", "hydra.output_subdir"),
    ("  job:\n    config:\n      override_dirname:\n        kv_sep: '-'\n", "hydra.job.config.override_dirname.kv_sep"),
])
def test_a_sweep_files_hydra_folder_keys_are_refused_in_the_plan(tmp_path, hydra_yaml, key):
    """Before: ``hydra.sweep.subdir: ${hydra.job.num}`` in a sweep file was planned as runs/gamma=0.05, ... and then
    trained into runs/_sweeps/<sweep>/0 and 1, "0 complete", exit 0 (and trained again on every re-run);
    ``hydra.job.chdir: true`` failed each run with "not inside paths.runs_dir"."""
    folder = sweep_file(tmp_path / "mine", hydra_yaml)
    result = cutlab(["--plan", "-m", "--config-dir", str(folder), "--config-name", "mysweep", *TINY],
                    tmp_path / "runs", check=False)
    one_line_error(result, key, "--config-name mysweep")
    nothing_written(tmp_path)


def test_a_config_files_run_dir_is_refused_for_a_single_run(tmp_path):
    """Before: a config of the user's own with ``hydra.run.dir`` trained the run outside paths.runs_dir."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "myrun.yaml").write_text(f"defaults:\n  - config\n  - _self_\nhydra:\n  run:\n    dir: "
                                       f"{tmp_path / 'elsewhere'}\n")
    result = cutlab(["--config-dir", str(folder), "--config-name", "myrun", *TINY], tmp_path / "runs", check=False)
    one_line_error(result, "hydra.run.dir", "--config-name myrun")
    nothing_written(tmp_path)


@pytest.mark.parametrize("override, key", [
    ("hydra.job.config={override_dirname:{kv_sep:-}}", "hydra.job.config.override_dirname.kv_sep"),
    ("hydra.job={chdir:true}", "hydra.job.chdir"),
    ("hydra={output_subdir:.hydra}", "hydra.output_subdir"),
])
@pytest.mark.parametrize("sweep", [True, False])
def test_hydra_folder_keys_given_as_a_dict_are_refused(tmp_path, override, key, sweep):
    """Before: the check read only the command line's keys, so ``hydra.job={chdir:true}`` and a dict of
    override_dirname's separators (which named the same runs anew: the plain command trained them again) passed."""
    args = ["--plan", "-m", "gamma=0", *TINY, override] if sweep else [*TINY, override]
    one_line_error(cutlab(args, tmp_path / "runs", check=False), key, "on the command line")
    nothing_written(tmp_path)


@pytest.mark.parametrize("value", [".", ".hydra", "/elsewhere"])
def test_hydras_output_subdir_is_refused(tmp_path, value):
    """Before: ``hydra.output_subdir=.`` replaced a complete run's resolved config.yaml with Hydra's unresolved one
    (and hydra.yaml, overrides.yaml), after which cutlab refused the run as "another configuration" for ever;
    ``hydra.output_subdir=/some/where`` wrote outside the runs folder."""
    value = str(tmp_path / "elsewhere") if value == "/elsewhere" else value
    result = cutlab([*TINY, f"hydra.output_subdir={value}"], tmp_path / "runs", check=False)
    one_line_error(result, "hydra.output_subdir")
    nothing_written(tmp_path)
