"""The launcher's end of a warm worker (cutlab/launch/worker.py): start it, hand it runs, read its answers.

The worker runs many runs, one after another, each exactly as ``python -m cutlab``; the protocol is described
in cutlab/launch/worker.py. A worker that died is started afresh for the next run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

from cutlab.launch.job import EchoedOutput, RunCommand, child_env, error_line, run_result
from cutlab.launch.outcome import RunFailed


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
        """Run ``command`` in the worker; its summary, or RunFailed/RunInterrupted/RunBusy as a process of its own
        would raise."""
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
        return run_result(command.run_id, command.run_dir, json.loads(answer)["exit"], output)

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
