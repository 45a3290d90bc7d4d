"""``cutlab-reproduce``: the smoke scale end to end (training to report), and the paper scale's plan (golden)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import GOLDEN, ROOT

FIGURES = ["fig02_rmse_vs_gamma_test", "fig03_rmse_vs_depth", "fig04_accuracy_vs_gamma_test", "fig07_layerwise_loss",
           "fig09_gamma_train_effect", "fig12_descent_ratios", "dual_variables"]


def reproduce(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cutlab.reproduce", "--scale", "smoke", "--out", str(out),
               "wandb.mode=disabled", "progress=false"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_smoke_reproduction_writes_tables_figures_and_report_and_resumes(tmp_path):
    out = tmp_path / "smoke"
    first = reproduce(out)
    report = (out / "report" / "report.md").read_text()
    assert "Table 3" in report and "Table 4" in report and "20 run folders: 20 complete" in report
    table = pd.read_csv(out / "report" / "tables" / "table3_video_mean_rmse.csv")
    assert set(table["model"]) == {"dust", "ut"} and set(table["L"]) == {2, 3} and len(table) == 8
    text = pd.read_csv(out / "report" / "tables" / "table4_text_accuracy_auc.csv")
    # the smoke scale's 100 reviews of 64 tokens are named, never read as the paper's IMDb
    assert set(text["model"]) == {"ut_text"} and len(text) == 2 and set(text["dataset"]) == {
        "imdb (max_length=64, test_file=imdb_test_tiny100.jsonl, train_file=imdb_train_tiny100.jsonl, val_size=20)"}
    for name in ("table3_video_mean_rmse", "table4_text_accuracy_auc"):
        for suffix in ("md", "tex"):
            assert (out / "report" / "tables" / f"{name}.{suffix}").stat().st_size > 200
    for stem in FIGURES:
        for suffix in ("png", "pdf"):
            assert (out / "report" / "figures" / f"{stem}.{suffix}").stat().st_size > 5_000, stem
    skipped = (out / "skipped.md").read_text()
    assert "vit" in skipped and "roberta" in skipped and "not run: model vit" in first.stderr
    # it runs with train=constrained_paper: it was listed under "Cells not run" and said "not run"
    not_run, otherwise = skipped.split("# Cells run otherwise\n")
    assert "constrained UT at gamma_train 0" in otherwise and "train=constrained_paper" in otherwise
    assert "constrained UT" not in not_run and "run otherwise: constrained UT at gamma_train 0" in first.stderr
    # runs done out of the scale's and the time left, one line as each grid ends
    tallies = re.findall(r"cutlab-reproduce: smoke scale: (\d+)/(\d+) runs done \(\d+%\), .*, \d\d:\d\d elapsed, "
                         r"\d\d:\d\d left; grid (\d+)/(\d+) \(.*\) finished", first.stderr)
    assert [int(t[2]) for t in tallies] == list(range(1, len(tallies) + 1)) and len(tallies) > 1, first.stderr[-3000:]
    assert tallies[-1][0] == tallies[-1][1] and tallies[-1][2] == tallies[-1][3]
    # the same command again: every run is complete, so nothing trains and no record changes
    records = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("summary.json")}
    second = reproduce(out)
    assert second.stderr.count("complete; skipped") == 20
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("summary.json")} == records


# ------------------------------------------------------------------------------ the paper scale's plan
PAPER_RUNS = {"table3": 180, "table3_vit": 30, "table4_ut": 480, "table4_pretrained": 240, "ablation_alpha": 18,
              "ablation_dual_lr": 15, "depth": 24, "fig6_llm": 2}  # 989: Tables 3, 4 (5 seeds per arm), Figs 3, 5, 6


def write_inputs(root: Path) -> dict[str, list[str]]:
    """Every dataset and checkpoint of the paper as a tiny fixture in its real layout: the --data and --weights items."""
    import shutil

    from PIL import Image
    from transformers import (DistilBertConfig, DistilBertModel, LlamaConfig, LlamaForCausalLM, RobertaConfig,
                              RobertaModel, ViTConfig, ViTModel)

    from conftest import SHARED
    from test_causal_lm import alpaca_rows
    from test_text_data import GLUE_HEADER, write_acl_imdb
    from test_video_loaders import make_frames, write_jpgs, write_video

    frames = make_frames(3, 64, 36, seed=0)
    for split in ("training_videos", "testing_videos"):
        write_video(root / "avenue" / "Avenue Dataset" / split / "01.avi", frames)
    write_video(root / "shanghaitech" / "training" / "videos" / "01_001.avi", frames)
    write_jpgs(root / "shanghaitech" / "testing" / "frames" / "01_0014", frames)
    for split in ("Train", "Test"):
        clip = root / "ucsd" / "UCSDped2" / split / f"{split}001"
        clip.mkdir(parents=True)
        for i, frame in enumerate(frames):
            Image.fromarray(frame[..., 0]).save(clip / f"{i + 1:03d}.tif")
    write_acl_imdb(root / "imdb")
    (root / "mnli").mkdir()
    row = ["0", "1", "0e", "fiction", "(", "(", "(", "(", "A premise.", "A hypothesis.", *["neutral"] * 6]
    for name in ("train.tsv", "dev_matched.tsv"):
        (root / "mnli" / name).write_text("\t".join(GLUE_HEADER) + "\n" + "\t".join(row) + "\n")
    (root / "alpaca_data.json").write_text(json.dumps(alpaca_rows(4)))
    tiny = dict(hidden_size=16, num_attention_heads=2, intermediate_size=32)
    ViTModel(ViTConfig(num_hidden_layers=12, image_size=32, patch_size=16, **tiny)).save_pretrained(root / "vit")
    DistilBertModel(DistilBertConfig(n_layers=6, dim=16, n_heads=2, hidden_dim=32)).save_pretrained(root / "distilbert")
    RobertaModel(RobertaConfig(num_hidden_layers=12, **tiny)).save_pretrained(root / "roberta")
    LlamaForCausalLM(LlamaConfig(num_hidden_layers=32, num_key_value_heads=2, vocab_size=300, **tiny)).save_pretrained(root / "llama")
    for name, tokenizer in (("distilbert", "distilbert-base-uncased"), ("roberta", "roberta-base-tokenizer"),
                            ("llama", "roberta-base-tokenizer")):
        for file in (SHARED / "models" / tokenizer).glob("*.json"):
            shutil.copy(file, root / name / file.name)
    return {"data": [f"avenue={root / 'avenue'}", f"shanghaitech={root / 'shanghaitech'}", f"ucsd_ped2={root / 'ucsd'}",
                     f"imdb={root / 'imdb'}", f"mnli={root / 'mnli'}", f"alpaca={root / 'alpaca_data.json'}"],
            "weights": [f"{name}={root / name}" for name in ("vit", "distilbert", "roberta", "llama")]}


@pytest.fixture(scope="module")
def inputs():
    """A short folder (run ids hold the locations given, and a name over 200 characters would be hashed)."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    try:
        yield root, write_inputs(root)
    finally:
        shutil.rmtree(root)


