"""Tables 3 and 4 of the paper from run records, as Markdown, CSV and LaTeX.

- Table 3 (video): test RMSE (0-255 scale) of the last layer, averaged over the gamma_test grid.
- Table 4 (text): area under test accuracy vs gamma_test (trapezoid in gamma units, not normalised).

One row per cell (model, dataset, L, gamma_train), its arms side by side (constrained, the paper's dual
when such runs exist, ERM); each entry is the arm's best run by validation, or feasible-first
(``analysis.selection``). A selected run that is not strictly feasible is shown and marked
(``analysis.verdicts``: infeasible, feasible only within its slack, degenerate). Where the paper has the same
cell its number stands beside ours, with the difference ours - paper.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cutlab.atomic import write_atomic

from .collect import RunTable
from .markdown import inert
from .published import TABLE3 as PUBLISHED3
from .published import TABLE4 as PUBLISHED4
from .published import published_value
from .selection import (ARM_LABELS, ARMS, CHOSEN_BY, DEFAULT_PRECISION, FEASIBLE_FIRST, PAPER_DUAL, cell_label,
                        select_best)
from .verdicts import (
    DEGENERATE, DEGENERATE_MEANING, INFEASIBLE, MARKS, NAMES, SLACK_FEASIBLE, SLACK_MEANING, TEST_DIFFERS, mark,
    percent, test_differs, with_interval,
)

DAGGER, DOUBLE_DAGGER, SECTION = MARKS[INFEASIBLE], "‡", "§"
ARM_SHORT = {"constrained": "c", "constrained_paper": "p", "erm": "e"}  # the "runs (c/p/e)" column
ARM_TEX = {"constrained": "Constr.", "constrained_paper": "Constr. (paper's dual)", "erm": "ERM"}
# a published RMSE above it is a run that did not reach a feasible point (the paper's App. B, Fig 11)
PAPER_INFEASIBLE_RMSE = 100.0
CSV_DECIMALS = 4  # the CSV keeps one digit more than the tables print
COMMAND = "cutlab-analysis"  # what wrote a table when no command line is given: an installed wheel's console script


@dataclass(frozen=True)
class TableSpec:
    """What one of the paper's tables reports."""

    stem: str  # file name stem of the outputs
    title: str
    task: str  # runs' ``task``
    value: str  # the runs column reported
    value_name: str  # its name in the CSV
    published: str  # shipped CSV of the paper's numbers
    higher_is_better: bool
    what: str  # one sentence: how the number is computed


TABLE3 = TableSpec(
    "table3_video_mean_rmse", "Table 3 — video denoising: mean test RMSE over γ_test", "video", "test_mean_metric",
    "mean_rmse", PUBLISHED3, False,
    "test RMSE of the last layer on the 0–255 pixel scale, averaged over the γ_test grid; lower is better",
)
TABLE4 = TableSpec(
    "table4_text_accuracy_auc", "Table 4 — text classification: accuracy AUC over γ_test", "text", "test_auc",
    "accuracy_auc", PUBLISHED4, True,
    "area under the last layer's test accuracy vs γ_test (trapezoid in γ units, not normalised); higher is better",
)
TABLES = (TABLE3, TABLE4)


