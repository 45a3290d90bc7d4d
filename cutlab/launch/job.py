"""One run of a sweep as a job: ``python -m cutlab <its overrides>`` in a child process.

The SLURM launcher runs this, and so does the local launcher with ``launcher.warm_workers=false`` (by default
it runs the same command in warm workers, cutlab/launch/worker.py). Running the plain single-run command
keeps a sweep's run identical to the run a user starts by hand (same folder, same record, complete runs
skipped, partial ones resumed). Under SLURM it is a submitit ``Checkpointable``: on the time-limit/preemption signal
submitit calls :meth:`RunCommand.checkpoint`, which stops the child at a step boundary (it checkpoints,
see cutlab/run/preemption.py) and hands submitit the same command to requeue, which resumes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from cutlab.config.paths import PACKAGE_ROOT
from cutlab.errors import CutlabError
from cutlab.launch.outcome import RunBusy, RunFailed, RunInterrupted, left_busy
from cutlab.launch.skipped import BUSY_MARKER, SKIPPED_ENV, SKIPPED_MARKER
from cutlab.run.preemption import PREEMPTED_EXIT
from cutlab.run.records import CHECKPOINT, SkippedSummary, read_summary

try:  # submitit only matters under SLURM; the local launcher works without it
    from submitit.helpers import Checkpointable, DelayedSubmission
except ImportError:  # pragma: no cover
    Checkpointable, DelayedSubmission = object, None


DEFAULT_STOP_GRACE_S = 60.0  # how long checkpoint() waits for the child outside SLURM's signal_delay_s


class RunCommand(Checkpointable):
    def __init__(self, argv: list[str], run_id: str, run_dir: str, cwd: str, threads: int | None = None,
                 module: str = "cutlab", own_session: bool = False, stop_grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        # module: ``cutlab`` for a run, ``cutlab.search`` for a search worker (same job, same requeue)
        # own_session: the child does not get the terminal's Ctrl-C; the local launcher stops it with SIGTERM
        # (a checkpoint at the next step) instead
        # stop_grace_s: checkpoint() waits this long for the child's checkpoint, then requeues all the same (the
        # child resumes from its last checkpoint); SLURM's submit sets it inside the profile's signal_delay_s
        self.argv, self.run_id, self.run_dir, self.cwd, self.threads = argv, run_id, run_dir, cwd, threads
        self.module, self.own_session, self.stop_grace_s = module, own_session, stop_grace_s
        self._child: subprocess.Popen | None = None
        self.stop_requested = False  # request_stop() was called: the child gets SIGTERM once it exists

    def __getstate__(self) -> dict:  # the child process and a stop request are not part of what a requeued job needs
        return {k: v for k, v in self.__dict__.items() if k not in ("_child", "stop_requested")}

    def __setstate__(self, state: dict) -> None:  # a job pickled before stop_grace_s existed waits as it did
        self.__dict__.update({"stop_grace_s": DEFAULT_STOP_GRACE_S, **state, "_child": None, "stop_requested": False})

    def request_stop(self) -> None:
        """Stop the run at its next step (SIGTERM to its process), also when the request comes while the process is
        still being started: the polling loop of ``__call__`` sends it as soon as the process exists."""
        self.stop_requested = True

    def run_argv(self) -> list[str]:
        """The arguments after ``python -m <module>``."""
        return [*self.argv, *([] if self.threads is None else [f"threads={self.threads}"])]

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module, *self.run_argv()]

    def __call__(self) -> dict:
        self._child = subprocess.Popen(self.command(), cwd=self.cwd, env=child_env(self.threads), stderr=subprocess.PIPE,
                                       text=True, bufsize=1, start_new_session=self.own_session)
        output = EchoedOutput(f"[{self.run_id}] ")
        echo = threading.Thread(target=output.echo, args=(self._child.stderr,), daemon=True)
        echo.start()
        signalled = False
        while self._child.poll() is None:  # polling, not wait(): the checkpoint handler may wait on it too
            if self.stop_requested and not signalled:
                self._child.send_signal(signal.SIGTERM)  # cutlab stops at the next step boundary with a checkpoint
                signalled = True
            time.sleep(0.2)
        echo.join(timeout=5)
        if self.module != "cutlab" and self._child.returncode == 0:  # a search worker's trials are in its storage
            return {"status": "complete"}
        return run_result(self.run_id, self.run_dir, self._child.returncode, output)

    def checkpoint(self, *args, **kwargs):
        """submitit's hook on SIGUSR2: let the child checkpoint and stop, then requeue this same command."""
        child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)  # cutlab stops at the next step boundary with a checkpoint
            deadline = time.monotonic() + self.stop_grace_s
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        return DelayedSubmission(self)  # the same command again; the child process is not pickled


