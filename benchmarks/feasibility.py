"""Steps to feasibility: cutlab's default dual (train=constrained) against the paper's (train=constrained_paper).

    .venv/bin/python benchmarks/feasibility.py                 # Ped2, DUST and UT at L=5, gamma_train 0.09
    .venv/bin/python benchmarks/feasibility.py --epochs 12 --cells dust:3 ut:7

Each cell is trained with both presets through the app's own multirun (``python -m cutlab -m``, two runs at a time
with the local launcher), for a budget long enough that the paper's dual has a chance to get there too. The figure
per cell is the step from which the smoothed training constraints stayed met to the end
(``summary.json: steps_to_strict_feasibility``, cutlab.core.feasibility_clock), new ÷ paper; when the paper's dual
never gets there the ratio is not defined and the record says so with the budget. Evaluation runs at gamma_train
only: this benchmark reads the training history, not the test metric.

Writes ``benchmarks/feasibility.json``, ``benchmarks/FEASIBILITY.md`` and the figure ``benchmarks/feasibility.png``
(committed): per cell, both arms' largest relative violation over the training steps, on the same smoothed losses
the clock reads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from suite.paths import ROOT as REPO  # also points cutlab at the real data and weights beside the checkout
from suite.runs import overrides_of

HERE = Path(__file__).resolve().parent
ARMS = ("constrained", "constrained_paper")
TARGET = 1 / 3  # the goal: the default gets there in at most a third of the paper's steps


def run_cells(cells: list[tuple[str, int]], args: argparse.Namespace, runs_dir: Path) -> None:
    for model, depth in cells:
        command = [sys.executable, "-m", "cutlab", "-m", f"data={args.data}", f"model={model}", f"L={depth}",
                   f"gamma={args.gamma}", f"train={','.join(ARMS)}", f"train.epochs={args.epochs}",
                   f"train.max_steps_per_epoch={args.steps}", f"eval.gamma_test=[{args.gamma}]", "wandb.mode=disabled",
                   "launcher=local", f"paths.runs_dir={runs_dir}"]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=REPO, check=True)


def find_runs(runs_dir: Path, cells: list[tuple[str, int]], epochs: int, gamma: str) -> dict[tuple[str, int, str], Path]:
    """Each (model, L, arm) run of the cells at this budget and gamma_train, from one look at ``runs_dir`` (each run's
    provenance holds its overrides); a run that has not completed is left out."""
    wanted = {(model, str(depth), arm, str(epochs), gamma): (model, depth, arm) for model, depth in cells for arm in ARMS}
    found = {}
    for summary_path in runs_dir.glob("*/summary.json"):
        parts = overrides_of(summary_path.parent)
        key = wanted.get((parts.get("model"), parts.get("L"), parts.get("train"), parts.get("train.epochs"),
                          parts.get("gamma")))
        if key is not None and key not in found:
            found[key] = summary_path.parent
    return found


def read_cell(found: dict[tuple[str, int, str], Path], model: str, depth: int) -> dict:
    """Both arms' summaries of one cell (those that ran), each with its primal warm-up from the run's config: the
    default's depends on the model and L, so the record reads it rather than assuming it."""
    from omegaconf import OmegaConf

    return {arm: {**json.loads((found[model, depth, arm] / "summary.json").read_text()),
                  "warmup_epochs": OmegaConf.load(found[model, depth, arm] / "config.yaml").train.warmup_epochs}
            for arm in ARMS if (model, depth, arm) in found}


def figure(model: str, depth: int, arms: dict, curves: dict, budget: int) -> dict:
    new, paper = (arms[arm].get("steps_to_strict_feasibility") for arm in ARMS)
    row = {"model": model, "L": depth, "budget_steps": budget,
           **{f"{arm}_minibatch_misses": minibatch_misses(curves[arm]) for arm in curves},
           **{f"{arm}_steps_to_feasibility": arms[arm].get("steps_to_strict_feasibility") for arm in ARMS},
           **{f"{arm}_verdict": verdict_words(arms[arm]) for arm in ARMS},
           **{f"{arm}_warmup_epochs": arms[arm].get("warmup_epochs") for arm in ARMS},
           **{f"{arm}_wall_time_s": arms[arm].get("wall_time_s") for arm in ARMS},
           **{f"{arm}_test_metric": arms[arm].get("test_mean_metric") for arm in ARMS}}  # at gamma_train only
    if new is not None and paper is not None:
        row["ratio"] = new / paper
        row["status"] = "met" if row["ratio"] <= TARGET else "NOT met"
    elif new is not None:
        row["ratio"] = None
        row["status"] = f"paper's dual never feasible within {budget} steps; the default from step {new}"
    else:
        row["ratio"] = None
        row["status"] = f"the default never feasible within {budget} steps"
    return row


