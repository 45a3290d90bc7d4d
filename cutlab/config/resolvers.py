"""The OmegaConf resolvers conf/config.yaml uses; registered before any config is composed."""

from __future__ import annotations

from omegaconf import OmegaConf

from cutlab.config.naming import run_name
from cutlab.config.neutral import FOLDER_NEUTRAL_KEYS
from cutlab.config.paths import data_dir, models_dir


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("cutlab_run_name"):
        OmegaConf.register_new_resolver("cutlab_run_name", run_name)
    if not OmegaConf.has_resolver("cutlab_folder_neutral_keys"):
        OmegaConf.register_new_resolver("cutlab_folder_neutral_keys", lambda: list(FOLDER_NEUTRAL_KEYS))
    # paths.data_dir / paths.models_dir: the same functions cutlab-reproduce calls, so both read one rule
    if not OmegaConf.has_resolver("cutlab_data_dir"):
        OmegaConf.register_new_resolver("cutlab_data_dir", lambda: str(data_dir()))
    if not OmegaConf.has_resolver("cutlab_models_dir"):
        OmegaConf.register_new_resolver("cutlab_models_dir", lambda: str(models_dir()))
