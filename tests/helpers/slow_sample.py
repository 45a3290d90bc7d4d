"""Which slow tests a default run includes.

A run without ``-m`` includes a sample of the tests marked slow, so that every CI run exercises some of them and,
over commits, all of them: the sample is chosen by hashing each test's id with the checked-out commit (or
``CUTLAB_SLOW_SEED``), so one commit always runs the same sample and the next commit another.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

SIZE = 2  # the costliest pair adds about 3 min on 2 cores: the default run stays under 20 minutes


def seed(root: Path) -> str:
    """``CUTLAB_SLOW_SEED``, else the checked-out commit, else "no-commit" (a copy outside git)."""
    if given := os.environ.get("CUTLAB_SLOW_SEED"):
        return given
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "no-commit"
    return (head.returncode == 0 and head.stdout.strip()) or "no-commit"


def choose(test_ids: list[str], seed_text: str, size: int) -> list[str]:
    """The ``size`` ids whose hash with ``seed_text`` is lowest (in that order)."""
    ranked = sorted(test_ids, key=lambda test_id: hashlib.sha1(f"{seed_text}:{test_id}".encode()).hexdigest())
    return ranked[:max(size, 0)]
