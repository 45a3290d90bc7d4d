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
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
os.environ.setdefault("CUTLAB_DATA_DIR", str(REPO.parent / "shared" / "data"))  # the real data beside the checkout
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


def read_cell(runs_dir: Path, model: str, depth: int, epochs: int) -> dict:
    """Both arms' summaries of one cell at this budget."""
    found = {arm: find_run(runs_dir, model, depth, arm, epochs) for arm in ARMS}
    return {arm: json.loads((run_dir / "summary.json").read_text()) for arm, run_dir in found.items() if run_dir}


def figure(model: str, depth: int, arms: dict, budget: int) -> dict:
    new, paper = (arms[arm].get("steps_to_strict_feasibility") for arm in ARMS)
    row = {"model": model, "L": depth, "budget_steps": budget,
           **{f"{arm}_steps_to_feasibility": arms[arm].get("steps_to_strict_feasibility") for arm in ARMS},
           **{f"{arm}_verdict": arms[arm].get("verdict") for arm in ARMS},
           **{f"{arm}_wall_time_s": arms[arm].get("wall_time_s") for arm in ARMS}}
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


def violation_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """Per step, max over constraints of (l - rhs) / rhs on the clock's smoothed losses (EMA 0.95): ℓ_0 <= ε,
    ℓ_l <= (1 - α) ℓ_{l-1} (eq. 3 of the paper). The same quantity in every constraint form, so arms compare."""
    import csv

    import yaml

    alpha = float(yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["alpha"])
    epsilon = json.loads((run_dir / "summary.json").read_text())["epsilon"]
    steps, worst, smoothed = [], [], None
    with open(run_dir / "history.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            losses = [float(row[key]) for key in sorted((k for k in row if k.startswith("loss_")),
                                                          key=lambda k: int(k.split("_")[1]))]
            smoothed = losses if smoothed is None else [0.95 * s + 0.05 * x for s, x in zip(smoothed, losses)]
            bounds = [epsilon] + [(1 - alpha) * previous for previous in smoothed[:-1]]
            steps.append(int(row["step"]))
            worst.append(max(loss / bound - 1 for loss, bound in zip(smoothed, bounds)))
    return steps, worst


def plot(cells: list[tuple[str, int]], runs_dir: Path, epochs: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 3.6), squeeze=False)
    for axis, (model, depth) in zip(axes[0], cells):
        for arm, style in zip(ARMS, ("-", "--")):
            run_dir = find_run(runs_dir, model, depth, arm, epochs)
            if run_dir is not None:
                steps, worst = violation_curve(run_dir)
                axis.plot(steps, worst, style, label=f"train={arm}")
        axis.axhline(0.02, color="grey", linewidth=0.8)  # the verdict's tolerance
        axis.set(title=f"{model}, L={depth}", xlabel="training step", ylabel="largest relative violation",
                 )
        axis.set_yscale("symlog", linthresh=0.1)
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def find_run(runs_dir: Path, model: str, depth: int, arm: str, epochs: int) -> Path | None:
    """The run of one cell and arm at this budget (each run's folder name holds its overrides)."""
    for summary_path in runs_dir.glob("*/summary.json"):
        parts = dict(part.split("=", 1) for part in summary_path.parent.name.split(",") if "=" in part)
        if (parts.get("model"), parts.get("L"), parts.get("train"), parts.get("train.epochs")) == \
                (model, str(depth), arm, str(epochs)):
            return summary_path.parent
    return None


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    lines = ["# Steps to feasibility: train=constrained ÷ train=constrained_paper", "",
             f"{args.data}, gamma_train {args.gamma}, {args.epochs} epochs x {args.steps} steps (the first epoch is the "
             "primal warm-up). Steps to feasibility: the first step from which the smoothed training constraints "
             f"stayed strictly met to the end. Goal: ratio <= {TARGET:.2f}.", "",
             "| model | L | default: steps | paper: steps | ratio | status | verdicts (default / paper) |",
             "|---|---:|---:|---:|---:|---|---|"]
    for row in rows:
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "—"
        never = lambda v: "never" if v is None else str(v)  # noqa: E731
        lines.append(f"| {row['model']} | {row['L']} | {never(row['constrained_steps_to_feasibility'])} | "
                     f"{never(row['constrained_paper_steps_to_feasibility'])} | {ratio} | {row['status']} | "
                     f"{row['constrained_verdict']} / {row['constrained_paper_verdict']} |")
    return "\n".join(lines) + "\n"


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
    rows = [figure(model, depth, read_cell(args.runs_dir, model, depth, args.epochs), budget) for model, depth in cells]
    args.out.write_text(json.dumps({"rows": rows, "command": sys.argv, "wall_time_s": time.time() - started},
                                   indent=2) + "\n")
    (args.out.parent / f"{args.out.stem.upper()}.md").write_text(markdown(rows, args))
    plot(cells, args.runs_dir, args.epochs, args.out.with_suffix(".png"))
    print(markdown(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
