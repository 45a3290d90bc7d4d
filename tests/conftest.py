"""Shared test fixtures: where ../shared lives, and a tiny video batch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PED2_FULL = SHARED / "data" / "ucsd_ped2" / "ped2_gray160_uint8.npz"
GOLDEN = ROOT / "tests" / "golden"
PED2_TINY = SHARED / "data" / "ucsd_ped2" / "ped2_gray160_tiny.npz"

# W&B and any cache stay inside the test's own folders; nothing reaches the network.
os.environ.setdefault("WANDB_SILENT", "true")
os.environ["HF_HUB_OFFLINE"] = "1"
# The real data and weights in ../shared beside the checkout, as the Makefile sets them (an installed cutlab's own
# default is the per-user data folder); subprocesses inherit them.
os.environ.setdefault("CUTLAB_DATA_DIR", str(SHARED / "data"))
os.environ.setdefault("CUTLAB_MODELS_DIR", str(SHARED / "models"))


def unavailable(reason: str) -> None:
    """Skip a test whose data or server is missing here; under CI (CI=true) fail instead, so that a green CI
    never hides a real-data or real-server test that did not run."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def require_shared(path: Path) -> Path:
    if not path.exists():
        unavailable(f"{path} is missing: the real data lives in ../shared beside the checkout")
    return path


@pytest.fixture
def ped2_tokens() -> torch.Tensor:
    """Two real Ped2 samples of 4 frames as [B, T, P, n] patch tokens in [0, 1] (the first 30 patch positions)."""
    import numpy as np

    from cutlab.core.data.video import to_patch_tokens

    clips = np.load(require_shared(PED2_TINY))
    frames = torch.from_numpy(np.stack([clips["training_01"][:4], clips["training_02"][:4]]))
    return to_patch_tokens(frames, patch=16)[:, :, :30].contiguous()


# ------------------------------------------------------------------ slow tests: a sample in every default run
SLOW_SAMPLE = pytest.StashKey[tuple]()  # (seed, the chosen test ids, how many slow tests were collected)
WORKERS_SLOW_SAMPLE = pytest.StashKey[tuple]()  # the same, as a pytest-xdist worker handed it to the controller


def pytest_addoption(parser):
    from helpers import slow_sample

    parser.addoption("--slow-sample", type=int, default=slow_sample.SIZE, metavar="N",
                     help="how many slow tests a run without -m includes, chosen by commit (0: none; "
                          "`-m 'slow or not slow'` runs them all)")


def pytest_collection_modifyitems(config, items):
    """Without -m: drop the slow tests but a sample (helpers/slow_sample.py); any -m expression decides alone."""
    from helpers import slow_sample

    slow = [item for item in items if item.get_closest_marker("slow")]
    if config.option.markexpr or not slow:
        return
    seed = slow_sample.seed(ROOT)
    chosen = slow_sample.choose([item.nodeid for item in slow], seed, config.getoption("--slow-sample"))
    dropped_ids = {item.nodeid for item in slow} - set(chosen)
    dropped = [item for item in slow if item.nodeid in dropped_ids]
    items[:] = [item for item in items if item.nodeid not in dropped_ids]
    config.hook.pytest_deselected(items=dropped)
    config.stash[SLOW_SAMPLE] = (seed, chosen, len(slow))


def pytest_collection_finish(session):
    if SLOW_SAMPLE not in session.config.stash:
        return
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: its controller prints the line at the end
        session.config.workeroutput["slow_sample"] = session.config.stash[SLOW_SAMPLE]
        return
    write_slow_sample_line(session.config, *session.config.stash[SLOW_SAMPLE])


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without xdist it is never called
def pytest_testnodedown(node, error):
    """pytest-xdist's controller collects nothing itself: it keeps the sample a worker chose (every worker chose the
    same one, or xdist stops the run)."""
    if "slow_sample" in getattr(node, "workeroutput", {}):
        node.config.stash[WORKERS_SLOW_SAMPLE] = tuple(node.workeroutput["slow_sample"])


def pytest_terminal_summary(terminalreporter, config):
    if WORKERS_SLOW_SAMPLE in config.stash:
        write_slow_sample_line(config, *config.stash[WORKERS_SLOW_SAMPLE])


def write_slow_sample_line(config, seed: str, chosen, total: int) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"slow tests: {len(chosen)} of {total} in this run (sample of {seed[:12]}; all of them: "
                            f"make test-all; this sample again: CUTLAB_SLOW_SEED={seed}): {', '.join(chosen) or 'none'}")
