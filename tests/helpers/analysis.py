"""Run folders written for the analysis tests, and the analysis command line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from conftest import ROOT

from cutlab.run.records import (
    CONFIG, EVAL, HISTORY, RECORD_VERSION, SAMPLE_LOSSES, SUMMARY, HistoryWriter, layer_columns, write_evaluation,
)


UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


#: dual settings other than the paper's (analysis.selection.PAPER_DUAL), as a new-style record holds them
NEW_DUAL = {"constraint_form": "ratio", "dual_optimizer": "sgd", "dual_update": "simultaneous", "dual_restarts": False}


VIDEO_GRID = [0.0, 0.5, 1.0]


TEXT_GRID = [0.0, 0.5, 1.0, 2.0]


def write_run(root: Path, name: str, *, model: str, dataset: str, L: int, gamma: float, constrained: bool,
              test: list[float] | float, selection: float, seed: int = 0, alpha: float = 0.25, dual_lr: float = 0.01,
              verdict: str | None = None, violated: tuple[int, ...] = (), status: str = "complete",
              error: str | None = None, evaluation: bool = True, truncate_eval: bool = False,
              record_version: int | None = RECORD_VERSION, train: dict | None = None,
              met_from: tuple[int | None, int | None] | None = None, slack: dict[int, float] | None = None,
              in_distribution: dict | None = None, data: dict | None = None) -> Path:
    """One run folder in cutlab's record format. ``test``: the last layer's test metric per gamma_test
    (text: accuracies), or for video the mean over the grid (a straight line of slope 4 around it).

    The fields of time to feasibility are written only when asked for (older records lack them): ``train``
    adds train.* keys (the dual settings), ``met_from`` = (first step of the final strictly-met streak, of the
    within-slack one; None: never) writes history's constraints_met columns and the summary's steps,
    ``slack`` = {layer: relative violation covered by its slack} the verdict's slack layers, and
    ``in_distribution`` the summary's block of that name; ``data`` adds data.* keys."""
    text = dataset in ("imdb", "mnli")
    grid = TEXT_GRID if text else VIDEO_GRID
    run = root / name
    run.mkdir(parents=True)
    config = {"model": {"name": model}, "data": {"name": dataset, **(data or {})}, "gamma": gamma, "L": L, "seed": seed,
              "train": {"constrained": constrained, "alpha": alpha, "dual_lr": dual_lr, "epsilon": "auto", "lr": 1e-3,
                        "epochs": 2, "batch_size": 4, "resilience": "slack", "resilience_c": 1.0,
                        "dual_cadence": "batch", "warmup_epochs": 1, "detach_prev": False, **(train or {})},
              "eval": {"gamma_test": grid, "batch_size": 4, "feasibility_tol": 0.02},
              "paths": {"runs_dir": str(root)}, "wandb": {"mode": "disabled"}}
    (run / CONFIG).write_text(yaml.safe_dump(config))
    last = list(test) if isinstance(test, list) else [test + 4 * (g - 0.5) for g in grid]
    history = HistoryWriter(run / HISTORY, L + 1, 0)
    for step in range(1, 7):
        dual = constrained and step > 3
        row = {"step": step, "epoch": (step - 1) // 3, "phase": "constrained" if dual else "primal",
               "lagrangian": 1.0, "grad_norm": 1.0, "lr": 1e-3, "dual_lr": dual_lr, "step_time": 0.1}
        for layer in range(L + 1):
            row.update({f"loss_{layer}": 40.0 * 0.7 ** layer / step, f"slack_{layer}": 0.0, f"g_{layer}": 0.1,
                        f"lambda_{layer}": (0.02 * (step - 3) * (layer + 1)) if dual else 0.0})
        if met_from is not None:
            row.update({f"constraints_met{suffix}": int(first is not None and step >= first)
                        for suffix, first in (("_strictly", met_from[0]), ("", met_from[1]))})
        history.write(row)
    history.close()
    summary = {"record_version": record_version, "status": status, "wandb_id": None, "sigma_x": 0.2,
               "epsilon": 40.0, "steps": 6 if status != "running" else 3, "epochs": 2}
    if error:
        summary["error"] = error
    if status == "complete":
        mode = "max" if text else "min"
        summary.update({
            "metric": "accuracy" if text else "rmse", "selection_mode": mode, "selection_metric": selection,
            "test_mean_metric": float(np.mean(last)), "test_metric_by_gamma": {str(g): v for g, v in zip(grid, last)},
            "verdict": verdict or ("feasible" if constrained else "unconstrained"), "wall_time_s": 12.5,
            "feasibility": {"status": verdict or ("feasible" if constrained else "unconstrained"),
                            "violated_layers": list(violated), "tolerance": 0.02},
        })
    if slack:
        summary["feasibility"].update(slack_layers=sorted(slack), relative_violations=[
            slack.get(layer, -0.1) for layer in range(L + 1)])
    if met_from is not None:
        summary.update(steps_to_strict_feasibility=met_from[0], steps_to_feasibility=met_from[1])
    if in_distribution is not None:
        summary["in_distribution"] = in_distribution
    if summary.get("record_version") is None:
        del summary["record_version"]
    (run / SUMMARY).write_text(json.dumps(summary, indent=2))
    if evaluation and status == "complete":
        rows = _eval_rows(grid, last, selection, L, text)
        write_evaluation(run, rows)
        if truncate_eval:  # a crash mid-write: the file ends in the middle of a row
            content = (run / EVAL).read_text()
            (run / EVAL).write_text(content[: len(content) // 2].rsplit(",", 1)[0] + ",")
        _write_samples(run, grid, L, constrained, seed)
    return run


def _eval_rows(grid: list[float], last: list[float], selection: float, L: int, text: bool) -> list[dict]:
    """val and test rows for every gamma and layer: the last layer as given, earlier layers worse."""
    rows = []
    shift = selection - float(np.mean(last))  # validation curve: the test curve moved to mean = selection
    for split, curve in (("val", [v + shift for v in last]), ("test", last)):
        for gamma, value in zip(grid, curve):
            for layer in range(L + 1):
                depth = L - layer
                metric = value - 0.05 * depth if text else value * (1 + 0.25 * depth)
                loss = -math.log(max(metric, 1e-3)) if text else 1280 * (metric / 255) ** 2
                rows.append({"split": split, "gamma_test": gamma, "layer": layer,
                             "metric": "accuracy" if text else "rmse", "value": metric})
                rows.append({"split": split, "gamma_test": gamma, "layer": layer, "metric": "loss", "value": loss})
    return rows


def _write_samples(run: Path, grid: list[float], L: int, constrained: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames = []
    for gamma in grid:
        losses = np.empty((24, L + 1))
        losses[:, 0] = 40 + rng.normal(0, 2, 24)
        for layer in range(1, L + 1):
            ratio = rng.normal(0.78, 0.08, 24) if constrained else rng.normal(0.97, 0.12, 24)
            losses[:, layer] = losses[:, layer - 1] * ratio
        frame = pd.DataFrame(losses, columns=layer_columns("loss", L + 1))
        frame.insert(0, "sample", range(24))
        frame.insert(0, "gamma_test", gamma)
        frames.append(frame)
    pd.concat(frames).to_csv(run / SAMPLE_LOSSES, index=False)


def analysis_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "analysis", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def assert_image(png: Path) -> None:
    import matplotlib.image

    assert png.stat().st_size > 10_000, png
    pixels = matplotlib.image.imread(png)
    assert pixels.ndim == 3 and min(pixels.shape[:2]) > 300
    assert float(pixels[..., :3].std()) > 0.02, f"{png} looks blank"


def run_main(*args: str, capsys) -> tuple[int, str]:
    from analysis.__main__ import main

    code = main(list(args))
    return code, capsys.readouterr().err
