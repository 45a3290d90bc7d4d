"""A command run on a pseudo-terminal of its own, as from an ssh session, and that terminal then closed (hung up)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import termios
import threading
import time
from pathlib import Path


class Terminal:
    """``command`` as the foreground job of a new terminal: its session's controlling terminal is a pty, so closing
    the pty's master side sends the kernel's SIGHUP to the command's process group, exactly as a dropped ssh does."""

    def __init__(self, command: list[str], cwd: Path, env: dict, log: Path | None = None, nohup: bool = False) -> None:
        """``log``: its output goes to that file, not the terminal (``> log``); ``nohup``: it ignores SIGHUP."""
        self.master, slave = pty.openpty()
        output = log.open("w") if log is not None else slave
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=slave, stdout=output, stderr=output,
                                        start_new_session=True, preexec_fn=_nohup if nohup else _take_terminal)
        os.close(slave)
        if log is not None:
            output.close()
        self.output, self._closing = bytearray(), threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)  # a full pty buffer would block the command
        self._reader.start()

    def _read(self) -> None:
        while not self._closing.is_set():
            if not select.select([self.master], [], [], 0.1)[0]:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO once the command's side is gone, EBADF once hung up
                return
            if not chunk:
                return
            self.output += chunk

    def hang_up(self) -> None:
        # the reader first: a read() in progress keeps the master open, and the terminal would not hang up
        self._closing.set()
        self._reader.join()
        os.close(self.master)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.process.poll() is None:
            self.process.kill()
            raise AssertionError(f"still running {timeout:.0f} s after the hang-up:\n{self.text()[-3000:]}")
        return self.process.returncode

    def text(self) -> str:
        return self.output.decode(errors="replace")


def _take_terminal() -> None:
    """In the child, after setsid: make its stdin (the pty) the session's controlling terminal, with SIGHUP and SIGINT
    at their defaults, as a terminal's job has them (a pytest-xdist worker, or one where an earlier test stopped a
    sweep in-process, may ignore them, and a child inherits that)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _nohup() -> None:
    """As ``nohup`` starts a command: SIGHUP ignored (the disposition survives exec)."""
    _take_terminal()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
