"""Checks of a composed config before any work starts: every message names the key and a valid example."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig

from cutlab.core.data.alpaca import root_not_set as instruction_root_not_set
from cutlab.core.data.video import check_root_given as check_video_root
from cutlab.core.iterate_selection import ITERATES
from cutlab.core.progress import MODE_ENV, MODES
from cutlab.core.evaluation import STREAMS_PER_BATCH
from cutlab.core.constraints import CONSTRAINT_FORMS, CONSTRAINT_GRADIENTS, check_detach_prev
from cutlab.core.primal_dual import DUAL_OPTIMIZERS, DUAL_UPDATES, DualSettings
from cutlab.core.training import MAX_SEED
from cutlab.atomic import not_a_folder, unwritable
from cutlab.errors import CutlabError, refuse_blank
from cutlab.config.groups import task_kind
from cutlab.config.resolvers import wandb_variable
from cutlab.config.text_data import check_text_data

WANDB_MODES = ("offline", "online", "disabled")
# the train presets (conf/train/) made for each kind of data (data.task): those of another kind read model settings
# (model.paper.<data>.dual_lr, ...) that the model's yaml gives only for its own data
TRAIN_PRESETS = {"video": ("constrained", "constrained_paper", "erm"),
                 "text": ("constrained_text", "constrained_text_paper", "erm_text"),
                 "instruction": ("constrained_lm_paper", "erm_lm")}
# torch's optimisers turn a learning rate into a float32 step factor (check_rate holds the two bounds). Adam's first
# step is lr / (1 - beta1) = 10 lr: a larger one stopped the first step with a traceback ("value cannot be converted to
# type float without overflow"). Below float32's smallest normal number a rate is 0 or subnormal there, and so is
# every step it scales: train.lr=1e-300 trained nothing and ended complete, without a word
SMALLEST_RATE = float(torch.finfo(torch.float32).tiny)
LARGEST_RATE = float(torch.finfo(torch.float32).max) / 10
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"  # what wandb.init refuses in a project's name ("Invalid project name"), and
WANDB_PROJECT_MAX = 128               # a name longer than this
WANDB_TAG_MAX = 64                    # wandb.Settings' run_tags: 1 to 64 characters each


def check_number(key: str, value: Any, example: str, minimum: float | None = None, exclusive: bool = False,
                 finite: bool = True, below: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise CutlabError(f"{key} must be a number, got {value!r}; e.g. {key}={example}")
    value = float(value)
    if finite and math.isinf(value):
        raise CutlabError(f"{key} must be a finite number, got {value:g}; e.g. {key}={example}")
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        relation = ">" if exclusive else ">="
        raise CutlabError(f"{key} must be {relation} {minimum:g}, got {value:g}; e.g. {key}={example}")
    if below is not None and value >= below:
        raise CutlabError(f"{key} must be < {below:g}, got {value:g}; e.g. {key}={example}")
    return value


def check_rate(key: str, value: Any, example: str) -> float:
    """A learning rate (primal, dual, slack) that float32 holds as a normal number: SMALLEST_RATE to LARGEST_RATE."""
    rate = check_number(key, value, example, minimum=0.0, exclusive=True, below=LARGEST_RATE)
    if rate < SMALLEST_RATE:
        raise CutlabError(f"{key}={rate:g} is below float32's smallest normal number {SMALLEST_RATE:g}, so torch's "
                          f"optimiser rounds every step it scales to 0 and nothing trains; e.g. {key}={example}")
    return rate


def check_integer(key: str, value: Any, example: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CutlabError(f"{key} must be a whole number, got {value!r}; e.g. {key}={example}")
    if value < minimum or maximum is not None and value > maximum:
        allowed = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise CutlabError(f"{key} must be {allowed}, got {value}; e.g. {key}={example}")
    return value


def check_flag(key: str, value: Any, example: str) -> None:
    if not isinstance(value, bool):  # a string such as 'maybe' would read as true
        raise CutlabError(f"{key} must be true or false, got {value!r}; e.g. {key}={example}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise CutlabError(f"{key} must be one of {', '.join(choices)}, got {value!r}; e.g. {key}={choices[0]}")


def check_config(cfg: DictConfig, folders: bool = True) -> None:
    """Raise CutlabError on the first value that cannot make a run. ``folders=False``: the values alone, not whether
    the default data and model folders are on this machine (a plan made on a login node for jobs that run elsewhere)."""
    from omegaconf.errors import InterpolationKeyError

    if not cfg.model.get("name"):
        raise CutlabError("the model's yaml has no name; add name: <the yaml's file name> to it")
    try:
        _check_values(cfg, folders)
    except InterpolationKeyError as error:  # e.g. train.alpha: ${model.paper.alpha} of a model yaml without paper
        missing = re.search(r"Interpolation key '([^']+)' not found", str(error))
        wanted = missing.group(1) if missing else str(error).splitlines()[0]
        kind = cfg.data.get("task")
        if str(error.full_key).startswith("train.") and wanted.startswith("model.paper.") and kind in TRAIN_PRESETS:
            # most often a train preset made for another kind of data (train=constrained_text with DUST)
            raise CutlabError(f"{error.full_key} reads {wanted}, which model={cfg.model.name}'s yaml does not give; "
                              f"with data={cfg.data.name} use train={'|'.join(TRAIN_PRESETS[kind])} (the presets "
                              f"for {kind} data), or add it to the model's yaml (e.g. paper: "
                              "{alpha: 0.25, epsilon: 1.0})") from None
        raise CutlabError(f"{error.full_key} reads {wanted}, which the config does not have; add it (a model's yaml "
                          "gives its paper values as paper: {alpha: 0.25, epsilon: 1.0})") from None


def _check_progress_mode() -> None:
    """CUTLAB_PROGRESS, which forces the progress display: a misspelt value was read as unset without a word."""
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced and forced not in MODES:
        raise CutlabError(f"{MODE_ENV}={os.environ[MODE_ENV]!r} is neither {' nor '.join(MODES)}; set {MODE_ENV}=lines "
                          "(or bar), or unset it for a bar on a terminal and lines elsewhere")


def _check_values(cfg: DictConfig, folders: bool) -> None:
    kind = task_kind(cfg)
    for key in ("cache_dir", "data_dir", "models_dir"):  # as a path, '' is the current folder (or / joined to a name)
        refuse_blank(f"paths.{key}", cfg.paths.get(key), f"give a folder, or leave it out for $CUTLAB_{key.upper()} "
                     "(or its per-user default)")
    _check_named_paths(cfg)
    check_root_given(cfg, kind)
    if folders:
        check_default_folders(cfg)
        check_data_root(cfg)
    check_number("gamma", cfg.gamma, "0.09", minimum=0.0)
    check_number("noise_mean", cfg.noise_mean, "0.0")
    check_integer("L", cfg.L, "5", 1)
    check_integer("seed", cfg.seed, "0", 0, MAX_SEED)
    check_flag("progress", cfg.progress, "false")
    _check_progress_mode()
    _check_wandb(cfg.wandb)
    if cfg.threads is not None:
        check_integer("threads", cfg.threads, "1", 1)
    gammas = cfg.eval.gamma_test
    if not gammas or isinstance(gammas, (str, int, float)):
        raise CutlabError(f"eval.gamma_test must be a non-empty list of numbers, got {gammas!r}; e.g. 'eval.gamma_test=[0,0.1,0.2]'")
    for gamma in gammas:  # noise of std inf: NaN
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma < math.inf:
            raise CutlabError(f"eval.gamma_test must list finite numbers >= 0, got {gamma!r} in it; e.g. "
                              "'eval.gamma_test=[0,0.1,0.2]'")
    repeated = sorted(g for g, times in Counter(float(g) for g in gammas).items() if times > 1)
    if repeated:  # a repeated level would count twice in the mean over the grid (Table 3's number)
        raise CutlabError(f"eval.gamma_test lists {', '.join(f'{g:g}' for g in repeated)} more than once; give each "
                          "level once, e.g. 'eval.gamma_test=[0,0.1,0.2]'")
    most = STREAMS_PER_BATCH - 2  # with gamma_train added, each gamma draws a stream of a batch's own (evaluate)
    if len(gammas) > most:
        raise CutlabError(f"eval.gamma_test holds {len(gammas)} values; at most {most} are supported (e.g. a grid in "
                          "steps of 0.01)")
    check_integer("eval.batch_size", cfg.eval.batch_size, "4", 1)
    check_number("eval.feasibility_tol", cfg.eval.feasibility_tol, "0.02", minimum=0.0)
    _choice("eval.iterate", cfg.eval.iterate, ITERATES)
    check_integer("eval.check_every_steps", cfg.eval.check_every_steps, "25", 1)
    check_integer("checkpoint.every_steps", cfg.checkpoint.every_steps, "100", 1)
    train = cfg.train
    check_integer("train.epochs", train.epochs, "20", 1)
    check_integer("train.batch_size", train.batch_size, "4", 1)
    if train.max_steps_per_epoch is not None:
        check_integer("train.max_steps_per_epoch", train.max_steps_per_epoch, "50", 1)
    check_rate("train.lr", train.lr, "1e-3")
    if train.grad_clip is not None:
        check_number("train.grad_clip", train.grad_clip, "1.0 (or null: no clipping)", minimum=0.0, exclusive=True)
    check_number("train.alpha", train.alpha, "0.25 (the paper's 1 - alpha of 0.75)", minimum=0.0, exclusive=True, below=1.0)
    if train.epsilon not in (None, "auto"):
        check_number("train.epsilon", train.epsilon, "auto (or 6.5, or null for off)", minimum=0.0, exclusive=True)
    check_integer("train.warmup_epochs", train.warmup_epochs, "1", 0)
    if train.constrained:
        check_rate("train.dual_lr", train.dual_lr, "1e-2")
        check_number("train.resilience_c", train.resilience_c, "1.0", minimum=0.0)
        _choice("train.constraint_form", train.constraint_form, CONSTRAINT_FORMS)
        check_detach_prev(train.detach_prev)
        _choice("train.constraint_gradient", train.get("constraint_gradient", "full"), CONSTRAINT_GRADIENTS)
        _choice("train.dual_optimizer", train.dual_optimizer, DUAL_OPTIMIZERS)
        _choice("train.dual_update", train.dual_update, DUAL_UPDATES)
        check_flag("train.dual_restarts", train.dual_restarts, "false")
        check_flag("train.resilience_restarts", train.resilience_restarts, "true")
        if train.get("slack_lr") is not None:
            check_rate("train.slack_lr", train.slack_lr, "0.01 (or null: train.dual_lr)")
        check_number("train.kappa_p", train.kappa_p, "1.0", minimum=0.0)
        check_number("train.kappa_i", train.kappa_i, "1.0", minimum=0.0)
        check_number("train.nu", train.nu, "0.0", minimum=0.0)
        # inf trained the warm-up, then stopped on a Lagrangian of nan
        check_number("train.penalty", train.penalty, "10 (0 = off)", minimum=0.0)
        DualSettings.of(train)  # the rules on combinations (penalty with resilience, restarts with Adam, ...)
    if kind == "video":
        if "patch" in cfg.model and cfg.model.patch != cfg.data.patch:
            raise CutlabError(f"model.patch={cfg.model.patch} but data.patch={cfg.data.patch}: model={cfg.model.name} "
                              f"reads the data's patch tokens; set data.patch={cfg.model.patch} instead (cutlab's video models "
                              "take model.patch from it)")
        if "patch" in cfg.data:  # a patch of 0 pixels was a ZeroDivisionError traceback once the run had begun
            check_integer("data.patch", cfg.data.patch, "16", 1)
        check_integer("data.frames", cfg.data.frames, "10", 1)
        check_integer("data.stride", cfg.data.stride, "10", 1)
        check_integer("data.val_clips", cfg.data.val_clips, "2", 1)
    if kind == "text":
        check_text_data(cfg.data)


PATH_KEYS = {"data": ("root", "train_file", "test_file"), "model": ("source", "tokenizer", "pretrained")}


def _check_named_paths(cfg: DictConfig) -> None:
    """A file, folder or hub id given empty (``data.root=$DATA``, unset): as a path '' is '.', so the current folder
    was read as the data (IMDb's files there were loaded) or searched for a tokenizer, after the run had begun."""
    for group, keys in PATH_KEYS.items():
        where = "a path" if group == "data" else "a path or a hub id"
        for key in keys:
            refuse_blank(f"{group}.{key}", cfg[group].get(key), f"give {where}, or leave it out for "
                         f"{group}={cfg[group].name}'s own (where it has one)")


def check_default_folders(cfg: DictConfig) -> None:
    """Data or pretrained weights read from a default folder (paths.data_dir, paths.models_dir) when that folder is
    not there (an installed cutlab's defaults are per-user folders that start empty) or is a file (where it said only
    that the data file did not exist): one line naming the ways to say where they are."""
    data, models = cfg.paths.get("data_dir"), cfg.paths.get("models_dir")
    wanted = [("data.root", cfg.data.get("root"), data, "CUTLAB_DATA_DIR", "paths.data_dir", cfg.data.get("name"))]
    wanted += [(f"model.{key}", cfg.model.get(key), models, "CUTLAB_MODELS_DIR", "paths.models_dir", None)
               for key in ("pretrained", "source")]  # ViT's checkpoint, the text models' encoder
    for key, value, folder, env, setting, name in wanted:
        if value is None or folder is None or not Path(str(value)).is_relative_to(folder) or Path(folder).is_dir():
            continue
        alternative = "PATH" if key == "data.root" else "PATH or a hub id"
        state = "is a file, not a folder" if Path(folder).exists() else "is not there"
        raise CutlabError(f"{key}={value} does not exist: the {'data' if key == 'data.root' else 'models'} folder "
                          f"{folder} {state}; set {env} to the folder that holds {name or Path(str(value)).name}/ "
                          f"(or {setting}=DIR), or give {key}={alternative}")


def check_root_given(cfg: DictConfig, kind: str) -> None:
    """data.root unset (null in the yaml of a set not shipped here, until given) where the data are read from files:
    refused with the other values in the loader's own words, which it said only as the task was built (after --plan
    had counted the run to run). Where the jobs run does not matter: none is named."""
    if cfg.data.get("root") is not None:
        return
    if kind == "video":
        check_video_root(cfg.data.get("name"), None)
    elif kind == "instruction":  # every instruction set is read by load_examples (Alpaca's format)
        raise instruction_root_not_set()
    elif kind == "text":  # data.root=null over a shipped default: the readers' traceback (a None path) before
        name = cfg.data.get("name")
        raise CutlabError(f"data.root is not set but {name} needs its files; give data.root=PATH (or hf:ID), or "
                          f"leave it out for data={name}'s own")


def check_data_root(cfg: DictConfig) -> None:
    """A data.root given as a local path that is not there: refused with the other values, before the run announces
    its record folder (its loader would find out only as the task is built, a text run's model loaded first)."""
    root, name = cfg.data.get("root"), cfg.data.get("name")
    if root is None or str(root).startswith("hf:") or Path(str(root)).expanduser().exists():
        return
    folder = cfg.paths.get("data_dir")
    if folder is not None and Path(str(root)).is_relative_to(folder):  # the default root: a data folder that is
        held = Path(str(root)).relative_to(folder).parts[0]  # there, but another one than meant (CUTLAB_DATA_DIR)
        raise CutlabError(f"data.root={root} does not exist: the data folder {folder} holds no {name} data; set "
                          f"CUTLAB_DATA_DIR to the folder that holds {held}/ (or paths.data_dir=DIR), or give "
                          "data.root=PATH")
    raise CutlabError(f"data.root={root} does not exist on this machine; point data.root at where the {name} data is")


def runs_dir_path(value: Any) -> Path:
    """``paths.runs_dir`` as a folder. An empty one (``paths.runs_dir=$RUNS`` with RUNS unset) is refused: as a path
    it is the current folder, which would get the run folders (an empty $CUTLAB_RUNS_DIR counts as unset instead)."""
    if value is None or not str(value).strip():
        raise CutlabError("paths.runs_dir is empty; give the folder for the run folders, e.g. paths.runs_dir=runs, or "
                          "leave it out for ./runs (or $CUTLAB_RUNS_DIR)")
    return Path(value)


def check_runs_dir(folder: Path, writing: bool = True) -> None:
    """A runs folder that is a file (or lies under one), or that cannot be written (a read-only mount, another user's
    folder), would fail deep inside Hydra's making of the run's folder, with a traceback. ``writing=False``: a plan,
    which writes nothing, so a read-only folder of runs (a colleague's) can be looked at."""
    fix = "give a folder you can write (paths.runs_dir=DIR, CUTLAB_RUNS_DIR=DIR, or cutlab-reproduce --out DIR)"
    if str(folder).startswith("~"):  # an override's ~ reaches Hydra as written: it would make a folder named ~ here
        raise CutlabError(f"paths.runs_dir={folder}: a ~ on the command line is not expanded (Hydra takes it as "
                          f"written, a folder named ~ here); write the path out: paths.runs_dir={folder.expanduser()}")
    if not writing:
        if folder.is_file():
            raise CutlabError(f"paths.runs_dir={folder} is a file, not a folder of runs; {fix}")
        return
    problem = unwritable(folder)  # tried, not asked: os.access says yes to root on /proc or a root-squashed NFS
    if problem:
        raise CutlabError(f"paths.runs_dir={folder} cannot hold run folders: {problem}; {fix}")


def check_run_folder(run_dir: Path) -> None:
    """A file, or a symbolic link to nothing, where the run's folder goes: Hydra's FileExistsError traceback as it
    made the folder."""
    if problem := not_a_folder(run_dir):
        raise CutlabError(f"the run's folder {problem}; move it aside (or pass run_name=<new name>) so this run gets a "
                          "folder of its own")


def _check_wandb(wandb: DictConfig) -> None:
    """W&B's own refusals, before the run's folder is made: wandb.init raised them after it held the first records."""
    if wandb.mode not in WANDB_MODES and wandb.mode == wandb_variable("MODE", None):  # the variable gave it
        shared = " (W&B's shared mode is not supported)" if wandb.mode == "shared" else ""  # W&B has it; cutlab not
        raise CutlabError(f"WANDB_MODE={os.environ['WANDB_MODE'].strip()} gives wandb.mode, which must be one of "
                          f"{', '.join(WANDB_MODES)}{shared}; set WANDB_MODE to one of them, or give "
                          "wandb.mode=offline")
    _choice("wandb.mode", wandb.mode, WANDB_MODES)
    if wandb.mode != "disabled":
        _check_wandb_variables(str(wandb.mode))
    tags = wandb.get("tags")
    if tags is not None and not isinstance(tags, (list, ListConfig)):  # a string: one tag per character
        raise CutlabError(f"wandb.tags must be a list, got {tags!r}; e.g. 'wandb.tags=[{tags}]'")
    for tag in tags or []:
        if not 1 <= len(str(tag)) <= WANDB_TAG_MAX:  # pydantic's ValidationError traceback, the run's folder half made
            raise CutlabError(f"wandb.tags holds {str(tag)[:24]!r}{'...' if len(str(tag)) > 24 else ''} "
                              f"({len(str(tag))} characters): a W&B tag has 1 to {WANDB_TAG_MAX}")
    # wandb.project=$PROJECT, unset: the run was logged to W&B's "uncategorized" project, not its sweep's
    for key, leave_out in (("project", "cutlab"), ("entity", "your W&B default"), ("group", "the sweep's name")):
        refuse_blank(f"wandb.{key}", wandb.get(key), f"name one, or leave it out for {leave_out}")
    project = str(wandb.project)
    if len(project) <= WANDB_PROJECT_MAX and not any(character in WANDB_PROJECT_FORBIDDEN for character in project):
        return
    team, _, name = project.partition("/")
    one_slash = team and name and "/" not in name
    hint = f"; for a team's project: wandb.entity={team} wandb.project={name}" if one_slash else ""
    raise CutlabError(f"wandb.project={project!r}: a W&B project's name has at most {WANDB_PROJECT_MAX} characters, "
                      f"none of {' '.join(WANDB_PROJECT_FORBIDDEN)}{hint}")


def _check_wandb_variables(mode: str) -> None:
    """A WANDB_* variable W&B cannot read (WANDB_RESUME=bogus, WANDB_INIT_TIMEOUT=abc): pydantic's ValidationError
    traceback as the run's W&B service started, its folder half made. Checked as W&B reads them (0.4 s to import it,
    paid only where such a variable is set)."""
    if not any(name.startswith("WANDB_") for name in os.environ):
        return
    if name := os.environ.get("WANDB_NAME", "").strip():  # replaced in silence by the name cutlab gives each run
        raise CutlabError(f"WANDB_NAME={name}: cutlab names each W&B run from its settings, and run_name=NAME puts "
                          "NAME first (and names the run's folder); unset WANDB_NAME")
    import pydantic
    import wandb

    try:
        wandb.Settings(mode=mode).update_from_env_vars(dict(os.environ))
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field, value = str(first["loc"][0]) if first["loc"] else "", str(first.get("input"))
        named = [f"WANDB_{field.upper()}"] if f"WANDB_{field.upper()}" in os.environ else \
            [name for name, given in os.environ.items() if name.startswith("WANDB_") and given == value]
        variable = f"{named[0]}={value}" if named else f"a WANDB_ variable ({field}={value})"
        raise CutlabError(f"{variable}: W&B cannot read it ({first['msg'].lower()}); correct or unset it, or log "
                          "without W&B (wandb.mode=disabled)") from None


def check_wandb_run_id(runs: int, mode: str, what: str) -> None:
    """WANDB_RUN_ID names one W&B run: each of ``runs`` runs (a sweep's, a search's trials: ``what``) took it as its
    W&B id, and W&B merges what one id logs into one run, each run's steps over the other's. One run may take it."""
    run_id = os.environ.get("WANDB_RUN_ID", "").strip()
    if run_id and runs > 1 and mode != "disabled":
        raise CutlabError(f"WANDB_RUN_ID={run_id} names one W&B run, and every run of this {what} would log into it; "
                          "unset it: each run gets a W&B id of its own (wandb_id in its summary.json)")