def paper_plan(capsys, out: Path, *args: str) -> tuple[str, dict[str, list[tuple[str, str]]]]:
    """The printed plan, and its runs per sweep as (state, id)."""
    from cutlab.reproduce import main

    assert main(["--scale", "paper", "--plan", "--out", str(out), *args]) == 0
    text = capsys.readouterr().out
    runs, sweep = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            sweep = line.rsplit("(sweeps/", 1)[1].split(".yaml")[0]
            runs[sweep] = []
        elif line and not line.startswith("#"):
            _, state, run_id = line.split()
            runs[sweep].append((state, run_id))
    assert not out.exists(), "a plan starts nothing and writes nothing"
    return text, runs


def golden_text(runs: dict[str, list[tuple[str, str]]], root: Path) -> str:
    fixtures = re.sub(r"[^A-Za-z0-9._=,+-]", "_", str(root))  # as a run folder spells the location
    return "".join(f"## {sweep} {len(items)}\n" + "".join(f"{state} {run_id.replace(fixtures, 'FIXTURES')}\n"
                                                          for state, run_id in items) for sweep, items in runs.items())


@pytest.mark.slow
def test_the_paper_plan_with_every_input_given_matches_its_golden_file(inputs, tmp_path, monkeypatch, capsys):
    root, flags = inputs
    (tmp_path / "no-data").mkdir()
    monkeypatch.setenv("CUTLAB_DATA_DIR", str(tmp_path / "no-data"))  # nothing comes from a default location
    text, runs = paper_plan(capsys, tmp_path / "out", "--data", *flags["data"], "--weights", *flags["weights"])
    assert {sweep: len(items) for sweep, items in runs.items()} == PAPER_RUNS
    assert {state for items in runs.values() for state, _ in items} == {"new"} and "# skipped:" not in text
    ids = [run_id for items in runs.values() for _, run_id in items]
    assert len(ids) == 989 and len(set(ids)) == 977  # Fig 3's L in {3, 5, 7} at gamma_train 0.09 are Table 3's runs
    assert {i for _, i in runs["depth"]} - {i for _, i in runs["table3"]} == {i for _, i in runs["depth"] if "L=3" not in i
                                                                          and "L=5" not in i and "L=7" not in i}
    assert sum("train=constrained_paper" in i for _, i in runs["table3"]) == 9  # UT at gamma_train 0, 3 L x 3 data
    table4 = [i for _, i in runs["table4_pretrained"]]
    assert sum("model=roberta" in i and "data=imdb" in i and "train=constrained_text" in i for i in table4) == 30  # Fig 12
    assert all(any(f"seed={s}," in i for s in range(5)) for i in table4 + [i for _, i in runs["table4_ut"]])
    assert all("L=6" in i for i in table4 if "distilbert" in i) and all("L=12" in i for i in table4 if "roberta" in i)
    assert "# total: 977 runs: 977 to run, 0 complete, 0 skipped" in text  # each folder once: run time is not counted twice
    assert "# 989 runs are listed above: 12 belong to two grids (one folder each) and count once" in text
    assert golden_text(runs, root) == (GOLDEN / "plan_paper.txt").read_text()


