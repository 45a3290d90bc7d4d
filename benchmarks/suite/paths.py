"""The repository root (the benchmarks run the checkout they are in), and its data beside it.

The benchmarks read the real data and weights in ../shared, as `make bench` and the tests point cutlab at them
(an installed cutlab's own default is the per-user data folder); set CUTLAB_DATA_DIR / CUTLAB_MODELS_DIR for others.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("CUTLAB_DATA_DIR", str(ROOT.parent / "shared" / "data"))
os.environ.setdefault("CUTLAB_MODELS_DIR", str(ROOT.parent / "shared" / "models"))
