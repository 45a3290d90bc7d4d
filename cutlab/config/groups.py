"""The config groups and their choices: a bad ``model=``/``data=``/``train=`` name stops in one line before Hydra starts.

A group's choices are the yaml files in conf/<group>/ and in every folder the command adds to Hydra's search path
(``--config-dir DIR`` or ``hydra.searchpath=[file://DIR]``), so a model of the user's own is a valid choice.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cutlab.config.data_settings import apart_from_default
from cutlab.config.naming import check_run_name
from cutlab.config.paths import CONFIG_DIR, SWEEPS_DIR
from cutlab.errors import CutlabError

GROUPS = ("model", "data", "train", "launcher")
# data.task: the family of experiments a run belongs to (cutlab.tasks builds one Task per family)
TASK_KINDS = ("video", "text", "instruction")


def search_dirs(arguments: list[str]) -> list[Path]:
    """conf/, sweeps/ and the folders the command line adds to Hydra's search path."""
    folders = [CONFIG_DIR, SWEEPS_DIR]
    args = iter(arguments)
    for argument in args:
        if argument in ("-cd", "--config-dir"):
            folders.append(Path(next(args, ".")))
        elif argument.startswith("--config-dir="):
            folders.append(Path(argument.split("=", 1)[1]))
        elif argument.lstrip("+").startswith("hydra.searchpath="):
            folders += [Path(entry.removeprefix("file://")) for entry in _searchpath_entries(argument)
                        if not entry.startswith("pkg://")]
    return folders


