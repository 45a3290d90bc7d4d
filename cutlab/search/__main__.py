"""cutlab-search search=<preset> [cutlab overrides...] [--workers N] [--n-trials N] [--dry-run]: Optuna TPE.

Every trial is one cutlab run (``run_experiment``) in ``<runs_dir>/search/<study>/trial-NNNN``, composed from
conf/ with the same overrides ``python -m cutlab`` takes. Running the same command again resumes the study:
finished trials are kept, interrupted ones resume from their checkpoints, and it stops at the total.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cutlab.core.progress import MODE_ENV
from cutlab.errors import CutlabError, refuse_blank
from cutlab.hangup import repeated_hang_up, stop_signals, terminal_closed
from cutlab.interrupted import interrupted_exit
from cutlab.redaction import redact, redact_argv
from cutlab.run.preemption import PREEMPTED_EXIT, Preempted
from cutlab.signal_waits import wait_hearing_signals

STORAGE_KEY = "search.storage"  # the same address as a preset override
STORAGE_ENV = "CUTLAB_STORAGE"  # the storage address, read from the environment so no password is on a command line


class StoppedWatching(KeyboardInterrupt):
    """Ctrl-C or SIGTERM while the study's SLURM workers run: this command stops, its workers do not."""


EXAMPLES = """examples:
  python -m cutlab.search search=dust_video --n-trials 20 --workers 2
  python -m cutlab.search search=fair_comparison model=ut L=5 train.epochs=10
  python -m cutlab.search search=dust_video --storage postgresql://me@dbhost:5432/optuna   # many machines
  CUTLAB_STORAGE=postgresql://me:PASSWORD@dbhost:5432/optuna python -m cutlab.search search=dust_video
  python -m cutlab.search search=dust_video search.pruner=null --dry-run
  python -m cutlab.search search=dust_video --workers 8 launcher=slurm launcher.partition=gpu launcher.timeout_min=240
  optuna-dashboard runs/search/dust_video/optuna.journal      # the study in a browser (pip install optuna-dashboard)
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cutlab-search", description=__doc__.splitlines()[0],
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*",
                        help="search=<preset> (searches/*.yaml or a file), search.KEY=VALUE for the preset, "
                             "any cutlab override (model=ut L=5 train.epochs=10 ...), and where the workers run as "
                             "python -m cutlab takes it: launcher=slurm launcher.partition=gpu ... (default: "
                             "processes on this machine)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the study (default 1)")
    parser.add_argument("--config-dir", "-cd", dest="config_dir", default=None,
                        help="a folder of your own configs (e.g. model/NAME.yaml), as python -m cutlab takes it")
    # the flags of earlier versions: refused in main with the override that replaced them
    parser.add_argument("--launcher", dest="old_launcher", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--slurm-profile", dest="old_profile", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--n-trials", type=int, default=None, help="the study's TOTAL number of trials (= search.n_trials)")
    parser.add_argument("--storage", default=None, help="JOURNAL_FILE | sqlite:///PATH "
                        f"| postgresql://... (Optuna's forms; = search.storage; default ${STORAGE_ENV}, for passwords)")
    parser.add_argument("--study", "--study-name", default=None, help="study name (= search.study; Optuna's "
                        "--study-name; default: the preset's)")
    parser.add_argument("--dry-run", action="store_true", help="check everything and print the plan; run nothing")
    parser.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)  # set for spawned workers
    args = parser.parse_intermixed_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    return args


def with_config_dir(args: argparse.Namespace) -> argparse.Namespace:
    """``--config-dir DIR`` as the override that every trial and worker composes with: Hydra's search path."""
    if args.config_dir is None:
        return args
    from cutlab.launch.plan import searchpath_override

    if any(o.lstrip("+").startswith("hydra.searchpath=") for o in args.overrides):
        raise CutlabError("give your configs' folder once: --config-dir DIR or hydra.searchpath=[file://DIR], not both")
    overrides = [searchpath_override(args.config_dir), *args.overrides]
    return argparse.Namespace(**{**vars(args), "config_dir": None, "overrides": overrides})


