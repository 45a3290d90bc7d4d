"""How much wider the verdict's sampling interval is when whole video clips are resampled instead of windows.

    .venv/bin/python benchmarks/interval_by_clip.py RUNS_DIR [--out FILE.json]     # seconds per run on 2 cores

Windows of one clip show one scene, so they are not independent samples, and a bootstrap over windows understates
how far a relative violation would move on another draw of clips. For every finished constrained video run under
RUNS_DIR this reads its test ``sample_losses.csv`` (every γ_test of its grid), rebuilds the test split's windows to
know which clip each one comes from, and computes the 90 % interval of every active constraint both ways with
cutlab's own ``violation_intervals``. Prints, per run, the median ratio of widths (clips ÷ windows) over layers and
γ_test, and the overall median.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd
import torch
from omegaconf import OmegaConf

import suite.paths  # noqa: F401  points cutlab at the real data beside the checkout
from cutlab.core.data import FrameWindows
from cutlab.core.evaluation import violation_intervals
from cutlab.run.build import constraints_of
from cutlab.tasks import build_task


def width_ratios(run: Path, windows: FrameWindows) -> list[float]:
    """Clip-interval width ÷ window-interval width, per active constraint and γ_test (finite, non-zero widths)."""
    cfg = OmegaConf.load(run / "config.yaml")
    summary = json.loads((run / "summary.json").read_text())
    constraints = constraints_of(cfg, summary.get("epsilon"))
    samples = pd.read_csv(run / "sample_losses.csv")
    ratios = []
    for _, at_gamma in samples.groupby("gamma_test"):
        losses = torch.tensor(at_gamma.filter(like="loss_").to_numpy(), dtype=torch.float64)
        if len(losses) != len(windows):
            raise SystemExit(f"{run.name}: {len(losses)} test samples, but its test split has {len(windows)} windows")
        by_clip = violation_intervals(losses, constraints, windows.sample_groups)
        by_window = violation_intervals(losses, constraints)
        for low, high, window_low, window_high in zip(by_clip["low"], by_clip["high"], by_window["low"],
                                                      by_window["high"]):
            if 0 < window_high - window_low < float("inf"):
                ratios.append((high - low) / (window_high - window_low))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, help="write the per-run medians here as JSON")
    args = parser.parse_args()
    windows_of: dict[str, FrameWindows] = {}
    results = {}
    for summary_path in sorted(args.runs.glob("*/summary.json")):
        run = summary_path.parent
        summary = json.loads(summary_path.read_text())
        cfg = OmegaConf.load(run / "config.yaml")
        if summary.get("status") != "complete" or not cfg.train.constrained or cfg.data.task != "video":
            continue
        key = OmegaConf.to_yaml(cfg.data)
        if key not in windows_of:
            windows_of[key] = build_task(cfg).test_set  # the run's own test split, as the run built it
        ratios = width_ratios(run, windows_of[key])
        results[run.name] = statistics.median(ratios)
        print(f"{cfg.model.name} L={cfg.L} γ_train={cfg.gamma}: clips ÷ windows, median over layers and γ_test "
              f"{results[run.name]:.2f} ({len(windows_of[key].sample_groups.ids.unique())} test clips)")
    if not results:
        raise SystemExit(f"no complete constrained video runs under {args.runs}")
    print(f"overall median over {len(results)} runs: {statistics.median(results.values()):.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
