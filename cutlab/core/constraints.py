"""The descent constraints of (P-CUT): their values in each form, right-hand sides, slacks and violations.

Sign convention (as in Cooper): a constraint value ``g <= 0`` is satisfied. For layer losses
l_0 ... l_L (minibatch means of the loss matrix's columns):

    g_0 = l_0 - epsilon                  reference constraint: stops the model inflating l_0 to make descent easy
                                         (the paper's Sec. 4, "Training")
    g_l = l_l - (1 - alpha) l_{l-1}      descent constraints, l = 1 ... L (the paper's eq. (4))

The same constraints can be written in a scale-free form (``form``), as the authors' earlier unrolling code does:

    ratio:      g_0 = l_0 / epsilon - 1,          g_l = l_l / l_{l-1} - (1 - alpha)
    log_ratio:  g_0 = log l_0 - log epsilon,       g_l = log l_l - log l_{l-1} - log(1 - alpha)

Each has the same feasible set as the difference form (for positive losses), but its values, and so the dual
step, do not depend on the loss's units: a dual learning rate means the same for pixels and for cross-entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Literal

import torch

from cutlab.core.errors import CutlabError

ConstraintForm = Literal["difference", "ratio", "log_ratio"]
CONSTRAINT_FORMS = ("difference", "ratio", "log_ratio")
#: train.detach_prev: how l_{l-1} in g_l reaches the gradient. true: not at all; false (the paper): through every
#: parameter it depends on; "first": as false except l_0, which stays answerable only to its reference constraint;
#: "local": only through block l-1's own computation (its input detached; LayerwiseModel.unroll_local), so a layer
#: whose successor cannot descend further is asked to do less itself, instead of every earlier block undoing its work
DetachPrev = bool | Literal["first", "local"]
DETACH_PREV_WORDS = ("first", "local")
#: train.constraint_gradient: which blocks l_l in g_l trains. "full" (the paper): every block up to l, so a later
#: constraint may reshape an earlier block's output at that block's own descent; "block": block l alone (its input
#: detached; LayerwiseModel.unroll_local), so each block answers only for its own step of descent; "layerwise": as
#: block, and once the multipliers are active the objective l_L trains block L alone as well, so no earlier block is
#: pulled away from its own descent towards a better input for the last one
ConstraintGradient = Literal["full", "block", "layerwise"]
CONSTRAINT_GRADIENTS = ("full", "block", "layerwise")


def is_detach_prev(value: object) -> bool:
    """Whether ``value`` is one of DetachPrev's values (true, false, "first" or "local")."""
    return isinstance(value, bool) or value in DETACH_PREV_WORDS


def check_detach_prev(value: object) -> None:
    if not is_detach_prev(value):
        raise CutlabError(f"train.detach_prev must be true, false, first or local, got {value!r}; "
                          "e.g. train.detach_prev=local")


