"""A model from its config: ``model._target_`` names the class or function that builds it (Hydra's convention).

The target receives, by name, the model config's keys that its signature names, ``depth`` (= L) and what the task
supplies (``num_labels``, ``vocab_size``, ...), and ``model_cfg`` (the whole node) if it names that. The other
keys (``name``, ``task``, ``paper``, ``lr``, ``sigma``, ...) belong to the task, the train presets and the tables.
A model of the user's own is their module and their yaml in a folder on Hydra's search path (``--config-dir``).
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import traceback
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cutlab.config.paths import CONFIG_DIR
from cutlab.core.models import LayerwiseModel
from cutlab.core.models.base import supports_local_prev
from cutlab.core.out_of_memory import settings_named_on_out_of_memory
from cutlab.tasks.depth_bound import check_depth_fits
from cutlab.errors import CutlabError


# The model keys cutlab itself reads (not the model class): cutlab.tasks (name, task, lr, patch, sigma, source, tokenizer,
# pretrained, architecture), the train presets (paper: ${model.paper.alpha}, ...), the deep settings (deep_from_layers)
# and Hydra's defaults list. Any other key must be a parameter of the target, so a misspelled one stops the run.
CUTLAB_MODEL_KEYS = frozenset({"_target_", "defaults", "name", "task", "paper", "lr", "deep_from_layers", "patch", "sigma",
                               "source", "tokenizer", "pretrained", "architecture"})


def instantiate_model(model_cfg: DictConfig, **supplied) -> LayerwiseModel:
    target = model_cfg.get("_target_")
    if not target:
        raise CutlabError(f"model={model_cfg.get('name')} has no _target_; set model._target_ to the class or function "
                          "that builds it, e.g. _target_: cutlab.core.models.DUST")
    build = locate_target(str(target))
    if not callable(build):
        raise CutlabError(f"model._target_={target} is a {type(build).__name__}, not a class or function that builds the "
                          "model; point it at your LayerwiseModel subclass")
    parameters = inspect.signature(build).parameters
    takes_any = "model_cfg" in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    unread = sorted(set(model_cfg) - set(parameters) - CUTLAB_MODEL_KEYS)
    if unread and not takes_any:
        raise CutlabError(f"model={model_cfg.get('name')} has key(s) {', '.join(unread)} that {target} does not take "
                          f"(its parameters: {', '.join(parameters) or 'none'}); fix the spelling in the model's yaml "
                          "or remove them")
    _check_supplied(model_cfg, supplied)
    values, given = _config_arguments(model_cfg, parameters)
    given.update({key: value for key, value in supplied.items() if key in parameters})
    if "model_cfg" in parameters:
        given["model_cfg"] = model_cfg
    missing = [name for name, p in parameters.items()
               if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in given]
    if missing:
        raise CutlabError(f"model._target_={target} needs {', '.join(missing)}, which neither the model config nor "
                          f"the task gives; add them to the model's yaml")
    _check_annotated_types(model_cfg.get("name"), build, {key: given[key] for key in given if key in values})
    depth = supplied.get("depth")
    if depth is not None and depth > 2 and "depth" in given and "pretrained" not in model_cfg:
        check_depth_fits(model_cfg.get("name"), lambda layers: build(**{**given, "depth": layers}), depth)
    settings, fix = _sizes(values)
    try:
        with settings_named_on_out_of_memory(f"the building of model={model_cfg.get('name')}", settings, fix=fix):
            model = build(**given)
    except (ValueError, TypeError) as error:  # a model refuses a value (or a type) of its own config
        raise CutlabError(f"model={model_cfg.get('name')} cannot be built: {error}; fix that model.* key") from None
    except AssertionError as error:  # torch's own layers check their sizes with assert (nn.MultiheadAttention's heads)
        said = " ".join(str(error).split()) or raised_at(error)  # a bare assert says only where it failed
        raise CutlabError(f"model={model_cfg.get('name')} cannot be built: an assertion failed: {said}; fix that "
                          "model.* key") from None
    if not isinstance(model, LayerwiseModel):
        raise CutlabError(f"model._target_={target} built a {type(model).__name__}, not a LayerwiseModel; subclass "
                          "cutlab.core.models.LayerwiseModel (its forward returns the L+1 representations Phi_0..Phi_L)")
    if depth is not None and getattr(model, "depth", depth) != depth:
        if "depth" not in given:
            where = "its __init__" if inspect.isclass(build) else "it"
            raise CutlabError(f"model._target_={target} takes no depth argument (its parameters: "
                              f"{', '.join(parameters) or 'none'}), so it cannot build the L={depth} blocks asked for; "
                              f"add a parameter depth to {where} and build that many blocks")
        raise CutlabError(f"model={model_cfg.get('name')} was asked for L={depth} blocks and built model.depth="
                          f"{model.depth}; build the depth it is given")
    if depth is not None and not hasattr(model, "depth"):
        model.depth = depth  # the protocol's attribute, which a model of the user's own may not set
    if not any(parameter.requires_grad for parameter in model.parameters()):
        raise CutlabError(f"model={model_cfg.get('name')} has no trainable parameters; register them as "
                          "torch.nn.Parameter (or submodules) in its __init__")
    return model


def model_for(cfg: DictConfig, **supplied) -> LayerwiseModel:
    """The run's model (``cfg.model`` at depth ``cfg.L``, with what the task ``supplied``), checked against the
    run's training settings before the task goes on to read its data."""
    model = instantiate_model(cfg.model, depth=cfg.L, **supplied)
    check_model_supports_training(cfg, model)
    return model


