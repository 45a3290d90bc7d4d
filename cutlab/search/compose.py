"""A search space checked against the composed config tree (composition itself: cutlab.config.compose)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from cutlab.config.groups import GROUPS, choices
from cutlab.errors import CutlabError
from cutlab.search.preset import Param

_MISSING = object()


def check_space_keys(cfg: DictConfig, space: tuple[Param, ...]) -> None:
    """Every searched key must exist in the config tree (a typo would otherwise search nothing)."""
    for param in space:
        if param.key in GROUPS:
            known = choices(param.key)
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
