"""The paper's figures from run records: matplotlib, PNG and PDF, readable in print.

Every figure function takes a :class:`~analysis.collect.RunTable` and an output folder and returns a
:class:`FigureResult`: the files written, or the reason the figure was skipped (no data for it).
Constrained runs are always blue, solid, circles; constrained runs with the paper's dual dynamics
bluish green, dash-dotted, triangles; ERM runs vermillion, dashed, squares (Okabe-Ito colours,
distinguishable in grey-scale print and by colour-blind readers). Curves show the run that
is best on validation per arm (``analysis.selection``), as the paper's figures do; the ablations
show every seed (mean and error bars). Only ``matplotlib.figure.Figure`` is used, never pyplot, so
nothing depends on (or changes) a global backend: PNG is written by Agg, PDF by the PDF backend.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.collect import RunTable
from analysis import figure_marks, verdicts
from analysis.figure_marks import integer_ticks, line_style
from analysis.selection import (
    ARM_LABELS, ARMS, cell_label, cell_order, dual_setting_label, reference_gamma_train, select_best, sort_cells,
    three_gammas,
)

ARM_STYLE = {
    "constrained": {"color": "#0072B2", "linestyle": "-", "marker": "o", "label": ARM_LABELS["constrained"]},
    "constrained_paper": {"color": "#009E73", "linestyle": "-.", "marker": "^",
                          "label": ARM_LABELS["constrained_paper"]},
    "erm": {"color": "#D55E00", "linestyle": "--", "marker": "s", "label": ARM_LABELS["erm"]},
}
RC = {
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 7.5, "xtick.labelsize": 8,
    "ytick.labelsize": 8, "figure.titlesize": 10, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
    "axes.spines.top": False, "axes.spines.right": False, "lines.linewidth": 1.6, "lines.markersize": 4.5,
    "legend.frameon": False, "savefig.dpi": 170, "pdf.fonttype": 42,  # TrueType fonts: editable, print-safe PDFs
}
GAMMA_TEST = r"$\gamma_\mathrm{test}$ (noise std in units of $\sigma_x$)"
METRIC_NAME = {"rmse": "RMSE", "accuracy": "accuracy"}
METRIC_LABEL = {"rmse": "test RMSE (0–255 pixel scale)", "accuracy": "test accuracy (fraction correct)"}
LOSS_LABEL = {"video": "mean test loss $\\ell_l$\n(½‖x − Φ$_l$‖², pixels in [0, 1])",
              "text": "mean test loss $\\ell_l$\n(cross-entropy, nats)"}
MAX_ROWS = 6  # rows of panels per figure; more cells are listed as not shown, never silently dropped
MAX_PANELS = 9  # panels of the one-panel-per-run/cell figures
MAX_SETTINGS = 8  # lines per panel of the constraint-satisfaction figure (plus the paper's dual and ERM)
#: history.csv columns (0/1 per step) of cutlab.core.feasibility_clock, and what each panel shows
MET_COLUMNS = {"constraints_met_strictly": "met strictly (no slack)",
               "constraints_met": "met within the resilience slack"}
OKABE_ITO = ("#0072B2", "#CC79A7", "#E69F00", "#56B4E9", "#009E73", "#000000", "#F0E442", "#999999")
#: under every figure that marks verdicts: the legend's marks and the drawing's
MARKS_CAPTION = verdicts.CAPTION + " " + figure_marks.CAPTION
#: file stem -> title, in the report's order (the paper's figure numbers)
TITLES = {
    "fig02_rmse_vs_gamma_test": "Fig 2 — RMSE vs γ_test per model and dataset",
    "fig03_rmse_vs_depth": "Fig 3 — RMSE vs depth",
    "fig04_accuracy_vs_gamma_test": "Fig 4 — accuracy vs γ_test per model and dataset",
    "fig05_alpha_ablation": "Figs 5, 14 — α ablation",
    "fig15_dual_lr_ablation": "Fig 15 — dual learning-rate ablation",
    "fig07_layerwise_loss": "Figs 1, 7, 13 — layerwise loss, constrained vs ERM",
    "fig09_gamma_train_effect": "Fig 9 — effect of γ_train",
    "fig12_descent_ratios": "Fig 12 — per-sample descent ratios",
    "dual_variables": "Dual variables λ_l over training",
    "constraint_satisfaction": "Constraint satisfaction over training per dual setting",
}


@dataclass
class FigureResult:
    """One figure: ``paths`` written (PNG, PDF), or ``skipped`` with the reason."""

    name: str  # file stem
    title: str  # which of the paper's figures, in words
    caption: str = ""
    paths: list[Path] = field(default_factory=list)
    skipped: str | None = None

    @property
    def written(self) -> bool:
        return self.skipped is None


# ----------------------------------------------------------------------------------------------- helpers

def _math(text: str) -> str:
    """Typeset the gamma names (γ_test, γ_train) as math in titles and legends."""
    return text.replace("γ_test", r"$\gamma_\mathrm{test}$").replace("γ_train", r"$\gamma_\mathrm{train}$")


def _title(ax, text: str) -> None:
    ax.set_title(_math(text))


def _ylabel(axes: np.ndarray, i: int, j: int, text: str) -> None:
    """Y labels on the first column only: the rows share their quantity, and long labels would collide."""
    if j == 0:
        axes[i, j].set_ylabel(text)


def distinguishing(frame: pd.DataFrame, run: pd.Series, limit: int = 3, width: int = 48) -> str:
    """The config values that tell ``run`` apart from the other runs of ``frame`` (e.g. ``dual_lr=0.05``).

    Training settings come first; grids and other list values are left out (too long for a title).
    """
    # cfg.model.paper.*: the paper's reference values (its α, ε), not the run's; α, ε, seed: in the title already
    ignored = ("cfg.paths.", "cfg.wandb.", "cfg.progress", "cfg.run_name", "cfg.device", "cfg.checkpoint.",
               "cfg.eval.", "cfg.model.name", "cfg.data.name", "cfg.L", "cfg.gamma", "cfg.seed", "cfg.model.paper.",
               "cfg.train.alpha", "cfg.train.epsilon", "cfg.threads")
    columns = [c for c in frame.columns if c.startswith("cfg.") and not c.startswith(ignored)
               and not isinstance(run[c], tuple) and frame[c].astype(str).nunique() > 1]
    columns.sort(key=lambda c: (not c.startswith("cfg.train."), c))

    def short(value) -> str:
        return f"{value:g}" if isinstance(value, float) else str(value)

    text = " · ".join(f"{c.rsplit('.', 1)[-1]}={short(run[c])}" for c in columns[:limit])
    return text if len(text) <= width else text[: width - 1] + "…"


def _metric_label(metric: str) -> str:
    return METRIC_LABEL.get(metric, f"test {metric}")


def _panels(rows: int, cols: int, width: float = 3.3, height: float = 2.6) -> tuple[Figure, np.ndarray]:
    # at least 5 inches wide: a single panel must still hold the figure's title on one line
    figure = Figure(figsize=(max(width * cols, 5.0), height * rows + 0.5), layout="constrained")
    return figure, figure.subplots(rows, cols, squeeze=False)


def _save(figure: Figure, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, metadata in ((".png", None), (".pdf", {"CreationDate": None})):  # no timestamp: same runs, same PDF
        path = out_dir / f"{stem}{suffix}"
        figure.savefig(path, metadata=metadata)
        figure.set_layout_engine("none")  # keep the layout the first save computed: the second needs no new pass
        paths.append(path)
    return paths


def _render(draw: Callable[[], Figure], out_dir: Path, result: FigureResult) -> FigureResult:
    with matplotlib.rc_context(RC):
        result.paths = _save(draw(), out_dir, result.name)
    return result


def _at(curve: pd.Series, gamma: float) -> float:
    """The curve's value at the grid point nearest ``gamma``."""
    return float(curve.iloc[int(np.argmin(np.abs(curve.index.to_numpy(dtype=float) - gamma)))])


