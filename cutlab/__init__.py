"""cutlab: transformers whose layers are constrained to descend, trained primal-dual.

Reproduces "A Constrained Optimization Perspective of Unrolled Transformers" (ICML 2026).
The core (``cutlab.core``) is plain torch/numpy; the Hydra app, records and W&B live beside it.
"""

__version__ = "0.1.0"

from cutlab import checkout as _checkout

_checkout.install()  # a checkout reads its own conf/, sweeps/, ... (cutlab/checkout.py)