@dataclass
class Table:
    """A built table: ``frame`` is the CSV content (one row per cell), ``notes`` its footnotes."""

    spec: TableSpec
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.frame.empty

    @property
    def arms(self) -> list[str]:
        """The arms with runs in this table (the paper's-dual arm only where such runs exist), in ARMS order."""
        return arms_in(self.frame)

    def to_csv(self) -> str:
        # rounded here only: the Markdown and LaTeX print each value from the record's own digits (rounding to 4
        # decimals first, then to 3, moved a last digit, e.g. 13.88246 -> 13.8825 -> 13.883)
        return self.frame.round(CSV_DECIMALS).to_csv(index=False, lineterminator="\n")

    def to_markdown(self) -> str:
        if self.empty:
            return f"_No complete {self.spec.task} runs: {self.spec.title.split(' —')[0]} has no rows._\n"
        header = (["model", "dataset", "L", "γ_train", "γ_test", *(ARM_LABELS[arm] for arm in self.arms),
                   self._runs_heading(), "paper constrained", "paper ERM"]
                  + [f"Δ {ARM_LABELS[arm]}" for arm in self.arms])
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
        for row in self._display_rows():
            lines.append("| " + " | ".join([*map(inert, row[:2]), *row[2:]]) + " |")  # model, dataset: record text
        return "\n".join(lines) + "\n\n" + "\n".join(f"{note}  " for note in self.notes).rstrip() + "\n"

    def to_latex(self, command: str | None = None) -> str:
        """The table in LaTeX, headed by a comment naming ``command`` (the command line that ran, as report.md's
        header names it), on one line: a line break in it would end the comment."""
        header = ([r"Model", r"Dataset", r"$L$", r"$\gamma_\mathrm{train}$", r"$\gamma_\mathrm{test}$",
                   *(ARM_TEX[arm] for arm in self.arms), self._runs_heading().capitalize(), r"Paper constr.",
                   r"Paper ERM"] + [rf"$\Delta$ {ARM_TEX[arm].lower()}" for arm in self.arms])
        made_by = " ".join((command or COMMAND).splitlines())
        lines = [f"% {self.spec.title} (generated by `{made_by}`)", r"\begin{table}[t]", r"\centering",
                 rf"\caption{{{tex(self.spec.title)}: {tex(self.spec.what)}.}}", r"\label{tab:" + self.spec.stem + "}",
                 r"\begin{tabular}{ll" + "r" * (len(header) - 2) + "}", r"\toprule", " & ".join(header) + r" \\",
                 r"\midrule"]
        lines += [" & ".join(tex(cell) for cell in row) + r" \\" for row in self._display_rows()]
        lines += [r"\bottomrule", r"\end{tabular}"]
        if self.notes:
            lines.append(r"\par\smallskip\footnotesize")
            lines.append((r" \\" + "\n").join(tex(note) for note in self.notes))
        lines.append(r"\end{table}")
        return "\n".join(lines) + "\n"

    def write(self, folder: Path, command: str | None = None) -> list[Path]:
        """``<stem>.md``, ``.csv`` and ``.tex`` (naming ``command``) in ``folder``; returns their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for suffix, text in ((".md", self.to_markdown()), (".csv", self.to_csv()), (".tex", self.to_latex(command))):
            path = folder / f"{self.spec.stem}{suffix}"
            write_atomic(path, text)  # a full disk leaves the earlier file, never a cut-off one
            paths.append(path)
        return paths

    @property
    def several_budgets(self) -> bool:
        """Whether rows differ in training budget (steps): then each row's model names its budget."""
        return self.frame["steps"].nunique(dropna=False) > 1

    def _runs_heading(self) -> str:
        return "runs (" + "/".join(ARM_SHORT[arm] for arm in self.arms) + ")"

    def _display_rows(self) -> list[list[str]]:
        name = self.spec.value_name
        rows, several_budgets = [], self.several_budgets
        for _, r in self.frame.iterrows():
            # a run in lower precision, or of another budget, is its own row, named so (fp32 is the paper's and
            # cutlab's default; the budget is named wherever the table holds more than one)
            model = _model_label(r, several_budgets)
            cells = [model, str(r["dataset"]), str(int(r["L"])), f"{r['gamma_train']:g}",
                     _grid_label(r["gamma_test_grid"])]
            for arm in self.arms:
                marks = mark(r[f"{arm}_verdict"]) + (TEST_DIFFERS if _test_differs(r, arm) else "")
                marked = f" {marks}" if marks else ""
                cells.append(_number(r[f"{arm}_{name}"]) + marked if _present(r[f"{arm}_{name}"]) else "—")
            cells.append("/".join(str(int(r[f"{arm}_n_runs"])) for arm in self.arms))
            for arm in ("constrained", "erm"):
                paper = r[f"paper_{arm}"]
                marks = ""
                if _present(paper) and int(r["paper_L"]) != int(r["L"]):
                    marks += f" {DOUBLE_DAGGER}"
                if _present(paper) and self.spec.task == "video" and paper > PAPER_INFEASIBLE_RMSE:
                    marks += f" {SECTION}"
                cells.append(_number(paper) + marks if _present(paper) else "—")
            for arm in self.arms:
                diff = r[f"diff_{arm}"]
                cells.append(f"{diff:+.3f}" if _present(diff) else "—")
            rows.append(cells)
        return rows


