"""The libraries only some runs need, installed as pip extras (pyproject.toml): a run that needs one it lacks stops with
one line naming the extra, not with Python's ModuleNotFoundError deep in a model."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from cutlab.core.errors import CutlabError
from cutlab.core.progress import wants_bar

EXTRAS = {  # top-level module -> (pip extra, what needs it)
    "transformers": ("hf", "model=vit and the text and instruction runs (Hugging Face models and tokenizers)"),
    "av": ("video", "the video-file datasets (.avi/.mp4: data=avenue, data=shanghaitech, data=video_folder)"),
    "peft": ("lora", "LoRA fine-tuning (model.lora.enabled=true; set it false for full fine-tuning)"),
}


def optional_import(module: str) -> ModuleType:
    """``importlib.import_module(module)``; when its package is not installed, a CutlabError naming the extra."""
    top = module.partition(".")[0]
    if top == "transformers" and not wants_bar(sys.stderr):
        # its own bars ("Loading weights: 0%|...") would put carriage returns in a log that cutlab keeps to plain
        # lines; read once, as transformers is imported (a setting of the user's own wins)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] != top:
            raise  # the package is there but something it imports is not: pip's message is the useful one
        extra, needed_by = EXTRAS[top]
        raise CutlabError(f"{top} is not installed; it is needed by {needed_by}, which cutlab's core install leaves "
                          f"out: pip install 'cutlab[{extra}]'") from None
