"""A search space checked against the composed config tree (composition itself: cutlab.config.compose)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from cutlab.config.groups import GROUPS, choices
from cutlab.errors import CutlabError
from cutlab.search.preset import Arm, Param, as_override, first_searched

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


def check_fixed_keys(arm: Arm, overrides: list[str], preset: str) -> None:
    """The command's ``overrides`` set no key ``arm`` searches (a seeds arm's ``seed=`` is its first seed: not one).
    Before: the plan listed train.alpha=0.3 for every trial, and each trial's drawn value, given after it, replaced
    it in silence."""
    if found := first_searched(overrides, arm.space):
        override, param = found
        which = f"arm {arm.name} of search={preset}" if arm.name else f"search={preset}"
        raise CutlabError(f"{override} sets a key every trial draws: {which} searches {param_text(param)}; drop "
                          f"{override}, or give a preset whose space leaves {param.key} out "
                          "(search=path/to/space.yaml)")


def param_text(param: Param) -> str:
    """A searched key as the plan shows it: ``train.lr log_float [0.0001, 0.01]``."""
    if param.type == "categorical":
        return f"{param.key} in {list(param.choices)}"
    return f"{param.key} {param.type} [{param.low:g}, {param.high:g}]"


def space_corners(space: tuple[Param, ...]) -> list[list[str]]:
    """Sample trials that reach every end of the space one key at a time: every key at its low end (a
    categorical at its first choice), then each key moved alone to its high end or to each other choice. A
    combination that a run refuses (the deep default's penalty with ``train.resilience=slack``) shows in one."""
    def value(param: Param, end: str):
        if param.type == "categorical":
            return param.choices[0]
        bound = param.low if end == "low" else param.high
        return int(bound) if param.type == "int" else bound

    base = [as_override(p.key, value(p, "low")) for p in space]
    corners = [base]
    for index, param in enumerate(space):
        others = [as_override(param.key, c) for c in param.choices[1:]] if param.type == "categorical" \
            else [as_override(param.key, value(param, "high"))]
        corners += [[*base[:index], other, *base[index + 1:]] for other in others]
    return corners
