"""``python -m cutlab -m ...`` and ``--plan``: expand the sweep, keep its record, and run it with the chosen launcher.

Every sweep invocation gets its own folder ``<runs_dir>/_sweeps/<name>-<UTC time>/`` holding the plan,
the composed sweep config and the outcome of every run, so nothing an earlier invocation wrote is
lost. An in-process sweep makes it Hydra's sweep folder too (``hydra_sweep_dir``), so Hydra's own ``multirun.yaml``
is written there, not rewritten by each sweep in ``<runs_dir>/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from cutlab.atomic import DiskFull, is_disk_full, not_a_folder, write_atomic
from cutlab.config.launcher import check_launcher_node
from cutlab.config.resolvers import wandb_variable
from cutlab.errors import CutlabError
from cutlab.launch.outcome import BUSY_ADVICE, OUTCOME_FILE, SWEEP_RECORDS, Outcome, left_busy
from cutlab.launch.plan import Command, Plan, expand, format_plan, sweep_name
from cutlab.redaction import redact, redact_argv


def with_sweep_group(command: Command) -> Command:
    """Runs of one sweep share a W&B group, the sweep's name, unless the command sets ``wandb.group`` or W&B's own
    $WANDB_RUN_GROUP does (conf/config.yaml)."""
    given = any(o.lstrip("+~").startswith("wandb.group=") for o in command.overrides)
    if command.multirun and not given and wandb_variable("RUN_GROUP", None) is None:
        command.overrides.append(f"wandb.group={sweep_name(command)}")
    return command


def run_sweep(command: Command) -> tuple[int | None, tuple[Plan, Path] | None]:
    """Plan (and with ``--plan`` stop there), then launch: (exit status, None), or (None, (plan, record))
    when Hydra is to run the sweep in this process."""
    plan = expand(command)
    launcher = check_launcher_node(plan.launcher)
    profile = _profile(plan) if launcher == "slurm" else None
    parallel = {"local": plan.launcher.get("max_parallel", 1),
                "slurm": profile.array_parallelism if profile else 1}.get(launcher, 1)
    if command.plan:
        print(format_plan(plan, launcher, parallel), flush=True)
        if profile is not None:
            print(sbatch_preview(plan, profile), flush=True)
        return 0, None
    if plan.refused and not plan.to_run:  # e.g. train.epochs=abc: each run would say so
        first, more = plan.refused[0], len(plan.refused) - 1
        others = f" (and {more} more; --plan lists each)" if more else ""
        raise CutlabError(f"every run the sweep would run is refused; the first, {first.run_id}: {first.problem}"
                          f"{others}")
    if launcher == "inprocess":
        _check_folders_hydra_makes(plan)
    _check_wandb_run_id(plan)
    if profile is not None:  # before anything is written: a bad partition or no SLURM fails here
        from cutlab.launch.slurm_profile import check_cluster

        check_cluster(profile)
    record = _start_record(plan, launcher, parallel)
    busy = f", {len(plan.busy)} busy (written by another process: {BUSY_ADVICE})" if plan.busy else ""
    refused = f", {len(plan.refused)} refused (not launched: failed)" if plan.refused else ""
    print(f"[cutlab] sweep {plan.name}: {len(plan.runs)} runs, {plan.completed} complete "
          f"(skipped), {len(plan.to_run)} to run with launcher={launcher}{refused}{busy}; record in {record}",
          file=sys.stderr, flush=True)
    if launcher == "inprocess":
        return None, (plan, record)
    return _launch(plan, launcher, profile, record), None


def _check_folders_hydra_makes(plan: Plan) -> None:
    """Hydra's basic launcher (launcher=inprocess) makes every run's folder, a refused run's too, before cutlab sees
    the run: a file or a link to nothing there stopped the whole sweep in a FileExistsError traceback, the runs after
    it never started and said to be interrupted. The other launchers start only the runs to run."""
    for run in plan.refused:
        if problem := not_a_folder(run.run_dir):
            raise CutlabError(f"{problem}, where a run of this sweep keeps its record; move it aside and run the same "
                              "command again (launcher=inprocess makes every run's folder and would stop there; "
                              "launcher=local runs the other runs without it)")


def _check_wandb_run_id(plan: Plan) -> None:
    """WANDB_RUN_ID refused for a sweep of several logged runs (cutlab.config.checks.check_wandb_run_id)."""
    from omegaconf import OmegaConf

    from cutlab.config.checks import check_wandb_run_id

    if os.environ.get("WANDB_RUN_ID"):  # the sweep's config read only then
        check_wandb_run_id(len(plan.runs), OmegaConf.select(OmegaConf.create(plan.config_yaml), "wandb.mode"), "sweep")


def _profile(plan: Plan):
    """The SLURM settings: the profile's, overridden by the command line's ``launcher.KEY=`` (cutlab.launch.slurm_profile)."""
    from cutlab.launch.slurm_profile import slurm_settings

    return slurm_settings(plan.launcher)


def _launch(plan: Plan, launcher: str, profile, record: Path) -> int:
    from cutlab.launch.job import RunCommand
    from cutlab.launch.outcome import DONE, skipped_total, summary_text
    from cutlab.launch.slurm_profile import job_threads

    started = time.perf_counter()
    threads = plan.launcher.get("threads")
    commands = [RunCommand([*plan.command.config_flags(), *run.overrides], run.run_id, str(run.run_dir.resolve()),
                           os.getcwd(), job_threads(threads, run.overrides, profile)) for run in plan.to_run]
    refused = refused_outcomes(plan)  # launched by none: each would only stop in one line
    if not commands:
        outcomes, stopped_by = refused, None
    elif launcher == "local":
        from cutlab.launch.local import run_local

        outcomes, stopped_by = run_local(commands, plan.launcher.get("max_parallel", 1),
                                         warm_workers=plan.launcher.get("warm_workers", True),
                                         worker_env=_shared_wandb_cache(record), refused=refused)
    else:
        from cutlab.launch import slurm

        try:
            jobs, stopped_by = slurm.submit(commands, profile, record / "submitit", f"cutlab-{plan.name}")
        except CutlabError:  # sbatch refused it: nothing was submitted, so no record, which would look like a sweep
            shutil.rmtree(record, ignore_errors=True)  # whose submitter was killed
            raise
        # each run's job, recorded as sbatch answers: a submitter killed (SIGKILL, a lost login node) before it
        # wrote its outcome left no trace of them, and the same command submitted its queued runs again
        left = refused + busy_outcomes(plan) + [slurm.left_to(job.job_id, c) for job, c in zip(jobs, commands)]
        finish_record(record, [o.as_dict() for o in left], skipped_total(plan.completed, left),
                      time.perf_counter() - started)
        outcomes, stopped_by = slurm.wait(jobs, commands, stopped_by=stopped_by, refused=refused)
    elapsed = time.perf_counter() - started
    outcomes += busy_outcomes(plan)
    skipped = skipped_total(plan.completed, outcomes)
    text = summary_text(plan.name, outcomes, skipped, elapsed)
    finish_record(record, [o.as_dict() for o in outcomes], skipped, elapsed)
    print(text, file=sys.stderr, flush=True)
    if stopped_by is not None:  # as the in-process launcher ends on the same signal
        return stopped_exit(stopped_by)
    return 0 if all(o.status in DONE for o in outcomes) else 1


def stopped_exit(signal_name: str) -> int:
    """The exit status of a sweep a signal stopped: 130 for Ctrl-C, else PREEMPTED_EXIT, as a single run's."""
    from cutlab.interrupted import interrupted_exit
    from cutlab.run.preemption import PREEMPTED_EXIT

    return interrupted_exit() if signal_name == "SIGINT" else PREEMPTED_EXIT


