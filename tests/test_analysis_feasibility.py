"""The analysis of feasibility: the honest verdict (strict / within slack / infeasible / degenerate) in tables,
report and search report; the paper's dual dynamics as an arm of their own; time to feasibility per run; the
constraint-satisfaction figure; records written before these fields existed.

Run folders are written with test_analysis' writer (cutlab.run.records' own writers and file names), from chosen
numbers. The paper's dual settings are read from conf/train/constrained_paper.yaml, not from the analysis, so a
drift between the two fails here. ``UPDATE_GOLDEN=1`` rewrites tests/golden/table3_dual_arms.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml

from conftest import GOLDEN, ROOT
from helpers.analysis import NEW_DUAL, UPDATE, assert_image, write_run

PAPER_YAML = yaml.safe_load((ROOT / "conf" / "train" / "constrained_paper.yaml").read_text())
PAPER_DUAL = {key: PAPER_YAML[key] for key in ("constraint_form", "dual_optimizer", "dual_update", "dual_restarts",
                                                "detach_prev", "dual_cadence")}
CELL = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09)
# steps_to_strict_feasibility, steps_to_feasibility (None: never), largest in-distribution ratio, per run
EXPECTED = {
    "new_dual": ("never", "4", "0.91", "yes"),
    "new_dual_worse": ("2", "2", "0.8", "yes"),
    "paper_dual": ("never", "never", "1.35", "no"),
    "erm": ("never", "6", "1.02", "no"),
    "old_record": ("?", "?", "?", "?"),
}


def in_distribution(ratio: float) -> dict:
    return {"max_layer_ratio": ratio, "strictly_decreasing": ratio < 1, "fraction_decreasing": 0.9}


def write_feasibility_folder(root):
    """One cell with both constrained arms and ERM; a degenerate cell; a record from before time to feasibility."""
    # cutlab's dual: best on validation is feasible only within its slack (12.3 % on layer 2), a strictly feasible
    # seed is worse on validation; a table that counted the slack as feasibility would show no mark
    write_run(root, "new_dual", **CELL, constrained=True, test=14.0, selection=14.1, train=NEW_DUAL,
              verdict="slack_feasible", slack={2: 0.123}, met_from=(None, 4), in_distribution=in_distribution(0.91))
    write_run(root, "new_dual_worse", **CELL, constrained=True, seed=1, test=13.0, selection=15.0, train=NEW_DUAL,
              met_from=(2, 2), in_distribution=in_distribution(0.8))
    # the paper's dual on the same cell: better on validation than neither, and must not be merged into them
    write_run(root, "paper_dual", **CELL, constrained=True, test=16.0, selection=13.9, train=PAPER_DUAL,
              verdict="infeasible", violated=(1,), met_from=(None, None), in_distribution=in_distribution(1.35))
    write_run(root, "erm", **CELL, constrained=False, test=15.0, selection=15.1, met_from=(None, 6),
              in_distribution=in_distribution(1.02))
    write_run(root, "ut_g0_con", model="ut", dataset="ucsd_ped2", L=3, gamma=0.0, constrained=True, test=20.0,
              selection=20.0, train=NEW_DUAL, verdict="degenerate", met_from=(None, None))
    write_run(root, "old_record", model="dust", dataset="ucsd_ped2", L=5, gamma=0.09, constrained=True, test=14.5,
              selection=14.6)
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from analysis.collect import collect_runs

    return collect_runs(write_feasibility_folder(tmp_path_factory.mktemp("feasibility") / "runs"))


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> str:
    from analysis.report import write_report

    out = tmp_path_factory.mktemp("feasibility_report")
    return write_report(runs, out).path.read_text()


def video_row(runs, model="dust", L=3):
    from analysis.tables import TABLE3, build_table

    table = build_table(runs, TABLE3)
    frame = table.frame.set_index(["model", "L"])
    return table, frame.loc[(model, L)]


def test_the_paper_dual_is_recognised_from_its_recorded_settings(runs):
    from analysis.selection import PAPER_DUAL as ANALYSIS_PAPER_DUAL

    assert ANALYSIS_PAPER_DUAL == PAPER_DUAL
    arms = runs.runs.set_index("run")["arm"]
    assert arms["paper_dual"] == "constrained_paper" and arms["new_dual"] == "constrained"
    assert arms["old_record"] == "constrained"  # a record without the dual keys is not claimed for the paper
    assert arms["erm"] == "erm"


def test_paper_and_new_dual_arms_are_selected_and_shown_separately(runs):
    table, row = video_row(runs)
    # merged, the paper's run (best validation 13.9) would have won the one constrained column
    assert row["constrained_run"] == "new_dual" and row["constrained_mean_rmse"] == 14.0
    assert row["constrained_paper_run"] == "paper_dual" and row["constrained_paper_mean_rmse"] == 16.0
    assert row["erm_mean_rmse"] == 15.0
    assert (row["constrained_n_runs"], row["constrained_paper_n_runs"], row["erm_n_runs"]) == (2, 1, 1)
    assert row["diff_constrained_paper"] == pytest.approx(16.0 - row["paper_constrained"])
    markdown = table.to_markdown()
    assert "| constrained | constrained (paper's dual) | ERM | runs (c/p/e) |" in markdown
    assert "| 14.000 ≈ | 16.000 † | 15.000 | 2/1/1 |" in markdown
    assert "train=constrained_paper" in markdown
    assert r"$\Delta$ constr. (paper's dual)" in table.to_latex()


def test_feasible_first_chooses_a_strictly_feasible_seed_over_a_better_validation_score(runs, tmp_path, capsys):
    """By validation (the paper) the slack-feasible seed wins; feasible-first takes the strictly feasible one."""
    import dataclasses

    from analysis.selection import select_best
    from analysis.tables import TABLE3, build_table
    from helpers.analysis import run_main

    table = build_table(dataclasses.replace(runs, selection="feasible-first"), TABLE3)
    row = table.frame.set_index(["model", "L"]).loc[("dust", 3)]
    assert row["constrained_run"] == "new_dual_worse" and row["constrained_verdict"] == "feasible"
    assert row["constrained_mean_rmse"] == 13.0 and row["constrained_n_runs"] == 2
    # a lone run, or ERM (no verdict to rank), is chosen the same way under either rule
    assert (row["constrained_paper_run"], row["erm_run"]) == ("paper_dual", "erm")
    notes = "\n".join(table.notes)
    assert "the run chosen feasible-first (strictly feasible, then slack-feasible, then the rest" in notes
    assert "--select feasible-first" in notes
    # slack-feasible ranks before infeasible whatever their validation scores
    both = runs.runs[runs.runs["run"].isin(["new_dual", "paper_dual"])].assign(arm="constrained")
    assert select_best(both, rule="feasible-first")["run"].tolist() == ["new_dual"]
    assert select_best(both)["run"].tolist() == ["paper_dual"]  # validation 13.9 < 14.1
    with pytest.raises(ValueError, match="unknown selection rule 'best'"):
        select_best(both, rule="best")

    code, err = run_main(str(runs.folders[0]), "--out", str(tmp_path / "r"), "--select", "feasible-first",
                         capsys=capsys)
    text = (tmp_path / "r" / "report.md").read_text()
    assert code == 0 and "Selection (`--select feasible-first`): tables and figures show" in text
    assert "| 13.000 | 16.000 † | 15.000 | 2/1/1 |" in text
    # every figure that shows one run per arm says how it was chosen
    assert "layer l (l = 0: before the first block) for the run chosen feasible-first (" in text
    assert "Per depth and arm: the run chosen feasible-first (" in text


def test_slack_feasible_is_marked_and_never_counted_as_feasible(runs, report):
    table, row = video_row(runs)
    assert row["constrained_verdict"] == "slack_feasible"
    notes = "\n".join(table.notes)
    assert "≈ the selected run is **feasible only within its resilience slack, not strictly" in notes
    assert "dust · ucsd_ped2 · L=3 · γ_train=0.09, constrained: 12.3 %" in notes
    assert r"$^\approx$" in table.to_latex()
    # strictly feasible: new_dual_worse and old_record; new_dual is counted apart
    assert "6 complete (2 strictly feasible, 1 slack-feasible, 1 infeasible, 1 degenerate, 1 ERM)" in report
    assert "| video | dust | ucsd_ped2 | 3 | 1 | 1 |" in report  # constrained / paper's dual / ERM counts


def test_degenerate_cell_gets_its_own_note(runs, report):
    table, row = video_row(runs, model="ut")
    assert row["constrained_verdict"] == "degenerate"
    assert "20.000 ∅" in table.to_markdown()
    assert any(note.startswith("∅ degenerate: no descent possible: Φ_{l−1} already equals the target")
               for note in table.notes)
    assert "∅ degenerate: no descent possible" in report.split("## Feasibility")[1]


def test_infeasible_runs_say_whether_their_chain_of_constraints_asks_below_anything_reached(tmp_path):
    from analysis.collect import collect_runs
    from analysis.report import write_report

    # gamma_train 0.5 is on the grid, so eval.csv has validation rows there, as cutlab writes them
    cell = dict(model="ut", dataset="ucsd_ped2", L=3, gamma=0.5)
    write_run(tmp_path / "runs", "erm", **cell, constrained=False, test=10.0, selection=10.0)
    # epsilon 40 (the writer's summary): alpha 0.9 allows l_3 <= 40 * 0.1^3 = 0.04, alpha 0.25 allows 16.875
    write_run(tmp_path / "runs", "steep", **cell, constrained=True, alpha=0.9, test=14.0, selection=14.0,
              verdict="infeasible", violated=(1, 2, 3))
    write_run(tmp_path / "runs", "gentle", **cell, constrained=True, seed=1, test=14.0, selection=14.0,
              verdict="infeasible", violated=(2,))
    report = write_report(collect_runs(tmp_path / "runs"), tmp_path / "out").path.read_text()
    section = report.split("## Runs that ended infeasible")[1].split("\n## ")[0]
    rows = {cells[0].strip(): [c.strip() for c in cells] for cells in
            (line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ") and "---" not in line)}
    reached = lambda rmse: f"{1280 * (rmse / 255) ** 2:.4g}"  # noqa: E731  the writer's loss at the last layer
    assert rows["steep"][-3:] == [reached(14.0), "0.04 ‡", reached(10.0)]  # ERM reached 1.968: the bound is below it
    assert rows["gentle"][-3:] == [reached(14.0), "16.88", reached(10.0)]
    assert "‡ 1 of 2 ask for a last-layer loss below the lowest that any run in this report reached" in section


def test_with_no_infeasible_run_the_report_still_says_which_are_not_strictly_feasible(tmp_path):
    from analysis.collect import collect_runs
    from analysis.report import write_report

    write_run(tmp_path / "runs", "slack", **CELL, constrained=True, test=14.0, selection=14.1, train=NEW_DUAL,
              verdict="slack_feasible", slack={2: 0.123})
    write_run(tmp_path / "runs", "ut_g0", model="ut", dataset="ucsd_ped2", L=3, gamma=0.0, constrained=True,
              test=20.0, selection=20.0, train=NEW_DUAL, verdict="degenerate")
    report = write_report(collect_runs(tmp_path / "runs"), tmp_path / "out").path.read_text()
    section = report.split("## Runs that ended infeasible")[1].split("\n## ")[0]
    assert "every complete constrained run" not in section.replace("not every complete constrained run", "")
    assert "1 slack-feasible" in section and "1 degenerate" in section and "neither is counted as feasible" in section


def feasibility_rows(report: str) -> dict[str, list[str]]:
    section = report.split("## Feasibility")[1].split("\n## ")[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    return {cells[0].strip(): dict(zip([h.strip() for h in header], [c.strip() for c in cells])) for cells in body}


def test_feasibility_section_lists_time_to_feasibility_and_in_distribution_ratio(report):
    rows = feasibility_rows(report)
    assert set(rows) == {"new_dual", "new_dual_worse", "paper_dual", "erm", "ut_g0_con", "old_record"}
    for run, (strict, within, ratio, descends) in EXPECTED.items():
        row = rows[run]
        shown = (row["steps to strict feasibility"], row["steps to feasibility (within slack)"],
                 row["max ℓ_l / ℓ_{l−1} in distribution"], row["descends"])
        assert shown == (strict, within, ratio, descends), run
    assert rows["new_dual"]["verdict"] == "slack-feasible ≈" and rows["new_dual"]["slack used"] == "12.3 %"
    # layer 2 misses its bound 0.75 l_1 by 12.3 %: its ratio is 0.75 * 1.123, so it meets alpha up to 0.158
    assert rows["new_dual"]["α met on validation (given)"] == "0.158 (0.25)"
    assert rows["erm"]["α met on validation (given)"] == "?"  # its record holds no relative violations
    assert rows["paper_dual"]["arm"] == "constrained (paper's dual)"
    assert rows["paper_dual"]["dual setting"] == "difference · adam lr=0.01 · simultaneous · resilience slack"
    assert rows["new_dual"]["dual setting"] == "ratio · sgd lr=0.01 · simultaneous · resilience slack"
    assert rows["old_record"]["dual setting"] == "? · ? lr=0.01 · ? · resilience slack"


def test_constraint_satisfaction_figure(runs, tmp_path):
    from analysis import figures

    curves, counts = figures.satisfaction_by_setting(runs)
    new = "ratio · sgd lr=0.01 · simultaneous · resilience slack"
    assert counts[new] == 3 and counts["ERM (no dual)"] == 1 and "? · ? lr=0.01 · ? · resilience slack" not in counts
    # new_dual met within slack from step 4, never strictly; new_dual_worse from step 2; ut_g0_con never
    assert curves[new].loc[3].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert curves[new].loc[4].tolist() == pytest.approx([1 / 3, 2 / 3])
    result = figures.constraint_satisfaction(runs, tmp_path)
    assert result.written and [p.name for p in result.paths] == ["constraint_satisfaction.png",
                                                                  "constraint_satisfaction.pdf"]
    assert_image(result.paths[0])
    assert "constraint_satisfaction" in figures.STEMS


def test_old_records_are_analysed_with_unknown_fields(tmp_path):
    """Records from before this change (no dual keys, no time to feasibility, no constraints_met): no crash."""
    from analysis import figures
    from analysis.collect import collect_runs
    from analysis.report import write_report

    root = tmp_path / "runs"
    write_run(root, "old_con", **CELL, constrained=True, test=14.0, selection=14.1)
    write_run(root, "old_erm", **CELL, constrained=False, test=15.0, selection=15.1)
    runs = collect_runs(root)
    old = runs.run("old_con")
    assert old["arm"] == "constrained" and not old["has_time_to_feasibility"]
    assert pd.isna(old["max_layer_ratio_id"]) and old["slack_layers"] == ()
    skipped = figures.constraint_satisfaction(runs, tmp_path / "figures")
    assert not skipped.written and "constraints_met_strictly" in skipped.skipped
    text = write_report(runs, tmp_path / "report").path.read_text()
    assert feasibility_rows(text)["old_con"]["steps to strict feasibility"] == "?"
    assert "- **Constraint satisfaction over training per dual setting**: no complete run" in text


def test_search_report_says_when_the_best_trial_is_only_slack_feasible(runs):
    from cutlab.search.report import arm_report, format_report

    study = optuna.create_study(direction="minimize")
    for value, run in ((14.1, "new_dual"), (15.0, "new_dual_worse"), (16.2, "paper_dual")):
        path = runs.run(run)["path"]
        study.add_trial(optuna.trial.create_trial(value=value, params={}, distributions={},
                                                  user_attrs={"run_dir": path, "seed": 0}))
    entry = arm_report(study, Path(runs.run("new_dual")["path"]).parent)  # the study's folder holds its trials
    assert entry["best"]["verdict"] == "slack_feasible" and entry["best"]["slack_layers"] == [2]
    assert {k: v for k, v in entry["verdicts"].items() if v} == {"feasible": 1, "slack_feasible": 1, "infeasible": 1}
    text = format_report({"search": entry})
    assert "1 feasible, 1 slack_feasible, 1 infeasible" in text
    assert "slack_feasible (not strictly feasible: layers 2 only within their slack)" in text


def test_verdict_names_are_cutlabs(runs):
    from analysis import verdicts
    from cutlab.core import evaluation

    for name in ("STRICTLY_FEASIBLE", "SLACK_FEASIBLE", "INFEASIBLE", "DEGENERATE", "UNCONSTRAINED"):
        assert getattr(verdicts, name) == getattr(evaluation, name)


def test_the_count_line_counts_every_verdict_and_the_runs_without_one():
    """Every verdict gets its count, zeros included, and runs whose record holds no verdict (or one the analysis
    does not know) are counted too, so the counts add up to the runs."""
    from analysis.verdicts import count_line

    verdicts = pd.Series(["feasible", "infeasible", "feasible", None, "unconstrained", "a_future_verdict"])
    assert count_line(verdicts) == ("2 strictly feasible, 0 slack-feasible, 1 infeasible, 0 degenerate, 1 ERM, "
                                    "2 without a verdict (an older record)")
    assert count_line(pd.Series(["slack_feasible"])) == "0 strictly feasible, 1 slack-feasible, 0 infeasible, " \
        "0 degenerate, 0 ERM"


def test_dual_arms_table_matches_golden_file(runs):
    table, _ = video_row(runs)
    golden = GOLDEN / "table3_dual_arms.md"
    if UPDATE:
        golden.write_text(table.to_markdown())
    assert table.to_markdown() == golden.read_text(), f"{golden} differs (UPDATE_GOLDEN=1 rewrites it)"


def test_detaching_only_l0_is_a_dual_setting_of_its_own(tmp_path):
    """train.detach_prev=first (a string where the other values are booleans) is read, kept and named."""
    from analysis.collect import collect_runs
    from analysis.selection import dual_setting_label

    root = tmp_path / "runs"
    write_run(root, "first", **CELL, constrained=True, test=14.0, selection=14.1,
              train={**NEW_DUAL, "detach_prev": "first"})
    write_run(root, "all", **CELL, constrained=True, seed=1, test=14.0, selection=14.1, train=NEW_DUAL)
    runs = collect_runs(root)
    first, every = runs.run("first"), runs.run("all")
    assert first["usable"] and first["detach_prev"] == "first"
    assert "detach_prev=first" in dual_setting_label(first)
    assert dual_setting_label(every) != dual_setting_label(first)


@pytest.mark.parametrize(("gradient", "label"), [("block", "block-local g_l"), ("layerwise", "block-local g_l and l_L")])
def test_each_constraint_gradient_is_read_and_named(tmp_path, gradient, label):
    from analysis.collect import collect_runs
    from analysis.selection import dual_setting_label

    root = tmp_path / "runs"
    write_run(root, gradient, **CELL, constrained=True, test=14.0, selection=14.1,
              train={**NEW_DUAL, "constraint_gradient": gradient})
    run = collect_runs(root).run(gradient)
    assert run["usable"] and run["constraint_gradient"] == gradient
    assert label in dual_setting_label(run).split(" · ")


def test_the_augmented_lagrangian_is_a_dual_setting_and_never_the_papers(tmp_path):
    """train.penalty > 0 on the paper's dual is another method: its own arm and label; 0 (or a record from before the
    key) stays the paper's."""
    from analysis.collect import collect_runs
    from analysis.selection import dual_setting_label

    root = tmp_path / "runs"
    write_run(root, "augmented", **CELL, constrained=True, test=14.0, selection=14.1,
              train={**PAPER_DUAL, "penalty": 10.0})
    write_run(root, "paper", **CELL, constrained=True, seed=1, test=14.0, selection=14.1,
              train={**PAPER_DUAL, "penalty": 0.0})
    write_run(root, "older", **CELL, constrained=True, seed=2, test=14.0, selection=14.1, train=PAPER_DUAL)
    runs = collect_runs(root)
    augmented = runs.run("augmented")
    assert augmented["arm"] == "constrained" and "augmented rho=10" in dual_setting_label(augmented).split(" · ")
    for name in ("paper", "older"):
        assert runs.run(name)["arm"] == "constrained_paper"
        assert "augmented" not in dual_setting_label(runs.run(name))