def split_overrides(arguments: list[str]) -> tuple[str, list[str], list[str]]:
    """(preset name, preset dotlist without the ``search.`` prefix, cutlab overrides)."""
    preset, dotlist, cutlab = None, [], []
    for argument in arguments:
        if argument.startswith("search="):
            preset = argument.partition("=")[2]
        elif argument.startswith("search."):
            dotlist.append(argument[len("search."):])
        elif meant := _meant_search_key(argument):
            raise CutlabError(f"{argument.partition('=')[0]} is not a key of cutlab's config; did you mean {meant}? "
                              "(the preset is search=NAME, its keys search.KEY=VALUE)")
        else:
            cutlab.append(argument)
    if not preset:
        from cutlab.search.preset import PRESET_DIR

        known = ",".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise CutlabError(f"say which search to run: search=<preset>, one of search={known} (searches/)")
    return preset, dotlist, cutlab


def _meant_search_key(argument: str) -> str | None:
    """``searc.n_trials=3``, ``+search.n_trials=3``, ``~search.n_trials``: the search's own key, misspelt, given a
    prefix or deleted. No config key is near 'search', and composing it would only advise checking it against conf/."""
    key, equals, value = argument.lstrip("+~").partition("=")
    node, dot, rest = key.partition(".")
    if not (equals or argument.startswith("~")) or argument.startswith(("search.", "search=")) or \
            not difflib.get_close_matches(node, ["search"], cutoff=0.8):
        return None
    return f"search.{rest}={value or 'VALUE'}" if dot else f"search={value or 'VALUE'}"


def build_plan(args: argparse.Namespace):
    """Check the preset, compose every arm's config and a sample trial's, and name the study folder."""
    from omegaconf import OmegaConf

    from cutlab.config.checks import check_config, check_runs_dir, check_wandb_run_id, runs_dir_path
    from cutlab.config.launcher import check_launcher_node, is_launcher_override
    from cutlab.config.compose import compose_run_config
    from cutlab.search.compose import check_fixed_keys, check_space_keys, space_corners
    from cutlab.search.folder import check_study_folder
    from cutlab.search.holder import check_holder
    from cutlab.search.preset import given_storage, load_preset, resolved_direction, with_flags
    from cutlab.search.storage import check_form, default_storage_url
    from cutlab.search.worker import Plan
    from cutlab.config.groups import task_kind
    from cutlab.tasks import objective_of
    from cutlab.tasks.models import locate_target

    refuse_blank("--study", args.study, "give one, or leave it out for the preset's study")  # not another study
    refuse_blank("--storage", args.storage, "give one, or leave it out for $CUTLAB_STORAGE, else the study's journal")
    name, dotlist, overrides = split_overrides(args.overrides)
    dotlist = with_flags(dotlist, {"--n-trials": args.n_trials, "--study": args.study})
    preset = load_preset(name, dotlist)
    storage = given_storage(args.storage, dotlist, os.environ.get(STORAGE_ENV) or None)
    if storage:  # set after parsing: a parse error must never quote the address
        preset = dataclasses.replace(preset, storage=storage)
    base = compose_run_config(overrides)
    launcher = OmegaConf.to_container(base.launcher, resolve=True)
    check_launcher_node(launcher)
    # where the workers run is not part of any trial's config: launcher overrides stay out of the trials' overrides
    overrides = [o for o in overrides if not is_launcher_override(o)]
    for arm in preset.arms:
        check_fixed_keys(arm, overrides, preset.name)  # a trial's drawn value would replace the command's
        cfg = compose_run_config([*arm.overrides, *overrides])
        check_space_keys(cfg, arm.space)
        if not str(cfg.model.get("_target_") or "cutlab.").startswith("cutlab."):  # a model of one's own: every
            locate_target(str(cfg.model._target_))  # trial imports it (the workers get this environment)
        # trials at every end of the space must make valid runs (types, bounds, combinations): a refusal stops the
        # search here, naming the setting, instead of ending each worker at the first trial that draws it
        last_seed = [[f"seed={int(base.seed) + preset.n_trials - 1}"]]  # a seeds arm's trials run seed..seed+n-1
        for sample in last_seed if arm.seeds else space_corners(arm.space):
            try:
                check_config(compose_run_config([*arm.overrides, *overrides, *sample]))
            except CutlabError as error:
                raise CutlabError(f"search={preset.name}: a trial with {' '.join(sample)} would be refused: "
                                  f"{error}") from None
    check_wandb_run_id(preset.n_trials * len(preset.arms), str(base.wandb.mode), "search")
    objective = objective_of(task_kind(base))  # the objective declares its metric's direction
    direction = resolved_direction(preset.direction, objective.metric_name, objective.higher_is_better)
    runs_dir = runs_dir_path(base.paths.runs_dir)
    check_runs_dir(runs_dir)  # a file, not writable, a ~ not expanded: one line, not a traceback
    runs_dir = runs_dir.resolve()
    study_dir = runs_dir / "search" / preset.study
    check_study_folder(study_dir)  # its lock or report a link: refused before a trial runs (also with --dry-run)
    storage = preset.storage or default_storage_url(study_dir)
    check_form(storage)  # a mistyped address stops here, before anything runs (also with --dry-run)
    check_holder(study_dir, storage)  # the folder of a study that another storage holds: not this one's
    return Plan(preset, tuple(overrides), study_dir, storage, direction, int(base.seed), launcher)


