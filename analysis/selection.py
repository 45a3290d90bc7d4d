"""Cells of the paper's grid and best-of-N selection by validation (or feasible-first).

A *cell* is one (task, model, dataset, L, gamma_train) setting; each cell has up to three *arms*: ERM, the
constrained runs with the paper's dual dynamics (``constrained_paper``: Algorithm 1 as published, see
``PAPER_DUAL``) and the constrained runs with any other dual dynamics (``constrained``: cutlab's defaults, a
study's settings), so that a report never merges the two into one number. The paper reports, per cell and
arm, its best run among seeds / search trials: for video "selected based on validation RMSE" (Sec. 4), for text
"the best result" (App. B); this module chooses by the validation metric by default (rule ``validation``). Rule
``feasible-first`` is the constrained problem's own choice: a strictly feasible run before a slack-feasible one
before any other, and validation decides within each group. Either way selection never looks at test numbers
(the verdict is taken on validation data too). Only complete runs take part.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cutlab.config.neutral import RESULT_NEUTRAL_KEYS, RESULT_NEUTRAL_SECTIONS
from cutlab.core.precision import DEFAULT_PRECISION, PRECISION_BEFORE_KEY

from .verdicts import SLACK_FEASIBLE, STRICTLY_FEASIBLE

CELL = ["task", "model", "dataset", "L", "gamma_train"]
# Runs are compared only on the same gamma_test grid: the mean over a grid (and its validation
# counterpart, the selection metric) changes with the grid.
# and in the same arithmetic (precision=fp32|tf32|bf16): a bf16 run is another setting, not another seed; and at
# the same training budget (steps): a longer run is another setting, not a better seed or trial.
SETTING = ["precision", "steps", "gamma_test_grid"]
ARM_CELL = CELL + ["arm"] + SETTING
ARMS = ("constrained", "constrained_paper", "erm")
ARM_LABELS = {"constrained": "constrained", "constrained_paper": "constrained (paper's dual)", "erm": "ERM"}
#: the paper's dual dynamics (conf/train/constrained_paper.yaml); the dual learning rate is not part of it, since
#: the paper sets it per task and ablates it (Fig 15)
PAPER_DUAL = {"constraint_form": "difference", "dual_optimizer": "adam", "dual_update": "simultaneous",
              "dual_restarts": False, "detach_prev": False, "dual_cadence": "batch"}
#: the run settings that make up a *dual setting* (what the feasibility study compares, one line each in the
#: constraint-satisfaction figure)
DUAL_SETTING_KEYS = ["constraint_form", "constraint_gradient", "detach_prev", "dual_optimizer", "dual_lr", "kappa_p",
                     "dual_update", "dual_cadence", "dual_restarts", "penalty", "resilience"]
#: config keys that never make runs of one row *trials* of each other: the seed (runs differing in it alone are
#: seeds) and the keys that do not change a result (cutlab.config.neutral: launch, logging, paths, threads)
NOT_TRIAL_KEYS = ("seed", *RESULT_NEUTRAL_KEYS)
#: model order of the paper's tables; other names follow alphabetically
MODEL_ORDER = ("dust", "ut", "vit", "distilbert", "roberta")
DATASET_ORDER = ("avenue", "shanghaitech", "ucsd_ped2", "ucsd_ped1", "imdb", "mnli")
#: how each cell's run is chosen among its seeds and trials (``python -m analysis --select``); the first is the paper's
VALIDATION, FEASIBLE_FIRST = "validation", "feasible-first"
SELECTION_RULES = (VALIDATION, FEASIBLE_FIRST)
#: the rule in the words of captions and notes ("the run ... per arm")
CHOSEN_BY = {VALIDATION: "best on validation",
             FEASIBLE_FIRST: "chosen feasible-first (strictly feasible, then slack-feasible, then the rest; best on "
                             "validation within each)"}
#: feasible-first's order of verdicts; every other verdict (infeasible, degenerate, ERM's) comes after, level
VERDICT_PRIORITY = {STRICTLY_FEASIBLE: 0, SLACK_FEASIBLE: 1}


def arm_of(row: dict) -> str | None:
    """``erm``, ``constrained_paper`` (every key of ``PAPER_DUAL`` recorded and the paper's) or ``constrained``.

    A record that lacks a key (written before the key existed) is not claimed for the paper: it stays
    ``constrained``. None when the record does not say whether the run was constrained.
    """
    if row.get("constrained") is None:
        return None
    if not row["constrained"]:
        return "erm"
    paper = all(row.get(key) is not None and row.get(key) == value for key, value in PAPER_DUAL.items())
    gradient = row.get("constraint_gradient")  # keys newer than every paper-dual record: absent there
    penalty = row.get("penalty")
    paper = paper and (gradient in (None, "full") or _missing(gradient)) and (not penalty or _missing(penalty))
    return "constrained_paper" if paper else "constrained"


def _missing(value) -> bool:
    """A key a record does not hold reads as NaN in a frame that has it for other records."""
    return isinstance(value, float) and math.isnan(value)


def dual_setting_label(row: pd.Series | dict) -> str:
    """A short name for a run's dual setting, e.g. ``ratio · sgd lr=0.01 · detach_prev · alternating``.

    ``?`` stands for a setting the record does not hold (an older record); ERM runs are ``ERM (no dual)``.
    """
    if row.get("arm") == "erm":
        return "ERM (no dual)"

    def value(key: str) -> str:
        known = row.get(key)
        return "?" if known is None or _missing(known) else \
            (f"{known:g}" if isinstance(known, float) else str(known))

    optimizer = value("dual_optimizer")
    parts = [value("constraint_form"), f"{optimizer} lr={value('dual_lr')}"]
    if optimizer == "nupi":
        parts[-1] += f" κ_p={value('kappa_p')}"
    detach = row.get("detach_prev")
    parts += ["detach_prev"] if detach == True else [f"detach_prev={detach}"] if isinstance(detach, str) else []  # noqa: E712
    local = {"block": "block-local g_l", "layerwise": "block-local g_l and l_L"}.get(row.get("constraint_gradient"))
    parts += [local] if local else []
    parts += [value("dual_update")]
    parts += ["a dual step per epoch"] if row.get("dual_cadence") == "epoch" else []
    parts += ["restarts"] if row.get("dual_restarts") == True else []  # noqa: E712
    penalty = row.get("penalty")
    parts += [f"augmented rho={penalty:g}"] if penalty and not _missing(penalty) else []
    parts += [f"resilience {value('resilience')}"]
    return " · ".join(parts)


def select_best(runs: pd.DataFrame, keys: list[str] | None = None, rule: str = VALIDATION) -> pd.DataFrame:
    """One row per group of ``keys`` (default: cell, arm and setting: precision, training steps, gamma_test grid): its
    best complete run by ``rule``.

    ``selection_metric`` is minimised or maximised as each run's ``selection_mode`` says; under
    ``feasible-first`` the verdict ranks first (``VERDICT_PRIORITY``). Ties go to the first run by name, so
    the choice is deterministic. Adds ``n_runs`` (complete runs in the group, a repeat counted once: ``repeats``),
    ``n_repeats``, ``n_infeasible`` (how many of the runs counted ended infeasible) and ``varied``: the config keys
    in which the group's runs differ, with how many values each (``"train.alpha ×3, train.dual_lr ×2"``; empty when
    they differ in the seed alone).
    """
    if rule not in SELECTION_RULES:
        raise ValueError(f"unknown selection rule {rule!r}; use one of {', '.join(SELECTION_RULES)}")
    keys = keys or ARM_CELL
    usable = with_settings(runs[runs["usable"]])
    if usable.empty:
        return usable.assign(n_runs=pd.Series(dtype=int), n_repeats=pd.Series(dtype=int),
                             n_infeasible=pd.Series(dtype=int), varied=pd.Series(dtype=str))
    sign = np.where(usable["selection_mode"] == "max", -1.0, 1.0)
    # a run without a selection metric can still be reported, but never beats one that has it
    usable["_score"] = (sign * usable["selection_metric"].astype(float)).fillna(math.inf)
    usable["_priority"] = (usable["verdict"].map(VERDICT_PRIORITY).fillna(len(VERDICT_PRIORITY))
                           if rule == FEASIBLE_FIRST else 0)
    usable = usable.sort_values(["_priority", "_score", "run"], kind="stable")
    grouped = usable.groupby(keys, dropna=False, sort=False)
    best = grouped.head(1).copy()
    # a repeat (after the best-ranked of its configuration and seed) is no other seed or trial of the cell
    usable["_counted"] = ~pd.concat([repeats(group) for _, group in grouped]).reindex(usable.index)
    counted = usable.groupby(keys, dropna=False, sort=False)[["_counted", "verdict"]]
    counts = counted.apply(lambda g: pd.Series({
        "n_runs": int(g["_counted"].sum()), "n_repeats": int((~g["_counted"]).sum()),
        "n_infeasible": int((g["_counted"] & (g["verdict"] == "infeasible")).sum())})).reset_index()
    varied = grouped.apply(_varied, include_groups=False).rename("varied").reset_index()
    best = best.merge(counts, on=keys, how="left").merge(varied, on=keys, how="left")
    return sort_cells(best.drop(columns=["_score", "_priority"]))


def seed_of(runs: pd.DataFrame) -> pd.Series:
    """Each run's seed, its own name where the record has none: the unit the error bars of Figs 5, 14, 15 are over.
    Two runs of one seed at one point (a sweep run again elsewhere) are one seed's sample, not two."""
    own = "run:" + runs["run"].astype(str)
    return (runs["seed"].astype(object).where(runs["seed"].notna(), own) if "seed" in runs else own).map(str)


