"""The step contract every layerwise model passes (video, ViT, text, causal LM): a few primal-dual steps, or
ERM steps, on one fixed batch lower what they optimise."""

from __future__ import annotations

import torch

from cutlab.core.constraints import Constraints
from cutlab.core.primal_dual import DualSettings, PrimalDual


def steps_on_a_fixed_batch(model, objective, inputs, target, constrained: bool, lr: float, alpha: float = 0.1,
                           steps: int = 3) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Mean layer losses [L+1] before and after ``steps`` steps, and whether the optimised quantity fell.

    The optimised quantity is l_L for ERM and the Lagrangian l_L + sum lambda_l g_l (at the final multipliers)
    when constrained; a constrained run may also just lower l_L while its multipliers grow.
    """
    parameters = [p for p in model.parameters() if p.requires_grad]
    constraints = Constraints(alpha=alpha, epsilon=None) if constrained else None
    dual = DualSettings(lr=0.01) if constrained else None
    trainer = PrimalDual(parameters, torch.optim.Adam(parameters, lr=lr), model.depth + 1, constraints, dual)
    with torch.no_grad():
        before = objective.loss_matrix(model(inputs), target).mean(0)
    for _ in range(steps):
        trainer.step(objective.loss_matrix(model(inputs), target), dual_active=True)
    with torch.no_grad():
        after = objective.loss_matrix(model(inputs), target).mean(0)

    def optimised(losses: torch.Tensor) -> torch.Tensor:
        return losses[-1] + (trainer.multipliers * constraints.values(losses)).sum() if constrained else losses[-1]

    return before, after, bool(optimised(after) < optimised(before) or after[-1] < before[-1])


def cutlab_env(runs, extra: dict | None = None) -> dict:
    """The environment of a test's ``python -m cutlab``: runs in ``runs``, cache and W&B files beside it."""
    import os

    from conftest import ROOT

    return {**os.environ, "CUTLAB_RUNS_DIR": str(runs), "CUTLAB_CACHE_DIR": str(runs.parent / "cache"),
            "WANDB_DIR": str(runs.parent), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(extra or {})}


def start_and_kill(args: list[str], run_dir, rows: int, timeout_s: float = 300, stop: str = "SIGKILL") -> None:
    """Start ``python -m cutlab ARGS`` and SIGKILL it (or send ``stop``) once ``run_dir`` has a checkpoint and
    ``rows`` history rows.

    The resume contract: the same command run again must end exactly where an uninterrupted run ends.
    """
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd

    from conftest import ROOT

    process = subprocess.Popen([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=cutlab_env(run_dir.parent),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout_s
    while not (run_dir / "checkpoint.pt").exists() or len(pd.read_csv(run_dir / "history.csv")) < rows:
        assert process.poll() is None and time.time() < deadline, "the run ended before it could be killed"
        time.sleep(0.02)
    process.send_signal(getattr(signal, stop))
    process.wait()


def assert_same_records(resumed, reference) -> None:
    """Two runs ended identically: every history.csv row (step times aside) and every eval.csv value."""
    import pandas as pd

    drop_time = lambda frame: frame.drop(columns=["step_time"])
    pd.testing.assert_frame_equal(drop_time(pd.read_csv(resumed / "history.csv")),
                                  drop_time(pd.read_csv(reference / "history.csv")))
    pd.testing.assert_frame_equal(pd.read_csv(resumed / "eval.csv"), pd.read_csv(reference / "eval.csv"))
