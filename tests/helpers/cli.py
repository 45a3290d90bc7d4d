"""The command line as a test runs it: python -m cutlab from this checkout, and a folder's fingerprint."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

from conftest import ROOT
from helpers.contract import cutlab_env
from helpers.forked import run_python_m


def cutlab(args: list[str], runs: Path, timeout: float = 600, check: bool = True,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m cutlab ARGS`` from this checkout, with its runs, cache and W&B files under ``runs``' parent."""
    result = run_python_m("cutlab", args, ROOT, cutlab_env(runs, env), timeout)  # 1.2 s sooner: forked.py
    if check and result.returncode != 0:
        raise AssertionError(f"cutlab {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def start(args: list[str], runs: Path, log: Path) -> subprocess.Popen:
    """``python -m cutlab ARGS`` started in the background, its output in ``log``."""
    return subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=cutlab_env(runs),
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def wait_until(predicate, process: subprocess.Popen, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert process.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def as_another_run(run_dir: Path) -> Path:
    """``run_dir``, a copy of a run, given an identity of its own (provenance.json's run_uid): it stands for a run
    trained apart, not for a copy of the one it was copied from (which the analysis counts once: analysis.copies)."""
    record = run_dir / "provenance.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "run_uid": uuid.uuid4().hex}))
    return run_dir


def wandb_history(run_dir: Path) -> list[dict]:
    """The step records of an offline W&B run, read back without a server (``wandb leet inspect``)."""
    wandb = Path(sys.executable).parent / "wandb"
    out = subprocess.run([str(wandb), "leet", "inspect", "--json", str(run_dir)], capture_output=True, text=True,
                         timeout=120, check=True)
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


def folder_fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest() + str(p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}