def child_env(threads: int | None) -> dict:
    """The environment of a run's process: this checkout importable, OMP's threads = the run's torch threads, and
    a run that skips says so (cutlab/launch/skipped.py)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")])))
    env[SKIPPED_ENV] = "1"
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_result(run_id: str, run_dir: str, code: int, output: EchoedOutput) -> dict:
    """What ``python -m cutlab``'s exit status means: 0 the run's summary (a SkippedSummary when the run said it
    skipped), 75 (PREEMPTED_EXIT) interrupted after checkpointing, anything else busy when the run said its folder
    has another writer (cutlab/launch/skipped.py), else failed with its error line (from ``output.tail``, its last
    lines of stderr)."""
    if code == 0:
        try:
            summary = read_summary(Path(run_dir)) or {"status": "unknown"}
            return SkippedSummary(summary) if output.skipped else summary
        except CutlabError as error:  # replaced since the run ended: say so rather than fail the whole sweep
            return {"status": "unknown", "error": str(error)}
    if code == PREEMPTED_EXIT:  # stopped before its first checkpoint, it starts again (nothing was lost but set-up)
        where = "after checkpointing" if (Path(run_dir) / CHECKPOINT).exists() else "before its first checkpoint"
        raise RunInterrupted(f"{run_id}: stopped by a signal {where}; run the sweep again to resume")
    if output.busy is not None:  # an overlapping sweep's run writes it: left to that one, not failed
        raise RunBusy(f"{run_id}: {left_busy(output.busy)}")
    raise RunFailed(f"{run_id}: exit {code}: {error_line(output.tail)}")


END_OF_RUN = "\x1e[cutlab worker] end of run"  # a warm worker's marker after each run; \x1e: no run prints it


class EchoedOutput:
    """A child's stderr, echoed line by line with the current run's prefix; the current run's last lines kept
    for its error line. A warm worker (cutlab/launch/worker.py) runs many runs: ``begin`` switches the prefix,
    and its END_OF_RUN line sets ``run_done`` instead of being echoed. A run's SKIPPED_MARKER line sets ``skipped``,
    its BUSY_MARKER line ``busy`` to the folder's other writer (cutlab/launch/skipped.py)."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.tail = prefix, deque(maxlen=40)
        self.run_done, self.closed = threading.Event(), threading.Event()
        self.skipped, self.busy = False, None

    def begin(self, run_id: str) -> None:
        self.prefix, self.tail, self.skipped, self.busy = f"[{run_id}] ", deque(maxlen=40), False, None
        self.run_done.clear()

    def echo(self, stream) -> None:
        for line in stream:
            if line.rstrip("\n") == END_OF_RUN:
                self.run_done.set()
                continue
            if line.rstrip("\n") == SKIPPED_MARKER:
                self.skipped = True
                continue
            if line.startswith(BUSY_MARKER):
                self.busy = line.rstrip("\n")[len(BUSY_MARKER):]
                continue
            self.tail.append(line.rstrip("\n"))
            sys.stderr.write(self.prefix + line)
        sys.stderr.flush()
        self.closed.set()


# what Hydra prints after a run's traceback: advice, not the error (the exception's line comes before it)
HYDRA_HINT = "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."


def error_line(tail: deque) -> str:
    """The child's ``cutlab: error: ...`` line, else the last line of its traceback."""
    lines = [line for line in tail if line.strip() and line.strip() != HYDRA_HINT]
    for line in reversed(lines):
        if line.startswith("cutlab: error:"):
            return line[len("cutlab: error:"):].strip()
    return lines[-1].strip() if lines else "no output"
