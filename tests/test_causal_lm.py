"""Causal-LM fine-tuning (paper Sec. 6) on a tiny random-init Llama: model contract, Alpaca data, CLI runs, bad input.

No Llama weights exist here: the model is a transformers LlamaConfig of width 64 with random weights; the
tokenizers are the real RoBERTa BPE tokenizer from ../shared and a small byte-level BPE trained on the fixture.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from conftest import SHARED, require_shared
from helpers.cli import cutlab
from helpers.contract import steps_on_a_fixed_batch

from cutlab.config.compose import compose_run_config
from cutlab.core.data.alpaca import (
    IGNORE, PROMPT_NO_INPUT, PROMPT_WITH_INPUT, Example, load_examples, prompt_of, tokenize_example,
)
from cutlab.core.objectives.language_model import TokenCrossEntropyObjective
from cutlab.core.perturbation import Perturbation, perturbed_forward
from cutlab.core.training import Schedule, Trainer
from cutlab.errors import CutlabError

ROBERTA = SHARED / "models" / "roberta-base-tokenizer"
COLOURS = ["red", "blue", "green", "yellow", "black", "white"]


def alpaca_rows(count: int = 24) -> list[dict]:
    """Alpaca-format rows: half with an input, half without (the two prompt templates)."""
    return [{"instruction": f"Name colour number {i}.",
             "input": "" if i % 2 else f"The list is {', '.join(COLOURS)}.",
             "output": f"The colour is {COLOURS[i % 6]}."} for i in range(count)]


@pytest.fixture(scope="module")
def alpaca_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("alpaca") / "alpaca_data.json"
    path.write_text(json.dumps(alpaca_rows(), indent=2))
    return path


def train_tiny_tokenizer(folder: Path) -> Path:
    """A real byte-level BPE tokenizer (300 tokens) trained on the fixture's text, saved as a transformers folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [PROMPT_WITH_INPUT, PROMPT_NO_INPUT] + [row[key] for row in alpaca_rows() for key in row]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory) -> Path:
    return train_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def task_config(root, tokenizer_folder, **model) -> DictConfig:
    """The config ``python -m cutlab model=causal_lm data=alpaca`` composes, with a random-init 2-layer Llama;
    ``model`` keys (a dict for a nested one) are merged over its model node, new ones too (``+model.KEY=`` on the
    command line)."""
    cfg = compose_run_config(["model=causal_lm", "data=alpaca", f"data.root={root}", "model.pretrained=null",
                              f"model.tokenizer={tokenizer_folder}", "L=2", "progress=false",
                              "data.val_fraction=0.1", "data.test_fraction=0.2"])
    with open_dict(cfg):
        cfg.model.merge_with(model)
    return cfg


def build(cfg):
    from cutlab.tasks.instruction import build_instruction_task

    torch.manual_seed(0)
    return build_instruction_task(cfg)


# ---------------------------------------------------------------- data


def test_prompt_is_masked_and_only_response_tokens_count():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(require_shared(ROBERTA))
    example = Example("Translate to French.", "cheese", "fromage")
    sample = tokenize_example(example, tokenizer, max_length=512)
    ids, labels = sample["input_ids"], sample["labels"]
    counted = labels != IGNORE
    prompt_length = int((~counted).sum())
    assert ids[0] == tokenizer.bos_token_id and not counted[:prompt_length].any() and counted[prompt_length:].all()
    assert tokenizer.decode(ids[:prompt_length], skip_special_tokens=True) == prompt_of(example)
    assert "### Input:\ncheese" in prompt_of(example)
    assert tokenizer.decode(labels[counted]) == "fromage</s>"  # the response and eos, nothing of the prompt
    torch.testing.assert_close(labels[counted], ids[counted])

    # the loss reads only the logits that predict response tokens (position t predicts label t+1)
    objective = TokenCrossEntropyObjective()
    logits = torch.randn(1, len(ids), len(tokenizer))
    before = objective.loss_matrix([logits], labels[None])
    changed = logits.clone()
    changed[0, : prompt_length - 1] += 5 * torch.randn(prompt_length - 1, len(tokenizer))  # predict prompt tokens
    torch.testing.assert_close(objective.loss_matrix([changed], labels[None]), before)
    changed[0, prompt_length - 1] += 5 * torch.randn(len(tokenizer))  # predicts the first response token
    assert not torch.allclose(objective.loss_matrix([changed], labels[None]), before)
    expected = torch.nn.functional.cross_entropy(logits[0, prompt_length - 1 : -1], ids[prompt_length:])
    torch.testing.assert_close(before[0, 0], expected)