def value_with_gradient_of(value: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``value``'s numbers with ``source``'s gradient: source is the same losses from each block re-run on its detached
    input (LayerwiseModel.unroll_local), equal in value, so only the gradient path changes."""
    return value.detach() + (source - source.detach())


def chain_bound(epsilon: float | None, alpha: float, depth: int) -> float | None:
    """epsilon (1 - alpha)^L: chaining the descent constraints l_l <= (1 - alpha) l_{l-1} (the paper's eq. (4)) down
    to the reference l_0 <= epsilon (its Sec. 4) bounds the last layer's loss, in every constraint form. Where the
    lowest l_L a model can reach lies above it, no model is feasible at any budget (the paper notes that the
    reference value makes constrained runs start higher than ERM's); None when the reference constraint is off."""
    return None if epsilon is None else float(epsilon) * (1.0 - float(alpha)) ** int(depth)


@dataclass(frozen=True)
class Constraints:
    """The descent constraints of (P-CUT). ``epsilon=None`` drops the reference constraint on l_0."""

    alpha: float
    epsilon: float | None = None
    detach_prev: DetachPrev = False  # stop gradients through l_{l-1} in g_l (DetachPrev; the paper does not)
    form: ConstraintForm = "difference"  # the paper's form; ratio / log_ratio are scale-free (module docstring)
    gradient: ConstraintGradient = "full"  # which blocks l_l in g_l trains (ConstraintGradient)
    # epsilon=auto found Phi_0 already equal to the target (UT's input at gamma 0, l_0 a round-off): no layer can
    # descend from it, so the verdict calls a run that is not strictly feasible degenerate, not infeasible
    reference_at_target: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise CutlabError(f"train.alpha must lie in (0, 1), got {self.alpha}; the paper's 1-alpha of 0.75 is alpha=0.25")
        # epsilon=auto measures 0 exactly where Phi_0 is the clean input itself (reference_at_target: degenerate)
        if self.epsilon is not None and (self.epsilon < 0 or self.epsilon == 0 and not self.reference_at_target):
            raise CutlabError(f"train.epsilon must be > 0 or null (off), got {self.epsilon}")
        check_detach_prev(self.detach_prev)
        if self.form not in CONSTRAINT_FORMS:
            raise CutlabError(f"train.constraint_form must be one of {', '.join(CONSTRAINT_FORMS)}, got {self.form!r}; "
                              "e.g. train.constraint_form=ratio")
        if self.gradient not in CONSTRAINT_GRADIENTS:
            raise CutlabError(f"train.constraint_gradient must be one of {', '.join(CONSTRAINT_GRADIENTS)}, got "
                              f"{self.gradient!r}; e.g. train.constraint_gradient=block")

    def values(self, layer_losses: torch.Tensor, local_losses: torch.Tensor | None = None) -> torch.Tensor:
        """Constraint values [L+1] from layer losses [L+1]; entry 0 is the reference constraint (0 when off).

        ``local_losses`` (detach_prev="local", gradient="block" or "layerwise"): the layer losses of
        LayerwiseModel.unroll_local's outputs. They carry the gradient of each l_{l-1} ("local") or l_l (the other two)
        in g_l while the values stay those of ``layer_losses``; without them (the primal warm-up, when every multiplier
        is 0) nothing reaches the gradient through l_{l-1}, as under true, and l_l reaches it through every block, as
        under "full".
        """
        previous = torch.stack([loss if self.prev_is_live(layer) else loss.detach()
                                for layer, loss in enumerate(layer_losses[:-1])])
        if self.detach_prev == "local" and local_losses is not None:  # l_{l-1} trains block l-1 alone
            previous = value_with_gradient_of(previous, local_losses[:-1])
        current = layer_losses[1:]
        if self.gradient != "full" and local_losses is not None:  # l_l trains block l alone
            current = value_with_gradient_of(current, local_losses[1:])
        factor = 1.0 - self.alpha
        difference = current - factor * previous
        if self.form == "difference":
            descent = difference
        else:
            # A minibatch on which layer l-1 reproduces the target (l_{l-1} = 0: a float32 cross-entropy underflows
            # to 0 once every sample's margin passes about 17) leaves no ratio to take; there g_l is the difference
            # form's l_l, which has the same sign (met only at l_l = 0), so one such batch neither stops the run nor
            # puts inf or NaN in the Lagrangian. (UT at gamma = 0, where l_0 is always 0, is refused before training.)
            nothing_before = previous <= 0
            safe_previous = torch.where(nothing_before, torch.ones_like(previous), previous)
            if self.form == "ratio":
                scaled = current / safe_previous - factor
            else:  # l_l = 0 is met by all it can be: log of the smallest positive float, not -inf (0 * -inf = NaN)
                tiny = torch.finfo(current.dtype).tiny
                scaled = torch.log(current.clamp_min(tiny)) - torch.log(safe_previous) - math.log(factor)
            descent = torch.where(nothing_before, difference, scaled)
        if self.epsilon is None:
            reference = torch.zeros_like(layer_losses[:1])
        elif self.form == "difference":
            reference = layer_losses[:1] - self.epsilon
        elif self.form == "ratio":
            reference = layer_losses[:1] / self.epsilon - 1.0
        else:
            reference = torch.log(layer_losses[:1].clamp_min(torch.finfo(layer_losses.dtype).tiny)) - math.log(self.epsilon)
        return torch.cat([reference, descent])

    def prev_is_live(self, layer: int) -> bool:
        """Whether l_layer, as computed by the full forward pass, reaches the gradient through g_{layer+1} (the
        constraint that divides by it). Under "local" it does not: its block's own copy (``local_losses``) does."""
        return self.detach_prev is False or (self.detach_prev == "first" and layer > 0)

    def last_layer_bound(self, depth: int) -> float | None:
        """The largest l_L the constraints allow together (None without the reference constraint): see chain_bound."""
        return chain_bound(self.epsilon, self.alpha, depth)

    def right_hand_sides(self, layer_losses: torch.Tensor) -> torch.Tensor:
        """Each constraint's bound in loss units, [L+1]: epsilon for l_0 (0 when off), (1 - alpha) l_{l-1} after."""
        reference = torch.tensor([self.epsilon if self.epsilon is not None else 0.0], dtype=layer_losses.dtype)
        return torch.cat([reference, (1.0 - self.alpha) * layer_losses[:-1].detach().cpu()])

    def relative_slacks(self, slacks: torch.Tensor, layer_losses: torch.Tensor) -> torch.Tensor:
        """A constraint's resilience slack u as a fraction of its right-hand side, in every form.

        g <= u allows l_l <= rhs_l (1 + s_l) with s = u / rhs (difference), u / (1 - alpha) (ratio; u for l_0),
        e^u - 1 (log_ratio). Where rhs is 0, s is inf when u > 0 (the slack is the whole bound), else 0.
        """
        slacks = slacks.detach().cpu().to(layer_losses.dtype)
        if self.form == "difference":
            rhs = self.right_hand_sides(layer_losses)
            relative = torch.where(rhs > 0, slacks / rhs.clamp_min(torch.finfo(rhs.dtype).tiny),
                                   torch.where(slacks > 0, torch.inf, 0.0))
        elif self.form == "ratio":
            scale = torch.full_like(slacks, 1.0 - self.alpha)
            scale[0] = 1.0
            relative = slacks / scale
        else:
            relative = torch.expm1(slacks)
        return relative

    def relative_violations(self, layer_losses: torch.Tensor) -> torch.Tensor:
        """(l_l - rhs_l) / rhs_l for every constraint, whatever the form: how far each misses its bound, as a
        fraction of it (<= 0: met). A zero right-hand side (l_{l-1} = 0) gives inf when l_l > 0, else 0."""
        losses = layer_losses.detach().cpu()
        rhs = self.right_hand_sides(losses)
        excess = losses - rhs
        return torch.where(rhs > 0, excess / rhs.clamp_min(torch.finfo(rhs.dtype).tiny),
                           torch.where(excess > 0, torch.inf, 0.0))

    def active_mask(self, layers: int) -> torch.Tensor:
        """Which of the L+1 constraint slots exist (slot 0 only when epsilon is set)."""
        mask = torch.ones(layers, dtype=torch.bool)
        mask[0] = self.epsilon is not None
        return mask
