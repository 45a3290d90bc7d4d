"""Analysis from W&B (analysis.wandb_source): the offline W&B files of real cutlab runs give the same analysis
as their run folders, what W&B lacks is reported, and bad input stops with one clear line.

Two tiny real runs (one constrained, one ERM) log to W&B offline, the default. The API reader needs a W&B
server, which this machine cannot reach: only its errors before any network call are tested here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from helpers.analysis import analysis_cli, run_main
from helpers.cli import cutlab

from analysis.collect import collect_runs
from analysis.tables import build_tables
from cutlab.run.records import CONFIG, EVAL, HISTORY, SUMMARY

TINY = ["-m", "train=erm,constrained", "L=2", "train.epochs=1", "train.max_steps_per_epoch=2",
        "eval.gamma_test=[0,0.5]", "progress=false"]
# columns that differ by construction: where the folder lies, and the files W&B never receives
LOCAL_ONLY = ["path", "has_sample_losses", "provenance"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The two runs, made with an empty home (``home/`` beside them) where W&B's default folders would be."""
    runs = tmp_path_factory.mktemp("wandb") / "runs"
    home = runs.parent / "home"
    home.mkdir()
    cutlab(TINY, runs, timeout=300, env={"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
                                         "XDG_CACHE_HOME": str(home / ".cache")})
    return runs


@pytest.fixture(scope="module")
def offline_report(runs) -> tuple[Path, subprocess.CompletedProcess]:
    """``python -m analysis --wandb-offline RUNS --out REPORT`` once, for the tests below."""
    out = runs.parent / "report"
    return out, analysis_cli("--wandb-offline", str(runs), "--out", str(out))


def run_dirs(runs: Path) -> list[Path]:
    return sorted(p for p in runs.iterdir() if (p / SUMMARY).exists())


def test_wandb_writes_only_in_the_run_folder(runs):
    """W&B's staged artifact files (the eval tables) and caches stay in the run's wandb/ folder, not in the home."""
    home = runs.parent / "home"
    assert not (home / ".local" / "share" / "wandb").exists() and not (home / ".cache" / "wandb").exists()
    assert not [str(p) for p in home.rglob("*wandb*")]
    for run in run_dirs(runs):
        assert list((run / "wandb" / "data" / "artifacts" / "staging").iterdir()), run.name


def test_offline_wandb_files_give_the_same_records(runs, offline_report):
    out, result = offline_report
    assert result.returncode == 0, result.stderr
    assert "fetched 2/2 runs" in result.stderr
    for run in run_dirs(runs):
        rebuilt = out / "wandb_records" / run.name
        assert json.loads((rebuilt / SUMMARY).read_text()) == json.loads((run / SUMMARY).read_text())
        assert yaml.safe_load((rebuilt / CONFIG).read_text()) == yaml.safe_load((run / CONFIG).read_text())
        pd.testing.assert_frame_equal(pd.read_csv(rebuilt / HISTORY), pd.read_csv(run / HISTORY))
        pd.testing.assert_frame_equal(pd.read_csv(rebuilt / EVAL), pd.read_csv(run / EVAL))


def test_offline_wandb_files_give_the_same_analysis(runs, offline_report):
    out, result = offline_report
    assert result.returncode == 0, result.stderr
    from_folders, from_wandb = collect_runs(runs), collect_runs(out / "wandb_records")
    assert list(from_folders.runs["state"]) == ["complete", "complete"]
    # W&B's log reader prints a whole float as an integer (lipschitz_margin 1.0 -> 1): equal values, other dtype
    pd.testing.assert_frame_equal(from_wandb.runs.drop(columns=LOCAL_ONLY), from_folders.runs.drop(columns=LOCAL_ONLY),
                                  check_dtype=False)
    pd.testing.assert_frame_equal(from_wandb.metrics, from_folders.metrics)
    pd.testing.assert_frame_equal(from_wandb.history, from_folders.history)
    table3 = build_tables(from_folders)[0]
    assert len(table3.frame) == 1  # one cell: constrained vs ERM
    written = pd.read_csv(out / "tables" / f"{table3.spec.stem}.csv")
    pd.testing.assert_frame_equal(written, pd.read_csv(io.StringIO(table3.to_csv())))
    report = (out / "report.md").read_text()
    assert "rebuilt from W&B offline run files" in report and "2 run folders: 2 complete" in report


def test_a_missing_eval_table_makes_the_run_partial(runs, tmp_path):
    from analysis.wandb_source import collect_wandb, records_from_offline

    run = run_dirs(runs)[0]
    copy = tmp_path / "runs" / run.name
    shutil.copytree(run / "wandb", copy / "wandb", ignore=shutil.ignore_patterns("cache"))
    for table in copy.glob("wandb/offline-run-*/files/media/table/*.table.json"):
        table.unlink()
    table = collect_wandb(records_from_offline(tmp_path / "runs", tmp_path / "records"))
    row = table.runs.iloc[0]
    assert row["state"] == "partial" and not row["usable"]
    assert "eval table file" in row["problem"] and "missing" in row["problem"]


