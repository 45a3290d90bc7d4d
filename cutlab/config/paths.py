"""Where cutlab's own files and a user's data are, computed once, here.

The config tree, sweep files, search presets and SLURM profiles are packages (cutlab.conf, cutlab.sweeps,
cutlab.searches, cutlab.slurm; the repository's conf/, sweeps/, searches/, slurm/ folders, mapped by pyproject.toml),
so they are found the same way from a wheel, an editable install or a checkout (cutlab/checkout.py).
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from cutlab import checkout

PACKAGE_ROOT = checkout.ROOT  # the checkout, or site-packages: where child processes import cutlab from
# the source checkout cutlab runs from (its git commit is a run's provenance); None when installed from a wheel, whose
# site-packages may sit inside some other git repository (a project's .venv/)
CHECKOUT = PACKAGE_ROOT if checkout.is_checkout() else None

CONFIG_MODULE = "cutlab.conf"             # Hydra's primary config module: pkg://cutlab.conf
SWEEPS_MODULE = "cutlab.sweeps"           # on Hydra's search path beside it (cutlab/config/searchpath.py)
CONFIG_DIR = Path(str(files(CONFIG_MODULE)))           # config.yaml and its groups (model/, data/, train/, launcher/)
SWEEPS_DIR = Path(str(files(SWEEPS_MODULE)))           # --config-name NAME
SEARCH_DIR = Path(str(files("cutlab.searches")))       # cutlab-search search=NAME (cutlab.search.preset)
SLURM_PROFILES_DIR = Path(str(files("cutlab.slurm")))  # launcher.profile=NAME

DATA_ENV = "CUTLAB_DATA_DIR"
MODELS_ENV = "CUTLAB_MODELS_DIR"
RUNS_ENV = "CUTLAB_RUNS_DIR"
CACHE_ENV = "CUTLAB_CACHE_DIR"


def user_dir(kind: str) -> Path:
    """The per-user folder of ``kind`` (data, models): ~/.local/share/cutlab/<kind> on Linux (XDG_DATA_HOME),
    ~/Library/Application Support/cutlab/<kind> on macOS, as platformdirs says."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("cutlab", appauthor=False)) / kind


def _folder(env: str, kind: str) -> Path:
    # $env, with ~ expanded; unset or empty means the per-user folder. conf/config.yaml reads these two functions
    # through resolvers (cutlab/config/resolvers.py), so `cutlab` and `cutlab-reproduce` look in the same folder
    return Path(os.environ.get(env) or user_dir(kind)).expanduser()


def data_dir() -> Path:
    """Where datasets are looked for (paths.data_dir): $CUTLAB_DATA_DIR, else the per-user data folder."""
    return _folder(DATA_ENV, "data")


def models_dir() -> Path:
    """Where pretrained weights are looked for (paths.models_dir): $CUTLAB_MODELS_DIR, else the per-user models
    folder."""
    return _folder(MODELS_ENV, "models")


def cache_dir() -> Path:
    """Where preprocessed data are cached (paths.cache_dir): $CUTLAB_CACHE_DIR, ~ expanded and empty meaning unset as
    for the data folder, else the per-user cache folder (~/.cache/cutlab on Linux, XDG_CACHE_HOME, as platformdirs
    says). It was ${oc.env:CUTLAB_CACHE_DIR,...}: an empty variable cached into the current folder, ~ was a folder."""
    from platformdirs import user_cache_dir

    return Path(os.environ.get(CACHE_ENV) or user_cache_dir("cutlab", appauthor=False)).expanduser()


def runs_dir() -> Path:
    """Where runs go unless the command says (paths.runs_dir): $CUTLAB_RUNS_DIR, ~ expanded and empty meaning unset
    as for the data folder, else ``runs`` under the folder the command runs in."""
    return Path(os.environ.get(RUNS_ENV) or "runs").expanduser()


def absolute_path(value):
    """A ``data.root`` typed relative to the working folder (``footage``, ``~/clips``) that names something there, as
    that absolute path; anything else as given (absolute, null, ``hf:imdb``, a path that does not exist: the config
    checks refuse it). A run's record keeps this form, so the same command run from another folder, which names other
    data, is another configuration, not this run's results."""
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return value
    expanded = os.path.expanduser(value)
    return os.path.normpath(os.path.abspath(expanded)) if os.path.exists(expanded) else value


def with_absolute_root(config: dict) -> dict:
    """A resolved run config (a dict) with its ``data.root`` as absolute_path gives it (the same dict when unchanged)."""
    data = config.get("data")
    if isinstance(data, dict) and data.get("root") != (root := absolute_path(data.get("root"))):
        return {**config, "data": {**data, "root": root}}
    return config
