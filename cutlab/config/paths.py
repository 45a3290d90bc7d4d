"""Where the repository's config folders are: computed once, here."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "conf"            # the Hydra config tree: config.yaml and its groups
SWEEPS_DIR = REPO / "sweeps"          # sweep files (--config-name table3): on Hydra's search path beside conf/
SEARCH_DIR = CONFIG_DIR / "search"    # search presets (cutlab-search), read by cutlab.search.preset
SLURM_PROFILES_DIR = REPO / "slurm"   # SLURM profiles (launcher.profile)
