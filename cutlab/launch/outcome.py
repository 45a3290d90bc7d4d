"""What became of each run of a sweep, and the sweep's summary (printed, and kept in the sweep's record)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

SWEEP_RECORDS = "_sweeps"  # <runs_dir>/_sweeps/: one folder per sweep invocation (its plan, config and result)
OUTCOME_FILE = "outcome.json"  # in a sweep's record: every run it ran and what became of it (analysis reads it)
# busy: its folder was being written by another live process (an earlier or overlapping sweep's run), so it was
# left to that one; skipped: complete when its turn came (an identical sweep started with this one finished it), so
# nothing ran
STATUSES = ("complete", "failed", "interrupted", "busy", "skipped")
DONE = ("complete", "skipped")  # a sweep whose every run is one of these exits 0
BUSY_ADVICE = "left to the process writing it; run the same command again when that one ends"
# a run a stopped sweep never began: counted interrupted, since the same command runs it
NOT_STARTED = "not started, the sweep was stopped; run it again to resume"
# submitit's UncompletedJobError once a task has used its max_num_timeout (launcher.max_requeues) time-limit requeues:
# the run was signalled and stopped at a checkpoint like every time before, so the same command resumes it
TIMED_OUT = "timed-out too many times"
TIMED_OUT_ADVICE = ("hit its SLURM time limit once more than launcher.max_requeues allows and stopped at its "
                    "checkpoint; run the same command again to resume it (a larger launcher.timeout_min or "
                    "launcher.max_requeues lets it finish in one go)")


class RunFailed(Exception):
    """A run ended with an error; the message holds the run's id and its last error line."""


class RunInterrupted(Exception):
    """A run stopped on a signal after checkpointing; the same command resumes it."""


class RunBusy(Exception):
    """A run's folder was being written by another live process (an overlapping sweep's run): left to that one."""


def left_busy(holder: str) -> str:
    """What a busy run's outcome says: who writes its folder (``process P on HOST``) and what to do."""
    return f"written by {holder}: {BUSY_ADVICE}"


@dataclass
class Outcome:
    run_id: str
    status: str                  # one of STATUSES
    metric: str | None = None
    value: float | None = None
    error: str | None = None
    job_id: str | None = None    # the SLURM job (array task) id, when there is one

    def line(self) -> str:
        detail = self.error if self.error else (f"{self.metric} {self.value:.4g}" if self.value is not None else "")
        job = f" [job {self.job_id}]" if self.job_id else ""
        return f"{self.status:<11} {self.run_id}{job} {detail}".rstrip()

    def as_dict(self) -> dict:
        return asdict(self)


def outcome_of(run_id: str, result: Callable[[], dict], job_id: str | None) -> Outcome:
    """Call ``result`` (a run's return value or its exception) and turn it into an Outcome."""
    try:
        summary = result()
    except (RunInterrupted, RunBusy) as error:  # its message starts with the run's id, which the line gives already
        status = "busy" if isinstance(error, RunBusy) else "interrupted"
        return Outcome(run_id, status, error=str(error).removeprefix(f"{run_id}: "), job_id=job_id)
    except RunFailed as error:
        return Outcome(run_id, "failed", error=str(error).split(": ", 1)[-1], job_id=job_id)
    except Exception as error:  # submitit wraps a job's exception in its own error type, with the traceback
        # a task stopped by SIGTERM: checkpointed, not failed; one whose folder another process writes: left to it
        for name, status in (("RunInterrupted", "interrupted"), ("RunBusy", "busy")):
            raised = _raised(str(error), name)
            if raised is not None:
                return Outcome(run_id, status, error=raised.removeprefix(f"{run_id}: "), job_id=job_id)
        if TIMED_OUT in str(error):
            return Outcome(run_id, "interrupted", error=TIMED_OUT_ADVICE, job_id=job_id)
        return Outcome(run_id, "failed", error=_last_line(str(error)), job_id=job_id)
    from cutlab.core.objectives import headline_of, objective_of_metric  # here: importing them imports torch (~1 s)
    from cutlab.run.records import SkippedSummary

    # the headline's own name: a text run's is the AUC of its accuracy over gamma_test, not an accuracy
    objective = objective_of_metric(summary["metric"]) if summary.get("metric") else None
    value = headline_of(summary, objective) if objective else None
    name = objective.headline_name() if objective else None
    status = "skipped" if isinstance(summary, SkippedSummary) else summary.get("status") or "complete"
    return Outcome(run_id, status, name, value, job_id=job_id)


def ended(outcomes: list[Outcome]) -> int:
    """The runs a sweep's tally counts as done: those that ran to their end, complete or failed. An interrupted
    run is not: the same command resumes it."""
    return sum(o.status != "interrupted" for o in outcomes)


def opened_tally(label: str, launched: int, unit: str, refused: list[Outcome]):
    """A sweep's tally of its runs ended (a progress Meter): the ``launched`` ones, and first those its plan
    ``refused`` (cutlab.launch.sweep.refused_outcomes), which no launcher starts: each counted failed in a line with
    its reason as the sweep begins, and left out of the rate and time left."""
    from cutlab.core.progress import tally

    meter = tally(label, launched + len(refused), unit, initial=len(refused))
    for count, outcome in enumerate(refused, 1):
        meter.update(count, outcome.line())
    return meter


def _raised(trace: str, name: str) -> str | None:
    """The message of the exception ``name`` in a job's traceback text, if it ended with one."""
    for line in reversed([line.strip() for line in trace.splitlines() if line.strip()]):
        if f"{name}: " in line:
            return line.split(f"{name}: ", 1)[1].strip()
    return None


SUBMITIT_RULE = "\n----------------------\n"


def _last_line(text: str) -> str:
    """A failed job's error line: RunFailed's message without its run id, else the traceback's last line."""
    failed = _raised(text, "RunFailed")
    if failed is not None:
        return failed.split(": ", 1)[-1]
    # submitit's FailedJobError puts the trace between two rules of dashes, then the log paths: the error is the
    # trace's last line, not the last log path
    trace = text.split(SUBMITIT_RULE)[1] if text.count(SUBMITIT_RULE) >= 2 else text
    lines = [line.strip() for line in trace.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


def skipped_total(planned: int, outcomes: list[Outcome]) -> int:
    """The runs a sweep skipped as complete: those its plan found complete, and those found complete when their turn
    came (finished meanwhile by an identical sweep)."""
    return planned + sum(o.status == "skipped" for o in outcomes)


def summary_text(name: str, outcomes: list[Outcome], skipped: int, seconds: float) -> str:
    """``skipped``: skipped_total's count."""
    counts = {status: sum(o.status == status for o in outcomes) for status in STATUSES}
    busy = f", {counts['busy']} busy (being written by another process)" if counts["busy"] else ""
    head = (f"sweep {name}: {counts['complete']} complete, {counts['failed']} failed, {counts['interrupted']} "
            f"interrupted{busy}, {skipped} skipped (already complete) in {seconds:.1f} s")
    return "\n".join([head, *(f"  {o.line()}" for o in sorted(outcomes, key=lambda o: o.run_id))])
