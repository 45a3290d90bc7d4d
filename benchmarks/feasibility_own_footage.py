"""The feasibility defaults on footage nobody here chose them on: a made-up scene through the bring-your-own-video path.

    .venv/bin/python benchmarks/feasibility_own_footage.py

Renders six clips of a camera panning slowly over a large smooth texture (a "street") with dark blobs walking across
it, at 160x160, as folders of PNG frames (the layout ``data=video_folder`` reads), then trains DUST and UT at L=5,
gamma_train 0.09 with ``train=constrained`` (cutlab's defaults), ``train=constrained_paper`` and ``train=erm`` at the
cpu scale's budget (3 epochs of at most 20 steps; the footage gives 4 a epoch) through the app's own multirun, and
tabulates verdicts, in-distribution descent and the test mean RMSE. DUST at L=5 is deep (``model.deep_from_layers``),
so its default carries the augmented Lagrangian (rho 3); a second multirun trains it with ``train.penalty=0`` (the
deep default before it) beside it. Neither the scene nor its statistics (panning, texture, blob sizes) were seen by
the feasibility study. Writes ``benchmarks/own_footage.json`` and ``benchmarks/OWN_FOOTAGE.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from suite.paths import ROOT as REPO  # also points cutlab at the real data and weights beside the checkout
from suite.runs import overrides_of

HERE = Path(__file__).resolve().parent
ARMS = ("constrained", "constrained_paper", "erm")


def render_clip(folder: Path, seed: int, frames: int = 40, size: int = 160) -> None:
    """A slow pan over a smooth random texture, with 3 dark blobs walking at their own speeds."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0.25, 0.85, size=(12, 24))
    texture = np.kron(coarse, np.ones((40, 40)))  # 480 x 960 blocky street
    kernel = np.ones(15) / 15
    for axis in (0, 1):  # soften the blocks
        texture = np.apply_along_axis(lambda row: np.convolve(row, kernel, mode="same"), axis, texture)
    blobs = [(rng.uniform(0, size), rng.uniform(20, size - 20), rng.uniform(-2.5, 2.5), rng.uniform(6, 12))
             for _ in range(3)]
    yy, xx = np.mgrid[0:size, 0:size]
    folder.mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        left = int(60 + 3 * t)  # the camera pans 3 px a frame
        frame = texture[100:100 + size, left:left + size].copy()
        for x0, y0, speed, radius in blobs:
            x = (x0 + speed * t) % size
            frame[(xx - x) ** 2 + ((yy - y0) / 1.8) ** 2 < radius ** 2] *= 0.35
        Image.fromarray((255 * frame.clip(0, 1)).astype(np.uint8), mode="L").save(folder / f"{t:03d}.png")


def largest_violation(summary: dict) -> tuple[int, float] | None:
    """(layer, violation / its right-hand side) of the constraint that misses most on validation."""
    violations = (summary.get("feasibility") or {}).get("relative_violations")
    if not violations:
        return None
    layer = max(range(len(violations)), key=violations.__getitem__)
    return layer, violations[layer]


def relative(command: list[str]) -> list[str]:
    """The command as recorded: without the interpreter, paths relative to the repository (not this machine's)."""
    return [argument.replace(f"{REPO}/", "") for argument in command[1:]]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()  # no options; --help says what it runs
    footage = HERE / ".own_footage"
    runs = HERE / ".own_footage_runs"
    for index in range(6):  # the last one (by name) is the test split, one more is held out for validation
        if not (footage / f"clip{index}").exists():
            render_clip(footage / f"clip{index}", seed=100 + index)
    command = [sys.executable, "-m", "cutlab", "-m", "data=video_folder", f"data.root={footage}", "model=dust,ut",
               "L=5", "gamma=0.09", f"train={','.join(ARMS)}", "train.epochs=3", "train.max_steps_per_epoch=20",
               "eval.gamma_test=[0,0.2,0.4,0.6,0.8,1.0]", "wandb.mode=disabled", "launcher=local",
               f"paths.runs_dir={runs}"]
    without_penalty = [*command[:4], *(a for a in command[4:] if not a.startswith(("model=", "train="))),
                       "model=dust", "train=constrained", "train.penalty=0"]
    for each in (command, without_penalty):
        print("$", " ".join(each[1:]), flush=True)
        subprocess.run(each, cwd=REPO, check=True)
    rows = []
    for summary_path in sorted(runs.glob("*/summary.json")):
        parts = overrides_of(summary_path.parent)
        summary = json.loads(summary_path.read_text())
        ind = summary.get("in_distribution", {})
        train = parts.get("train") + (f", train.penalty={parts['train.penalty']}" if "train.penalty" in parts else "")
        rows.append({"model": parts.get("model"), "train": train, "verdict": summary.get("verdict"),
                     "test_mean_rmse": summary.get("test_mean_metric"),
                     "descends_in_distribution": ind.get("strictly_decreasing"),
                     "test_loss_by_layer_at_gamma_train": ind.get("test_layer_loss"),
                     "max_layer_ratio": ind.get("max_layer_ratio"),
                     "largest_validation_violation": largest_violation(summary),
                     "steps_to_strict_feasibility": summary.get("steps_to_strict_feasibility"),
                     "training_steps": summary.get("steps")})
    record = {"commands": [relative(command), relative(without_penalty)], "rows": rows}
    (HERE / "own_footage.json").write_text(json.dumps(record, indent=2) + "\n")
    steps_run = "/".join(sorted({str(row["training_steps"]) for row in rows}))
    lines = ["# The defaults on footage of our own making (data=video_folder)", "",
             "Six rendered clips (a slow pan over a smooth texture, dark blobs walking across), 160x160, L=5, "
             f"gamma_train 0.09, 3 epochs of at most 20 steps ({steps_run} training steps: the footage is small); "
             "`python benchmarks/feasibility_own_footage.py`. Largest validation violation: the layer whose descent "
             "constraint misses most, by how much of its right-hand side.", "",
             "| model | train | verdict | largest validation violation | steps to strict feasibility (training) "
             "| test mean RMSE | descends at gamma_train | test loss by layer | max l_l/l_{l-1} |",
             "|---|---|---|---|---:|---:|---|---|---:|"]
    for row in rows:
        losses = ", ".join(f"{v:.3g}" for v in row["test_loss_by_layer_at_gamma_train"] or [])
        constrained = row["train"] != "erm"
        steps = "—" if not constrained else row["steps_to_strict_feasibility"] or "never"
        worst = row["largest_validation_violation"]
        worst = "—" if not constrained or worst is None else \
            "none" if worst[1] <= 0 else f"layer {worst[0]} by {100 * worst[1]:.0f} %"
        lines.append(f"| {row['model']} | {row['train']} | {row['verdict']} | {worst} | {steps} | "
                     f"{row['test_mean_rmse']:.2f} | "
                     f"{row['descends_in_distribution']} | {losses} | {row['max_layer_ratio']:.3g} |")
    (HERE / "OWN_FOOTAGE.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
