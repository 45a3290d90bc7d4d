"""The memory a model's weights need, checked against what the machine has before any weight is allocated.

A causal LM's weights are materialised in host memory first (a random init, or ``from_pretrained`` reading the
checkpoint), so a model larger than the host's free memory either stops in torch's allocator with a traceback
or, as Linux overcommits, is killed by the kernel's OOM killer with no message at all. Counting its parameters on
the meta device costs no memory and a fraction of a second, so the bound can be named before anything is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from cutlab.core.errors import CutlabError

GIB = 2**30
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")  # cgroup v2: a SLURM job's or a container's limit, below the host's MemAvailable


def weight_bytes(build, dtype: torch.dtype) -> tuple[int, int]:
    """(parameter count, bytes in ``dtype``) of the module ``build()`` makes, built on the meta device (no memory)."""
    with torch.device("meta"):
        module = build()
    count = sum(parameter.numel() for parameter in module.parameters())  # tied weights counted once
    return count, count * torch.empty((), dtype=dtype).element_size()


def weights_text(count: int, needed: int, dtype: torch.dtype) -> str:
    """``8.03 B parameters, 15.0 GiB in bfloat16``: a model's size as a line says it."""
    number = next((f"{count / scale:.3g} {name}" for scale, name in ((1e9, "B"), (1e6, "M"), (1e3, "k"))
                   if count >= scale), str(count))
    size = f"{needed / GIB:.1f} GiB" if needed >= GIB else f"{needed / 2**20:.1f} MiB"
    return f"{number} parameters, {size} in {str(dtype).removeprefix('torch.')}"


def host_available_bytes() -> int | None:
    """Memory this process may still allocate: MemAvailable, or less under a cgroup limit; None where unknown."""
    try:
        available = next(int(line.split()[1]) * 1024 for line in MEMINFO.read_text().splitlines()
                         if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            available = min(available, int(limit) - int((CGROUP / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return available


def weights_at_depth(build_at: Callable[[int], torch.nn.Module], depth: int) -> tuple[int, int, int]:
    """(parameter count, bytes, bytes each further layer adds) of ``build_at(depth)``, without building it: from real
    builds at depths 1 and 2, since an unrolled model repeats its block once per layer (the paper's Sec. 2), so each
    layer adds the same weights. Not on the meta device: DUST's init runs its power iteration, 5 s there at L=1. The
    generator's state is put back, so the model built next draws the init it would have drawn."""
    with torch.random.fork_rng(devices=[]):
        (count_1, bytes_1), (count_2, bytes_2) = [_sizes(build_at(layers)) for layers in (1, 2)]
    return count_1 + (depth - 1) * (count_2 - count_1), bytes_1 + (depth - 1) * (bytes_2 - bytes_1), bytes_2 - bytes_1


def _sizes(module: torch.nn.Module) -> tuple[int, int]:
    parameters = list(module.parameters())  # tied weights counted once
    return sum(p.numel() for p in parameters), sum(p.numel() * p.element_size() for p in parameters)


def check_weights_fit(name: str, count: int, needed: int, dtype: torch.dtype, available: int | None,
                      halvable: bool = True, fix: str = "use a smaller model, or a machine with more memory") -> None:
    """Refuse, in one line naming the bound, weights that cannot fit in ``available`` bytes (None: no check).
    ``halvable``: whether model.dtype=bfloat16 would halve what is allocated (not for a float32 random init)."""
    if available is None or needed <= available:
        return
    half = " model.dtype=bfloat16 halves it;" if halvable and dtype == torch.float32 else ""
    raise CutlabError(
        f"{name} has {count / 1e9:.2f} B parameters: its {str(dtype).removeprefix('torch.')} weights alone need "
        f"{needed / GIB:.1f} GiB of host memory, but this machine has {max(available, 0) / GIB:.1f} GiB available "
        f"(MemAvailable, or the cgroup's limit);{half} {fix}"
    )