@pytest.fixture(scope="module")
def wandb_run(runs):
    from analysis.wandb_source import find_offline_runs, offline_run

    run_dir, sessions = next(iter(find_offline_runs(runs).items()))
    return offline_run(run_dir, sessions)


def test_a_summary_without_the_feasibility_details_is_unsupported(wandb_run, tmp_path):
    """What a cutlab that kept scalar summary keys only logged: the verdict's details are lost, not guessed."""
    from analysis.wandb_source import Rebuilt, collect_wandb, write_record

    old = dataclasses.replace(wandb_run, summary={k: v for k, v in wandb_run.summary.items()
                                                   if not k.startswith("feasibility/")})
    rebuilt = Rebuilt(tmp_path / "records", "test")
    write_record(old, rebuilt.folder / old.name, rebuilt)
    row = collect_wandb(rebuilt).runs.iloc[0]
    assert row["state"] == "unsupported" and "feasibility/status" in row["problem"]


def test_a_run_without_cutlab_summary_is_partial(wandb_run, tmp_path):
    """Killed before its first summary: W&B has its config and steps but no status."""
    from analysis.wandb_source import Rebuilt, collect_wandb, write_record

    killed = dataclasses.replace(wandb_run, summary={k: v for k, v in wandb_run.summary.items() if k.startswith("_")})
    rebuilt = Rebuilt(tmp_path / "records", "test")
    write_record(killed, rebuilt.folder / killed.name, rebuilt)
    table = collect_wandb(rebuilt)
    row = table.runs.iloc[0]
    assert row["state"] == "partial" and "no cutlab status" in row["problem"]
    assert len(table.history_of(row["run"])) == 2  # the steps it took are still there to look at


def test_steps_missing_from_wandb_make_the_run_partial(wandb_run, tmp_path):
    """A W&B log that lost a step (its session killed before W&B wrote it, or run with W&B disabled): reported,
    with both causes (W&B's files cannot tell them apart), the table unchanged."""
    from analysis.wandb_source import Rebuilt, collect_wandb, write_record

    lossy = dataclasses.replace(wandb_run, history=wandb_run.history[1:])
    rebuilt = Rebuilt(tmp_path / "records", "test")
    write_record(lossy, rebuilt.folder / lossy.name, rebuilt)
    row = collect_wandb(rebuilt).runs.iloc[0]
    assert row["state"] == "partial" and "W&B lacks training steps 1 of 2" in row["problem"]
    assert "killed" in row["problem"] and "wandb.mode=disabled" in row["problem"]


def test_wandb_keys_are_in_sections_with_their_own_axes(runs):
    """The W&B layout, read back with W&B's own reader (``wandb leet inspect``): per-layer keys in sections, each
    section on its step axis, the evaluation as one W&B step per gamma_test plus a line plot, a short display
    name without the folder's commas, and the verdict in the summary and as a tag."""
    from analysis.wandb_source import find_offline_runs, read_transaction_log

    for run_dir, sessions in find_offline_runs(runs).items():
        records = [r for session in sessions for r in read_transaction_log(session)]
        steps = [r["history"]["item"] for r in records if r.get("type") == "history"]
        summary = json.loads((run_dir / SUMMARY).read_text())
        history = pd.read_csv(run_dir / HISTORY)
        train = [s for s in steps if "train/step" in s]
        assert [int(s["train/step"]) for s in train] == list(history["step"])
        assert {"loss/l0", "loss/l2", "lambda/l2", "slack/l2", "constraint/l2", "train/lagrangian", "train/lr",
                "train/constraints_met"} <= set(train[0])
        assert not any(k.startswith(("loss_", "lambda_", "slack_", "g_")) for s in steps for k in s)  # no flat keys
        assert [s["loss/l2"] for s in train] == pytest.approx(list(history["loss_2"]))
        axes = {r["metric"].get("glob_name") or r["metric"]["name"]: r["metric"].get("step_metric")
                for r in records if r.get("type") == "metric"}
        assert {axes[f"{section}/*"] for section in ("loss", "lambda", "slack", "constraint", "train")} == {"train/step"}
        assert axes["eval/*"] == "eval/gamma_test"
        # the evaluation: the last layer's test RMSE per gamma_test, as eval.csv has it
        evaluation = pd.read_csv(run_dir / EVAL)
        last = evaluation[(evaluation.split == "test") & (evaluation.metric == "rmse")
                          & (evaluation.layer == evaluation.layer.max())]
        logged = {s["eval/gamma_test"]: s["eval/test/rmse"] for s in steps if "eval/test/rmse" in s}
        assert logged == pytest.approx(dict(zip(last.gamma_test, last.value)))
        assert min(s["_step"] for s in steps if "eval/gamma_test" in s) > max(s["_step"] for s in train)
        assert any(k.startswith("eval_plot/rmse") for s in steps for k in s)  # the line plot's table
        plots = [r["config"]["update"] for r in records if r.get("type") == "config"]
        assert any("_wandb.visualize.eval_plot/rmse" in update for update in plots)
        run = [r["run"] for r in records if r.get("type") == "run"][-1]
        assert "," in run_dir.name and "," not in run["display_name"] and len(run["display_name"]) <= 96
        arm = "constrained" if "train=constrained" in run_dir.name else "erm"
        assert run["display_name"].startswith(f"dust {arm} L2 γ0.09 ") and "seed0" in run["display_name"]
        assert run["tags"] == [summary["verdict"]]
        final = {k: v for r in records if r.get("type") == "summary" for k, v in r["summary"]["update"].items()}
        assert final["verdict"] == summary["verdict"] and final["feasibility/status"] == summary["verdict"]