def test_a_dual_step_per_epoch_is_a_dual_setting_and_never_the_papers(tmp_path):
    """train=constrained_paper train.dual_cadence=epoch (one dual step on each epoch's mean constraint values) is not
    the paper's Algorithm 1, which steps the multipliers every batch; it was counted and captioned as the paper's
    dual, and drawn as one line with it in the constraint-satisfaction figure."""
    from analysis.collect import collect_runs
    from analysis.selection import dual_setting_label

    root = tmp_path / "runs"
    write_run(root, "per_epoch", **CELL, constrained=True, test=14.0, selection=14.1,
              train={**PAPER_DUAL, "dual_cadence": "epoch"})
    write_run(root, "paper", **CELL, constrained=True, seed=1, test=14.0, selection=14.1, train=PAPER_DUAL)
    runs = collect_runs(root)
    per_epoch, paper = runs.run("per_epoch"), runs.run("paper")
    assert (per_epoch["arm"], paper["arm"]) == ("constrained", "constrained_paper")
    assert dual_setting_label(per_epoch) == dual_setting_label(paper).replace(
        "simultaneous", "simultaneous · a dual step per epoch")


def test_the_studys_median_time_to_feasibility_counts_the_cells_that_never_got_there():
    """On the committed cpu-scale records, where most settings got there in only some cells: each setting's count
    of cells that got there is the records', and a median over cells of which half or more never got there is
    never (inf), not the step of the cells that did."""
    from analysis.collect import collect_runs
    from analysis.feasibility_study import rank_settings
    from analysis.selection import DUAL_SETTING_KEYS

    runs = collect_runs(ROOT / "benchmarks" / "feasibility_study" / "reproduce_cpu" / "runs").runs
    table = rank_settings(runs)
    keys = [key for key in DUAL_SETTING_KEYS if key in table.columns]
    constrained = runs[runs["usable"] & (runs["constrained"] == True)]  # noqa: E712
    for _, row in table.iterrows():
        same = constrained[(constrained[keys].astype(str) == row[keys].astype(str)).all(axis=1)]
        reached = same["steps_to_strict_feasibility"].dropna()
        assert len(same) == row["cells"] and row["reached_feasibility"] == len(reached)
        if 2 * len(reached) <= len(same):
            assert row["median_steps_to_feasibility"] == float("inf")
    assert (2 * table["reached_feasibility"] <= table["cells"]).any()


