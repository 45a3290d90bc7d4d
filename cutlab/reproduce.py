"""``cutlab-reproduce --scale smoke|cpu|paper --out DIR``: run the paper's grids, then write the report.

Each dataset's grid is one ``python -m cutlab -m ...`` multirun into ``DIR/runs``; complete runs are
skipped by the app itself, so running the same command again resumes an interrupted reproduction.
Cells whose dataset is absent on this machine, or whose model/dataset cutlab does not implement yet,
are listed as skipped (in the output and in ``DIR/skipped.md``) and the rest runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VIDEO_MODELS = ("dust", "ut")
NOT_IMPLEMENTED = {  # the paper's cells that need code from an open issue
    "model vit": "the ViT denoiser (model=vit, the paper's cell is L=12) is not in these grids yet; run it directly",
    "data avenue": "CUHK Avenue is not in these grids yet (not on this machine); run it with data=avenue data.root=...",
    "data shanghaitech": "ShanghaiTech is not in these grids yet (not on this machine); run it with data=shanghaitech data.root=...",
    "text: ut_text, distilbert, roberta x imdb, mnli (Table 4, Figs 4, 5, 9, 12, 14, 15)":
        "the text models exist (model=ut_text|hf_encoder|distilbert|roberta) but are not in these grids yet; "
        "run sweeps/table4_*.yaml with python -m cutlab -m --config-name table4_ut",
    "llm: causal_lm x alpaca (Fig 6)": "causal-LM fine-tuning exists (model=causal_lm) but needs Llama weights and "
                                       "Alpaca, which are not on this machine",
}


@dataclass(frozen=True)
class Scale:
    """One size of the reproduction: which datasets, depths, gamma_train, and the per-run budget."""

    datasets: tuple[str, ...]
    depths: tuple[int, ...]
    gammas: tuple[float, ...]
    budget: tuple[str, ...] = field(default_factory=tuple)


SCALES = {
    # minutes on a laptop: the whole pipeline on generated video, for CI
    "smoke": Scale(("synthetic",), (2, 3), (0.0, 0.09),
                   ("train.epochs=2", "train.max_steps_per_epoch=3", "data.stride=10", "eval.gamma_test=[0,0.25,0.5,0.75,1]")),
    # ~1.5 h on 2 CPU cores (measured, see README): Table 3's UCSD Ped2 column at L in {3,5,7} and three
    # gamma_train. The budget is cut to fit: 3 epochs of 20 steps (the first is the warm-up) and the same
    # gamma_test range [0, 1] on 6 points instead of 11; a test forward over all 201 windows costs as much
    # as ~100 training steps, so evaluation is half of each run.
    "cpu": Scale(("ucsd_ped2",), (3, 5, 7), (0.0, 0.09, 0.15),
                 ("train.epochs=3", "train.max_steps_per_epoch=20", "eval.gamma_test=[0,0.2,0.4,0.6,0.8,1.0]")),
    # the paper's video grid and budgets, for a GPU cluster
    "paper": Scale(("ucsd_ped2", "ucsd_ped1"), (3, 5, 7), (0.0, 0.09, 0.11, 0.13, 0.15), ("train.epochs=50",)),
}


def dataset_missing(dataset: str, data_dir: Path) -> str | None:
    """Why a dataset cannot run here, or None. Ped2 ships as ../shared's npz; Ped1 needs ``data.root``."""
    if dataset == "synthetic":
        return None
    if dataset == "ucsd_ped2":
        npz = data_dir / "ucsd_ped2" / "ped2_gray160_uint8.npz"
        return None if npz.exists() else f"{npz} not found (set CUTLAB_DATA_DIR to the folder holding ucsd_ped2/)"
    return f"{dataset} is not on this machine (run `python -m cutlab data={dataset} data.root=...` once you have it)"


def grid_command(dataset: str, scale: Scale, runs_dir: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "cutlab", "-m",
        f"model={','.join(VIDEO_MODELS)}", "train=erm,constrained", f"data={dataset}",
        f"L={','.join(map(str, scale.depths))}", f"gamma={','.join(map(str, scale.gammas))}",
        *scale.budget, f"paths.runs_dir={runs_dir}", *extra,
    ]


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
    started = time.perf_counter()
    for dataset in scale.datasets:
        reason = dataset_missing(dataset, data_dir)
        if reason:
            skipped[f"data {dataset}"] = reason
            print(f"cutlab-reproduce: skipping data={dataset}: {reason}", file=sys.stderr)
            continue
        runs = len(VIDEO_MODELS) * 2 * len(scale.depths) * len(scale.gammas)
        print(f"cutlab-reproduce: data={dataset}: {runs} runs into {runs_dir} (complete ones are skipped)", file=sys.stderr)
        result = subprocess.run(grid_command(dataset, scale, runs_dir, args.overrides), cwd=REPO)
        if result.returncode != 0:
            print(f"cutlab-reproduce: error: the data={dataset} grid stopped (exit {result.returncode}); fix the "
                  "message above and run the same command again: finished runs are kept", file=sys.stderr)
            return result.returncode
    out.mkdir(parents=True, exist_ok=True)
    (out / "skipped.md").write_text("# Cells not run\n\n" + "".join(f"- {k}: {v}\n" for k, v in skipped.items()))
    for cell, reason in skipped.items():
        print(f"cutlab-reproduce: not run: {cell}: {reason}", file=sys.stderr)
    from analysis.__main__ import main as analysis_main

    status = analysis_main([str(runs_dir), "--out", str(out / "report")])
    print(f"cutlab-reproduce: {args.scale} scale finished in {time.perf_counter() - started:.0f} s; "
          f"report at {out / 'report' / 'report.md'}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
