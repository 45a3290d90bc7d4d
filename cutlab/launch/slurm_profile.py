"""SLURM settings: a profile file (``slurm/<name>.yaml``) gives the defaults, ``launcher.KEY=`` overrides win.

The keys carry submitit's names (cutlab.config.launcher), in a profile file and on the command line alike::

    partition: null          # SLURM partition; null = the cluster's default partition
    qos: null                # quality of service, account, node constraint (sbatch --qos/--account/--constraint)
    account: null
    constraint: null
    timeout_min: 60          # time limit of one run's job, minutes (a run that hits it checkpoints and is requeued)
    mem_gb: 4                # memory per job
    cpus_per_task: 1
    gpus_per_node: 0
    array_parallelism: 16    # at most this many runs of one job array at a time (--array=0-N%16)
    signal_delay_s: 90       # SIGUSR2 this long before the time limit: checkpoint, then requeue
    max_requeues: 3          # time-limit requeues per run (a preemption too in the last 20 % of timeout_min)
    setup: []                # shell lines run before each run (module load ..., source .venv/bin/activate)
    additional_parameters: {}  # any other sbatch option, e.g. {comment: paper, exclusive: true}

Precedence, highest first: a ``launcher.KEY=VALUE`` override (or a sweep file's ``launcher:`` section), the
profile named by ``launcher.profile`` (a name under slurm/ or a path to a file), then these defaults. A key left
null in conf/launcher/slurm.yaml takes the profile's value; ``additional_parameters`` merge key by key.
The search helper (cutlab/search) reads the same settings for its workers.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cutlab.config.launcher import RENAMED, SLURM_SETTINGS, submitit_key
from cutlab.config.paths import SLURM_PROFILES_DIR
from cutlab.errors import CutlabError, refuse_blank

REQUEUE_MARGIN_S = 10  # of signal_delay_s, kept for submitit to pickle a signalled job and call scontrol requeue
WHOLE = ("timeout_min", "cpus_per_task", "array_parallelism", "signal_delay_s", "max_requeues", "gpus_per_node")
MAY_BE_ZERO = ("gpus_per_node", "max_requeues")
# sbatch options that a launcher key (or cutlab itself) writes: in additional_parameters one would replace that key's
# value in the script past its checks (time=1 under a checked timeout_min), so it is refused, naming the key
SET_BY_KEYS = {"time": "timeout_min", "mem": "mem_gb", "cpus_per_task": "cpus_per_task", "gpus": "gpus_per_node",
               "gpus_per_node": "gpus_per_node", "partition": "partition", "qos": "qos", "account": "account",
               "constraint": "constraint", "array": "array_parallelism", "signal": "signal_delay_s"}


@dataclass(frozen=True)
class SlurmProfile:
    name: str = "default"
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    constraint: str | None = None
    timeout_min: int = 60
    mem_gb: float = 4
    cpus_per_task: int = 1
    gpus_per_node: int = 0
    array_parallelism: int = 16
    signal_delay_s: int = 90
    max_requeues: int = 3
    setup: tuple[str, ...] = ()
    additional_parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def stop_grace_s(self) -> float:
        """How long a signalled task waits for its run's checkpoint: what is left of ``signal_delay_s`` once submitit
        has had REQUEUE_MARGIN_S to pickle the job and requeue it before SLURM kills the task."""
        return float(max(1, self.signal_delay_s - REQUEUE_MARGIN_S))

    def executor_parameters(self, job_name: str) -> dict[str, Any]:
        """Keyword arguments for ``submitit.SlurmExecutor.update_parameters`` (and its sbatch writer), whose own
        names for two of them are ``time`` and ``mem``."""
        parameters = dict(job_name=job_name, time=self.timeout_min, mem=_memory(self.mem_gb),
                          cpus_per_task=self.cpus_per_task, array_parallelism=self.array_parallelism,
                          signal_delay_s=self.signal_delay_s, setup=list(self.setup),
                          additional_parameters=dict(self.additional_parameters))
        for key in ("partition", "qos", "account", "constraint", "gpus_per_node"):
            if getattr(self, key):
                parameters[key] = getattr(self, key)
        return parameters


assert tuple(f.name for f in fields(SlurmProfile))[1:] == SLURM_SETTINGS, "one list of SLURM keys"


def _memory(gb: float) -> str:
    return f"{int(gb)}GB" if float(gb).is_integer() else f"{int(gb * 1024)}MB"


def profile_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        return candidate
    return SLURM_PROFILES_DIR / f"{name_or_path}.yaml"


def slurm_settings(launcher: dict) -> SlurmProfile:
    """The settings of ``launcher=slurm``: its profile's (``slurm/<name>.yaml`` or the file at a path; unknown keys and
    bad values name the fix), overridden by every key the launcher node sets (not null)."""
    refuse_blank("launcher.profile", launcher.get("profile"), "name a profile (slurm/<name>.yaml or a file), or "
                 "leave it out for the default")
    values = _profile_values(str(launcher.get("profile") or "default"))
    given = {key: launcher[key] for key in SLURM_SETTINGS if launcher.get(key) is not None}
    _check_values(given, lambda key: f"launcher.{key}")
    extra = dict(given.pop("additional_parameters", None) or {})
    values.update(given, additional_parameters={**values["additional_parameters"], **extra})
    values["setup"] = tuple(values["setup"])
    _check_signal_fits(values["timeout_min"], values["signal_delay_s"])
    return SlurmProfile(**values)


SIGNAL_RESOLUTION_S = 60  # sbatch --signal: "the signal may be sent up to 60 seconds earlier than specified"


def own_threads(overrides: list[str]) -> str | None:
    """The value of a run's own ``threads=`` override (the last one), None without one."""
    given = [o.lstrip("+").partition("=")[2] for o in overrides if o.lstrip("+").startswith("threads=")]
    return given[-1] if given else None