def test_per_sample_losses_and_token_accuracy_by_hand():
    """Row losses are each sample's own mean CE over its counted tokens; accuracy counts argmax hits over all."""
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[IGNORE, IGNORE, 3, 4, IGNORE], [IGNORE, 1, 2, 3, 6]])
    logits[0, 1, 3] = logits[1, 0, 1] = logits[1, 1, 2] = 50.0  # three sure hits among the 6 counted tokens
    logits[0, 2, 4] = logits[1, 2, 3] = logits[1, 3, 6] = -50.0  # three sure misses
    objective = TokenCrossEntropyObjective()
    losses, correct, count = objective.evaluation_terms([logits, logits], labels)
    ce = torch.nn.functional.cross_entropy
    expected = torch.stack([ce(logits[0, 1:3], labels[0, 2:4]), ce(logits[1, 0:4], labels[1, 1:5])])
    torch.testing.assert_close(losses, torch.stack([expected, expected], dim=1))
    torch.testing.assert_close(objective.loss_matrix([logits], labels)[:, 0], expected)
    assert count == 6 and correct.tolist() == [3.0, 3.0]
    assert objective.metric_from_sums(correct, count).tolist() == [0.5, 0.5]


def test_truncation_keeps_the_mask_and_examples_without_response_are_dropped(alpaca_file, tiny_tokenizer):
    from transformers import AutoTokenizer

    from cutlab.core.data.alpaca import load_instruction_splits

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer)
    example = load_examples(str(alpaca_file))[0]
    full = tokenize_example(example, tokenizer, 10_000)
    prompt_length = int((full["labels"] == IGNORE).sum())
    cut = tokenize_example(example, tokenizer, prompt_length + 2)
    assert len(cut["input_ids"]) == prompt_length + 2 and int((cut["labels"] != IGNORE).sum()) == 2
    data = OmegaConf.create({"root": str(alpaca_file), "max_length": prompt_length, "subset": None,
                             "val_fraction": 0.1, "test_fraction": 0.2, "split_seed": 0})
    # example 0's prompt fills max_length: it and every longer prompt lose their whole response and are dropped
    short = load_instruction_splits(data, tokenizer, progress=False)
    kept = len(short.train) + len(short.val) + len(short.test)
    assert short.dropped > 0 and kept + short.dropped == 24
    assert all((s["labels"] != IGNORE).any() for s in short.train.samples)
    data.max_length = 5
    with pytest.raises(CutlabError, match="empty after truncation.*data.max_length"):
        load_instruction_splits(data, tokenizer, progress=False)
    data.max_length = 512
    splits = load_instruction_splits(data, tokenizer, progress=False)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (17, 2, 5) and splits.dropped == 0
    batch = splits.train.collate([splits.train[0], splits.train[1]])
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    padded = batch["attention_mask"] == 0
    assert (batch["labels"][padded] == IGNORE).all() and (batch["input_ids"][padded] == tokenizer.pad_token_id).all()