def build_table(runs: RunTable, spec: TableSpec) -> Table:
    """``spec``'s table from the complete runs of its task: best-of-N per cell and arm, beside the paper."""
    frame = runs.runs[runs.runs["task"] == spec.task]
    selected = select_best(frame, rule=runs.selection)
    rows = []
    for keys, cell in selected.groupby(["model", "dataset", "L", "gamma_train", "gamma_test_grid", "precision",
                                        "steps"], sort=False, dropna=False):
        model, dataset, layers, gamma_train, grid, precision, steps = keys
        row: dict = {"model": model, "dataset": dataset, "L": int(layers), "gamma_train": float(gamma_train),
                     "precision": precision, "steps": steps}
        paper_L = None
        published_as = _paper_data(cell, dataset)
        for arm in ARMS:
            chosen = cell[cell["arm"] == arm]
            best = chosen.iloc[0] if len(chosen) else None
            value = float(best[spec.value]) if best is not None else math.nan
            # both constrained arms stand beside the paper's constrained number
            paper = published_value(spec.published, model, published_as, int(layers), float(gamma_train), arm != "erm")
            paper_L = paper.paper_L if paper else paper_L
            if arm != "constrained_paper":
                row[f"paper_{arm}"] = paper.value if paper else math.nan
            row.update({
                f"{arm}_{spec.value_name}": value,
                f"diff_{arm}": value - paper.value if paper and not math.isnan(value) else math.nan,
                f"{arm}_verdict": best["verdict"] if best is not None else "",
                f"{arm}_test_verdict": best.get("test_verdict") if best is not None else "",
                f"{arm}_n_runs": int(best["n_runs"]) if best is not None else 0,
                f"{arm}_n_infeasible": int(best["n_infeasible"]) if best is not None else 0,
                f"{arm}_run": best["run"] if best is not None else "",
                f"{arm}_varied": best["varied"] if best is not None else "",
            })
        row["paper_L"] = paper_L if paper_L is not None else math.nan
        row["gamma_test_grid"] = " ".join(f"{g:g}" for g in grid) if isinstance(grid, tuple) else ""
        rows.append(row)
    columns = _columns(spec, arms_in(pd.DataFrame(rows)))
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("paper_L", "steps"):  # integer columns even where the paper has no cell, or a record no steps
        frame[column] = frame[column].astype("Int64")
    table = Table(spec, frame)
    table.notes = _notes(table, runs, int(selected["n_repeats"].sum()))
    return table


def _paper_data(cell: pd.DataFrame, dataset: str) -> str | None:
    """The data set whose paper numbers stand beside ``cell``: only data as shipped (Sec. 4's test sets), from any
    root (an official UCSDped2 folder is Ped2; collect.label_data_settings); None for another stride or subset,
    which tests on other windows or reviews. A frame made by hand has no data settings: its label is its data set."""
    if "data_defaults" not in cell:
        return dataset
    return cell["dataset_any_root"].iloc[0] if cell["data_defaults"].astype(bool).all() else None


def build_tables(runs: RunTable) -> list[Table]:
    return [build_table(runs, spec) for spec in TABLES]


def arms_in(frame: pd.DataFrame) -> list[str]:
    """The arms a table shows: those with runs, and ERM and a constrained arm always (the paper's two columns)."""
    def ran(arm: str) -> bool:
        column = f"{arm}_n_runs"
        return column in frame and bool((frame[column].fillna(0) > 0).any())

    constrained = [arm for arm in ("constrained", "constrained_paper") if ran(arm)] or ["constrained"]
    return [arm for arm in ARMS if arm in constrained or arm == "erm"]


def _columns(spec: TableSpec, arms: list[str]) -> list[str]:
    name = spec.value_name
    return (["model", "dataset", "L", "gamma_train"] + [f"{arm}_{name}" for arm in arms]
            + ["paper_constrained", "paper_erm"] + [f"diff_{arm}" for arm in arms]
            + [f"{arm}_verdict" for arm in arms] + [f"{arm}_test_verdict" for arm in arms]
            + [f"{arm}_{key}" for arm in arms for key in ("n_runs", "n_infeasible")]
            + [f"{arm}_run" for arm in arms] + [f"{arm}_varied" for arm in arms]
            + ["paper_L", "gamma_test_grid", "precision", "steps"])