def job_threads(threads: int | None, overrides: list[str], profile: SlurmProfile | None) -> int | None:
    """A run's torch threads: launcher.threads; under SLURM, where that is null, the run's own ``threads=`` (None:
    left to it), else the job's CPUs: where SLURM does not bind a job to them (TaskPlugin=task/none) torch took every
    core of the node."""
    if profile is None or threads is not None or own_threads(overrides) is not None:
        return threads
    return profile.cpus_per_task


def _check_signal_fits(timeout_min: int, signal_delay_s: int) -> None:
    """The checkpoint signal must come after the job starts: one sent at the start (a time limit within
    signal_delay_s plus SLURM's 60 s resolution) stops every task before its first step and spends its requeues
    (measured: timeout_min=1 with signal_delay_s=30 was signalled 0.5 s in, requeued and out of requeues)."""
    if timeout_min * 60 > signal_delay_s + SIGNAL_RESOLUTION_S:
        return
    shortest = (signal_delay_s + SIGNAL_RESOLUTION_S) // 60 + 1
    raise CutlabError(f"launcher.timeout_min={timeout_min} leaves no time to train: SLURM sends the checkpoint signal "
                      f"launcher.signal_delay_s={signal_delay_s} s before the limit and up to {SIGNAL_RESOLUTION_S} s "
                      f"earlier, so every task would be stopped at its start and requeued; set "
                      f"launcher.timeout_min={shortest} or more (or a smaller launcher.signal_delay_s)")


def _profile_values(name_or_path: str) -> dict[str, Any]:
    import yaml

    path = profile_path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SLURM_PROFILES_DIR.glob("*.yaml")))
        raise CutlabError(f"no SLURM profile {name_or_path!r} ({path} not found); choose one of "
                          f"launcher.profile={known}, or give a path to your own profile file")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise CutlabError(f"the SLURM profile {path} is not valid YAML ({error})") from None
    if not isinstance(raw, dict):
        raise CutlabError(f"the SLURM profile {path} must be a mapping of keys, e.g. 'partition: gpu'")
    renamed = sorted(set(raw) & set(RENAMED))
    if renamed:  # one name per setting: an old name is refused rather than read beside the new one
        raise CutlabError(f"rename {', '.join(f'{old}: to {RENAMED[old]}:' for old in renamed)} in the SLURM profile "
                          f"{path} (submitit's names, as on the command line: launcher.{RENAMED[renamed[0]]}=...)")
    unknown = sorted(set(raw) - set(SLURM_SETTINGS))
    meant = {key: ours for key in unknown if (ours := submitit_key(key))}
    if meant:  # submitit's AutoExecutor names (slurm_partition) or sbatch's (time)
        raise CutlabError(f"rename {', '.join(f'{key}: to {ours}:' for key, ours in meant.items())} in the SLURM "
                          f"profile {path} (the names of Hydra's submitit launcher, as on the command line: "
                          f"launcher.{next(iter(meant.values()))}=...)")
    if unknown:
        raise CutlabError(f"unknown key(s) {', '.join(unknown)} in the SLURM profile {path}; the keys are "
                          f"{', '.join(SLURM_SETTINGS)} (other sbatch options go under 'additional_parameters:')")
    _check_values(raw, lambda key: f"{key} in the SLURM profile {path}")
    defaults = {f.name: f.default for f in fields(SlurmProfile) if f.name != "additional_parameters"}
    return {**defaults, **raw, "name": path.stem, "setup": tuple(raw.get("setup") or ()),
            "additional_parameters": dict(raw.get("additional_parameters") or {})}


