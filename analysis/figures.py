"""The paper's figures from run records: matplotlib, PNG and PDF, readable in print.

Every figure function takes a :class:`~analysis.collect.RunTable` and an output folder and returns a
:class:`FigureResult`: the files written, or the reason the figure was skipped (no data for it).
Constrained runs are always blue, solid, circles; constrained runs with the paper's dual dynamics
bluish green, dash-dotted, triangles; ERM runs vermillion, dashed, squares (Okabe-Ito colours,
distinguishable in grey-scale print and by colour-blind readers). Curves show the run that
is best on validation per arm, as the paper's figures do, or feasible-first (``analysis.selection``); the
ablations show every seed (mean and error bars). Only ``matplotlib.figure.Figure`` is used, never pyplot, so
nothing depends on (or changes) a global backend: PNG is written by Agg, PDF by the PDF backend.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

from cutlab.atomic import DiskFull, is_disk_full

from .collect import RunTable
from .out_folder import raised_writing
from .run_folders import quiet_meter
from .figure_kit import ARM_STYLE, TITLES, FigureResult, distinguishing  # noqa: F401 (re-exported)
from .figures_metric import (  # noqa: F401 (re-exported: the figures are called as analysis.figures.X)
    rmse_vs_gamma, accuracy_vs_gamma, rmse_vs_depth, alpha_ablation, dual_lr_ablation, ablation_groups, ABLATION_LABEL,
)
from .figures_layers import (  # noqa: F401 (re-exported: the figures are called as analysis.figures.X)
    layerwise_loss, gamma_train_effect, descent_ratios, sample_ratios,
)
from .figures_dual import (  # noqa: F401 (re-exported: the figures are called as analysis.figures.X)
    dual_variables, dual_panel_title, satisfaction_by_setting, constraint_satisfaction,
)

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
    meter = quiet_meter("drawing figures", len(FIGURES), "figure", continues=True)
    for index, (stem, figure) in enumerate(FIGURES.items()):
        meter.update(index)
        takes_gamma = "gamma_train" in inspect.signature(figure).parameters
        try:
            results.append(figure(runs, Path(out_dir), gamma_train=gamma_train) if takes_gamma
                           else figure(runs, Path(out_dir)))
        except Exception as error:  # one figure's unexpected data must not cost the whole report: say so in it
            if isinstance(error, DiskFull) or is_disk_full(error) or raised_writing(error, Path(out_dir)):
                raise  # the disk, not the data: the report stops in one line (analysis.__main__), never a skip
            reason = f"could not be drawn ({type(error).__name__}: {error})"
            results.append(FigureResult(stem, TITLES[stem], skipped=reason))
    return results