def describe(plan, workers: int) -> str:
    from cutlab.search.compose import param_text

    preset = plan.preset
    lines = [f"study {preset.study} ({preset.name}): {preset.n_trials} trials per arm in total, {plan.direction} "
             f"the runs' validation selection_metric, {workers} worker(s)",
             f"  storage: {redact(plan.storage_url)}", f"  run folders: {plan.study_dir}/",
             f"  sampler: TPE {preset.sampler}; pruner: {'median ' + str(preset.pruner) if preset.pruner else 'off'}",
             f"  cutlab overrides for every trial: {' '.join(plan.base_overrides) or '(none)'}"]
    for arm in preset.arms:
        label = arm.name or "search"
        what = (f"seeds {plan.base_seed}..{plan.base_seed + preset.n_trials - 1}" if arm.seeds
                else "; ".join(param_text(p) for p in arm.space))
        fixed = " ".join(_arm_overrides(arm.overrides, plan.base_overrides)) or "no fixed overrides"
        lines.append(f"  arm {label} [{fixed}]: {what}")
    return "\n".join(lines)


def _arm_overrides(arm: tuple[str, ...], command: tuple[str, ...]) -> list[str]:
    """An arm's fixed overrides as its trials get them: a key the command sets too takes the command's value (it
    comes after the arm's), so the line shows that one and names the preset's."""
    given = {override.lstrip("+~").partition("=")[0]: override for override in command}
    shown = []
    for override in arm:
        key = override.lstrip("+~").partition("=")[0]
        shown.append(f"{given[key]} (the command's; the preset's {override})" if key in given else override)
    return shown


def slurm_description(plan, workers: int) -> str:
    """Where the workers would run under SLURM: the settings and the sbatch script (as ``python -m cutlab --plan``)."""
    from cutlab.launch.slurm_profile import cluster_check_line, sbatch_script, slurm_settings

    profile = slurm_settings(plan.launcher)
    folder = plan.study_dir / "slurm" / "<time>"
    return (f"workers: {workers} task(s) of one SLURM job array; the sbatch script (profile {profile.name}):\n"
            + sbatch_script(profile, folder, f"search-{plan.study_dir.name}", workers, sys.executable)
            + cluster_check_line(profile))


def worker_argv(args: argparse.Namespace, index: int) -> list[str]:
    """The arguments of worker ``index``: this command's, plus its index (the launcher decides its threads).

    The storage goes to the workers in their environment (``storage_env``), never on a command line:
    a command line is visible to every user of the machine and is recorded (provenance, W&B, sbatch scripts)."""
    flags = []
    for flag, value in (("--n-trials", args.n_trials), ("--study", args.study)):
        if value is not None:
            flags += [flag, str(value)]
    # search.storage=ADDRESS travels as --storage does, in storage_env: its password stayed in every worker's
    # command line, and under SLURM in the job's pickle on disk
    overrides = [o for o in args.overrides if o.lstrip("+~").partition("=")[0] != STORAGE_KEY]
    return [*overrides, *flags, "--worker-index", str(index)]