def _searchpath_entries(argument: str) -> list[str]:
    """The entries of a ``hydra.searchpath=[...]`` override as Hydra parses them (quoted paths may hold ',' or '=')."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        value = OverridesParser.create().parse_overrides([argument])[0].value()
    except HydraException as error:
        raise CutlabError(f"{argument} cannot be read: {error}; quote a folder with ',' or '=' in its name, "
                          "e.g. hydra.searchpath=['file:///my,folder']") from None
    return [str(entry) for entry in (value if isinstance(value, list) else [value]) if str(entry).strip()]


# cutlab's own nodes: some config of conf/ holds every key their code reads (train=erm lacks constraint_form, which
# train=constrained has; data=synthetic lacks video_folder's test_clips), so a key that none holds, added with '+', is
# read by nothing: a misspelling, as Hydra's "use +key=value" advice invites. A model's own keys are checked against
# its class instead (cutlab.tasks.models), a set's loader options against its loader (cutlab.core.data.video).
OWN_NODES = ("train", "data", "eval", "checkpoint", "paths", "wandb")


def check_added_keys(arguments: list[str], checked_by_caller: tuple[str, ...] = ()) -> None:
    """``+train.alpah=0.3`` or ``+gama=0.1``: one line, before Hydra adds a key that nothing would read (a group of the
    user's own, ``+experiment=NAME`` from ``--config-dir``, is added as Hydra adds it). The nodes in
    ``checked_by_caller`` are left to the caller (cutlab-eval checks data keys against each run's own data)."""
    folders = search_dirs(arguments)
    for argument in arguments:
        if not argument.startswith("+"):  # +KEY=VALUE, and ++KEY=VALUE (added, or set where the key is)
            continue
        key = argument.lstrip("+").partition("=")[0]
        node, _, inner = key.partition(".")
        if node in checked_by_caller:
            continue
        if node in OWN_NODES:
            unread = inner.partition(".")[0] not in _known_keys(node, folders)
        else:  # a top-level key, or a node (+modle.x=1) that is neither cutlab's nor a group of the user's own
            unread = (node not in _known_keys(None, folders) and node not in GROUPS
                      and not any((f / node).is_dir() for f in folders))
        if unread:
            raise CutlabError(f"{key} is not a key of cutlab's config, and a key added with '+' would be read by "
                              f"nothing; {did_you_mean(key) or did_you_mean(node)}check its spelling against conf/ "
                              "(python -m cutlab --cfg job shows every key)")


def check_deleted_keys(arguments: list[str]) -> None:
    """``~train.alpha`` or ``~model``: one line, before Hydra deletes a key or group that every run reads (it was a
    traceback in the config checks, after the run's folder was made). ``~model.KEY`` is kept (the class's own
    default), as are Hydra's keys and a node of the user's own."""
    folders = search_dirs(arguments)
    for argument in arguments:
        if not argument.startswith("~"):
            continue
        key = argument[1:].partition("=")[0]
        node, _, inner = key.partition(".")
        if not inner and node in GROUPS:
            raise CutlabError(f"{argument} deletes the {node} group, which every run needs; choose one instead: "
                              f"{node}={','.join(choices(node, folders))}")
        if node in OWN_NODES or (node in _known_keys(None, folders) - {"hydra", "defaults"} and node not in GROUPS):
            setting = f"{key}.KEY=VALUE" if not inner and node in OWN_NODES else f"{key}=VALUE"  # ~wandb: a section
            raise CutlabError(f"{argument} deletes {key}, which cutlab reads in every run; give it a value instead "
                              f"({setting}; python -m cutlab --cfg job shows its default)")


def _known_keys(node: str | None, folders: list[Path]) -> set[str]:
    """The keys of ``node`` in config.yaml and in every config of its group in ``folders`` (a user's own train preset
    may bring keys of its own); None: config.yaml's top level."""
    config = OmegaConf.load(CONFIG_DIR / "config.yaml")
    if node is None:
        return set(config)
    keys = set(config.get(node) or {}) if isinstance(config.get(node), DictConfig) else set()
    for path in (path for folder in folders for path in (folder / node).glob("*.yaml")):
        keys |= set(OmegaConf.load(path))
    return keys


def did_you_mean(key: str) -> str:
    """``"did you mean train.alpha? "`` for a misspelt ``train.alhpa``, or for ``data.batch_size`` the node that has
    the key (train.batch_size, eval.batch_size); empty when nothing of conf/ is near."""
    known = _dotted_keys()
    node, _, name = key.rpartition(".")
    near = [other for other in known if other.rpartition(".")[2] == name and other != key]
    if not near:  # a close spelling in the same section
        names = [other.rpartition(".")[2] for other in known if other.rpartition(".")[0] == node and other != key]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
        near = [f"{node}.{other}" if node else other for other in close]
    return f"did you mean {' or '.join(near)}? " if near else ""


@functools.cache
def _dotted_keys() -> list[str]:
    """Every key of conf/ as a command line names it: config.yaml's (one level into its sections) and each group's
    configs' (``model.atoms``, ``train.epsilon``, ...), and the groups themselves (``model=``), which config.yaml
    names only in its defaults list."""
    config = OmegaConf.load(CONFIG_DIR / "config.yaml")
    keys = set(GROUPS)
    for key, value in config.items():
        if key in ("defaults", "hydra"):
            continue
        keys |= {f"{key}.{inner}" for inner in value} if isinstance(value, DictConfig) else {str(key)}
    for group in GROUPS:
        keys |= {f"{group}.{inner}" for path in (CONFIG_DIR / group).glob("*.yaml")
                 for inner in OmegaConf.load(path) if inner != "defaults"}
    return sorted(keys)


def choices(group: str, folders: list[Path] | None = None) -> list[str]:
    """The names ``group=`` accepts."""
    return sorted({path.stem for folder in (folders or [CONFIG_DIR]) for path in (folder / group).glob("*.yaml")})


def sweep_names() -> list[str]:
    """The names ``--config-name`` takes from sweeps/."""
    return sorted(path.stem for path in SWEEPS_DIR.glob("*.yaml"))


def check_group_choices(arguments: list[str]) -> None:
    """Unknown ``model=``/``data=``/``train=`` names get one line naming the valid ones, and a ``run_name`` that is
    not one folder name gets one line (before Hydra starts; launcher keys: config.launcher.check_launcher_overrides)."""
    folders = search_dirs(arguments)
    if len(folders) > 2:  # folders of the user's own: a group left at its default is read from cutlab's file too
        named = {argument.lstrip("+~").partition("=")[0] for argument in arguments}
        for group, default in _default_choices().items():
            if group not in named:
                _check_not_shadowed(group, default, folders)
    for argument in arguments:
        group, equals, value = argument.lstrip("+~").partition("=")
        if group in GROUPS and equals and not value.strip() and not argument.startswith("~"):  # model=$MODEL, unset
            raise CutlabError(f"{group}= is empty; choose one of {group}={','.join(choices(group, folders))}")
        if group not in (*GROUPS, "run_name") or not value or "(" in value:
            continue
        if group == "run_name":  # before Hydra makes the folder it names
            for name in _values(argument):
                check_run_name(name)
            continue
        known = choices(group, folders)
        for choice in value.split(","):
            if choice not in known:
                raise CutlabError(f"unknown {group} {choice!r}; choose one of {group}={','.join(known)}"
                                  f"{_own_config_hint(group, choice, folders[2:])}")
            _check_not_shadowed(group, choice, folders)


def _own_config_hint(group: str, choice: str, own: list[Path]) -> str:
    """Where a config of one's own is looked for: the missing --config-dir, or a folder one level off."""
    if not own:
        return f", or give the folder holding your {group}/{choice}.yaml with --config-dir"
    below = [folder / sub for folder in own for sub in ("conf", "configs")
             if (folder / sub / group / f"{choice}.yaml").is_file()]
    if below:
        return f"; {below[0] / group / (choice + '.yaml')} is there: give --config-dir {below[0]}"
    return f"; looked for {' and '.join(str(folder / group / (choice + '.yaml')) for folder in own)} too"


def _values(argument: str) -> list[str]:
    """The values of ``KEY=VALUE`` as Hydra reads them: quotes removed, a sweep's each (none where Hydra's grammar
    cannot read it: composing it then says so)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import QuotedString
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(argument.lstrip("+~"))
    except HydraException:
        return []
    values = override.sweep_iterator() if override.is_sweep_override() else [override.value()]
    return [value.text if isinstance(value, QuotedString) else str(value) for value in values]


def _check_not_shadowed(group: str, choice: str, folders: list[Path]) -> None:
    """A config of the user's own folder named as one of cutlab's (model/ut.yaml): Hydra reads cutlab's, which comes
    first in its search path, so the user's would be ignored without a word (cutlab's own file, or a copy of it
    byte for byte, is no clash)."""
    builtin = CONFIG_DIR / group / f"{choice}.yaml"
    if not builtin.is_file():
        return
    for folder in folders[2:]:  # after conf/ and sweeps/: the folders the command line added
        mine = folder / group / f"{choice}.yaml"
        if mine.is_file() and mine.resolve() != builtin.resolve() and mine.read_bytes() != builtin.read_bytes():
            raise CutlabError(f"{mine} has the name of cutlab's own {group}={choice}, which Hydra reads instead of "
                              f"yours; rename yours (e.g. {group}/{choice}_mine.yaml) and pass {group}={choice}_mine")


def _default_choices() -> dict[str, str]:
    """config.yaml's defaults list: the choice of each group a command does not name."""
    entries = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "config.yaml")).get("defaults", [])
    return {group: str(choice) for entry in entries if isinstance(entry, dict) for group, choice in entry.items()
            if group in GROUPS and isinstance(choice, str)}


