"""Which training iterate a run evaluates: the last (the paper's Algorithm 1) or the best one checked on validation.

Primal-dual training of a non-convex problem carries no guarantee that its *last* primal iterate is feasible: the
multipliers oscillate around their optimum and the primal iterates with them, and a minibatch estimate of l_0 can
swing by a factor of three between steps. Cotter, Jiang & Sridharan (ALT 2019, "Two-player games for efficient
non-convex constrained optimization") choose among the iterates instead, and TF Constrained Optimization's
``find_best_candidate_index`` ranks candidates that way: a feasible one before any infeasible one, then the lower
objective; among infeasible ones the smaller largest violation. ``eval.iterate=best`` does this on the validation
split at gamma_train, every ``eval.check_every_steps`` steps and at the end, so the test split never chooses.
For ERM every candidate counts as feasible, so the rule is early stopping on validation l_L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from cutlab.core.evaluation import buffers_kept, misses
from cutlab.core.constraints import Constraints

ITERATES = ("last", "best")


@dataclass(frozen=True)
class Check:
    """One validation check of an iterate at gamma_train."""

    step: int
    layer_losses: list[float]
    strictly_feasible: bool
    largest_violation: float  # the largest relative violation (l_l - rhs_l) / rhs_l over the active constraints

    @property
    def rank(self) -> tuple:
        """Lower is better: feasible first, then the smaller largest violation (0 for feasible ones), then l_L."""
        return (not self.strictly_feasible, 0.0 if self.strictly_feasible else self.largest_violation,
                self.layer_losses[-1])

    def as_dict(self) -> dict:
        return {"step": self.step, "layer_losses": self.layer_losses, "strictly_feasible": self.strictly_feasible,
                "largest_violation": self.largest_violation}


class IterateSelector:
    """Checks iterates on validation and keeps a copy of the best one's parameters (and its multipliers' slacks).

    ``validation_losses()`` returns the mean validation loss per layer [L+1] at gamma_train. Buffers a forward pass
    updates (DUST's power-iteration vectors) are put back after each check, so checking does not change training.
    """

    def __init__(self, model: torch.nn.Module, constraints: Constraints | None, tolerance: float,
                 validation_losses: Callable[[], torch.Tensor]) -> None:
        self.model = model
        self.constraints = constraints  # None: ERM, every candidate feasible
        self.tolerance = tolerance
        self.validation_losses = validation_losses
        self.checks: list[Check] = []
        self.best: Check | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_slacks: torch.Tensor | None = None

    def check(self, step: int, slacks: torch.Tensor) -> Check:
        """Validate the current iterate after ``step``; keep it when it ranks above the best so far (ties: earlier)."""
        with buffers_kept(self.model):
            losses = self.validation_losses().detach().cpu().double()
        check = self._judge(step, losses)
        self.checks.append(check)
        if self.best is None or check.rank < self.best.rank:
            self.best = check
            self.best_state = {name: value.detach().cpu().clone() for name, value in self.model.state_dict().items()}
            self.best_slacks = slacks.detach().cpu().clone()
        return check

    def _judge(self, step: int, losses: torch.Tensor) -> Check:
        if self.constraints is None:
            return Check(step, [float(v) for v in losses], True, 0.0)
        missed, _ = misses(self.constraints, losses, torch.zeros_like(losses), self.tolerance)
        active = self.constraints.active_mask(len(losses))
        violations = self.constraints.relative_violations(losses)[active]
        return Check(step, [float(v) for v in losses], not bool(missed.any()), float(violations.max()))

    def checked(self, step: int) -> bool:
        """Whether the iterate after ``step`` was checked already (a resumed run's checks come from its checkpoint)."""
        return bool(self.checks) and self.checks[-1].step == step

    def restore_best(self) -> None:
        """Load the best iterate's parameters into the model (a no-op before any check)."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)

    def summary(self, every_steps: int) -> dict:
        """The run record's ``iterate`` entry: the selected step and every check that chose it."""
        return {"mode": "best", "check_every_steps": every_steps,
                "selected_step": self.best.step if self.best else None,
                "checks": [check.as_dict() for check in self.checks]}

    def state_dict(self) -> dict:
        return {"checks": [check.as_dict() for check in self.checks],
                "best_step": self.best.step if self.best else None,
                "best_state": self.best_state, "best_slacks": self.best_slacks}

    def load_state_dict(self, state: dict) -> None:
        self.checks = [Check(**check) for check in state["checks"]]
        self.best = next((c for c in self.checks if c.step == state["best_step"]), None)
        self.best_state, self.best_slacks = state["best_state"], state["best_slacks"]