@pytest.mark.slow
def test_a_killed_and_resumed_run(tmp_path):
    """SIGKILL after the first epoch, then the same command resumes it under the same W&B id: the sessions are
    merged. Measured with wandb 0.31: the killed offline session keeps nothing (a 7-byte log), so W&B lacks the
    steps before the kill and the run must come out partial, saying so; if W&B kept them, it must be complete
    with the run folder's history."""
    from analysis.wandb_source import collect_wandb, records_from_offline
    from helpers.contract import start_and_kill

    runs = tmp_path / "runs"
    args = ["L=2", "train.epochs=2", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "progress=false",
            "train=constrained", "run_name=killed"]
    start_and_kill(args, runs / "killed", rows=2)
    cutlab(args, runs, timeout=300)
    assert len(list((runs / "killed" / "wandb").glob("offline-run-*"))) == 2
    table = collect_wandb(records_from_offline(runs, tmp_path / "records"))
    row, folder = table.runs.iloc[0], collect_runs(runs)
    assert row["test_mean_metric"] == folder.runs.iloc[0]["test_mean_metric"]
    if row["state"] == "complete":
        pd.testing.assert_frame_equal(table.history, folder.history)
    else:
        assert row["state"] == "partial" and "W&B lacks training steps 1-2 of 4" in row["problem"]
        assert list(table.history["step"]) == [3, 4]


@pytest.mark.slow  # W&B's summary of a resumed run: test_offline_wandb_files_give_the_same_records runs by default
def test_a_preempted_and_resumed_runs_summary_loses_the_preemption(tmp_path):
    """SIGTERM mid-training writes an ``error`` into summary.json and the W&B summary; the same command then ends
    the run complete, without it. W&B's summary lost it too: a resumed offline session does not see the earlier
    session's keys, so the mirror removes those of the summary.json it replaces (W&B keeps a removal in its log)."""
    from analysis.wandb_source import records_from_offline
    from helpers.contract import start_and_kill

    runs = tmp_path / "runs"
    args = ["L=2", "train.epochs=3", "train.max_steps_per_epoch=20", "train.batch_size=8", "eval.gamma_test=[0,0.5]",
            "progress=false", "run_name=stopped"]
    start_and_kill(args, runs / "stopped", rows=2, stop="SIGTERM")
    assert json.loads((runs / "stopped" / SUMMARY).read_text())["error"].startswith("Preempted: ")
    cutlab(args, runs, timeout=300)
    summary = json.loads((runs / "stopped" / SUMMARY).read_text())
    assert summary["status"] == "complete" and "error" not in summary
    records_from_offline(runs, tmp_path / "records")
    assert json.loads((tmp_path / "records" / "stopped" / SUMMARY).read_text()) == summary


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> Path:
    """A run that checks its iterates (summary.json's ``iterate.checks``), then its summary.json deleted, which makes
    the same command resume it: the second W&B session trains no step, it only evaluates."""
    runs = tmp_path_factory.mktemp("resumed") / "runs"
    args = ["L=2", "train.epochs=2", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "progress=false",
            "eval.iterate=best", "eval.check_every_steps=2", "run_name=resumed"]
    cutlab(args, runs, timeout=300)
    (runs / "resumed" / SUMMARY).unlink()
    cutlab(args, runs, timeout=300)
    assert len(list((runs / "resumed" / "wandb").glob("offline-run-*"))) == 2
    return runs