def repeats(group: pd.DataFrame) -> pd.Series:
    """True for each run of ``group`` (one cell, arm and setting) that repeats an earlier run's configuration and seed
    (``seed_of``): the same sweep run again, on another machine or into another folder, is one sample, not two. A
    frame without configs (``cfg.*``: one made by hand) cannot say two runs are one configuration: none repeats."""
    if not any(column.startswith("cfg.") for column in group.columns):
        return pd.Series(False, index=group.index)
    identity = pd.DataFrame({column: group[column].map(repr) for column in trial_counts(group)}, index=group.index)
    return identity.assign(_seed=seed_of(group)).duplicated()


def _varied(group: pd.DataFrame) -> str:
    """The config keys with more than one value among ``group``'s runs, e.g. ``"train.alpha ×3, train.dual_lr ×2"``."""
    return ", ".join(f"{column.removeprefix('cfg.')} ×{count}" for column, count in trial_counts(group).items())


def trial_counts(group: pd.DataFrame) -> dict[str, int]:
    """The ``cfg.*`` columns with more than one value among ``group``'s runs, and how many, leaving out
    ``NOT_TRIAL_KEYS``; a key a record lacks is no difference."""
    counts = {}
    for column in group.columns:
        key = column.removeprefix("cfg.")
        if key == column or key in NOT_TRIAL_KEYS or key.split(".")[0] in RESULT_NEUTRAL_SECTIONS:
            continue
        count = group[column].dropna().map(repr).nunique()
        if count > 1:
            counts[column] = count
    return counts


