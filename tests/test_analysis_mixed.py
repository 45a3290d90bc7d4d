"""A mixed folder of runs: what one run's row says never depends on which other runs lie beside it, and the tables,
captions and figures say the same of the same runs."""

from __future__ import annotations

import math

from helpers.analysis import write_run

PED2 = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09)


def _table3(*folders):
    from analysis.collect import collect_runs
    from analysis.tables import TABLE3, build_table

    return build_table(collect_runs(*folders), TABLE3).frame.set_index("dataset")


def test_a_run_on_other_data_settings_is_named_so_and_never_set_beside_the_papers_numbers(tmp_path):
    # Ped2 at data.stride=100 (1/10 of its test windows) alone was labelled plain ucsd_ped2 and given the paper's
    # 14.856 and a difference; beside a run at the default stride both read ucsd_ped2 (stride=...) and the real Ped2
    # run lost the paper's columns: a row's label and paper column hung on the other runs in the folder
    for arm in (True, False):
        write_run(tmp_path / "reduced", f"stride100_{arm}", **PED2, constrained=arm, test=29.0, selection=29.0,
                  data={"stride": 100, "frames": 10})
        write_run(tmp_path / "default", f"stride10_{arm}", **PED2, constrained=arm, test=29.0, selection=29.0,
                  data={"stride": 10, "frames": 10})
    alone = _table3(tmp_path / "reduced")
    assert list(alone.index) == ["ucsd_ped2 (stride=100)"]
    assert all(math.isnan(alone.iloc[0][column]) for column in ("paper_constrained", "paper_erm", "diff_constrained"))
    together = _table3(tmp_path / "reduced", tmp_path / "default")
    assert sorted(together.index) == ["ucsd_ped2", "ucsd_ped2 (stride=100)"]
    assert together.loc["ucsd_ped2", "paper_constrained"] == 14.856
    assert together.loc["ucsd_ped2", "diff_erm"] == together.loc["ucsd_ped2", "erm_mean_rmse"] - 14.974
    assert math.isnan(together.loc["ucsd_ped2 (stride=100)", "paper_constrained"])
    assert _table3(tmp_path / "default").loc["ucsd_ped2", "paper_constrained"] == 14.856


def test_a_text_run_on_a_subset_of_the_test_reviews_is_named_so_and_has_no_paper_column(tmp_path):
    # 16 of IMDb's 25 000 test reviews at 32 tokens read plain imdb beside the paper's Table 4 AUC
    from analysis.collect import collect_runs
    from analysis.tables import TABLE4, build_table

    cell = dict(model="ut_text", dataset="imdb", L=3, gamma=0.2, test=[0.9, 0.85, 0.8, 0.7], selection=0.8)
    write_run(tmp_path, "small", **cell, constrained=True,
              data={"max_length": 32, "test_subset": 16, "num_labels": 2, "val_size": 0.1})
    row = build_table(collect_runs(tmp_path), TABLE4).frame.iloc[0]
    assert row["dataset"] == "imdb (max_length=32, test_subset=16)"
    assert math.isnan(row["paper_constrained"]) and math.isnan(row["diff_constrained"])


def test_a_run_repeated_with_the_same_configuration_and_seed_counts_once_in_the_table(tmp_path):
    # one configuration and seed trained into two folders counted as two runs under "runs (c/e)" (said to count
    # seeds and search trials), while the report's Fig 5 caption counted the same run as one seed's repeat
    from analysis.collect import collect_runs
    from analysis.tables import TABLE3, build_table

    cell = dict(model="dust", dataset="synthetic", L=2, gamma=0.09, constrained=True)
    write_run(tmp_path / "runs", "seed0", **cell, seed=0, test=12.0, selection=12.0)
    write_run(tmp_path / "runs", "seed0_again", **cell, seed=0, test=12.0, selection=12.0)
    write_run(tmp_path / "runs", "seed1", **cell, seed=1, test=12.5, selection=12.5)
    write_run(tmp_path / "runs", "alpha0.3", **cell, seed=0, alpha=0.3, test=13.0, selection=13.0)
    table = build_table(collect_runs(tmp_path / "runs"), TABLE3)
    assert table.frame.iloc[0]["constrained_n_runs"] == 3  # seeds 0 and 1, and the α trial: the repeat once
    assert "| dust | synthetic | 2 | 0.09 | 0–1 (3) | 12.000 | — | 3/0 |" in table.to_markdown()
    assert "1 run(s) repeat the configuration and seed of another run of their cell" in table.to_markdown()


def test_the_dual_variables_figure_draws_reported_runs_not_strictly_feasible_first(tmp_path, monkeypatch):
    # six strictly feasible DUST cells filled the six panels by model order, and the table's only † entry (a UT
    # run) was not drawn; the caption said only "1 more runs are not shown"
    from analysis import figures_dual
    from analysis.collect import collect_runs

    for L in (2, 3, 4):
        for gamma in (0.09, 0.2):
            write_run(tmp_path / "runs", f"dust_L{L}_g{gamma}", model="dust", dataset="synthetic", L=L, gamma=gamma,
                      constrained=True, test=12.0, selection=12.0)
    write_run(tmp_path / "runs", "ut_infeasible", model="ut", dataset="synthetic", L=2, gamma=0.09, constrained=True,
              test=11.0, selection=11.0, verdict="infeasible", violated=(2,))
    drawn, title = [], figures_dual.dual_panel_title

    def recorded(frame, run):  # each panel's title names its run
        drawn.append(run["run"])
        return title(frame, run)

    monkeypatch.setattr(figures_dual, "dual_panel_title", recorded)
    result = figures_dual.dual_variables(collect_runs(tmp_path / "runs"), tmp_path / "out")
    assert drawn[0] == "ut_infeasible" and len(drawn) == 6, drawn
    assert "1 more runs are not shown." in result.caption
