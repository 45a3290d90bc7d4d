"""One self-contained Markdown report of a set of runs: what ran, what failed or ended infeasible,
the partial runs, every run's feasibility (verdict, time to feasibility, in-distribution descent),
Tables 3 and 4, and every figure (or why it was skipped), laid out as ``analysis.report_files`` says.

``write_report`` is the one entry point, for the command line and for a later reproduce command.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import pandas as pd

from cutlab.atomic import write_atomic

from .collect import RunTable
from .copies import summed_once
from .figures import FigureResult, make_figures
from .html_report import write_html
from .markdown import inert
from .out_folder import REPORT_HEADING, move_into_place, staged
from .report_files import FIGURES_DIR, REPORT, TABLES_DIR, Report, own_files
from .provenance import provenance_line
from .selection import (
    ARM_LABELS, ARMS, CHOSEN_BY, VALIDATION, cell_label, cell_order, dual_setting_label, reference_gamma_train,
    sort_cells,
)
from .sweep_outcomes import sweep_outcomes, with_not_started
from .tables import Table, build_tables
from .unknown_setting import known_settings
from .verdicts import (
    DEGENERATE, DEGENERATE_MEANING, INFEASIBLE, MARKS, NAMES, SLACK_FEASIBLE, SLACK_MEANING, count_line, mark,
    percent, with_interval,
)

ERROR_WIDTH = 240  # characters of an error message shown in the report
TASK_ORDER = ("video", "text")
METRIC_NAME = {"rmse": "RMSE", "accuracy": "accuracy"}


def write_report(runs: RunTable, out_dir: str | Path, gamma_train: float | None = None,
                 command: str | None = None) -> Report:
    """Tables, figures and ``report.md`` for ``runs`` in ``out_dir`` (created; earlier outputs replaced once the new
    report is whole: it is built in a staging folder, then moved in, so a Ctrl-C or a full disk midway keeps the
    earlier report as it was)."""
    out_dir = Path(out_dir)
    earlier = own_files(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with staged(out_dir) as staging:
        report = _built(runs, staging, gamma_train, command)
        move_into_place(staging, out_dir, last=(REPORT,))
    report = report.moved(staging, out_dir)
    written = {*report.table_files, *(path for figure in report.figures for path in figure.paths),
               *report.evaluation_files}
    for path in earlier - written:  # a figure skipped now must not survive from a past run
        path.unlink(missing_ok=True)
    return report


def _built(runs: RunTable, out_dir: Path, gamma_train: float | None, command: str | None) -> Report:
    tables = build_tables(runs)
    table_files = [path for table in tables for path in table.write(out_dir / TABLES_DIR, command)]
    figures = make_figures(runs, out_dir / FIGURES_DIR, gamma_train=gamma_train)
    report = Report(out_dir / REPORT, tables, table_files, figures)
    from .transfer import transfer_sections  # cutlab-eval's records of these runs, when there are any

    text = "\n".join([*_sections(runs, report, gamma_train, command), "",
                      *transfer_sections(runs, out_dir, TABLES_DIR, FIGURES_DIR, report.evaluation_files)])
    report.evaluation_files.sort()
    write_atomic(report.path, text.rstrip() + "\n")
    report.html = write_html(text, out_dir)  # the same report as one file, figures embedded
    return report


def _sections(runs: RunTable, report: Report, gamma_train: float | None, command: str | None) -> list[str]:
    frame = runs.runs
    lines = [REPORT_HEADING, ""]
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(f"Generated {when}" + (f" by `{command}`" if command else "") + " from "
                 + ", ".join(inert(folder) for folder in runs.folders) + ".")
    if runs.source:
        lines.append(f"The run records were rebuilt from {runs.source} (config, summary, history and the eval "
                     "table); W&B holds no sample_losses.csv, so the figures that need it are skipped.")
    else:
        lines.append("Numbers come from the run records alone (config.yaml, summary.json, eval.csv, history.csv, "
                     "sample_losses.csv); W&B is not read.")
    paper = " (the paper's rule)" if runs.selection == VALIDATION else f"; the paper's rule is `--select {VALIDATION}`"
    lines.append(f"Selection (`--select {runs.selection}`): tables and figures show, per cell and arm, the run "
                 f"{CHOSEN_BY[runs.selection]}{paper}.")
    outcomes = sweep_outcomes(runs)  # runs of a sweep that failed before they wrote a run folder
    ran = with_not_started(frame, outcomes)
    lines += ["", *_what_ran(ran, runs, gamma_train)]
    lines += ["", *_failed(ran, outcomes.unread)]
    lines += ["", *_infeasible(frame), "", *_partial(ran), "", *_feasibility(frame)]
    for table in report.tables:
        lines += ["", *_table_section(table)]
    lines += ["", *_figure_sections(report.figures)]
    return lines


# ------------------------------------------------------------------------------------------- what ran

def _what_ran(frame: pd.DataFrame, runs: RunTable, gamma_train: float | None) -> list[str]:
    counts = frame["state"].value_counts()
    complete = frame[frame["usable"]]
    folders = int(frame["path"].notna().sum())
    left = len(frame) - folders  # runs failed before they wrote a folder, known from their sweep's record
    without = f" and {left} sweep run{'s' if left > 1 else ''} that left none" if left else ""
    lines = ["## What ran", "",
             f"{folders} run folders{without}: "
             f"{counts.get('complete', 0)} complete ({count_line(complete['verdict'])}), "
             f"{counts.get('failed', 0)} failed, "
             f"{counts.get('partial', 0)} partial, {counts.get('unsupported', 0)} unreadable, "
             f"{counts.get('pruned', 0)} pruned (stopped early by a search's pruner). "
             f"Only complete runs are counted as results.", ""]
    lines += ["| task | model | dataset | " + " | ".join(ARM_LABELS[arm] for arm in ARMS)
              + " | failed | partial / unreadable | pruned | steps | wall time |",
              "|---|---|---|" + "---:|" * (len(ARMS) + 5)]
    keyed, unknown = known_settings(frame)  # runs refused before they started: counted under the table
    keys = [row for _, row in keyed.drop_duplicates(["task", "model", "dataset"]).iterrows()]
    keys.sort(key=lambda row: (TASK_ORDER.index(row["task"]) if row["task"] in TASK_ORDER else 9, cell_order(row)))
    for key in keys:
        group = keyed[(keyed["task"] == key["task"]) & (keyed["model"] == key["model"])
                      & (keyed["dataset"] == key["dataset"])]
        done = group[group["usable"]]
        lines.append(
            f"| {_cell(key['task'])} | {_cell(key['model'])} | {_cell(key['dataset'])} | "
            + "".join(f"{int((done['arm'] == arm).sum())} | " for arm in ARMS)
            + f"{int((group['state'] == 'failed').sum())} | "
            f"{int(group['state'].isin(['partial', 'unsupported']).sum())} | "
            f"{int((group['state'] == 'pruned').sum())} | "
            f"{int(summed_once(group, 'steps'))} | {_duration(summed_once(group, 'wall_time_s'))} |")
    steps, wall = int(summed_once(frame, "steps")), summed_once(frame, "wall_time_s")
    lines += [*unknown, "", f"In all: {steps} training steps, {_duration(wall)} of training and evaluation wall time "
              "(summed over runs; failed and partial runs count their steps so far)."]
    lines += [line for line in [provenance_line(frame[frame["usable"]])] if line]
    for task in ("video", "text"):
        reference = gamma_train if gamma_train is not None else reference_gamma_train(frame, task)
        if reference is not None:
            lines.append(f"Figures of {task} runs at a single γ_train use γ_train = {reference:g}"
                         + (" (chosen with --gamma-train)." if gamma_train is not None else
                            " (the level with the most cells)."))
    return lines


def _failed(frame: pd.DataFrame, unread: list[str]) -> list[str]:
    """Failed runs, those that failed before they wrote a run folder (from their sweep's record) included."""
    failed = sort_cells(frame[frame["state"] == "failed"])
    lines = ["## Failed runs", ""]
    if unread:
        lines += ["Sweep records not read (their runs are not counted):", "",
                  *(f"- {_cell(_short(line))}" for line in unread), ""]
    if failed.empty:
        return lines + ["None."]
    lines += ["| run | setting | arm | steps | error |", "|---|---|---|---:|---|"]
    for _, run in failed.iterrows():
        lines.append(f"| {_cell(run['run'])} | {_setting(run)} | {_cell(run['arm'] or '?')} | {_int(run['steps'])} | "
                     f"{_cell(_short(run['problem']))} |")
    return lines


def _infeasible(frame: pd.DataFrame) -> list[str]:
    infeasible = sort_cells(frame[frame["usable"] & (frame["verdict"] == INFEASIBLE)])
    lines = ["## Runs that ended infeasible", ""]
    if infeasible.empty:
        constrained = frame[frame["usable"] & (frame["constrained"] == True)]  # noqa: E712 (either arm)
        if constrained.empty:
            return lines + ["None (no complete constrained runs)."]
        short = constrained[constrained["verdict"].isin([SLACK_FEASIBLE, DEGENERATE])]
        if short.empty:
            return lines + ["None: every complete constrained run is strictly feasible on held-out data."]
        return lines + [f"None, but not every complete constrained run is strictly feasible: "
                        f"{int((short['verdict'] == SLACK_FEASIBLE).sum())} {NAMES[SLACK_FEASIBLE]} "
                        f"({SLACK_MEANING}) and {int((short['verdict'] == DEGENERATE).sum())} {NAMES[DEGENERATE]} "
                        f"({DEGENERATE_MEANING}); neither is counted as feasible."]
    lowest = lowest_last_layer_loss(frame)
    lines += ["Complete constrained runs whose descent constraints are violated on held-out data (validation, "
              "at γ_train). They stay in the tables, marked †, when the selection chooses them. Chained together, "
              "the constraints allow the last layer at most ε (1 − α)^L; the last column is the lowest validation "
              "ℓ_L that any complete run in this report reached on the same data at the same γ_train, either arm, any "
              "model or depth.", "",
              "| run | setting | seed | violated layers | test metric | validation ℓ_L | ε (1 − α)^L | lowest ℓ_L here |",
              "|---|---|---:|---|---:|---:|---:|---:|"]
    below = 0
    for _, run in infeasible.iterrows():
        layers = ", ".join(str(layer) for layer in run["violated_layers"]) or "?"
        value = run["test_auc"] if run["task"] == "text" else run["test_mean_metric"]
        name = "accuracy AUC" if run["task"] == "text" else f"mean {METRIC_NAME.get(run['metric'], run['metric'])}"
        floor = lowest.get((run["dataset"], _rounded(run["gamma_train"])), math.nan)
        asks_below = bool(run["last_layer_bound"] < floor)  # False where either is unknown (NaN)
        below += asks_below
        lines.append(f"| {_cell(run['run'])} | {_setting(run)} | {_int(run['seed'])} | {layers} | "
                     f"{name} {value:.3f} | {_loss(run['val_last_layer_loss'])} | "
                     f"{_loss(run['last_layer_bound'])}{' ‡' if asks_below else ''} | {_loss(floor)} |")
    if below:
        lines += ["", f"‡ {below} of {len(infeasible)} ask for a last-layer loss below the lowest that any run in "
                  "this report reached at their data and γ_train: more total descent than anything trained here "
                  "delivered, so another dual setting cannot be expected to meet them. What can: a larger ε (a worse "
                  "Φ_0 for the layers to descend from), a smaller α, or a model that reaches lower."]
    return lines


def lowest_last_layer_loss(frame: pd.DataFrame) -> dict[tuple, float]:
    """(dataset, gamma_train) -> the lowest validation l_L any complete run reached there (an estimate, from above,
    of the task's floor at this budget)."""
    reached = frame[frame["usable"] & frame["val_last_layer_loss"].notna()]
    return {(dataset, _rounded(gamma)): float(group["val_last_layer_loss"].min())
            for (dataset, gamma), group in reached.groupby(["dataset", "gamma_train"])}


def _rounded(gamma) -> float | None:
    """gamma_train as a lookup key (None where a record lacks it)."""
    return None if gamma is None or pd.isna(gamma) else round(float(gamma), 6)


def _loss(value) -> str:
    return "?" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def _partial(frame: pd.DataFrame) -> list[str]:
    partial = sort_cells(frame[frame["state"].isin(["partial", "unsupported"])])
    lines = ["## Partial and unreadable runs (not counted as results)", ""]
    if partial.empty:
        return lines + ["None."]
    lines += ["| run | setting | state | why |", "|---|---|---|---|"]
    for _, run in partial.iterrows():
        lines.append(f"| {_cell(run['run'])} | {_setting(run)} | {run['state']} | {_cell(_short(run['problem']))} |")
    return lines


def _feasibility(frame: pd.DataFrame) -> list[str]:
    """Every complete run: verdict, slack used, time to feasibility, and the largest in-distribution layer ratio."""
    complete = sort_cells(frame[frame["usable"]])
    lines = ["## Feasibility", ""]
    if complete.empty:
        return lines + ["None (no complete runs)."]
    lines += ["Per complete run: the verdict on held-out data (validation, at γ_train; "
              f"{MARKS[SLACK_FEASIBLE]} {SLACK_MEANING}, with the largest violation the slack covers as a fraction "
              "of the constraint's right-hand side); the first step of the final streak in which the smoothed "
              "training constraints were met, strictly and within the slack (never: not met when training ended; 1: "
              "met from the first step on, which an untrained model that already descends does, not time training "
              "took); "
              "the largest α that every descent constraint meets on validation, 1 − max_l ℓ_l / ℓ_{l−1} (below 0: "
              "a layer raises the loss), beside the α the run was given; "
              "and the largest test ratio ℓ_l / ℓ_{l−1} at γ_test = γ_train (above 1: a layer that raises the "
              "loss in distribution); the iterate evaluated (the last, or with eval.iterate=best the step that "
              "validation chose, which makes the validation verdict optimistic) and the same verdict on test; the "
              "largest relative violation on validation and on test at γ_train with its 90 % bootstrap interval "
              "over the held-out samples (an interval that straddles the tolerance: the split is too small to "
              "decide that constraint). ERM "
              "runs get the same checks, for comparison. ? = not in the run's record (written before it was "
              "measured).", "",
              "| run | setting | arm | dual setting | verdict | slack used | steps to strict feasibility | "
              "steps to feasibility (within slack) | steps | α met on validation (given) | "
              "max ℓ_l / ℓ_{l−1} in distribution | descends | iterate | test verdict | "
              "largest violation, validation [90 %] | largest violation, test [90 %] |",
              "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|"]
    for _, run in complete.iterrows():
        slack = percent(run["max_relative_slack_used"]) if run["verdict"] == SLACK_FEASIBLE else "—"
        lines.append(f"| {_cell(run['run'])} | {_setting(run)} | {ARM_LABELS.get(run['arm'], '?')} | "
                     f"{_cell(dual_setting_label(run))} | {_verdict(run['verdict'])} | {slack} | "
                     f"{_steps(run, 'steps_to_strict_feasibility')} | {_steps(run, 'steps_to_feasibility')} | "
                     f"{_int(run['steps'])} | {_alpha_column(run)} | {_ratio(run['max_layer_ratio_id'])} | "
                     f"{_yes_no(run['descends_id'])} | {_iterate(run)} | "
                     f"{_verdict(run['test_verdict'])} | {with_interval(run['val_largest_violation'])} | "
                     f"{with_interval(run['test_largest_violation'])} |")
    if (complete["verdict"] == DEGENERATE).any():
        lines += ["", f"{MARKS[DEGENERATE]} degenerate: {DEGENERATE_MEANING}."]
    return lines


def _iterate(run) -> str:
    """``last``, ``best: step N`` (eval.iterate=best), or ? for a record written before iterates were selectable."""
    if run["iterate"] == "best":
        return f"best: step {_int(run['selected_step'])}"
    return run["iterate"] if isinstance(run["iterate"], str) else "?"


# ------------------------------------------------------------------------------------------- tables, figures

def _table_section(table: Table) -> list[str]:
    stem = f"{TABLES_DIR}/{table.spec.stem}"
    lines = [f"## {table.spec.title}", ""]
    if table.empty:
        return lines + [f"Skipped: no complete {table.spec.task} runs. (Empty files are written beside this "
                        f"report: [CSV]({stem}.csv), [LaTeX]({stem}.tex).)"]
    return lines + [table.to_markdown().rstrip(), "",
                    f"Files: [Markdown]({stem}.md) · [CSV]({stem}.csv) · [LaTeX]({stem}.tex)"]


def _figure_sections(figures: list[FigureResult]) -> list[str]:
    lines = ["## Figures", ""]
    for figure in figures:
        if not figure.written:
            continue
        png = next(p for p in figure.paths if p.suffix == ".png")
        pdf = next(p for p in figure.paths if p.suffix == ".pdf")
        lines += [f"### {figure.title}", "", inert(figure.caption), "",
                  f"![{figure.title}]({FIGURES_DIR}/{png.name})", "", f"[PDF]({FIGURES_DIR}/{pdf.name})", ""]
    skipped = [figure for figure in figures if not figure.written]
    lines += ["## Skipped figures", ""]
    if not skipped:
        return lines + ["None: every figure had data."]
    return lines + [f"- **{figure.title}**: {inert(figure.skipped)}." for figure in skipped]


# ------------------------------------------------------------------------------------------- formatting

def _setting(run: pd.Series) -> str:
    if run.get("model") is None or pd.isna(run.get("L")) or pd.isna(run.get("gamma_train")):
        return "?"
    return _cell(cell_label(run))


def _verdict(verdict) -> str:
    """``slack-feasible ≈``: the verdict's words and mark; ``?`` when the record has none."""
    if not isinstance(verdict, str):
        return "?"
    return (NAMES.get(verdict, verdict) + (f" {mark(verdict)}" if mark(verdict) else "")).strip()


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _steps(run: pd.Series, column: str) -> str:
    """A step, ``never`` (measured, not reached) or ``?`` (the record predates the measurement)."""
    if not run.get("has_time_to_feasibility"):
        return "?"
    return "never" if _missing(run[column]) else str(int(run[column]))


def _alpha_column(run: pd.Series) -> str:
    """``0.27 (0.25)``: 1 − max_l ℓ_l/ℓ_{l−1} on validation, from the largest relative violation and the run's α."""
    if _missing(run.get("max_descent_violation")) or _missing(run.get("alpha")):
        return "?"
    alpha = float(run["alpha"])
    return f"{1 - (1 - alpha) * (1 + float(run['max_descent_violation'])):.3g} ({alpha:g})"


def _ratio(value) -> str:
    return "?" if _missing(value) else f"{float(value):.3g}"


def _yes_no(value) -> str:
    return "?" if _missing(value) else ("yes" if bool(value) else "no")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def _int(value) -> str:
    return "?" if value is None or (isinstance(value, float) and math.isnan(value)) else str(int(value))


def _short(text) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 1] + "…"


def _cell(text) -> str:
    """Record text safe inside a Markdown table cell."""
    return inert(text)
