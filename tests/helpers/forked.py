"""``python -m cutlab`` (or another of its commands) in a process of its own, forked from one that has already
imported torch.

A command refused in one line takes 1.8 s here, 1.25 s of it importing torch, and the default test run makes
hundreds of commands. Each test process (pytest or an xdist worker) starts a server that imports what ``python -m
cutlab`` imports first (torch, cutlab.commands) and nothing else; each command is a fork of it that takes the
command's working folder, environment, arguments, stdin and output files, then runs ``cutlab`` as ``python -m`` does
(runpy, ``__main__``) and ends as a fresh interpreter ends (its atexit handlers, its exit status, or the signal that
killed it). The server is single-threaded, so forking it is safe, as Python's own forkserver does.

Not the same as a fresh interpreter: what Python, torch and OpenMP read from the environment as they start, so each
set of those variables (``STARTUP_PREFIXES``) has a server of its own, and a set seen once runs a fresh interpreter.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Read as the interpreter, torch or its OpenMP runtime start: commands differing in them use different servers
STARTUP_PREFIXES = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "ATEN_", "TORCH_", "PYTORCH_", "CUDA",
                    "CUBLAS_", "LD_", "MALLOC_", "LC_", "LANG")

SERVER = r"""
import json, os, runpy, sys
import torch  # noqa: F401 - what python -m cutlab imports first (cutlab.commands), before the command's module
import cutlab.commands  # noqa: F401
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
quiet = os.open(os.devnull, os.O_RDWR)
os.dup2(quiet, 0), os.dup2(quiet, 1)
for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the command: it ends the process as python -m cutlab would (SystemExit reaches the top level)
        requests.close(), replies.close()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, (path, flags) in enumerate([(request["stdin"], os.O_RDONLY), (request["stdout"], os.O_WRONLY),
                                            (request["stderr"], os.O_WRONLY)]):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        import tempfile
        tempfile.tempdir = None  # read from TMPDIR again, as a fresh interpreter does
        sys.argv = ["-m", *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        break
    print(pid, file=replies, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), file=replies, flush=True)
"""


class _Server:
    def __init__(self, cwd: Path, env: dict) -> None:
        self.pending = b""
        self.process = subprocess.Popen([sys.executable, "-c", SERVER], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)

    def _reply(self, deadline: float | None = None) -> int | None:
        """The server's next line as a number, or None once ``deadline`` (time.monotonic) passed without one."""
        while b"\n" not in self.pending:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self.process.stdout], [], [], wait)[0]:
                return None
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"the fork server of python -m cutlab ended ({self.process.wait()})")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return int(line)

    def run(self, module: str, args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", module, *args]
        with tempfile.TemporaryDirectory(prefix="cutlab-forked-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            out.touch(), err.touch()
            request = {"module": module, "args": args, "cwd": str(cwd), "env": env, "stdin": os.devnull,
                       "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            pid = self._reply()
            status = self._reply(time.monotonic() + timeout)
            if status is None:  # as subprocess.run's timeout: the command is killed, its output so far kept
                os.kill(pid, signal.SIGKILL)
                self._reply()
                raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(command, status, out.read_text(), err.read_text())


_servers: dict[tuple, _Server] = {}
_seen: set[tuple] = set()
MOST_SERVERS = 4  # per test process (each holds torch, ~250 MB)


def startup_of(env: dict) -> tuple:
    """What of ``env`` starting Python, torch and OpenMP reads: commands that share it can share a server."""
    return tuple(sorted((key, value) for key, value in env.items() if key.startswith(STARTUP_PREFIXES)))


def run_python_m(module: str, args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` (cutlab or one of its commands, which import torch first) in ``cwd`` with ``env``:
    a fresh interpreter the first time this test process sees ``env``'s start-up variables (a test's own PYTHONPATH
    is seen once or twice: a server would cost more than it saves), forked from their server (started then) from the
    second time on."""
    key = (os.getpid(), startup_of(env))
    server = _servers.get(key)
    if server is None or server.process.poll() is not None:
        if key not in _seen or sum(1 for pid, _ in _servers if pid == os.getpid()) >= MOST_SERVERS:
            _seen.add(key)
            return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=timeout)
        server = _servers[key] = _Server(cwd, env)
    return server.run(module, args, cwd, env, timeout)
