"""The command line: ``python -m cutlab`` trains and evaluates one configuration (or a multirun with -m) as a Hydra app.

``main`` plans a sweep before Hydra starts (cutlab.launch), then hands the command to Hydra; an in-process
sweep's summary is written here when Hydra has run it. Nothing imports this module but its entry point,
cutlab/commands.py.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import hydra
from omegaconf import DictConfig

from cutlab.config.compose import check_overrides, check_shown_config, forced_as_plain
from cutlab.config.paths import CONFIG_MODULE
from cutlab.config.resolvers import register_resolvers
from cutlab.config.searchpath import register_sweeps
from cutlab.errors import CutlabError
from cutlab.interrupted import ctrl_c_held, ctrl_c_released, interrupted_exit
from cutlab.launch.outcome import left_busy
from cutlab.launch.skipped import for_a_launcher, say_busy, say_if_skipped
from cutlab.redaction import redact
from cutlab.run.lock import RunFolderBusy
from cutlab.run.preemption import PREEMPTED_EXIT, Preempted, stops_held_between_runs
from cutlab.run.records import CHECKPOINT

SWEEP_OUTCOMES: list = []  # an in-process multirun's run outcomes, summarised when the sweep ends
SWEEP_TALLY: dict = {}  # an in-process sweep's "n/N runs done, time left" line (its meter, the ids it has yet to
# count and the outcomes it counted), and the ids of the runs its plan refused, which it does not run
HELD_STOP: list = []  # an in-process sweep's stop signal held between its runs (a cutlab.run.preemption.StopFlag)
NEW_FOLDERS: list[Path] = []  # a single run's paths.runs_dir and the parents Hydra is to create, the deepest first

register_resolvers()
register_sweeps()  # --config-name NAME finds sweeps/NAME.yaml


# the package cutlab.conf (the repository's conf/); its sweep files join it through cutlab/config/searchpath.py
@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="config")
def app(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from cutlab.run.experiment import run_experiment

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    in_sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    if HELD_STOP and HELD_STOP[0].requested:  # it came as Hydra composed this run: none of it ran
        print(readied_line(HELD_STOP[0].signal_name, run_dir, in_sweep), file=sys.stderr)
        raise SystemExit(PREEMPTED_EXIT)
    if in_sweep and run_dir.name in SWEEP_TALLY.get("refused", ()):  # recorded failed as the sweep began
        _remove_if_empty(run_dir)
        return None
    try:
        with ctrl_c_released():  # the run handles Ctrl-C itself; Hydra's composition, before and after, holds it
            summary = run_experiment(cfg, run_dir)
    except Preempted as stop:
        print(f"cutlab: {stop}; {_again(run_dir)}", file=sys.stderr)
        if in_sweep:
            _record_outcome(run_dir, "interrupted", str(stop))
        raise SystemExit(PREEMPTED_EXIT) from None
    except KeyboardInterrupt:  # Ctrl-C: the record says interrupted; a traceback would say nothing more
        print(f"cutlab: interrupted (Ctrl-C); {_again(run_dir)}", file=sys.stderr)
        if in_sweep:
            _record_outcome(run_dir, "interrupted", "interrupted (Ctrl-C)")
        raise SystemExit(interrupted_exit()) from None
    except RunFolderBusy as busy:
        if not (in_sweep or for_a_launcher()):
            print(f"cutlab: error: {redact(str(busy))}", file=sys.stderr)
            raise SystemExit(2) from None
        # in a sweep: an earlier or overlapping sweep's run writes it still, so it is left to that one, not failed
        print(f"cutlab: {run_dir.name}: {left_busy(busy.holder)}", file=sys.stderr)
        if not in_sweep:  # a local or SLURM launcher's run: the launcher records it busy
            say_busy(busy.holder)
            raise SystemExit(2) from None
        _record_outcome(run_dir, "busy", left_busy(busy.holder))
        return None
    except CutlabError as error:
        _remove_if_empty(run_dir)
        print(f"cutlab: error: {redact(str(error))}", file=sys.stderr)
        if not in_sweep:
            raise SystemExit(2) from None
        _record_outcome(run_dir, "failed", str(error))
        return None
    except Exception as error:  # in a sweep, one run's failure is recorded and the others go on
        _remove_if_empty(run_dir)  # failed in its set-up (the epsilon=auto pass): no empty folder --plan calls new
        if not in_sweep:
            raise
        logging.getLogger("cutlab").exception("run %s failed", run_dir.name)
        _record_outcome(run_dir, "failed", f"{type(error).__name__}: {error}")
        return None
    if in_sweep:
        from cutlab.launch.outcome import outcome_of

        _add_outcome(outcome_of(run_dir.name, lambda: summary, job_id=None))
    else:  # a local or SLURM launcher's run: it tells the launcher whether it trained or found the run complete
        say_if_skipped(summary)
    return summary.get("selection_metric") if summary else None


def readied_line(signal_name: str, run_dir: Path, in_sweep: bool) -> str:
    """The line of a stop that came as Hydra composed the run, before any of it ran (its empty folder removed): a
    sweep resumes from that run, a single run resumes from its checkpoint where an earlier session left one."""
    if in_sweep:
        _remove_if_empty(run_dir)
        return (f"cutlab: {signal_name} as the sweep readied its next run: it stops before {run_dir.name}; run the "
                "same command again to resume it")
    return f"cutlab: {signal_name} as the run was readied; {_again(run_dir)}"


def _again(run_dir: Path) -> str:
    """What the same command does with a run stopped by a signal: resume it from its checkpoint, or, stopped in its
    set-up before it wrote one, start it (a folder it left empty is removed)."""
    if (run_dir / CHECKPOINT).exists():
        return f"run the same command again to resume {run_dir.name} from its last checkpoint"
    _remove_if_empty(run_dir)
    return f"{run_dir.name} was stopped before its first checkpoint: run the same command again to start it"


def _record_outcome(run_dir: Path, status: str, error: str) -> None:
    """A run of the sweep that failed or was stopped (the sweep's record is written as the sweep exits)."""
    from cutlab.launch.outcome import Outcome

    _add_outcome(Outcome(run_dir.name, status, error=error))


def _add_outcome(outcome) -> None:
    """Keep a run's outcome; a run the sweep had to run (not one skipped as complete) advances its tally, unless it
    was interrupted (the same command resumes it)."""
    from cutlab.launch.outcome import ended

    SWEEP_OUTCOMES.append(outcome)
    if SWEEP_TALLY and outcome.run_id in SWEEP_TALLY["ids"]:
        SWEEP_TALLY["ids"].discard(outcome.run_id)
        SWEEP_TALLY["reported"].append(outcome)
        SWEEP_TALLY["meter"].update(ended(SWEEP_TALLY["reported"]), outcome.line())


def _remove_if_empty(run_dir: Path) -> None:
    """Hydra makes the run folder (and ``runs/`` when there is none) before the run starts; a run refused at the door
    leaves nothing behind."""
    _remove_own_empty_log(run_dir)
    for folder in [run_dir, *NEW_FOLDERS]:
        try:
            folder.rmdir()
        except OSError:  # not empty (an earlier run's, another process's) or gone: it and its parents stay
            return


def _remove_own_empty_log(run_dir: Path) -> None:
    """Hydra's default job logging (hydra/job_logging=default) opens ``<run>/cutlab.log`` as it readies the run: a
    folder holding only that log, empty and written by this process, is the refused run's own and goes with it."""
    try:
        entries = list(run_dir.iterdir())
        mode = entries[0].lstat() if len(entries) == 1 else None
    except OSError:  # gone, or not ours to read
        return
    if mode is None:
        return
    log = os.path.abspath(entries[0])
    handlers = [h for h in logging.root.handlers if isinstance(h, logging.FileHandler) and h.baseFilename == log]
    if handlers and stat.S_ISREG(mode.st_mode) and mode.st_size == 0:  # not a link planted there, nor a log of runs
        for handler in handlers:
            logging.root.removeHandler(handler)
            handler.close()
        entries[0].unlink()


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, the deepest first."""
    folder = folder.absolute()
    return [path for path in [folder, *folder.parents] if not path.exists()]


def main() -> None:
    from cutlab.launch.plan import check_run, parse_command

    argv = sys.argv[1:]
    if "--version" in argv:  # cutlab's own, where Hydra's flag would print only Hydra's
        import hydra

        import cutlab

        print(f"cutlab {cutlab.__version__} (Hydra {hydra.__version__})")
        raise SystemExit(0)
    started, sweep = time.perf_counter(), None
    try:
        command = parse_command(argv)
        check_overrides(argv)
        if command is not None and (plain := forced_as_plain(command)):  # ++seed=1 runs in seed=1's folder
            command.overrides = [plain.get(override, override) for override in command.overrides]
            argv = [plain.get(argument, argument) for argument in argv]
        if command is not None and (command.multirun or command.plan):
            # a sweep: planned first (bad keys fail before any run), then run by its launcher
            from cutlab.launch.sweep import hydra_sweep_dir, run_sweep, with_sweep_group

            command = with_sweep_group(command)
            status, sweep = run_sweep(command)
            if status is not None:
                raise SystemExit(status)
            argv = ["-m", *command.hydra_argv(), hydra_sweep_dir(*sweep)]
            _start_tally(sweep[0])
        elif command is not None:  # one run: composed once here, so that what Hydra would report in many lines is one
            NEW_FOLDERS[:] = _missing_folders(check_run(command))
        else:  # another of Hydra's flags: --cfg job is checked the same way (the others compose nothing)
            check_shown_config(argv)
    except CutlabError as error:
        print(f"cutlab: error: {redact(str(error))}", file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = [sys.argv[0], *argv]
    try:
        # a run's stop signals are held from Hydra's composition (which makes the run's folder) to its set-up
        with ctrl_c_held(), (stops_held_between_runs() if command is not None else nullcontext()) as held:
            HELD_STOP[:] = [held] if command is not None else []
            app()
    except (SystemExit, KeyboardInterrupt):  # a signal stopped the sweep (in a run, or as Hydra readied the next):
        if sweep is not None:  # its record still gets the outcomes so far
            _report_inprocess_sweep(*sweep, time.perf_counter() - started, stopped=True)
        raise
    if sweep is not None and held.requested:  # it came after the last run began: the sweep ends stopped
        _report_inprocess_sweep(*sweep, time.perf_counter() - started, stopped=True)
        raise SystemExit(PREEMPTED_EXIT)
    if command is not None and held.requested:  # after the single run's evaluation: its record is complete, and the
        signal.raise_signal(signal.Signals[held.signal_name])  # signal does what it did there before it was held
    _show_launcher_info(argv)
    if sweep is not None:
        _report_inprocess_sweep(*sweep, time.perf_counter() - started)


def _show_launcher_info(argv: list[str]) -> None:
    """After Hydra's --info: the launcher that runs a multirun (Hydra's own section names only its basic launcher)."""
    from cutlab.launch.info import info_arguments, launcher_info

    arguments = info_arguments(argv)
    if arguments is not None:
        try:
            print(launcher_info(*arguments), flush=True)
        except CutlabError as error:
            print(f"cutlab launcher: {redact(str(error))}", flush=True)


def _start_tally(plan) -> None:
    """The sweep's tally, opened with the runs its plan refused: failed with their reason, and not run (Hydra still
    composes each, and ``app`` returns at once), as no other launcher starts them."""
    from cutlab.launch.outcome import opened_tally
    from cutlab.launch.sweep import refused_outcomes

    refused = refused_outcomes(plan)
    SWEEP_OUTCOMES.extend(refused)
    SWEEP_TALLY.update(meter=opened_tally(f"sweep {plan.name}", len(plan.to_run), "run", refused),
                       ids={run.run_id for run in plan.to_run}, reported=list(refused),
                       refused={run.run_id for run in plan.refused})


def _report_inprocess_sweep(plan, record: Path, seconds: float, stopped: bool = False) -> None:
    """The in-process sweep's summary (stderr and its record); exit 1 when any run failed (a stopped sweep keeps
    the exit status of its stop)."""
    from cutlab.launch.outcome import DONE, NOT_STARTED, Outcome, skipped_total, summary_text
    from cutlab.launch.sweep import finish_record

    ran = [o for o in SWEEP_OUTCOMES if o.run_id in {run.run_id for run in plan.to_run + plan.busy + plan.refused}]
    skipped = skipped_total(plan.completed, ran)
    if stopped:  # the runs it never began are listed too, as the local launcher lists them
        reported = {o.run_id for o in ran}
        ran += [Outcome(run.run_id, "interrupted", error=NOT_STARTED) for run in plan.to_run
                if run.run_id not in reported]
    finish_record(record, [o.as_dict() for o in ran], skipped, seconds)
    print(summary_text(plan.name, ran, skipped, seconds), file=sys.stderr, flush=True)
    if not stopped and any(o.status not in DONE for o in SWEEP_OUTCOMES):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
