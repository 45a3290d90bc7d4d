"""``python -m analysis RUNS_FOLDER... --out REPORT_DIR`` (console script ``cutlab-analysis``).

Reads every run record under the folders, writes REPORT_DIR/report.md with Tables 3 and 4 and the
figures beside it, and REPORT_DIR/report.html: the same report as one file with every figure embedded. The same from W&B (analysis.wandb_source), for when the run folders are not at hand:

- ``python -m analysis --wandb-offline RUNS_FOLDER --out REPORT_DIR``: from the offline W&B files
  (``<run>/wandb/offline-run-*``) of the runs under RUNS_FOLDER, no server needed;
- ``python -m analysis --wandb ENTITY/PROJECT [--wandb-group G] --out REPORT_DIR``: from a W&B server.

Both rebuild run folders under REPORT_DIR/wandb_records/ and analyse them like any other. Bad input (a missing or
empty folder, no run records, an --out that cannot be written) stops with exit code 2 and one line
``cutlab-analysis: error: ...`` naming the fix (``analysis: error: ...`` from ``python -m analysis``: every message
names the command typed, see ``command_name``); runs that cannot be counted (failed, partial, an unknown record
format) are reported, never silently dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import shutil
import sys
from pathlib import Path

from cutlab.atomic import DiskFull, is_disk_full, os_reason, unwritable
from cutlab.run.records import linked

from .collect import AnalysisError, RunTable, collect_runs
from .out_folder import OUTPUT_FOLDERS, not_ours, raised_writing, symbolic_links
from .selection import CHOSEN_BY, SELECTION_RULES, VALIDATION

WARNINGS_SHOWN = 10  # per-run warnings printed; the report lists them all
SCRIPT = "cutlab-analysis"  # the console script (pyproject.toml)
REPORT_GOES_ON = "it writes the whole report anew"  # a full disk's line: what the same command does then


def command_name() -> str:
    """The command the user typed, to head every message as the other commands do (``cutlab-eval: error: ...``):
    ``python -m analysis`` (``cutlab_analysis`` installed) runs this file, else it is the console script, or a
    caller of ``main`` (cutlab-reproduce), which runs the analysis that cutlab-analysis is."""
    return __package__ if Path(sys.argv[0]).resolve() == Path(__file__).resolve() else SCRIPT


def parse_args(argv: list[str] | None, prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog, description="Tables 3/4 and the paper's figures from cutlab run records, as one report.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="sources (give one):\n"
               "  RUNS_FOLDER...                            the run folders (no W&B needed)\n"
               "  --wandb-offline RUNS_FOLDER               their offline W&B files (no server)\n"
               "  --wandb ENTITY/PROJECT [--wandb-group G]  a W&B server (`wandb login` first)\n"
               "From W&B, run folders are rebuilt under REPORT_DIR/wandb_records/ first; W&B holds\n"
               "no sample_losses.csv, so the figures that need it are skipped.")
    parser.add_argument("folders", nargs="*", metavar="RUNS_FOLDER",
                        help="a run folder or a folder of them (searched recursively); several may be given")
    parser.add_argument("--wandb-offline", action="store_true",
                        help="read RUNS_FOLDER's offline W&B files (<run>/wandb/offline-run-*) instead of its run "
                             "records; no server needed")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", default=None,
                        help="read the runs from a W&B server (wandb.Api(); needs `wandb login`) instead of folders")
    parser.add_argument("--wandb-group", metavar="G", default=None, help="with --wandb: only the runs of group G")
    parser.add_argument("-o", "--out", required=True, metavar="REPORT_DIR",
                        help="folder for report.md, tables/ and figures/ (created; an earlier report there is "
                             "replaced, a report.md or report.html it did not write is kept and stops it)")
    parser.add_argument("--select", choices=SELECTION_RULES, default=VALIDATION,
                        help="how each cell's run is chosen among its seeds and trials: "
                             + "; ".join(f"'{rule}': {CHOSEN_BY[rule]}" for rule in SELECTION_RULES)
                             + f". Default: {VALIDATION}, the paper's rule")
    parser.add_argument("--gamma-train", type=float, default=None, metavar="G",
                        help="the γ_train of the figures drawn at one level (default: the level with the most cells)")
    args = parser.parse_args(argv)
    if args.wandb and args.folders:
        parser.error("give RUNS_FOLDER or --wandb ENTITY/PROJECT, not both")
    if not args.wandb and not args.folders:
        parser.error("give RUNS_FOLDER (or --wandb ENTITY/PROJECT)")
    if args.wandb_group and not args.wandb:
        parser.error("--wandb-group goes with --wandb ENTITY/PROJECT")
    if args.wandb_offline and args.wandb:
        parser.error("--wandb-offline reads RUNS_FOLDER's W&B files; --wandb reads a server: give one of them")
    return args


def collect(args: argparse.Namespace, out: Path, prog: str) -> RunTable:
    """The runs named on the command line: run folders, or run folders rebuilt from W&B under ``out``."""
    if not args.wandb and not args.wandb_offline:
        return collect_runs(*args.folders)
    from .wandb_source import RECORDS_DIR, collect_wandb, records_from_api, records_from_offline

    records = out / RECORDS_DIR
    if records.exists():
        shutil.rmtree(records)  # rebuilt from scratch: a run gone from W&B must not survive from a past call

    def progress(done: int, total: int) -> None:
        print(f"{prog}: fetched {done}/{total} runs from W&B", file=sys.stderr, flush=True)

    if args.wandb:
        return collect_wandb(records_from_api(args.wandb, records, args.wandb_group, progress))
    if len(args.folders) > 1:
        raise AnalysisError("--wandb-offline takes one RUNS_FOLDER; pass the folder that holds them all")
    return collect_wandb(records_from_offline(args.folders[0], records, progress))


def check_gamma_train(gamma_train: float | None, runs) -> None:
    """--gamma-train at a level no complete run was trained at drew its figures empty and skipped them, silently."""
    if gamma_train is None:
        return
    import numpy as np
    import pandas as pd

    levels = sorted(set(pd.to_numeric(runs.runs.loc[runs.runs["usable"], "gamma_train"], errors="coerce").dropna()))
    if not np.isclose(levels, gamma_train).any():
        raise AnalysisError(f"--gamma-train {gamma_train:g}: no complete run was trained at it; give one of the runs' "
                            f"levels: {', '.join(f'{level:g}' for level in levels) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    prog = command_name()
    args = parse_args(argv, prog)
    try:
        if not args.out.strip():  # Path('') is the current folder: an unset variable would put the report there
            raise AnalysisError("--out is empty; pass a folder for the report, e.g. --out report")
        out = Path(args.out).expanduser()  # --out=~/report reaches us unexpanded: it made a folder named ~ here
        if out.exists() and not out.is_dir():
            raise AnalysisError(f"--out {out} is a file; pass a folder for the report (it is created if missing)")
        links = symbolic_links(out)
        if links:
            raise AnalysisError(f"{linked(links[0])}: the report writes only its own files in --out; remove the link "
                                "or pass another --out")
        foreign = not_ours(out)
        if foreign:
            raise AnalysisError(f"{foreign[0]} was not written by cutlab-analysis, and the report would replace it; "
                                "pass another --out, or move that file")
        problem = unwritable(out)  # before the runs are read (minutes for a sweep, or a W&B download)
        if problem:
            raise AnalysisError(f"cannot write the report to {out} ({problem}): pass a writable --out")
        for name in OUTPUT_FOLDERS:  # an earlier report's tables/ or figures/, where the new one's files are moved
            if (out / name).is_dir() and (problem := unwritable(out / name)):
                raise AnalysisError(f"cannot write the report to {out} ({out / name}/: {problem}): pass a writable "
                                    "--out")
        runs = dataclasses.replace(collect(args, out, prog), selection=args.select)
        check_gamma_train(args.gamma_train, runs)
        from .report import write_report  # matplotlib is imported only once the input is known good

        # the console script: `python -m analysis` works only in a checkout (installed, the package is cutlab_analysis)
        command = "cutlab-analysis " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
        report = write_report(runs, out, gamma_train=args.gamma_train, command=command)
    except AnalysisError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except DiskFull as error:  # every file of the report is written whole or not at all (cutlab.atomic)
        print(f"{prog}: error: {DiskFull(error.path, REPORT_GOES_ON, '--out')}", file=sys.stderr)
        return 2
    except OSError as error:  # a part of a report already there that cannot be written (a read-only tables/)
        if not raised_writing(error, out):
            raise
        if is_disk_full(error):  # a folder of the report that a full disk could not make
            print(f"{prog}: error: {DiskFull(Path(error.filename), REPORT_GOES_ON, '--out')}", file=sys.stderr)
            return 2
        print(f"{prog}: error: cannot write the report to {out} ({error.filename}: {os_reason(error)}): pass a "
              "writable --out", file=sys.stderr)
        return 2
    from .sweep_outcomes import sweep_outcomes

    outcomes = sweep_outcomes(runs)  # the report lists these too
    unusable = runs.runs[~runs.runs["usable"]]
    warnings = [*(f"{run['run']}: {run['state']}: {run['problem']}" for _, run in unusable.iterrows()),
                *(f"{run['run']}: failed before it wrote a run folder: {run['error']}" for run in outcomes.failed),
                *(f"{run['run']}: interrupted before it wrote a run record; run the same sweep command again"
                  for run in outcomes.interrupted),
                *(f"sweep record not read: {line}" for line in outcomes.unread),
                *(f"{line}: left out (a folder linked in from elsewhere holds no run of this folder's; pass its "
                  "target to analyse it)" for line in runs.links)]
    for warning in warnings[:WARNINGS_SHOWN]:
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    if len(warnings) > WARNINGS_SHOWN:
        print(f"{prog}: warning: {len(warnings) - WARNINGS_SHOWN} more runs not counted (see the report)",
              file=sys.stderr)
    written = sum(figure.written for figure in report.figures)
    evaluated = sum(path.suffix == ".png" for path in report.evaluation_files)
    print(f"{prog}: wrote {report.path} and {report.html} ({len(runs.runs)} runs, {int(runs.runs['usable'].sum())} complete; "
          f"{sum(not t.empty for t in report.tables)} tables, {written} figures, "
          f"{len(report.figures) - written} skipped"
          + (f"; {evaluated} figure{'s' * (evaluated > 1)} of evaluations on other data" if evaluated else "") + ")")
    return 0


if __name__ == "__main__":  # python -m analysis in a clone: Ctrl-C, a full disk or a reader gone as cutlab-analysis
    from cutlab.commands import as_command

    as_command("analysis", main)
