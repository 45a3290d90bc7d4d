"""SLURM through submitit: a sweep's runs as one job array, each task a checkpointable ``python -m cutlab``.

submitit writes the sbatch script (``--signal=USR2@<signal_delay_s>``, ``--array=0-N%<array_parallelism>``),
pickles each run's :class:`RunCommand`, and inside the job turns SIGUSR2 into ``checkpoint()`` + requeue.
Waiting asks ``squeue`` whether a task still exists and reads submitit's result files, so it needs no SLURM
accounting database; a task still queued has not ended, whatever result file its start before a requeue left; a task
that vanishes without a result (killed, node lost) is reported failed with the state ``scontrol`` gives it, and one
that SLURM says COMPLETED is waited for until its result file shows.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from cutlab.core.progress import counted, duration
from cutlab.errors import CutlabError
from cutlab.hangup import repeated_hang_up, stop_signals
from cutlab.launch.job import RunCommand
from cutlab.launch.outcome import Outcome, ended, opened_tally, outcome_of
from cutlab.launch.slurm_profile import SlurmProfile
from cutlab.run.records import stopped_at_checkpoint

POLL_S = 1.0
WAIT_LINE_EVERY_S = 60.0  # a wait in which no task ends says this often where the tasks are (queued, held, running)
VANISHED_AFTER_S = 15.0  # a task absent from squeue this long with no result file has died without one ...
RESULT_VISIBLE_S = 120.0  # ... unless SLURM says it COMPLETED: NFS may show a new file up to 60 s late (acdirmax)
CANCELLED_UNSTARTED = "cancelled before it started (SLURM state CANCELLED); run the same command again to run it"


def submit(commands: list[RunCommand], profile: SlurmProfile, folder: Path, job_name: str) -> tuple[list, list[str]]:
    """Submit the runs as one job array; returns submitit's jobs (one per run, same order) and the names of the
    signals (Ctrl-C, SIGTERM) that came while it submitted, which ``wait`` then acts on at once: held until sbatch
    has answered, so that a job array is never left running with no record of its job ids.

    The caller has checked the cluster (``check_cluster``) before anything else started."""
    import submitit

    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=profile.max_requeues)
    executor.update_parameters(**profile.executor_parameters(job_name))
    for command in commands:  # a signalled task must requeue before SLURM's time limit kills it
        command.stop_grace_s = profile.stop_grace_s
    try:
        with _note_signals(second_stops=True) as stopped_by, executor.batch():
            jobs = [executor.submit(command) for command in commands]
    except submitit.core.utils.FailedJobError as error:  # sbatch refused the script: nothing was submitted
        said = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = "; ".join(said[-2:]) or "no reason given"
        raise CutlabError(f"sbatch refused the job array ({reason}); nothing was submitted: change the "
                          "launcher.KEY= setting it names (--plan shows the sbatch script)") from None
    at_once = min(profile.array_parallelism, len(jobs))  # submitit's --array=0-N%K caps K at the array's size
    print(f"[cutlab] slurm: submitted {counted(len(jobs), 'run')} as job array {jobs[0].job_id.split('_')[0]} "
          f"(at most {at_once} at a time; logs in {folder})", file=sys.stderr, flush=True)
    return jobs, stopped_by


def wait(jobs, commands: list[RunCommand], on_poll: Callable[[], None] | None = None,
         stopped_by: list[str] | None = None, refused: list[Outcome] = ()) -> tuple[list[Outcome], str | None]:
    """Wait for every task, reporting each as it ends; a failed task never stops the others. ``on_poll``: called at
    every poll, for what the tasks do between their ends (a search's trials).

    Ctrl-C, SIGTERM or SIGHUP stops the waiting, not the tasks: they go on on the cluster (``scancel`` stops them),
    and each one still running is ``busy`` in the outcomes, left to its job. ``stopped_by``: such signals that came
    while ``submit`` held them; ``refused``: the sweep's runs its plan refused, submitted as no task, counted failed
    in its tally and outcomes. A minute in which no task ends gets a line saying where they are (queued and why,
    running). Returns the outcomes and that signal's name (None when every task ended)."""
    pending = dict(zip([job.job_id for job in jobs], zip(jobs, commands)))
    outcomes: list[Outcome] = list(refused)
    done = opened_tally("slurm", len(jobs), "job", outcomes)  # n/N ended and the time left, as each array task ends
    missing_since: dict[str, float] = {}
    states: dict[str, str | None] = {}
    began = said = time.monotonic()  # said: the last line; a wait in which no task ends says where they are

    def final_state(job_id: str) -> str | None:  # asked once: a COMPLETED task is waited for, polled each second
        if job_id not in states:
            states[job_id] = slurm_state(job_id)
        return states[job_id]

    def poll() -> dict[str, str] | None:  # each task that ended leaves ``pending`` for ``outcomes``; squeue's answer
        nonlocal said
        queued = _in_queue(list(pending))
        for job_id, (job, command) in list(pending.items()):
            if queued is not None and job_id in queued:  # not ended: a result file is a requeued task's last start's
                missing_since.pop(job_id, None)
                continue
            if job.paths.result_pickle.exists():
                outcome = outcome_of(command.run_id, job.result, job_id=job_id)
            elif queued is not None:
                first = missing_since.setdefault(job_id, time.monotonic())
                error = vanished(time.monotonic() - first, lambda: final_state(job_id), job.paths)
                if error is None:
                    continue
                outcome = without_result(command, job_id, error, final_state(job_id), job.paths.stderr)
            else:
                continue
            del pending[job_id]
            outcomes.append(outcome)
            done.update(ended(outcomes), outcome.line())
            said = time.monotonic()
        return queued

    with _note_signals(stopped_by) as stopped_by:
        while pending and not stopped_by:
            queued = poll()
            if pending and time.monotonic() - said >= WAIT_LINE_EVERY_S:
                said = time.monotonic()
                print(f"[cutlab] slurm: waiting, {duration(said - began)} since submission: {len(jobs) - len(pending)} "
                      f"of {len(jobs)} tasks ended; {queue_text(queued, list(pending))}", file=sys.stderr, flush=True)
            if pending and not stopped_by:
                if on_poll:
                    on_poll()
                time.sleep(POLL_S)
    if not pending:
        return outcomes, (stopped_by[0] if stopped_by else None)
    arrays = " ".join(sorted({job_id.split("_")[0] for job_id in pending}))
    print(f"[cutlab] slurm: {stopped_by[0]}: stopped waiting; {len(pending)} of the {len(jobs)} tasks go on on the "
          f"cluster (scancel {arrays} stops them); the same command later skips the runs they finish",
          file=sys.stderr, flush=True)
    return outcomes + [left_to(job_id, command) for job_id, (_, command) in pending.items()], stopped_by[0]


def left_to(job_id: str, command: RunCommand) -> Outcome:
    """The run left to its task on the cluster (busy, with the job that runs it: the plan of the same command reads
    it there, and leaves the run to that job while squeue holds it)."""
    return Outcome(command.run_id, "busy", job_id=job_id, error=f"left running on the cluster as job {job_id} (scancel "
                   f"{job_id} stops it)")


@contextmanager
def _note_signals(received_before: list[str] | None = None, second_stops: bool = False) -> Iterator[list[str]]:
    """Within the block, Ctrl-C, SIGTERM and SIGHUP only add their name to the yielded list (main thread only), which
    starts with ``received_before``. ``second_stops``: the first is held (said in one line) and a second one raises
    KeyboardInterrupt at once, for a block that could hang (sbatch with no controller to answer it)."""
    received: list[str] = list(received_before or [])
    if threading.current_thread() is not threading.main_thread():
        yield received  # signal handlers can only be installed from the main thread
        return

    def note(signum, frame) -> None:
        if repeated_hang_up(signum):  # SIGHUP: the terminal closed; its lines now go to /dev/null
            return
        if second_stops and received:
            raise KeyboardInterrupt
        received.append(signal.Signals(signum).name)
        if second_stops:
            print(f"[cutlab] slurm: {received[-1]}: stopping once sbatch has answered, so that the jobs it submits are "
                  "recorded (Ctrl-C again stops at once)", file=sys.stderr, flush=True)

    # SIGHUP too: a closed terminal killed the waiting command without a word, its queued tasks recorded nowhere
    previous = {sig: signal.signal(sig, note) for sig in stop_signals(signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def vanished(missing_s: float, state, paths) -> str | None:
    """Why a task gone from squeue for ``missing_s`` seconds, without a result file, failed; None: wait on.

    ``state()`` asks SLURM how the task ended. COMPLETED means the job wrote its result: wait for the file to show
    (a slow shared file system), and past RESULT_VISIBLE_S name the folder every node must share."""
    if missing_s < VANISHED_AFTER_S:
        return None
    ended = state()
    if ended == "COMPLETED":
        if missing_s < RESULT_VISIBLE_S:
            return None
        return (f"SLURM says the job COMPLETED, but its result {paths.result_pickle} has not appeared here in "
                f"{RESULT_VISIBLE_S:.0f} s: the submitit folder must be on a file system that this machine and the "
                "nodes share")
    how = f"SLURM state {ended}" if ended else "killed or lost"
    return f"the job ended without a result ({how}; see {paths.stderr})"


def without_result(command: RunCommand, job_id: str, error: str, state: str | None, log: Path) -> Outcome:
    """A task that ended without a result (``error``: why, from ``vanished``; ``state``: SLURM's; ``log``: the stderr
    file SLURM opens as the task starts): failed, unless it was cancelled before it started (no log: the same command
    runs it), or cancelled after its run had stopped at a checkpoint, as a task requeued after its checkpoint
    (SIGUSR2) and cancelled while it waited to start again was: the same command resumes that run, so it is
    interrupted, as a task stopped by SIGTERM is. A task killed otherwise (OOM, a node lost) stays failed."""
    if state == "CANCELLED" and not log.exists():
        return Outcome(command.run_id, "interrupted", job_id=job_id, error=CANCELLED_UNSTARTED)
    if state != "CANCELLED" or not stopped_at_checkpoint(Path(command.run_dir)):
        return Outcome(command.run_id, "failed", job_id=job_id, error=error)
    return Outcome(command.run_id, "interrupted", job_id=job_id, error=f"{error}, after its run had stopped at its "
                   "checkpoint; run the same command again to resume it")


def slurm_state(job_id: str) -> str | None:
    """A finished task's state (COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, ...) as scontrol
    keeps it for MinJobAge (300 s by default) after the end, without an accounting database; None if unknown."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"\bJobState=(\S+)", out.stdout) if out.returncode == 0 else None
    return found.group(1) if found else None


def queue_text(queued: dict[str, str] | None, job_ids: list[str]) -> str:
    """Where the tasks ``job_ids`` are, as squeue said (``queued``): ``1 running, 2 pending (BeginTime)``."""
    if queued is None:
        return ("squeue does not answer (is the SLURM controller up?); the tasks' results are read as they come, and "
                "Ctrl-C stops the waiting, not the tasks")
    where = Counter(queued.get(job_id, "ending") for job_id in job_ids)
    return ", ".join(f"{count} {state}" for state, count in sorted(where.items()))


def _in_queue(job_ids: list[str]) -> dict[str, str] | None:
    """The given array tasks SLURM still holds (pending, running, requeued), each with its state in words
    (``running``, ``pending (Resources)``); None if squeue did not answer."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    try:
        out = subprocess.run(["squeue", "--noheader", "--array", "--format=%i %T %r", "--jobs", ",".join(arrays)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return {} if "Invalid job id" in out.stderr else None
    queued = {}
    for line in out.stdout.splitlines():
        job_id, state, reason = (line.split(maxsplit=2) + ["", ""])[:3]
        if job_id:  # a running task's reason is "None"
            queued[job_id] = state.lower() + (f" ({reason.strip()})" if reason.strip() not in ("", "None") else "")
    return queued
