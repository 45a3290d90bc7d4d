"""The OmegaConf resolvers conf/config.yaml uses; registered before any config is composed."""

from __future__ import annotations

from omegaconf import OmegaConf

from cutlab.config.naming import run_name
from cutlab.config.neutral import FOLDER_NEUTRAL_KEYS
from cutlab.config.paths import user_dir


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("cutlab_run_name"):
        OmegaConf.register_new_resolver("cutlab_run_name", run_name)
    if not OmegaConf.has_resolver("cutlab_folder_neutral_keys"):
        OmegaConf.register_new_resolver("cutlab_folder_neutral_keys", lambda: list(FOLDER_NEUTRAL_KEYS))
    if not OmegaConf.has_resolver("cutlab_user_dir"):  # paths.data_dir / models_dir without $CUTLAB_DATA_DIR
        OmegaConf.register_new_resolver("cutlab_user_dir", lambda kind: str(user_dir(kind)))
