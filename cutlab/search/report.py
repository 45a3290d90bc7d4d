"""The search's result: per arm, the best trial by validation and its test numbers (read from its run record)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from cutlab.errors import CutlabError
from cutlab.records import read_summary
from cutlab.search.storage import trial_counts

REPORT = "search_report.json"


def arm_report(study: optuna.Study) -> dict:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    entry = {"study": study.study_name, "direction": study.direction.name.lower(), "trials": trial_counts(study),
             "n_trials": study.user_attrs.get("n_trials")}
    if not complete:
        return entry
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
    }
    return entry


def write_report(studies: dict[str | None, optuna.Study], study_dir: Path) -> dict:
    """``search_report.json`` in the study folder: one entry per arm (a plain search has the one arm "search")."""
    report = {name or "search": arm_report(study) for name, study in studies.items()}
    (study_dir / REPORT).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def format_report(report: dict) -> str:
    lines = ["| arm | study | trials (complete/pruned/failed) | best trial | validation | test mean | test AUC | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, entry in report.items():
        counts = entry["trials"]
        best = entry.get("best") or {}
        tally = f"{counts.get('complete', 0)}/{counts.get('pruned', 0)}/{counts.get('fail', 0)}"
        cells = [best.get("trial", "-"), _num(best.get("validation")), _num(best.get("test_mean_metric")),
                 _num(best.get("test_auc")), best.get("verdict", "-")]
        lines.append(f"| {arm} | {entry['study']} | {tally} | " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"
