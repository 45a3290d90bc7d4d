"""Figures of the layers: layerwise loss (Figs 1, 7, 13), the effect of gamma_train (Fig 9), per-sample descent ratios (Fig 12).

Drawn with the shared style and helpers of :mod:`analysis.figure_kit`."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .collect import RunTable
from . import figure_marks
from .figure_marks import integer_ticks, line_style
from .selection import ARM_LABELS, ARMS, CHOSEN_BY, cell_label
from .figure_kit import (
    ARM_STYLE, FigureResult, GAMMA_TEST, LOSS_LABEL, MARKS_CAPTION, MAX_PANELS, MAX_ROWS, TITLES, _at_level,
    _at_reference, _best_per, _mark, _math, _metric_label, _not_shown, _panels, _render, _title, _ylabel,
    settings_left_out,
)


def loss_label(task: str) -> str:
    """The y label of a layerwise-loss panel: video and text losses are other quantities (Figs 7, 9, 10)."""
    return LOSS_LABEL.get(task, r"mean test loss $\ell_l$")


def layerwise_loss(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> FigureResult:
    """Figs 1, 7, 13: mean test loss per layer, constrained vs ERM, in and out of distribution (from eval.csv).

    One panel per cell; filled markers at the lowest gamma_test, hollow and lighter at the highest (most out of
    distribution).
    """
    result = FigureResult("fig07_layerwise_loss", TITLES["fig07_layerwise_loss"])
    cells = []
    for task in ("video", "text"):
        results, _ = _at_reference(runs, task, gamma_train)
        if not results.empty:
            cells.append(_best_per(results, ["task", "model", "dataset", "L"], runs.selection))
    best = pd.concat(cells) if cells else pd.DataFrame()
    if best.empty:
        result.skipped = "no complete runs" + _at_level(gamma_train)
        return result
    keys = list(dict.fromkeys(zip(best["task"], best["model"], best["dataset"], best["L"], best["gamma_train"])))
    hidden = len(keys) - MAX_PANELS
    keys = keys[:MAX_PANELS]
    result.caption = ("Mean test loss ℓ_l at every layer l (l = 0: before the first block) for the run "
                      f"{CHOSEN_BY[runs.selection]} per arm, at the lowest γ_test (filled markers) and the highest "
                      "(hollow, lighter); a constrained model should descend monotonically. " + MARKS_CAPTION
                      + _not_shown(hidden, "cells") + settings_left_out(*cells))

    # each panel's legend below it: one column where labels are long (three arms, the paper's dual's among them), so
    # that no legend runs into its neighbour's, and the panel as much taller as its legend has lines
    entries = 2 * int(best.groupby(["task", "model", "dataset", "L", "gamma_train"])["arm"].nunique().max())
    legend_columns = 1 if entries > 4 else 2
    legend_lines = math.ceil(entries / legend_columns)

    def draw() -> Figure:
        cols = min(len(keys), 3)
        figure, axes = _panels(math.ceil(len(keys) / cols), cols, width=3.6, height=2.4 + 0.17 * legend_lines)
        for k, (task, model, dataset, depth, gamma) in enumerate(keys):
            ax = axes[k // cols, k % cols]
            chosen = best[(best["task"] == task) & (best["model"] == model) & (best["dataset"] == dataset)
                          & (best["L"] == depth) & (best["gamma_train"] == gamma)]
            spread = []
            for _, run in chosen.iterrows():
                grid = run["gamma_test_grid"]
                for gamma_test, hollow in ((min(grid), False), (max(grid), True)):
                    losses = runs.layer_losses(run["run"], gamma_test)
                    spread += list(losses.to_numpy())
                    style = {**ARM_STYLE[run["arm"]], **line_style(run),
                             "label": f"{ARM_STYLE[run['arm']]['label']}{_mark(run)}, γ_test = {gamma_test:g}"}
                    if hollow:
                        style.update(markerfacecolor="white", alpha=0.6)
                    ax.plot(losses.index, losses.to_numpy(), **{**style, "label": _math(style["label"])})
            if spread and min(spread) > 0 and max(spread) / min(spread) > 30:
                ax.set_yscale("log")  # losses spanning decades: keep every layer readable
            ax.set_xticks(range(int(depth) + 1))
            _title(ax, cell_label({"model": model, "dataset": dataset, "L": depth, "gamma_train": gamma}))
            ax.set_xlabel("layer l (0 = before the first block)")
            _ylabel(axes, k // cols, k % cols, loss_label(task), left=loss_label(keys[k - 1][0]) if k else None)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=legend_columns)  # below: curves cross
        for k in range(len(keys), axes.size):
            axes[k // cols, k % cols].set_visible(False)
        figure.suptitle("Layerwise test loss, constrained vs ERM")
        return figure

    return _render(draw, out_dir, result)


# ----------------------------------------------------------------------------------------------- Fig 9

def gamma_train_effect(runs: RunTable, out_dir: Path) -> FigureResult:
    """Fig 9: test metric vs gamma_test for every gamma_train of a cell, constrained and ERM side by side."""
    result = FigureResult("fig09_gamma_train_effect", TITLES["fig09_gamma_train_effect"])
    cell = ["task", "model", "dataset", "L", "gamma_train"]
    best = _best_per(runs.results, cell, runs.selection) if len(runs.results) else pd.DataFrame()
    if best.empty:
        result.skipped = "no complete runs"
        return result
    levels = best.groupby(["task", "model", "dataset", "L"], sort=False)["gamma_train"].nunique()
    cells = [key for key, count in levels.items() if count >= 2]
    if not cells:
        result.skipped = "every complete cell was trained at a single γ_train; the figure needs two levels or more"
        return result
    hidden = len(cells) - MAX_ROWS
    cells = cells[:MAX_ROWS]
    arms = [arm for arm in ARMS if arm != "constrained_paper" or (best["arm"] == arm).any()]  # its panel: where it ran
    result.caption = ("Test metric of the last layer against γ_test, one curve per training perturbation γ_train "
                      "(lighter = larger), one panel per arm (" + ", ".join(ARM_LABELS[arm] for arm in arms)
                      + f"); per γ_train the run {CHOSEN_BY[runs.selection]}. " + MARKS_CAPTION
                      + _not_shown(hidden, "cells") + settings_left_out(best))
    colours = matplotlib.colormaps["viridis"]

    def draw() -> Figure:
        figure, axes = _panels(len(cells), len(arms))
        for i, (task, model, dataset, depth) in enumerate(cells):
            chosen = best[(best["task"] == task) & (best["model"] == model) & (best["dataset"] == dataset)
                          & (best["L"] == depth)]
            levels_here = sorted(chosen["gamma_train"].astype(float).unique())
            for j, arm in enumerate(arms):
                ax = axes[i, j]
                for _, run in chosen[chosen["arm"] == arm].sort_values("gamma_train").iterrows():
                    curve = runs.curve(run["run"])
                    shade = colours(0.85 * levels_here.index(float(run["gamma_train"])) / max(len(levels_here) - 1, 1))
                    style = {"linestyle": ARM_STYLE[arm]["linestyle"], "marker": ARM_STYLE[arm]["marker"],
                             **line_style(run)}  # a run that is not feasible: dotted, hollow markers
                    ax.plot(curve.index, curve.to_numpy(), color=shade,
                            label=_math(f"γ_train = {run['gamma_train']:g}") + _mark(run), **style)
                _title(ax, f"{model} · {dataset} · L={int(depth)} — {ARM_STYLE[arm]['label']}")
                ax.set_xlabel(GAMMA_TEST)
                _ylabel(axes, i, j, _metric_label(chosen["metric"].iloc[0]))
                if ax.lines:
                    ax.legend()
                else:
                    ax.text(0.5, 0.5, f"no complete {ARM_STYLE[arm]['label']} runs", ha="center", va="center",
                            transform=ax.transAxes)
        figure.suptitle(_math("Effect of the training perturbation γ_train"))
        return figure

    return _render(draw, out_dir, result)


# ----------------------------------------------------------------------------------------------- Fig 12

def descent_ratios(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> FigureResult:
    """Fig 12: histogram of per-sample descent ratios l_l / l_{l-1}, with mean, median and fraction < 1."""
    result = FigureResult("fig12_descent_ratios", TITLES["fig12_descent_ratios"])
    panels = []  # (constrained run, its ratios, gamma_test, ERM counterpart's ratios or None)
    hidden, chosen = 0, []
    for task in ("video", "text"):
        results, _ = _at_reference(runs, task, gamma_train)
        results = results[results["has_sample_losses"].astype(bool)]
        if results.empty:
            continue
        best = _best_per(results, ["task", "model", "dataset", "L"], runs.selection)
        chosen.append(best)
        for _, run in best[best["arm"] != "erm"].iterrows():
            if len(panels) >= MAX_PANELS:
                hidden += 1
                continue
            mine = sample_ratios(runs, run)
            if mine is None:
                continue
            erm = best[(best["arm"] == "erm") & (best["model"] == run["model"]) & (best["dataset"] == run["dataset"])
                       & (best["L"] == run["L"])]
            theirs = sample_ratios(runs, erm.iloc[0], mine[1]) if len(erm) else None
            panels.append((run, mine[0], mine[1], theirs[0] if theirs else None))
    if not panels:
        result.skipped = f"no complete constrained run{_at_level(gamma_train)} with a readable sample_losses.csv"
        return result
    result.caption = ("Per-sample ratios ℓ_l / ℓ_{l−1} over every test sample and layer l = 1…L, at the "
                      "γ_test nearest γ_train (sample_losses.csv holds the test grid; a panel whose γ_test is not "
                      "γ_train says so, and gives the fraction at γ_train itself from summary.json's "
                      "in_distribution), for the constrained run "
                      f"{CHOSEN_BY[runs.selection]} (filled) and its ERM counterpart (outline). A ratio below 1 is "
                      "a layer that lowers the loss; the constraint asks for 1 − α. " + MARKS_CAPTION
                      + _not_shown(hidden, "cells") + settings_left_out(*chosen))

    def stats(values: np.ndarray) -> str:
        return f"mean {values.mean():.2f} · median {np.median(values):.2f} · {100 * (values < 1).mean():.1f} % < 1"

    def draw() -> Figure:
        cols = min(len(panels), 3)
        rows = math.ceil(len(panels) / cols)
        # legends in one column below each panel and the statistics on their own lines: side by side, the long arm
        # names ran past the panel into its neighbour
        figure, axes = _panels(rows, cols, width=3.8, height=3.6)
        for k, (run, mine, gamma_test, theirs) in enumerate(panels):
            ax = axes[k // cols, k % cols]
            values = [mine] + ([theirs] if theirs is not None else [])
            upper = float(max(1.5, min(4.0, max(np.quantile(v, 0.99) for v in values) * 1.05)))
            bins = np.linspace(0.0, upper, 41)
            style = ARM_STYLE[run["arm"]]
            where, at_train = not_in_distribution(run, gamma_test)
            text = f"{style['label']}{_mark(run)}:\n  {stats(mine)}{at_train}"
            ax.hist(np.clip(mine, 0, upper), bins=bins, color=style["color"], alpha=0.55, label=style["label"],
                    **figure_marks.bar_style(run))
            if theirs is not None:
                ax.hist(np.clip(theirs, 0, upper), bins=bins, histtype="step", linestyle="--", linewidth=1.4,
                        color=ARM_STYLE["erm"]["color"], label="ERM")
                text += f"\nERM:\n  {stats(theirs)}"
            ax.axvline(1.0, color="black", linestyle=":", linewidth=1.0, label="ratio 1 (no descent)")
            alpha = run.get("alpha")
            if alpha is not None and not pd.isna(alpha):
                ax.axvline(1.0 - float(alpha), color=style["color"], linestyle="-.", linewidth=1.0,
                           label=f"required 1 − α = {1 - float(alpha):.2f}")
            ax.set_ylim(top=ax.get_ylim()[1] * (1.5 if theirs is None else 1.9))  # headroom for the statistics box
            ax.text(0.02, 0.97, text, transform=ax.transAxes, ha="left", va="top", fontsize=7,
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9, "edgecolor": "0.8"})
            _title(ax, f"{cell_label(run)}\n{figure_marks.settings(run)}\n"
                       # on a line of its own: beside "not in distribution" it ran into the next panel's title
                       f"γ_test = {gamma_test:g}{where}\n(ratios > {upper:.2g} in the last bin)")
            ax.set_xlabel(r"per-sample ratio $\ell_l / \ell_{l-1}$ (l = 1…L)")
            integer_ticks(ax.yaxis)  # a count of samples
            _ylabel(axes, k // cols, k % cols, "count (samples × layers)")
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
        for k in range(len(panels), axes.size):
            axes[k // cols, k % cols].set_visible(False)
        figure.suptitle("Per-sample descent ratios")
        return figure

    return _render(draw, out_dir, result)


def not_in_distribution(run: pd.Series, gamma_test: float) -> tuple[str, str]:
    """(a panel title's note, a statistics line) where the grid's gamma_test nearest gamma_train is not gamma_train
    (gamma 0.09 against a grid of 0, 0.2, ...: clean input): the share of ratios below 1 at gamma_train itself, from
    the run's summary (in_distribution); ("", "") where it is gamma_train."""
    gamma_train = float(run["gamma_train"])
    if np.isclose(gamma_test, gamma_train):
        return "", ""
    at_train = run.get("fraction_decreasing_id")
    line = "" if at_train is None or pd.isna(at_train) else \
        f"\n  at γ_train {gamma_train:g}: {100 * float(at_train):.1f} % < 1"
    return " (nearest γ_train; not in distribution)", line


def sample_ratios(runs: RunTable, run: pd.Series, gamma_test: float | None = None) -> tuple[np.ndarray, float] | None:
    """Every per-sample ratio l_l / l_{l-1} (l = 1..L) of ``run`` at the gamma_test nearest ``gamma_test``
    (default: the run's gamma_train), with that gamma_test; None without a readable sample_losses.csv."""
    samples = runs.sample_losses(run["run"])
    if samples is None or samples.empty:
        return None
    grid = samples["gamma_test"].unique()
    target = float(run["gamma_train"]) if gamma_test is None else gamma_test
    nearest = float(grid[np.argmin(np.abs(grid - target))])
    losses = samples[np.isclose(samples["gamma_test"], nearest)]
    columns = sorted((c for c in losses.columns if c.startswith("loss_")), key=lambda c: int(c.split("_")[1]))
    values = losses[columns].to_numpy(float)
    # as cutlab's Evaluation.ratio_stats: a pair whose l_{l-1} is 0 (the layer reproduces that sample) has no ratio
    previous, current = values[:, :-1].ravel(), values[:, 1:].ravel()
    defined = previous > 0
    return current[defined] / previous[defined], nearest


# ----------------------------------------------------------------------------------------------- dual variables
