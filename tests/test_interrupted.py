"""cutlab.interrupted: Ctrl-C held while OmegaConf builds nodes, and the Ctrl-C behind an error OmegaConf raised over it.

Each check runs in a child process whose SIGINT handler is Python's own (a test runner's worker may ignore SIGINT),
and sends the child a real SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from conftest import ROOT

HELD = """
import os, signal
from cutlab.interrupted import ctrl_c_held, ctrl_c_released
def press():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # the handler runs between bytecodes: let it
        pass
steps = []
try:
    with ctrl_c_held() as held:
        {block}
except KeyboardInterrupt:
    steps.append("KeyboardInterrupt")
steps.append("restored" if signal.getsignal(signal.SIGINT) is signal.default_int_handler else "NOT restored")
print(" ".join(steps))
"""


@pytest.mark.parametrize("block, steps", [
    # held to the block's end: the code after the Ctrl-C runs
    ("press(); steps.append('went on')", "went on KeyboardInterrupt"),
    # raised where the block asks, not later
    ("press(); steps.append('went on'); held.stop_if_pressed(); steps.append('too far')", "went on KeyboardInterrupt"),
    # a second Ctrl-C stops at once
    ("press(); steps.append('first'); press(); steps.append('too far')", "first KeyboardInterrupt"),
    # released: the held one is raised as the released part begins
    ("press()\n        with ctrl_c_released():\n            steps.append('too far')", "KeyboardInterrupt"),
    # released: Ctrl-C as usual within, then held again
    ("with ctrl_c_released():\n            try:\n                press()\n            except KeyboardInterrupt:\n"
     "                steps.append('as usual')\n        press(); steps.append('held again')",
     "as usual held again KeyboardInterrupt"),
    # nested holds are one: the inner block's end raises nothing, the outer's does
    ("with ctrl_c_held():\n            press()\n        steps.append('outer goes on')", "outer goes on KeyboardInterrupt"),
    # and the inner block can stop where it asks
    ("with ctrl_c_held() as inner:\n            press(); inner.stop_if_pressed(); steps.append('too far')",
     "KeyboardInterrupt"),
    # none pressed: nothing raised
    ("steps.append('quiet')", "quiet"),
], ids=["held-to-the-end", "raised-where-asked", "second-stops-at-once", "raised-as-released", "released-then-held",
        "nested", "nested-stops-where-asked", "none-pressed"])
def test_ctrl_c_is_held_until_the_block_can_stop(block, steps):
    child = subprocess.run([sys.executable, "-c", HELD.format(block=block)], cwd=ROOT, capture_output=True, text=True,
                           timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (child.returncode, child.stdout.strip()) == (0, f"{steps} restored"), child.stderr


def test_the_ctrl_c_behind_an_error_raised_over_it_is_found():
    from cutlab.interrupted import interrupt_behind

    class Node:  # OmegaConf's way: a clean-up in ``finally`` that fails on the half-made node
        def build(self, stop: KeyboardInterrupt):
            try:
                raise stop
            finally:
                self.half_made.clear()

    stop = KeyboardInterrupt()
    with pytest.raises(AttributeError) as raised:
        Node().build(stop)
    try:  # and wrapped again, as OmegaConf and cutlab wrap errors ``from None``
        try:
            raise raised.value
        except AttributeError:
            raise ValueError("a config error") from None
    except ValueError as wrapped:
        assert interrupt_behind(wrapped) is stop
    assert interrupt_behind(ValueError("no Ctrl-C behind it")) is None
