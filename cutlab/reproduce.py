"""``cutlab-reproduce --scale smoke|cpu|paper --out DIR``: run the paper's grids, then write the report.

Each dataset's grid is one ``python -m cutlab -m ...`` multirun into ``DIR/runs``; complete runs are
skipped by the app itself, so running the same command again resumes an interrupted reproduction.
Cells whose dataset is absent on this machine, or that these grids leave out,
are listed as skipped (in the output and in ``DIR/skipped.md``) and the rest runs.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOT_IMPLEMENTED = {  # the paper's cells these grids leave out, and how to run them by hand
    "model vit": "the ViT denoiser (model=vit, the paper's cell is L=12) is not in these grids; "
                 "run sweeps/table3_vit.yaml with python -m cutlab -m --config-name table3_vit",
    "data avenue": "CUHK Avenue is not in these grids (not on this machine); run it with data=avenue data.root=...",
    "data shanghaitech": "ShanghaiTech is not in these grids (not on this machine); run it with "
                         "data=shanghaitech data.root=...",
    "text: distilbert, roberta, mnli (Table 4, Figs 5, 14, 15)":
        "pretrained DistilBERT/RoBERTa weights and the full MNLI set are not on this machine; with them, run "
        "sweeps/table4_pretrained.yaml and sweeps/ablation_*.yaml (python -m cutlab -m --config-name table4_pretrained)",
    "llm: causal_lm x alpaca (Fig 6)": "causal-LM fine-tuning exists (model=causal_lm) but needs Llama weights and "
                                       "Alpaca, which are not on this machine",
}
TINY_IMDB = ("data.train_file=imdb_train_tiny100.jsonl", "data.test_file=imdb_test_tiny100.jsonl")
TEXT_GAMMA_TEST = "eval.gamma_test=[0,0.5,1,1.5,2]"  # Table 4's AUC is over gamma_test in [0, 2] (SPEC section 4)


@dataclass(frozen=True)
class Grid:
    """One multirun of a scale: its dataset, the swept overrides, and the per-run budget."""

    dataset: str
    sweep: tuple[str, ...]
    budget: tuple[str, ...] = field(default_factory=tuple)

    def runs(self) -> int:
        return math.prod(len(override.split("=", 1)[1].split(",")) for override in self.sweep)

    def command(self, runs_dir: Path, extra: list[str]) -> list[str]:
        return [sys.executable, "-m", "cutlab", "-m", f"data={self.dataset}", *self.sweep, *self.budget,
                f"paths.runs_dir={runs_dir}", *extra]


def video_grid(dataset: str, depths: str, gammas: str, *budget: str) -> tuple[Grid, ...]:
    """Table 3's cells: {DUST, UT} x L x gamma_train, constrained and ERM.

    UT at gamma_train = 0 is the one cell train=constrained refuses: its Phi_0 is its input, so l_0 = 0 and the ratio
    form has nothing to divide by. That cell's constrained arm runs with the paper's dual (train=constrained_paper),
    which the report shows as its own arm, and skipped.md says so (UT_AT_ZERO).
    """
    # A run's folder is named by its overrides as written, so gamma=0 and gamma=0.0 are different folders:
    # the video grids keep the "0.0" of the folders earlier versions of this command wrote, so they resume.
    noisy = ",".join(g for g in gammas.split(",") if float(g) > 0)
    zero = ",".join(g for g in gammas.split(",") if float(g) == 0)
    grids = [Grid(dataset, ("model=dust,ut", "train=erm", f"L={depths}", f"gamma={gammas}"), budget),
             Grid(dataset, ("model=dust", "train=constrained", f"L={depths}", f"gamma={gammas}"), budget),
             Grid(dataset, ("model=ut", "train=constrained", f"L={depths}", f"gamma={noisy}"), budget)]
    if zero:
        grids.append(Grid(dataset, ("model=ut", "train=constrained_paper", f"L={depths}", f"gamma={zero}"), budget))
    return tuple(grids)


UT_AT_ZERO = ("constrained UT at gamma_train 0", "train=constrained refuses it (Phi_0 is UT's input, so l_0 = 0 and the "
              "ratio form has nothing to descend from); these grids run that cell with train=constrained_paper")


SCALES: dict[str, tuple[Grid, ...]] = {
    # minutes on a laptop: the whole pipeline on generated video and 100 IMDb reviews, for CI
    "smoke": (
        *video_grid("synthetic", "2,3", "0.0,0.09", "train.epochs=2", "train.max_steps_per_epoch=3", "data.stride=10",
                   "eval.gamma_test=[0,0.25,0.5,0.75,1]"),
        Grid("imdb", ("model=ut_text", "train=erm_text,constrained_text", "L=2", "gamma=0,0.4"),
             (*TINY_IMDB, "train.epochs=1", "data.max_length=64", "data.val_size=20", TEXT_GAMMA_TEST)),
    ),
    # ~2 h on 2 CPU cores (measured, see README): Table 3's UCSD Ped2 column at L in {3,5,7} and three
    # gamma_train, and one Table 4 cell with all-MiniLM-L6-v2 on IMDb. Video budget: 3 epochs of 20 steps (the
    # first is the warm-up) and the gamma_test range [0, 1] on 6 points instead of 11 (a test pass over all 201
    # windows costs as much as ~100 training steps). Text: 1 epoch on 2000 reviews, 500 test reviews.
    "cpu": (
        *video_grid("ucsd_ped2", "3,5,7", "0.0,0.09,0.15", "train.epochs=3", "train.max_steps_per_epoch=20",
                   "eval.gamma_test=[0,0.2,0.4,0.6,0.8,1.0]"),
        Grid("imdb", ("model=hf_encoder", "train=erm_text,constrained_text", "L=6", "gamma=0.4"),
             ("train.epochs=1", "model.lr=1e-4", "data.train_subset=2000", "data.val_size=200", "data.test_subset=500",
              "data.max_length=128", "eval.batch_size=32", TEXT_GAMMA_TEST)),
    ),
    # the paper's grids and budgets, for a GPU cluster
    "paper": (
        *video_grid("ucsd_ped2", "3,5,7", "0.0,0.09,0.11,0.13,0.15", "train.epochs=50"),
        *video_grid("ucsd_ped1", "3,5,7", "0.0,0.09,0.11,0.13,0.15", "train.epochs=50"),
        Grid("imdb", ("model=ut_text", "train=erm_text,constrained_text", "L=3,5,7,9", "gamma=0,0.2,0.4,0.6,0.8,1.0"),
             (TEXT_GAMMA_TEST,)),
        Grid("imdb", ("model=hf_encoder", "train=erm_text,constrained_text", "L=6", "gamma=0,0.2,0.4,0.6,0.8,1.0"),
             (TEXT_GAMMA_TEST,)),
    ),
}


def dataset_missing(dataset: str, data_dir: Path) -> str | None:
    """Why a dataset cannot run here, or None. Ped2 and IMDb ship in ../shared; Ped1 needs ``data.root``."""
    shipped = {"ucsd_ped2": data_dir / "ucsd_ped2" / "ped2_gray160_uint8.npz", "imdb": data_dir / "imdb"}
    if dataset == "synthetic":
        return None
    if dataset in shipped:
        path = shipped[dataset]
        return None if path.exists() else f"{path} not found (set CUTLAB_DATA_DIR to the folder holding {dataset}/)"
    return f"{dataset} is not on this machine (run `python -m cutlab data={dataset} data.root=...` once you have it)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cutlab-reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="smoke")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: reproduce-<scale>)")
    parser.add_argument("overrides", nargs="*", help="extra cutlab overrides for every run, e.g. wandb.mode=disabled")
    args = parser.parse_args(argv)
    scale, out = SCALES[args.scale], (args.out or Path(f"reproduce-{args.scale}")).resolve()
    runs_dir = out / "runs"
    data_dir = Path(os.environ.get("CUTLAB_DATA_DIR", REPO.parent / "shared" / "data"))
    skipped = dict(NOT_IMPLEMENTED)
    skipped[UT_AT_ZERO[0]] = UT_AT_ZERO[1]
    started, stopped = time.perf_counter(), []
    for grid in scale:
        reason = dataset_missing(grid.dataset, data_dir)
        if reason:
            skipped[f"data {grid.dataset}"] = reason
            print(f"cutlab-reproduce: skipping data={grid.dataset}: {reason}", file=sys.stderr)
            continue
        print(f"cutlab-reproduce: data={grid.dataset} {' '.join(grid.sweep)}: {grid.runs()} runs into {runs_dir} "
              "(complete ones are skipped)", file=sys.stderr)
        result = subprocess.run(grid.command(runs_dir, args.overrides), cwd=REPO)
        if result.returncode != 0:  # the other grids still run, and the report shows what is there
            stopped.append(f"the data={grid.dataset} grid ({' '.join(grid.sweep)}) ended with exit {result.returncode}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "skipped.md").write_text("# Cells not run\n\n" + "".join(f"- {k}: {v}\n" for k, v in skipped.items()))
    for cell, reason in skipped.items():
        print(f"cutlab-reproduce: not run: {cell}: {reason}", file=sys.stderr)
    from analysis.__main__ import main as analysis_main

    status = analysis_main([str(runs_dir), "--out", str(out / "report")])
    print(f"cutlab-reproduce: {args.scale} scale finished in {time.perf_counter() - started:.0f} s; "
          f"report at {out / 'report' / 'report.md'}", file=sys.stderr)
    for line in stopped:
        print(f"cutlab-reproduce: error: {line}; the report is partial. Fix the messages above and run the same "
              "command again: finished runs are kept and skipped", file=sys.stderr)
    return 1 if stopped else status


if __name__ == "__main__":
    sys.exit(main())
