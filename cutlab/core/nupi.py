"""nuPI: a PI controller on the Lagrange multipliers (Sohrabi et al., "On PI controllers for updating Lagrange
multipliers in constrained optimization", ICML 2024).

With error e_t = dLambda/dlambda = g_t (ascent), the update is

    xi_t          = nu xi_{t-1} + (1 - nu) e_t          (xi_{-1} = 0)
    lambda_{t+1}  = lambda_t + lr (kappa_i e_t + kappa_p (xi_t - xi_{t-1}))

kappa_p = 0 is plain gradient ascent (SGD) whatever nu; kappa_p = kappa_i = 1, nu = 0 is optimistic ascent.
The proportional term damps the oscillation and overshoot that integral-only (SGD) multipliers show.

Written here rather than taken from Cooper at run time, so the core needs only torch; tests check it against
``cooper.optim.nuPI`` (its ``init_type=ZEROS``, which is the recursion above) step for step.
"""

from __future__ import annotations

import torch


class NuPI(torch.optim.Optimizer):
    """nuPI as a torch optimiser (``maximize=True`` for multipliers); its state ``xi`` checkpoints with it."""

    def __init__(self, params, lr: float, kappa_p: float = 0.0, kappa_i: float = 1.0, nu: float = 0.0,
                 weight_decay: float = 0.0, maximize: bool = False) -> None:
        defaults = dict(lr=lr, kappa_p=kappa_p, kappa_i=kappa_i, nu=nu, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                error = param.grad.detach()
                update = group["kappa_i"] * error
                if group["kappa_p"] != 0.0:
                    state = self.state[param]
                    previous = state.get("xi", torch.zeros_like(param))
                    current = group["nu"] * previous + (1.0 - group["nu"]) * error
                    update = update + group["kappa_p"] * (current - previous)
                    state["xi"] = current
                if group["weight_decay"]:  # decoupled, as Cooper: the resilient dual's -lambda/c term
                    update = update - group["weight_decay"] * param if group["maximize"] else \
                        update + group["weight_decay"] * param
                param.add_(update, alpha=group["lr"] if group["maximize"] else -group["lr"])
        return None