def test_a_session_that_only_evaluates_logs_after_the_training_steps(resumed, tmp_path):
    """W&B's offline session starts again at step 0: its evaluation must still follow the first session's training
    steps, not replace them when the sessions are merged (the run read back complete, with its whole history)."""
    from analysis.wandb_source import collect_wandb, find_offline_runs, read_transaction_log, records_from_offline

    first, second = find_offline_runs(resumed)[resumed / "resumed"]
    steps = [[r["history"]["item"] for r in read_transaction_log(s) if r.get("type") == "history"]
             for s in (first, second)]
    trained = [int(step["_step"]) for step in steps[0] if "train/step" in step]
    assert trained == [1, 2, 3, 4] and min(int(step["_step"]) for step in steps[1]) == 5
    table, folder = collect_wandb(records_from_offline(resumed, tmp_path / "records")), collect_runs(resumed)
    assert list(table.runs["state"]) == ["complete"], list(table.runs["problem"])
    pd.testing.assert_frame_equal(table.history, folder.history)


def test_the_wandb_summary_carries_the_iterate_checks(resumed, tmp_path):
    """summary.json's ``iterate`` (its ``checks``, a list of dicts, too) comes back whole from W&B."""
    from analysis.wandb_source import records_from_offline

    records_from_offline(resumed, tmp_path / "records")
    rebuilt = json.loads((tmp_path / "records" / "resumed" / SUMMARY).read_text())
    summary = json.loads((resumed / "resumed" / SUMMARY).read_text())
    assert summary["iterate"]["checks"] and rebuilt["iterate"] == summary["iterate"]


# --------------------------------------------------------------------------------------------- bad input

def test_no_offline_runs_exit_2(runs, tmp_path, capsys):
    folder = tmp_path / "records_only"  # run records without their W&B files
    shutil.copytree(run_dirs(runs)[0], folder / "run", ignore=shutil.ignore_patterns("wandb"))
    code, err = run_main("--wandb-offline", str(folder), "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and err.startswith("cutlab-analysis: error: ") and err.count("\n") == 1
    assert "no W&B run files" in err and "wandb.mode=offline" in err
    code, err = run_main("--wandb-offline", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and "does not exist" in err


def test_wandb_not_installed_exit_2(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` meets when wandb is not installed
    code, err = run_main("--wandb-offline", str(runs), "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and "wandb is not installed" in err and "pip install wandb" in err and err.count("\n") == 1


def test_api_without_a_key_or_with_a_bad_project_exit_2(tmp_path, capsys):
    code, err = run_main("--wandb", "cutlab", "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and "ENTITY/PROJECT" in err
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # no ~/.netrc: no key
    result = subprocess.run([sys.executable, "-m", "analysis", "--wandb", "me/cutlab", "--out", str(tmp_path / "r")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and result.stderr.startswith("analysis: error: ")
    assert "wandb login" in result.stderr and result.stderr.count("\n") == 1


def test_source_arguments_are_exclusive(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run_main("runs", "--wandb", "me/cutlab", "--out", str(tmp_path / "r"), capsys=capsys)
    assert stop.value.code == 2 and "not both" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_main("--wandb-group", "g", "runs", "--out", str(tmp_path / "r"), capsys=capsys)


def test_a_run_leaves_the_wandb_folder_variables_as_it_found_them(tmp_path, monkeypatch):
    # a process started after the run (a sweep's next worker) would take this run's folders for the user's own
    from cutlab.run.tracking import RUN_WANDB_DIRS, ServiceStart

    for variable in RUN_WANDB_DIRS:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr("cutlab.run.tracking.USER_WANDB_DIRS", dict.fromkeys(RUN_WANDB_DIRS))
    service = ServiceStart("offline", tmp_path / "run")
    assert all(os.environ[variable].startswith(str(tmp_path)) for variable in RUN_WANDB_DIRS)
    service.abandon()
    assert not [variable for variable in RUN_WANDB_DIRS if variable in os.environ]


def test_a_summarys_infinite_values_come_back_as_numbers(tmp_path):
    """A relative violation with no bound to measure it by (slot 0 with train.epsilon=null) is Infinity in
    summary.json; W&B hands it back as the string 'Infinity', which the rebuilt record kept as text."""
    from analysis.wandb_source import records_from_offline

    runs = tmp_path / "runs"
    cutlab(["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "progress=false",
            "train.epsilon=null", "run_name=open"], runs, timeout=300)
    summary = json.loads((runs / "open" / SUMMARY).read_text())
    assert math.inf in summary["feasibility"]["relative_violations"], summary["feasibility"]
    records_from_offline(runs, tmp_path / "records")
    assert json.loads((tmp_path / "records" / "open" / SUMMARY).read_text()) == summary