def _notes(table: Table, runs: RunTable, repeats: int = 0) -> list[str]:
    """Footnotes: how entries were chosen, and each mark that the table uses. ``repeats``: runs not counted, repeating
    another run's configuration and seed (selection.repeats)."""
    spec, frame = table.spec, table.frame
    if frame.empty:
        return []
    notes = [f"Each entry is the run {CHOSEN_BY[runs.selection]} among the cell's complete runs on the same "
             f"γ_test grid (seeds and search trials; counts under '{table._runs_heading()}'): {spec.what}. "
             "Δ = ours − paper."]
    if repeats:  # as Figs 5, 14, 15 count seeds: a repeat is no other seed or trial
        notes.append(f"{repeats} run(s) repeat the configuration and seed of another run of their cell (the same "
                     f"sweep run again, on another machine or into another folder): counted once under "
                     f"'{table._runs_heading()}'.")
    several_budgets = table.several_budgets
    pooled = [f"{_row_label(row, several_budgets)}, {ARM_LABELS[arm]}: {row[f'{arm}_varied']}"
              for _, row in frame.iterrows() for arm in table.arms if row[f"{arm}_varied"]]
    if pooled:
        notes.append("Trials, not only seeds: where a cell's runs differ in a config key, the entry is the best of "
                     "them (the paper's rule for its grid and Bayesian searches), and its count is of seeds and "
                     "trials together: " + "; ".join(pooled) + " (each key and its number of values).")
    if several_budgets:
        notes.append("Runs of another training budget (steps) are another row, never seeds or trials of one.")
    if runs.selection == FEASIBLE_FIRST:
        notes.append("`--select feasible-first`: every verdict is taken on validation, so no test number takes part; "
                     "the paper chooses by the validation metric alone (`--select validation`, the default).")
    if "constrained_paper" in table.arms:
        paper = ", ".join(f"{key}={value}" for key, value in PAPER_DUAL.items())
        notes.append(f"{ARM_LABELS['constrained_paper']}: the constrained runs with the paper's dual dynamics "
                     f"({paper}: train=constrained_paper); constrained: every other dual setting (cutlab's defaults, "
                     "train=constrained). Each is selected and shown on its own.")
    verdicts = frame[[f"{arm}_verdict" for arm in table.arms]]
    if (verdicts == INFEASIBLE).any(axis=None):
        notes.append(f"{DAGGER} the selected run ended **infeasible**: its descent constraints are violated on "
                     "the validation split (the report lists the violated layers). It is shown, not hidden.")
    if (verdicts == SLACK_FEASIBLE).any(axis=None):
        notes.append(f"{MARKS[SLACK_FEASIBLE]} the selected run is **{SLACK_MEANING}**; "
                     + _slack_used(table, runs) + ". Not counted as feasible.")
    if (verdicts == DEGENERATE).any(axis=None):
        notes.append(f"{MARKS[DEGENERATE]} degenerate: {DEGENERATE_MEANING}.")
    if any(_test_differs(row, arm) for _, row in frame.iterrows() for arm in table.arms):
        notes.append(f"{TEST_DIFFERS} the entry's verdict on the test split is not its validation verdict (the mark "
                     "beside it; validation chose and marks the entries, the test split chose nothing): "
                     + _test_verdicts(table, runs) + ".")
    has_paper = frame[["paper_constrained", "paper_erm"]].notna().any(axis=1)
    other_depth = has_paper & (frame["paper_L"] != frame["L"]).fillna(False)
    if other_depth.any():
        depths = ", ".join(sorted({str(int(v)) for v in frame.loc[other_depth, "paper_L"]}))
        notes.append(f"{DOUBLE_DAGGER} matched to the paper's row for another depth (L = {depths}): the paper lists "
                     "a single depth for this pretrained model (e.g. DistilBERT as L = 12; it has 6 blocks).")
    if spec.task == "video" and (frame[["paper_constrained", "paper_erm"]] > PAPER_INFEASIBLE_RMSE).any(axis=None):
        notes.append(f"{SECTION} above {PAPER_INFEASIBLE_RMSE:g} RMSE: a run that ended infeasible in the paper.")
    if spec.task == "text" and has_paper.any():
        notes.append("γ_test: our grid (first–last, number of points). The paper's AUCs imply γ_test ∈ [0, 2]; "
                     "on another range the AUC has another scale, and Δ compares grids as much as models.")
    else:
        notes.append("γ_test: our grid (first–last, number of points); the paper does not state its grid.")
    excluded = runs.runs[(runs.runs["task"] == spec.task) & ~runs.runs["usable"]]
    if len(excluded):
        counts = excluded["state"].value_counts()
        parts = [f"{counts[s]} {s}" for s in ("failed", "pruned", "partial", "unsupported") if s in counts]
        notes.append(f"Not counted: {', '.join(parts)} run(s) of this task (listed in the report).")
    return notes