@pytest.mark.slow
def test_the_paper_plan_skips_each_missing_input_visibly_and_plans_the_rest(inputs, tmp_path, capsys):
    """Here: the shipped UCSD Ped2 and IMDb, RoBERTa and Alpaca given; no Avenue, ShanghaiTech, full MNLI, ViT,
    DistilBERT or Llama."""
    from conftest import SHARED, require_shared

    require_shared(SHARED / "data" / "ucsd_ped2" / "ped2_gray160_uint8.npz")
    require_shared(SHARED / "data" / "imdb" / "imdb_train.jsonl.gz")
    root, _ = inputs
    text, runs = paper_plan(capsys, tmp_path / "out", "--weights", f"roberta={root / 'roberta'}",
                            "--data", f"alpaca={root / 'alpaca_data.json'}")
    assert {sweep: len(items) for sweep, items in runs.items()} == PAPER_RUNS
    for flag in ("--data avenue=PATH", "--data shanghaitech=PATH", "--data mnli=PATH", "--weights vit=HUB_ID|PATH",
                 "--weights distilbert=HUB_ID|PATH", "--weights llama=HUB_ID|PATH"):
        assert f"{flag}" in text, flag
    # each hint gives its dataset's layout whole, though its config's comment runs over two lines
    assert "testing_videos/01.avi ... (16 training, 21 testing videos))" in text
    assert "testing/frames/01_0014/000.jpg ... (330 training videos, 107 test clips))" in text
    skipped = {sweep: sum(state == "skipped" for state, _ in items) for sweep, items in runs.items()}
    assert skipped == {"table3": 120, "table3_vit": 30, "table4_ut": 240, "table4_pretrained": 180, "ablation_alpha": 0,
                       "ablation_dual_lr": 0, "depth": 0, "fig6_llm": 2}
    assert "# total: 977 runs: 405 to run, 0 complete, 572 skipped" in text  # the 12 shared runs are Ped2's
    # one source: Table 3 is sweeps/table3*.yaml as python -m cutlab plans it, but for UT at gamma_train 0
    by_hand = (GOLDEN / "plan_table3.txt").read_text().split()
    expected = [i.replace("train=constrained", "train=constrained_paper")
                if "gamma=0," in i and "model=ut" in i and i.endswith("train=constrained") else i for i in by_hand]
    assert sorted(i for _, i in runs["table3"] + runs["table3_vit"]) == sorted(expected)
    assert golden_text(runs, root) == (GOLDEN / "plan_paper_missing.txt").read_text()


def test_a_scale_plan_refuses_a_launcher_value_its_launch_would_refuse(tmp_path, capsys):
    from cutlab.reproduce import main

    assert main(["--scale", "smoke", "--plan", "-o", str(tmp_path / "out"), "launcher=local",  # -o: --out
                 "launcher.max_parallel=0"]) == 2
    assert "launcher.max_parallel must be a whole number >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_scale_plan_counts_runs_that_would_be_refused_apart_from_those_to_run(tmp_path, capsys):
    # every run listed "refused" and the totals said "16 to run", with the refused runs' cost among the unmeasured
    from cutlab.reproduce import main

    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out"), "train.epochs=abc"]) == 0
    totals = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# Table 3 (smoke): ")]
    assert totals == ["# Table 3 (smoke): 16 runs: 0 to run, 0 complete, 16 refused, 0 skipped; no estimate yet"]


