"""Stable run folders: the same command always names the same folder, so a re-run resumes or skips it."""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 200  # well under the 255-byte limit of common filesystems


def run_name(explicit: str | None, override_dirname: str) -> str:
    """``explicit`` if given, else the overrides (Hydra's ``job.override_dirname``) made filesystem-safe.

    Long override lists keep a readable prefix plus a hash of the whole, so names stay unique and short.
    """
    if explicit not in (None, "", "None", "null"):
        name = str(explicit)
    elif not override_dirname:
        name = "default"
    else:
        name = override_dirname
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)
    if len(safe) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        safe = f"{safe[: MAX_NAME - 11]}-{digest}"
    return safe