def task_kind(cfg: DictConfig) -> str:
    """The run's family of experiments (``data.task``); ``model.task`` must name the same (a text model cannot read
    video)."""
    data_kind, model_kind = cfg.data.get("task"), cfg.model.get("task")
    if data_kind not in TASK_KINDS:
        raise CutlabError(f"data.task must be one of {', '.join(TASK_KINDS)}, got {data_kind!r} (data={cfg.data.name})")
    if model_kind not in TASK_KINDS:
        raise CutlabError(f"model.task must be one of {', '.join(TASK_KINDS)}, got {model_kind!r} (model={cfg.model.name}); "
                          f"set task: {data_kind} in the model's yaml if it reads {data_kind} data")
    if model_kind != data_kind:
        raise CutlabError(
            f"model={cfg.model.name} is for {model_kind} data and data={cfg.data.name} is {data_kind} data; choose "
            f"data={'|'.join(choices_of_kind('data', model_kind)) or '?'} for this model, or "
            f"model={'|'.join(choices_of_kind('model', data_kind)) or '?'} for this data"
        )
    return data_kind


def choices_of_kind(group: str, kind: str) -> list[str]:
    """The config names of ``group`` whose ``task`` is ``kind`` (for the mismatch message)."""
    folder = CONFIG_DIR / group
    return [path.stem for path in sorted(folder.glob("*.yaml")) if _task_of(folder, path.stem) == kind]


def _task_of(folder: Path, name: str, depth: int = 0):
    """A group config's ``task``, following its defaults list (distilbert.yaml extends hf_encoder.yaml)."""
    node = OmegaConf.load(folder / f"{name}.yaml")
    if "task" in node or depth > 4:
        return node.get("task")
    parents = [entry for entry in node.get("defaults", []) if isinstance(entry, str) and entry != "_self_"]
    return _task_of(folder, parents[0], depth + 1) if parents and (folder / f"{parents[0]}.yaml").exists() else None


@functools.cache  # one read per data set and machine, however many runs a report holds
def shipped_data(name: str, data_dir) -> dict | None:
    """conf/data/<name>.yaml as a run whose ``paths.data_dir`` was ``data_dir`` composed it (its default root lies
    under that folder); None where that cannot be known: a data config of the user's own, a root that needs a
    ``data_dir`` the record lacks."""
    if name not in choices("data"):  # a record's name is not a path to follow
        return None
    node = OmegaConf.create({"data": OmegaConf.load(CONFIG_DIR / "data" / f"{name}.yaml")})
    if isinstance(data_dir, str):
        node.paths = {"data_dir": data_dir}
    try:
        data = OmegaConf.to_container(node.data, resolve=True)
    except OmegaConfBaseException:
        return None
    return data if isinstance(data, dict) else None


def shipped_root_apart(name: str, data: dict, data_dir) -> list[str]:
    """``[root=...]`` where ``data``, a data config of data set ``name`` (a run's), was read from another root than
    the shipped one, composed with the run's own ``paths.data_dir`` (the machine it ran on); else, or where that
    cannot be known, []. Told apart by cutlab-eval's rule (data_settings.apart_from_default)."""
    shipped = shipped_data(name, data_dir)
    return apart_from_default(data, {"root": shipped.get("root")}, short=True) if shipped is not None else []
