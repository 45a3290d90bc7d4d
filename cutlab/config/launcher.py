"""The launcher group's keys (conf/launcher/*.yaml): one table, read by the folder naming, the checks and the launchers.

Every key is a command-line override of the ``launcher`` group, ``launcher=slurm launcher.partition=gpu``. The
SLURM keys carry submitit's names (those of ``submitit.AutoExecutor`` and Hydra's submitit launcher plugin:
``timeout_min``, ``mem_gb``, ``additional_parameters``); ``max_requeues``, ``threads``, ``max_parallel`` and
``warm_workers`` are cutlab's own. None of them changes what a run computes, so none names a run's folder
(cutlab.config.neutral) and a misspelt one stops before Hydra starts, naming the valid keys.
"""

from __future__ import annotations

from cutlab.errors import CutlabError

# The sbatch settings, as a SLURM profile file (slurm/*.yaml) and the command line give them
SLURM_SETTINGS = ("partition", "qos", "account", "constraint", "timeout_min", "mem_gb", "cpus_per_task",
                  "gpus_per_node", "array_parallelism", "signal_delay_s", "max_requeues", "setup",
                  "additional_parameters")
KEYS = {
    "inprocess": ("name",),
    "local": ("name", "max_parallel", "threads", "warm_workers"),
    "slurm": ("name", "profile", "threads", *SLURM_SETTINGS),
}
ALL_KEYS = tuple(dict.fromkeys(key for keys in KEYS.values() for key in keys))
# Names of earlier profile files, and the submitit name each became
RENAMED = {"time_min": "timeout_min", "additional": "additional_parameters"}
# Hydra's plugin groups, as a Hydra user reaches for them: cutlab launches and searches itself (installed, a Hydra
# launcher plugin would take an in-process sweep's runs over from cutlab's own), so each names cutlab's way instead
HYDRA_PLUGINS = {
    "hydra/launcher": "its launchers are launcher=inprocess|local|slurm (launcher=slurm submits through submitit, with "
                      "submitit's keys: launcher.partition=gpu launcher.timeout_min=60)",
    "hydra/sweeper": "a sweep is -m with lists (gamma=0,0.09) or a sweep file (-m --config-name table3), and the "
                     "Bayesian search (Optuna TPE) is cutlab-search search=PRESET",
}


def launchers_with(key: str) -> list[str]:
    """The launchers that have ``key``."""
    return [name for name, keys in KEYS.items() if key in keys]


def submitit_key(name: str) -> str | None:
    """cutlab's key for ``name`` as submitit's AutoExecutor spells it (``slurm_partition``, ``slurm_time``) or sbatch
    does (``time``), else None."""
    bare = name.removeprefix("slurm_")
    meant = "timeout_min" if bare == "time" else bare
    return meant if meant != name and meant in KEYS["slurm"] else None


def folder_neutral_keys() -> tuple[str, ...]:
    """``launcher`` and every ``launcher.<key>``: Hydra leaves them out of a run's folder name (exact keys only)."""
    return ("launcher", *(f"launcher.{key}" for key in ALL_KEYS))


def valid_keys_text() -> str:
    return "; ".join(f"launcher={name}: {', '.join(k for k in keys if k != 'name') or '(none)'}"
                     for name, keys in KEYS.items())


def is_launcher_override(argument: str) -> bool:
    """``launcher=NAME`` or ``launcher.KEY=...`` (with + or ~): where runs go, never part of a run's config."""
    key = argument.lstrip("+~").partition("=")[0]
    return key == "launcher" or key.startswith("launcher.")


