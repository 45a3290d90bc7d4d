"""Algorithm 1: primal-dual training of the descent-constrained problem (P-CUT), and ERM as its special case.

The constraints g(theta) <= 0 (the reference constraint on l_0 and the descent constraints, in the paper's
difference form or a scale-free one) are ``cutlab.core.constraints.Constraints``. The Lagrangian is
``Lambda(theta, lambda) = l_L + sum_l lambda_l g_l`` with lambda >= 0. The primal step descends on Lambda (any torch
optimiser, Adam in the paper); the dual step *ascends* on lambda with its own optimiser (dLambda/dlambda_l = g_l;
Adam in the paper, Algorithm 1) and projects onto lambda >= 0.

Dual updates (``DualSettings.update``): ``simultaneous`` (Algorithm 1) steps both players on the same forward
pass; ``alternating`` first steps lambda on that pass's constraint values, then the primal player on the
Lagrangian with the new multipliers (Cooper's AlternatingDualPrimalOptimizer; no extra forward pass).

Augmented Lagrangian (``DualSettings.penalty`` rho > 0; Nocedal & Wright eq. 17.65, Cooper's AugmentedLagrangian):
the primal step descends on ``l_L + sum_l [relu(lambda_l + rho g_l)^2 - lambda_l^2] / (2 rho)``, whose gradient is
``relu(lambda_l + rho g_l)`` times that of g_l: a violated constraint pushes at once, before its multiplier has grown,
and a met one by less than lambda_l. The dual step is unchanged (ascent on lambda^T g). rho = 0 is the Lagrangian;
the primal warm-up (lambda frozen at 0) leaves the penalty out too, so it trains the objective alone.

Resilient relaxation (Hounie et al. 2023; paper eq. 35-38) replaces g <= 0 by g <= u with a cost (c/2)||u||^2:
- ``slack``: explicit slacks u >= 0, descended on (c u - lambda) while lambda ascends on (g - u);
  resilience restarts set u to 0 at every epoch end (paper App. B.2).
- ``weight_decay``: the slacks eliminated (u* = lambda / c): the dual gradient is g - lambda/c, i.e.
  Adam(maximize=True, weight_decay=1/c) on lambda.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from cutlab.core.constraints import Constraints, value_with_gradient_of
from cutlab.core.nupi import NuPI
from cutlab.core.errors import NOT_FINITE_AS_INITIALISED, CutlabError, NonFiniteLoss

Resilience = Literal["off", "slack", "weight_decay"]
Cadence = Literal["batch", "epoch"]
DualOptimizer = Literal["adam", "sgd", "nupi"]
DualUpdate = Literal["simultaneous", "alternating"]
DUAL_OPTIMIZERS = ("adam", "sgd", "nupi")
DUAL_UPDATES = ("simultaneous", "alternating")
SMALLEST_C = float(torch.finfo(torch.float32).tiny)  # the least resilience c whose 1/c is a finite float32
LARGEST_C = float(torch.finfo(torch.float32).max)   # c must be a finite float32 too


@dataclass(frozen=True)
class DualSettings:
    """How the multipliers (and slacks) move. ``resilience_c`` is c in (c/2)||u||^2; ignored when off."""

    lr: float
    resilience: Resilience = "off"
    resilience_c: float = 1.0
    slack_lr: float | None = None  # defaults to lr
    cadence: Cadence = "batch"
    resilience_restarts: bool = True
    optimizer: DualOptimizer = "adam"  # the paper: Adam; sgd = plain projected gradient ascent; nupi (cutlab.core.nupi)
    kappa_p: float = 0.0  # nupi's proportional gain (0 = sgd)
    kappa_i: float = 1.0  # nupi's integral gain
    nu: float = 0.0       # nupi's EMA coefficient of the error, in [0, 1)
    update: DualUpdate = "simultaneous"  # Algorithm 1; alternating: dual step first, primal on the new multipliers
    dual_restarts: bool = False  # a multiplier whose constraint is met is reset to 0 with its optimiser state
    penalty: float = 0.0  # rho of the augmented Lagrangian; 0 = the Lagrangian (Algorithm 1)

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise CutlabError(f"train.dual_lr must be > 0, got {self.lr}")
        if self.resilience not in ("off", "slack", "weight_decay"):
            raise CutlabError(f"train.resilience must be off, slack or weight_decay, got {self.resilience!r}")
        if self.resilience != "off" and not SMALLEST_C <= self.resilience_c < LARGEST_C:
            # lambda and u are float32: a smaller c rounds to 0 there, so the slack lambda / c (App. A.5, below (36)) is
            # NaN or inf; a larger one is inf there, and the slack's gradient c u - lambda NaN from its first step
            # (inf * 0)
            raise CutlabError(f"train.resilience_c must lie in [{SMALLEST_C:.3g}, {LARGEST_C:.3g}) with resilience="
                              f"{self.resilience}, got {self.resilience_c:g} (use resilience=off for none)")
        if self.cadence not in ("batch", "epoch"):
            raise CutlabError(f"train.dual_cadence must be batch or epoch, got {self.cadence!r}")
        if self.optimizer not in DUAL_OPTIMIZERS:
            raise CutlabError(f"train.dual_optimizer must be one of {', '.join(DUAL_OPTIMIZERS)}, got {self.optimizer!r}; "
                              "e.g. train.dual_optimizer=sgd")
        for key, value in (("kappa_p", self.kappa_p), ("kappa_i", self.kappa_i)):
            if not value >= 0:
                raise CutlabError(f"train.{key} must be >= 0, got {value}; e.g. train.{key}=1.0")
        if not 0.0 <= self.nu < 1.0:
            raise CutlabError(f"train.nu must lie in [0, 1), got {self.nu}; e.g. train.nu=0.0")
        if self.update not in DUAL_UPDATES:
            raise CutlabError(f"train.dual_update must be one of {', '.join(DUAL_UPDATES)}, got {self.update!r}; "
                              "e.g. train.dual_update=alternating")
        if self.update == "alternating" and self.cadence != "batch":
            raise CutlabError("train.dual_update=alternating needs train.dual_cadence=batch (an epoch-cadence dual "
                              "step has no primal step of its own to precede)")

        for key, value in (("dual_restarts", self.dual_restarts), ("resilience_restarts", self.resilience_restarts)):
            if not isinstance(value, bool):  # a string such as 'maybe' would read as true
                raise CutlabError(f"train.{key} must be true or false, got {value!r}; e.g. train.{key}=false")
        if self.dual_restarts and self.optimizer == "adam":
            # restarts need a per-multiplier state: zeroing a restarted multiplier's Adam moments leaves its bias
            # correction that of an old Adam, so its first step after a restart is about 3 times a fresh Adam's
            raise CutlabError("train.dual_restarts=true is not supported with train.dual_optimizer=adam (torch's Adam "
                              "keeps one step count for all multipliers, so a restarted one would not move as a fresh "
                              "Adam); use train.dual_optimizer=sgd or nupi with restarts, or train.dual_restarts=false")
        if self.slack_lr is not None and not self.slack_lr > 0:
            raise CutlabError(f"train.slack_lr must be > 0 or null (= train.dual_lr), got {self.slack_lr}; "
                              "e.g. train.slack_lr=null")
        if not self.penalty >= 0:
            raise CutlabError(f"train.penalty must be >= 0, got {self.penalty}; e.g. train.penalty=10 (0 = off)")
        if self.penalty and self.resilience != "off":
            raise CutlabError(f"train.penalty={self.penalty} augments strict constraints, and train.resilience="
                              f"{self.resilience} relaxes them; use train.resilience=off or train.penalty=0")

    def check_trainable(self) -> None:
        """Refuse, before training, a combination that cannot do what it says. Not a config check: a run recorded
        with it before this rule is still skipped as complete and evaluated (cutlab-eval)."""
        if self.cadence == "epoch" and self.resilience == "slack" and self.resilience_restarts:
            # the slack's one step an epoch comes at the epoch's end, just before its restart: it would never relax
            # a constraint in training, while the verdict allowed the slack lambda / c all the same
            raise CutlabError("train.dual_cadence=epoch with train.resilience=slack and train.resilience_restarts=true "
                              "restarts the slack right after its only step of the epoch, so it never relaxes anything; "
                              "set train.resilience_restarts=false, train.resilience=weight_decay (or off), or "
                              "train.dual_cadence=batch")
        if self.optimizer == "nupi" and self.kappa_p == 0 and self.kappa_i == 0:  # lr (kappa_i e + kappa_p de) = 0
            raise CutlabError("train.kappa_p=0 and train.kappa_i=0 make every nuPI step 0, so the multipliers never "
                              "leave 0; set train.kappa_i=1.0 (plain ascent) or a train.kappa_p > 0")

    def unused(self) -> list[str]:
        """``key=value`` of each setting given away from its neutral value that this combination never reads (a
        search tuning it would spend its trials on nothing)."""
        unread = [f"train.{key}={value:g} (read by train.dual_optimizer=nupi only)"
                  for key, value, neutral in (("kappa_p", self.kappa_p, 0.0), ("kappa_i", self.kappa_i, 1.0),
                                              ("nu", self.nu, 0.0)) if value != neutral and self.optimizer != "nupi"]
        if self.optimizer == "nupi" and self.kappa_p == 0 and self.nu != 0:  # nu smooths the proportional term's error
            unread.append(f"train.nu={self.nu:g} (read by nuPI's proportional term only: a train.kappa_p > 0)")
        slack_only = [("slack_lr", f"{self.slack_lr:g}") if self.slack_lr is not None else None,
                      ("resilience_restarts", "false") if not self.resilience_restarts else None]
        return unread + [f"train.{key}={value} (read by train.resilience=slack only)"
                         for key, value in filter(None, slack_only) if self.resilience != "slack"]

    @classmethod
    def of(cls, train) -> "DualSettings":
        """The dual settings of a run's ``train`` config section (every combination rule checked on the way)."""
        return cls(
            lr=train.dual_lr, resilience=train.resilience, resilience_c=train.resilience_c, slack_lr=train.slack_lr,
            cadence=train.dual_cadence, resilience_restarts=train.resilience_restarts,
            optimizer=train.dual_optimizer, kappa_p=train.kappa_p, kappa_i=train.kappa_i, nu=train.nu,
            update=train.dual_update, dual_restarts=train.dual_restarts, penalty=train.penalty,
        )

    def make_optimizer(self, multipliers: torch.Tensor) -> torch.optim.Optimizer:
        """The dual optimiser: ascent (maximize=True) on lambda; weight decay 1/c is the resilient dual's -lambda/c."""
        decay = 1.0 / self.resilience_c if self.resilience == "weight_decay" else 0.0
        if self.optimizer == "adam":
            return torch.optim.Adam([multipliers], lr=self.lr, maximize=True, weight_decay=decay)
        if self.optimizer == "sgd":
            return torch.optim.SGD([multipliers], lr=self.lr, maximize=True, weight_decay=decay)
        return NuPI([multipliers], lr=self.lr, kappa_p=self.kappa_p, kappa_i=self.kappa_i, nu=self.nu,
                    weight_decay=decay, maximize=True)


