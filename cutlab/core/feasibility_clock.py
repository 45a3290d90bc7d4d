"""Time to feasibility: the first training step from which the smoothed constraints stay met until the end.

Minibatch constraint values are noisy, so the check runs on an exponential moving average (``smoothing`` = 0.95,
about the last 20 steps: with 0.9 one noisy minibatch near the end of the embedded demo restarted its streak at
step 180 of 180) with the verdict's rule (cutlab.core.evaluation): every active constraint within ``tolerance`` of
its right-hand side, plus the run's resilience slack for ``within_slack``.

The average is taken of the *log* layer losses, so the smoothed ratio ℓ_l / ℓ_{l−1} is the geometric mean of the
minibatch ratios, whatever the loss's scale. An average of the losses themselves is dominated by the first steps,
where losses are orders of magnitude larger and the untrained layers already descend: on a DUST L = 9 run on UCSD
Ped2 it read met at every one of 60 steps while the last five minibatches missed layer 8 by up to 49 %.
"""

from __future__ import annotations

import torch

from cutlab.core.evaluation import misses
from cutlab.core.constraints import Constraints

_SMALLEST = torch.finfo(torch.float64).tiny  # a loss of exactly 0 stays finite in log space


def _log(losses: torch.Tensor) -> torch.Tensor:
    return losses.detach().cpu().double().clamp_min(_SMALLEST).log()


class FeasibilityClock:
    """Feed it every step; ``since`` / ``strictly_since`` are the first steps of the current met streak (None: not met)."""

    def __init__(self, constraints: Constraints, tolerance: float, smoothing: float = 0.95) -> None:
        self.constraints = constraints
        self.tolerance = tolerance
        self.smoothing = smoothing
        self.log_smoothed: torch.Tensor | None = None
        self.since: int | None = None
        self.strictly_since: int | None = None

    @property
    def smoothed(self) -> torch.Tensor | None:
        """The smoothed layer losses [L+1]: the geometric moving average of the minibatch losses."""
        return None if self.log_smoothed is None else self.log_smoothed.exp()

    def update(self, step: int, layer_losses: torch.Tensor, slacks: torch.Tensor) -> tuple[bool, bool]:
        """(met within slack, met strictly) for the smoothed losses after ``step``."""
        logs = _log(layer_losses)
        self.log_smoothed = logs if self.log_smoothed is None else \
            self.smoothing * self.log_smoothed + (1.0 - self.smoothing) * logs
        missed, violated = misses(self.constraints, self.smoothed, slacks, self.tolerance)
        strictly, within = not bool(missed.any()), not bool(violated.any())
        self.since = (self.since if self.since is not None else step) if within else None
        self.strictly_since = (self.strictly_since if self.strictly_since is not None else step) if strictly else None
        return within, strictly

    def state_dict(self) -> dict:
        return {"log_smoothed": self.log_smoothed, "since": self.since, "strictly_since": self.strictly_since}

    def load_state_dict(self, state: dict) -> None:
        if "log_smoothed" in state:
            self.log_smoothed = state["log_smoothed"]
        else:  # a checkpoint from before the geometric average: carry on from the log of its arithmetic one
            self.log_smoothed = None if state["smoothed"] is None else _log(state["smoothed"])
        self.since, self.strictly_since = state["since"], state["strictly_since"]
