"""One worker's loop: ask the study for a trial, train it as a cutlab run, tell the study its validation score
and its feasibility verdict (as constraint values, see verdict.py).

Any number of workers (processes here, jobs on a cluster) share one study through its storage. The budget
``n_trials`` is the study's total: trials that finished (complete or pruned), run or wait count, failed
ones do not (a dead worker's trial is re-queued, see storage.py), so a resumed or widened search stops
at the same total. Opening a study (creating its record), asking, and failing a stopped or dead worker's trial
together with re-queueing its parameters, are serialised by a lock file in the study folder, so parallel workers
never overshoot the total (a worker that asked between another's fail and its re-queue once counted neither, and
asked a fresh trial) nor read a study's record half written. The lock is an flock(2) on that folder: workers on
several machines share it where the folder's file system honours flock across machines (NFS does; Lustre only when
mounted with -o flock); where it does not, two workers can overshoot the total by one.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import fail_stale_trials
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import TrialState

from cutlab.config.checks import check_config
from cutlab.config.groups import task_kind
from cutlab.config.neutral import is_result_neutral_override
from cutlab.core.progress import duration, tally
from cutlab.core.errors import NonFiniteLoss, OutOfMemory
from cutlab.errors import CutlabError
from cutlab.hangup import output_gone
from cutlab.config.compose import compose_run_config, hydra_quoted
from cutlab.search.folder import study_lock
from cutlab.search.holder import record_holder
from cutlab.search.preset import Arm, Param, Preset, as_override
from cutlab.search.storage import ERROR, RetryCallback, open_storage
from cutlab.search.verdict import constraint_values, trial_attrs
from cutlab.tasks import objective_of
from cutlab.tasks.models import raised_at

# heartbeats are meant for study.optimize: this loop is study.optimize's own trial step (ask, heartbeat, tell)
# with a budget shared by all workers
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
# a run that diverged or ran out of memory: a result of its parameters (the search goes on), not a refusal to fix
RESULTS = (NonFiniteLoss, OutOfMemory)
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)


@dataclass(frozen=True)
class Plan:
    """Everything a worker needs, identical in every worker of one search."""

    preset: Preset
    base_overrides: tuple[str, ...]  # the user's cutlab overrides, for every trial
    study_dir: Path                   # <runs_dir>/search/<study>: run folders, lock, default storage
    storage_url: str
    direction: str                    # minimize | maximize
    base_seed: int                    # cfg.seed of the composed base config (the ERM arm's first seed)
    launcher: dict = field(default_factory=dict)  # the composed launcher group: where the workers run


def say(text: str) -> None:
    print(f"[cutlab-search] {text}", file=sys.stderr, flush=True)


def sampler_seed(preset: Preset, worker_index: int, trials_before: int) -> int:
    """Worker i samples with the preset's seed + i (workers with one seed would propose the same points); a worker
    of a resumed study adds 1000 per trial the study already holds, since its sampler starts afresh and would
    otherwise propose the first session's random start-up points again."""
    return int(preset.sampler.get("seed", 0)) + worker_index + 1000 * trials_before


def make_sampler(preset: Preset, seed: int) -> optuna.samplers.BaseSampler:
    options = dict(preset.sampler)
    options.pop("seed", None)
    try:
        return optuna.samplers.TPESampler(seed=seed, **options)
    except TypeError as error:
        raise CutlabError(f"search.sampler: {error} (options of optuna.samplers.TPESampler, e.g. "
                          "search.sampler.n_startup_trials=10)") from None


def make_pruner(preset: Preset) -> optuna.pruners.BasePruner:
    if not preset.pruner:
        return optuna.pruners.NopPruner()
    # the median rule: stop a trial whose validation at an epoch is worse than the median of earlier trials there
    try:
        return optuna.pruners.MedianPruner(**preset.pruner)
    except TypeError as error:
        raise CutlabError(f"search.pruner: {error} (options of optuna.pruners.MedianPruner, e.g. "
                          "search.pruner.n_warmup_steps=2, or search.pruner=null for none)") from None