def test_json_lines_and_bad_instruction_files_get_errors_naming_the_row(tmp_path):
    lines = tmp_path / "data.jsonl"
    lines.write_text("\n".join(json.dumps(row) for row in alpaca_rows(3)) + "\n")
    assert [e.output for e in load_examples(str(lines))] == [r["output"] for r in alpaca_rows(3)]
    with pytest.raises(CutlabError, match="data.root is not set.*alpaca_data.json"):
        load_examples(None)
    with pytest.raises(CutlabError, match="is not a file.*stanford_alpaca"):
        load_examples(str(tmp_path / "missing.json"))
    broken = tmp_path / "broken.json"
    broken.write_text('[{"instruction": "a", "output": "b"},')
    with pytest.raises(CutlabError, match="not valid JSON"):
        load_examples(str(broken))
    rows = alpaca_rows(3)
    del rows[2]["output"]
    missing = tmp_path / "missing_output.json"
    missing.write_text(json.dumps(rows))
    with pytest.raises(CutlabError, match=r"row 2 needs a string 'output'"):
        load_examples(str(missing))
    lines.write_text(json.dumps(alpaca_rows(1)[0]) + "\n{not json\n")
    with pytest.raises(CutlabError, match="line 2 is not valid JSON"):
        load_examples(str(lines))


def test_an_instruction_file_that_is_not_utf8_is_one_line_and_a_home_folder_is_expanded(tmp_path, monkeypatch):
    """The first was UnicodeDecodeError's traceback (the other text readers said it in one line); the second was
    'is not a file' for ~/data.json, which the other readers expand."""
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'[{"instruction": "caf\xe9", "input": "", "output": "x"}]')
    with pytest.raises(CutlabError, match=r"latin.json is not UTF-8 text \(invalid continuation byte at byte 21\); "
                                          r"save it as UTF-8$"):
        load_examples(str(latin))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine.json").write_text(json.dumps(alpaca_rows(2)))
    assert [e.output for e in load_examples("~/mine.json")] == [r["output"] for r in alpaca_rows(2)]


# ---------------------------------------------------------------- model contract


