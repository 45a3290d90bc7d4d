"""The one composer of the config tree: a run's config exactly as ``python -m cutlab <overrides>`` composes it.

The package cutlab.conf (the repository's conf/) is the primary config module and cutlab.sweeps (sweeps/) joins it on
Hydra's search path through cutlab/config/searchpath.py, so ``--config-name table3`` finds sweeps/table3.yaml.
The sweep plan, the search and the benchmarks compose through this module; ``python -m cutlab`` itself composes
through ``hydra.main`` on the same packages.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from cutlab.config.groups import (check_added_keys, check_deleted_keys, check_group_choices, did_you_mean,
                                  sweep_names)
from cutlab.config.launcher import HYDRA_PLUGINS, check_launcher_overrides, valid_keys_text
from cutlab.config.naming import check_folder_overrides, run_name
from cutlab.config.paths import CONFIG_MODULE
from cutlab.config.resolvers import register_resolvers
from cutlab.config.searchpath import register_sweeps
from cutlab.errors import CutlabError
from cutlab.interrupted import ctrl_c_held


@contextmanager
def main_hydra(config_dir: str | None = None) -> Iterator:
    """Hydra's composer over cutlab.conf + cutlab.sweeps (+ ``config_dir``, as ``--config-dir`` adds it), as
    ``hydra.main`` builds it; Hydra's global state is cleared after."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    register_sweeps()
    version.setbase("1.3")  # as hydra.main(version_base="1.3") in cutlab.cli
    GlobalHydra.instance().clear()
    search_path = create_config_search_path(f"pkg://{CONFIG_MODULE}")  # + cutlab.sweeps (register_sweeps)
    if config_dir:  # where and how hydra.main puts --config-dir
        from hydra.core.config_search_path import SearchPathQuery

        search_path.prepend(provider="command-line", path=f"file://{Path(config_dir).resolve()}",
                            anchor=SearchPathQuery(provider="schema"))
    try:
        with ctrl_c_held():  # a Ctrl-C inside OmegaConf's node building would come out as a config error
            yield Hydra.create_main_hydra2(task_name="cutlab", config_search_path=search_path)
    except yaml.YAMLError as error:  # Hydra lets a config file's YAML error through as a traceback
        raise CutlabError(yaml_message(error)) from None
    finally:
        GlobalHydra.instance().clear()


def yaml_message(error: yaml.YAMLError) -> str:
    """A config file's YAML error as one line naming the file, line and column (PyYAML's marks count from 0)."""
    mark, context = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).strip().splitlines()[-1]
    if context is not None and getattr(error, "context", None):  # where the unfinished construct began
        problem = f"{error.context} begun at line {context.line + 1}, column {context.column + 1}: {problem}"
    where = f"{mark.name} is not valid YAML at line {mark.line + 1}, column {mark.column + 1}" if mark else \
        "a config file is not valid YAML"
    return f"{where} ({problem}); fix the file there"


def check_overrides(overrides: list[str], checked_by_caller: tuple[str, ...] = ()) -> None:
    """The command line's own checks, before Hydra composes it: launcher keys, group choices, a key added with
    '+' that nothing reads, one deleted with '~' that every run reads, and Hydra's folder keys. They read the config
    tree with OmegaConf, so Ctrl-C is held (cutlab.interrupted)."""
    with ctrl_c_held():
        check_launcher_overrides(overrides)
        check_group_choices(overrides)
        check_added_keys(overrides, checked_by_caller)
        check_deleted_keys(overrides)
        check_folder_overrides(overrides)


def forced_as_plain(command) -> dict[str, str]:
    """``++KEY=VALUE`` of a key the config already has, as ``KEY=VALUE`` (Hydra sets it alike): Hydra names the run's
    folder from the overrides as typed, so ``++seed=1`` and ``seed=1`` trained one run twice, in two folders. Returns
    {as typed: plain}; a group, Hydra's own keys, a key the config lacks, and a command that does not compose (its
    checks say why) are left as typed."""
    forced = [override for override in command.overrides if override.startswith("++")]
    if not forced:
        return {}
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    rest = [override for override in command.overrides if not override.startswith("++")]
    mode = RunMode.MULTIRUN if command.multirun or command.plan else RunMode.RUN
    try:
        with main_hydra(command.config_dir) as hydra:
            cfg = hydra.compose_config(command.config_name or "config", rest, run_mode=mode,
                                       with_log_configuration=False)
    except (HydraException, OmegaConfBaseException):
        return {}
    groups, absent = set(cfg.hydra.runtime.choices), object()
    plain = {}
    for override in forced:
        key = override[2:].partition("=")[0]
        if key.partition(".")[0] not in ("hydra", *groups) and "@" not in key and "/" not in key and \
                OmegaConf.select(cfg, key, default=absent, throw_on_resolution_failure=False) is not absent:
            plain[override] = override[2:]
    return plain


