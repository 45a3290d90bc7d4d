"""A folder on a read-only file system, for the tests of commands that must refuse to write there in one line."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder``, with what it holds, bound read-only onto itself for the block (``mount --bind``, then a read-only
    remount). Only root may mount, and permissions do not stop root, so elsewhere the test is skipped, saying why."""
    if os.geteuid() != 0:
        pytest.skip("a read-only file system needs root here (mount --bind); run as root (CI does) to check this")
    bound = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if bound.returncode != 0:
        pytest.skip(f"root cannot bind-mount {folder} here: {bound.stderr.strip()}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
        if remounted.returncode != 0:
            pytest.skip(f"root cannot remount {folder} read-only here: {remounted.stderr.strip()}")
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)
