"""A run's config composed from conf/ with Hydra's compose API: any ``python -m cutlab`` override works here."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from cutlab.errors import CutlabError
from cutlab.search.preset import Param

_MISSING = object()


def compose_run_config(overrides: list[str]) -> DictConfig:
    """The resolved config ``python -m cutlab <overrides>`` would run (without the ``hydra`` node)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from cutlab.__main__ import CONFIG_DIR, check_group_choices  # also registers the run-name resolver

    check_group_choices(overrides)
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="cutlab"):
            cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # ${hydra:runtime.cwd} in paths.data_dir resolves through it
        with open_dict(cfg):
            del cfg["hydra"]
        OmegaConf.resolve(cfg)
    except CutlabError:
        raise
    except Exception as error:  # Hydra's own messages name the bad override
        raise CutlabError(f"cutlab overrides {' '.join(overrides)!r} do not compose: {error}") from None
    return cfg


def check_space_keys(cfg: DictConfig, space: tuple[Param, ...]) -> None:
    """Every searched key must exist in the config tree (a typo would otherwise search nothing)."""
    from cutlab.__main__ import CONFIG_DIR, GROUPS

    for param in space:
        if param.key in GROUPS:
            known = sorted(p.stem for p in (Path(CONFIG_DIR) / param.key).glob("*.yaml"))
            bad = [c for c in param.choices if c not in known] if param.type == "categorical" else ["(not categorical)"]
            if bad:
                raise CutlabError(f"search space key {param.key!r} is a config group: it needs type: categorical "
                                  f"with choices from {known}, got {bad}")
            continue
        if OmegaConf.select(cfg, param.key, default=_MISSING) is _MISSING:
            section = param.key.rsplit(".", 1)[0] if "." in param.key else ""
            node = OmegaConf.select(cfg, section, default=None) if section else cfg
            nearby = sorted(node.keys())[:20] if isinstance(node, DictConfig) else []
            raise CutlabError(f"search space key {param.key!r} is not in the config tree"
                              + (f"; keys under {section or 'the root'}: {', '.join(map(str, nearby))}" if nearby else "")
                              + " (see conf/ or `python -m cutlab --cfg job`)")
