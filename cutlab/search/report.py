"""The search's result: per arm, the best trial and its test numbers (read from its run record).

The best trial is Optuna's ``Study.best_trial``: the best by validation among the strictly feasible trials
whenever one exists (the trials carry their verdict as constraint values, see verdict.py). Without any, the best
by validation is reported with ``best_is_feasible: false``; when a better-scoring trial was passed over for being
infeasible, it is reported too (``best_by_metric``). The report tallies the verdicts of every complete trial, and
a trial feasible only within its resilience slack (``slack_feasible``) is never taken for a feasible one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from cutlab.atomic import FOLDER_FAILURES, told_for, write_atomic
from cutlab.core.evaluation import DEGENERATE, INFEASIBLE, SLACK_FEASIBLE, STRICTLY_FEASIBLE, UNCONSTRAINED
from cutlab.errors import CutlabError
from cutlab.run.records import read_summary
from cutlab.search.folder import REPORT, SEARCH_GOES_ON, refuse_foreign
from cutlab.search.storage import trial_counts
from cutlab.search.verdict import is_feasible, verdict_words

#: the verdicts of cutlab.core.evaluation.Verdict, in the order the tally lists them
VERDICTS = (STRICTLY_FEASIBLE, SLACK_FEASIBLE, INFEASIBLE, DEGENERATE, UNCONSTRAINED)


def arm_report(study: optuna.Study, study_dir: Path) -> dict:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    entry = {"study": study.study_name, "direction": study.direction.name.lower(), "trials": trial_counts(study),
             "n_trials": study.user_attrs.get("n_trials")}
    if not complete:
        return entry
    entry["verdicts"] = verdict_tally(complete, study_dir)
    by_metric = (min if entry["direction"] == "minimize" else max)(complete, key=lambda t: t.value)
    try:
        best = study.best_trial  # Optuna's rule: the best feasible trial whenever one is feasible
    except ValueError:  # no complete trial is feasible
        best = by_metric
    entry["best_is_feasible"] = is_feasible(best)
    entry["best"] = trial_entry(best, study_dir)
    if by_metric.number != best.number:
        entry["best_by_metric"] = trial_entry(by_metric, study_dir)
    return entry


def trial_folder(trial, study_dir: Path) -> Path | None:
    """The trial's run folder in this study's folder: the folder name its ``run_dir`` attribute records, never the
    path itself (a copied study kept the old machine's paths; a journal from elsewhere may name any run folder, whose
    test numbers the report would have given as this study's best)."""
    recorded = trial.user_attrs.get("run_dir")
    name = Path(str(recorded)).name if recorded else ""
    return study_dir / name if name not in ("", ".", "..") else None


def trial_entry(trial, study_dir: Path) -> dict:
    run_dir = trial_folder(trial, study_dir)
    try:
        summary = (read_summary(run_dir) if run_dir else None) or {}
    except CutlabError:  # the folder was replaced since the trial ended: its numbers are unknown, not a crash
        summary = {}
    return {
        "trial": trial.number, "validation": trial.value, "params": trial.params, "seed": trial.user_attrs.get("seed"),
        "run_dir": str(run_dir) if run_dir else None, "metric": summary.get("metric"),
        "test_mean_metric": summary.get("test_mean_metric"), "test_auc": summary.get("test_auc"),
        "verdict": summary.get("verdict"), "constraints": dict(trial.constraints),
        "slack_layers": (summary.get("feasibility") or {}).get("slack_layers") or [],
    }


def verdict_tally(trials: list, study_dir: Path) -> dict[str, int]:
    """How many trials ended with each verdict (``unknown``: no readable run record)."""
    tally = dict.fromkeys(VERDICTS, 0)
    for trial in trials:
        run_dir = trial_folder(trial, study_dir)
        verdict = (read_summary(run_dir) or {}).get("verdict") if run_dir else None
        key = verdict if verdict in tally else "unknown"
        tally[key] = tally.get(key, 0) + 1
    return tally


def write_report(studies: dict[str | None, optuna.Study], study_dir: Path) -> dict:
    """``search_report.json`` in the study folder: one entry per arm (a plain search has the one arm "search")."""
    report = {name or "search": arm_report(study, study_dir) for name, study in studies.items()}
    path = study_dir / REPORT
    refuse_foreign(path, "the study's report")  # a link planted since the search began: replaced, not written through
    try:  # whole or not at all: written in place, a full disk cut the previous report short
        write_atomic(path, json.dumps(report, indent=2, default=str) + "\n")
    except FOLDER_FAILURES as failure:  # in a run's words: the search's are what goes on
        raise told_for(failure, SEARCH_GOES_ON, "paths.runs_dir") from None
    return report


def format_report(report: dict) -> str:
    lines = ["| arm | study | trials (complete/pruned/failed) | verdicts of complete trials | best trial | "
             "validation | test mean | test AUC | verdict of the best |", "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for arm, entry in report.items():
        counts = entry["trials"]
        best = entry.get("best") or {}
        tally = f"{counts.get('complete', 0)}/{counts.get('pruned', 0)}/{counts.get('fail', 0)}"
        verdicts = ", ".join(f"{n} {v}" for v, n in (entry.get("verdicts") or {}).items() if n) or "-"
        cells = [verdicts, best.get("trial", "-"), _num(best.get("validation")), _num(best.get("test_mean_metric")),
                 _num(best.get("test_auc")), verdict_words(best.get("verdict"), best.get("slack_layers"))]
        lines.append(f"| {arm} | {entry['study']} | {tally} | " + " | ".join(map(str, cells)) + " |")
        if best and not entry.get("best_is_feasible", True):
            notes.append(f"{arm}: no complete trial is strictly feasible; the best by validation is shown")
        if "best_by_metric" in entry:
            other = entry["best_by_metric"]
            notes.append(f"{arm}: trial {other['trial']} scored better ({_num(other['validation'])}) but is "
                         f"{verdict_words(other.get('verdict'), other.get('slack_layers'))}, so it is not the best")
    return "\n".join(lines + notes)


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def exit_code(report: dict) -> int:
    """1 when an arm has no complete trial and some failed (the search found nothing there: a sweep whose runs failed
    exits 1 too), saying so on stderr; else 0."""
    empty = [f"{entry['study']} ({entry['trials']['fail']} failed)" for entry in report.values()
             if "best" not in entry and entry["trials"].get("fail")]
    if empty:
        print(f"cutlab-search: no trial completed in {', '.join(empty)}; each failed trial's error is above, with "
              "the file and line it was raised at", file=sys.stderr)
    return 1 if empty else 0


def exit_codes_lost(codes: list[int]) -> list[str]:
    """Local workers that ended early, by their exit codes, as ``lost_workers`` names them."""
    return [f"worker {index} (exit code {code})" for index, code in enumerate(codes) if code]


def lost_workers(lost: list[str], report: dict) -> None:
    """Workers that ended early (killed, a SLURM job lost; ``lost`` names each): an error when a study still has
    trials to run, else one line, since another worker finished their trials (a dead worker's trial is re-queued once
    its heartbeat is old). Called after the report is written: what finished is kept either way."""
    if not lost:
        return
    theirs = "its trial was" if len(lost) == 1 else "their trials were"
    lost = ", ".join(lost)
    left = [entry["study"] for entry in report.values()
            if sum(entry["trials"].get(state, 0) for state in ("complete", "pruned", "fail")) < entry["n_trials"]]
    if left:
        raise CutlabError(f"{lost} ended early, and {', '.join(left)} has trials left: see the messages above; run "
                          "the same command again to resume")
    print(f"cutlab-search: {lost} ended early; {theirs} re-queued and finished by another worker: every trial is "
          "done", file=sys.stderr)
