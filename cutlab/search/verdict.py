"""What a finished trial tells the study besides its score: its feasibility, as Optuna constraints, and its record.

The sampler and ``Study.best_trial`` rank feasible trials first: Optuna 5 reads the constraint values a trial
carries (``Trial.set_constraint``, the successor of TPE's deprecated ``constraints_func``, with the same rule:
a trial is feasible when every value is <= 0). TPE puts infeasible trials below every feasible one, ordered by
their summed violation, and ``Study.best_trial`` returns the best feasible trial whenever one exists.

One value per active constraint of the paper's problem (ℓ_0 <= ε and ℓ_l <= (1 - α) ℓ_{l-1}, Eq. 4), measured
as the verdict measures it: the relative violation on validation at γ_train, minus the verdict's tolerance.
The values are the *strict* ones, without the resilience slack. So a ``slack_feasible`` trial (met only
through its slack u_l) is infeasible to Optuna, by exactly the part of its bound that the slack covered: it is
never ranked as feasible, yet it ranks above trials that miss by more. ``degenerate`` layers (ℓ_{l-1} = 0: no
model can descend from a perfect layer) have an infinite violation, recorded as ``DEGENERATE_VIOLATION`` so that
the value stays valid JSON for every storage and optuna-dashboard; such a trial is infeasible too. ERM
(``unconstrained``) has no constraint to meet: no values, so every ERM trial is feasible and the best is by score.
"""

from __future__ import annotations

import math

from cutlab.core.evaluation import SLACK_FEASIBLE, UNCONSTRAINED

#: a constraint with no finite relative violation (its right-hand side is 0): a miss of 1000 right-hand sides
DEGENERATE_VIOLATION = 1.0e3
#: the trial user attributes a complete trial takes from its run's summary.json (optuna-dashboard shows and filters
#: on them), each with the summary key it holds; trial_attrs adds ``run_dir``, the run's folder
ATTRS = {"verdict": "verdict", "metric": "metric", "validation": "selection_metric",
         "test_mean_metric": "test_mean_metric", "test_auc": "test_auc"}


def constraint_values(summary: dict) -> dict[str, float]:
    """``{"eps_l0": v, "descent_l1": v, ...}`` for a complete run's summary; {} for ERM. <= 0 means met strictly."""
    if summary.get("verdict") == UNCONSTRAINED:
        return {}
    feasibility = summary["feasibility"]
    tolerance = float(feasibility["tolerance"])
    values = {}
    for layer, violation in enumerate(feasibility["relative_violations"]):
        if layer == 0 and summary.get("epsilon") is None:
            continue  # no ε: there is no constraint on ℓ_0 (the slot is inactive)
        violation = float(violation)
        if math.isnan(violation) or math.isinf(violation):
            violation = DEGENERATE_VIOLATION
        name = "eps_l0" if layer == 0 else f"descent_l{layer}"
        values[name] = min(violation, DEGENERATE_VIOLATION) - tolerance
    return values


def trial_attrs(summary: dict, run_dir) -> dict:
    """The user attributes of a complete trial: its verdict and headline numbers (ATTRS), and its run folder."""
    return {name: summary.get(key) for name, key in ATTRS.items()} | {"run_dir": str(run_dir)}


def is_feasible(trial) -> bool:
    """What Optuna counts as feasible: every constraint value <= 0 (ERM trials have none)."""
    return all(value <= 0 for value in trial.constraints.values())


def verdict_words(verdict: str | None, slack_layers=()) -> str:
    """A verdict as the report writes it; a slack-feasible one always says that it is not strictly feasible."""
    if verdict == SLACK_FEASIBLE:
        layers = ", ".join(map(str, slack_layers or [])) or "?"
        return f"{verdict} (not strictly feasible: layers {layers} only within their slack)"
    return verdict or "-"

