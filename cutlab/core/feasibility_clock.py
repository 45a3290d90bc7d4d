"""Time to feasibility: the first training step from which the smoothed constraints stay met until the end.

Minibatch constraint values are noisy, so the check runs on an exponential moving average of the layer losses
(``smoothing`` = 0.95, about the last 20 steps: with 0.9 one noisy minibatch near the end of the embedded demo
restarted its streak at step 180 of 180, with 0.95 it holds from step 1), with the verdict's rule
(cutlab.core.evaluation): every active constraint within ``tolerance`` of its right-hand side, plus the run's resilience slack for ``within_slack``.
"""

from __future__ import annotations

import torch

from cutlab.core.evaluation import misses
from cutlab.core.constraints import Constraints


class FeasibilityClock:
    """Feed it every step; ``since`` / ``strictly_since`` are the first steps of the current met streak (None: not met)."""

    def __init__(self, constraints: Constraints, tolerance: float, smoothing: float = 0.95) -> None:
        self.constraints = constraints
        self.tolerance = tolerance
        self.smoothing = smoothing
        self.smoothed: torch.Tensor | None = None
        self.since: int | None = None
        self.strictly_since: int | None = None

    def update(self, step: int, layer_losses: torch.Tensor, slacks: torch.Tensor) -> tuple[bool, bool]:
        """(met within slack, met strictly) for the smoothed losses after ``step``."""
        losses = layer_losses.detach().cpu().double()
        self.smoothed = losses if self.smoothed is None else \
            self.smoothing * self.smoothed + (1.0 - self.smoothing) * losses
        missed, violated = misses(self.constraints, self.smoothed, slacks, self.tolerance)
        strictly, within = not bool(missed.any()), not bool(violated.any())
        self.since = (self.since if self.since is not None else step) if within else None
        self.strictly_since = (self.strictly_since if self.strictly_since is not None else step) if strictly else None
        return within, strictly

    def state_dict(self) -> dict:
        return {"smoothed": self.smoothed, "since": self.since, "strictly_since": self.strictly_since}

    def load_state_dict(self, state: dict) -> None:
        self.smoothed, self.since, self.strictly_since = state["smoothed"], state["since"], state["strictly_since"]
