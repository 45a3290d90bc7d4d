"""A search preset (searches/<name>.yaml, installed as cutlab.searches): what to search, for how many trials, where to keep the study.

A preset either has one ``space`` (a plain search) or ``arms`` (several studies under one name, e.g. the
fair-comparison protocol: a constrained arm searched by TPE and an ERM arm of seeds, the same number of
trials each; the paper's protocol, Sec. 4 and App. B.1). Every message names the key and a valid example.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from cutlab.config.checks import check_flag, check_integer, check_number
from cutlab.config.compose import yaml_message
from cutlab.config.naming import check_folder_name
from cutlab.config.paths import SEARCH_DIR
from cutlab.errors import CutlabError
from cutlab.interrupted import ctrl_c_held

PRESET_DIR = SEARCH_DIR
TYPES = ("float", "log_float", "int", "categorical")
DIRECTIONS = ("auto", "minimize", "maximize")
PRESET_KEYS = {"study", "n_trials", "direction", "storage", "sampler", "pruner", "heartbeat", "overrides", "space", "arms"}
ARM_KEYS = {"overrides", "space", "seeds"}
SPEC_KEYS = {"type", "low", "high", "step", "choices"}
EXAMPLE = "train.lr: {type: log_float, low: 1.0e-4, high: 1.0e-2}"
_SPACE_ITEM = re.compile(r"((?:arms\.[^.=\[]+\.)?space)\.([^=\[]+)=(.*)", re.DOTALL)  # search.space.KEY.FIELD=V
# the options of optuna.samplers.TPESampler, optuna.pruners.MedianPruner and the heartbeat (cutlab.search.storage) a
# preset may set, each with (its kind, the least value, an example): a wrong one stops here, with --dry-run too, not
# in the first worker after the study's journal is made. Seeds stay below 2**31: each worker adds its index and 1000
# per trial done, and numpy takes seeds below 2**32.
SAMPLER_OPTIONS = {
    "seed": ("int", 0, "0"), "n_startup_trials": ("int", 0, "10"), "n_ei_candidates": ("int", 1, "24"),
    "prior_weight": ("number", 0.0, "1.0"), **{flag: ("flag", None, "true") for flag in (
        "consider_prior", "consider_magic_clip", "consider_endpoints", "multivariate", "group",
        "warn_independent_sampling", "constant_liar")},
}
PRUNER_OPTIONS = {"n_startup_trials": ("int", 0, "3"), "n_warmup_steps": ("int", 0, "1"),
                  "interval_steps": ("int", 1, "1"), "n_min_trials": ("int", 1, "1")}
HEARTBEAT_OPTIONS = {"interval_s": ("int", 1, "10"), "grace_s": ("int", 1, "60"), "max_retry": ("int", 0, "3")}
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class Param:
    """One searched config key: ``key`` is a dotted cutlab config key (or a group such as ``model``)."""

    key: str
    type: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        if self.type == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.type == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1))
        return trial.suggest_float(self.key, self.low, self.high, log=self.type == "log_float", step=self.step)


@dataclass(frozen=True)
class Arm:
    """One study: fixed ``overrides`` plus either a searched ``space`` or, with ``seeds``, one trial per seed."""

    name: str | None
    overrides: tuple[str, ...]
    space: tuple[Param, ...]
    seeds: bool = False


@dataclass(frozen=True)
class Preset:
    name: str
    study: str
    n_trials: int
    direction: str
    storage: str | None
    sampler: dict = field(default_factory=dict)
    pruner: dict | None = None
    heartbeat: dict = field(default_factory=dict)
    arms: tuple[Arm, ...] = ()

    def study_name(self, arm: Arm) -> str:
        return self.study if arm.name is None else f"{self.study}-{arm.name}"


def preset_path(name: str) -> Path:
    """``search=NAME`` is searches/NAME.yaml; a value with a slash or ending in .yaml is a file path."""
    if name.endswith(".yaml") or "/" in name:
        path = Path(name)
    else:
        path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ",".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise CutlabError(f"no search preset {name!r} ({path} not found); choose one of search={known} "
                          "or give a file: search=path/to/space.yaml")
    return path


def load_preset(name: str, dotlist: list[str] = ()) -> Preset:
    """Read a preset and apply ``search.KEY=VALUE`` overrides (given here without the ``search.`` prefix)."""
    path = preset_path(name)
    try:
        with ctrl_c_held():  # else a Ctrl-C landing inside OmegaConf is reported as an unreadable preset
            raw = OmegaConf.load(path)
            for item in dotlist:  # one by one: a value that is not YAML is named
                raw = OmegaConf.merge(raw, _dotlist_item(raw, item))
            data = OmegaConf.to_container(raw, resolve=True)
    except CutlabError:
        raise
    except yaml.YAMLError as error:  # the file's: PyYAML's message spans lines, with carets
        raise CutlabError(yaml_message(error)) from None
    except Exception as error:  # bad override syntax, an unknown interpolation (OmegaConf adds lines of its own)
        raise CutlabError(f"search preset {path} cannot be read: {str(error).strip().splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise CutlabError(f"search preset {path} must be a mapping with n_trials and space (e.g. {EXAMPLE})")
    return parse_preset(data, path.stem)


def with_flags(dotlist: list[str], flags: dict[str, Any]) -> list[str]:
    """``dotlist`` with the given flags' values (``{"--n-trials": 3}`` as ``n_trials=3``) added last. A flag and its
    ``search.KEY=`` given different values stop in one line. Before: the flag won in silence (--n-trials 3
    search.n_trials=5 ran 3 trials, --study a search.study=b the study a)."""
    added = []
    for flag, value in flags.items():
        if value is None:
            continue
        key = flag.lstrip("-").replace("-", "_")
        given = _typed(dotlist, key)  # the last one given wins
        if given and _read(given[-1]) != _read(f"{key}={value}"):
            raise CutlabError(f"{flag} {value} and search.{given[-1]} set the same setting to different values; "
                              "give one of them")
        added.append(f"{key}={value}")
    return [*dotlist, *added]


def given_storage(flag: str | None, dotlist: list[str], environment: str | None) -> str | None:
    """The storage the command names: --storage, else search.storage= (the preset takes it from ``dotlist``: None
    here), else $CUTLAB_STORAGE (``environment``). Before: the variable, as --storage's default, replaced a
    search.storage= of the command line in silence, and --storage and search.storage= given apart, the flag won.
    Neither address is quoted: either may hold a password."""
    typed = [item.partition("=")[2].strip() for item in _typed(dotlist, "storage")]
    if flag and typed and typed[-1] != flag:
        raise CutlabError("--storage and search.storage= name two different storages; give one of them (neither is "
                          "shown here: an address may hold a password)")
    return flag if flag or typed else environment


def _typed(dotlist: list[str], key: str) -> list[str]:
    """The ``KEY=VALUE`` items of ``dotlist`` (``search.`` already taken off) that set ``key``, in the order given."""
    return [item for item in dotlist if item.partition("=")[0].strip() == key]


def _read(item: str) -> Any:
    """The value of ``KEY=VALUE`` as the preset reads it (``3`` and ``03`` alike); one YAML cannot read, as written
    (load_preset names it)."""
    try:
        return next(iter(OmegaConf.to_container(OmegaConf.from_dotlist([item])).values()))
    except Exception:
        return item.partition("=")[2]


def resolved_direction(direction: str, metric: str, higher: bool) -> str:
    """The study's direction: ``auto`` as the objective's metric goes, and an explicit one only where it agrees.
    Before: search.direction=maximize was accepted for RMSE, a search that preferred the worst runs (its first
    complete trial then stopped it)."""
    right = "maximize" if higher else "minimize"
    if direction not in ("auto", right):
        raise CutlabError(f"search.direction={direction} goes against the objective: its metric {metric} is better "
                          f"{'higher' if higher else 'lower'}, so the search would prefer the worst runs; drop it: "
                          f"auto (the default) picks {right}")
    return right


def _dotlist_item(raw, item: str) -> DictConfig:
    """``search.KEY=VALUE`` (here without ``search.``) as a config to merge; a value YAML cannot read, in one line."""
    try:
        return OmegaConf.from_dotlist([_space_item(raw, item)])
    except yaml.YAMLError as error:
        problem, context = getattr(error, "problem", None) or "unreadable", getattr(error, "context_mark", None)
        if context is not None and getattr(error, "context", None):
            problem = f"{error.context} begun at column {context.column + 1}: {problem}"
        raise CutlabError(f"search.{item}: the value is not valid YAML ({problem}); write it whole, or quote it "
                          f"('search.{item}')") from None


def _space_item(raw, item: str) -> str:
    """``space.train.lr.low=V`` as ``space[train.lr].low=V`` (an arm's space too): a space key is a dotted cutlab key,
    which OmegaConf would read as nested mappings. The key is the longest the preset's space has, else the path
    before a field name (``type``, ``low``...), else the whole path (a new key given as a mapping)."""
    match = _SPACE_ITEM.fullmatch(item)
    if not match:
        return item
    where, path, value = match.groups()
    space = OmegaConf.select(raw, where, default=None) if isinstance(raw, DictConfig) else None
    known = [str(key) for key in space] if isinstance(space, DictConfig) else []
    key = max((k for k in known if path == k or path.startswith(f"{k}.")), key=len, default=None)
    if key is None:
        head, _, last = path.rpartition(".")
        key = head if head and last in SPEC_KEYS else path
    return f"{where}[{key}]{path[len(key):]}={value}"


def parse_preset(data: dict, name: str) -> Preset:
    unknown = set(data) - PRESET_KEYS
    if unknown:
        raise CutlabError(f"search preset {name}: unknown keys {sorted(unknown)}; known: {sorted(PRESET_KEYS)}")
    n_trials = data.get("n_trials")
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise CutlabError(f"search.n_trials must be a whole number >= 1 (the study's total), got {n_trials!r}; "
                          "e.g. search.n_trials=20 or --n-trials 20")
    direction = data.get("direction", "auto")
    if direction not in DIRECTIONS:
        raise CutlabError(f"search.direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if ("space" in data) == ("arms" in data):
        raise CutlabError(f"search preset {name} needs exactly one of 'space' (one study) or 'arms' "
                          f"(several studies); e.g. space: {{{EXAMPLE}}}")
    if "space" in data:
        common = _overrides(data.get("overrides"), "overrides")
        arms = (_searched_apart(Arm(None, common, parse_space(data["space"], "space")), common),)
    else:
        if not isinstance(data["arms"], dict) or not data["arms"]:
            raise CutlabError(f"search preset {name}: arms must map arm names to {{overrides, space}} or {{overrides, seeds: true}}")
        common = _overrides(data.get("overrides"), "overrides")
        arms = tuple(_arm(arm_name, spec, common) for arm_name, spec in data["arms"].items())
    heartbeat = _options("heartbeat", {"interval_s": 10, "grace_s": 60, "max_retry": 3}, data.get("heartbeat"),
                         HEARTBEAT_OPTIONS, "the heartbeat")
    if heartbeat["grace_s"] <= heartbeat["interval_s"]:
        raise CutlabError("search.heartbeat.grace_s must exceed search.heartbeat.interval_s "
                          f"(got {heartbeat['grace_s']} <= {heartbeat['interval_s']}); e.g. interval_s: 10, grace_s: 60")
    sampler = _options("sampler", {"seed": 0}, data.get("sampler"), SAMPLER_OPTIONS, "optuna.samplers.TPESampler")
    pruner = data.get("pruner")
    if pruner is not None:
        pruner = _options("pruner", {}, pruner, PRUNER_OPTIONS, "optuna.pruners.MedianPruner")
    study = str(data.get("study") or name)
    # the study's folder under <runs_dir>/search, as run_name is a run's: a path or '..' would put it elsewhere
    check_folder_name("search.study", study, "the study's folder inside <runs_dir>/search", "dust_video_L5")
    return Preset(name=name, study=study, n_trials=n_trials, direction=direction, storage=data.get("storage"),
                  sampler=sampler, pruner=pruner, heartbeat=heartbeat, arms=arms)


def _options(section: str, defaults: dict, given, known: dict, of: str) -> dict:
    """``defaults`` updated with the mapping ``given``, each value checked against ``known``'s kind and least value."""
    if given is not None and not isinstance(given, dict):
        off = ", or null for none" if section == "pruner" else ""
        raise CutlabError(f"search.{section} must be a mapping of options of {of}{off}, got {given!r}; "
                          f"e.g. search.{section}.{next(iter(known))}={next(iter(known.values()))[2]}")
    options = {**defaults, **(given or {})}
    for option, value in options.items():
        if option not in known:
            raise CutlabError(f"search.{section}.{option} is not an option of {of} a preset sets; "
                              f"the options are {', '.join(known)}")
        kind, least, example = known[option]
        key = f"search.{section}.{option}"
        if kind == "flag":
            check_flag(key, value, example)
        elif kind == "number":
            check_number(key, value, example, minimum=least, exclusive=True)
        else:
            check_integer(key, value, example, least, MAX_SEED if option == "seed" else None)
    return options


def _overrides(value, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and "=" in v for v in value):
        raise CutlabError(f"search.{key} must be a list of cutlab overrides, got {value!r}; e.g. [train=constrained, L=5]")
    return tuple(value)


def _arm(name: str, spec, common: tuple[str, ...]) -> Arm:
    if not isinstance(spec, dict) or set(spec) - ARM_KEYS:
        raise CutlabError(f"search arm {name!r} must be a mapping with keys from {sorted(ARM_KEYS)}, got {spec!r}")
    seeds = bool(spec.get("seeds", False))
    if seeds == ("space" in spec):
        raise CutlabError(f"search arm {name!r} needs either a space or seeds: true (one trial per seed)")
    space = () if seeds else parse_space(spec["space"], f"arms.{name}.space")
    arm = Arm(str(name), common + _overrides(spec.get("overrides"), f"arms.{name}.overrides"), space, seeds)
    return _searched_apart(arm, common)


def _searched_apart(arm: Arm, common: tuple[str, ...]) -> Arm:
    """``arm`` when its fixed overrides (``common`` to every arm, then its own) set no key its space searches.
    Before: the trial's drawn value, given after them, replaced the preset's fixed one in silence."""
    if found := first_searched(arm.overrides, arm.space):
        override, param = found
        where = "overrides" if override in common else f"arms.{arm.name}.overrides"
        raise CutlabError(f"search.{where} sets {override}, and the space searches {param.key}: each trial's drawn "
                          "value would replace it; drop one of the two from the preset")
    return arm


def first_searched(overrides, space: tuple[Param, ...]) -> tuple[str, Param] | None:
    """The first of ``overrides`` that sets a key ``space`` searches, with that key's Param: each trial's drawn value,
    given after the fixed overrides, would replace it."""
    searched = {param.key: param for param in space}
    for override in overrides:
        if (key := override.lstrip("+~").partition("=")[0]) in searched:
            return override, searched[key]
    return None


def parse_space(space, where: str) -> tuple[Param, ...]:
    if not isinstance(space, dict) or not space:
        raise CutlabError(f"search.{where} must map config keys to ranges, got {space!r}; e.g. {EXAMPLE}")
    return tuple(_param(str(key), spec, where) for key, spec in space.items())


def _param(key: str, spec, where: str) -> Param:
    name = f"search.{where}.{key}"
    if not isinstance(spec, dict):
        raise CutlabError(f"{name} must be a mapping such as {{type: float, low: 0.1, high: 0.5}}, got {spec!r}")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise CutlabError(f"{name}: unknown fields {sorted(unknown)}; known: {sorted(SPEC_KEYS)}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise CutlabError(f"{name}.type must be one of {', '.join(TYPES)}, got {kind!r}; e.g. {EXAMPLE}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, (list, tuple)) or not choices:
            raise CutlabError(f"{name}.choices must be a non-empty list, e.g. choices: [slack, off]")
        if spec.get("step") is not None:
            raise CutlabError(f"{name}: a categorical takes no step (it draws one of its choices); drop step")
        return Param(key, kind, choices=tuple(choices))
    low, high, step = spec.get("low"), spec.get("high"), spec.get("step")
    for bound, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise CutlabError(f"{name}.{bound} must be a number, got {value!r}; e.g. {EXAMPLE}")
    if low > high:
        raise CutlabError(f"{name}: low ({low:g}) > high ({high:g}); swap them, e.g. {{type: {kind}, low: {high:g}, high: {low:g}}}")
    if kind == "log_float" and low <= 0:
        raise CutlabError(f"{name}: a log_float range needs low > 0, got {low:g}; e.g. {EXAMPLE}")
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise CutlabError(f"{name}: an int range needs whole-number bounds, got {low!r}..{high!r}")
    return Param(key, kind, float(low) if kind != "int" else int(low), float(high) if kind != "int" else int(high),
                 step=_step(name, kind, step, high - low))


def _step(name: str, kind: str, step, width: float) -> float | int | None:
    """The range's step as Optuna's suggest takes it; checked here: Optuna's refusal in the first trial left it
    RUNNING."""
    if step is None:
        return None
    if kind == "log_float":
        raise CutlabError(f"{name}: a log_float range takes no step (Optuna draws it on a log scale); drop step, or "
                          "use type: float with a step")
    step = check_integer(f"{name}.step", step, "2", 1) if kind == "int" else \
        check_number(f"{name}.step", step, "0.1", minimum=0.0, exclusive=True)
    if step > width > 0:  # every trial would draw low
        raise CutlabError(f"{name}: step {step:g} is wider than the range ({width:g}); give a smaller step")
    return step


def as_override(key: str, value: Any) -> str:
    """``key=value`` as a Hydra override (floats keep full precision)."""
    if isinstance(value, float):
        return f"{key}={value!r}"
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    return f"{key}={value}"