def with_settings(runs: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``runs`` with the ``SETTING`` columns: ``precision`` filled (older records ran in fp32), ``steps``
    present (NaN where a record does not say)."""
    runs = runs.copy()
    runs["precision"] = runs["precision"].fillna(PRECISION_BEFORE_KEY) if "precision" in runs else PRECISION_BEFORE_KEY
    runs["steps"] = runs["steps"].astype(float) if "steps" in runs else math.nan
    return runs


def cell_order(row: pd.Series | dict) -> tuple:
    """Sort key in the paper's order: model, dataset, L, gamma_train, arm (constrained first), seed, run."""
    def rank(value, order: tuple[str, ...]) -> tuple[int, str]:
        return (order.index(value) if value in order else len(order), str(value))

    def number(value) -> float:
        return math.inf if value is None or pd.isna(value) else float(value)

    arm = row.get("arm")
    return (rank(row.get("model"), MODEL_ORDER), rank(row.get("dataset"), DATASET_ORDER), number(row.get("L")),
            number(row.get("gamma_train")), ARMS.index(arm) if arm in ARMS else len(ARMS), number(row.get("seed")),
            str(row.get("run", "")))


def sort_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` in :func:`cell_order`."""
    if frame.empty:
        return frame.reset_index(drop=True)
    order = sorted(range(len(frame)), key=lambda i: cell_order(frame.iloc[i]))
    return frame.iloc[order].reset_index(drop=True)


def reference_gamma_train(runs: pd.DataFrame, task: str) -> float | None:
    """The gamma_train with the most cells of ``task`` (the paper's figures fix one gamma_train).

    Ties prefer a noisy training level over gamma_train = 0, then the smaller level.
    """
    cells = runs[runs["usable"] & (runs["task"] == task)].drop_duplicates(["model", "dataset", "L", "gamma_train"])
    if cells.empty:
        return None
    counts = cells["gamma_train"].value_counts()
    return float(min(counts.index, key=lambda g: (-counts[g], g == 0, g)))


def three_gammas(grid: list[float] | tuple[float, ...]) -> list[float]:
    """Lowest, middle and highest gamma_test of a grid: in-distribution, intermediate, most out-of-distribution."""
    values = sorted(set(float(g) for g in grid))
    if len(values) <= 3:
        return values
    return [values[0], values[len(values) // 2], values[-1]]


def cell_label(row: pd.Series | dict, with_gamma: bool = True) -> str:
    """A short readable name for a cell, e.g. ``dust · ucsd_ped2 · L=3 · γ_train=0.09``."""
    text = f"{row['model']} · {row['dataset']} · L={int(row['L'])}"
    return f"{text} · γ_train={row['gamma_train']:g}" if with_gamma else text
