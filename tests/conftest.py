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
