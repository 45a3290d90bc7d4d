"""A sweep's record as a test reads it."""

from __future__ import annotations

import json
from pathlib import Path

from cutlab.config.neutral import without_result_neutral_keys


def plan_ids(output: str) -> list[str]:
    """The run ids of a --plan listing (lines '<index> <status> <id>')."""
    return [line.split()[2] for line in output.splitlines() if line and not line.startswith("#")]


def sweep_outcome(runs: Path) -> dict:
    records = sorted((runs / "_sweeps").glob("*/outcome.json"))
    return json.loads(records[-1].read_text())


def result_config(run_dir: Path) -> dict:
    """A run's config without the keys that do not change its result (how it was launched, logged, threaded)."""
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return without_result_neutral_keys(config)
