"""Arithmetic precision of the forward passes: ``precision=fp32 | tf32 | bf16``.

- ``fp32``: float32 everywhere (the default; TensorFloat-32 matrix products switched off, so a CUDA run computes
  what a CPU run computes, up to summation order).
- ``tf32``: float32 tensors, matrix products and convolutions on CUDA's TensorFloat-32 units (10-bit mantissa);
  CUDA only, since no other device has those units.
- ``bf16``: the model's forward under ``torch.autocast`` to bfloat16 (matrix products in bf16, reductions and
  normalisations in float32, as autocast chooses per op).

In every mode the layer outputs are cast back to float32 before the losses: the loss matrix, the constraint values,
the multipliers and their optimiser run in float32, since a constraint compares two losses within a few per cent
(alpha) and bf16's 8-bit mantissa would blur that comparison.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from cutlab.core.errors import CutlabError

PRECISIONS = ("fp32", "tf32", "bf16")
DEFAULT_PRECISION = "fp32"  # conf/config.yaml's, the paper's arithmetic
#: what every record written before the key existed computed in: a fact of the past, apart from today's default
PRECISION_BEFORE_KEY = "fp32"


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse, in one line, a precision this device cannot run."""
    if precision not in PRECISIONS:
        raise CutlabError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}; e.g. precision=bf16")
    if precision == "tf32" and device.type != "cuda":
        raise CutlabError(f"precision=tf32 needs a CUDA GPU (TensorFloat-32 is a CUDA matrix mode) and this run is on "
                          f"{device.type}; use precision=fp32 or precision=bf16")


def configure_matmul(precision: str) -> None:
    """Set the process-wide CUDA matrix modes for ``precision`` (fp32 and bf16: exact float32 products)."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


@contextlib.contextmanager
def forward_precision(precision: str, device: torch.device) -> Iterator[None]:
    """The context a forward pass runs in: autocast to bfloat16 for ``bf16``, nothing otherwise."""
    if precision == "bf16":
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


def as_float32(outputs: list) -> list:
    """Layer outputs back in float32 (a no-op for float32 tensors and integer ones), for the losses."""
    return [out.float() if torch.is_tensor(out) and out.is_floating_point() and out.dtype != torch.float32 else out
            for out in outputs]
