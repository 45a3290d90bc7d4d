"""Builds the instruction-tuning task (causal-LM SFT on Alpaca-format data) from config."""

from __future__ import annotations

import time

from omegaconf import DictConfig

from cutlab.core.data.alpaca import check_data_config, instruction_batch, load_examples, load_instruction_splits
from cutlab.core.data.text import token_embedding_std
from cutlab.core.models.causal_lm import load_tokenizer, torch_dtype
from cutlab.core.objectives.language_model import TokenCrossEntropyObjective
from cutlab.errors import CutlabError
from cutlab.tasks import Task, say
from cutlab.tasks.models import model_for
from cutlab.tasks.vocabulary import check_same_vocabulary


def tokenizer_name(model_cfg) -> str:
    name = model_cfg.tokenizer if model_cfg.tokenizer is not None else model_cfg.pretrained
    if name is None:
        raise CutlabError("a random-init model (model.pretrained=null) needs model.tokenizer: a hub id or folder, "
                          "e.g. model.tokenizer=../shared/models/roberta-base-tokenizer")
    return name


def build_instruction_task(cfg: DictConfig) -> Task:
    # the data and model.dtype first: the tokenizer and the model may come from the hub (minutes, or a network error
    # that would hide these)
    check_data_config(cfg.data)
    examples = load_examples(cfg.data.root)
    torch_dtype(cfg.model.dtype)
    name = tokenizer_name(cfg.model)
    tokenizer = load_tokenizer(name, "model.tokenizer" if cfg.model.tokenizer is not None else "model.pretrained")
    if cfg.model.tokenizer is not None and cfg.model.pretrained is not None:  # before the weights: an 8B model loads
        check_same_vocabulary(tokenizer, cfg.model.tokenizer, cfg.model.pretrained,  # for minutes
                              lambda source: load_tokenizer(source, "model.pretrained"))
    splits = load_instruction_splits(cfg.data, tokenizer, progress=cfg.progress, examples=examples)
    started = time.perf_counter()  # an 8B model loads for minutes: said before (with its size) and after
    model = model_for(cfg, vocab_size=len(tokenizer), say=lambda line: say(cfg, line))
    made = f"from {cfg.model.pretrained}" if cfg.model.pretrained is not None else f"(random-init Llama, L={cfg.L})"
    say(cfg, f"model {cfg.model.name} {made} ready ({time.perf_counter() - started:.1f} s)")
    return Task(
        model=model,
        objective=TokenCrossEntropyObjective(),
        train_set=splits.train,
        val_set=splits.val,
        test_set=splits.test,
        prepare=instruction_batch,
        sigma=token_embedding_std(model.base.get_input_embeddings().weight,
                                  [sample["input_ids"] for sample in splits.train.samples]),
        source=f"{cfg.data.root}; model {cfg.model.pretrained or 'random-init Llama'}; tokenizer {name}",
    )
