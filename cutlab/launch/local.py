"""Parallel runs on this machine, at most ``max_parallel`` at a time.

By default each of the ``max_parallel`` slots is a warm worker (cutlab/launch/worker.py): one long-lived
process that imports cutlab once and runs its share of the runs one after another, each exactly as
``python -m cutlab <its overrides>`` would. A fresh process per run pays 3-5 s of start-up (torch, Hydra,
W&B's service) that a tiny run does not amortise. ``launcher.warm_workers=false`` gives each run a fresh
process of its own instead (:class:`RunCommand`), for anyone who suspects one run's state reaches the next.

A thread per slot, rather than submitit's local executor, which starts every job at once: the cap matters
on small machines, where more runs than cores slow every run (benchmarks/).

Ctrl-C, SIGTERM or a closed terminal (SIGHUP; cutlab/hangup.py) stops the sweep: every running run stops at its
next step with a checkpoint, the runs not started are reported interrupted, and the same command resumes them all.
A second Ctrl-C or SIGTERM kills the runs; the sweep still records every run's outcome.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

from cutlab.hangup import repeated_hang_up, stop_signals
from cutlab.launch.job import RunCommand
from cutlab.launch.outcome import (NOT_STARTED, Outcome, RunFailed, RunInterrupted, ended, opened_tally,
                                   outcome_of)
from cutlab.launch.warm import WarmWorker, WorkerDied
from cutlab.signal_waits import as_completed_hearing_signals


class ProcessPerRun:
    """A slot that runs each run as its own ``python -m cutlab`` process (``launcher.warm_workers=false``)."""

    def __init__(self, stopping: threading.Event) -> None:
        self.command: RunCommand | None = None
        self.stopping = stopping  # the sweep's: set before interrupt() is called

    def run(self, command: RunCommand) -> dict:
        command.own_session = True  # Ctrl-C reaches the launcher only, which stops the run at a step
        self.command = command
        if self.stopping.is_set():  # interrupt() came as this run was handed to the slot: it saw no command yet
            command.request_stop()
        try:
            return command()
        except RunFailed:
            # SIGTERM before the run installed its handler (still importing or composing) kills it outright:
            # no step was lost, and the same command starts it again
            if command.stop_requested and command._child.returncode == -signal.SIGTERM:
                raise RunInterrupted(f"{command.run_id}: stopped while it was starting; run the sweep again to "
                                     "resume") from None
            if self.stopping.is_set() and command._child.returncode == -signal.SIGKILL:  # the sweep's second signal
                raise RunInterrupted(f"{command.run_id}: killed by the sweep's second signal; run the sweep again to "
                                     "resume it from its last checkpoint") from None
            raise
        finally:
            self.command = None

    def interrupt(self) -> None:
        command = self.command
        if command is not None:
            command.request_stop()

    def kill(self) -> None:
        child = self.command._child if self.command is not None else None
        if child is not None and child.poll() is None:
            child.kill()

    def end_input(self) -> None:
        pass

    def close(self) -> None:
        pass


def run_local(commands: list[RunCommand], max_parallel: int, warm_workers: bool = True,
              worker_env: dict | None = None, refused: list[Outcome] = ()) -> tuple[list[Outcome], str | None]:
    """Run ``commands`` in ``max_parallel`` slots; ``worker_env``: extra environment of the warm workers; ``refused``:
    the sweep's runs its plan refused, not run, counted failed in its tally and outcomes (outcome.opened_tally).
    Returns the outcomes and the signal that stopped the sweep (``"SIGINT"``, ``"SIGTERM"``), None if none did."""
    count = max(1, min(max_parallel, len(commands)))
    stopping = threading.Event()
    stopped_by: list[str] = []
    slots = [WarmWorker(f"worker-{i}", worker_env) if warm_workers else ProcessPerRun(stopping) for i in range(count)]
    idle: queue.SimpleQueue = queue.SimpleQueue()
    for slot in slots:
        idle.put(slot)

    def run(command: RunCommand) -> dict:
        slot = idle.get()  # a free one: at most ``count`` runs are in flight
        try:
            if stopping.is_set():
                raise RunInterrupted(f"{command.run_id}: {NOT_STARTED}")
            return slot.run(command)
        except WorkerDied:
            if stopping.is_set():  # stopped while it ended its run: the same command resumes it
                raise RunInterrupted(f"{command.run_id}: its worker was stopped; run the sweep again to resume") from None
            raise
        finally:
            idle.put(slot)

    outcomes: list[Outcome] = list(refused)
    done = opened_tally("local", len(commands), "run", outcomes)  # n/N ended and the time left, as each run ends
    # the handlers stay while the slots close (a worker's exit takes a moment): a second signal then kills the
    # workers, where the default action would end the sweep before it writes its record
    with _stop_on_signals(slots, stopping, stopped_by):
        try:
            with ThreadPoolExecutor(max_workers=count) as pool:
                futures = {pool.submit(run, command): command for command in commands}
                for future in as_completed_hearing_signals(futures):
                    command = futures[future]
                    outcome = outcome_of(command.run_id, future.result, job_id=None)
                    outcomes.append(outcome)
                    done.update(ended(outcomes), outcome.line())
        finally:
            for slot in slots:  # all of them at once: each worker's exit (W&B's teardown) takes a moment
                slot.end_input()
            for slot in slots:
                slot.close()
    return outcomes, (stopped_by[0] if stopped_by else None)


@contextmanager
def _stop_on_signals(slots: list, stopping: threading.Event, stopped_by: list[str]) -> Iterator[None]:
    """Ctrl-C/SIGTERM/SIGHUP: start no more runs and stop the running ones at a step (SIGTERM); a second Ctrl-C or
    SIGTERM kills them (a hang-up can come twice: from the terminal, then from the shell). ``stopped_by`` gets the
    first signal's name."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def handler(signum, frame) -> None:
        if repeated_hang_up(signum) or (signum == signal.SIGHUP and stopping.is_set()):
            return  # a hang-up is never the second signal that kills the runs
        if stopping.is_set():
            print("[cutlab] local: second signal: killing the runs (they resume from their last checkpoint)",
                  file=sys.stderr, flush=True)
            for slot in slots:
                slot.kill()
            return
        stopping.set()
        stopped_by.append(signal.Signals(signum).name)
        print(f"[cutlab] local: {signal.Signals(signum).name}: stopping; running runs checkpoint at their next step, "
              "and the same command resumes the sweep", file=sys.stderr, flush=True)
        for slot in slots:
            slot.interrupt()

    previous = {sig: signal.signal(sig, handler) for sig in stop_signals(signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            # a stopped sweep has no run left to stop, only its record to write: a further signal must not end it first
            signal.signal(sig, signal.SIG_IGN if stopping.is_set() else old)