def _check_values(raw: dict, where) -> None:
    for key in ("partition", "qos", "account", "constraint"):  # '' was no name: the cluster's default partition
        refuse_blank(where(key), raw.get(key), "name one, or leave it out (null)")
    for key in WHOLE:
        value = raw.get(key)
        if key in raw and (isinstance(value, bool) or not isinstance(value, int) or value < 0
                           or (value == 0 and key not in MAY_BE_ZERO)):
            raise CutlabError(f"{where(key)} must be a {'whole number >= 0' if key in MAY_BE_ZERO else 'positive whole number'}"
                              f", got {value!r}")
    mem = raw.get("mem_gb")
    if "mem_gb" in raw and (isinstance(mem, bool) or not isinstance(mem, (int, float)) or mem <= 0):
        raise CutlabError(f"{where('mem_gb')} must be a positive number, got {mem!r}")
    if raw.get("setup") is not None and (isinstance(raw["setup"], str) or not all(isinstance(s, str) for s in raw["setup"])):
        raise CutlabError(f"{where('setup')} must be a list of shell lines, e.g. [\"module load cuda\"]")
    if raw.get("additional_parameters") is not None and not isinstance(raw["additional_parameters"], dict):
        raise CutlabError(f"{where('additional_parameters')} must be a mapping of sbatch options, e.g. "
                          "{comment:paper,exclusive:true}")
    _check_additional(raw.get("additional_parameters") or {}, where)


def _check_additional(extra: dict, where) -> None:
    """No sbatch option in ``extra`` that a launcher key sets (sbatch spells it with - or _, submitit writes -)."""
    for key in extra:
        ours = SET_BY_KEYS.get(str(key).replace("-", "_"))
        if ours:
            fix = f"launcher.{ours}=" if where(ours).startswith("launcher.") else f"{ours}:"
            raise CutlabError(f"{where('additional_parameters')} has {key} (sbatch's --{str(key).replace('_', '-')}), "
                              f"which launcher.{ours} sets: give {fix} instead")


def check_cluster(profile: SlurmProfile) -> None:
    """Before submitting: SLURM's commands are there, the controller answers, the partition exists and its largest
    node can run one job (cutlab.launch.slurm_capacity)."""
    for tool in ("sbatch", "sinfo", "scontrol"):
        if shutil.which(tool) is None:
            raise CutlabError(f"launcher=slurm needs SLURM's {tool} on PATH; run on a cluster's login node, or use "
                              "launcher=local (parallel processes on this machine)")
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():  # sinfo retried it for 60 s, and the line blamed the controller
        raise CutlabError(f"SLURM_CONF={conf} names no file: SLURM's commands read the cluster's configuration from "
                          "it; point it at the cluster's slurm.conf, or unset it for SLURM's own default")
    try:
        out = subprocess.run(["sinfo", "--noheader", "--format=%R"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise CutlabError("sinfo did not answer in 30 s: the SLURM controller is unreachable") from None
    if out.returncode != 0:  # sinfo's last line says why (its earlier ones are the steps that led there)
        said = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        raise CutlabError(f"sinfo failed ({said}): the SLURM controller is unreachable "
                          "(is SLURM_CONF set, is slurmctld running?)")
    partitions = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    if profile.partition and profile.partition not in partitions:
        raise CutlabError(f"launcher=slurm (profile {profile.name!r}) names partition {profile.partition!r}, which this "
                          f"cluster does not have (sinfo lists: {', '.join(partitions) or 'none'}); set "
                          f"launcher.partition=<one of them> (or 'partition:' in {profile_path(profile.name)})")
    from cutlab.launch.slurm_capacity import check_capacity

    problem = check_capacity(profile)
    if problem:
        raise CutlabError(f"{problem} (profile {profile.name!r})")


def cluster_check_line(profile: SlurmProfile) -> str:
    """What ``--plan`` says of the cluster: the checks a submission makes, run where SLURM answers, so a plan made on
    the login node shows a missing partition before the real submit refuses it; elsewhere, that nothing was checked.
    Asked once per profile and partition in a process (a scale's plan shows one script per grid, and an unreachable
    controller takes sinfo's 30 s to say so)."""
    key = (profile.name, profile.partition, profile.cpus_per_task, profile.mem_gb, profile.gpus_per_node,
           profile.timeout_min, os.environ.get("SLURM_CONF"))
    if key not in _CLUSTER_LINES:
        try:
            check_cluster(profile)
            partition = f" and has partition {profile.partition!r}" if profile.partition else ""
            _CLUSTER_LINES[key] = f"# checked against this cluster: SLURM answers{partition}"
        except CutlabError as error:
            _CLUSTER_LINES[key] = f"# warning: the submit would be refused: {error}"
    return _CLUSTER_LINES[key]


_CLUSTER_LINES: dict[tuple, str] = {}


def sbatch_script(profile: SlurmProfile, folder: Path, job_name: str, array_size: int, python: str) -> str:
    """The sbatch script submitit writes for a job array of ``array_size`` runs under this profile."""
    from submitit.slurm.slurm import _make_sbatch_string

    command = f"{shlex.quote(python)} -u -m submitit.core._submit {shlex.quote(str(folder))}"  # as submitit quotes
    return _make_sbatch_string(command=command, folder=str(folder), map_count=array_size,
                               **profile.executor_parameters(job_name))
