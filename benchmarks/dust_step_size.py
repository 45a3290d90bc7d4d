"""How far DUST's training-time step size c lags ||D||_2^2, and what the exact value costs a step.

    .venv/bin/python -m cutlab threads=1 wandb.mode=disabled paths.runs_dir=/tmp/c_power
    .venv/bin/python -m cutlab threads=1 wandb.mode=disabled paths.runs_dir=/tmp/c_exact model.lipschitz_estimate=exact
    .venv/bin/python benchmarks/dust_step_size.py /tmp/c_power /tmp/c_exact

For every DUST run folder under the folders given: per dictionary, the power-iteration estimate ||D v||^2 (v the
tracked singular vector in the final checkpoint) divided by the exact ||D||_2^2, with sigma_1 / sigma_2 (close to 1,
power iteration converges slowly), the median training step time (history.csv) and the last line's numbers
(summary.json). The paper's c >= ||D||_2^2 (App. C) holds exactly when the ratio is >= 1. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch
import yaml

from cutlab.run.checkpoints import load_checkpoint
from cutlab.run.records import CONFIG, HISTORY, SUMMARY


def estimate_over_exact(model_state: dict) -> list[tuple[float, float]]:
    """(estimate / exact ||D||_2^2, sigma_1 / sigma_2) per dictionary of a DUST state dict."""
    vectors = model_state["singular_vectors"]
    count = len(vectors)
    found = []
    for index in range(count):
        dictionary = model_state[f"dictionaries.{index}"]
        singular = torch.linalg.svdvals(dictionary)
        estimate = (dictionary @ vectors[index]).pow(2).sum()
        found.append((float(estimate / singular[0] ** 2), float(singular[0] / singular[1])))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="runs folders (or run folders) of DUST runs")
    args = parser.parse_args()
    for folder in args.folders:
        for summary in sorted(Path(folder).rglob(SUMMARY)):
            run = summary.parent
            checkpoint = load_checkpoint(run)
            if checkpoint is None or "singular_vectors" not in checkpoint["trainer"]["model"]:
                continue  # not a DUST run, or no checkpoint
            record = json.loads(summary.read_text())
            step = pd.read_csv(run / HISTORY)["step_time"].median()
            rule = (yaml.safe_load((run / CONFIG).read_text())["model"]).get("lipschitz_estimate", "power_iteration")
            shown = ("c is exact (no estimate to compare)" if rule == "exact" else "estimate / exact ||D||_2^2 per "
                     "dictionary: " + ", ".join(f"{ratio:.3f} (s1/s2 {gap:.4f})"
                                                for ratio, gap in estimate_over_exact(checkpoint["trainer"]["model"])))
            print(f"{run}: {shown}; median step {step:.3f} s; "
                  f"test mean {record.get('test_mean_metric', float('nan')):.3f}, verdict {record.get('verdict')}")


if __name__ == "__main__":
    main()