def test_layers_are_the_logit_lens_of_the_hidden_states(alpaca_file, tiny_tokenizer):
    task = build(task_config(alpaca_file, tiny_tokenizer))
    model = task.model
    inputs, labels = task.prepare(task.train_set.collate([task.train_set[i] for i in range(3)]))
    outputs = model(inputs)
    batch, length = inputs["input_ids"].shape
    assert model.depth == 2 and len(outputs) == 3
    assert all(out.shape == (batch, length, 300) for out in outputs)
    llama = model.base
    embeddings = llama.model.embed_tokens(inputs["input_ids"])
    torch.testing.assert_close(outputs[0], llama.lm_head(llama.model.norm(embeddings)))  # Phi_0: the embeddings read out
    captured = []  # the output of decoder layer 1, before the final norm: Phi_1 must be its read-out
    hook = llama.model.layers[0].register_forward_hook(
        lambda module, args, out: captured.append(out[0] if isinstance(out, tuple) else out))
    full = llama(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    hook.remove()
    torch.testing.assert_close(outputs[1], llama.lm_head(llama.model.norm(captured[0])))
    torch.testing.assert_close(outputs[-1], full.logits)  # Phi_L: the model's own next-token logits
    # noise goes on the embeddings: gamma = 0 is the clean forward, gamma > 0 changes every layer's output
    generator = torch.Generator().manual_seed(0)
    clean = perturbed_forward(model, inputs, 0.0, task.sigma, 0.0, generator)
    noisy = perturbed_forward(model, inputs, 1.0, task.sigma, 0.0, generator)
    torch.testing.assert_close(clean[-1], outputs[-1])
    assert all(not torch.allclose(a, b) for a, b in zip(clean, noisy))
    # sigma_x is the std of the training tokens' embeddings
    ids = torch.cat([s["input_ids"] for s in task.train_set.samples])
    assert task.sigma == pytest.approx(float(llama.model.embed_tokens(ids).detach().std(unbiased=False)), rel=1e-4)


@pytest.mark.parametrize("constrained", [False, True])
def test_a_step_lowers_the_objective_on_a_fixed_batch(alpaca_file, tiny_tokenizer, constrained):
    task = build(task_config(alpaca_file, tiny_tokenizer))
    model, objective = task.model, task.objective
    inputs, labels = task.prepare(task.train_set.collate([task.train_set[i] for i in range(4)]))
    before, after, _ = steps_on_a_fixed_batch(model, objective, inputs, labels, constrained, lr=1e-3, alpha=0.05)
    assert after[-1] < before[-1]  # the last layer itself, for ERM and constrained alike
    if constrained:
        assert after.sum() < before.sum()  # the constraint terms pull every layer's loss down too


def test_resume_from_a_checkpoint_continues_exactly(alpaca_file, tiny_tokenizer):
    """Training 4 steps == 2 steps, state saved and loaded into a fresh task, 2 more steps."""

    def trainer_of(task):
        from cutlab.run.build import build_primal_dual

        cfg = task_config(alpaca_file, tiny_tokenizer)
        return Trainer(task.model, task.objective, build_primal_dual(cfg, task.model, 6.0), task.train_set,
                       Schedule(epochs=2, batch_size=4, warmup_epochs=1, max_steps_per_epoch=2), task.prepare,
                       Perturbation(gamma=0.5, sigma=task.sigma, seed=3))

    cfg = task_config(alpaca_file, tiny_tokenizer)
    straight = trainer_of(build(cfg))
    straight.run()
    first = trainer_of(build(cfg))
    first.schedule = Schedule(epochs=1, batch_size=4, warmup_epochs=1, max_steps_per_epoch=2)
    first.run()
    state = first.state_dict()
    resumed = trainer_of(build(cfg))
    resumed.load_state_dict(state)
    resumed.run()
    assert resumed.progress.step == straight.progress.step == 4
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    torch.testing.assert_close(straight.primal_dual.multipliers, resumed.primal_dual.multipliers)


def test_bfloat16_model_trains_with_float32_losses(alpaca_file, tiny_tokenizer):
    task = build(task_config(alpaca_file, tiny_tokenizer, dtype="bfloat16"))
    assert {p.dtype for p in task.model.parameters()} == {torch.bfloat16}
    inputs, labels = task.prepare(task.train_set.collate([task.train_set[i] for i in range(2)]))
    losses = task.objective.loss_matrix(task.model(inputs), labels)
    assert losses.dtype == torch.float32 and losses.shape == (2, 3) and torch.isfinite(losses).all()
    losses[:, -1].mean().backward()
    assert all(p.grad is not None for p in task.model.base.model.layers[-1].parameters())


def test_bad_data_settings_are_refused(alpaca_file, tiny_tokenizer):
    for key, value, message in [("max_length", 1, "data.max_length must be"), ("test_fraction", 1.5, "between 0 and 1"),
                                ("subset", 0, "data.subset must be")]:
        cfg = task_config(alpaca_file, tiny_tokenizer)
        cfg.data[key] = value
        with pytest.raises(CutlabError, match=message):
            build(cfg)


def test_lora_trains_only_the_adapters(alpaca_file, tiny_tokenizer):
    task = build(task_config(alpaca_file, tiny_tokenizer, lora={"enabled": True}))
    trainable = [name for name, p in task.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert {name.split(".")[-4] for name in trainable if name.endswith("lora_A.default.weight")} == \
        {"q_proj", "k_proj", "v_proj", "o_proj"}
    inputs, labels = task.prepare(task.train_set.collate([task.train_set[0]]))
    assert len(task.model(inputs)) == 3


# ---------------------------------------------------------------- bad model configurations


def test_a_local_pretrained_folder_loads_with_its_own_tokenizer(alpaca_file, tiny_tokenizer, tmp_path):
    """model.pretrained=<folder> with model.tokenizer=null: weights and tokenizer both come from the folder."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path / "pretrained"
    torch.manual_seed(5)
    saved = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1))
    saved.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_tokenizer).save_pretrained(folder)
    task = build(task_config(alpaca_file, tiny_tokenizer, pretrained=str(folder), tokenizer=None))
    torch.testing.assert_close(task.model.base.model.embed_tokens.weight, saved.model.embed_tokens.weight)
    inputs, _ = task.prepare(task.train_set.collate([task.train_set[0]]))
    torch.testing.assert_close(task.model(inputs)[-1], saved(**inputs).logits)
    assert f"model {folder}; tokenizer {folder}" in task.source


def test_loading_a_pretrained_model_says_what_and_how_large_before_and_ready_after(alpaca_file, tiny_tokenizer,
                                                                                  tmp_path, capsys):
    """Off a terminal transformers' bars are off (cutlab.core.extras), and the load said nothing before or after:
    minutes of silence in a SLURM log for an 8B model. Now a line with its size before and one with its time after."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path / "pretrained"
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_tokenizer).save_pretrained(folder)
    cfg = task_config(alpaca_file, tiny_tokenizer, pretrained=str(folder), tokenizer=None)
    cfg.progress = True
    task = build(cfg)
    count = sum(p.numel() for p in task.model.parameters())
    lines = capsys.readouterr().err.splitlines()
    loading = lines.index(f"[cutlab] loading model.pretrained={folder}: {count / 1e3:.3g} k parameters, "
                          f"{count * 4 / 2**20:.1f} MiB in float32")
    after = [line for line in lines[loading + 1:] if line.startswith("[cutlab] ")]  # transformers' bar between
    assert re.fullmatch(rf"\[cutlab\] model causal_lm from {re.escape(str(folder))} ready \(\d+\.\d s\)",
                        after[0]), lines


def test_tokenizer_larger_than_the_model_embedding_is_refused(alpaca_file, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path / "small_llama"
    LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
    cfg = task_config(alpaca_file, require_shared(ROBERTA), pretrained=str(folder))
    with pytest.raises(CutlabError, match="50265 tokens but the model's embedding has only 50 rows"):
        build(cfg)
    cfg.L = 3
    with pytest.raises(CutlabError, match="has 2 decoder layers but L=3; pass L=2"):
        build(cfg)


def test_a_tokenizer_with_another_vocabulary_than_the_pretrained_models_is_refused(alpaca_file, tiny_tokenizer,
                                                                                     tmp_path):
    """model.tokenizer of as many tokens as the pretrained model embeds but other ids (here the same BPE with its
    special tokens in another order) passed the size check: each id read another token's pretrained embedding. The
    encoders refused it (tasks/text.check_same_vocabulary); the causal LM now does too, before the weights load."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path / "pretrained"
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_tokenizer).save_pretrained(folder)
    moved = Tokenizer.from_file(str(tiny_tokenizer / "tokenizer.json"))
    swapped = json.loads(moved.to_str())  # <s> and <pad> trade ids: every other token keeps its own
    vocab = swapped["model"]["vocab"]
    vocab["<s>"], vocab["<pad>"] = vocab["<pad>"], vocab["<s>"]
    for added in swapped["added_tokens"]:
        added["id"] = vocab[added["content"]]
    other = tmp_path / "other_tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(swapped)), bos_token="<s>",
                            eos_token="</s>", pad_token="<pad>", unk_token="<unk>").save_pretrained(other)
    with pytest.raises(CutlabError, match=f"tokenizer {other} gives 2 of its 300 tokens other ids than the "
                                          f"pretrained model {folder}'s own tokenizer"):
        build(task_config(alpaca_file, other, pretrained=str(folder)))
    assert len(build(task_config(alpaca_file, folder, pretrained=str(folder))).train_set) > 0  # its own passes


@pytest.mark.parametrize("override, message", [
    ({"dtype": "float16"}, "float16 is not supported"),
    ({"device_map": "auto"}, "device_map is not supported"),
    ({"tokenizer": None}, "needs model.tokenizer"),
    ({"architecture": {"num_hidden_layers": 4}}, "num_hidden_layers is set by L"),
    ({"architecture": {"hidden_size": 30}}, "not a valid LlamaConfig"),
])
def test_unsupported_model_settings_are_refused(alpaca_file, tiny_tokenizer, override, message):
    cfg = task_config(alpaca_file, tiny_tokenizer, **override)
    with pytest.raises(CutlabError, match=message):
        build(cfg)


# ---------------------------------------------------------------- end to end through the CLI


def tiny_run(root, tokenizer) -> list[str]:
    return ["model=causal_lm", "data=alpaca", f"data.root={root}", "model.pretrained=null",
            f"model.tokenizer={tokenizer}", "L=2", "train.epochs=2", "train.max_steps_per_epoch=3",
            "eval.gamma_test=[0,0.5,1]", "data.val_fraction=0.1", "data.test_fraction=0.2", "wandb.mode=disabled"]


@pytest.mark.parametrize("extra", [pytest.param([], marks=pytest.mark.slow), ["model.lora.enabled=true"]], ids=["full", "lora"])
def test_cli_run_writes_token_accuracy_per_gamma(tmp_path, alpaca_file, tiny_tokenizer, extra):
    runs = tmp_path / "runs"
    cutlab(tiny_run(alpaca_file, tiny_tokenizer) + extra, runs)
    (run,) = runs.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["steps"] == 6
    assert summary["metric"] == "token_accuracy" and summary["selection_mode"] == "max"
    assert set(summary["test_metric_by_gamma"]) == {"0.0", "0.5", "1.0"}
    assert all(0.0 <= v <= 1.0 for v in summary["test_metric_by_gamma"].values())
    assert "test_auc" not in summary  # the paper reports no AUC for the LLM (Fig. 6 plots accuracy vs gamma)
    evaluation = pd.read_csv(run / "eval.csv")
    test = evaluation.query("split == 'test' and metric == 'token_accuracy'")
    assert sorted(test["layer"].unique()) == [0, 1, 2]
    assert summary["test_mean_metric"] == pytest.approx(test.query("layer == 2")["value"].mean())
    history = pd.read_csv(run / "history.csv")
    assert list(history["step"]) == [1, 2, 3, 4, 5, 6]
    if not extra:  # full fine-tuning learns the fixed "The colour is ...</s>" pattern within 6 steps
        assert history["loss_2"].iloc[-1] < history["loss_2"].iloc[0]
        assert summary["test_metric_by_gamma"]["0.0"] > 0.5


def test_cli_hub_id_without_network_is_a_clear_error(tmp_path, alpaca_file):
    env_home = tmp_path / "hf"  # an empty HF cache: the model is nowhere on this machine
    args = ["model=causal_lm", "data=alpaca", f"data.root={alpaca_file}", "L=32", "wandb.mode=disabled"]
    result = cutlab(args, tmp_path / "runs", check=False, env={"HF_HOME": str(env_home), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    assert "model.pretrained='meta-llama/Llama-3.1-8B' cannot be loaded" in result.stderr
    assert "hub is offline" in result.stderr and "Traceback" not in result.stderr


def test_cli_alpaca_without_a_file_names_how_to_get_it(tmp_path, tiny_tokenizer):
    args = ["model=causal_lm", "data=alpaca", "model.pretrained=null", f"model.tokenizer={tiny_tokenizer}",
            "L=2", "wandb.mode=disabled"]
    result = cutlab(args, tmp_path / "runs", check=False)
    assert result.returncode == 2 and "data.root is not set" in result.stderr
    assert "alpaca_data.json" in result.stderr and "data.root=/path/to/alpaca_data.json" in result.stderr


@pytest.mark.parametrize("extra, message", [([], "data.root is not set"),
                                            (["data.root=ALPACA", "model.dtype=float16"], "float16 is not supported")],
                         ids=["no-data-root", "float16"])
def test_the_data_and_dtype_are_refused_before_the_hub_is_asked_for_the_model(tmp_path, alpaca_file, extra, message):
    """With the default model (a hub id) and no network, a missing data.root or model.dtype=float16 was reported
    only as the hub's error: both were checked after the tokenizer and model loaded."""
    args = ["model=causal_lm", "data=alpaca", "L=32", "wandb.mode=disabled",
            *(a.replace("ALPACA", str(alpaca_file)) for a in extra)]
    result = cutlab(args, tmp_path / "runs", check=False,
                    env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], result.stderr[-2000:]


def test_a_model_larger_than_the_memory_is_refused_naming_the_bound(tmp_path, alpaca_file, tiny_tokenizer):
    """About 780 B parameters (3 TB in float32): refused from a count on the meta device, in one line naming the
    GiB needed and available. It was a traceback from torch's allocator (or, with Linux overcommit, a kill by the
    OOM killer with no message); the address-space limit keeps a regression to that traceback on this machine."""
    import resource
    import subprocess
    import sys

    from conftest import ROOT
    from helpers.contract import cutlab_env

    def limited() -> None:  # 6 GiB of address space: torch imports, the 3 TB model cannot be allocated
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    args = tiny_run(alpaca_file, tiny_tokenizer) + [
        "L=200", "model.architecture.hidden_size=16384", "model.architecture.intermediate_size=65536",
        "model.architecture.num_attention_heads=128", "model.architecture.num_key_value_heads=8"]
    result = subprocess.run([sys.executable, "-m", "cutlab", *args], cwd=ROOT, env=cutlab_env(tmp_path / "runs"),
                            capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line and not line.startswith("[cutlab]")]
    assert len(errors) == 1 and errors[0].startswith("cutlab: error: the random-init Llama"), result.stderr[-2000:]
    assert "GiB of host memory, but this machine has" in errors[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize("key", ["pretrained", "tokenizer"])
def test_a_path_that_does_not_exist_is_named_as_such(alpaca_file, tiny_tokenizer, tmp_path, key):
    """model.pretrained=/no/such/folder was reported as a hub id the hub could not serve, with the advice
    `hf download /no/such/folder`; a path is now said not to exist."""
    missing = str(tmp_path / "no" / "such" / "llama")
    cfg = task_config(alpaca_file, tiny_tokenizer, **{key: missing})
    with pytest.raises(CutlabError, match=f"model.{key}={missing} does not exist") as error:
        build(cfg)
    assert "hf download" not in str(error.value)


def test_a_folder_without_weights_is_named_as_such_not_sent_to_the_hub(alpaca_file, tiny_tokenizer, tmp_path):
    """A folder with config.json and a tokenizer but no weights got the hub's advice, `hf download <the folder>`."""
    from transformers import LlamaConfig

    folder = tmp_path / "llama_without_weights"
    LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                vocab_size=64).save_pretrained(folder)
    for file in tiny_tokenizer.iterdir():
        shutil.copy(file, folder)
    cfg = task_config(alpaca_file, folder, pretrained=str(folder))
    with pytest.raises(CutlabError, match=rf"model.pretrained={folder} cannot be loaded: the folder does not hold a "
                                          r"whole Hugging Face checkpoint \(OSError: .*\); point model.pretrained at a "
                                          r"folder with config.json, weights and tokenizer files$") as error:
        build(cfg)
    assert "hf download" not in str(error.value)


def test_the_config_checks_refuse_alpaca_without_a_file_in_the_loaders_words():
    """data=alpaca (data.root: null until given) passed the config checks, so --plan counted the run to run, and met
    load_examples' line only as its task was built: the checks now say the same. The text sets, whose root is the
    default data folder's (imdb, mnli), pass as before."""
    from cutlab.config.checks import check_config

    with pytest.raises(CutlabError) as loader:
        load_examples(None)
    for folders in (True, False):  # a SLURM plan's too: the jobs may run where the data are, but none is named
        with pytest.raises(CutlabError) as checks:
            check_config(compose_run_config(["model=causal_lm", "data=alpaca"]), folders=folders)
        assert str(checks.value) == str(loader.value)
    for name in ("imdb", "mnli"):
        check_config(compose_run_config(["model=ut_text", f"data={name}"]))
