"""``cutlab-reproduce --scale smoke``: the paper's pipeline end to end, from training to the report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from conftest import ROOT

FIGURES = ["fig02_rmse_vs_gamma_test", "fig03_rmse_vs_depth", "fig04_accuracy_vs_gamma_test", "fig07_layerwise_loss",
           "fig09_gamma_train_effect", "fig12_descent_ratios", "dual_variables"]


def reproduce(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cutlab.reproduce", "--scale", "smoke", "--out", str(out),
               "wandb.mode=disabled", "progress=false"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_smoke_reproduction_writes_tables_figures_and_report_and_resumes(tmp_path):
    out = tmp_path / "smoke"
    first = reproduce(out)
    report = (out / "report" / "report.md").read_text()
    assert "Table 3" in report and "Table 4" in report and "20 run folders: 20 complete" in report
    table = pd.read_csv(out / "report" / "tables" / "table3_video_mean_rmse.csv")
    assert set(table["model"]) == {"dust", "ut"} and set(table["L"]) == {2, 3} and len(table) == 8
    text = pd.read_csv(out / "report" / "tables" / "table4_text_accuracy_auc.csv")
    assert set(text["model"]) == {"ut_text"} and set(text["dataset"]) == {"imdb"} and len(text) == 2
    for name in ("table3_video_mean_rmse", "table4_text_accuracy_auc"):
        for suffix in ("md", "tex"):
            assert (out / "report" / "tables" / f"{name}.{suffix}").stat().st_size > 200
    for stem in FIGURES:
        for suffix in ("png", "pdf"):
            assert (out / "report" / "figures" / f"{stem}.{suffix}").stat().st_size > 5_000, stem
    skipped = (out / "skipped.md").read_text()
    assert "vit" in skipped and "roberta" in skipped and "not run: model vit" in first.stderr
    assert "constrained UT at gamma_train 0" in skipped and "train=constrained_paper" in skipped
    # the same command again: every run is complete, so nothing trains and no record changes
    records = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("summary.json")}
    second = reproduce(out)
    assert (second.stdout + second.stderr).count("complete; skipped") == 20
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("summary.json")} == records
