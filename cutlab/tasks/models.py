"""A model from its config: ``model._target_`` names the class or function that builds it (Hydra's convention).

The target receives, by name, the model config's keys that its signature names, ``depth`` (= L) and what the task
supplies (``num_labels``, ``vocab_size``, ...), and ``model_cfg`` (the whole node) if it names that. The other
keys (``name``, ``task``, ``paper``, ``lr``, ``sigma``, ...) belong to the task, the train presets and the tables.
A model of the user's own is their module and their yaml in a folder on Hydra's search path (``--config-dir``).
"""

from __future__ import annotations

import inspect

from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from cutlab.core.models import LayerwiseModel
from cutlab.errors import CutlabError


def instantiate_model(model_cfg: DictConfig, **supplied) -> LayerwiseModel:
    target = model_cfg.get("_target_")
    if not target:
        raise CutlabError(f"model={model_cfg.get('name')} has no _target_; set model._target_ to the class or function "
                          "that builds it, e.g. _target_: cutlab.core.models.DUST")
    try:
        build = get_object(str(target))
    except Exception as error:  # Hydra's message names the module or attribute it could not import
        raise CutlabError(f"model._target_={target} cannot be imported ({str(error).splitlines()[0]}); put its "
                          "module on PYTHONPATH") from None
    parameters = inspect.signature(build).parameters
    given = {key: value for key, value in OmegaConf.to_container(model_cfg, resolve=True).items()
             if key in parameters and key != "_target_"}
    given.update({key: value for key, value in supplied.items() if key in parameters})
    if "model_cfg" in parameters:
        given["model_cfg"] = model_cfg
    missing = [name for name, p in parameters.items()
               if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in given]
    if missing:
        raise CutlabError(f"model._target_={target} needs {', '.join(missing)}, which neither the model config nor "
                          f"the task gives; add them to the model's yaml")
    try:
        return build(**given)
    except ValueError as error:  # a model refuses a value of its own config (Python's convention for bad arguments)
        raise CutlabError(f"model={model_cfg.get('name')} cannot be built: {error}; fix that model.* key") from None
