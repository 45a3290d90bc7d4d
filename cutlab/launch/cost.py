"""What a sweep's remaining runs will cost, from the wall time of complete runs of the same kind."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cutlab.run.records import not_a_file


def cost_key(job: dict) -> tuple:
    """What a run's cost depends on: model, data, depth, arm and budget (not gamma, seed or learning rates)."""
    data = {k: v for k, v in job.get("data", {}).items() if k != "root"}
    train = job.get("train", {})
    gammas = job.get("eval", {}).get("gamma_test", [])  # not a list (eval.gamma_test=0.5): the run refuses it
    return (job.get("model", {}).get("name"), json.dumps(data, sort_keys=True, default=str), job.get("L"),
            train.get("constrained"), train.get("epochs"), train.get("max_steps_per_epoch"), train.get("batch_size"),
            len(gammas) if isinstance(gammas, list) else str(gammas))


def measured_costs(runs_dir: Path) -> dict[tuple, list[float]]:
    """Wall time of every complete run under ``runs_dir``, by cost key (from its config.yaml and summary.json)."""
    import yaml  # a stored config.yaml is already resolved: plain YAML, parsed ~10x faster than by OmegaConf

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    costs: dict[tuple, list[float]] = {}
    if not runs_dir.is_dir():
        return costs
    for summary_path in runs_dir.glob("*/summary.json"):
        if not_a_file(summary_path) or not_a_file(summary_path.parent / "config.yaml"):
            continue  # a link (to /dev/zero: read for ever) or a FIFO (waits for ever) is no cost cutlab measured
        try:
            summary = json.loads(summary_path.read_text())
            if summary.get("status") != "complete" or not summary.get("wall_time_s"):
                continue
            config = yaml.load((summary_path.parent / "config.yaml").read_text(), Loader=loader)
            key, seconds = cost_key(config), float(summary["wall_time_s"])
        except Exception:  # a half-written or foreign folder says nothing about cost
            continue
        costs.setdefault(key, []).append(seconds)
    return costs


PROCESS_STARTUP_S = 3.3  # python + torch + Hydra start-up of one run (benchmarks/ section 4, 2 idle cores)


@dataclass
class Estimate:
    seconds: float             # summed run time of the runs still to do, where measured
    measured: int              # runs to do with a measured peer (same model, data, depth, arm and budget)
    unmeasured: list[Any]  # the PlannedRuns without a measured peer


def estimate(runs_dir: Path, to_run: list) -> Estimate:
    """Run time of what is left, from complete runs of the same kind already in the runs folder.

    A run's cost is the median ``wall_time_s`` (training and evaluation) of complete runs with its cost
    key. Runs of a kind never run before are counted as unmeasured: run one of each kind first to
    calibrate the estimate. Launchers that start a process per run (SLURM; local with warm_workers=false) add
    its start-up (PROCESS_STARTUP_S); the local launcher's warm workers pay it once each, not per run.
    """
    costs = measured_costs(runs_dir)
    seconds, measured, unmeasured = 0.0, 0, []
    for run in to_run:  # PlannedRuns, each with its cost_key
        peers = costs.get(run.cost_key)
        if not peers:
            unmeasured.append(run)
            continue
        measured += 1
        seconds += statistics.median(peers)
    return Estimate(seconds, measured, unmeasured)