def check_is_override(argument: str) -> None:
    """A word that is no Hydra override (KEY=VALUE, +KEY=VALUE, ~KEY): one line saying what it seems to be, where
    Hydra would say only "Error parsing override" (a run folder given to resume it, half of an unquoted value)."""
    key = argument.partition("=")[0]
    if "=" in argument and "/" not in key:  # a run folder's name is its overrides (L=3): with no '/', one is meant
        return
    try:
        path = Path(argument).expanduser()
    except RuntimeError:  # ~train.alpha, Hydra's deletion: no user named train.alpha (pathlib's traceback)
        path = Path(argument)
    try:
        a_run = (path / "config.yaml").is_file() and (path / "summary.json").is_file()
    except OSError:  # a name too long for a path
        a_run = False
    if not a_run and (argument.startswith("~") or "=" in argument):  # ~KEY deletes; hydra/launcher=NAME, a group
        return
    if a_run:
        raise CutlabError(f"{argument} is a run folder, not a setting (settings are KEY=VALUE, e.g. model=ut L=5): to "
                          "resume it, run the command that started it again (its provenance.json holds it as "
                          "'command'); to evaluate it: cutlab-eval RUN")
    if path.suffix in (".yaml", ".yml"):
        hint = ("a sweep file of your own is named without its .yaml, with its folder: --config-dir FOLDER "
                "--config-name NAME")
    else:
        hint = "quote a value with spaces or other characters for Hydra, e.g. \"data.root='my folder'\""
    raise CutlabError(f"{argument!r} is not a setting: settings are KEY=VALUE (e.g. model=ut L=5); {hint}")


def hydra_quoted(text: str) -> str:
    """``text`` as one quoted Hydra value: ',' '=' brackets or quotes in it stay part of it."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def compose_run_config(overrides: list[str], checked_by_caller: tuple[str, ...] = ()) -> DictConfig:
    """The resolved config ``python -m cutlab <overrides>`` would run (without the ``hydra`` node); keys added under
    the nodes ``checked_by_caller`` are left to the caller to check (check_overrides)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    for override in overrides:
        check_is_override(override)
    check_overrides(overrides, checked_by_caller)
    try:
        with main_hydra() as hydra:
            cfg = hydra.compose_config("config", list(overrides), run_mode=RunMode.RUN, from_shell=False,
                                       with_log_configuration=False)
            HydraConfig.instance().set_config(cfg)  # ${hydra:runtime.cwd} in paths.data_dir resolves through it
            with open_dict(cfg):
                del cfg["hydra"]
            OmegaConf.resolve(cfg)
    except CutlabError:
        raise
    except Exception as error:  # Hydra's own messages name the bad override
        several = several_values(error, "this command takes one value per key, so give one (and run it once per "
                                        "value)")  # Hydra's "Ambiguous value", answered with "check the key"
        reason = composition_message(error) if isinstance(error, (HydraException, OmegaConfBaseException)) else error
        raise CutlabError(several or f"cutlab overrides {' '.join(overrides)!r} do not compose: {reason}") from None
    return cfg


def check_shown_config(argv: list[str]) -> None:
    """``--cfg job``, Hydra's own path: an override it cannot apply is one line, where Hydra printed five with its
    advice to add the key with '+'. Composed, not resolved, as --cfg prints it: an unset ${oc.env:VAR} still prints.
    So are --help, --hydra-help and --info, which compose the config too (Hydra's traceback before)."""
    import contextlib
    import io

    from hydra._internal.utils import get_args_parser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = get_args_parser().parse_args([arg for arg in argv if arg != "--plan"])  # --plan is cutlab's
    except SystemExit as stop:  # a flag Hydra's parser refuses: its usage (a dozen lines) named the script __main__.py
        if stop.code in (0, None):  # --version: Hydra prints it itself
            return
        reason = said.getvalue().strip().splitlines()[-1].partition("error: ")[2]
        hint = "; give one before the overrides (--info config KEY=VALUE)" if "argument --info" in reason else ""
        raise CutlabError(f"{reason}{hint}; --help lists the flags") from None
    _check_looking_flags(args)
    shown = next((flag for flag, on in (("--cfg", args.cfg is not None), ("--info", args.info is not None),
                                        ("--help", args.help), ("--hydra-help", args.hydra_help)) if on), None)
    if shown is None:
        return
    try:
        with main_hydra(args.config_dir) as hydra:
            cfg = hydra.compose_config(args.config_name or "config", args.overrides, run_mode=RunMode.RUN,
                                       with_log_configuration=False)
            if args.resolve:
                resolve_given(cfg, args.overrides)
    except (HydraException, OmegaConfBaseException) as error:
        several = several_values(error, f"{shown} shows one run's config, so give one value; python -m cutlab "
                                        "--plan -m {} lists the sweep's runs")
        raise CutlabError(several or f"the command's config cannot be composed: {composition_message(error)}") from None


