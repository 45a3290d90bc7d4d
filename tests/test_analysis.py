"""The analysis package: collection, Tables 3/4 (golden files), figures, and the report command end to end.

The golden folder is written here by hand with cutlab.run.records' own writers and file names, from
chosen numbers: several seeds of one cell (best-of-N must follow validation, not test), an infeasible
constrained run, cells the paper has (published value and difference), text cells (trapezoid AUC,
checked against a hand computation), a failed run and two half-written ones (flagged partial,
excluded from the tables). Regenerate the golden files with ``UPDATE_GOLDEN=1`` and read them by eye.
"""

from __future__ import annotations

import contextlib
import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import GOLDEN, ROOT
from helpers.analysis import NEW_DUAL, UPDATE, analysis_cli, assert_image, run_main, write_run
from helpers.cli import cutlab
from helpers.mounts import read_only

from cutlab.run.records import EVAL, HISTORY, SUMMARY


# --------------------------------------------------------------------------------------------- run records


def write_golden_folder(root: Path) -> Path:
    """The fixed folder of run records behind the golden tables (numbers chosen, see the module docstring)."""
    cell = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09)
    # best-of-N: seed 1 is best on validation (14.0), seed 2 best on test (14.1): the table must show 15.2
    write_run(root, "dust_ped2_L3_g0.09_con_s0", **cell, constrained=True, seed=0, test=14.9, selection=15.0)
    write_run(root, "dust_ped2_L3_g0.09_con_s1", **cell, constrained=True, seed=1, test=15.2, selection=14.0)
    write_run(root, "dust_ped2_L3_g0.09_con_s2", **cell, constrained=True, seed=2, test=14.1, selection=14.5)
    write_run(root, "dust_ped2_L3_g0.09_erm_s0", **cell, constrained=False, seed=0, test=15.3, selection=15.5)
    write_run(root, "dust_ped2_L3_g0.09_erm_s1", **cell, constrained=False, seed=1, test=15.4, selection=15.1)
    # half-written: still running; and a "complete" one whose eval.csv was cut (it would win on validation)
    write_run(root, "dust_ped2_L3_g0.09_con_s3", **cell, constrained=True, seed=3, test=9.0, selection=1.0,
              status="running")
    write_run(root, "dust_ped2_L3_g0.09_con_s4", **cell, constrained=True, seed=4, test=9.0, selection=1.0,
              truncate_eval=True)
    write_run(root, "dust_ped2_L5_g0.09_con", model="dust", dataset="ucsd_ped2", L=5, gamma=0.09, constrained=True,
              test=14.0, selection=14.2)
    write_run(root, "dust_ped2_L5_g0.09_erm", model="dust", dataset="ucsd_ped2", L=5, gamma=0.09, constrained=False,
              test=14.8, selection=14.9)
    write_run(root, "dust_ped2_L3_g0_con", model="dust", dataset="ucsd_ped2", L=3, gamma=0.0, constrained=True,
              test=18.5, selection=18.0)
    write_run(root, "dust_ped2_L3_g0_erm", model="dust", dataset="ucsd_ped2", L=3, gamma=0.0, constrained=False,
              test=19.6, selection=19.0)
    # an infeasible constrained run (like the paper's RMSE > 100 failures): shown, marked
    write_run(root, "ut_ped2_L5_g0.11_con", model="ut", dataset="ucsd_ped2", L=5, gamma=0.11, constrained=True,
              test=105.5, selection=104.0, verdict="infeasible", violated=(1, 2))
    write_run(root, "ut_ped2_L5_g0.11_erm", model="ut", dataset="ucsd_ped2", L=5, gamma=0.11, constrained=False,
              test=13.2, selection=13.0)
    write_run(root, "ut_ped2_L3_g0.09_con_failed", model="ut", dataset="ucsd_ped2", L=3, gamma=0.09,
              constrained=True, test=0.0, selection=0.0, status="failed", evaluation=False,
              error="NonFiniteLoss: the loss of layer 0 became nan; lower the primal learning rate (train.lr=...)")
    # an alpha and dual-lr sweep with seeds on generated video (no paper cell): the ablation figures
    synthetic = dict(model="dust", dataset="synthetic", L=3, gamma=0.09)
    for alpha in (0.1, 0.25, 0.5):
        for seed in (0, 1):
            mean = 12.0 - 4 * alpha + 0.3 * seed
            write_run(root, f"dust_syn_a{alpha}_s{seed}", **synthetic, constrained=True, alpha=alpha, seed=seed,
                      test=mean, selection=mean - 0.2 + 0.1 * seed,
                      verdict="infeasible" if (alpha, seed) == (0.5, 1) else None,
                      violated=(3,) if (alpha, seed) == (0.5, 1) else ())
    for dual_lr in (0.05, 0.1):
        for seed in (0, 1):
            mean = 11.0 + 5 * dual_lr + 0.3 * seed
            write_run(root, f"dust_syn_dlr{dual_lr}_s{seed}", **synthetic, constrained=True, dual_lr=dual_lr,
                      seed=seed, test=mean, selection=mean + 0.1, train=NEW_DUAL,
                      met_from=((4 if dual_lr == 0.1 else 5) - seed, (3 if dual_lr == 0.1 else 4) - seed))
    for seed in (0, 1):
        write_run(root, f"dust_syn_erm_s{seed}", **synthetic, constrained=False, seed=seed, test=13.0 + 0.2 * seed,
                  selection=13.1 + 0.2 * seed)
    # text: best-of-N by validation accuracy (max): seed 0 (val 0.71) beats seed 1 (val 0.70, better on test)
    text = dict(model="distilbert", dataset="imdb", L=6, gamma=0.2)
    write_run(root, "distilbert_imdb_g0.2_con_s0", **text, constrained=True, seed=0, test=[0.9, 0.8, 0.6, 0.5],
              selection=0.71)
    write_run(root, "distilbert_imdb_g0.2_con_s1", **text, constrained=True, seed=1, test=[0.92, 0.85, 0.7, 0.6],
              selection=0.70)
    write_run(root, "distilbert_imdb_g0.2_erm", **text, constrained=False, test=[0.9, 0.7, 0.6, 0.4], selection=0.66)
    write_run(root, "distilbert_imdb_g0.6_con", model="distilbert", dataset="imdb", L=6, gamma=0.6, constrained=True,
              test=[0.88, 0.82, 0.72, 0.6], selection=0.75)
    write_run(root, "ut_imdb_L3_g0_con", model="ut", dataset="imdb", L=3, gamma=0.0, constrained=True,
              test=[0.86, 0.8, 0.7, 0.6], selection=0.74)
    return root


