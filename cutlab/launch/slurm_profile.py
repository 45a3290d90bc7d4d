"""SLURM profiles: ``slurm/<name>.yaml`` says where and how big each run's job is.

A profile is a small YAML file of these keys (all optional; the defaults are ``slurm/default.yaml``'s)::

    partition: null          # SLURM partition; null = the cluster's default partition
    time_min: 60             # time limit of one run's job, minutes (a run that hits it checkpoints and is requeued)
    mem_gb: 4                # memory per job
    cpus_per_task: 1
    gpus_per_node: 0
    array_parallelism: 16    # at most this many runs of one job array at a time (--array=0-N%16)
    signal_delay_s: 90       # SIGUSR2 this long before the time limit: checkpoint, then requeue
    max_requeues: 3          # time-limit requeues per run (preemptions are always requeued)
    setup: []                # shell lines run before each run (module load ..., source .venv/bin/activate)
    additional: {}           # any other sbatch option, e.g. {qos: high, account: mylab, constraint: a100}

Select one with ``launcher=slurm launcher.profile=<name>`` (a name under slurm/, or a path to a file).
The search helper (cutlab/search) uses the same files for its workers.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cutlab.config.paths import SLURM_PROFILES_DIR
from cutlab.errors import CutlabError

PROFILES_DIR = SLURM_PROFILES_DIR


@dataclass(frozen=True)
class SlurmProfile:
    name: str = "default"
    partition: str | None = None
    time_min: int = 60
    mem_gb: float = 4
    cpus_per_task: int = 1
    gpus_per_node: int = 0
    array_parallelism: int = 16
    signal_delay_s: int = 90
    max_requeues: int = 3
    setup: tuple[str, ...] = ()
    additional: dict[str, Any] = field(default_factory=dict)

    def executor_parameters(self, job_name: str) -> dict[str, Any]:
        """Keyword arguments for ``submitit.SlurmExecutor.update_parameters`` (and its sbatch writer)."""
        parameters = dict(job_name=job_name, time=self.time_min, mem=_memory(self.mem_gb),
                          cpus_per_task=self.cpus_per_task, array_parallelism=self.array_parallelism,
                          signal_delay_s=self.signal_delay_s, setup=list(self.setup),
                          additional_parameters=dict(self.additional))
        if self.partition:
            parameters["partition"] = self.partition
        if self.gpus_per_node:
            parameters["gpus_per_node"] = self.gpus_per_node
        return parameters


def _memory(gb: float) -> str:
    return f"{int(gb)}GB" if float(gb).is_integer() else f"{int(gb * 1024)}MB"


def profile_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        return candidate
    return PROFILES_DIR / f"{name_or_path}.yaml"


def load_profile(name_or_path: str) -> SlurmProfile:
    """The profile ``slurm/<name>.yaml`` (or the file at a path); unknown keys and bad values name the fix."""
    import yaml

    path = profile_path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise CutlabError(f"no SLURM profile {name_or_path!r} ({path} not found); choose one of "
                          f"launcher.profile={known}, or give a path to your own profile file")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise CutlabError(f"the SLURM profile {path} is not valid YAML ({error})") from None
    if not isinstance(raw, dict):
        raise CutlabError(f"the SLURM profile {path} must be a mapping of keys, e.g. 'partition: gpu'")
    allowed = {f.name for f in fields(SlurmProfile)} - {"name"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise CutlabError(f"unknown key(s) {', '.join(unknown)} in the SLURM profile {path}; the keys are "
                          f"{', '.join(sorted(allowed))} (other sbatch options go under 'additional:')")
    for key in ("time_min", "cpus_per_task", "array_parallelism", "signal_delay_s", "max_requeues", "gpus_per_node"):
        if key in raw and (not isinstance(raw[key], int) or raw[key] < 0 or (raw[key] == 0 and key not in ("gpus_per_node", "max_requeues"))):
            raise CutlabError(f"{key} in the SLURM profile {path} must be a positive whole number, got {raw[key]!r}")
    if "mem_gb" in raw and (not isinstance(raw["mem_gb"], (int, float)) or raw["mem_gb"] <= 0):
        raise CutlabError(f"mem_gb in the SLURM profile {path} must be a positive number, got {raw['mem_gb']!r}")
    raw["setup"] = tuple(raw.get("setup") or ())
    raw["additional"] = dict(raw.get("additional") or {})
    return SlurmProfile(name=path.stem, **raw)


def check_cluster(profile: SlurmProfile) -> None:
    """Before submitting: SLURM's commands are there, the controller answers, and the partition exists."""
    for tool in ("sbatch", "sinfo", "scontrol"):
        if shutil.which(tool) is None:
            raise CutlabError(f"launcher=slurm needs SLURM's {tool} on PATH; run on a cluster's login node, or use "
                              "launcher=local (parallel processes on this machine)")
    try:
        out = subprocess.run(["sinfo", "--noheader", "--format=%R"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise CutlabError("sinfo did not answer in 30 s: the SLURM controller is unreachable") from None
    if out.returncode != 0:
        raise CutlabError(f"sinfo failed ({out.stderr.strip() or out.returncode}): the SLURM controller is unreachable "
                          "(is SLURM_CONF set, is slurmctld running?)")
    partitions = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    if profile.partition and profile.partition not in partitions:
        raise CutlabError(f"the SLURM profile {profile.name!r} names partition {profile.partition!r}, which this "
                          f"cluster does not have (sinfo lists: {', '.join(partitions) or 'none'}); set "
                          f"'partition:' in {profile_path(profile.name)} to one of them, or null for the default")


def sbatch_script(profile: SlurmProfile, folder: Path, job_name: str, array_size: int, python: str) -> str:
    """The sbatch script submitit writes for a job array of ``array_size`` runs under this profile."""
    from submitit.slurm.slurm import _make_sbatch_string

    command = f"{python} -u -m submitit.core._submit {folder}"
    return _make_sbatch_string(command=command, folder=str(folder), map_count=array_size,
                               **profile.executor_parameters(job_name))