def _mark(run: pd.Series) -> str:
    """`` †`` / `` ≈`` / `` ∅`` after a run's name when it is not strictly feasible (analysis.verdicts)."""
    return f" {verdicts.mark(run.get('verdict'))}" if verdicts.mark(run.get("verdict")) else ""


def _at_reference(runs: RunTable, task: str, gamma_train: float | None) -> tuple[pd.DataFrame, float | None]:
    """Complete runs of ``task`` at ``gamma_train`` (default: the level with the most cells)."""
    gamma = gamma_train if gamma_train is not None else reference_gamma_train(runs.runs, task)
    results = runs.results[runs.results["task"] == task]
    if gamma is None:
        return results.iloc[0:0], None
    return results[np.isclose(results["gamma_train"].astype(float), gamma)], gamma


def _best_per(results: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Best run by validation per ``keys`` (+ arm); among different gamma_test grids, the densest grid wins."""
    best = select_best(results, keys=keys + ["arm", "gamma_test_grid"])
    if best.empty:
        return best
    best["_points"] = best["gamma_test_grid"].map(lambda grid: len(grid) if isinstance(grid, tuple) else 0)
    best = best.sort_values(["_points", "n_runs"], ascending=False, kind="stable")
    return sort_cells(best.drop_duplicates(keys + ["arm"]).drop(columns="_points"))


def _count_range(counts: list[int]) -> str:
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"


def _not_shown(count: int, what: str) -> str:
    return f" {count} more {what} are not shown." if count > 0 else ""


# ----------------------------------------------------------------------------------------------- Figs 2 and 4

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
        at = f" at γ_train = {gamma_train:g}" if gamma_train is not None else ""
        result.skipped = (f"no complete {task} runs{at}"
                          + (" (text classification runs, metric accuracy)" if task == "text" else ""))
        return result
    best = _best_per(results, ["task", "model", "dataset"])
    models = list(dict.fromkeys(best["model"]))
    datasets = list(dict.fromkeys(best["dataset"]))
    metric = best["metric"].iloc[0]
    result.caption = (f"Test {METRIC_NAME.get(metric, metric)} of the last layer against the test perturbation "
                      f"γ_test, at γ_train = {gamma:g}. "
                      "Per model, dataset and arm: the run best on validation over depths L and seeds (its L in the "
                      "legend). " + MARKS_CAPTION)

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
    """Fig 3: test RMSE against depth L, in distribution (lowest gamma_test), on average, and most OOD."""
    result = FigureResult("fig03_rmse_vs_depth", TITLES["fig03_rmse_vs_depth"])
    results, gamma = _at_reference(runs, "video", gamma_train)
    if results.empty:
        result.skipped = "no complete video runs"
        return result
    best = _best_per(results, ["task", "model", "dataset", "L"])
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
    columns = [(f"γ_test = {low:g} (in distribution)", low), ("mean over the γ_test grid", None),
               (f"γ_test = {high:g} (most out of distribution)", high)]
    result.caption = (f"Test RMSE of the last layer against depth L at γ_train = {gamma:g}: at the lowest γ_test, "
                      "averaged over the grid, and at the highest γ_test. Per depth and arm: the run best on "
                      "validation. " + MARKS_CAPTION + _not_shown(hidden, "model/dataset pairs"))

    def draw() -> Figure:
        figure, axes = _panels(len(pairs), len(columns))
        for i, (model, dataset) in enumerate(pairs):
            chosen = best[(best["model"] == model) & (best["dataset"] == dataset)]
            for j, (heading, gamma_test) in enumerate(columns):
                ax = axes[i, j]
                for arm in ARMS:
                    arm_runs = chosen[chosen["arm"] == arm].sort_values("L")
                    if arm_runs.empty:
                        continue
                    values = [runs.curve(r).mean() if gamma_test is None else _at(runs.curve(r), gamma_test)
                              for r in arm_runs["run"]]
                    ax.plot(arm_runs["L"].astype(int), values, **ARM_STYLE[arm])
                    for depth, value, (_, run) in zip(arm_runs["L"], values, arm_runs.iterrows()):
                        if _mark(run):
                            ax.annotate(_mark(run).strip(), (depth, value), textcoords="offset points", xytext=(4, 4))
                        if figure_marks.not_feasible(run):  # a hollow marker over the arm's: not feasible
                            ax.plot([int(depth)], [value], linestyle="none", marker=ARM_STYLE[arm]["marker"],
                                    color=ARM_STYLE[arm]["color"], markerfacecolor="white", zorder=3)
                ax.set_xticks(sorted(chosen["L"].astype(int).unique()))
                _title(ax, f"{model} · {dataset}\n{heading}")
                ax.set_xlabel("depth L (number of blocks)")
                _ylabel(axes, i, j, _metric_label("rmse"))
                ax.legend()
        figure.suptitle(_math(f"RMSE vs depth (γ_train = {gamma:g})"))
        return figure

    return _render(draw, out_dir, result)


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
    both alpha and the dual learning rate yields both ablations without mixing them.
    """
    other = {"alpha": "dual_lr", "dual_lr": "alpha"}[param]
    results = runs.results[runs.results["constrained"] == True]  # noqa: E712 (a column of objects)
    groups = []
    # per arm too: the paper's dual dynamics and cutlab's are two ablations, not one
    for _, group in results.groupby(["task", "model", "dataset", "L", "gamma_train", "gamma_test_grid", "arm"],
                                    sort=False, dropna=False):
        held = group[other].mode()
        if len(held):
            group = group[group[other] == held.iloc[0]]
        if group[param].nunique() >= 2:
            groups.append(group)
    return sorted(groups, key=lambda group: cell_order(group.iloc[0]))


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
    seeds = [int(n) for g in groups for n in g.groupby(param).size()]
    metric = groups[0]["metric"].iloc[0]
    result.caption = (f"Test {METRIC_NAME.get(metric, metric)} of the last layer at three γ_test against "
                      f"train.{param}: mean over seeds with ±1 standard deviation as error bars "
                      f"({_count_range(seeds)} seeds per point); the ERM runs of the same cell as a dashed "
                      "line (mean) and band (±1 std)." + _not_shown(hidden, "cells"))

    def draw() -> Figure:
        gammas = [three_gammas(g["gamma_test_grid"].iloc[0]) for g in groups]
        figure, axes = _panels(len(groups), max(len(g) for g in gammas))
        for i, group in enumerate(groups):
            first = group.iloc[0]
            erm = runs.results[(runs.results["arm"] == "erm") & (runs.results["model"] == first["model"])
                               & (runs.results["dataset"] == first["dataset"]) & (runs.results["L"] == first["L"])
                               & np.isclose(runs.results["gamma_train"].astype(float), float(first["gamma_train"]))
                               & (runs.results["gamma_test_grid"] == first["gamma_test_grid"])]
            for j, gamma_test in enumerate(gammas[i]):
                ax = axes[i, j]
                values = pd.DataFrame({param: group[param].astype(float).to_numpy(),
                                       "value": [_at(runs.curve(r), gamma_test) for r in group["run"]]})
                stats = values.groupby(param)["value"].agg(["mean", "std", "count"]).fillna({"std": 0.0})
                ax.errorbar(stats.index, stats["mean"], yerr=stats["std"], capsize=3,
                            **{**ARM_STYLE["constrained"], "label": "constrained (mean ± std)"})
                if len(erm):
                    erm_values = np.array([_at(runs.curve(r), gamma_test) for r in erm["run"]])
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

def layerwise_loss(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> FigureResult:
    """Figs 1, 7, 13: mean test loss per layer, constrained vs ERM, in and out of distribution (from eval.csv).

    One panel per cell; filled markers at the lowest gamma_test (in distribution), hollow and lighter at
    the highest (most out of distribution).
    """
    result = FigureResult("fig07_layerwise_loss", TITLES["fig07_layerwise_loss"])
    cells = []
    for task in ("video", "text"):
        results, _ = _at_reference(runs, task, gamma_train)
        if not results.empty:
            cells.append(_best_per(results, ["task", "model", "dataset", "L"]))
    best = pd.concat(cells) if cells else pd.DataFrame()
    if best.empty:
        result.skipped = "no complete runs" + (f" at γ_train = {gamma_train:g}" if gamma_train is not None else "")
        return result
    keys = list(dict.fromkeys(zip(best["task"], best["model"], best["dataset"], best["L"], best["gamma_train"])))
    hidden = len(keys) - MAX_PANELS
    keys = keys[:MAX_PANELS]
    result.caption = ("Mean test loss ℓ_l at every layer l (l = 0: before the first block) for the run best on "
                      "validation per arm, at the lowest γ_test (filled markers) and the highest (hollow, lighter); "
                      "a constrained model should descend monotonically. " + MARKS_CAPTION
                      + _not_shown(hidden, "cells"))

    def draw() -> Figure:
        cols = min(len(keys), 3)
        figure, axes = _panels(math.ceil(len(keys) / cols), cols, width=3.6, height=2.9)
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
            _ylabel(axes, k // cols, k % cols, LOSS_LABEL.get(task, r"mean test loss $\ell_l$"))
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)  # below: curves cross anywhere
        for k in range(len(keys), axes.size):
            axes[k // cols, k % cols].set_visible(False)
        figure.suptitle("Layerwise test loss, constrained vs ERM")
        return figure

    return _render(draw, out_dir, result)


# ----------------------------------------------------------------------------------------------- Fig 9

def gamma_train_effect(runs: RunTable, out_dir: Path) -> FigureResult:
    """Fig 9: test metric vs gamma_test for every gamma_train of a cell, constrained and ERM side by side."""
    result = FigureResult("fig09_gamma_train_effect", TITLES["fig09_gamma_train_effect"])
    best = (_best_per(runs.results, ["task", "model", "dataset", "L", "gamma_train"]) if len(runs.results)
            else pd.DataFrame())
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
                      + "); per γ_train the run "
                      "best on validation. " + MARKS_CAPTION + _not_shown(hidden, "cells"))
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
    hidden = 0
    for task in ("video", "text"):
        results, _ = _at_reference(runs, task, gamma_train)
        results = results[results["has_sample_losses"].astype(bool)]
        if results.empty:
            continue
        best = _best_per(results, ["task", "model", "dataset", "L"])
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
        result.skipped = "no complete constrained run with a readable sample_losses.csv"
        return result
    result.caption = ("Per-sample ratios ℓ_l / ℓ_{l−1} over every test sample and layer l = 1…L, at the "
                      "γ_test nearest γ_train (in distribution), for the constrained run best on validation "
                      "(filled) and its ERM counterpart (outline). A ratio below 1 is a layer that lowers the loss; "
                      "the constraint asks for 1 − α. " + MARKS_CAPTION
                      + _not_shown(hidden, "cells"))

    def stats(values: np.ndarray) -> str:
        return f"mean {values.mean():.2f} · median {np.median(values):.2f} · {100 * (values < 1).mean():.1f} % < 1"

    def draw() -> Figure:
        cols = min(len(panels), 3)
        rows = math.ceil(len(panels) / cols)
        figure, axes = _panels(rows, cols, width=3.6, height=2.9)
        for k, (run, mine, gamma_test, theirs) in enumerate(panels):
            ax = axes[k // cols, k % cols]
            values = [mine] + ([theirs] if theirs is not None else [])
            upper = float(max(1.5, min(4.0, max(np.quantile(v, 0.99) for v in values) * 1.05)))
            bins = np.linspace(0.0, upper, 41)
            style = ARM_STYLE[run["arm"]]
            text = f"{style['label']}{_mark(run)}: {stats(mine)}"
            ax.hist(np.clip(mine, 0, upper), bins=bins, color=style["color"], alpha=0.55, label=style["label"],
                    **figure_marks.bar_style(run))
            if theirs is not None:
                ax.hist(np.clip(theirs, 0, upper), bins=bins, histtype="step", linestyle="--", linewidth=1.4,
                        color=ARM_STYLE["erm"]["color"], label="ERM")
                text += f"\nERM: {stats(theirs)}"
            ax.axvline(1.0, color="black", linestyle=":", linewidth=1.0, label="ratio 1 (no descent)")
            alpha = run.get("alpha")
            if alpha is not None and not pd.isna(alpha):
                ax.axvline(1.0 - float(alpha), color=style["color"], linestyle="-.", linewidth=1.0,
                           label=f"required 1 − α = {1 - float(alpha):.2f}")
            ax.set_ylim(top=ax.get_ylim()[1] * 1.35)  # headroom for the statistics box
            ax.text(0.02, 0.97, text, transform=ax.transAxes, ha="left", va="top", fontsize=7,
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9, "edgecolor": "0.8"})
            _title(ax, f"{cell_label(run)}\n{figure_marks.settings(run)}\n"
                       f"γ_test = {gamma_test:g} (ratios > {upper:.2g} in the last bin)")
            ax.set_xlabel(r"per-sample ratio $\ell_l / \ell_{l-1}$ (l = 1…L)")
            integer_ticks(ax.yaxis)  # a count of samples
            _ylabel(axes, k // cols, k % cols, "count (samples × layers)")
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
        for k in range(len(panels), axes.size):
            axes[k // cols, k % cols].set_visible(False)
        figure.suptitle("Per-sample descent ratios")
        return figure

    return _render(draw, out_dir, result)


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
    # the guard of cutlab's Evaluation.ratios: a zero loss divides by the smallest float, not by zero
    return (values[:, 1:] / np.maximum(values[:, :-1], np.finfo(float).tiny)).ravel(), nearest


# ----------------------------------------------------------------------------------------------- dual variables

def dual_variables(runs: RunTable, out_dir: Path, limit: int = 6) -> FigureResult:
    """The multipliers lambda_l over training (history.csv), one panel per constrained run, partial ones too.

    At most ``limit`` panels: the runs the tables report first, then failed and partial runs, then the rest.
    """
    result = FigureResult("dual_variables", TITLES["dual_variables"])
    frame = runs.runs[(runs.runs["constrained"] == True) & runs.runs["has_history"].astype(bool)]  # noqa: E712
    frame = frame[[bool(runs.history_of(r).filter(like="lambda_").notna().any(axis=None)) for r in frame["run"]]] \
        if len(frame) else frame
    if frame.empty:
        result.skipped = "no constrained run with a history.csv holding multipliers (lambda_l)"
        return result
    # the runs the tables report first, then the failed and partial ones (what a user debugs), then the rest
    selected = set(select_best(runs.runs)["run"])
    frame = sort_cells(frame)
    priority = [0 if r in selected else 1 if s != "complete" else 2 for r, s in zip(frame["run"], frame["state"])]
    frame = frame.assign(_priority=priority).sort_values("_priority", kind="stable").drop(columns="_priority")
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
    return f"{name}\n{figure_marks.settings(run)}" + (f" · {extra}" if extra else "") + f"\n{state}"


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
    """Fraction of runs whose smoothed training constraints are met at each step, one line per dual setting."""
    result = FigureResult("constraint_satisfaction", TITLES["constraint_satisfaction"])
    curves, counts = satisfaction_by_setting(runs)
    if not curves:
        result.skipped = ("no complete run with constraints_met_strictly in its history.csv (records written before "
                          "time to feasibility was measured lack it)")
        return result
    results = runs.results
    paper = {dual_setting_label(r) for _, r in results[results["arm"] == "constrained_paper"].iterrows()}
    erm = dual_setting_label({"arm": "erm"})
    shown = _shown_settings(curves, paper | {erm})
    hidden = len(curves) - len(shown)
    result.caption = ("Fraction of the complete runs of each dual setting whose smoothed training constraints "
                      "(an exponential moving average of the layer losses over about 10 steps, "
                      "cutlab.core.feasibility_clock) are met at each step: strictly (left) and within the "
                      "resilience slack (right), among the runs that reached the step (cells and budgets differ "
                      "in length). One line per dual setting: constraint form · dual optimiser and its learning "
                      "rate · detach_prev · update order · restarts · resilience (n = runs); the paper's dual "
                      "dash-dotted, ERM (no dual, the same check) dashed. Runs recorded before this was measured "
                      "are left out." + _not_shown(hidden, "dual settings (ranked by the mean strict fraction)"))

    def style(k: int, setting: str) -> dict:
        if setting == erm:
            return {"color": ARM_STYLE["erm"]["color"], "linestyle": "--"}
        colour = OKABE_ITO[k % len(OKABE_ITO)]
        return {"color": colour, "linestyle": "-." if setting in paper else "-"}

    def draw() -> Figure:
        columns = [c for c in MET_COLUMNS if any(c in curve for curve in curves.values())]
        figure, axes = _panels(1, len(columns), width=4.2, height=3.4)
        for j, column in enumerate(columns):
            ax = axes[0, j]
            for k, setting in enumerate(shown):
                curve = curves[setting]
                if column in curve:
                    ax.plot(curve.index, curve[column].to_numpy(), linewidth=1.4, **style(k, setting),
                            label=f"{setting} (n={counts[setting]})")
            ax.set_ylim(-0.03, 1.05)
            _title(ax, MET_COLUMNS[column])
            ax.set_xlabel("training step")
            integer_ticks(ax.xaxis)
            _ylabel(axes, 0, j, "fraction of runs\nwith constraints met")
        axes[0, 0].legend(loc="upper left", bbox_to_anchor=(0.0, -0.2), ncol=1)  # below: labels are long
        figure.suptitle("Constraint satisfaction over training, per dual setting")
        return figure

    return _render(draw, out_dir, result)


# ----------------------------------------------------------------------------------------------- all of them

#: file stem -> the function that draws it
FIGURES: dict[str, Callable[..., FigureResult]] = {
    "fig02_rmse_vs_gamma_test": rmse_vs_gamma, "fig03_rmse_vs_depth": rmse_vs_depth,
    "fig04_accuracy_vs_gamma_test": accuracy_vs_gamma, "fig05_alpha_ablation": alpha_ablation,
    "fig15_dual_lr_ablation": dual_lr_ablation, "fig07_layerwise_loss": layerwise_loss,
    "fig09_gamma_train_effect": gamma_train_effect, "fig12_descent_ratios": descent_ratios,
    "dual_variables": dual_variables, "constraint_satisfaction": constraint_satisfaction,
}
#: the file stems the figures are written under (a report folder's own files)
STEMS = tuple(TITLES)


def make_figures(runs: RunTable, out_dir: Path, gamma_train: float | None = None) -> list[FigureResult]:
    """Every figure, in the paper's order; each either written (PNG + PDF) or skipped with its reason.

    ``gamma_train`` fixes the training level of the figures drawn at one level (default: per task, the
    level with the most cells).
    """
    results = []
    for stem, figure in FIGURES.items():
        takes_gamma = "gamma_train" in inspect.signature(figure).parameters
        try:
            results.append(figure(runs, Path(out_dir), gamma_train=gamma_train) if takes_gamma
                           else figure(runs, Path(out_dir)))
        except Exception as error:  # one figure's unexpected data must not cost the whole report: say so in it
            reason = f"could not be drawn ({type(error).__name__}: {error})"
            results.append(FigureResult(stem, TITLES[stem], skipped=reason))
    return results
