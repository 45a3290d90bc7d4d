"""cutlab-eval RUN... [data=NAME data.KEY=VALUE ...] [eval.gamma_test=[...]]: finished runs on other data.

    cutlab-eval runs/my_run data=video_folder data.root=~/footage 'eval.gamma_test=[0,0.5,1,1.5,2]'
    cutlab-eval 'runs/*model=dust*' data=ucsd_ped2            # a glob, on Ped2's test split
    cutlab-eval runs/ 'eval.gamma_test=[0,0.2,0.4,0.6,0.8,1,1.5,2]'  # every run under runs/, its own data, wider grid
    cutlab-eval runs/my_run data=my_footage --config-dir my_project/conf  # my_project/conf/data/my_footage.yaml

RUN: a run folder, a folder of runs (a sweep's), or a quoted glob. Without data= each run is evaluated on its own
data. Each evaluation is written to <run>/evaluations/<data>-<key>/ (cutlab.transfer.record), never over the
run's own files; an evaluation already done is skipped, so the same command run again only does what is missing.
Exit status: 0 when every run was evaluated (or already was), 2 when any was refused (one line each, naming the fix),
130 when stopped by Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cutlab.atomic import told_for
from cutlab.errors import CutlabError
from cutlab.interrupted import interrupted_exit
from cutlab.redaction import redact, redact_argv


def parse_args(argv: list[str]) -> argparse.Namespace:
    from cutlab.transfer.evaluate import SIGMAS, SPLITS

    parser = argparse.ArgumentParser(prog="cutlab-eval", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("items", nargs="+", metavar="RUN_OR_SETTING",
                        help="run folders, folders of runs, quoted globs; and data=..., data.KEY=..., "
                             "eval.gamma_test=[...], eval.batch_size=N, device=..., threads=N settings")
    parser.add_argument("--split", default="test", choices=SPLITS,
                        help="which split of the data to evaluate (all: every clip; default test)")
    parser.add_argument("--sigma", default="data", choices=SIGMAS,
                        help="sigma_x the noise gamma_test * sigma_x is scaled by: data = the evaluated data's own "
                             "(gamma keeps its meaning, noise relative to the signal; default), run = the run's "
                             "training data's (the same absolute noise as in training)")
    parser.add_argument("--config-dir", "-cd", dest="config_dir", default=None,
                        help="a folder of your own configs (e.g. data/NAME.yaml for data=NAME), as python -m cutlab "
                             "takes it")
    return parser.parse_intermixed_args(argv)  # runs and settings in any order, around the options


def main(argv: list[str] | None = None) -> int:
    try:
        return _evaluate_all(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:  # each evaluation is written whole or not at all (cutlab.transfer.record)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while it exits would end it in a traceback
        print("cutlab-eval: interrupted; the evaluations written so far are kept, and the same command does the rest",
              file=sys.stderr, flush=True)
        return interrupted_exit()


def _evaluate_all(argv: list[str]) -> int:
    from cutlab.transfer.config import is_override

    args = parse_args(argv)
    logging.getLogger("cutlab").setLevel(logging.WARNING)
    overrides = [item for item in args.items if is_override(item)]
    patterns = [item for item in args.items if not is_override(item)]
    try:
        if not patterns:
            raise CutlabError("no run given; pass a run folder, a folder of runs or a glob before the settings, "
                              "e.g. cutlab-eval runs/my_run data=ucsd_ped2")
        from cutlab.transfer.config import compose_settings
        from cutlab.transfer.runs import find_runs

        if args.config_dir is not None:
            from cutlab.launch.plan import searchpath_override

            overrides = [searchpath_override(args.config_dir), *overrides]
        settings = compose_settings(overrides)
        runs = find_runs(patterns)
    except CutlabError as error:
        print(f"cutlab-eval: error: {redact(str(error))}", file=sys.stderr)
        return 2
    from cutlab.core.progress import tally

    command = shlex.join(redact_argv(["cutlab-eval", *argv]))
    refused = 0
    # n/N runs and the time left as each ends (an evaluation takes minutes; a sweep's folder holds dozens); "ended",
    # with the refused ones counted apart as the closing line does: "done" had counted them among the evaluated
    done = tally("evaluation", len(runs), "run", prefix="cutlab-eval: ", counted=" ended") if len(runs) > 1 else None
    for index, run_dir in enumerate(runs, start=1):
        try:
            line, skipped = evaluate_one(run_dir, settings, overrides, args.split, args.sigma, command)
            print(line, flush=True)
            if skipped and done is not None:  # done before this command: out of its rate, as a sweep's tally does
                done.already_done()
        except CutlabError as error:
            refused += 1
            # a folder failure's words are a run's: nothing resumes in an evaluation
            error = told_for(error, "the evaluations written so far are kept, and it does the rest")
            message = redact(str(error))
            print(f"cutlab-eval: error: {message if message.startswith(run_dir.name) else f'{run_dir.name}: {message}'}",
                  file=sys.stderr, flush=True)
        if done is not None:
            done.update(index, f"{index - refused} evaluated or already done, {refused} refused" if refused else "")
    if len(runs) > 1:
        print(f"cutlab-eval: {len(runs) - refused} of {len(runs)} runs evaluated or already done, {refused} refused",
              file=sys.stderr)
    return 2 if refused else 0


def evaluate_one(run_dir: Path, settings, overrides: list[str], split: str, sigma: str,
                 command: str) -> tuple[str, bool]:
    """Evaluate one run (or find it done); the line that says what happened, and whether it was done already."""
    from cutlab.run.provenance import provenance
    from cutlab.run.build import pick_device
    from cutlab.transfer.config import check_fits, check_held_out, default_data, evaluation_config
    from cutlab.transfer.evaluate import Request, evaluate_run
    from cutlab.core.data.cache import data_files
    from cutlab.transfer.record import EVALUATIONS, check_not_linked, data_label, done, evaluation_dir, write_record
    from cutlab.transfer.runs import finished_run

    run_cfg, summary, checkpoint = finished_run(run_dir)
    cfg = evaluation_config(run_cfg, settings, overrides)
    check_fits(run_cfg, cfg, run_dir.name)
    check_held_out(run_cfg, cfg, split, run_dir.name)
    request = Request.of(cfg, split, sigma).as_dict()
    folder = evaluation_dir(run_dir, request)
    check_not_linked(run_dir, folder)
    label = data_label(request, default_data(str(cfg.data.name)))
    files = data_files(cfg.data.get("root"))
    existing = done(folder, request, files)
    if existing:
        return f"{run_dir.name}: {label}: already done, skipped ({_headline(existing)}); {_shown(folder)}", True
    try:
        with _locked(folder, run_dir):
            numbers, table = evaluate_run(cfg, checkpoint, summary, _request(request), run_dir.name, run_cfg)
            record = {"request": request, "label": label, "run": run_dir.name,
                      "trained_on": run_cfg.data.name, "model": run_cfg.model.name, "L": run_cfg.L,
                      "constrained": bool(run_cfg.train.constrained), "command": command, "data_files": files,
                      **numbers,
                      "provenance": provenance(int(cfg.seed), pick_device(cfg.device))}
            write_record(folder, record, table, split)
    finally:
        _remove_if_empty(run_dir / EVALUATIONS)
    return f"{run_dir.name}: {label}: {_headline(record)}; {_shown(folder)}", False


@contextmanager
def _locked(folder: Path, run_dir: Path) -> Iterator[None]:
    """The evaluation folder's lock held; a run folder that cannot be written (a read-only mount) refused in one line
    before the evaluation begins, as the other refusals are (the command goes on with the next run)."""
    from cutlab.atomic import os_reason
    from cutlab.run.lock import RunLock
    from cutlab.transfer.record import EVALUATIONS

    lock = RunLock(folder)
    try:
        lock.acquire()
    except OSError as error:
        raise CutlabError(f"cannot write the evaluation into {run_dir / EVALUATIONS} ({os_reason(error)}): copy the "
                          "run somewhere writable and evaluate the copy") from None
    try:
        yield
    finally:
        lock.release()


def _request(request: dict):
    from cutlab.transfer.evaluate import Request

    return Request(**request)


def _headline(record: dict) -> str:
    grid = ",".join(f"{float(g):g}" for g in record["request"]["gamma_test"])
    ind = record["at_gamma_train"]
    descent = "descends" if ind["strictly_decreasing"] else "does not descend"
    return (f"mean {record['metric']} over gamma_test [{grid}] {record['mean_metric']:.3f}, verdict {record['verdict']}, "
            f"{descent} at gamma_test=gamma_train={ind['gamma']:g} (max l_l/l_l-1 {ind['max_layer_ratio']:.3g})")


def _shown(folder: Path) -> str:
    """The record's folder, relative to the working directory when it lies below it."""
    try:
        return str(folder.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)


def _remove_if_empty(folder: Path) -> None:
    """An evaluation refused or stopped before writing leaves no empty ``evaluations/`` in the run's folder."""
    try:
        folder.rmdir()
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