def check_model_supports_training(cfg: DictConfig, model: LayerwiseModel) -> None:
    """Refuse a training setting this model cannot carry out, as soon as the model exists (a text task's data
    are read and tokenised after it: tens of seconds before a refusal otherwise)."""
    if cfg.train.constrained and cfg.train.detach_prev == "local" and not supports_local_prev(model):
        raise CutlabError(f"train.detach_prev=local re-runs each block on its detached input, which DUST, UT and ViT "
                          f"can and model={cfg.model.name} cannot; use train.detach_prev=true (or false) with this "
                          "model")
    gradient = cfg.train.get("constraint_gradient", "full")
    if cfg.train.constrained and gradient != "full" and not supports_local_prev(model):
        deep_from = cfg.model.get("deep_from_layers")
        if OmegaConf.is_interpolation(cfg.train, "constraint_gradient") and deep_from is not None:
            # the deep preset chose it (cutlab_if_deep), not the user: name what they set
            raise CutlabError(f"model={cfg.model.name}'s yaml sets deep_from_layers: {deep_from}, so at L={cfg.L} each "
                              f"constraint trains its own block (train.constraint_gradient={gradient}), which re-runs "
                              f"each block on its detached input, and model={cfg.model.name}'s class has no "
                              "unroll_local to do it; add unroll_local to the class (LayerwiseModel.unroll_local) or "
                              "remove deep_from_layers from the model's yaml")
        raise CutlabError(f"train.constraint_gradient={gradient} re-runs each block on its detached input, which "
                          f"DUST, UT and ViT can and model={cfg.model.name} cannot; use train.constraint_gradient=full "
                          "with this model")


def _config_arguments(model_cfg: DictConfig, parameters) -> tuple[dict, dict]:
    """(the model config's values, those of them the builder takes as arguments)."""
    values = OmegaConf.to_container(model_cfg, resolve=True)
    return values, {key: value for key, value in values.items() if key in parameters and key != "_target_"}


def check_model_settings(model_cfg: DictConfig, depth: int):
    """The model's refusals that need no weights, before a run is announced: its values' types and its class's
    ``check_settings`` (DUST's and UT's). Found as the model was built, they came after the data were prepared,
    below the line that named the run's folder. Returns what builds the model (None where model._target_ is unset:
    instantiate_model says so)."""
    target = model_cfg.get("_target_")
    _check_not_named_as_cutlabs(model_cfg)
    build = locate_target(str(target)) if target else None
    _check_supplied(model_cfg, {"depth": depth})
    if not callable(build):
        return build
    if inspect.isfunction(build) and not builds_a_model(str(target)):
        # it would train, and cutlab-eval then refuse to call it (cutlab.transfer.runs.check_model_target)
        raise CutlabError(f"model._target_={target} is a function not declared to return a LayerwiseModel, and "
                          "cutlab-eval rebuilds a finished run only from a LayerwiseModel class or such a function; "
                          f"annotate its return type: def {build.__name__}(...) -> LayerwiseModel")
    signature = inspect.signature(build)
    _, given = _config_arguments(model_cfg, signature.parameters)
    _check_annotated_types(model_cfg.get("name"), build, given)
    check = getattr(build, "check_settings", None)
    if callable(check):
        settings = signature.bind_partial(**given, **({"depth": depth} if "depth" in signature.parameters else {}))
        settings.apply_defaults()
        try:
            check(**settings.arguments)
        except ValueError as error:
            raise CutlabError(f"model={model_cfg.get('name')} cannot be built: {error}; fix that model.* key") from None
    return build