def _shared_wandb_cache(record: Path) -> dict:
    """Warm workers share one W&B service each: its logs go to the sweep's record, not into the first run's folder."""
    return {} if os.environ.get("WANDB_CACHE_DIR") else {"WANDB_CACHE_DIR": str((record / "wandb-cache").resolve())}


def _start_record(plan: Plan, launcher: str, parallel: int) -> Path:
    """The sweep's own folder: its config, its plan as ``--plan`` prints it (same estimate) and its command."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    record = plan.runs_dir / SWEEP_RECORDS / f"{plan.name}-{stamp}"
    files = {"sweep.yaml": plan.config_yaml, "plan.txt": format_plan(plan, launcher, parallel) + "\n",
             "command.json": json.dumps({"argv": redact_argv(sys.argv), "cwd": os.getcwd(), "launcher": launcher},
                                        indent=1)}
    if problem := not_a_folder(record.parent):  # mkdir's NotADirectoryError traceback
        raise CutlabError(f"{problem}, where sweeps keep their records; move it aside and run the same command again")
    writing = record
    try:
        record.mkdir(parents=True, exist_ok=False)
        for name, text in files.items():
            writing = record / name
            writing.write_text(text)
    except OSError as error:  # a full disk before any run: one line, and no half record left to read
        if not is_disk_full(error):
            raise
        shutil.rmtree(record, ignore_errors=True)
        raise DiskFull(writing, "no run of this sweep has started yet") from None
    return record


def sbatch_preview(plan: Plan, profile) -> str:
    """What ``--plan`` shows of a SLURM launch: the sbatch script the sweep would submit, and what the cluster says."""
    from cutlab.launch.slurm_profile import cluster_check_line, sbatch_script

    folder = plan.runs_dir / SWEEP_RECORDS / f"{plan.name}-<time>" / "submitit"
    return (f"# the sbatch script (profile {profile.name}):\n"
            + sbatch_script(profile, folder, f"cutlab-{plan.name}", max(1, len(plan.to_run)), sys.executable)
            + cluster_check_line(profile))


def refused_outcomes(plan: Plan) -> list[Outcome]:
    """The runs whose own checks refuse them (PlannedRun.problem), failed with the line each would have stopped in."""
    return [Outcome(run.run_id, "failed", error=redact(run.problem or "refused")) for run in plan.refused]


def busy_outcomes(plan: Plan) -> list[Outcome]:
    """The runs left to the live process that writes each (not run again: its folder's lock would refuse them)."""
    return [Outcome(run.run_id, "busy", error=left_busy(run.holder), job_id=run.job_id)
            for run in plan.busy]


def finish_record(record: Path, outcomes: list[dict], skipped: int, seconds: float) -> None:
    # whole or not at all: the sweep may be killed as it writes it (a stopped in-process sweep, SIGKILL)
    write_atomic(record / OUTCOME_FILE, json.dumps({"skipped": skipped, "seconds": seconds, "runs": outcomes}, indent=1))


def hydra_sweep_dir(plan: Plan, record: Path) -> str:
    """The override that makes ``record`` Hydra's sweep folder, where it writes the sweep's multirun.yaml (into
    paths.runs_dir, each sweep rewrote the last one's). Written from ``${paths.runs_dir}``, as Hydra reads it, with
    the characters its override grammar reserves escaped in the record's own name."""
    name = re.sub(r"([\\()\[\]{}:=, \t])", r"\\\1", record.relative_to(plan.runs_dir).as_posix())
    return "hydra.sweep.dir=${paths.runs_dir}/" + name