def several_values(error: Exception, advice: str) -> str | None:
    """KEY=A,B where one run was asked for, which Hydra calls an "Ambiguous value" (as if the key were wrong): the
    line saying it is a sweep, with ``advice`` ({} stands for the override); None for another error."""
    several = re.search(r"Ambiguous value for argument '([^']*)'", str(error))
    return f"{several[1]} gives several values, which is a sweep: {advice.format(several[1])}" if several else None


def _check_looking_flags(args) -> None:
    """Hydra's ValueError tracebacks: two of its modes at once (--cfg job --info), --resolve without --cfg,
    --shell-completion without its one subcommand; and --package without --cfg, which Hydra ignored."""
    modes = [flag for flag, on in (("--run", args.run), ("--cfg", args.cfg is not None), ("--info", args.info),
                                   ("--shell-completion", args.shell_completion)) if on]
    if len(modes) > 1:
        raise CutlabError(f"{modes[0]} and {modes[1]} do not go together: give one of them")
    if args.resolve and args.cfg is None and not args.help:
        raise CutlabError("--resolve resolves the config --cfg prints: add --cfg (python -m cutlab --cfg job --resolve "
                          "...)")
    if args.package and args.cfg is None and not args.help:  # ignored by Hydra: the whole run started
        raise CutlabError("--package picks the part of the config --cfg prints: add --cfg (python -m cutlab --cfg job "
                          f"--package {args.package})")
    subcommands = [o for o in args.overrides if o.partition("=")[0] in ("install", "uninstall", "query")]
    if args.shell_completion and len(subcommands) != 1:
        raise CutlabError("--shell-completion takes one of install=SHELL, uninstall=SHELL or query=SHELL, e.g. "
                          "cutlab --shell-completion install=bash")
    subcommand = subcommands[0].partition("=")[0] if args.shell_completion else None
    if subcommand == "install" and Path(sys.argv[0]).name == "__main__.py":  # python -m cutlab
        raise CutlabError("python -m cutlab cannot complete itself (Hydra's completion knows python SCRIPT.py, not "
                          "python -m, and would take over every python command's): install the cutlab command's, "
                          "eval \"$(cutlab --shell-completion install=bash)\"")
    if subcommand == "query" and "COMP_LINE" not in os.environ:  # Hydra's KeyError traceback
        raise CutlabError("query=SHELL is what the installed completion calls, with the shell's COMP_LINE set; install "
                          "it instead: eval \"$(cutlab --shell-completion install=bash)\"")


# Hydra's Optuna and Ax sweepers read interval(); its basic sweeper, which -m runs on, cannot
INTERVAL_FIX = ("interval(low,high) is a range for a Bayesian search, which -m cannot run: give values (gamma=0,0.09) "
                "or range(start,stop,step) with -m, or search the range with cutlab-search")


