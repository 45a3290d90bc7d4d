"""A folder on a read-only file system, and a small file system to fill, for the tests of commands that must stop
in one line where they cannot write."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from conftest import unavailable


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
        for _ in range(50):  # "busy" while a process writes a file it opened through the bind (a run in progress)
            remounted = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
            if remounted.returncode == 0 or "busy" not in remounted.stderr:
                break
            time.sleep(0.1)
        if remounted.returncode != 0:
            pytest.skip(f"root cannot remount {folder} read-only here: {remounted.stderr.strip()}")
        yield folder
    finally:  # lazily: a run the test stopped may still hold a file there for a moment
        subprocess.run(["umount", "-l", str(folder)], check=True)


@contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """``folder`` (made here) as a tmpfs of ``size`` (e.g. ``1m``) for the block; needs root (CI runs as root)."""
    folder.mkdir()
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root (CI runs as root); the disk-full tests cannot run here")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the disk-full tests cannot run")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MB tmpfs, to fill (``fill``) and free again."""
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        yield disk


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file (returned: remove it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    while True:  # the last pages may take a shorter write
        try:
            with open(filler, "ab", buffering=0) as handle:
                handle.write(b"\0")
        except OSError:
            return filler