def _check_not_named_as_cutlabs(model_cfg: DictConfig) -> None:
    """A model of the user's own whose yaml keeps the ``name:`` of one of cutlab's (a copy of conf/model/ut.yaml
    with another _target_): the tables key a model by its name, so its runs would join that model's cells, beside
    the paper's numbers for it."""
    name, target = model_cfg.get("name"), model_cfg.get("_target_")
    builtin = _builtin_model_targets().get(name)
    if builtin is not None and target is not None and str(target) != builtin:
        raise CutlabError(f"model.name={name} is cutlab's own model ({builtin}), but this model's _target_ is "
                          f"{target}; the tables would count its runs as {name}'s: give your yaml a name of its own "
                          "(name: ...)")


@functools.cache
def _builtin_model_targets() -> dict[str, str]:
    """{name: _target_} of cutlab's own model configs (conf/model/)."""
    configs = [OmegaConf.load(path) for path in sorted((CONFIG_DIR / "model").glob("*.yaml"))]
    return {str(config.name): str(config._target_) for config in configs if "name" in config and "_target_" in config}


def _check_supplied(model_cfg: DictConfig, supplied: dict) -> None:
    """What the run gives the model (``depth`` = L, the task's ``patch``, ``num_labels``, ...) replaces the same key
    of the model's yaml; a yaml value that differs would be ignored without a word while the run's config.yaml
    recorded both."""
    for key, given in supplied.items():
        mine = OmegaConf.select(model_cfg, key, throw_on_missing=False) if key in model_cfg else None
        if given is None or mine is None or mine == given:
            continue
        if key == "depth":
            raise CutlabError(f"model={model_cfg.get('name')}'s yaml sets depth: {mine}, but a model's depth is the "
                              f"run's L (here L={given}); remove depth from the model's yaml and pass L={mine}")
        raise CutlabError(f"model={model_cfg.get('name')}'s yaml sets {key}: {mine}, but the run's data give the model "
                          f"{key}={given}; remove {key} from the model's yaml (or set it to the data's)")


# what a parameter annotated with one of these takes from a yaml value, as said in the one line that refuses another
# (str is left out: a yaml 2 for a text parameter, a revision say, is the model's to read)
_PLAIN_TYPES = {int: ("a whole number", int), float: ("a number", (int, float)), bool: ("true or false", bool)}


def _check_annotated_types(name, build, from_config: dict) -> None:
    """A model key whose value is not of its parameter's annotated plain type (int, float or bool, or one of them or
    None): one line naming it. ``model.atoms=256.5`` was "cannot be built: slice indices must be integers", and
    ``model.attention_scale=abc`` a TypeError traceback from inside the first forward pass. Other annotations (and
    an unannotated parameter, or annotations that do not resolve) are left to the model."""
    import types
    import typing

    try:
        hints = typing.get_type_hints(build.__init__ if inspect.isclass(build) else build)
    except Exception:  # names its module cannot resolve: nothing to check against
        return
    for key, value in from_config.items():
        hint = hints.get(key)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        kinds = [kind for kind in (typing.get_args(hint) if union else (hint,)) if kind is not type(None)]
        if len(kinds) != 1 or kinds[0] not in _PLAIN_TYPES or value is None and union:
            continue
        said, accepted = _PLAIN_TYPES[kinds[0]]  # a float parameter takes a yaml 1; only a bool one takes true
        if not isinstance(value, accepted) or isinstance(value, bool) and kinds[0] is not bool:
            null = " or null" if union else ""
            raise CutlabError(f"model.{key} must be {said}{null} for model={name}, got {value!r}; fix that model.* key")


