"""The OmegaConf resolvers cutlab's configs use; registered before any config is composed."""

from __future__ import annotations

import os

from omegaconf import ListConfig, OmegaConf

from cutlab.config.naming import run_name
from cutlab.config.neutral import FOLDER_NEUTRAL_KEYS
from cutlab.config.paths import cache_dir, data_dir, models_dir, runs_dir
from cutlab.core.errors import CutlabError


def if_deep(deep_value, shallow_value, *, _root_):
    """``${cutlab_if_deep:DEEP,SHALLOW}``: DEEP when the model names a depth from which its stack counts as deep
    (``model.deep_from_layers``) and the run's L reaches it, else SHALLOW. A train preset's value that depends on
    depth lives as one line in the preset and one number in the model's yaml; a model without the key is never deep."""
    deep_from = OmegaConf.select(_root_, "model.deep_from_layers", default=None)
    if deep_from is not None and (isinstance(deep_from, bool) or not isinstance(deep_from, int) or deep_from < 1):
        raise CutlabError(f"model.deep_from_layers must be a depth of at least 1 or null (never deep), "
                          f"got {deep_from!r}; e.g. model.deep_from_layers=5")
    depth = _root_.L  # an L that is no whole number (L=null) is refused by the run's checks, in one line naming it
    deep = deep_from is not None and isinstance(depth, int) and not isinstance(depth, bool) and depth >= deep_from
    return deep_value if deep else shallow_value


# W&B's own aliases of its modes, as WANDB_MODE may hold them
WANDB_MODE_ALIASES = {"dryrun": "offline", "run": "online"}


def wandb_variable(name: str, default):
    """``${cutlab_wandb:NAME,DEFAULT}``: W&B's variable $WANDB_<NAME> (empty = unset), else DEFAULT. W&B's own
    lines tell a user to ``set WANDB_MODE=online``; passed explicitly, cutlab's defaults overrode that and
    WANDB_PROJECT. The command line (``wandb.mode=...``) still wins over both."""
    value = os.environ.get(f"WANDB_{name}", "").strip()
    if not value:
        return default
    return WANDB_MODE_ALIASES.get(value.lower(), value.lower()) if name == "MODE" else value


def wandb_tags() -> ListConfig:
    """``${cutlab_wandb_tags:}``: W&B's $WANDB_TAGS (comma-separated, as W&B splits it), else none; so the run's
    config.yaml records the tags W&B gives the run (it said ``tags: []`` while W&B used the variable's). A ListConfig:
    OmegaConf.resolve cannot put a plain list where the interpolation was."""
    return OmegaConf.create([tag.strip() for tag in wandb_variable("TAGS", "").split(",") if tag.strip()])


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("cutlab_run_name"):
        OmegaConf.register_new_resolver("cutlab_run_name", run_name)
    if not OmegaConf.has_resolver("cutlab_folder_neutral_keys"):
        OmegaConf.register_new_resolver("cutlab_folder_neutral_keys", lambda: list(FOLDER_NEUTRAL_KEYS))
    if not OmegaConf.has_resolver("cutlab_absolute"):  # hydra.sweep.subdir (conf/config.yaml)
        OmegaConf.register_new_resolver("cutlab_absolute", os.path.abspath)
    if not OmegaConf.has_resolver("cutlab_wandb"):
        OmegaConf.register_new_resolver("cutlab_wandb", wandb_variable)
    if not OmegaConf.has_resolver("cutlab_wandb_tags"):
        OmegaConf.register_new_resolver("cutlab_wandb_tags", wandb_tags)
    if not OmegaConf.has_resolver("cutlab_if_deep"):
        OmegaConf.register_new_resolver("cutlab_if_deep", if_deep)
    # paths.data_dir / paths.models_dir: the same functions cutlab-reproduce calls, so both read one rule
    if not OmegaConf.has_resolver("cutlab_runs_dir"):
        OmegaConf.register_new_resolver("cutlab_runs_dir", lambda: str(runs_dir()))
    if not OmegaConf.has_resolver("cutlab_cache_dir"):
        OmegaConf.register_new_resolver("cutlab_cache_dir", lambda: str(cache_dir()))
    if not OmegaConf.has_resolver("cutlab_data_dir"):
        OmegaConf.register_new_resolver("cutlab_data_dir", lambda: str(data_dir()))
    if not OmegaConf.has_resolver("cutlab_models_dir"):
        OmegaConf.register_new_resolver("cutlab_models_dir", lambda: str(models_dir()))