def open_study(plan: Plan, arm: Arm, storage, worker_index: int = 0) -> optuna.Study:
    """The arm's study, created or resumed, with this worker's sampler (its seed: ``study.sampler_seed``)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # under the ask lock: workers started together once read the record between another's writes of it (its
    # "preset" without its "overrides") and stopped, saying the study was started with other overrides
    with study_lock(plan.study_dir):
        record_holder(plan.study_dir, plan.storage_url)  # before the study's record: a folder holds one study
        return _open_study(plan, arm, storage, worker_index)


def _open_study(plan: Plan, arm: Arm, storage, worker_index: int) -> optuna.Study:
    study = optuna.create_study(study_name=plan.preset.study_name(arm), storage=storage, direction=plan.direction,
                                sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(plan.preset),
                                load_if_exists=True)
    overrides, space = list(plan.base_overrides + arm.overrides), space_record(arm)
    # the trials of one study are compared as one problem: another base config or another space (a preset of one's
    # own that kept the study's name) would mix two, and its best trial could be one of the other's
    if "preset" in study.user_attrs and _problem(study.user_attrs.get("overrides") or []) != _problem(overrides):
        raise CutlabError(f"study {study.study_name} was started with the overrides "
                          f"{' '.join(study.user_attrs.get('overrides') or []) or '(none)'}, and this command gives "
                          f"{' '.join(overrides) or '(none)'}; run it with those, or start another study with "
                          f"search.study=<new name>")
    if study.user_attrs.get("space", space) != space:
        raise CutlabError(f"study {study.study_name} was started with the search space "
                          f"{_space_text(study.user_attrs['space'])}, and search={plan.preset.name} gives "
                          f"{_space_text(space)}; run it with that space, or start another study with "
                          f"search.study=<new name>")
    study.sampler_seed = sampler_seed(plan.preset, worker_index, len(study.get_trials(deepcopy=False)))
    study.sampler = make_sampler(plan.preset, study.sampler_seed)
    if study.user_attrs.get("n_trials") != plan.preset.n_trials:  # the latest total asked for
        study.set_user_attr("n_trials", plan.preset.n_trials)
    if "space" not in study.user_attrs:  # a study begun before the space was recorded takes today's
        study.set_user_attr("space", space)
    if "preset" not in study.user_attrs:  # the study's record: how it was first asked for; "preset", which marks
        study.set_user_attr("overrides", overrides)  # it written, last
        study.set_user_attr("sampler_seed", int(plan.preset.sampler.get("seed", 0)))
        study.set_user_attr("preset", plan.preset.name)
    return study


def _problem(overrides: list[str]) -> list[str]:
    """The overrides that change what a trial computes (threads, W&B, paths and launcher left out: the workers of one
    search add their own threads); in any order unless a key repeats, where the last one given wins."""
    kept = [override for override in overrides if not is_result_neutral_override(override)]
    keys = [override.lstrip("+~").partition("=")[0] for override in kept]
    return sorted(kept) if len(set(keys)) == len(keys) else kept


def space_record(arm: Arm) -> list:
    """The arm's searched space as the study records it (JSON): one seed per trial, or each Param's fields."""
    return ["seeds"] if arm.seeds else [{k: list(v) if isinstance(v, tuple) else v for k, v in vars(p).items()}
                                        for p in arm.space]


def _space_text(space: list) -> str:
    if space == ["seeds"]:
        return "of seeds"
    return ", ".join(f"{p['key']} in {list(p['choices']) if p['choices'] else [p['low'], p['high']]}"
                     + ("" if p["type"] in ("float", "categorical") else f" ({p['type']})") for p in space)


def seed_space(plan: Plan) -> tuple[Param, ...]:
    return (Param("seed", "int", plan.base_seed, plan.base_seed + plan.preset.n_trials - 1),)


def next_trial(plan: Plan, arm: Arm, study: optuna.Study) -> optuna.Trial | str:
    """A trial to run, or "wait" (others are still running and may die), or "done" (the budget is spent)."""
    with study_lock(plan.study_dir):
        fail_stale_trials(study)  # a dead worker's trial -> failed -> re-queued with its parameters, in one step
        if arm.seeds:  # every seed of the total queued once, also the ones a widened total adds
            claimed = {trial_seed(t) for t in study.get_trials(deepcopy=False)}
            for seed in range(plan.base_seed, plan.base_seed + plan.preset.n_trials):
                if seed not in claimed:
                    study.enqueue_trial({"seed": seed})
        trials = counted(study)
        if len(trials) < plan.preset.n_trials or any(t.state == TrialState.WAITING for t in trials):
            return study.ask()
        return "wait" if any(t.state == TrialState.RUNNING for t in trials) else "done"


def trial_seed(trial) -> int | None:
    """The seed a seeds arm's trial runs: drawn, or fixed when it was queued (and not yet asked)."""
    return trial.params.get("seed", trial.system_attrs.get("fixed_params", {}).get("seed"))


