"""Layerwise models: each returns its L+1 representations Phi_0 ... Phi_L (paper Sec. 2, eqs. (1)-(2))."""

from cutlab.core.models.base import LayerwiseModel
from cutlab.core.models.dust import DUST
from cutlab.core.models.ut import UT
from cutlab.core.models.vit import ViTDenoiser  # imports transformers only when a checkpoint is loaded

__all__ = ["LayerwiseModel", "DUST", "UT", "ViTDenoiser"]
