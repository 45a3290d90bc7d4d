"""What ``python -m cutlab --info`` adds to Hydra's own text: the launcher that really runs a multirun.

Hydra's --info lists ``hydra/launcher: basic``, which is true only of ``launcher=inprocess``: with
``launcher=local`` or ``launcher=slurm`` cutlab plans and launches the sweep itself before Hydra starts
(cutlab/launch/sweep.py), and Hydra never sees the multirun. This section names that launcher and its
effective settings (for SLURM, the profile's values overridden by the command line's ``launcher.KEY=``).
"""

from __future__ import annotations

from cutlab.config.launcher import check_launcher_node
from cutlab.launch.plan import config_flag
from cutlab.errors import CutlabError

INFO_SECTIONS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
VALUE_FLAGS = ("-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir", "--package", "-p",
               "--experimental-rerun")


def info_arguments(argv: list[str]) -> tuple[str | None, list[str], str | None] | None:
    """(config name, overrides, config dir) of a ``--info`` command line; None when it is not one."""
    if not any(a in ("--info", "-i") or a.startswith("--info=") for a in argv):
        return None
    config_name, overrides, config_dir, args = None, [], None, iter(argv)
    for arg in args:
        if flag := config_flag(arg, args):
            if flag[0] == "config_name":
                config_name = flag[1]
            else:
                config_dir = flag[1]
        elif arg in VALUE_FLAGS:
            next(args, None)
        elif not arg.startswith("-") and arg not in INFO_SECTIONS:
            overrides.append(arg)
    return config_name, overrides, config_dir


def launcher_info(config_name: str | None, overrides: list[str], config_dir: str | None = None) -> str:
    """The ``cutlab launcher`` section of --info."""
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from cutlab.config.compose import main_hydra

    try:
        with main_hydra(config_dir) as hydra:
            cfg = hydra.compose_config(config_name or "config", overrides, run_mode=RunMode.MULTIRUN,
                                       with_log_configuration=False)
            launcher = OmegaConf.to_container(cfg.launcher, resolve=True)
    except Exception as error:  # Hydra has said what is wrong with the command above
        return f"cutlab launcher: not known ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
    name = check_launcher_node(launcher)
    lines = ["", "cutlab launcher", "***************"]
    if name == "inprocess":
        lines.append("launcher: inprocess: a multirun (-m) runs in this process through Hydra's hydra/launcher (basic)")
        return "\n".join(lines)
    lines.append(f"launcher: {name}: cutlab plans and launches a multirun (-m) itself, before Hydra starts "
                 "(cutlab/launch/sweep.py); Hydra's hydra/launcher (basic, above) does not run it")
    if name == "local":
        lines.append("settings: " + " ".join(f"{k}={launcher[k]}" for k in launcher if k != "name"))
    else:
        from dataclasses import asdict

        from cutlab.launch.slurm_profile import slurm_settings

        try:
            profile = slurm_settings(launcher)
        except CutlabError as error:
            return "\n".join([*lines, f"settings: not valid: {error}"])
        settings = asdict(profile)
        name = settings.pop("name")
        shown = [*(f"{k}={v}" for k, v in settings.items()), f"threads={_threads(launcher, profile, overrides)}"]
        lines.append(f"settings (profile {name}, overridden by launcher.KEY=): " + " ".join(shown))
    return "\n".join(lines)


def _threads(launcher: dict, profile, overrides: list[str]) -> str:
    """The torch threads each job's run uses (launcher.threads alone read None where it is null: the job's CPUs)."""
    from cutlab.launch.slurm_profile import job_threads, own_threads

    threads = job_threads(launcher.get("threads"), overrides, profile)
    if threads is None:
        return f"{own_threads(overrides)} (the runs' threads=)"
    return str(threads) if launcher.get("threads") is not None else f"{threads} (cpus_per_task)"