def _sizes(values: dict) -> tuple[str, str | None]:
    """What sizes a model's weights, for the line a failed allocation ends in (settings_named_on_out_of_memory's
    settings and fix): L and the model's own whole-number keys (UT's and DUST's model.atoms, ...); pretrained weights
    are sized by their checkpoint, and model.dtype where the model takes one. ``values``: the model config, resolved."""
    if values.get("pretrained"):
        dtype = " or a smaller model.dtype (e.g. bfloat16)" if "dtype" in values else ""
        return "", f"use a smaller pretrained model{dtype}"
    own = [f"model.{key}" for key, value in values.items()
           if isinstance(value, int) and not isinstance(value, bool) and key not in CUTLAB_MODEL_KEYS]
    return (" or ".join(["L", *own]) if len(own) < 2 else f"L, {', '.join(own[:-1])} or {own[-1]}"), None


def builds_a_model(target: str) -> bool:
    """Whether ``target`` names a LayerwiseModel class, or a function declared (by its return annotation) to return
    one. A config from elsewhere (a run folder cutlab-eval rebuilds) must name nothing else: instantiate_model calls
    the target with the config's keys as arguments, so ``_target_: os.system`` with ``command: ...`` would run it."""
    import typing

    if str(target).partition(".")[0] in sys.stdlib_module_names:  # holds no model, and importing one runs it
        return False  # (``this`` prints, ``antigravity`` opens a browser): refused unimported
    build = locate_target(target)
    if inspect.isclass(build):
        return issubclass(build, LayerwiseModel)
    if not inspect.isfunction(build):  # a builtin (os.system), a method, a callable object: no annotation to trust
        return False
    try:
        returned = typing.get_type_hints(build).get("return")
    except Exception:  # an annotation that names what its module cannot resolve: not declared to build a model
        return False
    return inspect.isclass(returned) and issubclass(returned, LayerwiseModel)


def model_source(target: str) -> dict | None:
    """{"file", "sha256"} of the module file that defines ``target``, a model of the user's own: the record's
    source_digest covers cutlab's own models, and nothing else identified the code that built the weights (an
    edited module gave cutlab-eval other numbers on the run's own data, kept as done). None for cutlab's own models
    and a target without a source file."""
    import hashlib

    import cutlab

    try:
        path = Path(inspect.getsourcefile(locate_target(target)) or "").resolve()
    except TypeError:  # a builtin: no source file
        return None
    if not path.is_file() or path.is_relative_to(Path(cutlab.__file__).resolve().parent):
        return None
    return {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def locate_target(target: str):
    """The object ``target`` names, or one line saying why it cannot be imported (Hydra's ``get_object`` would also
    log its multi-line message)."""
    from hydra._internal.utils import _locate

    try:
        return _locate(target)
    except Exception as error:
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        missing_module = re.search(r"Are you sure that module '([^']+)' is installed", text)
        missing_name = re.search(r"Are you sure that '([^']+)' is importable from module '([^']+)'", text)
        cause = error.__cause__
        looked_up = _is_missing(cause, target) or "is an attribute of" in text  # the path itself is not there
        if cause is not None and not looked_up:
            # the module was found and failed as it ran (a misspelt import, a SyntaxError, a missing dependency):
            # Hydra words every failure as "is it installed?", which would send its author to PYTHONPATH
            raise CutlabError(f"model._target_={target} cannot be imported: importing it raised "
                              f"{type(cause).__name__}: {raised_at(cause)}; fix that in the model's module") from None
        if missing_module:
            reason = f"no module named {missing_module.group(1)!r}; put the folder that holds it on PYTHONPATH"
        elif missing_name:
            reason = (f"module {missing_name.group(2)!r} has no {missing_name.group(1)!r}; check the spelling of "
                      "model._target_")
        else:
            reason = f"{text}; check model._target_"
        raise CutlabError(f"model._target_={target} cannot be imported: {reason}") from None


def _is_missing(cause: BaseException, target: str) -> bool:
    """Whether ``cause`` says a module on ``target``'s own dotted path is not there (not one that module imports)."""
    parts = target.split(".")
    own_path = {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
    return isinstance(cause, ModuleNotFoundError) and cause.name in own_path


def raised_at(cause: BaseException) -> str:
    """The exception's message and the file and line it was raised at (the last frame outside Python's importer)."""
    if isinstance(cause, SyntaxError) and cause.filename:
        return f"{cause.msg} ({cause.filename}, line {cause.lineno})"
    frames = [frame for frame in traceback.extract_tb(cause.__traceback__) if not frame.filename.startswith("<")]
    at = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return " ".join(str(cause).split()) + at
