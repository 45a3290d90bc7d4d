"""A folder on a read-only file system, and a small file system to fill, for the tests of commands that must stop
in one line where they cannot write."""

from __future__ import annotations

import errno
import os
import subprocess
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
        remounted = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
        if remounted.returncode != 0:
            pytest.skip(f"root cannot remount {folder} read-only here: {remounted.stderr.strip()}")
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MB tmpfs and a way to fill it and to free it again; needs root (CI runs as root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root (CI runs as root); the disk-full tests cannot run here")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the disk-full tests cannot run")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


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
