"""Run folders from someone else, read by cutlab-eval and cutlab-analysis: a config that names a command as its
model, an evaluation borrowed from another run. Each test failed on the code before its fix, as its docstring says
(the other hostile inputs: test_untrusted_folders.py, test_secrets.py)."""

from __future__ import annotations

import pickle
import shutil
import sys
from pathlib import Path

import pytest

from helpers.cli import as_another_run, cutlab

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=3", "eval.gamma_test=[0,0.3]", "wandb.mode=disabled",
        "progress=false", "threads=1"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """``runs/base``: a complete tiny run on the embedded synthetic video, copied by the tests that tamper with it."""
    runs = tmp_path_factory.mktemp("hostile") / "runs"
    cutlab([*TINY, "run_name=base"], runs)
    return runs / "base"


def copied(run: Path, tmp_path: Path, name: str) -> Path:
    """A copy of ``run`` that stands for another run (its own run_uid): the tests tamper with it as such."""
    return as_another_run(Path(shutil.copytree(run, tmp_path / "runs" / name)))


def eval_error(run: Path, capsys) -> str:
    """cutlab-eval on ``run``: it stops with exit 2 and one ``cutlab-eval: error:`` line, which is returned."""
    from cutlab.transfer.cli import main

    assert main([str(run)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cutlab-eval: error: "), lines
    assert not (run / "evaluations").exists()
    return lines[0]


def test_a_config_whose_model_target_is_a_command_is_not_called(finished, tmp_path, capsys):
    """Before: ``model: {_target_: os.system, command: touch MARKER}`` in a run folder's config.yaml ran the command
    when cutlab-eval rebuilt the model (weights_only guards the checkpoint, not the config's ``_target_``)."""
    run = copied(finished, tmp_path, "command")
    marker = tmp_path / "MARKER"
    config = (run / "config.yaml").read_text()
    model = config[config.index("model:\n"):config.index("data:\n")]
    (run / "config.yaml").write_text(config.replace(model, "model:\n  _target_: os.system\n  name: dust\n  task: video"
                                                           f"\n  patch: 16\n  command: touch {marker}\n"))
    line = eval_error(run, capsys)
    assert "names model._target_=os.system, which is not a LayerwiseModel class nor a function declared" in line
    assert not marker.exists()


def test_a_config_whose_model_target_is_a_standard_module_is_refused_unimported(finished, tmp_path, capsys):
    """Before: ``_target_: this.Model`` was imported, so the module's own code ran (the Zen of Python printed;
    ``antigravity`` opens a browser), and only then refused."""
    run = copied(finished, tmp_path, "import")
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("_target_: cutlab.core.models.DUST", "_target_: this.Model"))
    line = eval_error(run, capsys)
    assert "names model._target_=this.Model, which is not a LayerwiseModel class" in line
    assert "this" not in sys.modules


def test_the_model_builders_cutlab_ships_and_a_users_class_are_model_builders():
    from cutlab.tasks.models import builds_a_model

    for target in ("cutlab.core.models.DUST", "cutlab.core.models.vit.build_vit",
                   "cutlab.core.models.text_encoder.build_encoder_classifier",
                   "cutlab.core.models.causal_lm.build_causal_lm"):
        assert builds_a_model(target), target
    for target in ("os.system", "subprocess.run", "builtins.eval", "shutil.rmtree", "torch.nn.Linear"):
        assert not builds_a_model(target), target


def test_a_config_with_an_interpolation_is_refused_and_the_variable_reaches_no_record(finished, tmp_path, capsys,
                                                                                      monkeypatch):
    """Before: ``name: ${oc.env:VAR}`` in a run folder's config.yaml was resolved as cutlab-eval read it, and the
    variable's value (a token, here) was written into the evaluation's evaluation.json as the model's name."""
    run = copied(finished, tmp_path, "interpolated")
    monkeypatch.setenv("HOSTILE_TOKEN", "tok-s3cret")
    config = (run / "config.yaml").read_text()
    assert "\n  name: dust\n" in config
    (run / "config.yaml").write_text(config.replace("\n  name: dust\n", "\n  name: ${oc.env:HOSTILE_TOKEN}\n"))
    line = eval_error(run, capsys)
    assert "holds interpolations (model.name: ${oc.env:HOSTILE_TOKEN})" in line and "tok-s3cret" not in line
    assert not any("tok-s3cret" in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file()
                   and p.suffix != ".pt")


@pytest.mark.parametrize("borrowed, expected", [
    ("deeper", "eval.csv holds layers 0..3 but config.yaml says L = 2: it is another run's evaluation"),
    ("other_values", "summary.json gives test_mean_metric 3"),
], ids=["eval-of-a-deeper-run", "eval-of-another-run"])
def test_an_evaluation_borrowed_from_another_run_is_no_result(finished, tmp_path, borrowed, expected):
    """Before: an L=2 run folder holding an L=3 run's eval.csv was counted complete and tabled with layer 3's RMSE
    (24.23 where its own summary says 35.43), and one holding another seed's eval.csv with that seed's RMSE."""
    import pandas as pd

    from analysis.collect import collect_runs

    run = copied(finished, tmp_path, "borrowed")
    copied(finished, tmp_path, "honest")
    frame = pd.read_csv(run / "eval.csv")
    if borrowed == "deeper":  # one layer more, each loss and RMSE lower than the layer before
        last = frame[frame["layer"] == frame["layer"].max()]
        frame = pd.concat([frame, last.assign(layer=last["layer"] + 1, value=last["value"] * 0.5)])
    else:
        frame["value"] *= 0.98
    frame.to_csv(run / "eval.csv", index=False)
    runs = collect_runs(tmp_path / "runs").runs.set_index("run")
    assert runs.loc["honest", "state"] == "complete" and runs.loc["honest", "usable"]
    assert runs.loc["borrowed", "state"] == "unsupported" and not runs.loc["borrowed", "usable"]
    assert runs.loc["borrowed", "problem"].startswith(expected), runs.loc["borrowed", "problem"]


@pytest.mark.parametrize("link", ["report.md", "figures", "tables/table3_video_mean_rmse.md"])
def test_a_report_folder_holding_a_link_is_not_written_through_it(finished, tmp_path, capsys, link):
    """Before: ``--out`` holding ``report.md -> ~/somefile`` (a report folder that came with someone's runs) had the
    report written over the link's target; a ``figures -> elsewhere`` link had the figures written there and that
    folder's files of the same names deleted as stale."""
    from analysis.__main__ import main

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "fig02_rmse_vs_gamma_test.png").write_text("not a figure of this report")
    (outside / "notes.md").write_text("mine")
    out = tmp_path / "report"
    (out / "tables").mkdir(parents=True)
    (out / link).symlink_to(outside if link == "figures" else outside / "notes.md")
    assert main([str(finished), "--out", str(out)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{out / link} is a symbolic link" in lines[0], lines
    assert sorted(p.name for p in outside.iterdir()) == ["fig02_rmse_vs_gamma_test.png", "notes.md"]
    assert (outside / "notes.md").read_text() == "mine"
    assert (outside / "fig02_rmse_vs_gamma_test.png").read_text() == "not a figure of this report"


@pytest.mark.parametrize("name", ["report.md", pytest.param("report.html", marks=pytest.mark.slow)])
def test_a_report_file_the_analysis_did_not_write_is_kept_and_named(finished, tmp_path, capsys, name):
    """Before: ``--out .`` in a folder holding one's own report.md replaced it with the report, without a word."""
    from analysis.__main__ import main

    out = tmp_path / "notes"
    out.mkdir()
    (out / name).write_text("my own notes")
    assert main([str(finished), "--out", str(out)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"cutlab-analysis: error: {out / name} was not written by cutlab-analysis, and the report would "
                     "replace it; pass another --out, or move that file"], lines
    assert (out / name).read_text() == "my own notes" and sorted(p.name for p in out.iterdir()) == [name]
    (out / name).unlink()
    assert main([str(finished), "--out", str(out)]) == 0 and main([str(finished), "--out", str(out)]) == 0  # ours


@pytest.mark.parametrize("sigma", [None, "abc", -5.0, float("inf")], ids=["null", "text", "negative", "infinite"])
def test_sigma_run_needs_a_positive_sigma_x_in_the_summary(finished, tmp_path, capsys, sigma):
    """Before: ``--sigma run`` on a summary whose sigma_x was null ended in a TypeError traceback, and a negative or
    infinite one was taken as the noise scale (-5: an evaluation written, mean RMSE 167 where the run's is 35)."""
    import json

    from cutlab.transfer.cli import main

    run = copied(finished, tmp_path, "sigma")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "sigma_x": sigma}))
    assert main([str(run), "--sigma", "run"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1].startswith("cutlab-eval: error: sigma: its summary.json records sigma_x="), lines
    assert "not a positive number, so --sigma run has no noise scale" in lines[-1] and "Traceback" not in "".join(lines)
    assert not (run / "evaluations").exists()


def test_a_lock_file_that_links_elsewhere_is_refused_and_its_target_kept(finished, tmp_path):
    """Before: a run folder from elsewhere holding ``.lock -> thesis.tex`` had thesis.tex truncated and overwritten
    with ``process N on host`` by the same command, which then only said "complete; skipped" (and removed the link)."""
    run = copied(finished, tmp_path, "base")
    thesis = tmp_path / "thesis.tex"
    thesis.write_text("my thesis\n")
    (run / ".lock").symlink_to(thesis)
    result = cutlab([*TINY, "run_name=base"], tmp_path / "runs", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    expected = (f"cutlab: error: {run / '.lock'} is a symbolic link (to {thesis}), not a lock file cutlab wrote; "
                "remove it and run the same command again")
    assert result.stderr.strip().splitlines()[-1] == expected
    assert thesis.read_text() == "my thesis\n" and (run / ".lock").is_symlink()


@pytest.mark.parametrize("name", ["../../outside", "/tmp/elsewhere", "..", "a/b"])
def test_a_run_folder_name_from_a_wandb_project_stays_one_folder_in_the_report(tmp_path, name):
    """Before: ``--wandb ENTITY/PROJECT`` rebuilt each run into ``out / <its W&B config's _run_folder>``, a name that
    anyone who logs to the project writes: ``../../outside`` or ``/tmp/elsewhere`` put the rebuilt config.yaml,
    summary.json and eval.csv outside the report folder. (The server path itself needs a W&B server.)"""
    from analysis.wandb_source import _unique_dir

    out = tmp_path / "report" / "wandb_records"
    folder = _unique_dir(out, name, "abc123", set())
    assert folder.parent == out and folder.name not in ("", ".", "..") and "/" not in folder.name
    assert _unique_dir(out, "L=2,model=dust", "abc123", set()) == out / "L=2,model=dust"  # cutlab's names as they are


def test_an_evaluations_folder_that_links_elsewhere_is_neither_written_nor_read(finished, tmp_path, capsys):
    """Before: a run folder holding ``evaluations -> elsewhere`` had cutlab-eval write its evaluation.json, metrics.csv
    and sample_losses.csv into ``elsewhere/<data>-<key>/`` (over another run's evaluation, had the link pointed at
    one, which was then reported "already done" as this run's)."""
    run = copied(finished, tmp_path, "linked")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "evaluations").symlink_to(elsewhere)
    from cutlab.transfer.cli import main

    assert main([str(run)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"cutlab-eval: error: linked: {run / 'evaluations'} is a symbolic link (to {elsewhere}): an "
                     "evaluation is kept only inside its run's folder; remove the link and run the same command again"]
    assert not any(elsewhere.iterdir())


def test_an_evaluation_record_copied_from_another_run_is_not_counted_as_this_runs(finished, tmp_path, capsys):
    """Before: a cutlab-eval record copied into another run's ``evaluations/`` (here: seed 0's, under a seed 1 run)
    was tabled in the report's train-data x test-data section as that run's own evaluation."""
    import json

    from analysis.collect import collect_runs
    from analysis.transfer import read_evaluations
    from cutlab.transfer.cli import main

    run = copied(finished, tmp_path, "seed0")
    assert main([str(run)]) == 0
    (record,) = run.glob("evaluations/*/evaluation.json")
    other = copied(finished, tmp_path, "seed1")
    shutil.rmtree(other / "evaluations", ignore_errors=True)
    config = (other / "config.yaml").read_text()
    assert "\nseed: 0\n" in config
    (other / "config.yaml").write_text(config.replace("\nseed: 0\n", "\nseed: 1\n"))
    shutil.copytree(record.parent, other / "evaluations" / record.parent.name)
    evaluations, _, problems = read_evaluations(collect_runs(tmp_path / "runs"))
    assert list(evaluations["run"]) == ["seed0"]
    assert problems == [f"{other / 'evaluations' / record.parent.name / 'evaluation.json'}: an evaluation of another "
                        "run: seed 0 (the run's 1)"]
    saved = json.loads(record.read_text())
    (record.parent / "evaluation.json").write_text(json.dumps({**saved, "mean_metric": saved["mean_metric"] * 0.9}))
    _, _, problems = read_evaluations(collect_runs(run))
    assert len(problems) == 1 and "mean_metric" in problems[0] and "metrics.csv's last layer averages" in problems[0]


def test_the_search_report_reads_each_trial_from_its_study_folder_not_the_path_a_journal_names(finished, tmp_path):
    """Before: search_report.json took the best trial's test numbers and verdict from the ``run_dir`` path its Optuna
    user attributes hold: a copied study read the old location's folders, and a journal from elsewhere could name
    any folder (here one whose summary says test RMSE 1.0) as this study's best."""
    import json

    import optuna

    from cutlab.search.report import write_report

    study_dir = tmp_path / "runs" / "search" / "mine"
    shutil.copytree(finished, study_dir / "trial-0000")
    elsewhere = tmp_path / "elsewhere" / "trial-0000"
    shutil.copytree(finished, elsewhere)
    summary = json.loads((elsewhere / "summary.json").read_text())
    (elsewhere / "summary.json").write_text(json.dumps({**summary, "test_mean_metric": 1.0, "verdict": "infeasible"}))
    study = optuna.create_study(direction="minimize")
    study.add_trial(optuna.trial.create_trial(value=summary["selection_metric"], params={}, distributions={},
                                              user_attrs={"run_dir": str(elsewhere), "seed": 0}))
    best = write_report({None: study}, study_dir)["search"]["best"]
    assert best["run_dir"] == str(study_dir / "trial-0000")
    assert best["test_mean_metric"] == summary["test_mean_metric"] and best["verdict"] == summary["verdict"]


def test_a_run_folder_copied_whole_is_counted_once_and_named(finished, tmp_path):
    """Before: a run folder copied whole (summary, eval, history, config, provenance) was counted as another seed of
    its cell: Table 3's cell said ``runs (c/e) 3/0`` for one run trained once. Now each run draws an identity when
    its folder is first written (provenance.json's run_uid) and the copies are named, not counted. Runs recorded
    before it (no run_uid) are each still read as a run of their own."""
    import json

    from analysis.collect import collect_runs

    uid = json.loads((finished / "provenance.json").read_text())["run_uid"]
    assert len(uid) == 32 and int(uid, 16) >= 0
    for name in ("a", "b", "c"):
        shutil.copytree(finished, tmp_path / "runs" / name)
    runs = collect_runs(tmp_path / "runs").runs
    assert list(runs.loc[runs["usable"], "run"]) == ["a"]
    assert [f"{run}: {problem}" for run, problem in zip(runs["run"], runs["problem"]) if run != "a"] == [
        f"{name}: a copy of run a (the same run_uid in its provenance.json, or the same W&B run), counted once, as a; "
        "move the copy out of the analysed folders" for name in ("b", "c")]
    for name in ("a", "b", "c"):  # records written before the identity existed
        record = tmp_path / "runs" / name / "provenance.json"
        record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "run_uid"}))
    assert collect_runs(tmp_path / "runs").runs["usable"].all()


