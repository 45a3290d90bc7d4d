"""Where a run came from: enough to reproduce it from its record alone."""

from __future__ import annotations

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


def cpu_model() -> str:
    """The processor's name (Linux: /proc/cpuinfo; platform.processor() is empty there), or the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
