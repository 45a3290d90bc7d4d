"""What the figures and tables say of themselves: Fig 3's marks of runs that are not strictly feasible (as Fig 2's),
the γ_train a figure skipped at, and the command named at the head of each LaTeX table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.lines import Line2D

from helpers.analysis import run_main, write_run

CONSTRAINED = "#0072B2"  # analysis.figure_kit.ARM_STYLE["constrained"]


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures drawn, as they were saved."""
    import analysis.figure_kit as figure_kit

    figures, save = [], figure_kit._save
    monkeypatch.setattr(figure_kit, "_save", lambda figure, *rest: figures.append(figure) or save(figure, *rest))
    return figures


def depth_runs(root: Path) -> Path:
    """Constrained and ERM at L = 2, 3, 4 of one cell; the constrained run at L = 4 infeasible."""
    cell = dict(model="dust", dataset="synthetic", gamma=0.09)
    for depth in (2, 3, 4):
        write_run(root, f"con_L{depth}", **cell, L=depth, constrained=True, test=14.0 - depth, selection=14.0,
                  verdict="infeasible" if depth == 4 else None, violated=(2,) if depth == 4 else ())
        write_run(root, f"erm_L{depth}", **cell, L=depth, constrained=False, test=15.0 - depth, selection=15.0)
    write_run(root, "text_erm", model="ut_text", dataset="imdb", L=2, gamma=0.4, constrained=False,
              test=[0.8, 0.7, 0.6, 0.5], selection=0.7)  # the only run at γ_train 0.4
    return root


def segments(ax, colour: str) -> dict[tuple[float, float], list[Line2D]]:
    """Each pair of neighbouring depths the lines of ``colour`` join, with the lines joining them."""
    joined: dict[tuple[float, float], list[Line2D]] = {}
    for line in ax.lines:
        if line.get_color() == colour and line.get_linestyle() != "None":
            x = [float(v) for v in line.get_xdata()]
            for pair in zip(x, x[1:]):
                joined.setdefault(pair, []).append(line)
    return joined


def test_fig3_draws_a_segment_through_a_not_feasible_run_dotted_hollow_and_marked_in_the_legend(tmp_path, drawn):
    """Fig 3 drew the constrained line through an infeasible (†) run solid, its legend without the mark, while its
    caption says such runs are drawn dotted with hollow markers (as Fig 2 does)."""
    from analysis.collect import collect_runs
    from analysis.figure_marks import NOT_FEASIBLE_LINE
    from analysis.figures import rmse_vs_depth

    dotted = Line2D([], [], **NOT_FEASIBLE_LINE)._unscaled_dash_pattern  # Fig 2's not-feasible line
    result = rmse_vs_depth(collect_runs(depth_runs(tmp_path / "runs")), tmp_path / "fig")
    assert result.written, result.skipped
    axes = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert len(axes) == 3  # lowest γ_test, mean over the grid, highest
    for ax in axes:
        joined = segments(ax, CONSTRAINED)
        assert {line.get_linestyle() for line in joined[(2.0, 3.0)]} == {"-"}  # feasible at both ends: solid
        assert joined[(3.0, 4.0)] and all(line._unscaled_dash_pattern == dotted for line in joined[(3.0, 4.0)])
        faces = {}  # the face seen at each depth: the last marker drawn there
        for line in ax.lines:
            if line.get_color() == CONSTRAINED and line.get_marker() not in (None, "None", ""):
                faces.update({float(x): line.get_markerfacecolor() for x in line.get_xdata()})
        assert faces[4.0] == "white" and faces[2.0] != "white" and faces[3.0] != "white"
        legend = {text.get_text(): handle for text, handle in
                  zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)}
        assert legend["constrained"].get_linestyle() == "-"
        assert legend["constrained †"]._unscaled_dash_pattern == dotted
        assert legend["constrained †"].get_markerfacecolor() == "white"
        assert {line.get_linestyle() for lines in segments(ax, "#D55E00").values() for line in lines} == {"--"}


def test_a_figure_skipped_at_a_gamma_train_says_the_level(tmp_path):
    """At --gamma-train 0.4, where only a text run was trained, Fig 3 said "no complete video runs" (and Fig 12 "no
    complete constrained run ...") though video runs exist at another level; Fig 2 says the level."""
    from analysis import figures
    from analysis.collect import collect_runs

    runs, out = collect_runs(depth_runs(tmp_path / "runs")), tmp_path / "fig"
    assert figures.rmse_vs_gamma(runs, out, gamma_train=0.4).skipped == "no complete video runs at γ_train = 0.4"
    assert figures.rmse_vs_depth(runs, out, gamma_train=0.4).skipped == "no complete video runs at γ_train = 0.4"
    assert figures.descent_ratios(runs, out, gamma_train=0.4).skipped == (
        "no complete constrained run at γ_train = 0.4 with a readable sample_losses.csv")
    assert not out.exists()