def check_launcher_overrides(arguments: list[str]) -> None:
    """Before Hydra starts: every ``launcher.KEY=`` override names a key of some launcher, directly, and Hydra's
    launcher and sweeper plugins (``hydra/launcher=submitit_slurm``, ``hydra.launcher.KEY=``) and ``hydra.mode`` are
    pointed to cutlab's.

    A nested key (``+launcher.additional_parameters.qos=high``) would reach Hydra's folder name, which leaves out
    exact keys only, so sbatch options are given as one mapping instead."""
    chosen = [a.partition("=")[2] for a in arguments if a.startswith("launcher=")]
    for argument in arguments:
        key, equals, value = argument.lstrip("+~").partition("=")
        if key in HYDRA_PLUGINS and value != "basic":  # basic: Hydra's own default, which cutlab runs on
            raise CutlabError(f"{key}={value}: cutlab does not use Hydra's {key.partition('/')[2]} plugins; "
                              f"{HYDRA_PLUGINS[key]}")
        if key == "hydra.mode":  # MULTIRUN ran Hydra's own loop: no plan, no launcher, no sweep record
            raise CutlabError(f"{key} is cutlab's to set: a sweep is -m (python -m cutlab -m gamma=0,0.09), which "
                              "cutlab plans, launches and records; one run is the command without it; leave "
                              "hydra.mode out")
        if key == "hydra.sweeper" or key.startswith("hydra.sweeper."):  # the planner's AttributeError traceback
            raise CutlabError(f"{key}: hydra.sweeper is set in a sweep file (its hydra.sweeper.params; run it with -m "
                              "--config-dir FOLDER --config-name NAME), not on the command line; there, give KEY=A,B "
                              "with -m (python -m cutlab -m gamma=0,0.09)")
        if key.startswith("hydra.launcher."):
            ours = key.removeprefix("hydra.launcher.")
            instead = (f"write launcher.{ours}={value} (with launcher={launchers_with(ours)[0]})" if ours in ALL_KEYS
                       else f"the keys are {valid_keys_text()}")
            raise CutlabError(f"{key}: cutlab's launcher keys are launcher.KEY (submitit's names for SLURM); {instead}")
        if not key.startswith("launcher.") or (not equals and not argument.startswith("~")):
            continue
        top, _, nested = key[len("launcher."):].partition(".")
        if top in RENAMED:
            raise CutlabError(f"launcher.{top} is now launcher.{RENAMED[top]} (submitit's name); write "
                              f"launcher.{RENAMED[top]}={value}")
        if top not in ALL_KEYS:
            meant = submitit_key(top)
            if meant:
                raise CutlabError(f"launcher.{top} is launcher.{meant} here (Hydra's submitit launcher's name for it): "
                                  f"write launcher.{meant}={value}")
            raise CutlabError(f"unknown launcher key {key!r}; the keys are {valid_keys_text()}")
        if nested:
            raise CutlabError(f"give {top} as one mapping, launcher.{top}={{{nested}:{value}}} (several: "
                              f"{{qos:high,account:mylab}}); a nested launcher key would rename the run's folder")
        owners = launchers_with(top)
        if chosen and chosen[-1] in KEYS and top not in KEYS[chosen[-1]]:
            raise CutlabError(f"launcher={chosen[-1]} has no key {top} (it is launcher={'|'.join(owners)}'s); "
                              f"launcher={chosen[-1]}'s keys are {', '.join(KEYS[chosen[-1]][1:]) or '(none)'}")
        if argument.startswith("+") and not argument.startswith("++"):
            raise CutlabError(f"launcher.{top} is a key of launcher={'|'.join(owners)}: write launcher.{top}={value} "
                              f"without the '+' (with launcher={owners[0]})")


def check_launcher_node(launcher: dict) -> str:
    """The composed ``launcher`` node holds only its launcher's keys; returns the launcher's name."""
    name = launcher.get("name", "inprocess")
    if name not in KEYS:
        raise CutlabError(f"unknown launcher {name!r}; choose one of launcher={','.join(KEYS)}")
    extra = sorted(set(launcher) - set(KEYS[name]))
    if extra:
        raise CutlabError(f"launcher={name} has no key {', '.join(extra)}; its keys are "
                          f"{', '.join(k for k in KEYS[name] if k != 'name') or '(none)'} ({valid_keys_text()})")
    _check_own_values(launcher)
    return name


def _check_own_values(launcher: dict) -> None:
    """cutlab's own launcher keys (the SLURM ones are checked with their profile, cutlab/launch/slurm_profile.py)."""
    for key, example in (("max_parallel", "2"), ("threads", "1")):
        if key not in launcher or (key == "threads" and launcher[key] is None):  # null threads: SLURM's cpus_per_task
            continue
        value = launcher[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CutlabError(f"launcher.{key} must be a whole number >= 1, got {value!r}; e.g. launcher.{key}={example}")
    if "warm_workers" in launcher and not isinstance(launcher["warm_workers"], bool):
        raise CutlabError(f"launcher.warm_workers must be true or false, got {launcher['warm_workers']!r}; "
                          "e.g. launcher.warm_workers=false")
