"""The runs of a benchmark's multirun, told apart by their overrides."""

from __future__ import annotations

import json
from pathlib import Path


def overrides_of(run_dir: Path) -> dict[str, str]:
    """{"L": "5", "model": "dust", "train": "erm"}: the run's command-line overrides, from the command in its
    provenance.json; a folder without one falls back to its name (Hydra's override_dirname). A long name is cut
    and ends in a hash (cutlab/config/naming.py), so the name alone can lose the overrides that tell runs apart."""
    provenance = Path(run_dir) / "provenance.json"
    if provenance.exists():
        command = json.loads(provenance.read_text()).get("command", [])
        return dict(argument.split("=", 1) for argument in command[1:] if "=" in argument)
    return dict(part.split("=", 1) for part in Path(run_dir).name.split(",") if "=" in part)