def test_runs_on_other_data_settings_are_other_cells_never_seeds_of_one(tmp_path):
    """Two folders of footage (both called clips/) and a record from before data.root existed: three cells, each
    named by what tells it apart, and the run better on validation does not stand for the others' footage."""
    from analysis.collect import collect_runs
    from analysis.report import write_report

    cell = dict(model="dust", dataset="video_folder", L=3, gamma=0.09, constrained=False)
    write_run(tmp_path / "runs", "a", **cell, test=10.0, selection=10.0, data={"root": "/footage/a/clips", "frames": 10})
    write_run(tmp_path / "runs", "b", **cell, test=12.0, selection=9.0, data={"root": "/footage/b/clips", "frames": 10})
    write_run(tmp_path / "runs", "older", **cell, test=11.0, selection=11.0, data={"frames": 10})
    runs = collect_runs(tmp_path / "runs")
    labels = dict(zip(runs.runs["run"], runs.runs["dataset"]))
    assert labels == {"a": "video_folder (root=/footage/a/clips)", "b": "video_folder (root=/footage/b/clips)",
                      "older": "video_folder"}
    report = write_report(runs, tmp_path / "out").path.read_text()
    assert "| dust | video_folder (root=/footage/a/clips) | 3 | 0.09 |" in report and "10.000" in report


