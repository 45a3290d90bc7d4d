"""cutlab-reproduce --scale smoke|cpu|paper --out DIR: run the paper's grids, then write the report.

The grids are the sweep files in ``sweeps/`` (cutlab/reproduce_grids.py says which make up a scale). Each is run
as ``python -m cutlab -m --config-name SWEEP ...`` multiruns into ``DIR/runs``; complete runs are skipped by the
app itself, so running the same command again resumes an interrupted reproduction. ``--data NAME=PATH`` and
``--weights NAME=HUB_ID|PATH`` say where the inputs are; a grid whose input is missing is listed as skipped (in
the output and in ``DIR/skipped.md``, with the flag that supplies it) and the rest runs. ``--plan`` prints every
run, its state and the cost estimate (and the sbatch scripts with launcher=slurm) without starting anything.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cutlab.atomic import os_reason, unwritable, write_atomic
from cutlab.config.paths import data_dir
from cutlab.core.progress import rate_text, tally
from cutlab.errors import CutlabError, refuse_blank
from cutlab.hangup import repeated_hang_up, stop_signals
from cutlab.interrupted import INTERRUPTED_EXIT
from cutlab.reproduce_grids import SCALES, UT_AT_ZERO, fair_comparison_trials
from cutlab.reproduce_inputs import WEIGHTS, Inputs, dataset_names, parse_pairs
from cutlab.reproduce_plan import expand_all, format_scale_plan, resolve
from cutlab.run.preemption import PREEMPTED_EXIT
from cutlab.run.records import linked, not_a_file
from cutlab.signal_waits import wait_hearing_signals

LEFT_OUT = {  # the paper's cells the smoke and cpu scales leave out: --scale paper runs them
    "model vit": "the ViT denoiser (Table 3, L = 12)",
    "data avenue": "CUHK Avenue (Table 3)",
    "data shanghaitech": "ShanghaiTech (Table 3)",
    "text: distilbert, roberta, mnli (Table 4, Figs 5, 12, 14, 15)": "pretrained DistilBERT/RoBERTa, MNLI and the "
                                                                     "ablations (the report's Fig 12 is drawn from "
                                                                     "this scale's constrained text runs instead)",
    "llm: causal_lm x alpaca (Fig 6)": "the constrained LLM fine-tuning",
    "depth study (Fig 3)": "the depth study (the report's Fig 3 draws the depths this scale's Table 3 runs have)",
}


def notes(scale: str) -> dict[str, str]:
    """What skipped.md says besides the grids skipped for a missing input."""
    if scale != "paper":
        found = {key: f"{what} is not in the {scale} scale; cutlab-reproduce --scale paper runs it (its --plan names "
                      "the --data and --weights it needs)" for key, what in LEFT_OUT.items()}
    else:
        found = {
            "AlpacaEval (Sec. 6)": "the length-controlled win rates judged by GPT-5 are not implemented (they need an "
                                   "external judge); Fig 6's layerwise loss and token accuracy are run",
            "fair comparison (App. B)": f"each Table 4 cell runs {fair_comparison_trials()} seeds per arm at the "
                                        "cutlab's text default (train=constrained_text; the paper's tuned settings are "
                                        "train=constrained_text_paper), the best of each arm by "
                                        "validation; the paper searched the constrained arm's hyper-parameters (Bayesian, "
                                        "5 trials), which is python -m cutlab.search search=fair_comparison. Table 3 runs "
                                        "one run per cell: the paper tuned video once per model and reused it",
        }
    return found


SKIPPED = "skipped.md"  # the cells a reproduction did not run, or ran otherwise
SKIPPED_HEAD = "# Cells "  # each of its sections' heading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cutlab-reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="smoke",
                        help="smoke (the default: about 1.5 min on 2 cores), cpu (about 2 h) or paper")
    parser.add_argument("-o", "--out", default=None, help="output folder (default: reproduce-<scale>)")
    parser.add_argument("--plan", action="store_true", help="print every run, its state and cost; start nothing")
    parser.add_argument("--data", nargs="+", action="extend", default=[], metavar="NAME=PATH",
                        help=f"where a dataset is ({', '.join(dataset_names())})")
    parser.add_argument("--weights", nargs="+", action="extend", default=[], metavar="NAME=HUB_ID|PATH",
                        help=f"a pretrained checkpoint ({', '.join(WEIGHTS)})")
    parser.add_argument("overrides", nargs="*", help="extra cutlab overrides for every run, e.g. wandb.mode=disabled")
    args = parser.parse_args(argv)
    try:
        refuse_blank("--out", args.out, f"pass a folder, or leave --out out for reproduce-{args.scale}")
        out = Path(args.out or f"reproduce-{args.scale}").resolve()
        check_out_folder(out, writes=not args.plan)
        inputs = Inputs(parse_pairs(args.data, "--data", dataset_names()),
                        parse_pairs(args.weights, "--weights", list(WEIGHTS)), data_dir())
        planned = resolve(args.scale, inputs, out / "runs", args.overrides)
        if args.plan:
            expand_all(planned)
            print(format_scale_plan(args.scale, planned), flush=True)
            return 0
    except CutlabError as error:
        print(f"cutlab-reproduce: error: {error}", file=sys.stderr)
        return 2
    return run(args.scale, planned, out)


def check_out_folder(out: Path, writes: bool = True) -> None:
    """Before any grid runs: the files the reproduction writes in ``out`` are neither a link's target (a planted
    ``skipped.md -> ~/notes.md`` was overwritten, ``report -> elsewhere`` got the report) nor a skipped.md or a
    report.md of one's own. ``--out`` itself, and its runs/, may be links: the user typed the one and may keep runs on
    another disk. With ``writes`` (not for a plan), ``out``, its runs/ and report/ can be written: found only at the
    end, every grid had run first (hours at the cpu scale)."""
    from cutlab_analysis.out_folder import not_ours

    for name in (SKIPPED, "report"):
        problem = linked(out / name)
        if problem:
            raise CutlabError(f"{problem}; cutlab-reproduce writes {name} in --out itself: remove the link, or pass "
                              "another --out")
    skipped = out / SKIPPED
    problem = not_a_file(skipped)
    if problem or (skipped.is_file() and not skipped.read_bytes().startswith(SKIPPED_HEAD.encode())):
        raise CutlabError(f"{problem or f'{skipped} is not the list of cells an earlier reproduction wrote'}; "
                          "cutlab-reproduce writes its own there: move it aside, or pass another --out")
    foreign = not_ours(out / "report")  # cutlab-analysis would refuse it once every grid had run
    if foreign:
        raise CutlabError(f"{foreign[0]} was not written by cutlab-analysis, and the report would replace it; "
                          "cutlab-reproduce writes its report in --out's report/: move that file, or pass another "
                          "--out")
    for folder in (out, out / "runs", out / "report") if writes else ():
        problem = unwritable(folder)
        if problem:
            raise CutlabError(f"cannot write to {folder} ({problem}); cutlab-reproduce writes its runs, skipped.md and "
                              "report there: pass a writable --out")


def run(scale: str, planned, out: Path) -> int:
    skipped, started, stopped = {}, time.perf_counter(), []
    grids = [item for item in planned if not item.skipped]
    # runs done out of the scale's and the time left, as each grid ends (ScaleClock; a resumed reproduction's
    # complete runs are skipped in no time, so its first estimate is low)
    done = tally(f"{scale} scale", sum(item.grid.runs for item in grids), "run", prefix="cutlab-reproduce: ")
    clock = ScaleClock(grids)
    position = 0  # of the grid among those that run
    for item in planned:
        # the grid's own arm (UT's cells run as three grids: ERM, constrained, constrained_paper at gamma 0)
        arm = [o for o in item.grid.overrides if o not in (f"data={item.grid.data}", f"model={item.grid.model}")]
        where = " ".join([f"{item.grid.entry.label}, data={item.grid.data} model={item.grid.model}", *arm])
        if item.skipped:
            skipped[f"{where} ({item.grid.runs} runs)"] = item.skipped
            print(f"cutlab-reproduce: skipping {where}: {item.skipped}", file=sys.stderr)
            continue
        position += 1
        print(f"cutlab-reproduce: {where}: {item.grid.runs} runs into {out / 'runs'} (complete ones are skipped)",
              file=sys.stderr)
        began = time.perf_counter()
        returncode, stops = run_grid(item.argv)
        if stops:
            print(f"cutlab-reproduce: stopped during {where} (exit {returncode}); run the same command again to "
                  "resume: finished runs are kept and skipped, the stopped ones resume from their checkpoints",
                  file=sys.stderr)
            # 75 on SIGTERM, as a run and a sweep exit (a batch script requeues on it); 130 on Ctrl-C or a hang-up
            return PREEMPTED_EXIT if stops[0] == "SIGTERM" else INTERRUPTED_EXIT
        if returncode == 2:  # refused before any run (the line above): the scale's overrides reach every grid alike
            print(f"cutlab-reproduce: error: {where} refused its command (the line above); fix it and run the same "
                  "command again: finished runs are kept and skipped", file=sys.stderr)
            return 2
        if returncode != 0:  # the other grids still run, and the report shows what is there
            stopped.append(f"the grid {' '.join(item.argv[:-1])} ended with exit {returncode}")
        clock.ended(time.perf_counter() - began)
        ended = "finished" if returncode == 0 else f"ended with exit {returncode}"
        done.update(done.done + item.grid.runs, f"grid {position}/{len(grids)} ({where}) {ended}{clock.note()}",
                    left=clock.left())
    skipped.update(notes(scale))
    otherwise = dict([UT_AT_ZERO])  # run, with another setting than the rest of its grid
    report = out / "report" / "report.md"
    try:
        write_skipped_and_clear_report(out, skipped, otherwise, report)
    except OSError as error:  # --out made read-only while the grids ran (check_out_folder saw it writable)
        where = Path(error.filename).parent if error.filename else out
        print(f"cutlab-reproduce: error: cannot write in {where} ({os_reason(error)}); make --out writable and run "
              "the same command again: finished runs are kept and skipped", file=sys.stderr)
        return 2
    except CutlabError as error:  # a full disk
        print(f"cutlab-reproduce: error: {error}", file=sys.stderr)
        return 2
    for cell, reason in skipped.items():
        print(f"cutlab-reproduce: not run: {cell}: {reason}", file=sys.stderr)
    for cell, reason in otherwise.items():
        print(f"cutlab-reproduce: run otherwise: {cell}: {reason}", file=sys.stderr)
    from cutlab_analysis.__main__ import main as analysis_main

    status = analysis_main([str(out / "runs"), "--out", str(out / "report")])
    ended = f"cutlab-reproduce: {scale} scale finished in {time.perf_counter() - started:.0f} s; "
    if status == 0 and report.is_file():  # written now: not a report of one's own the analysis refused
        print(ended + f"report at {report}", file=sys.stderr)
    else:  # analysis said why (no run records, ...) on the line above
        print(ended + "no report was written", file=sys.stderr)
        status = status or 1
    for line in stopped:
        print(f"cutlab-reproduce: error: {line}; the report is partial. Fix the messages above and run the same "
              "command again: finished runs are kept and skipped", file=sys.stderr)
    return 1 if stopped else status


def write_skipped_and_clear_report(out: Path, skipped: dict, otherwise: dict, report: Path) -> None:
    """Write skipped.md and remove an earlier reproduction's report, which must not pass for this one's (report files
    of one's own stay: the analysis refuses them in one line)."""
    from cutlab_analysis.out_folder import not_ours

    out.mkdir(parents=True, exist_ok=True)
    sections = [f"{SKIPPED_HEAD}{title}\n\n" + "".join(f"- {cell}: {why}\n" for cell, why in cells.items())
                for title, cells in (("not run", skipped), ("run otherwise", otherwise))]
    write_atomic(out / SKIPPED, "\n".join(sections))
    kept = not_ours(report.parent)
    for earlier in (report, report.with_suffix(".html")):
        if earlier not in kept:
            earlier.unlink(missing_ok=True)


def run_grid(argv: list[str]) -> tuple[int, list[str]]:
    """One grid's ``python -m cutlab -m ...`` in this folder, like the user's command: (exit status, the stop
    signals this process received meanwhile: Ctrl-C, SIGTERM, a hang-up). The grid runs in its own session and gets
    exactly the signals this process gets, as SIGTERM: the first lets its runs checkpoint at their next step
    (cutlab/run/preemption.py); a second is passed
    on too, on which ``launcher=local`` kills its runs (cutlab/launch/local.py), while an in-process run stops at
    its step as before. subprocess.run would instead kill the grid 0.25 s after a Ctrl-C."""
    child = subprocess.Popen([sys.executable, "-m", "cutlab", *argv], start_new_session=True)
    with _forward_stop_signals(child) as signals:
        returncode = wait_hearing_signals(child)
    return returncode, signals


@contextmanager
def _forward_stop_signals(child: subprocess.Popen) -> Iterator[list[str]]:
    """Within the block, SIGINT/SIGTERM/SIGHUP to this process reach ``child`` as SIGTERM; yields the signals
    received. SIGHUP too: in its own session the grid no longer gets the closed terminal's hang-up itself; it is
    passed on as SIGHUP, once (the shell's hang-up after the terminal's is no second signal), so that the grid too
    sends its lines to /dev/null instead of failing on the closed terminal (cutlab/hangup.py)."""
    received: list[str] = []

    def handler(signum, frame) -> None:
        if repeated_hang_up(signum):
            return
        received.append(signal.Signals(signum).name)
        what = ("stopping: its runs checkpoint at their next step" if len(received) == 1
                else "passed on to the grid again (launcher=local kills its runs on it; an in-process run stops at "
                     "its next step)")
        print(f"cutlab-reproduce: {received[-1]}: {what}", file=sys.stderr, flush=True)
        if child.poll() is None:
            child.send_signal(signal.SIGHUP if signum == signal.SIGHUP else signal.SIGTERM)

    previous = {sig: signal.signal(sig, handler) for sig in stop_signals(signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class ScaleClock:
    """The scale's time left as each grid ends: the grids left of a kind (data, model) already run at that kind's
    own seconds a run, those of a kind not run yet at the rate of all the grids so far, which ``note`` says. The rate
    so far alone had counted the smoke scale's UT and text runs at its first grid's DUST rate. No prior cost per kind:
    the ratios change with the machine, its load and the threads (on 2 cores that first estimate of the rest was 1.0
    times the time it took at threads=1, 1.4 times under load, and 2.6 times on the machine of an audit)."""

    def __init__(self, grids: list) -> None:
        self.grids, self.ran, self.spent = grids, 0, {}  # spent: kind -> [seconds, runs]

    def ended(self, seconds: float) -> None:
        """The next grid ran in ``seconds``."""
        grid = self.grids[self.ran].grid
        spent = self.spent.setdefault(_kind(grid), [0.0, 0])
        spent[0], spent[1], self.ran = spent[0] + seconds, spent[1] + grid.runs, self.ran + 1

    def per_run(self, kind: tuple | None = None) -> float:
        """Seconds a run of ``kind``, measured; of every grid so far where ``kind`` has not run (or is None)."""
        if kind in self.spent:
            seconds, runs = self.spent[kind]
        else:
            seconds, runs = sum(s for s, _ in self.spent.values()), sum(r for _, r in self.spent.values())
        return seconds / runs if runs else 0.0

    def left(self) -> float:
        return sum(item.grid.runs * self.per_run(_kind(item.grid)) for item in self.grids[self.ran:])

    def note(self) -> str:
        """Which runs left are counted at the rate of other kinds, and at what rate."""
        unrun = [item.grid for item in self.grids[self.ran:] if _kind(item.grid) not in self.spent]
        if not unrun:
            return ""
        kinds = ", ".join(dict.fromkeys(f"data={grid.data} model={grid.model}" for grid in unrun))
        ran = [f"data={data} model={model}" for data, model in self.spent]
        source = ran[0] if len(ran) == 1 else f"the {len(ran)} kinds run so far"
        per_run = self.per_run()
        return (f"; {sum(grid.runs for grid in unrun)} runs left are of a kind not run yet ({kinds}), counted at "
                f"{rate_text(1 / per_run if per_run else None, 'run')}, the rate of {source}")


def _kind(grid) -> tuple:
    return grid.data, grid.model


if __name__ == "__main__":
    sys.exit(main())