@pytest.mark.slow  # the .tex files' text: test_latex_text_holding_a_users_special_characters_is_escaped runs by default
def test_a_latex_table_names_the_command_that_wrote_it(tmp_path, capsys):
    """Every tables/*.tex began "(generated by `python -m analysis`)", a command an installed wheel lacks."""
    from analysis.collect import collect_runs
    from analysis.report import write_report
    from analysis.tables import build_tables

    runs = depth_runs(tmp_path / "runs")
    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0, err
    command = f"cutlab-analysis {runs} --out {tmp_path / 'report'}"
    for stem in ("table3_video_mean_rmse", "table4_text_accuracy_auc"):
        head = (tmp_path / "report" / "tables" / f"{stem}.tex").read_text().splitlines()[0]
        assert head.endswith(f"(generated by `{command}`)"), head
    assert f"by `{command}`" in (tmp_path / "report" / "report.md").read_text()  # as the report's header names it

    write_report(collect_runs(runs), tmp_path / "api")  # no command line: the analysis cutlab-analysis is
    head = (tmp_path / "api" / "tables" / "table3_video_mean_rmse.tex").read_text().splitlines()[0]
    assert head.endswith("(generated by `cutlab-analysis`)"), head
    # a folder named with a line break: the comment stays one line
    latex = build_tables(collect_runs(runs))[0].to_latex("cutlab-analysis 'a\nb' --out r")
    assert latex.splitlines()[0].endswith("(generated by `cutlab-analysis 'a b' --out r`)")


def test_latex_text_holding_a_users_special_characters_is_escaped():
    """A data root or folder named 'ped2 $5-#9 {a}~^\\.npz' went into a table's .tex as LaTeX: it did not compile."""
    from analysis.tables import tex

    assert tex(r"root=ped2 $5-#9 {a}~^\x.npz") == \
        r"root=ped2 \$5-\#9 \{a\}\textasciitilde{}\textasciicircum{}\textbackslash{}x.npz"
    assert tex("γ_train ∈ {0, 0.09} **bold** Φ_{l−1} 5%") == \
        r"$\gamma_\mathrm{train}$ $\in$ \{0, 0.09\} \textbf{bold} $\Phi_{l-1}$ 5\%"


def test_an_entry_whose_test_verdict_is_another_than_its_validation_verdict_is_marked_and_its_test_miss_said(
        tmp_path, capsys):
    """DUST L = 7 at γ 0.09 in the cpu re-run: strictly feasible on Ped2's 2 validation clips, infeasible on test
    (+4.6 % at layer 5, interval [+1.0, +7.9]); the table showed it plain, as feasible as the cells that hold on
    test."""
    runs = tmp_path / "runs"
    misses = {"test_verdict": "infeasible", "test_relative_violations": [-0.5, -0.2, 0.046],
              "test_violation_interval": {"count": 12, "resampled": "clip", "layers": [0, 1, 2],
                                          "low": [-0.6, -0.3, 0.010], "high": [-0.4, -0.1, 0.079]}}
    holds = {**misses, "test_verdict": "feasible", "test_relative_violations": [-0.5, -0.2, -0.1]}
    for gamma, in_distribution in ((0.09, misses), (0.15, holds)):
        write_run(runs, f"c{gamma}", model="dust", dataset="ucsd_ped2", L=2, gamma=gamma, constrained=True,
                  test=15.0, selection=15.0, in_distribution=in_distribution)
        write_run(runs, f"e{gamma}", model="dust", dataset="ucsd_ped2", L=2, gamma=gamma, constrained=False,
                  test=16.0, selection=16.0)
    code, err = run_main(str(runs), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0, err
    table = (tmp_path / "report" / "tables" / "table3_video_mean_rmse.md").read_text()
    rows = {line.split(" | ")[3]: line for line in table.splitlines() if line.startswith("| dust")}
    assert "| 15.000 ° |" in rows["0.09"] and "°" not in rows["0.15"], table
    assert ("° the entry's verdict on the test split is not its validation verdict" in table
            and "L=2 · γ_train=0.09, constrained: infeasible on test (largest violation +4.6 % [+1.0, +7.9])" in table
            and "γ_train=0.15, constrained: infeasible" not in table), table
    csv = pd.read_csv(tmp_path / "report" / "tables" / "table3_video_mean_rmse.csv")
    assert list(csv.sort_values("gamma_train")["constrained_test_verdict"]) == ["infeasible", "feasible"]
    assert r"15.000 $^\circ$" in (tmp_path / "report" / "tables" / "table3_video_mean_rmse.tex").read_text()