def test_the_layerwise_figure_keeps_three_arms_legends_apart(tmp_path):
    # three panels side by side, three arms each (the paper's dual's long label among them): legends in two columns
    # ran into their neighbours' and matplotlib gave up the layout ("axes sizes collapsed to zero")
    import warnings

    from analysis.collect import collect_runs
    from analysis.figures_layers import layerwise_loss

    for depth in (3, 5, 7):
        cell = {**CELL, "L": depth}
        write_run(tmp_path / "runs", f"new_L{depth}", **cell, constrained=True, test=14.0, selection=14.1,
                  train=NEW_DUAL, verdict="infeasible", violated=(1,))
        write_run(tmp_path / "runs", f"paper_L{depth}", **cell, constrained=True, test=16.0, selection=13.9,
                  train=PAPER_DUAL, verdict="slack_feasible", slack={1: 0.1})
        write_run(tmp_path / "runs", f"erm_L{depth}", **cell, constrained=False, test=15.0, selection=15.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = layerwise_loss(collect_runs(tmp_path / "runs"), tmp_path / "figures", gamma_train=0.09)
    assert result.written, result.skipped


def test_fig3s_marks_of_two_arms_at_one_point_do_not_overprint(tmp_path, monkeypatch):
    # the new dual's † and the paper's dual's ≈ at the same depth and nearly the same RMSE were drawn on one spot
    import analysis.figures_metric as figures_metric
    from analysis.collect import collect_runs

    drawn = []
    monkeypatch.setattr(figures_metric, "_render", lambda draw, out_dir, result: drawn.append(draw()) or result)
    for depth in (3, 5):
        cell = {**CELL, "L": depth}
        write_run(tmp_path / "runs", f"new_L{depth}", **cell, constrained=True, test=14.0, selection=14.1,
                  train=NEW_DUAL, verdict="infeasible", violated=(1,))
        write_run(tmp_path / "runs", f"paper_L{depth}", **cell, constrained=True, test=14.0, selection=13.9,
                  train=PAPER_DUAL, verdict="slack_feasible", slack={1: 0.1})
    figures_metric.rmse_vs_depth(collect_runs(tmp_path / "runs"), tmp_path / "figures", gamma_train=0.09)
    figure = drawn[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()
    for ax in figure.axes:
        boxes = [text.get_window_extent(renderer) for text in ax.texts]
        assert len(boxes) == 4, [text.get_text() for text in ax.texts]  # † and ≈ at each of the two depths
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_constraint_satisfaction_draws_a_row_per_task(tmp_path):
    # video and text budgets differ tenfold in steps: on one axis the shorter runs were a sliver at its left
    from analysis.collect import collect_runs
    from analysis.figures_dual import constraint_satisfaction

    write_run(tmp_path / "runs", "video", **CELL, constrained=True, test=14.0, selection=14.1, train=NEW_DUAL,
              met_from=(2, 2))
    write_run(tmp_path / "runs", "text", model="hf_encoder", dataset="imdb", L=6, gamma=0.4, constrained=True,
              test=[0.9, 0.85, 0.8, 0.7], selection=0.8, train=NEW_DUAL, met_from=(4, 4))
    result = constraint_satisfaction(collect_runs(tmp_path / "runs"), tmp_path / "figures")
    assert result.written, result.skipped
    from matplotlib.image import imread

    height = imread(result.paths[0]).shape[0]
    assert height > 2 * 3.0 * 170, height  # two rows of panels (3 inches each at 170 dpi), not one


@pytest.mark.parametrize("package", ["analysis", "cutlab_analysis"])
def test_the_ranking_names_itself_as_typed(tmp_path, package):
    """Installed, python -m cutlab_analysis.feasibility_study called itself analysis.feasibility_study, a module that
    is not there outside a checkout."""
    result = subprocess.run([sys.executable, "-m", f"{package}.feasibility_study", str(tmp_path / "missing")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith(f"{package}.feasibility_study: error: "), result.stderr


def test_the_rankings_out_is_refused_in_one_line_where_it_cannot_take_the_table(tmp_path, capsys):
    """--out '' (an unset variable) printed the table and wrote nothing, exit 0; a folder, or a file in a folder that
    is not there, ended in a traceback (IsADirectoryError, OSError) and exit 1, after the runs were read. Each is one
    line naming the fix and exit 2, as the command's other refusals; a link at --out is replaced, its target kept."""
    from analysis.feasibility_study import main

    runs = str(ROOT / "benchmarks" / "feasibility_study" / "block_nupi")
    (tmp_path / "a file").write_text("kept")
    through_a_file = tmp_path / "a file" / "t.csv"
    for out, said in (("", "--out is empty; pass a file for the table, e.g. --out study.csv"),
                      (" ", "--out is empty; pass a file for the table, e.g. --out study.csv"),
                      (str(tmp_path), f"--out {tmp_path} is a folder; pass a file for the table, e.g. --out "
                                      f"{tmp_path / 'study.csv'}"),
                      (str(through_a_file), f"cannot write the table to {through_a_file} ({through_a_file.parent} "
                                            "is a file): pass a writable --out")):
        assert main([runs, "--out", out]) == 2, out
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", f"analysis.feasibility_study: error: {said}\n"), captured
    assert (tmp_path / "a file").read_text() == "kept"
    (tmp_path / "table.csv").symlink_to(tmp_path / "a file")
    assert main([runs, "--out", str(tmp_path / "new" / "table.csv")]) == 0  # its folder is made
    assert main([runs, "--out", str(tmp_path / "table.csv")]) == 0
    assert (tmp_path / "a file").read_text() == "kept" and not (tmp_path / "table.csv").is_symlink()
    assert pd.read_csv(tmp_path / "table.csv").equals(pd.read_csv(tmp_path / "new" / "table.csv"))


def test_a_constrained_run_is_ranked_against_its_cells_best_erm_run_in_its_own_setting(tmp_path):
    """The ranking took the lowest ERM validation metric of a cell over every grid and budget: a text cell's worst
    ERM seed (accuracy: higher is better), and a video cell's ERM run of another budget."""
    from analysis.collect import collect_runs
    from analysis.feasibility_study import rank_settings

    text = dict(model="ut_text", dataset="imdb", L=2, gamma=0.4)
    write_run(tmp_path / "text", "erm_s0", **text, constrained=False, test=0.6, selection=0.6)
    write_run(tmp_path / "text", "erm_s1", **text, constrained=False, test=0.8, selection=0.8, seed=1)
    write_run(tmp_path / "text", "con", **text, constrained=True, test=0.7, selection=0.7, verdict="feasible")
    row = rank_settings(collect_runs(tmp_path / "text").runs).iloc[0]
    assert row["val_vs_erm"] == pytest.approx(0.8 / 0.7) and row["better_than_erm"] == 0

    video = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09)
    long = write_run(tmp_path / "video", "erm_long", **video, constrained=False, test=8.0, selection=8.0)
    summary = json.loads((long / "summary.json").read_text())
    (long / "summary.json").write_text(json.dumps({**summary, "steps": 400}))  # another budget: another cell
    write_run(tmp_path / "video", "erm", **video, constrained=False, test=12.0, selection=12.0)
    write_run(tmp_path / "video", "con", **video, constrained=True, test=11.0, selection=11.0, verdict="feasible")
    row = rank_settings(collect_runs(tmp_path / "video").runs).iloc[0]
    assert row["val_vs_erm"] == pytest.approx(11.0 / 12.0) and row["better_than_erm"] == 1


def test_the_rankings_out_under_a_tilde_is_written_in_the_home_folder(tmp_path, monkeypatch, capsys):
    """--out=~/study.csv (bash leaves that ~ as typed) made a folder named ~ in the current folder and wrote there."""
    from analysis.feasibility_study import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main([str(ROOT / "benchmarks" / "feasibility_study" / "block_nupi"), "--out=~/study.csv"]) == 0
    assert (tmp_path / "home" / "study.csv").is_file() and not (tmp_path / "~").exists()
