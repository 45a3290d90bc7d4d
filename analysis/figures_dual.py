"""Figures of the dual: multipliers over training, constraint satisfaction over training per dual setting.

Drawn with the shared style and helpers of :mod:`analysis.figure_kit`."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from .collect import RunTable
from . import figure_marks, verdicts
from .figure_marks import integer_ticks, line_style
from .selection import cell_label, dual_setting_label, select_best, sort_cells
from .figure_kit import (
    ARM_STYLE, FigureResult, MAX_SETTINGS, MET_COLUMNS, OKABE_ITO, TITLES, _not_shown, _panels, _render, _title,
    _ylabel, distinguishing,
)


def dual_variables(runs: RunTable, out_dir: Path, limit: int = 6) -> FigureResult:
    """The multipliers lambda_l over training (history.csv), one panel per constrained run, partial ones too.

    At most ``limit`` panels: the runs the tables report first (those not strictly feasible before the others), then
    failed and partial runs, then the rest; the caption says how many are not shown.
    """
    result = FigureResult("dual_variables", TITLES["dual_variables"])
    frame = runs.runs[(runs.runs["constrained"] == True) & runs.runs["has_history"].astype(bool)]  # noqa: E712
    frame = frame[[bool(runs.history_of(r).filter(like="lambda_").notna().any(axis=None)) for r in frame["run"]]] \
        if len(frame) else frame
    if frame.empty:
        result.skipped = "no constrained run with a history.csv holding multipliers (lambda_l)"
        return result
    frame = _by_priority(frame, set(select_best(runs.runs, rule=runs.selection)["run"]))
    hidden = len(frame) - limit
    frame = frame.head(limit)
    result.caption = ("Multipliers λ_l per training step from history.csv (λ_0 belongs to the reference constraint "
                      "ℓ_0 ≤ ε, λ_l to layer l's descent constraint); shaded: the primal warm-up, λ frozen "
                      "at 0. Titles give each run's own α and ε (ε=auto: the value it resolved to) and seed; runs "
                      "not strictly feasible are drawn dotted. "
                      "Failed and partial runs are included (marked): this is where a diverging run shows first."
                      + _not_shown(hidden, "runs"))
    colours = matplotlib.colormaps["viridis"]

    def draw() -> Figure:
        cols = min(len(frame), 3)
        rows = math.ceil(len(frame) / cols)
        figure, axes = _panels(rows, cols, width=3.6, height=2.6)
        for k, (_, run) in enumerate(frame.iterrows()):
            ax = axes[k // cols, k % cols]
            history = runs.history_of(run["run"]).sort_values("step")
            columns = sorted((c for c in history.columns if c.startswith("lambda_")),
                             key=lambda c: int(c.split("_")[1]))
            for layer, column in enumerate(columns):
                ax.plot(history["step"], history[column], color=colours(0.9 * layer / max(len(columns) - 1, 1)),
                        linewidth=1.3, label=rf"$\lambda_{{{column.split('_')[1]}}}$",
                        **{key: value for key, value in line_style(run).items() if key == "linestyle"})
            if "phase" in history:
                warmup = history.loc[history["phase"] == "primal", "step"]
                if len(warmup):
                    ax.axvspan(warmup.min(), warmup.max(), color="0.5", alpha=0.15, linewidth=0, label="warm-up")
            _title(ax, dual_panel_title(frame, run))
            ax.set_xlabel("training step")
            integer_ticks(ax.xaxis)
            _ylabel(axes, k // cols, k % cols, r"multiplier $\lambda_l$ (≥ 0)")
            ax.legend(ncol=2)
        for k in range(len(frame), axes.size):
            axes[k // cols, k % cols].set_visible(False)
        figure.suptitle("Dual variables over training")
        return figure

    return _render(draw, out_dir, result)


def _by_priority(frame: pd.DataFrame, selected: set[str]) -> pd.DataFrame:
    """``frame`` in the paper's cell order, the runs the tables report first, those not strictly feasible among them
    first (a † entry's multipliers are what explain it, and cut by model order they went unseen), then the failed
    and partial runs (what a user debugs), then the rest."""
    def priority(run: pd.Series) -> int:
        if run["run"] in selected:
            return 0 if run["verdict"] != verdicts.STRICTLY_FEASIBLE else 1
        return 2 if run["state"] != "complete" else 3

    frame = sort_cells(frame)
    ranks = [priority(run) for _, run in frame.iterrows()]
    return frame.assign(_priority=ranks).sort_values("_priority", kind="stable").drop(columns="_priority")


def dual_panel_title(frame: pd.DataFrame, run: pd.Series) -> str:
    """The cell; the run's own α, ε (as resolved) and seed, then what else tells it apart from the other panels
    of ``frame``; its verdict (with the layers that miss) or its state."""
    state = run["verdict"] if run["usable"] else run["state"]
    if run["usable"] and run["verdict"] == verdicts.INFEASIBLE and len(run["violated_layers"]):
        state += f" (layers {', '.join(map(str, run['violated_layers']))})"
    if run["usable"] and run["verdict"] == verdicts.SLACK_FEASIBLE:
        state += f" (slack used up to {verdicts.percent(run['max_relative_slack_used'])})"
    extra = distinguishing(frame, run)
    name = cell_label(run) if run.get("L") is not None and not pd.isna(run["L"]) else str(run["run"])
    # what tells the run apart gets a line of its own: beside the settings it ran into the next panel's title
    return f"{name}\n{figure_marks.settings(run)}" + (f"\n{extra}" if extra else "") + f"\n{state}"


# ----------------------------------------------------------------------------------------- constraint satisfaction

def satisfaction_by_setting(runs: RunTable) -> tuple[dict[str, pd.DataFrame], dict[str, int]]:
    """Per dual setting (``dual_setting_label``): a frame indexed by step with, for each ``MET_COLUMNS`` column,
    the fraction of the setting's complete runs (among those that reached the step) whose smoothed training
    constraints were met; and the number of runs per setting. Records without these columns are left out."""
    history = runs.history
    if "constraints_met_strictly" not in history or runs.results.empty:
        return {}, {}
    labels = {run["run"]: dual_setting_label(run) for _, run in runs.results.iterrows()}
    rows = history[history["run"].isin(list(labels))].dropna(subset=["constraints_met_strictly"])
    columns = [column for column in MET_COLUMNS if column in rows]
    rows = rows.assign(setting=rows["run"].map(labels), **{c: pd.to_numeric(rows[c], errors="coerce") for c in columns})
    curves = {setting: group.groupby("step")[columns].mean().sort_index() for setting, group in rows.groupby("setting")}
    counts = rows.groupby("setting")["run"].nunique().to_dict()
    return curves, {setting: int(count) for setting, count in counts.items()}


def _shown_settings(curves: dict[str, pd.DataFrame], always: set[str]) -> list[str]:
    """The settings best at staying strictly feasible (mean fraction over steps) up to MAX_SETTINGS, plus ``always``."""
    ranked = sorted(curves, key=lambda s: (-float(curves[s]["constraints_met_strictly"].mean()), s))
    chosen = [s for s in ranked if s not in always][:MAX_SETTINGS]
    return [s for s in ranked if s in always or s in chosen]


def constraint_satisfaction(runs: RunTable, out_dir: Path) -> FigureResult:
    """Fraction of runs whose smoothed training constraints are met at each step, one line per dual setting; one
    row per task (video and text budgets differ tenfold in steps: on one axis the shorter runs were a sliver)."""
    result = FigureResult("constraint_satisfaction", TITLES["constraint_satisfaction"])
    tasks = [task for task in dict.fromkeys(runs.results["task"].dropna())]
    by_task = {task: satisfaction_by_setting(dataclasses.replace(runs, runs=runs.runs[runs.runs["task"] == task]))
               for task in tasks}
    by_task = {task: found for task, found in by_task.items() if found[0]}
    if not by_task:
        result.skipped = ("no complete run with constraints_met_strictly in its history.csv (records written before "
                          "time to feasibility was measured lack it)")
        return result
    results = runs.results
    paper = {dual_setting_label(r) for _, r in results[results["arm"] == "constrained_paper"].iterrows()}
    erm = dual_setting_label({"arm": "erm"})
    shown = {task: _shown_settings(curves, paper | {erm}) for task, (curves, _) in by_task.items()}
    hidden = sum(len(curves) - len(shown[task]) for task, (curves, _) in by_task.items())
    settings = list(dict.fromkeys(setting for task in by_task for setting in shown[task]))  # one colour each
    counts = {setting: sum(found[1].get(setting, 0) for found in by_task.values()) for setting in settings}
    result.caption = ("Fraction of the complete runs of each dual setting whose smoothed training constraints "
                      "(an exponential moving average of the log layer losses over about 20 steps, "
                      "cutlab.core.feasibility_clock) are met at each step: strictly (left) and within the "
                      "resilience slack (right), among the runs that reached the step (cells and budgets differ "
                      "in length); one row per task. One line per dual setting: constraint form · dual optimiser and "
                      "its learning rate · detach_prev · update order · restarts · resilience (n = runs, all rows); "
                      "the paper's dual dash-dotted, ERM (no dual, the same check) dashed. Runs recorded before this "
                      "was measured are left out." + _not_shown(hidden, "dual settings (ranked by the mean strict "
                                                                         "fraction)"))

    def style(setting: str) -> dict:
        if setting == erm:
            return {"color": ARM_STYLE["erm"]["color"], "linestyle": "--"}
        colour = OKABE_ITO[settings.index(setting) % len(OKABE_ITO)]
        return {"color": colour, "linestyle": "-." if setting in paper else "-"}

    def draw() -> Figure:
        columns = [c for c in MET_COLUMNS if any(c in curve for curves, _ in by_task.values() for curve in curves.values())]
        figure, axes = _panels(len(by_task), len(columns), width=4.2, height=3.0)
        lines = {}
        for i, (task, (curves, _)) in enumerate(by_task.items()):
            for j, column in enumerate(columns):
                ax = axes[i, j]
                for setting in shown[task]:
                    if column in curves[setting]:
                        curve = curves[setting]
                        (lines[setting],) = ax.plot(curve.index, curve[column].to_numpy(), linewidth=1.4,
                                                    **style(setting), label=f"{setting} (n={counts[setting]})")
                ax.set_ylim(-0.03, 1.05)
                _title(ax, f"{task}: {MET_COLUMNS[column]}" if len(by_task) > 1 else MET_COLUMNS[column])
                ax.set_xlabel("training step")
                integer_ticks(ax.xaxis)
                _ylabel(axes, i, j, "fraction of runs\nwith constraints met")
        # one legend below every panel, the figure's own: anchored to a panel, its long labels widened that panel's
        # column and pushed the panels apart
        ordered = [setting for setting in settings if setting in lines]
        figure.legend([lines[s] for s in ordered], [lines[s].get_label() for s in ordered], loc="outside lower center",
                      ncol=1)
        figure.suptitle("Constraint satisfaction over training, per dual setting")
        return figure

    return _render(draw, out_dir, result)