def _test_differs(row, arm: str) -> bool:
    return test_differs(row[f"{arm}_verdict"], row.get(f"{arm}_test_verdict"))


def _test_verdicts(table: Table, runs: RunTable) -> str:
    """Each such entry's test verdict and its largest test violation with its interval (summary.json)."""
    by_run = runs.runs.set_index("run")
    parts = []
    for _, row in table.frame.iterrows():
        for arm in table.arms:
            if _test_differs(row, arm):
                largest = by_run["test_largest_violation"].get(row[f"{arm}_run"]) \
                    if "test_largest_violation" in by_run else None
                parts.append(f"{cell_label(row)}, {ARM_LABELS[arm]}: {NAMES[row[f'{arm}_test_verdict']]} on test "
                             f"(largest violation {with_interval(largest)})")
    return "; ".join(parts)


def _slack_used(table: Table, runs: RunTable) -> str:
    """The largest relative violation the slack had to cover, per marked entry (summary.json's feasibility)."""
    by_run = runs.runs.set_index("run")["max_relative_slack_used"]
    parts = []
    for _, row in table.frame.iterrows():
        for arm in table.arms:
            if row[f"{arm}_verdict"] == SLACK_FEASIBLE:
                parts.append(f"{cell_label(row)}, {ARM_LABELS[arm]}: {percent(by_run.get(row[f'{arm}_run']))}")
    return "the largest relative slack used (violation covered by the slack, as a fraction of the constraint's " \
           "right-hand side): " + "; ".join(parts)


_TEX = {DAGGER: r"$^\dagger$", TEST_DIFFERS: r"$^\circ$", DOUBLE_DAGGER: r"$^\ddagger$", SECTION: r"$^\S$",
        MARKS[SLACK_FEASIBLE]: r"$^\approx$", MARKS[DEGENERATE]: r"$^\emptyset$", "Φ_{l−1}": r"$\Phi_{l-1}$",
        "γ_train": r"$\gamma_\mathrm{train}$", "γ_test": r"$\gamma_\mathrm{test}$", "γ": r"$\gamma$",
        "∈": r"$\in$", "Δ": r"$\Delta$", "_": r"\_", "—": "--", "–": "--", "−": "-", "%": r"\%", "&": r"\&",
        # what a user's folder or data root may hold (ped2 $5-#9.npz), else read as LaTeX and the table did not compile
        "$": r"\$", "#": r"\#", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "\\": r"\textbackslash{}"}
_TEX_TOKEN = re.compile("|".join(re.escape(token) for token in sorted(_TEX, key=len, reverse=True)))


def tex(text: str) -> str:
    """Table text as LaTeX: marks, Greek letters and special characters replaced in one pass; **bold**."""
    text = _TEX_TOKEN.sub(lambda match: _TEX[match.group(0)], text)
    return re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", text)


def _grid_label(grid: str) -> str:
    """``"0 0.5 1 2"`` -> ``"0–2 (4)"``: the grid's range and size, short enough for a table cell."""
    values = [float(g) for g in str(grid).split()]
    return f"{values[0]:g}–{values[-1]:g} ({len(values)})" if values else "—"


def _model_label(row: pd.Series, several_budgets: bool) -> str:
    """``dust``, ``dust (bf16)``, ``dust (400 steps)``: the setting beside the model where it tells rows apart."""
    setting = ([] if row["precision"] == DEFAULT_PRECISION else [str(row["precision"])]) \
        + ([_steps(row["steps"])] if several_budgets else [])
    return f"{row['model']} ({', '.join(setting)})" if setting else str(row["model"])


def _row_label(row: pd.Series, several_budgets: bool) -> str:
    """A table row's cell in a note, with its setting (two budgets of one cell are two rows)."""
    return cell_label({**row.to_dict(), "model": _model_label(row, several_budgets)})


def _steps(steps) -> str:
    return "steps not recorded" if pd.isna(steps) else f"{int(steps)} steps"


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _number(value: float) -> str:
    return f"{value:.3f}"

