"""Figures of the test metric: against gamma_test (Figs 2, 4), against depth (Fig 3), the ablations (Figs 5, 14, 15).

Drawn with the shared style and helpers of :mod:`analysis.figure_kit`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .collect import RunTable
from . import figure_marks
from .figure_marks import line_style
from .selection import (ARMS, CHOSEN_BY, SETTING, cell_label, cell_order, seed_of, three_gammas, trial_counts,
                        with_settings)
from .figure_kit import (
    ARM_STYLE, FigureResult, GAMMA_TEST, MARKS_CAPTION, MAX_ROWS, METRIC_NAME, TITLES, _at, _at_level, _at_reference,
    _best_per, _count_range, _mark, _math, _metric_label, _not_shown, _panels, _render, _title, _ylabel,
    settings_left_out,
    distinguishing,
)


def rmse_vs_gamma(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> FigureResult:
    """Fig 2: test RMSE vs gamma_test per model (rows) and dataset (columns), constrained vs ERM."""
    return _metric_vs_gamma(runs, out_dir, "video", "fig02_rmse_vs_gamma_test", gamma_train)


def accuracy_vs_gamma(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> FigureResult:
    """Fig 4: test accuracy vs gamma_test per model and dataset, constrained vs ERM (text runs only)."""
    return _metric_vs_gamma(runs, out_dir, "text", "fig04_accuracy_vs_gamma_test", gamma_train)


def _metric_vs_gamma(runs: RunTable, out_dir: Path, task: str, stem: str, gamma_train: float | None) -> FigureResult:
    result = FigureResult(stem, TITLES[stem])
    title = result.title
    results, gamma = _at_reference(runs, task, gamma_train)
    if results.empty:
        result.skipped = (f"no complete {task} runs{_at_level(gamma_train)}"
                          + (" (text classification runs, metric accuracy)" if task == "text" else ""))
        return result
    best = _best_per(results, ["task", "model", "dataset"], runs.selection)
    models = list(dict.fromkeys(best["model"]))
    datasets = list(dict.fromkeys(best["dataset"]))
    metric = best["metric"].iloc[0]
    result.caption = (f"Test {METRIC_NAME.get(metric, metric)} of the last layer against the test perturbation "
                      f"γ_test, at γ_train = {gamma:g}. "
                      f"Per model, dataset and arm: the run {CHOSEN_BY[runs.selection]} over depths L and seeds (its L "
                      "in the legend). " + MARKS_CAPTION + settings_left_out(best))

    def draw() -> Figure:
        figure, axes = _panels(len(models), len(datasets))
        for i, model in enumerate(models):
            for j, dataset in enumerate(datasets):
                ax = axes[i, j]
                chosen = best[(best["model"] == model) & (best["dataset"] == dataset)]
                if chosen.empty:
                    ax.set_visible(False)
                    continue
                for _, run in chosen.iterrows():
                    curve = runs.curve(run["run"])
                    style = {**ARM_STYLE[run["arm"]], "label": f"{ARM_STYLE[run['arm']]['label']} (L={int(run['L'])})"
                             + _mark(run), **line_style(run)}
                    ax.plot(curve.index, curve.to_numpy(), **style)
                _title(ax, f"{model} · {dataset}")
                ax.set_xlabel(GAMMA_TEST)
                _ylabel(axes, i, j, _metric_label(metric))
                ax.legend()
        figure.suptitle(_math(f"{title.split(' — ')[1]} (γ_train = {gamma:g})"))
        return figure

    return _render(draw, out_dir, result)


# ----------------------------------------------------------------------------------------------- Fig 3

def rmse_vs_depth(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> FigureResult:
    """Fig 3: test RMSE against depth L at the lowest gamma_test, on average over the grid, and most OOD."""
    result = FigureResult("fig03_rmse_vs_depth", TITLES["fig03_rmse_vs_depth"])
    results, gamma = _at_reference(runs, "video", gamma_train)
    if results.empty:
        result.skipped = "no complete video runs" + _at_level(gamma_train)
        return result
    best = _best_per(results, ["task", "model", "dataset", "L"], runs.selection)
    depths = best.groupby(["model", "dataset"], sort=False)["L"].nunique()
    pairs = [pair for pair, count in depths.items() if count >= 2]
    if not pairs:
        result.skipped = (f"every video model and dataset at γ_train = {gamma:g} has runs of a single depth; "
                          "RMSE vs depth needs at least two values of L")
        return result
    hidden = len(pairs) - MAX_ROWS
    pairs = pairs[:MAX_ROWS]
    grid = max((g for g in best["gamma_test_grid"] if isinstance(g, tuple)), key=len)
    low, high = min(grid), max(grid)
    # the lowest γ_test is "in distribution" only where it equals γ_train (0 is clean input, below a noisy γ_train)
    columns = [(f"γ_test = {low:g} (lowest)", low), ("mean over the γ_test grid", None),
               (f"γ_test = {high:g} (most out of distribution)", high)]
    result.caption = (f"Test RMSE of the last layer against depth L at γ_train = {gamma:g}: at the lowest γ_test, "
                      "averaged over the grid, and at the highest γ_test. Per depth and arm: the run "
                      f"{CHOSEN_BY[runs.selection]}. " + MARKS_CAPTION + _not_shown(hidden, "model/dataset pairs")
                      + settings_left_out(best))

    def draw() -> Figure:
        figure, axes = _panels(len(pairs), len(columns))
        for i, (model, dataset) in enumerate(pairs):
            chosen = best[(best["model"] == model) & (best["dataset"] == dataset)]
            for j, (heading, gamma_test) in enumerate(columns):
                ax = axes[i, j]
                for k, arm in enumerate(ARMS):
                    arm_runs = chosen[chosen["arm"] == arm].sort_values("L")
                    if arm_runs.empty:
                        continue
                    values = [runs.curve(r).mean() if gamma_test is None else _at(runs.curve(r), gamma_test)
                              for r in arm_runs["run"]]
                    _depth_line(ax, arm, list(arm_runs["L"].astype(int)), values, arm_runs)
                    for depth, value, (_, run) in zip(arm_runs["L"], values, arm_runs.iterrows()):
                        if _mark(run):
                            # one row per arm, in the arm's colour: arms that end close no longer overprint
                            ax.annotate(_mark(run).strip(), (depth, value), textcoords="offset points",
                                        xytext=(5, 6 - 11 * k), color=ARM_STYLE[arm]["color"], va="center")
                ax.set_xticks(sorted(chosen["L"].astype(int).unique()))
                _title(ax, f"{model} · {dataset}\n{heading}")
                ax.set_xlabel("depth L (number of blocks)")
                _ylabel(axes, i, j, _metric_label("rmse"))
                ax.legend()
        figure.suptitle(_math(f"RMSE vs depth (γ_train = {gamma:g})"))
        return figure

    return _render(draw, out_dir, result)


def _depth_line(ax, arm: str, depths: list[int], values: list[float], arm_runs: pd.DataFrame) -> None:
    """One arm's line against depth by Fig 2's rule (analysis.figure_marks): a segment with a run that is not strictly
    feasible at either end dotted, that run's marker hollow; in the legend the arm, and its dotted line with the marks
    (the runs of one line differ in verdict, so the line's style changes along it)."""
    style = {key: value for key, value in ARM_STYLE[arm].items() if key != "label"}
    rows = [run for _, run in arm_runs.iterrows()]
    for a in range(len(rows) - 1):
        ax.plot(depths[a:a + 2], values[a:a + 2],
                **{**style, **(line_style(rows[a]) or line_style(rows[a + 1])), "marker": "none"})
    for depth, value, run in zip(depths, values, rows):
        ax.plot([depth], [value], **{**style, **line_style(run), "linestyle": "none"})
    label = ARM_STYLE[arm]["label"]
    if not all(figure_marks.not_feasible(run) for run in rows):  # legend entries only: no data
        ax.plot([], [], **style, label=label)
    failed = [run for run in rows if figure_marks.not_feasible(run)]
    if failed:
        ax.plot([], [], **{**style, **line_style(failed[0])}, label=label + "".join(dict.fromkeys(map(_mark, failed))))


# ----------------------------------------------------------------------------------------------- Figs 5, 14, 15

ABLATION_LABEL = {"alpha": "α (required fraction of descent per layer)",
                  "dual_lr": r"dual learning rate $\eta_\lambda$"}


def alpha_ablation(runs: RunTable, out_dir: Path) -> FigureResult:
    """Figs 5 and 14: test metric at three gamma_test against alpha, mean and error bars over seeds."""
    return _ablation(runs, out_dir, "alpha", "fig05_alpha_ablation")


def dual_lr_ablation(runs: RunTable, out_dir: Path) -> FigureResult:
    """Fig 15: test metric at three gamma_test against the dual learning rate, mean and error bars over seeds."""
    return _ablation(runs, out_dir, "dual_lr", "fig15_dual_lr_ablation")


def ablation_groups(runs: RunTable, param: str) -> list[pd.DataFrame]:
    """Sets of complete constrained runs of one cell and grid in which ``param`` takes two values or more.

    The other ablated parameter is held at its most common value in the set, so one sweep that varies
    both alpha and the dual learning rate yields both ablations without mixing them; runs that differ in any other
    config key (the constraint form, detach_prev, ...) are sets of their own, since a point averages seeds of one
    configuration.
    """
    other = {"alpha": "dual_lr", "dual_lr": "alpha"}[param]
    results = with_settings(runs.results)
    results = results[results["constrained"] == True]  # noqa: E712 (a column of objects)
    groups = []
    # per arm too: the paper's dual dynamics and cutlab's are two ablations, not one; and per setting (precision,
    # training steps): a longer run is not another seed of a point
    for _, group in results.groupby(["task", "model", "dataset", "L", "gamma_train", "arm"] + SETTING,
                                    sort=False, dropna=False):
        held = group[other].mode()
        if len(held):
            group = group[group[other] == held.iloc[0]]
        groups += [one.assign(_seed=seed_of(one)) for one in _configurations(group, (param, other))
                   if one[param].nunique() >= 2]
    return sorted(groups, key=lambda group: cell_order(group.iloc[0]))


def _configurations(group: pd.DataFrame, params: tuple[str, str]) -> list[pd.DataFrame]:
    """``group`` split by each config key but ``params`` in which its runs differ (a key a record lacks takes the
    value most runs have): two dual settings at one alpha were averaged into one point and captioned as repeats."""
    varied = [column for column in trial_counts(group) if column.removeprefix("cfg.train.") not in params]
    if not varied:
        return [group]
    values = [group[column].fillna(group[column].mode().iloc[0]).map(repr) for column in varied]
    return [one for _, one in group.groupby(values, sort=False)]


def _ablation(runs: RunTable, out_dir: Path, param: str, stem: str) -> FigureResult:
    result = FigureResult(stem, TITLES[stem])
    title = result.title
    groups = ablation_groups(runs, param)
    if not groups:
        result.skipped = (f"no complete constrained runs of one cell that vary train.{param} (needs two values or "
                          f"more, e.g. python -m cutlab -m train.{param}=...,... seed=0,1,2)")
        return result
    hidden = len(groups) - MAX_ROWS
    groups = groups[:MAX_ROWS]
    seeds = [int(n) for g in groups for n in g.groupby(param)["_seed"].nunique()]
    repeats = sum(len(g) - int(g.groupby(param)["_seed"].nunique().sum()) for g in groups)
    metric = groups[0]["metric"].iloc[0]
    result.caption = (f"Test {METRIC_NAME.get(metric, metric)} of the last layer at three γ_test against "
                      f"train.{param}: mean over seeds with ±1 standard deviation as error bars "
                      f"({_count_range(seeds)} seeds per point); the ERM runs of the same cell as a dashed "
                      "line (mean) and band (±1 std)." + _not_shown(hidden, "cells")
                      + (f" {repeats} runs repeat the seed of another run at their point (the same sweep run again, "
                         "on another machine or into another folder): each seed's runs are averaged into one value "
                         "first, so a repeat is not counted as another seed." if repeats else ""))

    results = with_settings(runs.results)  # the ERM runs beside each point, in its setting

    def draw() -> Figure:
        gammas = [three_gammas(g["gamma_test_grid"].iloc[0]) for g in groups]
        figure, axes = _panels(len(groups), max(len(g) for g in gammas))
        for i, group in enumerate(groups):
            first = group.iloc[0]
            erm = results[(results["arm"] == "erm") & (results["model"] == first["model"])
                          & (results["dataset"] == first["dataset"]) & (results["L"] == first["L"])
                          & np.isclose(results["gamma_train"].astype(float), float(first["gamma_train"]))
                          & (results["gamma_test_grid"] == first["gamma_test_grid"])
                          & (results["precision"] == first["precision"])
                          & ((results["steps"] == first["steps"]) | (results["steps"].isna() & pd.isna(first["steps"])))]
            for j, gamma_test in enumerate(gammas[i]):
                ax = axes[i, j]
                values = pd.DataFrame({param: group[param].astype(float).to_numpy(), "seed": group["_seed"].to_numpy(),
                                       "value": [_at(runs.curve(r), gamma_test) for r in group["run"]]})
                per_seed = values.groupby([param, "seed"])["value"].mean().reset_index()
                stats = per_seed.groupby(param)["value"].agg(["mean", "std", "count"]).fillna({"std": 0.0})
                ax.errorbar(stats.index, stats["mean"], yerr=stats["std"], capsize=3,
                            **{**ARM_STYLE["constrained"], "label": "constrained (mean ± std)"})
                if len(erm):
                    erm_values = pd.Series([_at(runs.curve(r), gamma_test) for r in erm["run"]])
                    erm_values = erm_values.groupby(seed_of(erm).to_numpy()).mean().to_numpy()  # one value a seed
                    mean, std = erm_values.mean(), erm_values.std(ddof=1) if len(erm_values) > 1 else 0.0
                    ax.axhline(mean, color=ARM_STYLE["erm"]["color"], linestyle="--",
                               label=f"ERM (n={len(erm_values)})")
                    ax.axhspan(mean - std, mean + std, color=ARM_STYLE["erm"]["color"], alpha=0.12, linewidth=0)
                if stats.index.max() / max(stats.index.min(), 1e-12) >= 10:
                    ax.set_xscale("log")
                ax.set_xticks(stats.index, [f"{v:g}" for v in stats.index])
                held = distinguishing(pd.DataFrame([g.iloc[0] for g in groups]), first, limit=2)
                _title(ax, f"{cell_label(first)}\n" + (f"{held} · " if held else "") + f"γ_test = {gamma_test:g}")
                ax.set_xlabel(ABLATION_LABEL[param])
                _ylabel(axes, i, j, _metric_label(first["metric"]))
                ax.legend()
            for j in range(len(gammas[i]), axes.shape[1]):
                axes[i, j].set_visible(False)
        figure.suptitle(_math(f"{title.split(' — ')[1]}: error bars over seeds"))
        return figure

    return _render(draw, out_dir, result)


# ----------------------------------------------------------------------------------------------- Figs 1, 7, 13
