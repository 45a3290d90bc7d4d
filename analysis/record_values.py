"""Type and range checks of the values the analysis reads from a run record (a stranger's folder included).

A bad value is dropped (replaced by None) and named, so that the run is reported ``unsupported`` with the
reason while the report goes on: ``L: 1e30`` must not become ``range(L + 1)`` and ``L: abc`` or a list
``gamma`` must not abort the report for every other run.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from cutlab.core.constraints import CONSTRAINT_GRADIENTS, is_detach_prev
from cutlab.launch.outcome import STATUSES

MAX_DEPTH = 1000  # far beyond any model here; bounds every loop over layers
Check = Callable[[Any], bool]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(minimum: float | None = None) -> Check:
    return lambda v: _is_number(v) and math.isfinite(v) and (minimum is None or v >= minimum)


def number_or_nan(v: Any) -> bool:
    """A headline number: NaN is a legitimate value (an AUC over one gamma), infinity and text are not."""
    return _is_number(v) and not math.isinf(v)


def whole(minimum: int = 0, maximum: int | None = None) -> Check:
    return lambda v: (isinstance(v, int) and not isinstance(v, bool) and v >= minimum
                      and (maximum is None or v <= maximum))


def text(v: Any) -> bool:
    return isinstance(v, str)


def flag(v: Any) -> bool:
    return isinstance(v, bool)


def list_of(check: Check) -> Check:
    return lambda v: isinstance(v, (list, tuple)) and all(check(item) for item in v)


def one_of(*choices: str) -> Check:
    return lambda v: v in choices


# dotted config keys the analysis uses, with what each must be (None, i.e. absent, is always allowed)
CONFIG = {
    "model.name": text, "data.name": text, "L": whole(0, MAX_DEPTH), "gamma": finite(0), "seed": whole(),
    "train.constrained": flag, "train.alpha": finite(), "train.dual_lr": finite(0), "train.lr": finite(0),
    "train.epochs": whole(), "train.batch_size": whole(1), "train.resilience": lambda v: text(v) or flag(v), "train.resilience_c": finite(0),
    "train.dual_cadence": text, "train.warmup_epochs": whole(), "train.detach_prev": is_detach_prev,
    "train.constraint_gradient": one_of(*CONSTRAINT_GRADIENTS),
    "eval.gamma_test": list_of(finite(0)),
}
SUMMARY = {
    "status": text, "record_version": whole(), "verdict": text, "error": text, "metric": text,
    "selection_mode": one_of("min", "max"), "selection_metric": number_or_nan, "test_mean_metric": number_or_nan,
    "test_auc": number_or_nan, "epsilon": number_or_nan, "sigma_x": number_or_nan, "steps": whole(),
    "wall_time_s": finite(0), "wandb_id": text, "data_source": text, "feasibility": lambda v: isinstance(v, dict),
    "feasibility.violated_layers": list_of(whole(0, MAX_DEPTH)),
}

# one run of a sweep's outcome.json (cutlab.launch.outcome.Outcome); run_id (a folder name) and status are required
OUTCOME = {
    "run_id": lambda v: text(v) and bool(v.strip()) and "\0" not in v, "status": one_of(*STATUSES), "metric": text,
    "value": number_or_nan, "error": text, "job_id": text,
}


def checked(values: dict[str, Any], rules: dict[str, Check], file: str) -> tuple[dict[str, Any], list[str]]:
    """``values`` (dotted keys) with every value that breaks its rule removed, and one phrase per removal."""
    kept, problems = dict(values), []
    for key, rule in rules.items():
        value = values.get(key)
        if value is not None and not rule(value):
            del kept[key]
            problems.append(f"{file} {key} = {_shown(value)} is not a valid value")
    return kept, problems


def _shown(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """``{"train": {"alpha": 0.25}}`` -> ``{"train.alpha": 0.25}``; lists become tuples (hashable)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out
