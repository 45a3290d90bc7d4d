"""What every figure of :mod:`analysis.figures` shares: the arms' styles (see there), titles, the result type,
panels, labels and saving (Agg for PNG, the PDF backend for PDF; never pyplot)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cutlab.atomic import atomic_file

from .collect import RunTable
from . import figure_marks, verdicts
from .selection import (ARM_LABELS, DEFAULT_PRECISION, NOT_TRIAL_KEYS, RESULT_NEUTRAL_SECTIONS, SETTING,
                        reference_gamma_train, select_best, sort_cells)

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
    """Typeset the gamma names (γ_test, γ_train) as math in titles and legends; any other ``$`` (a run folder's or a
    data root's name) is drawn as written, where matplotlib read it as math (garbled, or a parse error)."""
    escaped = text.replace("$", r"\$")
    return escaped.replace("γ_test", r"$\gamma_\mathrm{test}$").replace("γ_train", r"$\gamma_\mathrm{train}$")


def _title(ax, text: str) -> None:
    ax.set_title(_math(text))


def _ylabel(axes: np.ndarray, i: int, j: int, text: str, left: str | None = None) -> None:
    """Y labels on the first column only: the rows share their quantity, and long labels would collide. A panel whose
    quantity differs from its left neighbour's (``left``: that panel's label; a video panel beside a text one) is
    labelled too, so that no panel reads its row's label for another quantity."""
    if j == 0 or (left is not None and left != text):
        axes[i, j].set_ylabel(text)


def distinguishing(frame: pd.DataFrame, run: pd.Series, limit: int = 3, width: int = 48) -> str:
    """The config values that tell ``run`` apart from the other runs of ``frame`` (e.g. ``dual_lr=0.05``).

    Training settings come first; grids and other list values are left out (too long for a title).
    """
    # cfg.model.paper.*: the paper's reference values (its α, ε), not the run's; α, ε, seed: in the title already
    ignored = ("cfg.paths.", "cfg.wandb.", "cfg.progress", "cfg.run_name", "cfg.device", "cfg.checkpoint.",
               "cfg.eval.", "cfg.model.name", "cfg.data.name", "cfg.L", "cfg.gamma", "cfg.seed", "cfg.model.paper.",
               "cfg.train.alpha", "cfg.train.epsilon", "cfg.threads")
    # a model's _target_ (the class of one's own model) follows from its name, and is long
    # keys that do not change a result (launcher.max_parallel, checkpointing) never tell runs apart, as in the tables
    neutral = tuple(f"cfg.{key}" for key in (*NOT_TRIAL_KEYS, *(f"{s}." for s in RESULT_NEUTRAL_SECTIONS)))
    columns = [c for c in frame.columns if c.startswith("cfg.") and not c.startswith(ignored + neutral)
               and not c.endswith("._target_") and not isinstance(run[c], tuple) and frame[c].astype(str).nunique() > 1]
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
        drawn = io.BytesIO()  # drawn whole first: savefig onto the path left a cut-off file on a full disk
        figure.savefig(drawn, format=suffix[1:], metadata=metadata)
        with atomic_file(path) as handle:  # the earlier figure stays until the new one is on disk
            handle.write(drawn.getvalue())
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


def _at_level(gamma_train: float | None) -> str:
    """A skip reason's `` at γ_train = 0.4`` where --gamma-train chose the level: runs at other levels may exist."""
    return f" at γ_train = {gamma_train:g}" if gamma_train is not None else ""


def _best_per(results: pd.DataFrame, keys: list[str], rule: str) -> pd.DataFrame:
    """Best run by ``rule`` (analysis.selection) per ``keys`` (+ arm), every arm of one ``keys`` group in one setting
    (precision, steps, gamma_test grid), so that no figure sets a 400-step arm beside a 60-step one: fp32 where a
    group has it (other precisions are in the tables, marked), then the setting most arms have, then the densest
    grid, then the longest training."""
    best = select_best(results, keys=keys + ["arm"] + SETTING, rule=rule)
    if best.empty:
        return best
    best["_fp32"] = best["precision"] == DEFAULT_PRECISION
    best["_points"] = best["gamma_test_grid"].map(lambda grid: len(grid) if isinstance(grid, tuple) else 0)
    best["_setting"] = [repr(tuple(row)) for row in best[SETTING].itertuples(index=False)]
    best["_arms"] = best.groupby(keys + ["_setting"], dropna=False)["arm"].transform("nunique")
    ranked = best.sort_values(["_fp32", "_arms", "_points", "steps", "n_runs"], ascending=False, kind="stable")
    chosen = ranked.drop_duplicates(keys)[keys + ["_setting"]]
    best = ranked.merge(chosen, on=keys + ["_setting"], how="inner")
    shown = sort_cells(best.drop_duplicates(keys + ["arm"]).drop(columns=["_points", "_fp32", "_setting", "_arms"]))
    # an arm with no run in the setting chosen is not drawn: the caption says which (settings_left_out)
    arms = ranked.drop_duplicates(keys + ["arm"])
    missing = arms.merge(shown[keys + ["arm"]], on=keys + ["arm"], how="left", indicator=True)
    shown.attrs["left_out"] = [_arm_in_setting(row, keys) for _, row in missing.iterrows()
                               if row["_merge"] == "left_only"]
    return shown


def _arm_in_setting(row: pd.Series, keys: list[str]) -> str:
    named = {"L": "L", "gamma_train": "γ_train"}
    cell = " · ".join(f"{named[key]}={row[key]:g}" if key in named else str(row[key]) for key in keys if key != "task")
    points = len(row["gamma_test_grid"]) if isinstance(row["gamma_test_grid"], tuple) else 0
    return f"{ARM_LABELS[row['arm']]} of {cell} ({int(row['steps'])} steps, {row['precision']}, {points} γ_test)"


def settings_left_out(*chosen: pd.DataFrame) -> str:
    """The caption's note of the arms that ran only at another setting than the one a figure shows (``chosen``:
    what _best_per returned)."""
    left = [arm for best in chosen for arm in best.attrs.get("left_out", [])]
    return (" Not drawn, having no run at the setting shown (steps, precision, γ_test grid) beside the other arms: "
            + "; ".join(left) + ".") if left else ""


def _count_range(counts: list[int]) -> str:
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"


def _not_shown(count: int, what: str) -> str:
    return f" {count} more {what} are not shown." if count > 0 else ""


# ----------------------------------------------------------------------------------------------- Figs 2 and 4
