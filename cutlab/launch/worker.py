"""A warm worker: one long-lived process that runs many runs, one after another, each exactly as ``python -m cutlab``.

A run of a tiny sweep trains for about a second, but a fresh ``python -m cutlab`` process spends 3-5 s
importing torch and Hydra and starting W&B's service before it trains (../shared/notes/stack.md). The
local launcher therefore keeps ``max_parallel`` of these workers and hands each its runs in turn.

Protocol: one JSON request per line on stdin, ``{"argv": [...]}`` (the arguments of ``python -m cutlab``);
one JSON answer per run, ``{"exit": <status>}``, on a private channel: the worker keeps a copy of its
original stdout for answers and points file descriptor 1 at stderr, because Hydra's job logging and the
run's own prints write to stdout. The exit status means what the process's would: 0 done, 2 a
``cutlab: error:``, 75 (PREEMPTED_EXIT) stopped by a signal after checkpointing, anything else failed
(its traceback is on stderr). Before each answer the worker writes :data:`END_OF_RUN` on stderr, so the
launcher knows that it has read all of that run's messages.

What one run could leave behind for the next is reset between runs: Hydra's global state (cleared),
logging (Hydra reconfigures it for every run), torch's threads and seed (set by every run from its
config), the W&B run (finished by every run; W&B's service process is shared, which is the point).

SIGTERM stops a run at its next training step with a checkpoint (cutlab/launch/preemption.py), and outside
the training loop at once; either way the run is "interrupted" (exit 75) and the same command resumes it.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import traceback

from cutlab.launch.job import END_OF_RUN, EchoedOutput, RunCommand, child_env, error_line, run_result
from cutlab.launch.outcome import RunFailed
from cutlab.launch.preemption import PREEMPTED_EXIT



# ------------------------------------------------------------------------------------- the launcher's end
class WorkerDied(RunFailed):
    """The worker process ended in the middle of a run (killed, out of memory, a crash in native code)."""


class WarmWorker:
    """The launcher's end of one worker process: started at its first run, and afresh after it died.

    Its stderr is echoed line by line with the prefix ``[<run id>] `` of the run it is running, and the last
    lines are kept for the run's error line, as the launcher does for a process per run (cutlab/launch/job.py).
    """

    def __init__(self, name: str, extra_env: dict | None = None) -> None:
        self.name, self.extra_env = name, extra_env or {}
        self.process: subprocess.Popen | None = None
        self._key: tuple | None = None  # (cwd, threads) the process was started with
        self._output: EchoedOutput | None = None

    def run(self, command: RunCommand) -> dict:
        """Run ``command`` in the worker; its summary, or RunFailed/RunInterrupted as a process of its own would raise."""
        self._start_if_needed(command)
        output = self._output
        output.begin(command.run_id)
        try:
            self.process.stdin.write(json.dumps({"argv": command.run_argv()}) + "\n")
            self.process.stdin.flush()
            answer = self._answers.readline()
        except OSError:  # the worker had already gone (its stdin is a broken pipe)
            answer = ""
        if not answer:
            raise WorkerDied(f"{command.run_id}: {self._died(output)}")
        output.run_done.wait(timeout=10)  # its last lines are echoed and in the tail
        return run_result(command.run_id, command.run_dir, json.loads(answer)["exit"], output.tail)

    def interrupt(self) -> None:
        """SIGTERM: a run stops at its next step with a checkpoint (an idle worker just exits)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def end_input(self) -> None:
        """No more runs: the worker exits after its run (W&B's service with it)."""
        if self.process is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:  # it had already gone
                pass

    def close(self, timeout_s: float = 30) -> None:
        if self.process is None:
            return
        self.end_input()
        try:
            self.process.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.process = None

    def _start_if_needed(self, command: RunCommand) -> None:
        key = (command.cwd, command.threads)
        if self.process is not None and (self.process.poll() is not None or key != self._key):
            self.close()
        if self.process is not None:
            return
        env = {**child_env(command.threads), **self.extra_env}
        # its own session: the terminal's Ctrl-C goes to the launcher, which stops runs at a step (interrupt)
        self.process = subprocess.Popen([sys.executable, "-m", "cutlab.launch.worker"], cwd=command.cwd, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, bufsize=1, start_new_session=True)
        self._answers, self._key = self.process.stdout, key
        self._output = EchoedOutput(f"[{self.name}] ")
        threading.Thread(target=self._output.echo, args=(self.process.stderr,), daemon=True).start()

    def _died(self, output: EchoedOutput) -> str:
        code = self.process.wait()
        output.closed.wait(timeout=2)  # W&B's service may hold the pipe open a little longer
        self.process = None
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        last = error_line(output.tail)
        return (f"the worker process {how} while running it (out of memory or killed?)"
                f"{'' if last == 'no output' else '; last output: ' + last}; the next runs get a fresh worker")


# ------------------------------------------------------------------------------------------ the worker


def _stop_between_steps_or_now(signum, frame) -> None:
    """SIGTERM outside a run's training loop (set-up, evaluation, idle): stop now, as "interrupted".

    Inside the loop, cutlab's own handler (cutlab/launch/preemption.py) replaces this one and stops at the
    next step with a checkpoint. The run's record then says interrupted and the same command resumes it.
    """
    raise SystemExit(PREEMPTED_EXIT)


def run_once(argv: list[str]) -> int:
    """``python -m cutlab ARGV`` in this process; its exit status."""
    from hydra.core.global_hydra import GlobalHydra

    import cutlab.__main__ as cli

    GlobalHydra.instance().clear()
    sys.argv = ["cutlab", *argv]
    try:
        cli.main()
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
    import cutlab.experiment  # noqa: F401  torch, the models and Hydra: imported once, before the first run

    try:
        serve(sys.stdin, answers)
    except SystemExit:  # SIGTERM while idle
        pass


if __name__ == "__main__":
    main()
