"""The paper's column of Tables 3 and 4: every cell the paper has is found, under our names for it."""

from __future__ import annotations

import pytest

from helpers.analysis import write_run


def test_the_text_ut_stands_beside_the_papers_ut_row_of_table_4(tmp_path):
    # model=ut_text is the paper's text UT (Sec. 5, Table 4 row "UT"); its paper column was "—"
    from analysis.collect import collect_runs
    from analysis.tables import TABLE4, build_table

    cell = dict(model="ut_text", dataset="imdb", L=3, gamma=0.2)
    write_run(tmp_path, "con", **cell, constrained=True, test=[0.9, 0.85, 0.8, 0.7], selection=0.8)
    write_run(tmp_path, "erm", **cell, constrained=False, test=[0.9, 0.8, 0.7, 0.6], selection=0.7)
    row = build_table(collect_runs(tmp_path), TABLE4).frame.set_index(["model", "dataset", "L", "gamma_train"])
    row = row.loc[("ut_text", "imdb", 3, 0.2)]
    assert (row["paper_constrained"], row["paper_erm"]) == (pytest.approx(1.719), pytest.approx(1.714))
    assert row["paper_L"] == 3 and row["diff_erm"] == pytest.approx(row["erm_accuracy_auc"] - 1.714)

