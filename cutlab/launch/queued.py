"""Runs an earlier SLURM sweep left to its jobs whose task SLURM still holds, for the plan to count busy.

A run's folder lock is taken only once its task starts, so a run whose task still waits in the queue looked new,
and the same command, run again after a Ctrl-C on the submitting one, submitted it a second time. The sweep's
record says which job each run was left to (``busy`` with its ``job_id`` in outcome.json); ``squeue`` says
whether that job still waits or runs. Asked only where a record names such a job and squeue is there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from cutlab.launch.outcome import OUTCOME_FILE, SWEEP_RECORDS
from cutlab.run.records import not_a_file


def queued_jobs(runs_dir: Path, run_ids: set[str]) -> dict[str, str]:
    """``run_id -> job id`` for those of ``run_ids`` that a sweep record left to a SLURM job squeue still lists."""
    if shutil.which("squeue") is None:  # before the records are read: no SLURM here, no plan pays for them
        return {}
    left = _left_to_jobs(runs_dir, run_ids)
    if not left:
        return {}
    queued = _in_queue(sorted({job for job, _ in left.values()}))
    return {run_id: job for run_id, (job, name) in left.items() if queued.get(job) == name}


def _left_to_jobs(runs_dir: Path, run_ids: set[str]) -> dict[str, tuple[str, str]]:
    """``run_id -> (job id, job name)`` of the runs the sweep records left busy to a job; the latest record wins, but
    a record that found the run busy without naming a job (its folder locked by the task running it) keeps the job an
    earlier record named: dropping it, the same command submitted the run again once SLURM requeued that task."""
    records = [path for path in (runs_dir / SWEEP_RECORDS).glob(f"*/{OUTCOME_FILE}") if not_a_file(path) is None]
    left: dict[str, tuple[str, str]] = {}
    for path in sorted(records, key=_modified):
        job_name = "cutlab-" + path.parent.name.rpartition("-")[0]  # <sweep>-<UTC time>: the job array's name
        for run in _runs(path):
            if run.get("run_id") in run_ids:
                if run.get("status") == "busy" and isinstance(run.get("job_id"), str):
                    left[run["run_id"]] = (run["job_id"], job_name)
                elif run.get("status") != "busy":
                    left.pop(run["run_id"], None)
    return left


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _runs(path: Path) -> list[dict]:
    """The runs of one outcome.json; none from a file that is not one (cut short, hand-edited)."""
    try:
        runs = json.loads(path.read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        return []
    return [run for run in runs if isinstance(run, dict)] if isinstance(runs, list) else []


def _in_queue(job_ids: list[str]) -> dict[str, str]:
    """``job id -> job name`` of the given jobs (array tasks ``A_I``) that SLURM still holds; {} if squeue fails."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    try:
        out = subprocess.run(["squeue", "--noheader", "--array", "--format=%i %j", "--jobs", ",".join(arrays)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    pairs = (line.split(maxsplit=1) for line in out.stdout.splitlines() if out.returncode == 0)
    return {pair[0]: pair[1].strip() for pair in pairs if len(pair) == 2}
