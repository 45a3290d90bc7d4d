"""``python -m analysis RUNS_FOLDER... --out REPORT_DIR`` (console script ``cutlab-analysis``).

Reads every run record under the folders, writes REPORT_DIR/report.md with Tables 3 and 4 and the
figures beside it. Bad input (a missing or empty folder, no run records) stops with exit code 2 and
one line ``analysis: error: ...`` naming the fix; runs that cannot be counted (failed, partial, an
unknown record format) are reported, never silently dropped.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from analysis.collect import AnalysisError, collect_runs

WARNINGS_SHOWN = 10  # per-run warnings printed; the report lists them all


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="analysis", description="Tables 3/4 and the paper's figures from cutlab run records, as one report.")
    parser.add_argument("folders", nargs="+", metavar="RUNS_FOLDER",
                        help="a run folder or a folder of them (searched recursively); several may be given")
    parser.add_argument("--out", required=True, metavar="REPORT_DIR",
                        help="folder for report.md, tables/ and figures/ (created; earlier outputs replaced)")
    parser.add_argument("--gamma-train", type=float, default=None, metavar="G",
                        help="the γ_train of the figures drawn at one level (default: the level with the most cells)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs = collect_runs(*args.folders)
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise AnalysisError(f"--out {out} is a file; pass a folder for the report (it is created if missing)")
        from analysis.report import write_report  # matplotlib is imported only once the input is known good

        command = "python -m analysis " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
        report = write_report(runs, out, gamma_train=args.gamma_train, command=command)
    except AnalysisError as error:
        print(f"analysis: error: {error}", file=sys.stderr)
        return 2
    unusable = runs.runs[~runs.runs["usable"]]
    for _, run in unusable.head(WARNINGS_SHOWN).iterrows():
        print(f"analysis: warning: {run['run']}: {run['state']}: {run['problem']}", file=sys.stderr)
    if len(unusable) > WARNINGS_SHOWN:
        print(f"analysis: warning: {len(unusable) - WARNINGS_SHOWN} more runs not counted (see the report)",
              file=sys.stderr)
    written = sum(figure.written for figure in report.figures)
    print(f"analysis: wrote {report.path} ({len(runs.runs)} runs, {int(runs.runs['usable'].sum())} complete; "
          f"{sum(not t.empty for t in report.tables)} tables, {written} figures, "
          f"{len(report.figures) - written} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