class MakesAFile:
    """A pickle that runs code as it is loaded: it opens (so makes) ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def test_hydras_rerun_of_a_pickle_is_refused_before_the_pickle_is_loaded(tmp_path):
    """``cutlab --experimental-rerun FILE``, Hydra's flag, unpickled FILE: a run folder's ``.hydra/config.pickle``
    from someone else ran its code (the file was made) before Hydra failed on it with a traceback."""
    made = tmp_path / "made"
    (tmp_path / "config.pickle").write_bytes(pickle.dumps(MakesAFile(made)))
    result = cutlab(["--experimental-rerun", str(tmp_path / "config.pickle")], tmp_path / "runs", check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "cutlab: error: --experimental-rerun loads a pickle, which can run any code (cutlab writes none, and loads "
        "none); to run a run again, run its 'command' from its provenance.json"], result.stderr[-2000:]
    assert not made.exists()


def test_a_run_folder_linked_in_from_elsewhere_is_left_out_and_named(finished, tmp_path, capsys):
    """Before: the analysis passed over a folder link without a word ("1 run folders"), so a run one expected in the
    report was missing from it with nothing to say why."""
    from analysis.__main__ import main

    runs, theirs = tmp_path / "runs", tmp_path / "elsewhere" / "theirs"
    shutil.copytree(finished, runs / "mine")
    shutil.copytree(finished, theirs)
    (runs / "linked").symlink_to(theirs, target_is_directory=True)
    assert main([str(runs), "--out", str(tmp_path / "report")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"cutlab-analysis: warning: {runs / 'linked'} is a symbolic link (to {theirs}): left out (a "
                        "folder linked in from elsewhere holds no run of this folder's; pass its target to analyse "
                        "it)"], warnings


def test_a_wandb_folder_that_links_elsewhere_is_refused_and_its_target_untouched(tmp_path):
    """Before: W&B followed ``wandb -> elsewhere`` and wrote its offline run, cache and data there, outside the run's
    folder (an ``evaluations`` link is refused the same way)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runs" / "linked").mkdir(parents=True)
    (tmp_path / "runs" / "linked" / "wandb").symlink_to(elsewhere, target_is_directory=True)
    args = [*(a for a in TINY if not a.startswith("wandb.")), "wandb.mode=offline", "run_name=linked"]
    result = cutlab(args, tmp_path / "runs", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"cutlab: error: {tmp_path / 'runs' / 'linked' / 'wandb'} is a symbolic link (to {elsewhere}): W&B writes only "
        "inside its run's folder; remove the link and run the same command again (or log nothing: wandb.mode=disabled)")
    assert list(elsewhere.iterdir()) == []