@dataclass
class StepResult:
    """What one primal(-dual) step saw: everything the history and W&B record, detached."""

    layer_losses: torch.Tensor
    constraint_values: torch.Tensor
    multipliers: torch.Tensor
    slacks: torch.Tensor
    lagrangian: float
    grad_norm: float


class PrimalDual:
    """One primal and (optionally) one dual update per minibatch. ``constraints=None`` is ERM: minimise l_L.

    The multipliers and slacks are plain tensors updated by their own optimisers, so the state a checkpoint
    needs is ``state_dict()`` of this object plus the primal optimiser and the model.
    """

    def __init__(self, parameters: list[torch.nn.Parameter], primal_optimizer: torch.optim.Optimizer, layers: int,
                 constraints: Constraints | None = None, dual: DualSettings | None = None,
                 grad_clip: float | None = None) -> None:
        if constraints is not None and dual is None:
            raise CutlabError("constrained training needs dual settings (train.dual_lr, ...)")
        self.parameters = list(parameters)
        self.primal_optimizer = primal_optimizer
        self.constraints = constraints
        self.dual = dual
        self.grad_clip = grad_clip
        self.active = constraints.active_mask(layers) if constraints else torch.zeros(layers, dtype=torch.bool)
        self.multipliers = torch.zeros(layers)
        self.slacks = torch.zeros(layers)
        self.multipliers.grad = torch.zeros(layers)
        self.slacks.grad = torch.zeros(layers)
        self.dual_optimizer: torch.optim.Optimizer | None = None
        self.slack_optimizer: torch.optim.Optimizer | None = None
        if constraints is not None and dual is not None:
            self.dual_optimizer = dual.make_optimizer(self.multipliers)
            if dual.resilience == "slack":
                self.slack_optimizer = torch.optim.SGD([self.slacks], lr=dual.lr if dual.slack_lr is None else dual.slack_lr)
        self._epoch_sum = torch.zeros(layers)
        self._epoch_batches = 0

    @property
    def constrained(self) -> bool:
        return self.constraints is not None

    def layers_in_gradient(self, dual_active: bool = True) -> list[bool]:
        """Which layers' losses enter the Lagrangian's gradient at the current multipliers, one flag per layer.

        dLambda/dl_l = [l = L] + lambda_l - (1 - alpha) lambda_{l+1} (the second term only where l_l is live in g_{l+1}):
        a layer whose multipliers lambda_l and lambda_{l+1} are both 0 gets an exact zero, and back-propagating
        it (its readout and loss: 2 of the step's matrix products per layer) changes no gradient. The Trainer
        detaches such layers' outputs, as it does for ERM (only l_L); lambda = 0 holds through the primal
        warm-up and for every satisfied constraint whose multiplier was projected back to 0.
        Exact as long as every trained parameter reaches Phi_L (true of every model here: the readout is
        shared), so no parameter's gradient turns from zero into None. With alternating updates the multipliers
        change between the forward pass and the backward, so every layer is kept while the dual is active.
        """
        layers = len(self.multipliers)
        if self.constraints is None:
            return [layer == layers - 1 for layer in range(layers)]
        if dual_active and self.dual.update == "alternating" and self.dual.cadence == "batch":
            return [True] * layers
        if dual_active and self.dual.penalty:  # a violated constraint pushes at lambda = 0 too
            return [True] * layers
        nonzero = (self.multipliers != 0).tolist()
        live = self.constraints.prev_is_live
        return [layer == layers - 1 or nonzero[layer] or (live(layer) and nonzero[layer + 1])
                for layer in range(layers)]

    def effective_slacks(self) -> torch.Tensor:
        """The relaxation each constraint is allowed: the optimal slack u* = lambda / c for the current
        multipliers in both resilient forms (the slack variables themselves are zeroed by restarts), else 0."""
        if self.dual is None or self.dual.resilience == "off":
            return torch.zeros_like(self.slacks)
        return self.multipliers / self.dual.resilience_c

    @property
    def uses_local_losses(self) -> bool:
        """Whether :meth:`step` wants each block's loss from its detached input (train.detach_prev=local or
        train.constraint_gradient=block or layerwise)."""
        return self.constraints is not None and (self.constraints.detach_prev == "local"
                                                 or self.constraints.gradient != "full")

    def step(self, loss_matrix: torch.Tensor, dual_active: bool,
             local_loss_matrix: torch.Tensor | None = None) -> StepResult:
        """Primal step on the Lagrangian of one minibatch; dual step too when ``dual_active`` and cadence is batch.

        ``dual_active=False`` is the primal warm-up: lambda stays where it is (0 at the start).
        ``local_loss_matrix``: the loss matrix of LayerwiseModel.unroll_local's block outputs (Constraints.values).
        """
        layer_losses = loss_matrix.mean(dim=0)
        if not torch.isfinite(layer_losses).all():
            bad = int((~torch.isfinite(layer_losses)).nonzero()[0])
            if not self.primal_optimizer.state:  # no step has changed the parameters yet
                raise NonFiniteLoss(f"the loss of layer {bad} is {layer_losses[bad].item()} before any training step: "
                                    f"{NOT_FINITE_AS_INITIALISED}")
            raise NonFiniteLoss(f"the loss of layer {bad} became {layer_losses[bad].item()}; {self._divergence_fix()}")
        objective = layer_losses[-1]
        if self.constraints is not None:
            local = local_loss_matrix.mean(dim=0) if local_loss_matrix is not None else None
            if self.constraints.gradient == "layerwise" and local is not None:  # l_L trains block L alone
                objective = value_with_gradient_of(objective, local[-1])
            values = self.constraints.values(layer_losses, local) * self.active.to(layer_losses.device)
        else:
            values = torch.zeros_like(layer_losses)
        detached = values.detach().cpu()
        if self.constraints is not None:
            self._check_constraint_values(detached)  # on the host copy the record needs anyway: no device sync more
        dual_now = self.constrained and dual_active and self.dual.cadence == "batch"
        alternating = dual_now and self.dual.update == "alternating"
        if alternating:  # lambda steps on this pass's constraint values; the primal step then sees the new lambda
            self.dual_step(detached)
        lagrangian = objective
        if self.constraints is not None:
            lagrangian = objective + self._constraint_terms(values, dual_active)
        self.primal_optimizer.zero_grad(set_to_none=True)
        lagrangian.backward()
        grad_norm = self._clip_gradients()
        value = float(lagrangian.detach())  # one device sync a step: the guard and the record read it
        if not (math.isfinite(value) and math.isfinite(grad_norm)):
            # stop before the step: NaN weights must never reach a checkpoint (the next one may fall on this step)
            raise NonFiniteLoss(f"the Lagrangian ({value:g}) or its gradient (norm {grad_norm:g}) is not finite at "
                                f"finite layer losses; {self._divergence_fix()}")
        self.primal_optimizer.step()
        if dual_now and not alternating:
            self.dual_step(detached)
        elif self.constrained and dual_active and self.dual.cadence == "epoch":
            self._epoch_sum += detached
            self._epoch_batches += 1
        return StepResult(
            layer_losses=layer_losses.detach().cpu(),
            constraint_values=detached,
            multipliers=self.multipliers.clone(),
            slacks=self.slacks.clone(),
            lagrangian=value,
            grad_norm=grad_norm,
        )

    def _check_constraint_values(self, values: torch.Tensor) -> None:
        """Finite losses, a non-finite g_l (``values`` on the host): float32 overflowed in the constraint itself
        (l_0 - epsilon, l_0 / epsilon for an extreme epsilon; a ratio over a vanishing l_{l-1}), where lowering a
        learning rate changes nothing. Before any dual step, which would otherwise blame the dual lr."""
        bad = ~torch.isfinite(values)
        if not bool(bad.any()):
            return
        layer = int(bad.nonzero()[0])
        cause = (f"train.epsilon={self.constraints.epsilon:g} is beyond float32's range next to l_0; give a number "
                 "near l_0 of the untrained model (or train.epsilon=auto)") if layer == 0 else \
            f"l_{layer - 1} is too small to divide by; use train.constraint_form=difference"
        raise NonFiniteLoss(f"the constraint g_{layer} is {float(values[layer])} at finite layer losses "
                            f"(train.constraint_form={self.constraints.form}): {cause}")

    def _divergence_fix(self) -> str:
        """What to lower: when constrained, lambda_l g_l grows with the dual lr (and rho), as l_L with the primal."""
        rates = "the primal learning rate (train.lr=...)"
        if self.constrained:
            rates += " or the dual one (train.dual_lr=...)" + (" or train.penalty" if self.dual.penalty else "")
        return f"lower {rates}, set gradient clipping (train.grad_clip=1.0), or check the input data for NaNs"

    def _constraint_terms(self, values: torch.Tensor, dual_active: bool) -> torch.Tensor:
        """sum_l lambda_l g_l, or its augmented form when train.penalty > 0 and the dual is active (module docstring)."""
        multipliers = self.multipliers.to(values.device)
        rho = self.dual.penalty
        if not (rho and dual_active):
            return (multipliers * values).sum()
        return ((torch.relu(multipliers + rho * values) ** 2 - multipliers ** 2) / (2.0 * rho)).sum()

    def dual_step(self, constraint_values: torch.Tensor) -> None:
        """Simultaneous projected ascent on lambda (gradient g - u) and descent on u (gradient c u - lambda)."""
        assert self.dual_optimizer is not None and self.dual is not None
        old_multipliers, old_slacks = self.multipliers.clone(), self.slacks.clone()
        self.multipliers.grad.copy_((constraint_values - self.slacks) * self.active)
        if self.slack_optimizer is not None:
            self.slacks.grad.copy_((self.dual.resilience_c * self.slacks - old_multipliers) * self.active)
            self.slack_optimizer.step()
            self.slacks.clamp_(min=0.0)
        self.dual_optimizer.step()
        self.multipliers.clamp_(min=0.0)
        if not (torch.isfinite(self.multipliers).all() and torch.isfinite(self.slacks).all()):
            # the primal guard sees an infinite lambda only at the next step's Lagrangian; after the last step the
            # verdict would read lambda / c as an infinite slack (eq. 35-38) and call any miss slack_feasible
            self.multipliers.copy_(old_multipliers)
            self.slacks.copy_(old_slacks)
            raise NonFiniteLoss(
                f"the dual step sent a multiplier or slack to inf or NaN (from lambda {old_multipliers.tolist()}): "
                "the dual ascent diverged; lower the dual learning rate (train.dual_lr=...)")
        if self.dual.dual_restarts:
            self._restart_met(self.multipliers.grad <= 0)

    def _restart_met(self, met: torch.Tensor) -> None:
        """Dual restarts (Cooper issue #28): a met constraint's multiplier and its optimiser state (nuPI's xi; SGD
        has none) go back to 0, so momentum gathered while it was met cannot delay its reaction when violated."""
        if not bool(met.any()):
            return
        self.multipliers[met] = 0.0
        for state in self.dual_optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor) and value.shape == self.multipliers.shape:
                    value[met] = 0.0

    def end_epoch(self, dual_active: bool) -> None:
        """Epoch cadence: one dual step on the epoch's mean constraint values. Then the resilience restart."""
        if self.constrained and dual_active and self.dual.cadence == "epoch" and self._epoch_batches:
            self.dual_step(self._epoch_sum / self._epoch_batches)
        self._epoch_sum.zero_()
        self._epoch_batches = 0
        if self.slack_optimizer is not None and self.dual.resilience_restarts:
            self.slacks.zero_()

    def _clip_gradients(self) -> float:
        grads = [p.grad for p in self.parameters if p.grad is not None]
        if not grads:
            return 0.0
        if self.grad_clip:
            return float(torch.nn.utils.clip_grad_norm_(self.parameters, self.grad_clip))
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))

    def state_dict(self) -> dict:
        return {
            "multipliers": self.multipliers.clone(),
            "slacks": self.slacks.clone(),
            "dual_optimizer": self.dual_optimizer.state_dict() if self.dual_optimizer else None,
            "slack_optimizer": self.slack_optimizer.state_dict() if self.slack_optimizer else None,
            "epoch_sum": self._epoch_sum.clone(),
            "epoch_batches": self._epoch_batches,
        }

    def load_state_dict(self, state: dict) -> None:
        self.multipliers.copy_(state["multipliers"])
        self.slacks.copy_(state["slacks"])
        if self.dual_optimizer and state["dual_optimizer"]:
            self.dual_optimizer.load_state_dict(state["dual_optimizer"])
        if self.slack_optimizer and state["slack_optimizer"]:
            self.slack_optimizer.load_state_dict(state["slack_optimizer"])
        self._epoch_sum.copy_(state["epoch_sum"])
        self._epoch_batches = state["epoch_batches"]
