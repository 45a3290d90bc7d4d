"""report.html: one file with every figure embedded, opened in a real headless browser (Chromium) and checked on
its screenshot; the figures' titles name each run's own α and ε, runs with equal configs are told apart by their
seed, and runs that are not strictly feasible are drawn differently.

Real runs: a tiny sweep of ``python -m cutlab`` (two seeds of the constrained default with ε = auto, ERM, and the
constrained run held to a tolerance of 0, which ends infeasible). Chromium is Debian's ``chromium`` package
(tests/install_services.sh installs it for CI); without it the screenshot test skips here and fails under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import unavailable
from helpers.analysis import analysis_cli
from helpers.cli import cutlab

TINY = ["L=2", "train.epochs=2", "train.max_steps_per_epoch=3", "eval.gamma_test=[0,0.5,1]", "wandb.mode=disabled",
        "progress=false", "threads=1"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CONSTRAINED_BLUE = np.array([0x00, 0x72, 0xB2])  # analysis.figures.ARM_STYLE["constrained"]: only figures have it


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("html") / "runs"
    cutlab(["-m", "train=constrained", "seed=0,1", *TINY], runs, timeout=600)
    cutlab(["-m", "train=erm", *TINY], runs, timeout=300)
    cutlab(["train=constrained", "train.lr=0.01", "eval.feasibility_tol=0", "run_name=strict", *TINY], runs,
           timeout=300)
    cutlab(["train=constrained", "gamma=0.15", "train.lr=0.01", "eval.feasibility_tol=0", "run_name=strict_g0.15",
            *TINY], runs, timeout=300)  # a second gamma_train: Fig 9 is drawn too
    out = runs.parent / "report"
    result = analysis_cli(str(runs), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out / 'report.md'} and {out / 'report.html'}" in result.stdout
    return out


def test_the_html_report_is_one_file_with_every_figure_embedded(report):
    page = (report / "report.html").read_text()
    figures = sorted(p.name for p in (report / "figures").glob("*.png"))
    assert len(figures) >= 4
    assert page.count('<img src="data:image/png;base64,') == len(figures)
    assert 'src="figures/' not in page  # nothing the page needs lies beside it
    assert "<table>" in page and "<h2>Feasibility</h2>" in page
    assert "eval.gamma_test=_0,0.5,1_,seed=0" in page  # a run name's underscores stay text, not emphasis
    markdown = (report / "report.md").read_text()  # the Markdown report is kept, with its relative links
    assert all(f"figures/{name}" in markdown for name in figures)
    assert "could not be drawn" not in markdown  # no figure failed on the not-feasible styles
    assert "fig09_gamma_train_effect.png" in figures and "dual_variables.png" in figures


def test_titles_show_each_runs_own_alpha_and_epsilon_and_its_seed(report):
    from analysis.collect import collect_runs
    from analysis.figure_marks import line_style
    from analysis.figures import dual_panel_title

    table = collect_runs(report.parent / "runs")
    constrained = table.runs[table.runs["constrained"] == True]  # noqa: E712
    titles = {}
    for _, run in constrained.iterrows():
        summary = json.loads((Path(run["path"]) / "summary.json").read_text())
        title = dual_panel_title(constrained, run)
        assert f"α=0.25 · ε=auto={summary['epsilon']:.4g} · seed {run['seed']}" in title, title
        assert "6.5" not in title and "alpha=" not in title  # not the paper's ε (model.paper.epsilon)
        assert title.endswith(summary["verdict"]) or f"\n{summary['verdict']} (" in title
        titles[run["run"]] = title
        dotted = line_style(run).get("linestyle") not in (None, "-")
        assert dotted == (summary["verdict"] != "feasible"), (run["run"], summary["verdict"])
    assert len(set(titles.values())) == len(titles) == 4  # two runs of one config, told apart by seed
    assert "infeasible" in titles["strict"]  # held to tolerance 0, it misses: drawn dotted (checked above)


def browser() -> str:
    for name in BROWSERS:
        if shutil.which(name):
            return shutil.which(name)
    unavailable("no headless browser (Debian: apt-get install chromium; tests/install_services.sh does it)")


def test_the_html_report_in_headless_chromium(report):
    """Chromium renders the page from the file alone (the folder's figures are moved away first): the screenshot
    holds the report's text and the embedded figures' pixels."""
    from PIL import Image

    alone = report.parent / "alone"
    alone.mkdir(exist_ok=True)
    page = shutil.copy(report / "report.html", alone / "report.html")
    shot = report.parent / "report_screenshot.png"
    command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--window-size=1280,6000", f"--screenshot={shot}", Path(page).resolve().as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOME": str(report.parent)})  # its profile stays in the temp folder
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    if os.environ.get("CUTLAB_KEEP_SCREENSHOT"):  # to look at it: CUTLAB_KEEP_SCREENSHOT=/some/file.png
        shutil.copy(shot, os.environ["CUTLAB_KEEP_SCREENSHOT"])
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.shape[:2] == (6000, 1280)
    dark = (pixels.sum(axis=2) < 200).mean()  # text
    blue = (np.abs(pixels - CONSTRAINED_BLUE).sum(axis=2) < 40).sum()  # the constrained arm's lines in the figures
    assert dark > 0.002 and blue > 500, (dark, blue)
    assert re.search(r"<h1>", (alone / "report.html").read_text())


def test_record_text_with_asterisks_shows_as_written(tmp_path):
    # a footage folder named "clips *new*" read "clips <em>new</em>" in the page: the README says record text shows
    # as written
    from analysis.html_report import write_html
    from analysis.markdown import inert

    page = write_html(f"| data |\n|---|\n| {inert('my|clips *new* **x**')} |\n", tmp_path).read_text()
    assert "my|clips *new* **x**" in page and "<em>" not in page and "<strong>" not in page