def counted(study: optuna.Study) -> list:
    """The trials that count toward the total: complete, pruned, running or waiting, and failed as a result (a run
    that raised: otherwise a configuration that always fails, out of memory say, would be asked again forever). A
    trial failed because its worker stopped or died is not: its parameters are queued again."""
    return [t for t in study.get_trials(deepcopy=False)
            if t.state in COUNTED or (t.state == TrialState.FAIL and ERROR in t.user_attrs)]


def run_folder(plan: Plan, arm: Arm, trial: optuna.Trial) -> Path:
    """trial-NNNN after the first trial that drew these parameters: a re-queued trial resumes its folder."""
    history = RetryCallback.retry_history(trial.study._storage.get_trial(trial._trial_id))
    number = history[0] if history else trial.number
    prefix = f"{arm.name}-" if arm.name else ""
    return plan.study_dir / f"{prefix}trial-{number:04d}"


WAIT_LINE_EVERY_S = 60.0  # how often a worker waiting for a held run folder says so

# why a trial can end while its worker still runs it: the trial that re-queued it runs in the same folder
HANDED_OVER = ("this worker was stopped (SIGSTOP, a suspended SLURM job) for longer than the heartbeat grace, so "
               "another worker took it for dead and queued its parameters again")


def pruning_hook(trial: optuna.Trial, epochs: int, metric: str):
    """Report the epoch's validation metric at gamma_train; stop hopeless trials (never at the last epoch), and a run
    whose trial was handed over (the re-queued trial resumes from this epoch's checkpoint)."""
    from cutlab.run.experiment import StopRun

    def on_epoch_end(epoch: int, validate) -> None:
        value = validate()
        if math.isnan(value):
            raise StopRun("pruned", f"validation {metric} is NaN at epoch {epoch}")
        try:
            trial.report(value, step=epoch)
            prune = epoch < epochs and trial.should_prune()
        except UpdateFinishedTrialError:
            raise StopRun("interrupted", f"handed over at epoch {epoch}: {HANDED_OVER}") from None
        if prune:
            raise StopRun("pruned", f"validation {metric} {value:.4g} at epoch {epoch} is worse than the median "
                                    "of earlier trials")
    return on_epoch_end


