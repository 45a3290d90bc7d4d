"""What code and machine each run came from (its provenance.json), said once in the report where the runs differ.

A table row compares runs as seeds or trials of one setting; runs trained by other commits of cutlab, with
uncommitted changes, or on another device may differ for that reason alone, so the report names it rather than
mixing them silently. Records without a provenance.json (written before it existed) are counted apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from cutlab.run.records import PROVENANCE, not_a_file


def read_provenance(path) -> dict | None:
    """The run folder ``path``'s provenance.json; None where it is absent, unreadable or not a regular file."""
    if not_a_file(Path(path) / PROVENANCE):  # a link or a FIFO (analysis.record_files)
        return None
    try:
        data = json.loads((Path(path) / PROVENANCE).read_text())
    except (OSError, ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def provenance_line(runs: pd.DataFrame) -> str | None:
    """One sentence naming the code versions and devices of ``runs`` (complete runs, each with its provenance.json
    as read by analysis.collect) where they are not all one; None where every run with a record came from one clean
    commit on one device."""
    records = [record if isinstance(record, dict) else None for record in runs["provenance"]]
    known = [r for r in records if r is not None]
    commits = sorted({str(r.get("git_commit"))[:7] for r in known if r.get("git_commit")})
    dirty = sum(1 for r in known if r.get("git_dirty") is True)
    versions = sorted({str((r.get("versions") or {}).get("cutlab")) for r in known
                       if isinstance(r.get("versions"), dict) and (r.get("versions") or {}).get("cutlab")})
    devices = sorted({str(r.get("device")) for r in known if r.get("device")})
    if len(commits) <= 1 and not dirty and len(versions) <= 1 and len(devices) <= 1:
        return None
    parts = [f"{len(commits)} git commit{'s' if len(commits) != 1 else ''} ({', '.join(commits)})"]
    if dirty:
        parts.append(f"{dirty} of {len(known)} with uncommitted changes")
    if len(versions) > 1:
        parts.append(f"cutlab {', '.join(versions)}")
    if len(devices) > 1:
        parts.append(f"devices {', '.join(devices)}")
    missing = len(records) - len(known)
    unknown = f"; {missing} without a {PROVENANCE}" if missing else ""
    return (f"Code and machines: the complete runs come from {'; '.join(parts)}{unknown}. Runs of one table row "
            "are compared whatever code trained them: see each run's provenance.json where this matters.")
