"""What a partition's largest node offers (``sinfo``), set against what the profile asks of one job.

A job that asks one node for more CPUs, memory, GPUs or time than any node of its partition has is, depending on
the cluster's ``EnforcePartLimits``, either refused by sbatch or accepted and left pending for ever (reason
``PartitionConfig``): a sweep "without babysitting" would then wait with no line saying why. Checked before
submitting, it stops in one line naming the key to change and the most the partition gives.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass

SINFO_FORMAT = "%P|%c|%m|%G|%l"  # per node and partition (sinfo -N): partition (* = default), CPUs, MB, GRES, MaxTime


@dataclass(frozen=True)
class NodeOffer:
    cpus: int
    memory_mb: int
    gpus: int
    time_limit_min: int | None  # None: no limit (infinite)


def partition_offers(sinfo_lines: str) -> dict[str, list[NodeOffer]]:
    """``sinfo -N --format=SINFO_FORMAT`` output, as each partition's nodes; the key ``*`` names the default one."""
    offers: dict[str, list[NodeOffer]] = {}
    for line in sinfo_lines.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or not parts[1].rstrip("+").isdigit():
            continue
        name, cpus, memory, gres, limit = parts
        offer = NodeOffer(int(cpus.rstrip("+")), int(re.sub(r"\D", "", memory) or 0), _gpus(gres), _minutes(limit))
        for key in ([name.rstrip("*"), "*"] if name.endswith("*") else [name]):
            offers.setdefault(key, []).append(offer)
    return offers


def _gpus(gres: str) -> int:
    """GPUs in a GRES field such as ``gpu:4``, ``gpu:a100:4(S:0-1)`` or ``gpu:2,shard:8``; 0 for ``(null)``."""
    total = 0
    for item in gres.split(","):
        fields = re.sub(r"\(.*?\)", "", item).split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def _minutes(limit: str) -> int | None:
    """SLURM's time format ``[days-]hours:minutes:seconds`` (or ``minutes:seconds``), ``infinite``/``UNLIMITED``."""
    days, _, clock = limit.rpartition("-")
    pieces = clock.split(":")
    if not all(piece.isdigit() for piece in pieces) or (days and not days.isdigit()):
        return None
    pieces = [int(p) for p in pieces]
    hours, minutes = (pieces[0], pieces[1]) if len(pieces) == 3 else (0, pieces[0])
    return int(days or 0) * 1440 + hours * 60 + minutes


def capacity_problem(profile, offers: dict[str, list[NodeOffer]]) -> str | None:
    """Why no node of the profile's partition can ever run one of its jobs (one line naming the key), or None."""
    partition = profile.partition or "*"
    nodes = offers.get(partition)
    if not nodes:
        return None  # a missing partition is said by the partition check; no default partition: sbatch says so
    where = f"partition {partition!r}" if profile.partition else "the cluster's default partition"
    asks = (("cpus_per_task", profile.cpus_per_task, max(n.cpus for n in nodes), "CPUs"),
            ("mem_gb", profile.mem_gb, math.floor(max(n.memory_mb for n in nodes) / 102.4) / 10, "GB of memory"),
            ("gpus_per_node", profile.gpus_per_node, max(n.gpus for n in nodes), "GPUs"))
    for key, asked, most, what in asks:
        if asked > most:
            return (f"launcher.{key}={asked:g} asks one node for more than any node of {where} has (at most "
                    f"{most:g} {what}, sinfo): its jobs would never start; set launcher.{key}={most:g} or less, or "
                    "launcher.partition=<a partition with larger nodes>")
    limits = [n.time_limit_min for n in nodes]
    if None not in limits and profile.timeout_min > max(limits):
        return (f"launcher.timeout_min={profile.timeout_min} is longer than {where}'s time limit ({max(limits)} min, "
                f"sinfo): its jobs would never start; set launcher.timeout_min={max(limits)} or less (a run that hits "
                "it checkpoints and is requeued)")
    return None


def check_capacity(profile) -> str | None:
    """``capacity_problem`` against this cluster's ``sinfo``; None also when sinfo does not answer (checked before)."""
    try:
        out = subprocess.run(["sinfo", "-N", "--noheader", f"--format={SINFO_FORMAT}"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return capacity_problem(profile, partition_offers(out.stdout)) if out.returncode == 0 else None
