"""The evaluation's config: the run's own config with only the data and the evaluation settings replaced.

The model, its depth, the training and the seed stay the run's: the weights fix them. What cannot work with
them is refused here, in one line, before any data or weights are loaded.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from cutlab.config.checks import check_config
from cutlab.errors import CutlabError

#: the keys a cutlab-eval override may set (``data=NAME`` and ``data.KEY=...`` included)
SETTABLE = ("data", "eval.gamma_test", "eval.batch_size", "device", "threads", "progress", "paths.data_dir",
            "paths.cache_dir", "hydra.searchpath")  # the last: --config-dir, for a data config of one's own
OVERRIDE = re.compile(r"^[+~]?(?P<key>[A-Za-z_][\w.]*)=")
USAGE = ("data=NAME, data.KEY=VALUE, eval.gamma_test=[...], eval.batch_size=N, device=..., threads=N, progress=false, "
         "paths.data_dir=..., paths.cache_dir=...")


def is_override(argument: str) -> bool:
    """A ``key=value`` argument that is not an existing path (run folder names hold ``=`` too)."""
    return bool(OVERRIDE.match(argument)) and not Path(argument).exists()


def check_overrides(overrides: list[str]) -> None:
    for override in overrides:
        key = OVERRIDE.match(override)["key"]
        if not any(key == allowed or key.startswith(allowed + ".") for allowed in SETTABLE):
            raise CutlabError(f"{override!r} is neither a run folder nor a setting cutlab-eval takes ({USAGE}); the "
                              "model, its training and L are the run's own")


def compose_settings(overrides: list[str]) -> DictConfig:
    """The overrides composed as ``python -m cutlab`` would: data configs, their interpolations, Hydra's syntax."""
    from cutlab.config.compose import compose_run_config

    check_overrides(overrides)
    if any(OVERRIDE.match(o)["key"] == "data" for o in overrides):
        base = compose_run_config([o for o in overrides if not _is_data_key(o)])
        if not any(_is_data_key(o) for o in overrides):
            return base  # all the overrides: composing them again would give the same config (0.3 s each)
        check_data_keys(overrides, base.data, f"data={base.data.name}")
        return compose_run_config(overrides)
    # data.KEY=... alone sets a key of each run's own data, checked there (evaluation_config): the default data
    # config composed here may lack it (a text run's data.max_length), so it is set whether or not that has it
    return compose_run_config([f"++{o.lstrip('+')}" if _is_data_key(o) else o for o in overrides],
                              checked_by_caller=("data",))


def check_data_keys(overrides: list[str], data: DictConfig, named: str) -> None:
    """``data.roott=x`` or ``+data.roott=x``: a key the data config lacks would be read by nothing (Hydra's own
    answer to the first, "use +data.roott=x", adds it silently, and the default data would be evaluated)."""
    for override in (o for o in overrides if _is_data_key(o)):
        key = OVERRIDE.match(override)["key"]
        if key.split(".")[1] not in data:
            raise CutlabError(f"{key} is not a key of {named} (its keys: {', '.join(sorted(data))}); check its "
                              "spelling, or choose another data set with data=NAME")


def _is_data_key(override: str) -> bool:
    match = OVERRIDE.match(override)
    return bool(match) and match["key"].startswith("data.")


def evaluation_config(run_cfg: DictConfig, settings: DictConfig, overrides: list[str]) -> DictConfig:
    """The run's config with the data (when ``data=``/``data.*`` is given) and the given evaluation settings."""
    keys = {OVERRIDE.match(override)["key"] for override in overrides}
    cfg = run_cfg.copy()
    with open_dict(cfg):
        if "data" in keys:
            cfg.data = settings.data
        else:  # data.KEY=... alone changes the run's own data config (not the composed default's)
            check_data_keys(overrides, run_cfg.data, f"the run's data (data={run_cfg.data.name})")
            for key in sorted(k for k in keys if k.startswith("data.")):
                OmegaConf.update(cfg, key, OmegaConf.select(settings, key), merge=False)
        if any(key == "data" or key.startswith("data.") for key in keys):
            root = cfg.data.get("root")
            if located(root) != root:  # the record names the data wherever it was run from
                cfg.data.root = located(root)
        for key in ("eval.gamma_test", "eval.batch_size", "device", "threads", "progress"):
            if key in keys:
                OmegaConf.update(cfg, key, OmegaConf.select(settings, key), merge=False)
        cfg.paths.cache_dir = settings.paths.cache_dir  # this machine's cache, not the one the run trained on
    return cfg


