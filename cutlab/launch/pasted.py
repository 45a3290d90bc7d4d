"""A ``python -m cutlab`` command as the plans print it for the user to paste into a shell.

A model of the user's own is imported from their PYTHONPATH (README, "A new model"), which the planning process
has in its environment: a printed command without it fails in a new shell on the import of that model.
"""

from __future__ import annotations

import os
import shlex


def pasted_command(args: list[str]) -> str:
    """``python -m cutlab ARGS``, quoted for a shell, after ``PYTHONPATH=...`` (its entries made absolute) where this
    process has one."""
    entries = [os.path.abspath(entry) for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    prefix = f"PYTHONPATH={shlex.quote(os.pathsep.join(entries))} " if entries else ""
    return prefix + shlex.join(["python", "-m", "cutlab", *args])
