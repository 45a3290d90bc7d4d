"""Where a run came from: enough to reproduce it from its record alone."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import torch

from cutlab.checkout import FOLDERS
from cutlab.config.paths import CHECKOUT, CONFIG_DIR
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


# the resource packages a wheel installs inside cutlab/ (cutlab/conf/, ...): in a checkout they sit beside it, so they
# are left out of the package's modules and the config tree is added under one name either way
RESOURCE_FOLDERS = {name.split(".", 1)[1] for name in FOLDERS if name.startswith("cutlab.")}


def source_digest(package: Path, config: Path) -> str:
    """sha256 over the relative paths and bytes of ``package``'s modules and ``config``'s YAML files (the ones a wheel
    ships: pyproject.toml's package-data), named as installed (cutlab/..., cutlab/conf/...): the same code has the
    same digest in a checkout and in any installed copy, and one changed byte gives another."""
    modules = [(f"cutlab/{path.relative_to(package).as_posix()}", path) for path in package.rglob("*.py")
               if path.relative_to(package).parts[0] not in RESOURCE_FOLDERS]
    configs = [(f"cutlab/conf/{path.relative_to(config).as_posix()}", path)
               for pattern in ("*.yaml", "*/*.yaml") for path in config.glob(pattern)]
    digest = hashlib.sha256()
    for name, path in sorted(modules + configs):
        content = path.read_bytes()
        digest.update(f"{name}\0{len(content)}\0".encode())  # lengths keep one file's end from reading as the next's
        digest.update(content)
    return digest.hexdigest()


@functools.cache  # once per process: about 4 ms for its 136 files (warm file cache, 2 shared cores)
def running_source_digest() -> str:
    """The digest of the cutlab this process imported (checkout or installed)."""
    import cutlab

    return source_digest(Path(cutlab.__file__).resolve().parent, CONFIG_DIR.resolve())


def provenance(seed: int, device: torch.device) -> dict:
    source = CHECKOUT
    status = _git(["status", "--porcelain", "--untracked-files=no"], source) if source else None
    from importlib.metadata import version  # pandas' version without importing pandas (~0.2 s before step 1)

    import numpy
    import omegaconf

    import cutlab

    return {
        "git_commit": _git(["rev-parse", "HEAD"], source) if source else None,  # installed: none (source_digest)
        "git_dirty": bool(status) if status is not None else None,
        # what ran, installed or not: two installed copies of one version with other code differ here
        "source_digest": running_source_digest(),
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
