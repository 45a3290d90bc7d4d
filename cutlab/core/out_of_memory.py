"""An allocation that fails inside a run, said in one line naming the settings that size it.

torch reports a host allocation that fails as a RuntimeError ("DefaultCPUAllocator: can't allocate memory") and a
device one as torch.OutOfMemoryError, each ending the run in a traceback whose fix is a setting of the run's own
(a batch of train.batch_size samples unrolled through L layers: the activations the gradient of every layer's loss
needs, the paper's eq. (4)). Raised as OutOfMemory, a CutlabError, the run is recorded failed as a NonFiniteLoss is,
its last checkpoint kept, and the command line prints the one line.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import torch

from cutlab.core.errors import OutOfMemory

HOST_ALLOCATOR_FAILED = "DefaultCPUAllocator: can't allocate memory"


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and HOST_ALLOCATOR_FAILED in str(error))


@contextmanager
def settings_named_on_out_of_memory(where: str, settings: str, *, fix: str | None = None) -> Iterator[None]:
    """Inside, a failed allocation becomes OutOfMemory: ``where`` it failed, the size asked, ``settings`` to lower
    (or ``fix``, said instead where lowering a setting is not the way out: a pretrained model's checkpoint)."""
    try:
        yield
    except (MemoryError, RuntimeError) as error:
        if not is_out_of_memory(error):
            raise
        asked = re.search(r"(?:tried|Tried) to allocate ([\d.]+ ?[KMGT]?i?B|\d+ bytes)", str(error))
        amount = f" allocating {asked.group(1)}" if asked else ""
        device = "GPU" if isinstance(error, torch.OutOfMemoryError) else "host"
        raise OutOfMemory(f"out of {device} memory in {where}{amount}; {fix or f'lower {settings}'}") from None