def test_a_scale_plan_says_how_far_its_planning_is_on_stderr(tmp_path, capsys, monkeypatch):
    """The paper scale's --plan composes ~1000 configs: 27 s with nothing said, then 1082 lines at once. Lines of the
    grids planned come on stderr (here at every grid), and stdout holds the plan alone."""
    from cutlab import reproduce_plan
    from cutlab.reproduce import main

    monkeypatch.setattr(reproduce_plan, "PLAN_LINE_EVERY_S", 0.0)
    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("cutlab-reproduce: planning: ")]
    assert lines and lines[-1].startswith(f"cutlab-reproduce: planning: {len(lines) - 1}/{len(lines)} grids"), err
    assert out.startswith("# cutlab-reproduce --scale smoke --plan") and "planning" not in out


def test_a_slurm_plan_of_a_scale_shows_each_grids_sbatch_script(tmp_path, capsys):
    from cutlab.reproduce import main

    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out"), "launcher=slurm", "launcher.profile=gpu"]) == 0
    text = capsys.readouterr().out
    assert text.count("# the sbatch script (profile gpu)") == 5  # DUST; UT's ERM, constrained, gamma 0; the text grid
    assert "#SBATCH --array=0-7%8" in text and "#SBATCH --partition=gpu" in text and not (tmp_path / "out").exists()