def run_trial(plan: Plan, arm: Arm, study: optuna.Study, trial: optuna.Trial, worker_index: int) -> str:
    from cutlab.run.experiment import StopRun

    space = seed_space(plan) if arm.seeds else arm.space
    params = {param.key: param.suggest(trial) for param in space}
    run_dir = run_folder(plan, arm, trial)
    # W&B groups a study's trials; quoted: a study named ped2,L5 (one folder name) was two values to Hydra, and its
    # trials, which did not compose, stayed RUNNING
    group = f"wandb.group={hydra_quoted(plan.preset.study_name(arm))}"
    overrides = [*arm.overrides, *plan.base_overrides, *(as_override(k, v) for k, v in params.items()), group]
    cfg = compose_run_config(overrides)
    trial.set_user_attr("run_dir", str(run_dir))
    trial.set_user_attr("overrides", overrides)
    trial.set_user_attr("seed", int(cfg.seed))
    trial.set_user_attr("sampler_seed", study.sampler_seed)
    shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    say(f"{study.study_name} trial {trial.number} (worker {worker_index}): {shown} -> {run_dir}")
    try:  # every end of the space passed these checks (build_plan): a refusal is of this draw's combination
        check_config(cfg, folders=False)
    except CutlabError as error:
        return refused_as_result(study, trial, error)
    metric = objective_of(task_kind(cfg)).metric_name
    with get_heartbeat_thread(trial._trial_id, study._storage):
        try:
            summary = run_when_free(cfg, run_dir, pruning_hook(trial, cfg.train.epochs, metric),
                                    f"{study.study_name} trial {trial.number}")
        except StopRun as stop:
            if stop.status == "interrupted":  # handed over: its run goes on in the same folder
                say(f"{study.study_name} trial {trial.number} {stop}; the re-queued trial goes on from its checkpoint "
                    f"in {run_dir}")
                return "handed over"
            study.tell(trial, state=TrialState.PRUNED)
            say(f"{study.study_name} trial {trial.number} pruned: {stop}")
            return "pruned"
        except RESULTS as error:  # CutlabErrors, but the parameters' doing: the same ones would fail again
            return fail_as_result(study, trial, error)
        except CutlabError:  # the run refused in one line (a model module not on the path): the search stops, and
            requeue(plan.study_dir, study, trial)  # the same command, once fixed, runs these parameters first
            raise
        except (KeyboardInterrupt, SystemExit):  # stopped: re-queue its parameters now; it resumes its folder
            requeue(plan.study_dir, study, trial)
            raise
        except BrokenPipeError as error:  # the process reading this worker's lines died (its SLURM job killed): the
            if not output_gone():  # worker is lost, not the parameters; it was failed as a result, never run again
                return fail_as_result(study, trial, error)
            requeue(plan.study_dir, study, trial)
            raise
        except Exception as error:  # a diverging configuration is a result of the search, not a reason to stop it
            return fail_as_result(study, trial, error)
    mode = {"min": "minimize", "max": "maximize"}[summary["selection_mode"]]
    if mode != plan.direction:
        study.tell(trial, state=TrialState.FAIL)
        raise CutlabError(f"the runs' selection metric {summary['metric']} is to {mode}, but the study was created "
                          f"to {plan.direction}; set search.direction={mode} (or auto) and a new study name")
    value = float(summary["selection_metric"])
    try:
        # the verdict goes to the study before tell: TPE and Study.best_trial rank feasible trials first (verdict.py)
        for name, violation in constraint_values(summary).items():
            trial.set_constraint(name, violation)
        for name, attr in trial_attrs(summary, run_dir).items():
            trial.set_user_attr(name, attr)
        # a trial another worker already failed is returned as it is (tell itself fails a NaN value)
        handed = study.tell(trial, value, skip_if_finished=True).state != TrialState.COMPLETE and not math.isnan(value)
    except UpdateFinishedTrialError:
        handed = True
    if handed:  # the trial queued again reads the complete record from the folder
        say(f"{study.study_name} trial {trial.number} handed over after its run ended: {HANDED_OVER}; its complete "
            f"record in {run_dir} goes to that trial")
        return "handed over"
    say(f"{study.study_name} trial {trial.number} complete: validation {summary['metric']} {value:.4g}, "
        f"verdict {summary.get('verdict')}")
    return "complete"


def fail_as_result(study: optuna.Study, trial: optuna.Trial, error: Exception) -> str:
    """The trial FAIL with its error (and the file and line it was raised at) as its ``error`` attribute: counted
    toward the total, never asked again."""
    failure = f"{type(error).__name__}: {raised_at(error)}"
    trial.set_user_attr(ERROR, failure)
    study.tell(trial, state=TrialState.FAIL)
    say(f"{study.study_name} trial {trial.number} failed: {failure}")
    return "failed"


