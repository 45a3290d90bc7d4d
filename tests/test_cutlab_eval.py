"""``cutlab-eval`` end to end: a tiny run trained on one dataset, evaluated on a second real video folder and on a
wider gamma_test grid through the real command line; the record read back (and by the analysis report); a second
call skips; the run's own files stay byte-identical; bad input stops in one line each."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf
from PIL import Image

from conftest import PED2_TINY, ROOT, require_shared
from helpers.contract import cutlab_env
from helpers.forked import run_python_m
from helpers.mounts import read_only

TRAIN = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.2]", "wandb.mode=disabled",
         "threads=1"]
WIDER = "eval.gamma_test=[0,0.5,1,1.5,2]"
# Ped2's frames as folders of PNGs (flat layout): another scene and another file layout than the training data
PED2_FOLDER = ["data=video_folder", "data.image_size=64", "data.frames=4", "data.stride=4"]


def run_command(module: str, args: list[str], runs: Path) -> subprocess.CompletedProcess:
    return run_python_m(module, args, ROOT, cutlab_env(runs), 600)


def fingerprint(run: Path) -> dict[str, str]:
    """sha1 of every file of the run's own record (everything outside evaluations/)."""
    return {str(p.relative_to(run)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*"))
            if p.is_file() and p.relative_to(run).parts[0] != "evaluations"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(a finished tiny constrained DUST run trained on the embedded synthetic data, a Ped2 PNG folder)."""
    clips = np.load(require_shared(PED2_TINY))
    base = tmp_path_factory.mktemp("eval")
    footage = base / "ped2_pngs"
    for key in clips.files:  # training_01, training_02, testing_01: 8 real frames each
        (footage / key).mkdir(parents=True)
        for index, frame in enumerate(clips[key]):
            Image.fromarray(frame).save(footage / key / f"{index}.png")
    runs = base / "runs"
    result = run_command("cutlab", TRAIN, runs)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = [p for p in runs.iterdir() if not p.name.startswith("_")]
    return run, footage


@pytest.fixture(scope="module")
def evaluated(trained) -> tuple[Path, Path, dict, subprocess.CompletedProcess]:
    run, footage = trained
    before = fingerprint(run)
    result = run_command("cutlab.transfer.cli", [str(run), *PED2_FOLDER, f"data.root={footage}", WIDER], run.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    return run, footage, before, result


def test_the_run_is_evaluated_on_another_folder_at_every_layer_and_gamma(evaluated):
    run, footage, _, result = evaluated
    (folder,) = (run / "evaluations").iterdir()
    record = json.loads((folder / "evaluation.json").read_text())
    assert record["status"] == "complete" and record["request"]["gamma_test"] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert record["request"]["data"]["root"] == str(footage) and record["trained_on"] == "synthetic"
    # the label says what tells the data apart from data=video_folder's defaults; the folder keeps its old name
    assert record["label"] == "video_folder:ped2_pngs (frames=4, stride=4, image_size=64)"
    assert folder.name.startswith("video_folder_ped2_pngs-") and f"{record['label']}: " in result.stdout
    assert str(folder) in result.stdout
    metrics = pd.read_csv(folder / "metrics.csv")
    rmse = metrics.query("metric == 'rmse'")
    assert sorted(rmse["gamma_test"].unique()) == [0.0, 0.5, 1.0, 1.5, 2.0] and sorted(rmse["layer"].unique()) == [0, 1, 2]
    last = rmse.query("layer == 2").sort_values("gamma_test")["value"]
    assert record["mean_metric"] == pytest.approx(last.mean())
    assert last.iloc[-1] > last.iloc[0]  # more noise, a worse denoised frame
    # the test split of the folder: its last clip by name, 8 frames -> 2 windows of 4
    assert record["samples"] == 2 and len(pd.read_csv(folder / "sample_losses.csv")) == 2 * 5
    # the verdict follows from the recorded losses at gamma_test = gamma_train (ratio form of train=constrained)
    losses = np.array(record["at_gamma_train"]["test_layer_loss"])
    feasibility = record["feasibility"]
    np.testing.assert_allclose(feasibility["relative_violations"][1:], losses[1:] / (0.75 * losses[:-1]) - 1, rtol=1e-5)
    relative = list(zip(feasibility["relative_violations"], feasibility["relative_slacks"]))
    violated = [i for i, (v, s) in enumerate(relative) if v > feasibility["tolerance"] + s]
    missed = [i for i, (v, _) in enumerate(relative) if v > feasibility["tolerance"]]
    assert record["verdict"] == ("infeasible" if violated else "slack_feasible" if missed else "feasible")


def test_a_second_call_skips_and_the_run_record_stays_byte_identical(evaluated):
    run, footage, before, _ = evaluated
    (folder,) = (run / "evaluations").iterdir()
    written = {p.name: p.read_bytes() for p in folder.iterdir()}
    # the runs folder (a sweep folder) names the same run
    again = run_command("cutlab.transfer.cli", [str(run.parent), *PED2_FOLDER, f"data.root={footage}", WIDER], run.parent)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already done, skipped" in again.stdout
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == written
    assert fingerprint(run) == before


def test_a_data_config_of_ones_own_from_config_dir_is_the_same_evaluation(evaluated, tmp_path):
    """``--config-dir`` as python -m cutlab takes it: the unknown-data line advised it, and cutlab-eval refused it
    ("unrecognized arguments"). The same data, named by a yaml of one's own, is the evaluation already done."""
    run, footage, before, _ = evaluated
    own = OmegaConf.load(ROOT / "conf" / "data" / "video_folder.yaml")
    for override in [*PED2_FOLDER[1:], f"data.root={footage}"]:
        key, _, value = override.partition("=")
        OmegaConf.update(own, key.removeprefix("data."), int(value) if value.isdigit() else value)
    (tmp_path / "conf" / "data").mkdir(parents=True)
    OmegaConf.save(own, tmp_path / "conf" / "data" / "ped2_pngs.yaml")
    again = run_command("cutlab.transfer.cli", [str(run), "data=ped2_pngs", WIDER, "--config-dir",
                                                str(tmp_path / "conf")], run.parent)
    assert again.returncode == 0 and "already done, skipped" in again.stdout, again.stderr[-2000:]
    assert len(list((run / "evaluations").iterdir())) == 1 and fingerprint(run) == before


@pytest.mark.slow  # two evaluations of a copied run (about 1.5 min on 2 cores)
def test_another_evaluation_batch_size_is_another_evaluation_not_a_skip(trained, tmp_path):
    # the evaluation noise is drawn batch by batch: another batch size draws other noise, so other numbers
    run = tmp_path / "runs" / trained[0].name
    shutil.copytree(trained[0], run)
    shutil.rmtree(run / "evaluations", ignore_errors=True)
    for size in (1, 2):
        result = run_command("cutlab.transfer.cli", [str(run), "data=synthetic", f"eval.batch_size={size}"], run.parent)
        assert result.returncode == 0 and "already done" not in result.stdout, result.stderr[-2000:]
    records = [json.loads((folder / "evaluation.json").read_text()) for folder in sorted((run / "evaluations").iterdir())]
    assert sorted(record["request"]["batch_size"] for record in records) == [1, 2]
    assert records[0]["at_gamma_train"]["test_layer_loss"] != records[1]["at_gamma_train"]["test_layer_loss"]


def test_a_gammas_numbers_and_the_verdict_do_not_depend_on_the_rest_of_the_grid(trained, tmp_path):
    """Each gamma drew the noise stream of its place in the request: [0, 1] and [1, 0] gave two RMSEs at gamma 1, and
    the verdict's losses at gamma_train changed with the grid. A gamma of the run's own grid now gets the run's noise
    (its eval.csv numbers), one it never evaluated the same noise in every grid."""
    run = tmp_path / "runs" / trained[0].name
    shutil.copytree(trained[0], run)
    shutil.rmtree(run / "evaluations", ignore_errors=True)
    records = []
    for grid in ("[0.2,1]", "[1,0.2,0]"):
        result = run_command("cutlab.transfer.cli", [str(run), "data=synthetic", f"eval.gamma_test={grid}"], run.parent)
        assert result.returncode == 0, result.stderr[-2000:]
        (folder,) = [p for p in (run / "evaluations").iterdir() if json.loads(
            (p / "evaluation.json").read_text())["request"]["gamma_test"] == json.loads(grid)]
        records.append(json.loads((folder / "evaluation.json").read_text()))
    first, second = (record["metric_by_gamma"] for record in records)
    assert first["1.0"] == second["1.0"] and first["0.2"] == second["0.2"]
    own = pd.read_csv(run / "eval.csv")
    own = own[(own["split"] == "test") & (own["gamma_test"] == 0.2) & (own["metric"] == records[0]["metric"])]
    assert first["0.2"] == own[own["layer"] == own["layer"].max()]["value"].item()
    summary = json.loads((run / "summary.json").read_text())
    for record in records:
        assert record["at_gamma_train"]["test_layer_loss"] == summary["in_distribution"]["test_layer_loss"]


def test_a_run_on_its_own_data_and_grid_reproduces_its_own_test_numbers(evaluated):
    run, _, before, _ = evaluated
    result = run_command("cutlab.transfer.cli", [str(run)], run.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    (folder,) = [p for p in (run / "evaluations").iterdir() if p.name.startswith("synthetic")]
    mine = pd.read_csv(folder / "metrics.csv").sort_values(["gamma_test", "layer", "metric"]).reset_index(drop=True)
    own = pd.read_csv(run / "eval.csv").query("split == 'test'").sort_values(["gamma_test", "layer", "metric"])
    # the same windows, noise, batches and weights (DUST's estimate of ||D||_2^2 included): the same numbers
    np.testing.assert_array_equal(mine["value"].to_numpy(), own["value"].to_numpy())
    summary = json.loads((run / "summary.json").read_text())
    assert json.loads((folder / "evaluation.json").read_text())["mean_metric"] == summary["test_mean_metric"]
    assert fingerprint(run) == before


def test_analysis_adds_the_train_by_test_data_table_and_a_figure(evaluated, tmp_path):
    from analysis.__main__ import main

    run = evaluated[0]
    assert main([str(run.parent), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    section = report[report.index("## Evaluations on other data"):]
    header = next(line for line in section.splitlines() if line.startswith("| run |"))
    assert "own test split (synthetic)" in header and "video_folder:ped2_pngs γ_test 0…2 (5)" in header
    record = json.loads(next((run / "evaluations").glob("video_folder*/evaluation.json")).read_text())
    row = next(line for line in section.splitlines() if line.startswith(f"| {run.name} |"))
    assert f"{record['mean_metric']:.2f}" in row
    assert (tmp_path / "report" / "figures" / "transfer_video_folder_ped2_pngs.png").stat().st_size > 0
    table = pd.read_csv(tmp_path / "report" / "tables" / "transfer.csv")
    assert len(table) == 1 and table.iloc[0]["trained on"] == "synthetic"


@pytest.mark.parametrize("case, expected", [
    ("missing", "no run folder at"),
    ("empty_run", "a run given is empty; pass a run folder"),  # "$RUN" unset: every run under the current folder
    ("empty_root", "data.root is empty; give a path, or leave it out for data=video_folder's"),  # read as the cwd
    ("incomplete", "is not finished (status 'running')"),
    ("no_checkpoint", "has no checkpoint.pt"),
    ("text_data", "reads video data but data=imdb is text data"),
    ("patch", "reads 16x16 patches but data.patch=8; pass data.patch=16"),
    ("model_override", "is neither a run folder nor a setting cutlab-eval takes"),
    ("added_data_key", "data.roott is not a key of data=video_folder (its keys: "),  # Hydra's '+' advice, taken
    ("added_key_of_own_data", "data.roott is not a key of the run's data (data=synthetic)"),
    ("config_empty", "config.yaml is not a run config: it is empty; copy the run folder again"),
    ("config_list", "config.yaml is not a run config: it holds a list, not a mapping; copy the run folder again"),
    ("config_word", "config.yaml is not a run config: it holds a str, not a mapping; copy the run folder again"),
    ("config_other", "config.yaml is not a run config: it has no data, model, train, eval, paths section; copy the"),
    ("read_only", "evaluations (read-only file system): copy the run somewhere writable and evaluate the copy"),
    # its training clips, reported among data the run was not trained on (the demo: 14.30 against its test's 14.65)
    ("own_all", "--split all of the data it was trained on (data=synthetic) holds its training samples"),
    ("own_train", "--split train of the data it was trained on (data=synthetic) holds its training samples"),
    ("own_val_moved", "data.val_clips=3 moves samples between the splits of the data it was trained on (with "
                      "data.val_clips=1), so its val split may hold training samples; leave it as the run had it"),
    # Hydra's "Ambiguous value", answered with "check the key against conf/" as if the key were misspelt
    ("two_data", "data=synthetic,video_folder gives several values, which is a sweep: this command takes one value "
                 "per key, so give one (and run it once per value)"),
])
def test_bad_input_stops_in_one_line(trained, tmp_path, capsys, case, expected):
    from cutlab.transfer.cli import main

    run, footage = trained
    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("evaluations"))
    args = [str(copy), *PED2_FOLDER, f"data.root={footage}"]
    if case == "missing":
        args[0] = str(tmp_path / "no_such_run")
    elif case == "empty_run":
        args[0] = ""
    elif case == "empty_root":
        args[-1] = "data.root="
    elif case == "incomplete":
        summary = json.loads((copy / "summary.json").read_text())
        (copy / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    elif case == "no_checkpoint":
        (copy / "checkpoint.pt").unlink()
    elif case == "text_data":
        args = [str(copy), "data=imdb"]
    elif case == "patch":
        args.append("data.patch=8")
    elif case == "two_data":
        args = [str(copy), "data=synthetic,video_folder"]
    elif case == "model_override":
        args.append("model=ut")
    elif case.startswith("own_"):  # the run's own data: no data=, the run's own root
        args = [str(copy), "--split", case.split("_")[1]] + (["data.val_clips=3"] if case.endswith("moved") else [])
    elif case == "added_data_key":  # evaluated the default data before, with no word of the misspelt key
        args.append("+data.roott=/elsewhere")
    elif case == "added_key_of_own_data":
        args = [str(copy), "+data.roott=/elsewhere"]
    elif case.startswith("config_"):  # YAML, but not the run's config
        (copy / "config.yaml").write_text({"config_empty": "", "config_list": "[1, 2]\n", "config_word": "hello\n",
                                           "config_other": "a: 1\n"}[case])
    with read_only(copy) if case == "read_only" else contextlib.nullcontext():  # a run in a read-only mount
        assert main(args) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cutlab-eval: error: ") and expected in lines[0], lines
    assert not (copy / "evaluations").exists()



def test_a_run_still_training_is_refused_naming_its_process_not_sent_back_to_its_command(trained, tmp_path, capsys):
    """A run whose summary says running while its training process lives: the refusal said to run its python -m
    cutlab command again to finish it, which the run's lock refuses while that process lives. Its lock is held
    here by this test's process, as by the process training it."""
    import socket

    from cutlab.run.lock import RunLock
    from cutlab.transfer.cli import main

    copy = tmp_path / trained[0].name
    shutil.copytree(trained[0], copy, ignore=shutil.ignore_patterns("evaluations"))
    summary = json.loads((copy / "summary.json").read_text())
    (copy / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    with RunLock(copy):
        assert main([str(copy), "eval.gamma_test=[0,0.2]"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    holder = f"process {os.getpid()} on {socket.gethostname()}"
    assert lines == [f"cutlab-eval: error: {copy.name} is being trained now by {holder}: its weights are not final "
                     "yet; evaluate it once that process ends"], lines
    assert not (copy / "evaluations").exists()

def test_a_run_on_a_read_only_file_system_is_refused_and_the_other_runs_evaluated(trained, tmp_path):
    runs = tmp_path / "runs"  # a read-only run once ended the whole command in an OSError traceback
    for name in ("a_read_only", "b_writable"):
        shutil.copytree(trained[0], runs / name, ignore=shutil.ignore_patterns("evaluations"))
    with read_only(runs / "a_read_only"):
        result = run_command("cutlab.transfer.cli", [str(runs)], runs)
    folder = (runs / "a_read_only" / "evaluations").resolve()
    assert result.returncode == 2 and [line for line in result.stderr.splitlines() if "error" in line] == [
        f"cutlab-eval: error: a_read_only: cannot write the evaluation into {folder} (read-only file system): copy the "
        "run somewhere writable and evaluate the copy"], result.stderr
    assert "1 of 2 runs evaluated or already done, 1 refused" in result.stderr
    # the progress line counts them as the closing line does (it had said "2/2 runs done" of the same two)
    tallies = [line for line in result.stderr.splitlines() if line.startswith("cutlab-eval: evaluation: ")]
    assert tallies[-1].startswith("cutlab-eval: evaluation: 2/2 runs ended (100%), ") and \
        tallies[-1].endswith("; 1 evaluated or already done, 1 refused"), tallies
    assert result.stdout.startswith("b_writable: synthetic: mean rmse") and not folder.exists()
    assert (runs / "b_writable" / "evaluations").is_dir() and "Traceback" not in result.stderr


def test_a_run_folder_moved_away_mid_evaluation_stops_in_cutlab_evals_words_and_the_same_command_finishes(
        trained, tmp_path, capsys, monkeypatch):
    """The folder moves (another user's mv, a sync tool) after the numbers are computed, before they are written:
    the line says what the evaluation keeps, not what a training run does ("resumes from its last checkpoint"), and
    the stale lock left behind does not block the command run again once the folder is back."""
    import cutlab.transfer.evaluate
    from cutlab.transfer.cli import main

    copy, moved = tmp_path / trained[0].name, tmp_path / "moved"
    shutil.copytree(trained[0], copy, ignore=shutil.ignore_patterns("evaluations"))
    evaluate_run = cutlab.transfer.evaluate.evaluate_run

    def moving_the_folder(*args, **kwargs):
        numbers = evaluate_run(*args, **kwargs)
        copy.rename(moved)
        return numbers

    monkeypatch.setattr(cutlab.transfer.evaluate, "evaluate_run", moving_the_folder)
    assert main([str(copy), "eval.gamma_test=[0,0.2]"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cutlab-eval")]
    (folder,) = (moved / "evaluations").iterdir()
    assert lines == [f"cutlab-eval: error: {copy.name}: {copy / 'evaluations' / folder.name} vanished or was moved "
                     "while this command wrote metrics.csv there; move the folder back and run the same command "
                     "again: the evaluations written so far are kept, and it does the rest"], lines
    monkeypatch.setattr(cutlab.transfer.evaluate, "evaluate_run", evaluate_run)
    moved.rename(copy)
    assert main([str(copy), "eval.gamma_test=[0,0.2]"]) == 0
    assert json.loads((copy / "evaluations" / folder.name / "evaluation.json").read_text())["status"] == "complete"


def test_data_that_changed_at_the_same_path_is_not_taken_for_the_one_evaluated(evaluated):
    # the record's key names the data's path, not its contents: a clip replaced since must not read "already done"
    run, footage, _, _ = evaluated
    (folder,) = [p for p in (run / "evaluations").iterdir() if p.name.startswith("video_folder")]
    written = {p.name: p.read_bytes() for p in folder.iterdir()}
    frame = next((footage / "testing_01").iterdir())
    kept, stat = frame.read_bytes(), frame.stat()
    try:
        Image.fromarray(255 - np.asarray(Image.open(frame))).save(frame)  # the frame's negative
        again = run_command("cutlab.transfer.cli", [str(run), *PED2_FOLDER, f"data.root={footage}", WIDER], run.parent)
    finally:
        frame.write_bytes(kept)
        os.utime(frame, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert again.returncode == 2 and "already done" not in again.stdout, again.stdout + again.stderr[-2000:]
    lines = [line for line in again.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "changed since" in lines[0] and "move that folder aside" in lines[0], again.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == written  # the earlier result stays as it was


# A request as cutlab-eval records it (cutlab.transfer.evaluate.Request), on Ped2 as data=ucsd_ped2 composes it
PED2_ROOT = "/data/ucsd_ped2/ped2_gray160_uint8.npz"
PED2 = {"name": "ucsd_ped2", "task": "video", "root": PED2_ROOT, "frames": 10, "stride": 10, "patch": 16,
        "image_size": 160, "val_clips": 2}


def ped2_request(split: str = "test", **data) -> dict:
    return {"data": {**PED2, **data}, "gamma_test": [0.0, 0.5, 1.0], "split": split, "sigma": "data", "seed": 0,
            "noise_mean": 0.0, "batch_size": 4}


def test_the_label_says_what_tells_the_data_apart_and_the_folder_keeps_its_name(tmp_path):
    """Ped2 from another data.root was labelled ``ucsd_ped2``, as the default Ped2 is; the label now names the root,
    while the evaluation's folder keeps the name it always had, so evaluations already done are still found."""
    from cutlab.transfer.record import data_label, evaluation_dir

    default, elsewhere = ped2_request(), ped2_request(root="/somewhere/else")
    assert data_label(default, PED2) == "ucsd_ped2"
    assert data_label(elsewhere, PED2) == "ucsd_ped2 (root=/somewhere/else)"
    assert data_label(ped2_request("val", root="/somewhere/else", stride=40), PED2) == \
        "ucsd_ped2 (root=/somewhere/else, stride=40, val)"
    assert data_label(ped2_request("val"), PED2) == "ucsd_ped2 (val)"
    # the folder names of the code before the label changed, byte for byte (name, then the request's key)
    assert evaluation_dir(tmp_path, default) == tmp_path / "evaluations" / "ucsd_ped2-bb6df17288"
    assert evaluation_dir(tmp_path, elsewhere) == tmp_path / "evaluations" / "ucsd_ped2-b644003ae6"
    assert evaluation_dir(tmp_path, ped2_request("val")).name == "ucsd_ped2_val-a6e1220622"
    footage = {**ped2_request("all"), "data": {"name": "video_folder", "task": "video", "root": "/x/my clips"}}
    assert evaluation_dir(tmp_path, footage).name == "video_folder_my_clips_all-91e5e3308d"
    assert data_label(footage, {"name": "video_folder", "task": "video", "root": None}) == "video_folder:my clips (all)"


def write_evaluation(run: Path, request: dict, label: str, metric: str = "rmse", verdict: str = "feasible") -> None:
    """A complete cutlab-eval record of ``request`` in ``run``, as written with the label ``label`` (metrics made up;
    mean_metric their last layer's mean, as the analysis checks)."""
    from cutlab.transfer.record import METRICS, RECORD, evaluation_dir

    folder = evaluation_dir(run, request)
    folder.mkdir(parents=True)
    rows = [{"split": "test", "gamma_test": g, "layer": layer, "metric": metric, "value": 20.0 + g + layer}
            for g in request["gamma_test"] for layer in range(3)]
    pd.DataFrame(rows).to_csv(folder / METRICS, index=False)
    (folder / RECORD).write_text(json.dumps({
        "record_version": 1, "status": "complete", "request": request, "label": label, "run": "a", "metric": metric,
        "mean_metric": float(np.mean([row["value"] for row in rows if row["layer"] == 2])), "verdict": verdict}))


def test_the_report_keeps_seeds_in_one_column_and_names_each_figure_metric_and_line_apart(tmp_path, monkeypatch):
    """Three seeds evaluated on the same data were three columns told apart by a hash (the request's key holds the
    run's seed); two labels that make one file name drew one figure twice; a text evaluation beside a video one was
    headed RMSE; a run infeasible on the new data was drawn solid, its seeds' legend entries alike."""
    from matplotlib.axes import Axes

    from analysis.collect import collect_runs
    from analysis.transfer import transfer_sections
    from helpers.analysis import write_run

    drawn = []
    plot = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda ax, *a, **k: drawn.append(k) or plot(ax, *a, **k))
    cell = dict(model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True, test=20.0, selection=20.0,
                data={k: v for k, v in PED2.items() if k != "name"})
    for seed in (0, 1, 2):
        run = write_run(tmp_path / "runs", f"s{seed}", **cell, seed=seed)
        verdict = "infeasible" if seed else "feasible"
        write_evaluation(run, {**ped2_request(), "seed": seed}, "ucsd_ped2", verdict=verdict)
    clips = {"name": "video_folder", "task": "video", "root": "/x/clips"}
    write_evaluation(run, {**ped2_request("all"), "seed": 2, "data": clips}, "video_folder:clips (all)")
    write_evaluation(run, {**ped2_request(), "seed": 2, "data": {**clips, "root": "/x/clips_all"}},
                     "video_folder:clips_all")
    write_evaluation(run, {**ped2_request(), "seed": 2, "batch_size": 2}, "ucsd_ped2")  # other noise: its own column
    text = write_run(tmp_path / "runs", "text", model="hf_encoder", dataset="imdb", L=2, gamma=0.4, constrained=True,
                     test=[0.8, 0.7, 0.6, 0.5], selection=0.7)
    write_evaluation(text, {**ped2_request(), "data": {"name": "imdb", "task": "text"}}, "imdb", metric="accuracy")
    lines = transfer_sections(collect_runs(tmp_path / "runs"), tmp_path / "out")
    header = next(line for line in lines if line.startswith("| run |")).splitlines()[0]
    assert [cell.strip() for cell in header.split(" | ") if cell.startswith("ucsd_ped2")] == [
        r"ucsd_ped2 \[batch_size=2\] γ_test 0…1 (3)", r"ucsd_ped2 \[batch_size=4\] γ_test 0…1 (3)"]
    figures = [line for line in lines if line.startswith("![")]
    assert len(figures) == len({line.split("(")[-1] for line in figures}) == 5, figures
    assert "### accuracy vs γ_test on imdb" in lines and "### RMSE vs γ_test on video_folder:clips (all)" in lines
    legends = [k["label"] for k in drawn if "seed" in k.get("label", "")]
    assert len(legends) == 3 and legends[1].endswith("seed 1 †") and legends[0].endswith("seed 0")
    assert [k.get("markerfacecolor") for k in drawn if "seed" in k.get("label", "")] == [None, "white", "white"]


def test_the_label_says_sigma_run_and_the_folder_keeps_its_name(tmp_path):
    """``--sigma run`` and the default ``--sigma data`` were both labelled ``video_folder:vids``: the report's two
    columns differed only by a hash. The label says ``sigma=run`` (as it says ``all`` for ``--split all``); the
    folders keep the names they always had, so evaluations already done are still found."""
    from analysis.collect import collect_runs
    from analysis.transfer import read_evaluations
    from cutlab.transfer.record import data_label, evaluation_dir
    from helpers.analysis import write_run

    footage = {"name": "video_folder", "task": "video", "root": "/x/vids"}
    by_data, by_run = ({**ped2_request(), "data": footage, "sigma": sigma} for sigma in ("data", "run"))
    default = {**footage, "root": None}
    assert data_label(by_data, default) == "video_folder:vids"
    assert data_label(by_run, default) == "video_folder:vids (sigma=run)"
    assert data_label({**by_run, "split": "all"}, default) == "video_folder:vids (all, sigma=run)"
    assert evaluation_dir(tmp_path, by_run).name == "video_folder_vids-3ba152a04f"
    assert evaluation_dir(tmp_path, {**by_run, "split": "all"}).name == "video_folder_vids_all-aa06d54180"
    run = write_run(tmp_path / "runs", "a", model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True,
                    test=20.0, selection=20.0)
    for request in (by_data, by_run):
        write_evaluation(run, request, "video_folder:vids")
    evaluations, _, problems = read_evaluations(collect_runs(tmp_path / "runs"))
    assert not problems and sorted(evaluations["label"]) == ["video_folder:vids", "video_folder:vids (sigma=run)"]


def test_the_label_names_a_setting_whose_default_is_null():
    """IMDb on 10, 15 and 20 test reviews was labelled alike: the default ``test_subset: null`` (every review) was
    taken for a key the config lacks. A key a run's older config lacks is still no difference."""
    from cutlab.transfer.config import default_data
    from cutlab.transfer.record import data_label

    imdb, text = default_data("imdb"), {"max_length": 32, "val_size": 10}  # test_subset, train_subset: null
    labels = [data_label({**ped2_request(), "data": {**imdb, **text, "test_subset": n}}, imdb) for n in (10, 15, 20)]
    assert labels == [f"imdb (max_length=32, test_subset={n}, val_size=10)" for n in (10, 15, 20)]
    assert data_label({**ped2_request("val"), "data": {**imdb, "train_subset": 100}}, imdb) == \
        "imdb (train_subset=100, val)"
    assert data_label({**ped2_request(), "data": {k: v for k, v in imdb.items() if k != "test_subset"}}, imdb) == "imdb"
    assert data_label(ped2_request(val_clips=None), PED2) == "ucsd_ped2 (val_clips=null)"  # a default that is not null


def test_data_name_without_data_keys_is_composed_once_as_cutlab_composes_it(monkeypatch):
    """cutlab-eval data=NAME composed the config tree twice (and default_data(NAME), the label's reference, twice
    more): the first composition, without the data.KEY overrides, serves only to check those keys, and with none
    given it is the second, the same config (measured: 4 compositions, about 0.3 s each, per command; now 2)."""
    from cutlab.config import compose
    from cutlab.transfer.config import compose_settings

    real, composed = compose.compose_run_config, []
    monkeypatch.setattr(compose, "compose_run_config",
                        lambda overrides: composed.append(list(overrides)) or real(overrides))  # counts the real one
    overrides = ["data=ucsd_ped2", "eval.batch_size=2"]
    settings = compose_settings(overrides)
    assert composed == [overrides]
    assert OmegaConf.to_container(settings) == OmegaConf.to_container(real(overrides))
    composed.clear()
    compose_settings(["data=ucsd_ped2", "data.root=/tmp"])  # data.root is checked against data=ucsd_ped2's keys
    assert composed == [["data=ucsd_ped2"], ["data=ucsd_ped2", "data.root=/tmp"]]


def test_cutlab_eval_labels_ped2_from_another_root_by_that_root(tmp_path):
    """Through cutlab-eval's own composition: data=ucsd_ped2 is plain ``ucsd_ped2``; with data.root elsewhere the
    label names that root; both folders are named ``ucsd_ped2-<key>`` as before."""
    from cutlab.config.compose import compose_run_config
    from cutlab.transfer.config import compose_settings, default_data, evaluation_config
    from cutlab.transfer.evaluate import Request
    from cutlab.transfer.record import data_label, evaluation_dir, request_key

    run_cfg = compose_run_config([])  # a run trained on the default (synthetic) data
    labels = []
    for overrides in (["data=ucsd_ped2"], ["data=ucsd_ped2", "data.root=/somewhere/else"]):
        cfg = evaluation_config(run_cfg, compose_settings(overrides), overrides)
        request = Request.of(cfg, "test", "data").as_dict()
        labels.append(data_label(request, default_data("ucsd_ped2")))
        assert evaluation_dir(tmp_path, request).name == f"ucsd_ped2-{request_key(request)}"
    assert labels == ["ucsd_ped2", "ucsd_ped2 (root=/somewhere/else)"]


def test_the_report_names_the_root_of_an_evaluation_recorded_before_the_label_did(tmp_path):
    """An evaluation.json written before the label named the root (``"label": "ucsd_ped2"``) of Ped2 from another
    data.root: the report's column names that root, apart from the Ped2 the run trained on."""
    from analysis.collect import collect_runs
    from analysis.transfer import read_evaluations, transfer_sections
    from helpers.analysis import write_run

    run = write_run(tmp_path / "runs", "a", model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True,
                    test=20.0, selection=20.0, data={k: v for k, v in PED2.items() if k != "name"})
    copy = "/mnt/copy/ped2_gray160_uint8.npz"  # the same file name elsewhere: the whole path tells them apart
    for request in (ped2_request(), ped2_request(root=copy)):
        write_evaluation(run, request, "ucsd_ped2")
    runs = collect_runs(tmp_path / "runs")
    evaluations, _, problems = read_evaluations(runs)
    assert not problems
    assert sorted(evaluations["label"]) == [f"ucsd_ped2 (root={PED2_ROOT})", f"ucsd_ped2 (root={copy})"]
    header = next(line for line in transfer_sections(runs, tmp_path / "out") if line.startswith("| run |"))
    assert f"ucsd_ped2 (root={copy}) γ_test 0…1 (3)" in header and "own test split (ucsd_ped2)" in header


def test_the_reports_closing_line_counts_the_figures_of_evaluations(tmp_path, capsys):
    # "wrote ... 7 figures" left the cutlab-eval section's figures out
    from analysis.__main__ import main
    from helpers.analysis import write_run

    run = write_run(tmp_path / "runs", "a", model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True,
                    test=20.0, selection=20.0, data={k: v for k, v in PED2.items() if k != "name"})
    write_evaluation(run, ped2_request(stride=40), "ucsd_ped2 (stride=40)")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    assert "; 1 figure of evaluations on other data)" in capsys.readouterr().out


def test_a_folder_of_runs_shows_runs_done_and_ctrl_c_ends_in_one_line(trained, tmp_path):
    """Two runs on UCSD Ped2's test split (minutes each): n/N runs done with the time left as each ends, and Ctrl-C
    while the first is evaluated ends in one line (it was a 40-line traceback), leaving no half evaluation."""
    import signal
    import time

    run, _ = trained
    folder = tmp_path / "sweep"
    for name in ("a", "b"):
        shutil.copytree(run, folder / name, ignore=shutil.ignore_patterns("evaluations"))
    command = [sys.executable, "-m", "cutlab.transfer.cli", str(folder), "data=ucsd_ped2", "eval.gamma_test=[0]"]
    # as from a terminal: SIGINT at its default (a pytest-xdist worker ignores it, and its children would inherit that)
    process = subprocess.Popen(command, cwd=ROOT, env=cutlab_env(tmp_path / "runs"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while not (folder / "a" / "evaluations").exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "cutlab-eval: interrupted; the evaluations written so far are kept, and the same command does the rest")
    assert not (folder / "a" / "evaluations").exists() and not (folder / "b" / "evaluations").exists()
    small = run_command("cutlab.transfer.cli", [str(folder), *PED2_FOLDER, f"data.root={trained[1]}"], tmp_path)
    assert small.returncode == 0, small.stderr[-2000:]
    tallies = [line for line in small.stderr.splitlines() if line.startswith("cutlab-eval: evaluation: ")]
    assert [line.split(": ")[2].split(" ")[0] for line in tallies] == ["1/2", "2/2"], small.stderr[-2000:]
    assert all(" elapsed, " in line and " left" in line for line in tallies)


def test_ctrl_c_as_a_runs_config_is_read_stops_the_evaluation_not_that_run(trained, tmp_path):
    """A Ctrl-C inside OmegaConf as cutlab-eval read a run's config (tests/helpers/signals.py) was reported as that
    run's unreadable config, and the command went on to the next run."""
    from helpers.signals import signal_inside_omegaconf

    run, footage = trained
    folder = tmp_path / "sweep"
    for name in ("a", "b"):
        shutil.copytree(run, folder / name, ignore=shutil.ignore_patterns("evaluations"))
    ended = signal_inside_omegaconf(("cutlab.transfer.runs", "finished_run"), "SIGINT", 2, "cutlab-eval",
                                    [str(folder), *PED2_FOLDER, f"data.root={footage}"], cwd=ROOT,
                                    env=cutlab_env(tmp_path / "runs"))
    assert (ended.returncode, ended.stderr.strip().splitlines()[-1]) == (
        130, "cutlab-eval: interrupted; the evaluations written so far are kept, and the same command does the rest"), \
        ended.stderr[-3000:]
    assert not (folder / "a" / "evaluations").exists() and not (folder / "b" / "evaluations").exists()


@pytest.mark.slow  # a relative root's label: test_old_and_new_records_of_one_relative_root_... runs by default
def test_a_relative_data_root_names_the_folder_it_was_typed_in(trained, tmp_path):
    """data.root=footage from two folders names two data sets: the second used to be 'complete; skipped' on the
    first's record (which held 'footage'), and cutlab-eval then read whichever footage/ was under its working folder."""
    _, footage = trained
    for place in ("a", "b"):
        shutil.copytree(footage, tmp_path / place / "footage")
    shutil.rmtree(tmp_path / "b" / "footage" / "training_02")  # b's footage is other data
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "cutlab", *TRAIN, *PED2_FOLDER, "data.root=footage", "run_name=relative"]
    first = subprocess.run(command, cwd=tmp_path / "a", env=cutlab_env(runs), capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    config = OmegaConf.load(runs / "relative" / "config.yaml")
    assert config.data.root == str(tmp_path / "a" / "footage")
    second = subprocess.run(command, cwd=tmp_path / "b", env=cutlab_env(runs), capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 2 and "skipped" not in second.stdout + second.stderr
    assert (f"already holds a run with another configuration (data.root: '{tmp_path / 'a' / 'footage'}' -> "
            f"'{tmp_path / 'b' / 'footage'}')") in second.stderr, second.stderr[-2000:]
    config.data.root = "footage"  # as a record written before roots were made absolute: still this run, from a/
    OmegaConf.save(config, runs / "relative" / "config.yaml")
    again = subprocess.run(command, cwd=tmp_path / "a", env=cutlab_env(runs), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0 and "complete; skipped" in again.stderr
    # a sweep's plan compares the same way (it had called the run 'refused', and the sweep ran it again)
    plan = subprocess.run([*command[:3], "--plan", "-m", *command[3:]], cwd=tmp_path / "a", env=cutlab_env(runs),
                          capture_output=True, text=True, timeout=600)
    assert "0 complete    relative" in plan.stdout and "# 1 complete (skipped), 0 to run" in plan.stdout, plan.stdout


def test_old_and_new_records_of_one_relative_root_are_one_data_cell():
    # a record from before roots were made absolute ('tiny.npz') beside a new one ('/d/a/tiny.npz'): one cell, so
    # the arms of a sweep extended after the change stay paired; a root that only shares a name stays apart
    from cutlab.config.data_settings import settings_apart

    assert settings_apart([{"name": "ucsd_ped2", "root": "tiny.npz"}, {"name": "ucsd_ped2", "root": "/d/a/tiny.npz"}]) \
        == [[], []]
    assert settings_apart([{"name": "x", "root": "tiny.npz"}, {"name": "x", "root": "/d/a/other.npz"}]) == [
        ["root=tiny.npz"], ["root=other.npz"]]


def test_one_run_on_two_grids_of_one_data_draws_lines_told_apart_and_a_legend_that_fits(tmp_path, monkeypatch):
    """One run evaluated on one data with two γ_test grids drew both lines alike under two identical legend entries
    (the run's folder), the legend running off the figure and the layout collapsing; each entry now names its grid as
    the table's column does, the lines differ, and the legend fits, a run folder's long name included."""
    import warnings

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analysis.collect import collect_runs
    from analysis.transfer import transfer_sections
    from helpers.analysis import write_run

    drawn, saved = [], []
    plot, savefig = Axes.plot, Figure.savefig
    monkeypatch.setattr(Axes, "plot", lambda ax, *a, **k: drawn.append(k) or plot(ax, *a, **k))
    monkeypatch.setattr(Figure, "savefig", lambda figure, *a, **k: saved.append(figure) or savefig(figure, *a, **k))
    cell = dict(model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True, test=20.0, selection=20.0,
                data={k: v for k, v in PED2.items() if k != "name"})
    twice = write_run(tmp_path / "runs", "train.epochs=1,train.max_steps_per_epoch=3", **cell)
    once = write_run(tmp_path / "runs", "train.epochs=1,train.max_steps_per_epoch=4", **cell)  # same cell and seed
    wider = {**ped2_request(), "gamma_test": [0.0, 0.5, 1.5]}
    for run, request in ((twice, ped2_request()), (twice, wider), (once, ped2_request())):
        write_evaluation(run, request, "ucsd_ped2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied because axes sizes collapsed to zero"
        lines = transfer_sections(collect_runs(tmp_path / "runs"), tmp_path / "out")
    assert len([line for line in lines if line.startswith("![")]) == 1
    legends = {k["label"].replace("\n", " ") for k in drawn if "label" in k}
    grid = r"$\gamma_\mathrm{test}$ 0…"
    assert legends == {
        f"constrained · dust L=2 $\\gamma_\\mathrm{{train}}$=0.09 · trained on ucsd_ped2 · {grid}{end}"
        for end in ("1.5 (3)", "1 (3) · train.epochs=1,train.max_steps_per_epoch=3",
                    "1 (3) · train.epochs=1,train.max_steps_per_epoch=4")}, legends
    styles = [tuple(k.get(key) for key in ("color", "linestyle", "marker", "markerfacecolor")) for k in drawn]
    assert len(set(styles)) == 3, styles
    figure = saved[0]
    figure.draw_without_rendering()  # the layout the PNG was saved with (kept: the layout engine is off by then)
    (legend,) = figure.legends or [ax.get_legend() for ax in figure.axes]
    box, page = legend.get_window_extent(), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    assert figure.axes[0].get_position().width > 0.6  # the plot keeps most of the width, not squeezed by the legend
    assert box.y1 < figure.axes[0].get_window_extent().y0  # below the plot, not over its lines


def test_a_dollar_in_a_run_folder_or_data_root_is_drawn_as_written(tmp_path, monkeypatch):
    """A run folder ``price$1`` in the legend (or a data root ``ped2 $5-$9.npz`` in the title) was read by matplotlib
    as mathtext: the legend showed its γ names as raw ``$\\gamma...$``, the title ``5-`` as math (or a parse error).
    Each ``$`` of a name is now drawn as itself and the γ names are still typeset."""
    from matplotlib.figure import Figure

    from analysis.collect import collect_runs
    from analysis.transfer import transfer_sections
    from helpers.analysis import write_run

    saved = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda figure, *a, **k: saved.append(figure) or savefig(figure, *a, **k))
    cell = dict(model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True, test=20.0, selection=20.0,
                data={k: v for k, v in PED2.items() if k != "name"})
    for name in ("price$1", "price$2"):  # one cell and seed: the legend tells them apart by their folders
        write_evaluation(write_run(tmp_path / "runs", name, **cell), ped2_request(root="/d/ped2 $5-$9.npz"), "x")
    lines = transfer_sections(collect_runs(tmp_path / "runs"), tmp_path / "out")
    assert len([line for line in lines if line.startswith("![")]) == 1
    figure = saved[0]
    figure.draw_without_rendering()
    title = figure.axes[0].title
    assert title._preprocess_math(title.get_text()) == ("evaluated on ucsd_ped2 (root=ped2 $5-$9.npz)", False)
    for text, name in zip(figure.legends[0].get_texts(), ("price$1", "price$2")):
        written = text.get_text()
        assert text._preprocess_math(written)[1], written  # still math: the γ names typeset
        assert written.replace("\\$", "$").endswith(f" · {name}") and "\\\\$" not in written, written


def test_gammas_the_run_never_evaluated_draw_noise_of_their_own():
    """A gamma off the run's grid drew stream len(grid) + round(1e4 * gamma) % 988: 0.05 and 0.1488 (and any two
    within 5e-5) shared one draw."""
    from omegaconf import OmegaConf

    from cutlab.core.evaluation import noise_index
    from cutlab.transfer.evaluate import noise_streams

    run_cfg = OmegaConf.create({"gamma": 0.09, "eval": {"gamma_test": [0.0, 0.2]}})
    gammas = [0.0, 0.2, 0.09, 0.05, 0.1488, 0.25, 0.3488, 1.238, 1e-05, 2e-05, 100.0]
    streams = noise_streams(gammas, run_cfg)
    assert streams[:3] == [0, 1, 2]  # the run's own places (gamma_train after its grid)
    indices = [noise_index(batch, stream) for stream in streams for batch in range(50)]
    assert len(set(indices)) == len(indices)


def test_every_shipped_data_key_is_known_to_move_samples_between_splits_or_not():
    """cutlab-eval's refusal of a split that may hold training samples reads SPLIT_KEYS: a new data key must be put
    there or here, or a key that moves samples between splits would let training samples into an evaluation."""
    from cutlab.config.data_settings import SPLIT_KEYS

    same_samples = {"name", "task", "root", "max_length", "frames", "stride", "patch", "image_size", "num_labels",
                    "train_subset", "test_subset"}
    keys = {key for path in (ROOT / "conf" / "data").glob("*.yaml") for key in yaml.safe_load(path.read_text())}
    assert keys - same_samples == set(SPLIT_KEYS)


def test_evaluations_already_done_are_left_out_of_the_rate_and_the_time_left(evaluated, tmp_path, capsys):
    """A folder of runs most of them evaluated already: each skipped run was counted as ended at this command's rate,
    so its first lines said "7.71 runs/s ... 00:00 left" with every evaluation still ahead."""
    from cutlab.transfer.cli import main

    run, footage, _, _ = evaluated
    folder = tmp_path / "sweep"
    shutil.copytree(run, folder / "a_done")
    shutil.copytree(run, folder / "b_new", ignore=shutil.ignore_patterns("evaluations"))
    assert main([str(folder), *PED2_FOLDER, f"data.root={footage}", WIDER]) == 0
    tallies = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cutlab-eval: evaluation: ")]
    assert tallies[0].startswith("cutlab-eval: evaluation: 1/2 runs ended (50%), ? runs/s, ") and \
        tallies[0].endswith(" elapsed, ? left"), tallies
    assert "? runs/s" not in tallies[1] and tallies[1].endswith(" elapsed, 00:00 left"), tallies