def test_bad_inputs_are_named_with_the_flag_that_fixes_them(tmp_path, capsys):
    from cutlab.reproduce import main
    from cutlab.reproduce_inputs import Inputs

    assert main(["--scale", "smoke", "--plan", "--data", "nosuch=/x"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--data nosuch=/x: expected NAME=PATH with NAME one of" in error
    (tmp_path / "empty").mkdir()
    _, reason = Inputs(data={"avenue": str(tmp_path / "empty")}).for_data("avenue")
    assert reason.startswith(f"--data avenue={tmp_path / 'empty'}: ") and "not the Avenue layout" in reason
    _, reason = Inputs(weights={"vit": str(tmp_path / "empty")}).for_model("vit")
    assert reason.startswith("--weights vit=") and "lacks config.json, weights" in reason
    # a key the grids sweep or split on: gamma=0.2 replaced every grid's gamma (UT's gamma-0 grid ran at 0.2) silently
    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out"), "gamma=0.2"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "gamma is set by the smoke scale's grids (they set or sweep " in error, error
    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out"), "train.epochs=2"]) == 0  # a budget
    # the runs went to paths.runs_dir while the report read --out's runs/: "no run records"
    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out"), f"paths.runs_dir={tmp_path}"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "the scale's runs go to runs/ under --out, where its report reads" in error
    # --out "$OUT" with OUT unset: the current folder got runs/ and report/ (Path('') is '.')
    assert main(["--scale", "smoke", "--plan", "--out", ""]) == 2
    error = capsys.readouterr().err
    assert error == "cutlab-reproduce: error: --out is empty; pass a folder, or leave --out out for reproduce-smoke\n"


def test_weights_found_nowhere_are_one_line_naming_where_they_were_looked_for(tmp_path, monkeypatch):
    """--weights vit=nosuch was passed on as a hub id (model.pretrained=nosuch) and failed in each run, after
    huggingface_hub's retries, with no network; a checkpoint in the models folder was not found by its name."""
    from conftest import SHARED, require_shared
    from cutlab.reproduce_inputs import Inputs

    dinov2 = require_shared(SHARED / "models" / "dinov2-small").resolve()
    monkeypatch.setenv("CUTLAB_MODELS_DIR", str(dinov2.parent))
    assert Inputs(weights={"vit": "dinov2-small"}).for_model("vit") == ([f"model.pretrained={dinov2}"], None)
    _, reason = Inputs(weights={"vit": "nosuch"}).for_model("vit")
    assert reason and "\n" not in reason, reason
    assert reason.startswith(f"--weights vit=nosuch: looked for a folder {Path.cwd() / 'nosuch'}")
    assert f"a folder {dinov2.parent / 'nosuch'} (the models folder, $CUTLAB_MODELS_DIR)" in reason
    assert "the hub id nosuch in the Hugging Face cache " in reason and "none is there" in reason
    models, hub = tmp_path / "models", tmp_path / "hub"
    models.mkdir()
    snapshot = hub / "models--roberta-base" / "snapshots" / "0123abc"  # the cache's own layout, as hf download fills it
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (hub / "models--roberta-base" / "refs").mkdir()
    (hub / "models--roberta-base" / "refs" / "main").write_text("0123abc")
    assert Inputs(weights={"roberta": "roberta-base"}, models_dir=models, hub_cache=hub).for_model("roberta") == \
        (["model.source=roberta-base"], None)


def test_an_input_no_grid_reads_is_refused_and_the_plans_commands_paste_into_a_shell(tmp_path, capsys):
    """--data ucsd_ped1=... was accepted and ignored; a location with a space printed a command that split it; a
    fresh plan said 'estimated 0 s of run time', which reads as no cost."""
    import shlex

    from cutlab.reproduce import main

    assert main(["--scale", "smoke", "--plan", "--data", "ucsd_ped1=/nonexistent"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("cutlab-reproduce: error: --data ucsd_ped1=/nonexistent: no "
                                                       "grid of the smoke scale reads ucsd_ped1 (they read "), error
    assert main(["--scale", "smoke", "--plan", "--weights", "vit=google/vit-base-patch16-224-in21k"]) == 2
    assert "no grid of the smoke scale runs model=vit; drop it" in capsys.readouterr().err
    # a path for the generated video was accepted and never read; a NAME given twice kept the last without a word
    assert main(["--scale", "smoke", "--plan", "--data", "synthetic=/nonexistent"]) == 2
    assert "--data synthetic=/nonexistent: the synthetic video is generated, not read from files; drop it" in \
        capsys.readouterr().err
    assert main(["--scale", "cpu", "--plan", "--data", "imdb=/a", "--data", "imdb=/b"]) == 2
    assert "--data imdb= is given twice (/a and /b); give each NAME once" in capsys.readouterr().err
    # a file that is no npz passed the input check; every run of the Ped2 grids then stopped on it
    (tmp_path / "bad.npz").write_text("not npz\n")
    assert main(["--scale", "cpu", "--plan", "--out", str(tmp_path / "cpu"), "--data",
                 f"ucsd_ped2={tmp_path / 'bad.npz'}"]) == 0
    assert (f"# skipped: 18 runs of data=ucsd_ped2 model=dust: --data ucsd_ped2={tmp_path / 'bad.npz'}: data.root="
            f"{tmp_path / 'bad.npz'} is not a readable .npz archive") in capsys.readouterr().out
    from cutlab.reproduce_inputs import check_dataset  # the same for Alpaca: a file was all it checked

    (tmp_path / "bad.json").write_text("garbage\n")
    assert check_dataset("alpaca", str(tmp_path / "bad.json"), {}) == (
        f"{tmp_path / 'bad.json'}: line 1 is not valid JSON (Expecting value); each line must be one {{instruction, "
        "input, output} object")
    out = tmp_path / "my runs"
    assert main(["--scale", "smoke", "--plan", "--out", str(out), "wandb.mode=disabled"]) == 0
    text = capsys.readouterr().out
    commands = [line.removeprefix("# command: ") for line in text.splitlines() if line.startswith("# command: ")]
    assert commands and all(shlex.split(c)[-2] == f"paths.runs_dir={out / 'runs'}" for c in commands), commands
    assert "# total: 20 runs: 20 to run, 0 complete, 0 skipped; no estimate yet, 20 runs of 10 kinds not measured" \
        in text and "estimated 0 s" not in text


def test_the_plans_commands_carry_the_users_pythonpath_so_a_model_of_their_own_imports(tmp_path, capsys, monkeypatch):
    """A model of the user's own is imported from their PYTHONPATH (README, "A new model"): the plan's "to calibrate"
    command left it out (and its overrides unquoted, eval.gamma_test=[0,0.5] a shell glob), so pasted into a new
    shell it failed on that import."""
    import shlex

    from cutlab.reproduce import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "my_project")  # relative, as the README writes it
    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out"), "wandb.mode=disabled"]) == 0
    text = capsys.readouterr().out
    calibrate = [line.split("to calibrate, run one of each first, e.g. ", 1)[1] for line in text.splitlines()
                 if "to calibrate, run one of each first" in line]
    grids = [line.removeprefix("# command: ") for line in text.splitlines() if line.startswith("# command: ")]
    assert calibrate and grids
    for command in calibrate + grids:
        words = shlex.split(command)
        assert words[:4] == [f"PYTHONPATH={tmp_path / 'my_project'}", "python", "-m", "cutlab"], command
    assert any(word.startswith("eval.gamma_test=[") for word in shlex.split(calibrate[0])), calibrate[0]


@pytest.mark.slow
def test_a_paper_plan_on_slurm_without_a_gpu_profile_says_so(tmp_path, capsys):
    """The README's example planned every paper run, Llama 8B's among them, as a 1-core, 4 GB CPU job, unsaid."""
    from cutlab.reproduce import main

    assert main(["--scale", "paper", "--plan", "--out", str(tmp_path / "out"), "launcher=slurm"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "# note: the SLURM profile default asks no GPU (1 core, 4 GB, 60 min a job); the paper's runs want "
        "launcher.profile=gpu (slurm/gpu.yaml) or a profile of your own")
    assert main(["--scale", "paper", "--plan", "--out", str(tmp_path / "out"), "launcher=slurm",
                 "launcher.profile=gpu"]) == 0
    assert "# note: the SLURM profile" not in capsys.readouterr().out


def test_no_report_is_announced_when_none_was_written(tmp_path, capsys):
    """Every grid skipped (nothing ran): the analysis finds no run records, so no report is written, none is
    announced, and the exit status says so."""
    from cutlab.reproduce import run

    from cutlab_analysis.out_folder import HTML_TITLE, REPORT_HEADING

    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.md").write_text(f"{REPORT_HEADING}\n\nan earlier reproduction's report\n")
    (out / "report" / "report.html").write_text(f"<html><head><title>{HTML_TITLE}</title></head></html>\n")
    status = run("smoke", [], out)
    err = capsys.readouterr().err
    assert status != 0 and "no report was written" in err and "report at" not in err, err
    assert not (out / "report" / "report.md").exists() and not (out / "report" / "report.html").exists()


def test_a_report_md_of_ones_own_in_the_report_folder_is_kept(tmp_path, capsys):
    # cutlab-reproduce deleted it before the analysis could refuse it (cutlab-analysis --out keeps it, in one line)
    from cutlab.reproduce import run

    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.md").write_text("# My own notes\n\ndo not lose\n")
    assert run("smoke", [], out) != 0
    assert (out / "report" / "report.md").read_text() == "# My own notes\n\ndo not lose\n"
    # the analysis refused it, and the last line said "report at OUT/report/report.md": one's own file
    err = capsys.readouterr().err
    assert "report at" not in err and "no report was written" in err, err


def test_each_grid_is_named_by_its_arm_where_one_cell_is_split_in_three(tmp_path, capsys):
    # UT's three grids (ERM, constrained, constrained_paper at gamma 0) each read "Table 3 (smoke), data=synthetic
    # model=ut" in the progress and skip lines
    from cutlab.reproduce import run
    from cutlab.reproduce_grids import SCALES, grids
    from cutlab.reproduce_plan import ScaleGrid

    planned = [ScaleGrid(grid, [], "not given here") for grid in grids(SCALES["smoke"][0])]
    run("smoke", planned, tmp_path / "out")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cutlab-reproduce: skipping ")]
    assert [line.split(": ")[1] for line in lines] == [
        "skipping Table 3 (smoke), data=synthetic model=dust",
        "skipping Table 3 (smoke), data=synthetic model=ut train=erm",
        "skipping Table 3 (smoke), data=synthetic model=ut train=constrained gamma=0.09",
        "skipping Table 3 (smoke), data=synthetic model=ut train=constrained_paper gamma=0.0"]


def test_an_override_that_every_run_refuses_stops_the_reproduction_at_its_first_grid(tmp_path):
    """train.epochs=abc reaches every grid alike: it ran all five, about 100 lines of the same refusal, then "no
    report was written" followed by "the report is partial". Now the first grid refuses it before any run (the sweep's
    one line), the reproduction stops there with exit 2, and nothing is written."""
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "cutlab.reproduce", "--scale", "smoke", "--out", str(out),
                             "train.epochs=abc"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert "train.epochs must be a whole number, got 'abc'" in lines[-2] and lines[-2].startswith("cutlab: error: ")
    assert lines[-1] == ("cutlab-reproduce: error: Table 3 (smoke), data=synthetic model=dust refused its command (the "
                         "line above); fix it and run the same command again: finished runs are kept and skipped")
    assert len(lines) == 3 and not out.exists(), result.stderr


def test_the_time_left_counts_each_kind_at_its_own_rate_and_says_which_it_could_not():
    """The time left had counted every grid left at the rate so far: the smoke scale's UT and text runs at its first
    grid's DUST rate (1.4 to 2.6 times the time they took). A kind already run is now counted at its own rate; the
    line names the runs of a kind not run yet and the rate they are counted at."""
    from types import SimpleNamespace

    from cutlab.reproduce import ScaleClock
    from cutlab.reproduce_grids import SCALES, grids

    planned = [SimpleNamespace(grid=grid) for entry in SCALES["cpu"] for grid in grids(entry)]
    kinds = [(item.grid.data, item.grid.model, item.grid.runs) for item in planned]
    assert kinds == [("ucsd_ped2", "dust", 18), ("ucsd_ped2", "ut", 9), ("ucsd_ped2", "ut", 6), ("ucsd_ped2", "ut", 3),
                     ("imdb", "hf_encoder", 2)]
    clock = ScaleClock(planned)
    clock.ended(18 * 10.0)  # DUST: 10 s a run
    assert clock.left() == pytest.approx(20 * 10.0)  # nothing else measured: the rate so far
    assert clock.note() == ("; 20 runs left are of a kind not run yet (data=ucsd_ped2 model=ut, data=imdb "
                            "model=hf_encoder), counted at 10 s/run, the rate of data=ucsd_ped2 model=dust")
    clock.ended(9 * 2.0)  # UT: 2 s a run
    # the two UT grids left at UT's 2 s a run, not at the 7.3 s of all 27 runs so far; MiniLM's at that 7.3 s
    assert clock.left() == pytest.approx(9 * 2.0 + 2 * 198 / 27)
    assert clock.note() == ("; 2 runs left are of a kind not run yet (data=imdb model=hf_encoder), counted at 7.33 "
                            "s/run, the rate of the 2 kinds run so far")
    for seconds in (6 * 2.0, 3 * 2.0, 2 * 100.0):
        clock.ended(seconds)
    assert clock.left() == 0 and clock.note() == ""


def test_a_line_given_its_time_left_shows_it_in_place_of_the_rate_so_far():
    from cutlab.core.progress import tally

    stream = io.StringIO()
    meter = tally("cpu scale", 41, "run", stream=stream)
    meter.update(27, "grid 1/5", left=3725.0)
    assert ", 1:02:05 left; grid 1/5" in stream.getvalue()


def test_a_stop_signal_the_kernel_hands_to_another_thread_still_reaches_the_grid(tmp_path, monkeypatch):
    """Python runs a signal's handler in the main thread only; the reproduction waited for its grid in waitpid
    without end, so a SIGTERM the kernel handed to another of its threads (it has a native one) was passed on
    only once the grid had ended. ``pthread_kill`` hands it to a thread other than the main one every time."""
    import threading

    from helpers.contract import cutlab_env
    from helpers.signals import sigterm_to_a_thread_other_than_main

    from cutlab.reproduce import run_grid

    assert threading.current_thread() is threading.main_thread(), "the handlers exist in the main thread only"
    for key, value in cutlab_env(tmp_path / "runs").items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    history = tmp_path / "runs" / "aside" / "history.csv"
    done = sigterm_to_a_thread_other_than_main(history)
    # 2000 steps: half a minute and more to the end; stopped, the run ends at its next step
    argv = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2000", "eval.gamma_test=[0]", "progress=false",
            "checkpoint.every_steps=1000", "wandb.mode=disabled", "threads=1", "run_name=aside"]
    try:
        assert run_grid(argv) == (75, ["SIGTERM"])
    finally:
        done.set()
    assert len(pd.read_csv(history)) < 2000


# SIGTERM (a batch system's stop) ends it 75 as it ends a run and a sweep, for a script that requeues on 75 (it was 130)
@pytest.mark.parametrize("name, exit_code", [("SIGINT", 130), pytest.param("SIGHUP", 130, marks=pytest.mark.slow),
                                             pytest.param("SIGTERM", 75, marks=pytest.mark.slow)])
def test_ctrl_c_lets_the_running_grid_checkpoint_and_the_reproduction_stops(tmp_path, name, exit_code):
    """Ctrl-C (SIGINT to the terminal's process group) reaches the grid's sweep once, as SIGTERM: its run stops at a
    step with a checkpoint and the reproduction stops, saying the same command resumes. subprocess.run used to kill
    the grid 0.25 s after the Ctrl-C, mid-step, leaving the run without its checkpoint. A closed terminal's SIGHUP
    (to the reproduction alone: the grid runs in its own session) stops it the same way."""
    import signal
    import time

    out = tmp_path / "smoke"
    # 1000 epochs: the first run is still training when the signal comes (one epoch of the generated video is a few
    # steps, and on a busy machine that run once ended between the test's look at it and the signal)
    command = [sys.executable, "-m", "cutlab.reproduce", "--scale", "smoke", "--out", str(out), "wandb.mode=disabled",
               "progress=false", "train.epochs=1000", "train.max_steps_per_epoch=100000", "checkpoint.every_steps=100000"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 300
    histories: list[Path] = []
    while not histories or len(histories[0].read_text().splitlines()) < 3:  # a few steps into the first run
        assert process.poll() is None and time.time() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.2)
        histories = list((out / "runs").glob("*/history.csv"))
    if name == "SIGINT":
        os.killpg(process.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    else:
        process.send_signal(getattr(signal, name))
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == exit_code, stderr[-3000:]
    assert f"cutlab-reproduce: {name}: stopping" in stderr and "run the same command again to resume" in stderr
    run = histories[0].parent
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted", summary
    from cutlab.run.checkpoints import load_checkpoint

    steps = len(pd.read_csv(run / "history.csv"))
    assert load_checkpoint(run)["trainer"]["progress"]["step"] == steps >= 2, "checkpointed at the step it stopped"
    assert not (out / "report").exists(), "a stopped reproduction writes no report"


def test_help_says_which_scale_runs_without_scale(capsys):
    # a bare cutlab-reproduce started the smoke scale's training, and --help showed no default
    from cutlab.reproduce import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "smoke (the default" in " ".join(capsys.readouterr().out.split())


def test_the_input_check_reads_the_files_the_scales_own_runs_read(tmp_path, capsys, monkeypatch):
    # the smoke scale reads 100 IMDb reviews (its sweep's data.train_file); the check asked for the full data set's
    # files and skipped the text grid where only those 100 were at hand
    import shutil

    from conftest import SHARED, require_shared
    from cutlab.reproduce import main

    (tmp_path / "data" / "imdb").mkdir(parents=True)
    for split in ("train", "test"):
        reviews = require_shared(SHARED / "data" / "imdb" / f"imdb_{split}_tiny100.jsonl")
        shutil.copy(reviews, tmp_path / "data" / "imdb")
    monkeypatch.setenv("CUTLAB_DATA_DIR", str(tmp_path / "data"))
    assert main(["--scale", "smoke", "--plan", "--out", str(tmp_path / "out")]) == 0
    assert "# Table 4 (smoke): 4 runs: 4 to run, 0 complete, 0 skipped" in capsys.readouterr().out


@pytest.mark.parametrize("planted", ["skipped-link", "report-link", "skipped-of-ones-own"])
def test_a_planted_link_or_ones_own_skipped_md_in_out_is_refused_before_any_grid_runs(tmp_path, capsys, planted):
    """skipped.md -> a file of one's own was overwritten with the list of cells, report -> elsewhere got the whole
    report, and a skipped.md of one's own was replaced without a word."""
    from cutlab.reproduce import main

    out, notes = tmp_path / "out", tmp_path / "my_notes.md"
    out.mkdir()
    notes.write_text("my precious notes\n")
    if planted == "skipped-link":
        (out / "skipped.md").symlink_to(notes)
        expected = f"{out / 'skipped.md'} is a symbolic link (to {notes}); cutlab-reproduce writes skipped.md in --out"
    elif planted == "report-link":
        (out / "report").symlink_to(tmp_path, target_is_directory=True)
        expected = f"{out / 'report'} is a symbolic link (to {tmp_path}); cutlab-reproduce writes report in --out"
    else:
        (out / "skipped.md").write_text("my precious notes\n")
        expected = f"{out / 'skipped.md'} is not the list of cells an earlier reproduction wrote; cutlab-reproduce"
    assert main(["--scale", "smoke", "--out", str(out), "wandb.mode=disabled"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"cutlab-reproduce: error: {expected}"), error
    assert notes.read_text() == "my precious notes\n" and not (out / "runs").exists()
