"""A signal sent to a cutlab command at one exact point: while OmegaConf builds a node, or in a weakref callback.

OmegaConf's clean-up of a node half made when a KeyboardInterrupt landed raises an AttributeError over it, which
cutlab reported as a config error, or which was lost. A person's Ctrl-C cannot be aimed that finely, so the child
reaches into OmegaConf's and cutlab's private names: the signal is sent as a list item is set (``nth`` such set) once
the named cutlab function has begun, or, for ``NAME-returned``, once it has returned.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SENT = "[test] the signal is sent"
CHILD = f"SENT = {SENT!r}\n" + """
import importlib, os, signal, sys
from omegaconf.listconfig import ListConfig
module_name, function, sent, nth, command, *argv = sys.argv[1:]
after = function.endswith("-returned")
state = {"armed": False, "sets": 0}
set_item = ListConfig._set_item_impl
def set_item_and_signal(self, key, value):
    if state["armed"]:
        state["sets"] += 1
        if state["sets"] == int(nth):
            print(SENT, file=sys.stderr, flush=True)
            os.kill(os.getpid(), getattr(signal, sent))
    return set_item(self, key, value)
ListConfig._set_item_impl = set_item_and_signal
module = importlib.import_module(module_name)
real = getattr(module, function.removesuffix("-returned"))
def armed(*args, **kwargs):
    state["armed"] = state["armed"] or not after
    try:
        return real(*args, **kwargs)
    finally:
        state["armed"] = after
setattr(module, function.removesuffix("-returned"), armed)
import cutlab.commands
sys.argv = [command, *argv]
getattr(cutlab.commands, command.replace("-", "_"))()
"""


def signal_inside_omegaconf(where: tuple[str, str], sent: str, nth: int, command: str, args: list[str], cwd: Path,
                            env: dict) -> subprocess.CompletedProcess:
    """Run ``command ARGS`` (an installed command's name) and send it ``sent`` (``"SIGINT"``, ``"SIGTERM"``) at the
    ``nth`` list item OmegaConf sets once ``where`` = (module, function) has begun; SIGINT at its default, as from a
    terminal (a pytest-xdist worker ignores it, and its children would inherit that)."""
    ended = subprocess.run([sys.executable, "-c", CHILD, *where, sent, str(nth), command, *args], cwd=cwd, env=env,
                           timeout=300, capture_output=True, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert SENT in ended.stderr, f"{where} set fewer than {nth} list items: no signal was sent\n{ended.stderr[-2000:]}"
    return ended


WEAKREF_CHILD = f"SENT = {SENT!r}\n" + """
import importlib, os, signal, sys, weakref
module_name, function, sent, command, *argv = sys.argv[1:]
module = importlib.import_module(module_name)
real = getattr(module, function)
def signal_in_a_weakref_callback():
    class Collected:
        pass
    def callback(ref):
        print(SENT, file=sys.stderr, flush=True)
        os.kill(os.getpid(), getattr(signal, sent))
        for _ in range(100000):  # Python runs the handler here, inside the callback, and ignores what it raises
            pass
    thing = Collected()
    ref = weakref.ref(thing, callback)
    del thing
def signalled_first(*args, **kwargs):
    signal_in_a_weakref_callback()
    return real(*args, **kwargs)
setattr(module, function, signalled_first)
import cutlab.commands
sys.argv = [command, *argv]
getattr(cutlab.commands, command.replace("-", "_"))()
"""


def signal_in_a_weakref_callback(where: tuple[str, str], sent: str, command: str, args: list[str], cwd: Path,
                                 env: dict) -> subprocess.CompletedProcess:
    """Run ``command ARGS`` and send it ``sent`` from inside a weakref callback as ``where`` = (module, function)
    begins: what garbage collection does at any moment. Python ignores an exception raised in such a callback."""
    ended = subprocess.run([sys.executable, "-c", WEAKREF_CHILD, *where, sent, command, *args], cwd=cwd, env=env,
                           timeout=300, capture_output=True, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert SENT in ended.stderr, f"{where} was not called: no signal was sent\n{ended.stderr[-2000:]}"
    return ended


def sigterm_to_a_thread_other_than_main(history: Path, rows: int = 2):
    """Once ``history`` has more than ``rows`` lines, SIGTERM to a thread of this process other than the main one, as
    the kernel may deliver a signal sent to the process: Python runs the handler in the main thread only. Returns an
    event for the test to set when it is done: the thread then ends without a signal, which with no handler left
    installed would end the test's whole process."""
    import threading
    import time

    done = threading.Event()

    def signal_this_thread() -> None:
        while not done.is_set():
            if history.exists() and len(history.read_text().splitlines()) > rows:
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
                return
            time.sleep(0.05)

    threading.Thread(target=signal_this_thread, daemon=True).start()
    return done