def verdict_words(summary: dict) -> str | None:
    """The validation verdict with each violated layer's miss as a fraction of its bound: "infeasible (4: +8%)"."""
    feasibility = summary.get("feasibility") or {}
    misses = [f"{layer}: {feasibility['relative_violations'][layer]:+.0%}"
              for layer in feasibility.get("violated_layers", [])]
    return summary.get("verdict") if not misses else f"{summary.get('verdict')} ({', '.join(misses)})"


def violation_curve(run_dir: Path, epsilon: float | None) -> dict:
    """Per step, max over the active constraints of (l - rhs) / rhs: ``smoothed`` on the feasibility clock's own
    smoothed losses, ``minibatch`` on the step's own losses; ℓ_0 <= ε, ℓ_l <= (1 - α) ℓ_{l-1} (eq. 3 of the paper),
    the run's constraints as the run built them. The same quantity in every constraint form, so arms compare. Also
    the verdict's tolerance (eval.feasibility_tol)."""
    import csv

    import torch
    from omegaconf import OmegaConf

    from cutlab.core.feasibility_clock import FeasibilityClock
    from cutlab.run.build import constraints_of

    cfg = OmegaConf.load(run_dir / "config.yaml")  # resolved when the run started
    clock = FeasibilityClock(constraints_of(cfg, epsilon), cfg.eval.feasibility_tol)
    curve = {"steps": [], "smoothed": [], "minibatch": [], "tolerance": clock.tolerance}
    with open(run_dir / "history.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            losses = torch.tensor([float(row[f"loss_{layer}"]) for layer in range(cfg.L + 1)], dtype=torch.float64)
            clock.update(int(row["step"]), losses, torch.zeros_like(losses))
            active = clock.constraints.active_mask(len(losses))
            curve["steps"].append(int(row["step"]))
            for key, values in (("smoothed", clock.smoothed), ("minibatch", losses)):
                curve[key].append(float(clock.constraints.relative_violations(values)[active].max()))
    return curve


def minibatch_misses(curve: dict) -> dict:
    """How far single minibatches missed, which the smoothed clock averages away: the largest relative violation
    and the last step that missed by more than the tolerance (None: none did)."""
    missed = [step for step, worst in zip(curve["steps"], curve["minibatch"]) if worst > curve["tolerance"]]
    return {"largest": max(curve["minibatch"]), "last_step_beyond_tolerance": missed[-1] if missed else None}


def plot(cells: list[tuple[str, int]], curves: dict[tuple[str, int], dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 3.6), squeeze=False)
    for axis, (model, depth) in zip(axes[0], cells):
        for arm, style in zip(ARMS, ("-", "--")):
            if arm in curves[model, depth]:
                curve = curves[model, depth][arm]
                axis.plot(curve["steps"], curve["smoothed"], style, label=f"train={arm}")
                axis.axhline(curve["tolerance"], color="grey", linewidth=0.8)  # the verdict's tolerance
        axis.set(title=f"{model}, L={depth}", xlabel="training step", ylabel="largest relative violation",
                 )
        axis.set_yscale("symlog", linthresh=0.1)
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


NOTES = "## Notes"  # a written section after this heading is kept when the record is regenerated


def markdown(rows: list[dict], args: argparse.Namespace, figure_name: str, notes: str) -> str:
    lines = ["# Steps to feasibility: train=constrained ÷ train=constrained_paper", "",
             f"{args.data}, gamma_train {args.gamma}, {args.epochs} epochs x {args.steps} steps, of which each arm's "
             "primal warm-up epochs (multipliers frozen at 0) are in the table. Steps to feasibility: the first step "
             "from which the smoothed training constraints stayed strictly met to the end. "
             f"Goal: ratio <= {TARGET:.2f}.",
             "", "| model | L | default: steps | paper: steps | ratio | status | warm-up epochs (default / paper) "
             "| verdicts (default / paper) | test RMSE at gamma_train (default / paper) "
             "| wall time per run, s (default / paper) |",
             "|---|---:|---:|---:|---:|---|---|---|---|---|"]
    both = lambda row, key, form: " / ".join("—" if row[f"{arm}_{key}"] is None else form.format(row[f"{arm}_{key}"])  # noqa: E731
                                             for arm in ARMS)
    for row in rows:
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "—"
        never = lambda v: "never" if v is None else str(v)  # noqa: E731
        lines.append(f"| {row['model']} | {row['L']} | {never(row['constrained_steps_to_feasibility'])} | "
                     f"{never(row['constrained_paper_steps_to_feasibility'])} | {ratio} | {row['status']} | "
                     f"{both(row, 'warmup_epochs', '{}')} | "
                     f"{row['constrained_verdict']} / {row['constrained_paper_verdict']} | "
                     f"{both(row, 'test_metric', '{:.2f}')} | {both(row, 'wall_time_s', '{:.0f}')} |")
    lines += ["", "Single minibatches, which the clock smooths: the largest relative violation, and the last step that "
              "missed by more than the tolerance (default / paper):", ""]
    for row in rows:
        lines.append(f"- {row['model']}, L={row['L']}: " + " / ".join(
            "—" if f"{arm}_minibatch_misses" not in row else minibatch_words(row[f"{arm}_minibatch_misses"])
            for arm in ARMS))
    command = " ".join(["benchmarks/feasibility.py", *sys.argv[1:]])
    lines += ["", f"Command: `.venv/bin/python {command}` (complete runs in the runs folder are reused).", "",
              f"![largest relative violation over training, both arms]({figure_name})", "",
              "The figure: per cell, each arm's largest relative violation (l - bound) / bound over the training "
              "steps, on the smoothed losses the feasibility clock reads; the grey line is the verdict's tolerance.",
              ""]
    return "\n".join(lines) + (f"\n{notes}" if notes else "")


def minibatch_words(misses: dict) -> str:
    last = misses["last_step_beyond_tolerance"]
    return f"up to {misses['largest']:+.0%}, " + ("never beyond the tolerance" if last is None
                                                  else f"last at step {last}")


def kept_notes(path: Path) -> str:
    """The written ``## Notes`` section of an earlier record, to carry into the regenerated one."""
    text = path.read_text() if path.is_file() else ""
    return text[text.index(NOTES):] if NOTES in text else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="ucsd_ped2")
    parser.add_argument("--gamma", default="0.09")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--cells", nargs="+", default=["dust:5", "ut:5"], help="model:L pairs")
    parser.add_argument("--runs-dir", type=Path, default=HERE / ".feasibility_runs",
                        help="where the runs go (complete runs are reused: rerunning resumes)")
    parser.add_argument("--out", type=Path, default=HERE / "feasibility.json",
                        help="the JSON record; FEASIBILITY.md and feasibility.png go beside it, named after it")
    args = parser.parse_args(argv)
    cells = [(cell.split(":")[0], int(cell.split(":")[1])) for cell in args.cells]
    started = time.time()
    run_cells(cells, args, args.runs_dir)
    budget = args.epochs * args.steps
    found = find_runs(args.runs_dir, cells, args.epochs, args.gamma)
    summaries = {(model, depth): read_cell(found, model, depth) for model, depth in cells}
    curves = {(model, depth): {arm: violation_curve(found[model, depth, arm], summary["epsilon"])
                               for arm, summary in summaries[model, depth].items()} for model, depth in cells}
    rows = [figure(model, depth, summaries[model, depth], curves[model, depth], budget) for model, depth in cells]
    # each run's own wall time is in its row; a rerun that reuses complete runs takes seconds
    args.out.write_text(json.dumps({"rows": rows, "command": sys.argv, "this_invocation_s": time.time() - started},
                                   indent=2) + "\n")
    record = args.out.parent / f"{args.out.stem.upper()}.md"
    text = markdown(rows, args, args.out.with_suffix(".png").name, kept_notes(record))
    record.write_text(text)
    plot(cells, curves, args.out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