@pytest.fixture(scope="module")
def golden_runs(tmp_path_factory) -> Path:
    return write_golden_folder(tmp_path_factory.mktemp("golden") / "runs")


@pytest.fixture(scope="module")
def golden_report(golden_runs, tmp_path_factory) -> Path:
    """``python -m analysis`` on the golden folder, once for the tests below."""
    out = tmp_path_factory.mktemp("golden_report") / "report"
    result = analysis_cli(str(golden_runs), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


# --------------------------------------------------------------------------------------------- collection

def test_collect_flags_every_run(golden_runs):
    from analysis.collect import collect_runs

    table = collect_runs(golden_runs)
    runs = table.runs.set_index("run")
    assert len(runs) == 31
    assert runs.loc["ut_ped2_L3_g0.09_con_failed", "state"] == "failed"
    assert "NonFiniteLoss" in runs.loc["ut_ped2_L3_g0.09_con_failed", "problem"]
    for partial in ("dust_ped2_L3_g0.09_con_s3", "dust_ped2_L3_g0.09_con_s4"):
        assert runs.loc[partial, "partial"] and not runs.loc[partial, "usable"]
    assert "running" in runs.loc["dust_ped2_L3_g0.09_con_s3", "problem"]
    assert "truncated" in runs.loc["dust_ped2_L3_g0.09_con_s4", "problem"]
    assert runs["usable"].sum() == 28
    assert set(runs.loc[runs["usable"], "task"]) == {"video", "text"}
    # text and video share the frames: the AUC is the trapezoid in gamma units, by hand
    auc = 0.5 * (0.9 + 0.8) / 2 + 0.5 * (0.8 + 0.6) / 2 + 1.0 * (0.6 + 0.5) / 2
    assert runs.loc["distilbert_imdb_g0.2_con_s0", "test_auc"] == pytest.approx(auc)
    assert runs.loc["dust_ped2_L3_g0.09_con_s1", "test_mean_metric"] == pytest.approx(15.2)
    assert set(table.metrics["run"]) >= set(runs.index[runs["usable"]])
    assert set(table.metrics["split"]) == {"val", "test"}
    assert set(table.history["run"]) >= {"dust_ped2_L3_g0.09_con_s3", "ut_ped2_L3_g0.09_con_failed"}
    assert table.sample_losses("dust_ped2_L3_g0.09_con_s1").shape == (72, 6)


def test_best_of_n_follows_validation_not_test(golden_runs):
    from analysis.collect import collect_runs
    from analysis.tables import TABLE3, TABLE4, build_table

    table = collect_runs(golden_runs)
    video = build_table(table, TABLE3).frame.set_index(["model", "dataset", "L", "gamma_train"])
    row = video.loc[("dust", "ucsd_ped2", 3, 0.09)]
    assert row["constrained_run"] == "dust_ped2_L3_g0.09_con_s1" and row["constrained_mean_rmse"] == pytest.approx(15.2)
    assert row["erm_run"] == "dust_ped2_L3_g0.09_erm_s1" and row["constrained_n_runs"] == 3
    assert row["diff_constrained"] == pytest.approx(15.2 - 14.856)
    infeasible = video.loc[("ut", "ucsd_ped2", 5, 0.11)]
    assert infeasible["constrained_verdict"] == "infeasible" and infeasible["paper_constrained"] == 12.283
    text = build_table(table, TABLE4).frame.set_index(["model", "dataset", "L", "gamma_train"])
    assert text.loc[("distilbert", "imdb", 6, 0.2), "constrained_run"] == "distilbert_imdb_g0.2_con_s0"
    assert text.loc[("distilbert", "imdb", 6, 0.2), "paper_L"] == 12  # the paper's DistilBERT row, marked


def test_a_table_rounds_each_number_once_from_the_records_digits(tmp_path):
    # 13.88246 rounds to 13.882; rounded to 4 decimals first (13.8825) and then to 3 it printed 13.883
    from analysis.collect import collect_runs
    from analysis.tables import TABLE3, build_table

    write_run(tmp_path, "con", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, test=13.88246,
              selection=14.0)
    table = build_table(collect_runs(tmp_path), TABLE3)
    recorded = json.loads((tmp_path / "con" / SUMMARY).read_text())["test_mean_metric"]
    assert table.frame.loc[0, "constrained_mean_rmse"] == recorded
    assert "| 13.882 |" in table.to_markdown() and "13.883" not in table.to_markdown()
    assert "13.8825," in table.to_csv()  # the CSV keeps 4 decimals


@pytest.mark.parametrize("stem", ["table3_video_mean_rmse", "table4_text_accuracy_auc"])
@pytest.mark.parametrize("suffix", [".md", ".csv"])
def test_tables_match_golden_files(golden_report, stem, suffix):
    produced = (golden_report / "tables" / f"{stem}{suffix}").read_text()
    golden = GOLDEN / f"{stem}{suffix}"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(produced)
    assert produced == golden.read_text(), f"{stem}{suffix} differs from {golden} (UPDATE_GOLDEN=1 rewrites it)"


def test_latex_table(golden_report):
    latex = (golden_report / "tables" / "table3_video_mean_rmse.tex").read_text()
    assert r"\begin{tabular}" in latex and r"\bottomrule" in latex
    assert r"105.500 $^\dagger$" in latex and r"ucsd\_ped2" in latex


# --------------------------------------------------------------------------------------------- figures


def test_every_figure_is_written_for_data_that_supports_it(golden_report):
    from analysis.figures import STEMS

    for stem in STEMS:
        png, pdf = golden_report / "figures" / f"{stem}.png", golden_report / "figures" / f"{stem}.pdf"
        assert_image(png)
        assert pdf.stat().st_size > 5_000 and pdf.read_bytes().startswith(b"%PDF")


def test_figures_say_why_they_are_skipped(golden_runs, tmp_path):
    from analysis import figures
    from analysis.collect import collect_runs

    one_erm = tmp_path / "one"
    shutil.copytree(golden_runs / "dust_ped2_L3_g0.09_erm_s0", one_erm / "dust_ped2_L3_g0.09_erm_s0")
    runs, out = collect_runs(one_erm), tmp_path / "fig"
    reasons = {
        figures.rmse_vs_depth: "single depth", figures.accuracy_vs_gamma: "no complete text runs",
        figures.alpha_ablation: "train.alpha", figures.dual_lr_ablation: "train.dual_lr",
        figures.gamma_train_effect: "single γ_train", figures.descent_ratios: "no complete constrained run",
        figures.dual_variables: "lambda",
    }
    for figure, reason in reasons.items():
        result = figure(runs, out)
        assert not result.written and reason in result.skipped and not result.paths, (figure.__name__, result)
    assert not out.exists()  # a skipped figure writes nothing

    only_failed = tmp_path / "failed"
    shutil.copytree(golden_runs / "ut_ped2_L3_g0.09_con_failed", only_failed / "ut_ped2_L3_g0.09_con_failed")
    runs = collect_runs(only_failed)
    assert figures.rmse_vs_gamma(runs, out).skipped == "no complete video runs"
    assert figures.layerwise_loss(runs, out).skipped == "no complete runs"
    # a failed run is never a result; only the debugging plot of its multipliers is drawn
    dual = figures.dual_variables(runs, out)
    assert dual.written and "failed" in dual.caption.lower()
    assert_image(dual.paths[0])


# --------------------------------------------------------------------------------------------- the report

def test_report_end_to_end_on_the_golden_folder(golden_report):
    report = (golden_report / "report.md").read_text()
    assert "31 run folders: 28 complete" in report and "1 failed, 2 partial" in report
    assert "ut_ped2_L3_g0.09_con_failed" in report and "NonFiniteLoss" in report
    assert "dust_ped2_L3_g0.09_con_s4" in report and "truncated" in report
    assert "| ut_ped2_L5_g0.11_con | ut · ucsd_ped2 · L=5 · γ_train=0.11 | 0 | 1, 2 |" in report
    assert (GOLDEN / "table3_video_mean_rmse.md").read_text().strip() in report
    for stem in ("fig02_rmse_vs_gamma_test", "fig12_descent_ratios", "dual_variables"):
        assert f"](figures/{stem}.png)" in report
    assert "## Skipped figures\n\nNone" in report


@pytest.mark.slow
def test_report_on_a_real_cutlab_sweep(tmp_path):
    """Tiny real runs through ``python -m cutlab`` (ERM, the paper's dual, another dual), then the report."""
    runs = tmp_path / "runs"
    tiny = ["model=dust", "train.epochs=2", "train.max_steps_per_epoch=2", "train.batch_size=2", "train.epsilon=null",
            "wandb.mode=disabled", "eval.gamma_test=[0,1.0]", "eval.batch_size=16", "data.image_size=32",
            "data.frames=4", "progress=false"]
    cutlab(["-m", "train=erm,constrained_paper", *tiny], runs, timeout=300)
    cutlab(["train=constrained", "train.dual_optimizer=sgd", "train.dual_lr=0.05", *tiny], runs, timeout=300)
    out = tmp_path / "report"
    report = analysis_cli(str(runs), "--out", str(out))
    assert report.returncode == 0, report.stderr
    text = (out / "report.md").read_text()
    assert "3 run folders: 3 complete" in text
    table = pd.read_csv(out / "tables" / "table3_video_mean_rmse.csv")
    assert len(table) == 1  # one cell, its three arms side by side
    for arm in ("constrained", "constrained_paper", "erm"):
        assert table[f"{arm}_mean_rmse"].notna().all(), arm
    # the Feasibility section repeats each record's time to feasibility, the α it meets and in-distribution ratio
    section = text.split("## Feasibility")[1].split("\n## ")[0]
    for summary_path in runs.rglob("summary.json"):
        summary = json.loads(summary_path.read_text())
        strict = summary["steps_to_strict_feasibility"]
        row = next(line for line in section.splitlines() if line.startswith(f"| {summary_path.parent.name} |"))
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[6] == ("never" if strict is None else str(strict)), row
        violations = summary["feasibility"]["relative_violations"][1:]  # the descent constraints l = 1..L
        assert cells[9] == f"{1 - 0.75 * (1 + max(violations)):.3g} (0.25)", row
        assert cells[10] == f"{summary['in_distribution']['max_layer_ratio']:.3g}", row
        # the largest validation violation (over every active slot, l_0 included) with its bootstrap interval over
        # clips, or what the split had where too few clips for one (the generated set: 1 validation clip)
        interval = summary["feasibility"]["violation_interval"]
        every = summary["feasibility"]["relative_violations"]
        layer = max(interval["layers"], key=lambda l: every[l])
        if interval["low"]:
            low, high = (interval[end][interval["layers"].index(layer)] for end in ("low", "high"))
            shown = f"{100 * every[layer]:+.1f} % [{100 * low:+.1f}, {100 * high:+.1f}]"
        else:
            clips = f"{interval['count']} clip{'s' * (interval['count'] != 1)}"  # "1 clip", "2 clips"
            shown = f"{100 * every[layer]:+.1f} % ({clips}: no interval)"
        assert cells[14] == shown.replace("-", "−"), row
    for stem in ("fig02_rmse_vs_gamma_test", "fig07_layerwise_loss", "fig12_descent_ratios", "dual_variables",
                 "constraint_satisfaction"):
        assert_image(out / "figures" / f"{stem}.png")


# --------------------------------------------------------------------------------------------- bad input


def test_missing_and_empty_folders_exit_2(tmp_path, capsys):
    code, err = run_main(str(tmp_path / "nowhere"), "-o", str(tmp_path / "r"), capsys=capsys)  # -o: --out
    assert code == 2 and err.startswith("cutlab-analysis: error: ") and "does not exist" in err and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    code, err = run_main(str(tmp_path / "empty"), "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and "is empty" in err and "python -m cutlab" in err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("no runs here")
    code, err = run_main(str(tmp_path / "junk"), "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and "holds no run records" in err
    code, err = run_main("", "--out", str(tmp_path / "r"), capsys=capsys)  # "$RUNS" unset: it read the current folder
    assert code == 2 and "a runs folder given is empty; pass the folder that holds the run records" in err
    assert not (tmp_path / "r").exists()  # nothing written on bad input


@pytest.mark.slow  # a level no figure draws: test_analysis_marks' test_a_figure_skipped_at_a_gamma_train_... by default
def test_a_gamma_train_no_run_was_trained_at_is_one_line_naming_the_levels(golden_runs, tmp_path, capsys):
    """--gamma-train 7 (or -1, nan) drew every single-level figure empty and skipped it, without a word."""
    code, err = run_main(str(golden_runs), "--out", str(tmp_path / "r"), "--gamma-train", "7", capsys=capsys)
    assert code == 2 and err.startswith("cutlab-analysis: error: --gamma-train 7: no complete run was trained at it; "
                                        "give one of the runs' levels: "), err
    level = err.strip().rpartition(": ")[2].split(", ")[0]
    code, err = run_main(str(golden_runs), "--out", str(tmp_path / "r"), "--gamma-train", level, capsys=capsys)
    assert code == 0, err
    assert f"use γ_train = {level} (chosen with --gamma-train)" in (tmp_path / "r" / "report.md").read_text()


def test_an_empty_out_is_one_line_not_the_current_folder(golden_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --out "$OUT" with OUT unset wrote report.md, tables/ and figures/ here
    code, err = run_main(str(golden_runs), "--out", "", capsys=capsys)
    assert code == 2 and err == ("cutlab-analysis: error: --out is empty; pass a folder for the report, e.g. --out "
                                 "report\n")
    assert not any(tmp_path.iterdir())


def test_an_out_under_a_tilde_is_in_the_home_folder(golden_runs, tmp_path, capsys, monkeypatch):
    """--out=~/report (bash leaves that ~ as typed) made a folder named ~ in the current folder: it is the home's."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "a_file").write_text("kept")
    monkeypatch.chdir(tmp_path)
    code, err = run_main(str(golden_runs), "--out=~/a_file", capsys=capsys)
    assert code == 2 and err == (f"cutlab-analysis: error: --out {tmp_path / 'home' / 'a_file'} is a file; pass a "
                                 "folder for the report (it is created if missing)\n"), err
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("out", ["read_only_mount", "/proc/zz", "/sys/kernel/zz", "under_a_file", "read_only_tables"])
def test_a_report_folder_that_cannot_be_written_is_one_line_before_the_runs_are_read(golden_runs, tmp_path, capsys,
                                                                                       out):
    # it once ended in an OSError, FileNotFoundError or PermissionError traceback once the runs were read
    mount = tmp_path / "mount"
    (mount / "report" / "tables").mkdir(parents=True)  # read_only_tables: a report there before, its tables/ mounted
    (tmp_path / "a_file").write_text("not a folder")
    folder = {"read_only_mount": mount / "new_report", "under_a_file": tmp_path / "a_file" / "report",
              "read_only_tables": mount / "report"}.get(out, Path(out))
    read_only_part = {"read_only_mount": mount, "read_only_tables": mount / "report" / "tables"}.get(out)
    with read_only(read_only_part) if read_only_part else contextlib.nullcontext():
        code, err = run_main(str(golden_runs), "--out", str(folder), capsys=capsys)
        assert read_only_part or not folder.exists()  # nothing written
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"cutlab-analysis: error: cannot write the report to {folder} (") and \
        err.endswith("): pass a writable --out\n"), err
    reason = {"read_only_mount": f"{mount}: read-only file system", "under_a_file": f"{tmp_path / 'a_file'} is a file",
              "read_only_tables": f"{folder / 'tables'}/"}
    assert f"({reason[out]}" in err if out in reason else True, err


def test_messages_name_the_command_typed(tmp_path):
    """Every line names the command as typed, as cutlab-eval's and cutlab-search's do: ``cutlab-analysis: error:``
    from the console script (it once said ``analysis:``), ``analysis: error:`` from ``python -m analysis``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = Path(sys.executable).parent / "cutlab-analysis"  # installed by make setup (pip install -e)
    for command, name in (([str(script)], "cutlab-analysis"), ([sys.executable, "-m", "analysis"], "analysis")):
        missing = subprocess.run([*command, str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert missing.returncode == 2 and missing.stderr.startswith(f"{name}: error: "), missing.stderr
        usage = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert usage.returncode == 2 and usage.stderr.startswith(f"usage: {name} "), usage.stderr
        assert usage.stderr.splitlines()[-1].startswith(f"{name}: error: "), usage.stderr


def test_old_record_format_and_half_written_records(tmp_path, capsys):
    from analysis.collect import collect_runs

    runs = tmp_path / "runs"
    write_run(runs, "old", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, test=15.0,
              selection=15.0, record_version=None)
    write_run(runs, "future", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, test=15.0,
              selection=15.0, record_version=2)
    write_run(runs, "running", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, test=15.0,
              selection=15.0, status="running")
    stopped = write_run(runs, "interrupted", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True,
                        test=15.0, selection=15.0, status="running")
    summary = json.loads((stopped / SUMMARY).read_text())
    (stopped / SUMMARY).write_text(json.dumps({**summary, "status": "interrupted", "error": "KeyboardInterrupt: "}))
    cut = write_run(runs, "cut", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=False, test=15.0,
                    selection=15.0)
    (cut / SUMMARY).write_text((cut / SUMMARY).read_text()[:40])  # a summary cut mid-write
    no_eval = write_run(runs, "no_eval", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=False,
                        test=15.0, selection=15.0)
    (no_eval / EVAL).unlink()
    table = collect_runs(runs).runs.set_index("run")
    assert table.loc["old", "state"] == "unsupported" and "no record_version" in table.loc["old", "problem"]
    assert table.loc["future", "state"] == "unsupported" and "record_version 2" in table.loc["future", "problem"]
    assert table.loc["running", "partial"] and "running" in table.loc["running", "problem"]
    assert table.loc["interrupted", "partial"] and "resume" in table.loc["interrupted", "problem"]
    assert table.loc["cut", "partial"] and "not valid JSON" in table.loc["cut", "problem"]
    assert table.loc["no_eval", "partial"] and "eval.csv missing" in table.loc["no_eval", "problem"]
    assert not table["usable"].any()

    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0  # a report of what is there: nothing counted, everything listed
    assert err.count("cutlab-analysis: warning: ") == 6 and "record_version" in err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "6 run folders: 0 complete" in report and "4 partial, 2 unreadable" in report
    assert "Skipped: no complete video runs" in report


def test_a_history_whose_last_row_was_cut_mid_write_is_partial_not_complete(tmp_path):
    # the row's step number survived the cut, so the run was counted complete with its last step's losses missing
    from analysis.collect import collect_runs

    run = write_run(tmp_path / "runs", "cut_row", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09,
                    constrained=True, test=15.0, selection=15.0)
    history = run / HISTORY
    history.write_bytes(history.read_bytes()[:-20])  # step 6's row, half of it
    table = collect_runs(tmp_path / "runs").runs.set_index("run")
    assert table.loc["cut_row", "partial"] and "lacks training steps 6 of 6" in table.loc["cut_row", "problem"]


def test_a_run_in_another_precision_is_its_own_setting_not_another_seed():
    # best-of-N per cell must not pick a bf16 run over the fp32 one as if it were another seed (precision=...)
    from analysis.selection import select_best

    base = {"task": "video", "model": "dust", "dataset": "ucsd_ped2", "L": 3, "gamma_train": 0.09, "arm": "constrained",
            "gamma_test_grid": (0.0, 1.0), "usable": True, "selection_mode": "min", "verdict": "feasible", "seed": 0}
    runs = pd.DataFrame([{**base, "run": "fp32", "precision": "fp32", "selection_metric": 2.0},
                         {**base, "run": "bf16", "precision": "bf16", "selection_metric": 1.0},
                         {**base, "run": "old", "precision": None, "selection_metric": 3.0}])  # before the key: fp32
    best = select_best(runs)
    assert sorted(best["run"]) == ["bf16", "fp32"]
    assert best.set_index("run").loc["fp32", "n_runs"] == 2


def test_a_run_of_another_budget_is_its_own_row_and_trials_are_named_not_counted_as_seeds():
    # a 400-step run is not a better seed of a 60-step cell; runs that differ in alpha are trials, said so
    from analysis.collect import RunTable
    from analysis.tables import TABLE3, build_table

    base = {"task": "video", "model": "dust", "dataset": "ucsd_ped2", "L": 3, "gamma_train": 0.09, "arm": "constrained",
            "gamma_test_grid": (0.0, 1.0), "usable": True, "selection_mode": "min", "verdict": "feasible", "seed": 0,
            "precision": "fp32", "cfg.train.alpha": 0.25, "cfg.seed": 0, "test_mean_metric": 10.0, "state": "complete"}
    runs = pd.DataFrame([{**base, "run": "short", "steps": 60, "selection_metric": 2.0},
                         {**base, "run": "short_alpha", "steps": 60, "cfg.train.alpha": 0.1, "selection_metric": 2.5},
                         {**base, "run": "short_seed", "steps": 60, "seed": 1, "cfg.seed": 1,
                          "selection_metric": 2.7},
                         {**base, "run": "long", "steps": 400, "selection_metric": 1.0, "test_mean_metric": 8.0},
                         {**base, "run": "erm", "steps": 60, "arm": "erm", "selection_metric": 3.0,
                          "verdict": "unconstrained"}])
    table = build_table(RunTable(runs, pd.DataFrame(), pd.DataFrame()), TABLE3)
    frame = table.frame.set_index("steps")
    assert sorted(frame.index) == [60, 400]
    assert frame.loc[60, "constrained_run"] == "short" and frame.loc[60, "constrained_n_runs"] == 3
    assert frame.loc[400, "constrained_run"] == "long" and frame.loc[400, "erm_n_runs"] == 0
    markdown = table.to_markdown()
    assert "| dust (60 steps) |" in markdown and "| dust (400 steps) |" in markdown
    assert "Trials, not only seeds" in markdown
    assert "dust (60 steps) · ucsd_ped2 · L=3 · γ_train=0.09, constrained: train.alpha ×2" in markdown


def test_runs_on_a_root_other_than_the_shipped_one_are_labelled_with_it_and_keep_the_papers_numbers(tmp_path):
    """data=ucsd_ped2 data.root=mine.npz (one's own video) was labelled plain ``ucsd_ped2`` when all of a report's Ped2
    runs shared that root, and compared with the paper's Ped2 as if it were Ped2. Now the root is named where it is not
    the data set's shipped one under the run's own paths.data_dir (another machine's default is no other root), as
    cutlab-eval names it; the paper's numbers stay beside it (an official UCSDped2 folder is the real Ped2)."""
    import yaml

    from analysis.collect import collect_runs
    from analysis.tables import TABLE3, build_table

    def write(name: str, dataset: str, root: str, data_dir: str, **cell) -> None:
        run = write_run(tmp_path / name, name, model="dust", dataset=dataset, L=3, gamma=0.09, test=15.0,
                        selection=15.0, data={"root": root}, **cell)
        config = yaml.safe_load((run / "config.yaml").read_text())
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "paths": {**config["paths"], "data_dir": data_dir}}))

    for arm in (True, False):
        write(f"mine_{arm}", "ucsd_ped2", "/tmp/myproj/mine.npz", "/data", constrained=arm)
    write("shipped", "ucsd_ped2", "/elsewhere/ucsd_ped2/ped2_gray160_uint8.npz", "/elsewhere", constrained=True)
    write("footage", "video_folder", "/footage/clips", "/data", constrained=True)
    mine = collect_runs(*(tmp_path / f"mine_{arm}" for arm in (True, False)))
    assert set(mine.runs["dataset"]) == {"ucsd_ped2 (root=mine.npz)"}
    assert collect_runs(tmp_path / "shipped").runs["dataset"].tolist() == ["ucsd_ped2"]
    assert collect_runs(tmp_path / "footage").runs["dataset"].tolist() == ["video_folder (root=clips)"]
    row = build_table(mine, TABLE3).frame.iloc[0]
    assert row["dataset"] == "ucsd_ped2 (root=mine.npz)" and row["paper_constrained"] == 14.856


def test_an_ablation_point_never_averages_runs_of_another_budget_as_seeds():
    from analysis.collect import RunTable
    from analysis.figures_metric import ablation_groups

    base = {"task": "video", "model": "dust", "dataset": "ucsd_ped2", "L": 3, "gamma_train": 0.09, "arm": "constrained",
            "constrained": True, "gamma_test_grid": (0.0, 1.0), "usable": True, "precision": "fp32", "dual_lr": 0.1}
    runs = pd.DataFrame([{**base, "run": f"{steps}_{alpha}", "steps": steps, "alpha": alpha}
                         for steps in (60, 400) for alpha in (0.1, 0.2)])
    groups = ablation_groups(RunTable(runs, pd.DataFrame(), pd.DataFrame()), "alpha")
    assert sorted(sorted(group["run"]) for group in groups) == [["400_0.1", "400_0.2"], ["60_0.1", "60_0.2"]]


def test_a_figure_sets_every_arm_of_a_cell_in_one_setting():
    # constrained ran at 60 and 400 steps, ERM at 60 only: the figure compares both at 60, never 400 against 60
    from analysis.figure_kit import _best_per, settings_left_out

    base = {"task": "video", "model": "dust", "dataset": "ucsd_ped2", "L": 3, "gamma_train": 0.09,
            "gamma_test_grid": (0.0, 1.0), "usable": True, "selection_mode": "min", "verdict": "feasible", "seed": 0,
            "precision": "fp32"}
    runs = pd.DataFrame([{**base, "run": "long", "arm": "constrained", "steps": 400, "selection_metric": 1.0},
                         {**base, "run": "short", "arm": "constrained", "steps": 60, "selection_metric": 2.0},
                         {**base, "run": "erm", "arm": "erm", "steps": 60, "selection_metric": 3.0}])
    best = _best_per(runs, ["model", "dataset", "L", "gamma_train"], "validation")
    assert sorted(best["run"]) == ["erm", "short"]
    assert settings_left_out(best) == ""  # every arm is drawn
    # ERM at 2 steps only: no setting has both arms, so the longer training is drawn and the caption names ERM's
    runs = runs[runs["run"] != "short"].assign(steps=[400, 2])
    best = _best_per(runs, ["task", "model", "dataset", "L", "gamma_train"], "validation")
    assert list(best["run"]) == ["long"]
    assert settings_left_out(best) == (" Not drawn, having no run at the setting shown (steps, precision, γ_test grid) "
                                       "beside the other arms: ERM of dust · ucsd_ped2 · L=3 · γ_train=0.09 (2 steps, "
                                       "fp32, 2 γ_test).")


def test_what_tells_panels_apart_leaves_out_a_models_class():
    from analysis.figure_kit import distinguishing

    frame = pd.DataFrame({"cfg.model._target_": ["my_models.Deep", "my_models.Shallow"], "cfg.train.dual_lr": [0.05, 0.1],
                          "cfg.model.name": ["deep", "shallow"]})
    assert distinguishing(frame, frame.iloc[0]) == "dual_lr=0.05"


def test_a_runs_data_label_is_the_same_beside_runs_whose_data_lack_its_keys(tmp_path):
    """Text runs beside video runs (what cutlab-reproduce writes) were labelled ``imdb (max_length=32.0)``: the video
    runs lack the key, and pandas turned the whole numbers beside their NaN into floats."""
    from analysis.collect import collect_runs

    for length in (32, 64):
        write_run(tmp_path / "runs", f"imdb_{length}", model="ut_text", dataset="imdb", L=2, gamma=0.09,
                  constrained=True, test=[0.8] * 6, selection=0.5, data={"max_length": length, "num_labels": 2})
    alone = collect_runs(tmp_path / "runs").runs["dataset"].tolist()
    write_run(tmp_path / "runs", "ped2", model="dust", dataset="ucsd_ped2", L=2, gamma=0.09, constrained=True,
              test=15.0, selection=15.0)
    mixed = collect_runs(tmp_path / "runs").runs.set_index("run")["dataset"]
    assert alone == ["imdb (max_length=32)", "imdb (max_length=64)"]
    assert [mixed[run] for run in ("imdb_32", "imdb_64")] == alone


def test_fig12_says_where_its_gamma_test_is_not_gamma_train_and_gives_the_in_distribution_share():
    """Fig 12 drew gamma_train 0.09 at the grid's nearest point, gamma_test 0 (clean input), under a caption saying
    "in distribution": UT's panels read 0.0 % < 1 where summary.json records 75.3 % at gamma_train."""
    from analysis.figures_layers import not_in_distribution

    run = pd.Series({"gamma_train": 0.09, "fraction_decreasing_id": 0.753})
    assert not_in_distribution(run, 0.0) == (" (nearest γ_train; not in distribution)",
                                             "\n  at γ_train 0.09: 75.3 % < 1")
    assert not_in_distribution(run, 0.09) == ("", "")
    assert not_in_distribution(pd.Series({"gamma_train": 0.09}), 0.0)[1] == ""  # a record without the share


def test_no_two_panel_titles_of_fig12_overlap(golden_runs, tmp_path, monkeypatch):
    """At a gamma_train off the gamma_test grid (0.09 against 0, 0.5, 1, as the cpu-scale runs), each panel's "not
    in distribution" note ran its title into the next panel's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import analysis.figure_kit as figure_kit
    from analysis.collect import collect_runs
    from analysis.figures import descent_ratios

    drawn, save = [], figure_kit._save
    monkeypatch.setattr(figure_kit, "_save", lambda figure, *rest: drawn.append(figure) or save(figure, *rest))
    assert descent_ratios(collect_runs(golden_runs), tmp_path).paths
    renderer = FigureCanvasAgg(drawn[0]).get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in drawn[0].axes if ax.get_visible()]
    assert len(titles) > 1 and "not in distribution" in drawn[0].axes[0].get_title()
    assert not [(i, j) for i, a in enumerate(titles) for j, b in enumerate(titles) if i < j and a.overlaps(b)]


def test_a_phase_after_a_silent_one_speaks_ten_seconds_after_the_analysis_last_said_anything(capsys, monkeypatch):
    """Reading runs for 9 s (no line: under 10 s), then drawing figures: its first line came 10 s after its own start,
    19 s of silence in all; it comes 10 s after the reading began."""
    import cutlab.core.progress as progress
    from analysis.run_folders import quiet_meter

    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    reading = quiet_meter("reading runs", 10, "run")
    for index in range(10):
        now[0] += 0.9
        reading.update(index)
    drawing = quiet_meter("drawing figures", 10, "figure", continues=True)
    now[0] += 1.5  # 10.5 s after the reading began, 1.5 s into the drawing
    drawing.update(1)
    assert capsys.readouterr().err.splitlines() == [
        "cutlab-analysis: drawing figures: 1/10 figures (10%), 1.5 s/figure, 00:01 elapsed, 00:13 left"]
    again = quiet_meter("reading runs", 10, "run")  # a new analysis: its own 10 s
    now[0] += 9.0
    again.update(3)
    assert capsys.readouterr().err == ""


def test_a_long_read_of_runs_and_drawing_of_figures_say_how_far_they_are(golden_runs, tmp_path, capsys, monkeypatch):
    """183 runs took 30 s with nothing said before the last line; a quick pass still says nothing (here every
    update is due, as if each run had taken the 10 s between two lines)."""
    from analysis import run_folders
    from analysis.__main__ import main

    assert main([str(golden_runs), "--out", str(tmp_path / "quiet")]) == 0
    assert "reading runs" not in capsys.readouterr().err
    monkeypatch.setattr(run_folders, "QUIET_EVERY_S", 0.0)
    assert main([str(golden_runs), "--out", str(tmp_path / "report")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any(re.match(r"cutlab-analysis: reading runs: \d+/\d+ runs \(\d+%\), .* elapsed, .* left$", line)
               for line in lines), lines
    assert any(line.startswith("cutlab-analysis: drawing figures: ") for line in lines), lines