def located(root):
    """An existing ``data.root`` as an absolute path (``~`` and symlinks resolved); anything else as given."""
    if isinstance(root, str) and root.strip() and Path(root).expanduser().exists():  # '' is no folder, not '.'
        return str(Path(root).expanduser().resolve())
    return root


@functools.cache  # one composition per data set and command, however many runs it evaluates
def default_data(name: str) -> dict | None:
    """``data=NAME`` as composed here, its root located as an evaluation's is: what an evaluation's label says its
    data differs from. None for a name the config tree cannot compose on its own."""
    try:
        data = OmegaConf.to_container(compose_settings([f"data={name}"]).data, resolve=True)
    except (CutlabError, OmegaConfBaseException):
        return None
    return {**data, "root": located(data.get("root"))} if "root" in data else data


def check_held_out(run_cfg: DictConfig, cfg: DictConfig, split: str, run_name: str) -> None:
    """Refuse a split of the run's own data (its data set, from the same root) that holds samples it was trained on:
    cutlab-eval evaluates data a run was not trained on, and the analysis reports its records so; with --split all
    the demo's test rmse read 14.30 against its own test split's 14.65. The same data moved to another root is not
    recognised as the run's own."""
    from cutlab.config.data_settings import SPLIT_KEYS

    own, data = run_cfg.data, cfg.data
    if data.name != own.name or located(data.get("root")) != located(own.get("root")):
        return
    if split in ("train", "all"):
        raise CutlabError(f"{run_name}: --split {split} of the data it was trained on (data={own.name}) holds its "
                          "training samples, and cutlab-eval evaluates data a run was not trained on; pass --split "
                          "test or val (its training losses are in its history.csv)")
    moved = [key for key in SPLIT_KEYS if key in data and key in own and data[key] != own[key]]
    if moved:
        given = ", ".join(f"data.{key}={data[key]}" for key in moved)
        trained = ", ".join(f"data.{key}={own[key]}" for key in moved)
        raise CutlabError(f"{run_name}: {given} moves samples between the splits of the data it was trained on "
                          f"(with {trained}), so its {split} split may hold training samples; leave "
                          f"{'it' if len(moved) == 1 else 'them'} as the run had {'it' if len(moved) == 1 else 'them'}")


def check_fits(run_cfg: DictConfig, cfg: DictConfig, run_name: str) -> None:
    """Refuse data the run's model cannot read: another family, another patch size, another label count."""
    from cutlab.config.groups import choices_of_kind

    model, data = run_cfg.model, cfg.data
    model_kind, data_kind = model.get("task"), data.get("task")
    if model_kind != data_kind:
        choices = "|".join(choices_of_kind("data", model_kind)) or "?"
        raise CutlabError(f"{run_name}: its model={model.name} reads {model_kind} data but data={data.name} is "
                          f"{data_kind} data; evaluate it on {model_kind} data (data={choices})")
    if model_kind == "video" and "patch" in model and data.get("patch") != model.patch:
        raise CutlabError(f"{run_name}: its model={model.name} reads {model.patch}x{model.patch} patches but "
                          f"data.patch={data.get('patch')}; pass data.patch={model.patch}")
    if "num_labels" in run_cfg.data and data.get("num_labels") != run_cfg.data.num_labels:
        raise CutlabError(f"{run_name}: its readout has {run_cfg.data.num_labels} classes (trained on "
                          f"data={run_cfg.data.name}) but data={data.name} has {data.get('num_labels')} labels; "
                          f"evaluate it on data with {run_cfg.data.num_labels} labels")
    check_config(cfg)
