"""Where a run came from: enough to reproduce it from its record alone."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import torch

from cutlab.config.paths import CHECKOUT
from cutlab.redaction import redact_argv


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# Environment variables that pick a numerical library's code path on the CPU (torch's own kernels, MKL, oneDNN):
# each can change a run's digits (benchmarks/demo_numerics.py: which do for the default run), so a record names them
NUMERICS_ENVIRONMENT = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


@functools.cache  # read once: the processor's name and its generation come from the same file
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (Linux), or nothing."""
    fields: dict[str, str] = {}
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return fields
    for line in lines:
        if not line.strip():
            break  # the first processor's block ends at its blank line
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    """The processor's name (Linux: /proc/cpuinfo; platform.processor() is empty there), or the architecture."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_generation() -> dict[str, str] | None:
    """Vendor, family, model and stepping (x86 Linux): a virtual machine's name ("AMD EPYC") hides the generation,
    and two generations can pick different kernels from the same libraries. None where /proc/cpuinfo lacks them."""
    info = _cpuinfo()
    keys = {"vendor": "vendor_id", "family": "cpu family", "model": "model", "stepping": "stepping"}
    generation = {name: info[key] for name, key in keys.items() if key in info}
    return generation or None


def provenance(seed: int, device: torch.device) -> dict:
    source = CHECKOUT
    status = _git(["status", "--porcelain", "--untracked-files=no"], source) if source else None
    from importlib.metadata import version  # pandas' version without importing pandas (~0.2 s before step 1)

    import numpy
    import omegaconf

    import cutlab

    return {
        "git_commit": _git(["rev-parse", "HEAD"], source) if source else None,  # installed: the version says it
        "git_dirty": bool(status) if status is not None else None,
        "seed": seed,
        "host": socket.gethostname(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(),
        # the SIMD kernels torch picked (e.g. AVX2, AVX512) round differently: a long primal-dual run on another
        # processor can end elsewhere from the same commit, seed and threads
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_generation": cpu_generation(),
        "numerics_environment": {name: os.environ[name] for name in NUMERICS_ENVIRONMENT if name in os.environ},
        "torch_threads": torch.get_num_threads(),
        "command": redact_argv(sys.argv),  # a password in an address must not reach the record
        "versions": {
            "cutlab": cutlab.__version__,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "pandas": version("pandas"),
            "omegaconf": omegaconf.__version__,
        },
    }