def composition_message(error: Exception) -> str:
    """Hydra's report of an override it cannot apply as one line with cutlab's fix: Hydra's own second line advises
    adding an unknown key with '+', which would be read by nothing (cutlab.config.groups.check_added_keys)."""
    text = str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
    if missing := re.search(r"Cannot find primary config '([^']+)'", text):
        near = difflib.get_close_matches(missing[1], sweep_names(), n=1, cutoff=0.75)
        fix = ((f"did you mean --config-name {near[0]}? " if near else "") + "a sweep file is one of --config-name "
               f"{','.join(sweep_names())}, or one of your own: --config-dir FOLDER --config-name NAME (for "
               "FOLDER/NAME.yaml)")
    elif plugin := re.search(r"Could not find '(hydra/(?:launcher|sweeper))/", text):  # a sweep file's override
        fix = f"cutlab does not use Hydra's {plugin[1].partition('/')[2]} plugins; {HYDRA_PLUGINS[plugin[1]]}"
    elif "Could not find" in text:
        fix = "choose a config that exists under conf/"
    elif "'launcher." in text:  # a sweep file's launcher key, or an expand() caller that checked no overrides first
        fix = f"each launcher has its own keys: {valid_keys_text()}"
    elif "INTERVAL_SWEEP" in text or ("requires --multirun" in text and "interval(" in text):
        fix = INTERVAL_FIX
    elif "requires --multirun" in text:  # range(), choice(), glob() without -m
        fix = "a sweep function gives several values: add -m to run one run per value (python -m cutlab -m ...)"
    elif "An item is already at" in text:
        fix = "drop the leading '+': the key is there already"
    elif "LexerNoViableAlt" in text or "mismatched input" in text or "Error parsing override" in text:
        fix = "quote a value with spaces or other characters for Hydra, e.g. \"data.root='my folder'\""
    elif variable := re.search(r"Environment variable '([^']+)' not found", text):  # ${oc.env:VAR} with VAR unset
        fix = f"set {variable[1]}, or give ${{oc.env:{variable[1]}}} a default: ${{oc.env:{variable[1]},DEFAULT}}"
    elif variable := re.search(r"Could not override '(hydra\.job\.env_set\.[^']+)'", text):  # Hydra's advice holds
        fix = f"a variable that hydra.job.env_set does not have yet is added with '+': +{variable[1]}=VALUE"
    else:
        unknown = re.search(r"Could not override '([^']+)'", text)
        fix = (f"{did_you_mean(unknown[1]) if unknown else ''}check the key against conf/ (python -m cutlab --cfg "
               "job shows every key); a parameter of a model's class that its yaml does not list is added as "
               "+model.KEY=VALUE")
    return f"{text}; {fix}"


def resolve_given(cfg, overrides: list[str]) -> None:
    """The values given as interpolations (seed=${oc.env:MYSEED}), resolved: an unset variable was Hydra's 200-line
    traceback as it named the run's folder from them. Raises OmegaConf's error, for composition_message."""
    from omegaconf import OmegaConf

    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if "${" in value and not override.startswith("~"):
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)


class JobComposer:
    """Each run's config of a sweep as Hydra composes it, composing the defaults list once per choice of groups.

    Hydra composes every run from scratch (about 0.1 s each; 20 s for Table 3). Runs that choose the same
    groups differ only in plain key=value overrides, so those are applied, with Hydra's own override
    code, to a copy of one composed config, and the folder name is computed as Hydra computes it.
    """

    def __init__(self, config_loader, master, parser) -> None:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

        self.loader, self.master, self.parser = config_loader, master, parser
        self.groups = set(master.hydra.runtime.choices.keys())
        self.naming = master.hydra.job.config.override_dirname
        self.apply, self.dirname = ConfigLoaderImpl._apply_overrides_to_config, get_overrides_dirname
        self.composed: dict[tuple[str, ...], tuple] = {}
        self.current = None

    def compose(self, job_overrides: list[str]) -> tuple[dict, Path]:
        """The run's resolved config (without Hydra's section) and its folder."""
        from hydra.core.hydra_config import HydraConfig

        parsed = self.parser.parse_overrides(job_overrides)
        plain = [o for o in parsed if o.key_or_group not in self.groups and o.package is None and "/" not in o.key_or_group]
        choices = tuple(o.input_line for o in parsed if o not in plain)
        if choices not in self.composed:
            full = self.loader.load_sweep_config(self.master, list(choices))
            with open_dict(full):
                hydra_node = full.pop("hydra")
            OmegaConf.set_struct(full, True)  # as Hydra applies overrides: an unknown key is an error
            self.composed[choices] = (full, OmegaConf.create({"hydra": hydra_node}))
        app, hydra_cfg = self.composed[choices]
        app = copy.deepcopy(app)
        self.apply(plain, app)
        if self.current is not hydra_cfg:  # for ${hydra:...} in the app config (paths.data_dir)
            HydraConfig.instance().set_config(hydra_cfg)
            self.current = hydra_cfg
        job = OmegaConf.to_container(app, resolve=True)  # resolves every key: a bad value fails now, not mid-sweep
        dirname = self.dirname(overrides=parsed, exclude_keys=list(self.naming.exclude_keys),
                               item_sep=self.naming.item_sep, kv_sep=self.naming.kv_sep)
        return job, Path(job["paths"]["runs_dir"]) / run_name(job.get("run_name"), dirname)
