"""A warm worker: one long-lived process that runs many runs, one after another, each exactly as ``python -m cutlab``.

A run of a tiny sweep trains for about a second, but a fresh ``python -m cutlab`` process spends 3-5 s
importing torch and Hydra and starting W&B's service before it trains (measured in benchmarks/, section 4). The
local launcher therefore keeps ``max_parallel`` of these workers and hands each its runs in turn.

The launcher's end is cutlab/launch/warm.py. Protocol: one JSON request per line on stdin, ``{"argv": [...]}`` (the arguments of ``python -m cutlab``);
one JSON answer per run, ``{"exit": <status>}``, on a private channel: the worker keeps a copy of its
original stdout for answers and points file descriptor 1 at stderr, because Hydra's job logging and the
run's own prints write to stdout. The exit status means what the process's would: 0 done, 2 a
``cutlab: error:``, 75 (PREEMPTED_EXIT) stopped by a signal after checkpointing, anything else failed
(its traceback is on stderr). Before each answer the worker writes :data:`END_OF_RUN` on stderr, so the
launcher knows that it has read all of that run's messages.

What one run could leave behind for the next is reset between runs: Hydra's global state (cleared),
logging (Hydra reconfigures it for every run), torch's threads and seed (set by every run from its
config), the W&B run (finished by every run; W&B's service process is shared, which is the point).

SIGTERM stops a run at its next training step with a checkpoint (cutlab/run/preemption.py), and outside
the training loop at once; either way the run is "interrupted" (exit 75) and the same command resumes it.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import sys
import traceback

from cutlab.launch.job import END_OF_RUN
from cutlab.run.preemption import PREEMPTED_EXIT


def _stop_between_steps_or_now(signum, frame) -> None:
    """SIGTERM outside a run's training loop (set-up, evaluation, idle): stop now, as "interrupted".

    Inside the loop, cutlab's own handler (cutlab/run/preemption.py) replaces this one and stops at the
    next step with a checkpoint. The run's record then says interrupted and the same command resumes it.
    """
    raise SystemExit(PREEMPTED_EXIT)


def run_once(argv: list[str]) -> int:
    """``python -m cutlab ARGV`` in this process; its exit status."""
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    sys.argv = ["cutlab", *argv]
    try:
        # what ``python -m cutlab`` executes, in this process: the modules it imports stay imported between runs
        runpy.run_module("cutlab", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_status(stop.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # what would have ended the process with a traceback
        traceback.print_exc()
        code = 1
    finally:
        GlobalHydra.instance().clear()
        _release_memory()
    return code


def _exit_status(code) -> int:
    """As Python turns ``SystemExit(code)`` into a process's exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # the next run (or another process) gets the GPU memory back


def serve(requests, answers) -> None:
    for line in requests:
        if not line.strip():
            continue
        code = run_once(json.loads(line)["argv"])
        sys.stdout.flush()
        print(END_OF_RUN, file=sys.stderr, flush=True)
        answers.write(json.dumps({"exit": code}) + "\n")
        answers.flush()


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")  # os.dup: not inherited by W&B's service or any other child
    os.dup2(2, 1)  # whatever writes to stdout (Hydra's job logging) goes to stderr
    signal.signal(signal.SIGTERM, _stop_between_steps_or_now)
    import hydra  # noqa: F401  Hydra, torch and the run's modules: imported once, before the first run

    import cutlab.run  # noqa: F401

    try:
        serve(sys.stdin, answers)
    except SystemExit:  # SIGTERM while idle
        pass


if __name__ == "__main__":
    main()
