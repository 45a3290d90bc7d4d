"""The search's result: per arm, the best trial by validation and its test numbers (read from its run record).

The best trial is chosen by validation alone, whatever its feasibility verdict; the report says which verdict it
has and tallies the verdicts of every complete trial, so that a trial feasible only within its resilience slack
(``slack_feasible``) is never taken for a feasible one.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from cutlab.core.evaluation import DEGENERATE, INFEASIBLE, SLACK_FEASIBLE, STRICTLY_FEASIBLE, UNCONSTRAINED
from cutlab.errors import CutlabError
from cutlab.run.records import read_summary
from cutlab.search.storage import trial_counts

REPORT = "search_report.json"
#: the verdicts of cutlab.core.evaluation.Verdict, in the order the tally lists them
VERDICTS = (STRICTLY_FEASIBLE, SLACK_FEASIBLE, INFEASIBLE, DEGENERATE, UNCONSTRAINED)


def arm_report(study: optuna.Study) -> dict:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    entry = {"study": study.study_name, "direction": study.direction.name.lower(), "trials": trial_counts(study),
             "n_trials": study.user_attrs.get("n_trials")}
    if not complete:
        return entry
    entry["verdicts"] = verdict_tally(complete)
    best = study.best_trial
    run_dir = Path(best.user_attrs["run_dir"])
    try:
        summary = read_summary(run_dir) or {}
    except CutlabError:  # the folder was replaced since the trial ended: its numbers are unknown, not a crash
        summary = {}
    entry["best"] = {
        "trial": best.number, "validation": best.value, "params": best.params, "seed": best.user_attrs.get("seed"),
        "run_dir": str(run_dir), "metric": summary.get("metric"),
        "test_mean_metric": summary.get("test_mean_metric"), "test_auc": summary.get("test_auc"),
        "verdict": summary.get("verdict"),
        "slack_layers": (summary.get("feasibility") or {}).get("slack_layers") or [],
    }
    return entry


def verdict_tally(trials: list) -> dict[str, int]:
    """How many trials ended with each verdict (``unknown``: no readable run record)."""
    tally = dict.fromkeys(VERDICTS, 0)
    for trial in trials:
        run_dir = trial.user_attrs.get("run_dir")
        verdict = (read_summary(Path(run_dir)) or {}).get("verdict") if run_dir else None
        key = verdict if verdict in tally else "unknown"
        tally[key] = tally.get(key, 0) + 1
    return tally


def write_report(studies: dict[str | None, optuna.Study], study_dir: Path) -> dict:
    """``search_report.json`` in the study folder: one entry per arm (a plain search has the one arm "search")."""
    report = {name or "search": arm_report(study) for name, study in studies.items()}
    (study_dir / REPORT).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def format_report(report: dict) -> str:
    lines = ["| arm | study | trials (complete/pruned/failed) | verdicts of complete trials | best trial | "
             "validation | test mean | test AUC | verdict of the best |", "|---|---|---|---|---|---|---|---|---|"]
    for arm, entry in report.items():
        counts = entry["trials"]
        best = entry.get("best") or {}
        tally = f"{counts.get('complete', 0)}/{counts.get('pruned', 0)}/{counts.get('fail', 0)}"
        verdicts = ", ".join(f"{n} {v}" for v, n in (entry.get("verdicts") or {}).items() if n) or "-"
        cells = [verdicts, best.get("trial", "-"), _num(best.get("validation")), _num(best.get("test_mean_metric")),
                 _num(best.get("test_auc")), _verdict(best)]
        lines.append(f"| {arm} | {entry['study']} | {tally} | " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _verdict(best: dict) -> str:
    """The best trial's verdict, saying so when it is feasible only through its resilience slack."""
    verdict = best.get("verdict") or "-"
    if verdict == SLACK_FEASIBLE:
        layers = ", ".join(map(str, best.get("slack_layers") or [])) or "?"
        verdict += f" (not strictly feasible: layers {layers} only within their slack)"
    return verdict


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"
