"""The runs of a benchmark's multirun, told apart by their folder names."""

from __future__ import annotations

from pathlib import Path


def overrides_of(run_dir: Path) -> dict[str, str]:
    """``L=5,model=dust,train=erm`` -> {"L": "5", "model": "dust", "train": "erm"}: a run's folder is named after
    its command-line overrides (Hydra's override_dirname, cutlab/config/naming.py)."""
    return dict(part.split("=", 1) for part in Path(run_dir).name.split(",") if "=" in part)
