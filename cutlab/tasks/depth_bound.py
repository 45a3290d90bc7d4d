"""The deepest model this machine can hold, named before the model is built.

An unrolled model's weights grow with its depth L (one block per layer, the paper's Sec. 2; DUST and UT have their
own weights per layer, App. C.3-C.4), and building them takes as long: L=100000 of DUST built for minutes without a
word, then filled the host's memory. A model with a ``model.pretrained`` key is bounded by its own builder: a
checkpoint fixes its L (ViT, the text encoders), or it counts its weights at L itself (the causal LM, memory_bound.py).
"""

from __future__ import annotations

from typing import Callable

import torch

from cutlab.core.models.memory_bound import check_weights_fit, host_available_bytes, weights_at_depth


def check_depth_fits(name: str, build_at: Callable[[int], torch.nn.Module], depth: int) -> None:
    """Refuse, in one line naming the largest L that fits, a depth whose weights exceed the host's free memory."""
    try:
        count, needed, per_layer = weights_at_depth(build_at, depth)
    except Exception:  # noqa: BLE001 - a model that takes no other depth (its source's, or at least 3 of one's own
        return  # model): a probe, not the build; the real build at L says what is wrong, if anything
    available = host_available_bytes()
    if per_layer <= 0 or available is None:  # one block shared by every layer (ERM DUST): L adds no weights
        return
    largest = max(1 + (available - (needed - (depth - 1) * per_layer)) // per_layer, 0)
    check_weights_fit(f"model={name} at L={depth}", count, needed, torch.float32, available, halvable=False,
                      fix=f"use L <= {largest} (or a machine with more memory)")
