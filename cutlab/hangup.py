"""A closed terminal (SIGHUP, e.g. an ssh session that dropped): cutlab stops as on SIGTERM, with a checkpoint.

Every line written to a terminal that hung up fails with EIO, so a run that printed its progress after the hang-up
died there (a sweep's runs were recorded failed with BrokenPipeError or OSError) instead of checkpointing. On SIGHUP
each process first points its streams that were the terminal at /dev/null; streams sent to a file or a pipe
(``nohup``, ``> log``, a launcher's relay) are kept. Under ``nohup`` (SIGHUP ignored) cutlab leaves SIGHUP ignored.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import sys

_closed = False


def silence_terminal() -> None:
    """Send this process's stdout and stderr, where they are a terminal (a character device), to /dev/null.

    The file type, not ``isatty``: on a terminal that has hung up, ``isatty`` can already answer False."""
    global _closed
    _closed = True
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                fd = stream.fileno()
                if stat.S_ISCHR(os.fstat(fd).st_mode):
                    os.dup2(devnull, fd)
            except (AttributeError, OSError, ValueError):  # no file behind the stream (a test's capture): leave it
                continue
    finally:
        os.close(devnull)


def output_gone() -> bool:
    """Whether this process's stderr is a pipe whose reader has gone (POLLERR): a SLURM job's process that relayed a
    worker's lines was killed. Its next line fails with BrokenPipeError, which is then no error of the run's own."""
    try:
        poll = select.poll()
        poll.register(sys.stderr.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no file behind the stream (a test's capture)
        return False


def terminal_closed() -> bool:
    """Whether this process has had a SIGHUP (its children are then stopped with SIGHUP too, to silence theirs)."""
    return _closed


def repeated_hang_up(signum: int) -> bool:
    """For a stop handler: on SIGHUP, silence the terminal; True where it had already closed, for the shell's hang-up
    after the terminal's is no second signal (the handler returns). False for every other signal."""
    if signum != signal.SIGHUP:
        return False
    if _closed:
        return True
    silence_terminal()
    return False


def stop_signals(*signals: signal.Signals) -> tuple[signal.Signals, ...]:
    """``signals`` and SIGHUP, unless this process was started to ignore hang-ups (``nohup``): then it goes on."""
    ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    return (*signals, *(() if ignored else (signal.SIGHUP,)))