def refused_as_result(study: optuna.Study, trial: optuna.Trial, error: CutlabError) -> str:
    """A drawn combination the config checks refuse: FAIL, counted toward the total, never asked again (re-queued
    as a refused run is, every later command asked it first and stopped on it)."""
    trial.set_user_attr(ERROR, f"refused: {error}")
    study.tell(trial, state=TrialState.FAIL)
    say(f"{study.study_name} trial {trial.number} refused (not run; counted): {error}")
    return "refused"


def run_when_free(cfg, run_dir: Path, on_epoch_end, name: str) -> dict:
    """``run_experiment``, once no other process holds ``run_dir``: a re-queued trial's folder can still be held by
    the worker that ran it before, alive but stopped for longer than the heartbeat grace. It hands the run over at
    its next epoch (``pruning_hook``); until then this worker waits, its trial's heartbeat going on."""
    from cutlab.run.experiment import run_experiment
    from cutlab.run.lock import RunFolderBusy

    since, said = None, -math.inf
    while True:
        try:
            return run_experiment(cfg, run_dir, on_epoch_end=on_epoch_end)
        except RunFolderBusy as busy:
            now = time.monotonic()
            since = now if since is None else since
            if now - said >= WAIT_LINE_EVERY_S:  # how long so far: the holder may be stopped for good (kill it)
                say(f"{name}: {run_dir} is held by {busy.holder} (the worker that ran these parameters before, stopped "
                    f"or slow past the heartbeat grace); waiting for it to hand the run over, "
                    f"{duration(now - since)} so far")
                said = now
            time.sleep(1.0)


def requeue(study_dir: Path, study: optuna.Study, trial: optuna.Trial) -> None:
    """Fail a stopped trial and queue its parameters again, as a heartbeat timeout would (without the wait); under
    the ask lock, so no other worker counts the total between the two. However often it was stopped: the cap on
    retries (heartbeat max_retry) is for a trial whose worker dies each time, and a trial stopped a fourth time (a
    long trial on a preemptible partition) was abandoned for fresh parameters, its checkpoint unused."""
    with study_lock(study_dir):
        study.tell(trial, state=TrialState.FAIL)
        RetryCallback(max_retry=None)(study, study._storage.get_trial(trial._trial_id))


def waiting_line(plan: Plan, study: optuna.Study) -> str | None:
    """What a worker waits on, or None once no trial runs (the one next_trial saw finished since: the next ask tells
    whether the total is done or one was re-queued)."""
    running = [str(t.number) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if not running:
        return None
    grace = plan.preset.heartbeat.get("grace_s", 60)
    which = f"trials {', '.join(running)} run" if len(running) > 1 else f"trial {''.join(running)} runs"
    return (f"{study.study_name}: the total is taken; waiting while {which} in another worker (one whose worker died "
            f"is re-queued here once its heartbeat is {grace} s old)")


def finished(study: optuna.Study) -> int:
    """Trials that count toward the total and will not run again (complete, pruned, failed as a result)."""
    return sum(t.state not in (TrialState.RUNNING, TrialState.WAITING) for t in counted(study))


def work(plan: Plan, worker_index: int = 0) -> dict[str, int]:
    """Run trials of every arm until each study holds its total; returns how many this worker ran, by outcome."""
    storage = open_storage(plan.storage_url, plan.preset.heartbeat)
    outcomes: dict[str, int] = {}
    for arm in plan.preset.arms:
        study = open_study(plan, arm, storage, worker_index)
        # the study's trials done out of its total and the time left, at the rate of every worker since this one began
        done = tally(study.study_name, plan.preset.n_trials, "trial", finished(study), prefix="[cutlab-search] ")
        waiting = False
        while True:
            trial = next_trial(plan, arm, study)
            if trial == "done":
                break
            if trial == "wait":  # the budget is taken, but a running trial may still die and be re-queued
                # said once: a dead worker's trial holds this one for up to the grace, in silence
                if not waiting and (line := waiting_line(plan, study)):
                    say(line)
                    waiting = True
                time.sleep(1.0)
                continue
            waiting = False
            outcome = run_trial(plan, arm, study, trial, worker_index)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            done.update(finished(study), f"trial {trial.number} {outcome}")
    return outcomes