def storage_env(plan) -> dict[str, str]:
    """The study's address as the plan resolved it (--storage, $CUTLAB_STORAGE, search.storage=, the preset's)."""
    return {STORAGE_ENV: plan.storage_url}


def user_threads(args: argparse.Namespace) -> bool:
    return any(o.startswith("threads=") for o in args.overrides)


def worker_command(args: argparse.Namespace, index: int) -> list[str]:
    # N local workers on N cores: one torch thread each (benchmarks/), unless the user chose
    threads = [] if user_threads(args) else ["threads=1"]
    return [sys.executable, "-m", "cutlab.search", *worker_argv(args, index), *threads]


def run_workers(args: argparse.Namespace, plan) -> list[int]:
    """Start ``--workers`` processes on this machine and wait; Ctrl-C stops them (their trials resume later). Returns
    their exit codes: one killed leaves its trial to the others (re-queued once its heartbeat is old)."""
    # one terminal for every worker: progress as lines, since their bars would overwrite each other
    env = {**os.environ, "OMP_NUM_THREADS": "1", MODE_ENV: "lines", **storage_env(plan)}
    # own sessions: a terminal's Ctrl-C reaches only this process, which stops each worker with one SIGTERM. A
    # worker that got both (the terminal's SIGINT, then this SIGTERM while it re-queued its trial) exited in the
    # middle of the re-queue: its trial stayed RUNNING until the heartbeat grace, with a SystemExit traceback
    workers = [subprocess.Popen(worker_command(args, index), env=env, start_new_session=True)
               for index in range(args.workers)]
    try:
        codes = [wait_hearing_signals(worker) for worker in workers]
    except BaseException:  # Ctrl-C or SIGTERM: stop the workers too (each re-queues its trial)
        stop_workers(workers)
        raise
    return codes


def stop_on(*signals: signal.Signals) -> None:
    """These signals end the command as SIGTERM does (exit 143; a run in training checkpoints first). SIGHUP, a closed
    terminal, first sends the streams that were the terminal to /dev/null, where lines no longer fail with EIO."""
    def stop(signum, frame) -> None:
        if repeated_hang_up(signum):
            return
        sys.exit(143)

    for sig in signals:
        signal.signal(sig, stop)


def stop_workers(workers: list[subprocess.Popen]) -> None:
    """One SIGTERM each (checkpoint at the next step, re-queue the trial) and wait; a second Ctrl-C or SIGTERM kills
    them at once (their trials are re-queued once the heartbeat grace has passed). After a hang-up, SIGHUP instead:
    the workers write to the same closed terminal, and silence it before they stop."""
    stop_signal = signal.SIGHUP if terminal_closed() else signal.SIGTERM
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(stop_signal)
    try:
        for worker in workers:
            wait_hearing_signals(worker)
    except BaseException:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        raise


def old_flags_message(args: argparse.Namespace) -> str | None:
    """``--launcher``/``--slurm-profile`` of earlier versions: the overrides that replaced them."""
    if args.old_launcher is None and args.old_profile is None:
        return None
    new = [f"launcher={args.old_launcher or 'slurm'}", *([f"launcher.profile={args.old_profile}"] if args.old_profile else [])]
    return (f"--launcher/--slurm-profile are now overrides, as python -m cutlab takes them: write {' '.join(new)} "
            "(and any launcher.KEY=VALUE, e.g. launcher.partition=gpu)")


