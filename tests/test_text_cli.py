"""Text classification end to end through ``python -m cutlab`` with tiny budgets, and its bad-input messages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from conftest import SHARED, require_shared
from helpers.cli import cutlab
from helpers.contract import assert_same_records, start_and_kill

IMDB_TINY = ["data=imdb", "data.train_file=imdb_train_tiny100.jsonl", "data.test_file=imdb_test_tiny100.jsonl",
             "data.max_length=32", "data.val_size=8", "data.test_subset=8", "train.batch_size=4",
             "eval.gamma_test=[0,0.5,1]", "eval.batch_size=8", "wandb.mode=disabled"]
MNLI_TINY = ["data=mnli", "data.train_file=mnli_tiny.jsonl", "data.test_file=mnli_tiny.jsonl", "data.max_length=32",
             "data.val_size=4", "data.test_subset=4", "train.batch_size=4", "eval.gamma_test=[0,1]",
             "eval.batch_size=4", "wandb.mode=disabled"]
DISTILBERT = ["model=distilbert", f"model.source={SHARED / 'models' / 'distilbert-base-uncased'}", "model.pretrained=false", "L=6"]
ROBERTA = ["model=roberta", f"model.source={SHARED / 'models' / 'roberta-base-tokenizer'}", "model.pretrained=false", "L=12"]


def check_record(run: Path, layers: int, steps: int, gammas: list[float]) -> dict:
    """A complete run record: per-layer history, accuracy per layer and gamma_test, and the AUC over gamma_test."""
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["metric"] == "accuracy" and summary["steps"] == steps
    history = pd.read_csv(run / "history.csv")
    assert len(history) == steps and {f"loss_{l}" for l in range(layers)} <= set(history.columns)
    assert history.filter(like="loss_").notna().all().all()
    test = pd.read_csv(run / "eval.csv").query("split == 'test' and metric == 'accuracy'")
    assert sorted(test["layer"].unique()) == list(range(layers)) and sorted(test["gamma_test"].unique()) == gammas
    assert test["value"].between(0, 1).all()
    last = test.query(f"layer == {layers - 1}").sort_values("gamma_test")
    auc = float(torch.trapezoid(torch.tensor(last["value"].values), torch.tensor(last["gamma_test"].values)))
    assert summary["test_auc"] == pytest.approx(auc, rel=1e-6)  # trapezoid in gamma units, not normalised
    assert summary["sigma_x"] > 0
    return summary


def run_of(run: Path) -> tuple[str, bool]:
    """(model name, constrained) of a run folder, from its resolved config (long folder names are shortened)."""
    config = OmegaConf.load(run / "config.yaml")
    return config.model.name, bool(config.train.constrained)


@pytest.fixture(scope="module")
def imdb_runs(tmp_path_factory) -> Path:
    """MiniLM (pretrained, all 6 layers) and the UT text classifier, constrained and ERM, on real IMDb rows."""
    require_shared(SHARED / "data" / "imdb")
    runs = tmp_path_factory.mktemp("imdb") / "runs"
    pretrained = cutlab(["-m", "model=hf_encoder", "L=6", "train=constrained_text,erm_text", "train.epochs=1",
                         "train.max_steps_per_epoch=2", *IMDB_TINY], runs)
    (runs.parent / "hf_encoder_stderr.txt").write_text(pretrained.stderr)  # for the log test below
    cutlab(["-m", "model=ut_text", "L=3", "train=constrained_text,erm_text", "train.epochs=2",
            "train.max_steps_per_epoch=2", *IMDB_TINY], runs)
    return runs


def test_a_pretrained_text_runs_log_holds_plain_lines(imdb_runs):
    # transformers drew its own "Loading weights: 0%|..." bar, carriage returns and all, into logs without a terminal
    log = (imdb_runs.parent / "hf_encoder_stderr.txt").read_text()  # its "\r" read as "\n" (universal newlines)
    assert "[cutlab] done: " in log and not re.search(r"\d+%\|", log), log[:2000]  # no tqdm bar: "  0%|     |"


@pytest.mark.parametrize("model, layers, steps", [("hf_encoder", 7, 2), ("ut_text", 4, 4)])
@pytest.mark.parametrize("train", ["constrained_text", "erm_text"])
def test_imdb_records_are_complete(imdb_runs, model, layers, steps, train):
    run = next(p for p in imdb_runs.iterdir() if p.is_dir() and not p.name.startswith("_") and run_of(p) == (model, train == "constrained_text"))
    summary = check_record(run, layers, steps, [0.0, 0.5, 1.0])
    train_config = OmegaConf.load(run / "config.yaml").train
    if train == "constrained_text":  # cutlab's text default, the same for every model and dataset
        settings = ("epsilon", "constraint_form", "detach_prev", "dual_optimizer", "dual_lr", "resilience")
        assert [train_config[key] for key in settings] == [5.0, "ratio", False, "sgd", 0.1, "off"]
    history = pd.read_csv(run / "history.csv")
    if train == "erm_text":
        assert (history.filter(like="lambda_") == 0).all().all() and summary["verdict"] == "unconstrained"
    else:  # no warm-up for text: the multipliers move from the first step
        assert (history.filter(like="lambda_").abs().sum(axis=1) > 0).any()
    assert "imdb_train_tiny100.jsonl" in summary["data_source"]


@pytest.mark.parametrize("model, L, paper_row", [("hf_encoder", 6, (1.0, 1.07, 1.0)), ("ut_text", 3, (0.9, 3.45, 0.8))])
def test_the_papers_language_settings_stay_one_override_away_from_the_text_default(model, L, paper_row):
    from cutlab.config.compose import compose_run_config

    def train(preset: str):
        return compose_run_config(["data=imdb", f"model={model}", f"L={L}", f"train={preset}"]).train

    paper, default = train("constrained_text_paper"), train("constrained_text")
    # the paper's IMDb row of the model (epsilon, dual lr, c), difference form, dual Adam, resilience as weight decay
    assert (paper.epsilon, paper.dual_lr, paper.resilience_c) == paper_row
    assert (paper.constraint_form, paper.dual_optimizer, paper.resilience) == ("difference", "adam", "weight_decay")
    assert (default.epsilon, default.constraint_form, default.dual_optimizer, default.resilience) == (5.0, "ratio", "sgd", "off")
    assert (default.epochs, default.lr, default.alpha) == (paper.epochs, paper.lr, paper.alpha)  # same problem and schedule


@pytest.mark.parametrize("model_args, layers", [pytest.param(DISTILBERT, 7, marks=pytest.mark.slow),
                                               pytest.param(ROBERTA, 13, marks=pytest.mark.slow)],
                         ids=["distilbert", "roberta"])
def test_random_init_encoders_of_the_real_architecture_run_on_mnli(tmp_path, model_args, layers):
    require_shared(SHARED / "data" / "mnli")
    runs = tmp_path / "runs"
    cutlab([*model_args, "train=constrained_text", "train.epochs=1", "train.max_steps_per_epoch=1", *MNLI_TINY], runs)
    summary = check_record(next(runs.iterdir()), layers, 1, [0.0, 1.0])
    assert "mnli_tiny.jsonl" in summary["data_source"]


@pytest.mark.slow
def test_a_killed_text_run_resumes_and_ends_identical_to_an_uninterrupted_one(tmp_path):
    runs = tmp_path / "runs"
    args = ["model=hf_encoder", "L=6", "train=constrained_text", "train.epochs=2", "train.max_steps_per_epoch=4",
            "checkpoint.every_steps=2", *IMDB_TINY]
    cutlab([*args, "run_name=uninterrupted"], runs)
    killed = runs / "killed"
    start_and_kill([*args, "run_name=killed"], killed, rows=3, timeout_s=600)
    result = cutlab([*args, "run_name=killed"], runs)
    assert "[cutlab] resuming " in result.stderr
    assert_same_records(killed, runs / "uninterrupted")


def write_bad_mnli(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"premise": "A man sleeps.", "hypothesis": "A person rests.", "label": "entailment"},
            {"premise": "A dog runs.", "hypothesis": "A cat sits.", "label": "entailmnet"}]
    (folder / "mnli_bad.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


@pytest.mark.parametrize(
    "args, expected",
    [
        (["model=distilbert", "L=6", "data=imdb"], "cannot load the tokenizer of 'distilbert-base-uncased'"),
        (["model=ut_text", "data=imdb", "data.root=WRONG"], "is not an IMDb folder: expected JSON lines"),
        pytest.param([*DISTILBERT, f"model.tokenizer={SHARED / 'models' / 'roberta-base-tokenizer'}", "data=imdb"],
                     "has 50265 tokens but the model", marks=pytest.mark.slow),
        pytest.param(["model=ut_text", "data=mnli", "data.root=BAD_MNLI", "data.train_file=mnli_bad.jsonl",
                      "data.test_file=mnli_bad.jsonl"], "mnli_bad.jsonl:2: MNLI label must be one of entailment",
                     marks=pytest.mark.slow),
        pytest.param(["model=hf_encoder", "data=imdb"], "has 6 layers but L=3: pass L=6", marks=pytest.mark.slow),
        (["model=ut_text", "data=imdb", "data.root=hf:imdb"], "pip install datasets"),
        # on data it would refuse: the model is checked before the data are read (it came after 30 s of tokenising)
        (["model=ut_text", "data=imdb", "data.root=WRONG", "data.train_file=garbage.bin", "data.test_file=garbage.bin",
          "train=constrained_text", "train.detach_prev=local"],
         "train.detach_prev=local re-runs each block on its detached input, which DUST, UT and ViT can and "
         "model=ut_text cannot"),
        (["model=ut_text", *MNLI_TINY, "data.num_labels=2"],  # it trained into an IndexError of its loss
         "data=mnli has 3 classes (entailment, neutral, contradiction), not data.num_labels=2: drop the override"),
        (["model=ut_text", "data=imdb", f"data.root={SHARED / 'data' / 'imdb' / 'imdb_train_tiny100.jsonl'}"],
         f"data.root={SHARED / 'data' / 'imdb' / 'imdb_train_tiny100.jsonl'} is a file; data.root names the folder of "
         f"the data's files: data.root={SHARED / 'data' / 'imdb'} data.train_file=imdb_train_tiny100.jsonl"),
        (["model=hf_encoder", "L=6", "data=imdb", "model.source=EMPTY"],  # it was transformers' ValueError
         "holds no tokenizer that transformers can read (tokenizer.json, or a vocabulary and tokenizer_config.json): "
         "point model.source, or model.tokenizer, at a folder or hub id with one"),
        (["model=ut_text", "data=imdb", "data.root=WRONG", "data.train_file=garbage.bin", "data.test_file=garbage.bin"],
         "garbage.bin is not UTF-8 text ("),  # a traceback (UnicodeDecodeError), its run folder left behind
        ([*DISTILBERT[:2], "L=6", "data=imdb"],  # was "not a local folder, and the hub is unreachable"
         "distilbert-base-uncased holds no weights that transformers can read (model.safetensors or "
         "pytorch_model.bin): point model.source at a folder with them, or set model.pretrained=false to train its "
         "architecture from a random init"),
        (["model=hf_encoder", "L=6", "data=imdb", "data.max_length=1000"],  # an index error once a text was long
         "data.max_length=1000 is more tokens than model=hf_encoder (sentence-transformers/all-MiniLM-L6-v2) can "
         "place (512 positions); set data.max_length=512 or less"),
    ],
    ids=["hub-id-offline", "wrong-imdb-layout", "tokenizer-model-mismatch", "mnli-label", "depth", "no-datasets",
         "local-prev-unsupported", "mnli-num-labels", "root-a-file", "folder-without-tokenizer", "file-not-utf8",
         "folder-without-weights", "max-length-past-positions"],
)
def test_text_bad_input_gets_one_clear_message(tmp_path, args, expected):
    if "hf:imdb" in " ".join(args):
        try:
            import datasets  # noqa: F401
            pytest.skip("datasets is installed here")
        except ImportError:
            pass
    wrong = tmp_path / "imdb_wrong"
    (wrong / "reviews").mkdir(parents=True)
    (wrong / "garbage.bin").write_bytes(bytes(range(128, 256)) * 20)
    (tmp_path / "empty_model").mkdir()
    args = [a.replace("WRONG", str(wrong)).replace("BAD_MNLI", str(write_bad_mnli(tmp_path / "mnli")))
            .replace("EMPTY", str(tmp_path / "empty_model")) for a in args]
    runs = tmp_path / "runs"
    result = cutlab([*args, "wandb.mode=disabled"], runs, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("cutlab: error: ") and expected in message, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not runs.exists(), "a refused run leaves nothing behind, not even the runs folder Hydra made for it"


def test_imdb_data_of_three_classes_is_refused_naming_data_num_labels_and_trains_with_it(tmp_path):
    # the refusal named no fix; data.num_labels=N, which it now names, must be what trains on such data
    rows = [{"text": f"review {i} is {('bad', 'fine', 'good')[i % 3]}", "label": i % 3} for i in range(24)]
    (tmp_path / "three.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["model=ut_text", "L=2", *IMDB_TINY, f"data.root={tmp_path}", "data.train_file=three.jsonl",
            "data.test_file=three.jsonl", "train.epochs=1", "train.max_steps_per_epoch=1", "eval.gamma_test=[0]"]
    runs = tmp_path / "runs"
    refused = cutlab(args, runs, check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        f"cutlab: error: {tmp_path / 'three.jsonl'}:3: IMDb label must be 0 (negative) or 1 (positive), got 2; "
        "for text of more classes (labels 0 .. N-1) train with data.num_labels=N (a model trained on 2 classes "
        "cannot score it)")
    cutlab([*args, "data.num_labels=3"], runs)
    summary = json.loads(next(runs.glob("*/summary.json")).read_text())
    assert summary["status"] == "complete" and summary["test_metric_by_gamma"]


@pytest.mark.parametrize("model", [pytest.param(["model=hf_encoder", "L=6"], marks=pytest.mark.slow),
                                   ["model=ut_text", "L=2"]], ids=["hf_encoder", "ut_text"])
def test_a_tokenizer_of_another_vocabulary_than_the_pretrained_models_is_refused(tmp_path, model):
    """MiniLM's own vocabulary with two words' ids swapped: the same size and pad id, so the size and pad checks let
    it through and the run trained with 'good' reading 'bad''s pretrained embedding. DistilBERT's tokenizer, whose
    vocabulary is MiniLM's, still runs (test_imdb_records_are_complete covers the model's own)."""
    from cutlab.core.models.hf_loading import resolve_source

    own = Path(resolve_source("sentence-transformers/all-MiniLM-L6-v2"))
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        (swapped / name).write_bytes((own / name).read_bytes())
    vocab = (own / "vocab.txt").read_text().split("\n")
    good, bad = vocab.index("good"), vocab.index("bad")
    vocab[good], vocab[bad] = vocab[bad], vocab[good]
    (swapped / "vocab.txt").write_text("\n".join(vocab))
    short = ["train.epochs=1", "train.max_steps_per_epoch=1"]
    result = cutlab([*model, f"model.tokenizer={swapped}", *IMDB_TINY, *short], tmp_path / "runs", check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("cutlab: error: ") and "gives 2 of its 30522 tokens other ids" in message, message
    assert "model.tokenizer=null" in message and "Traceback" not in result.stderr
    if model[0] == "model=hf_encoder":
        same = SHARED / "models" / "distilbert-base-uncased"
        cutlab([*model, f"model.tokenizer={require_shared(same)}", *IMDB_TINY, *short], tmp_path / "runs_same")


def test_a_missing_tokenizer_folder_is_named_by_its_own_key(tmp_path):
    """model.tokenizer=/no/such/folder said 'pass model.source=...', the key that was right."""
    missing = tmp_path / "no" / "tokenizer"
    args = ["model=hf_encoder", "L=6", f"model.tokenizer={missing}", *IMDB_TINY]
    result = cutlab(args, tmp_path / "runs", check=False)
    message = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and message == (f"cutlab: error: model folder {missing} does not exist; "
                                                  "pass model.tokenizer=<an existing folder or a hub id>"), message


@pytest.mark.parametrize("value", ["data.val_size=0", "data.train_subset=0"])
def test_a_text_data_value_that_cannot_make_a_run_is_refused_before_the_run_starts(tmp_path, value):
    # the text task's builder found it once the run had announced its record folder (removed again): two lines
    result = cutlab(["model=hf_encoder", "train=constrained_text", *IMDB_TINY, value], tmp_path / "runs", check=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    key = value.split("=")[0]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"cutlab: error: {key} "), lines
    planned = cutlab(["--plan", "-m", "model=hf_encoder", "train=constrained_text", *IMDB_TINY, f"{value},1"],
                     tmp_path / "runs", check=False)
    assert re.search(r"refused +.*\(not launched: " + re.escape(key), planned.stdout), planned.stdout