def run_slurm_workers(args: argparse.Namespace, plan, studies: dict) -> list[str]:
    """The ``--workers`` as one SLURM job array (cutlab/launch/slurm.py): each task is one worker of the study;
    a preempted task stops its trial (re-queued in the study) and is requeued itself, like a grid's run. While the
    tasks run, each study's trials done and the time left are read from the storage, as local workers show them.
    Returns the workers whose jobs ended early (failed, cancelled), as ``lost_workers`` names them: the report of
    what finished is written first, as for local workers."""
    from cutlab.launch.job import RunCommand
    from cutlab.launch.slurm import submit, wait
    from cutlab.launch.slurm_profile import check_cluster, slurm_settings
    from cutlab.search.progress import trial_progress

    study_dir = plan.study_dir
    profile = slurm_settings(plan.launcher)
    check_cluster(profile)
    # a task's threads: the user's threads=, else launcher.threads, else the CPUs SLURM gave it
    threads = None if user_threads(args) else plan.launcher.get("threads") or profile.cpus_per_task
    commands = [RunCommand(worker_argv(args, index), f"worker-{index}", str(study_dir), os.getcwd(),
                           threads=threads, module="cutlab.search") for index in range(args.workers)]
    folder = study_dir / "slurm" / time.strftime("%Y%m%d-%H%M%S")
    os.environ.update(storage_env(plan))  # sbatch hands the submitting environment to the jobs
    jobs, stopped_by = submit(commands, profile, folder, job_name=f"search-{study_dir.name}")
    outcomes, stopped_by = wait(jobs, commands, on_poll=trial_progress(plan, studies), stopped_by=stopped_by)
    if stopped_by is not None:
        raise StoppedWatching("cutlab-search: stopped watching the study; its workers go on on the cluster (above), "
                              "and the same command shows it again, and adds workers if it is not finished")
    return [f"worker {o.run_id.removeprefix('worker-')} [job {o.job_id}] ({o.error or o.status})"
            for o in outcomes if o.status != "complete"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sys.argv = redact_argv(sys.argv)  # what provenance.json and W&B record of this command
    try:
        from cutlab.search.report import exit_code, exit_codes_lost, format_report, lost_workers, write_report
        from cutlab.search.storage import counts_text, open_storage, trial_counts
        from cutlab.search.worker import open_study, say, work

        old = old_flags_message(args)
        if old:
            raise CutlabError(old)
        args = with_config_dir(args)
        plan = build_plan(args)
        if args.worker_index is not None:  # one of several workers: run trials, report nothing
            stop_on(*stop_signals(signal.SIGTERM))  # a stopped worker records "interrupted"
            work(plan, args.worker_index)
            return 0
        say(describe(plan, args.workers))
        slurm = plan.launcher.get("name") == "slurm"
        if slurm:
            say(slurm_description(plan, args.workers))
        if args.dry_run:
            say("dry run: nothing was run and no storage was opened")
            return 0
        storage = open_storage(plan.storage_url, plan.preset.heartbeat)  # an unreachable database stops here
        studies = {arm.name: open_study(plan, arm, storage) for arm in plan.preset.arms}
        for study in studies.values():
            say(f"{study.study_name}: trials so far {counts_text(trial_counts(study))}")
        started, lost = time.perf_counter(), []
        stop_on(*stop_signals(signal.SIGTERM))  # stopped like Ctrl-C: trials resume later
        if slurm:
            lost = run_slurm_workers(args, plan, studies)
        elif args.workers == 1:
            work(plan, 0)
        else:
            lost = exit_codes_lost(run_workers(args, plan))
        report = write_report(studies, plan.study_dir)  # what completed, also when a worker was lost
        say(f"finished in {time.perf_counter() - started:.1f} s; {plan.study_dir / 'search_report.json'}:\n"
            + format_report(report))
        lost_workers(lost, report)
        return exit_code(report)
    except CutlabError as error:
        print(f"cutlab-search: error: {redact(str(error))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, SystemExit) as stop:
        if isinstance(stop, SystemExit) and stop.code in (0, None):
            raise
        if args.worker_index is None:  # the workers share its terminal: the command says it once
            print(stop if isinstance(stop, StoppedWatching) else "cutlab-search: stopped; run the same command again "
                  "to resume (finished trials are kept, the stopped one resumes from its checkpoint)", file=sys.stderr)
        # SIGTERM (stop_on's 143, or a trial's run stopped by it) exits as a run and a sweep do: PREEMPTED_EXIT
        by_sigterm = isinstance(stop, Preempted) or isinstance(stop, SystemExit) and stop.code == 143
        return PREEMPTED_EXIT if by_sigterm else interrupted_exit()


if __name__ == "__main__":
    sys.exit(main())
