"""Builds the instruction-tuning task (causal-LM SFT on Alpaca-format data) from config."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from cutlab.core.data.alpaca import InstructionSet, instruction_batch, load_instruction_splits
from cutlab.core.models.causal_lm import build_causal_lm, load_tokenizer
from cutlab.core.objectives_lm import TokenCrossEntropyObjective
from cutlab.errors import CutlabError
from cutlab.tasks import Task


def tokenizer_name(model_cfg) -> str:
    name = model_cfg.tokenizer if model_cfg.tokenizer is not None else model_cfg.pretrained
    if name is None:
        raise CutlabError("a random-init model (model.pretrained=null) needs model.tokenizer: a hub id or folder, "
                          "e.g. model.tokenizer=../shared/models/roberta-base-tokenizer")
    return name


@torch.no_grad()
def embedding_sigma(embedding: torch.nn.Embedding, samples: InstructionSet) -> float:
    """sigma_x for text (SPEC section 2): the std of the clean token embeddings over every training token.

    Exact and cheap: each vocabulary row is weighted by how often its token occurs, so no [tokens, width]
    tensor is ever built (that would be gigabytes for Llama on Alpaca).
    """
    weight = embedding.weight.detach().float().cpu()
    ids = torch.cat([sample["input_ids"] for sample in samples.samples])
    counts = torch.bincount(ids, minlength=weight.shape[0]).double()
    total = counts.sum() * weight.shape[1]
    mean = (counts @ weight.double()).sum() / total
    variance = (counts @ (weight.double() - mean).pow(2)).sum() / total
    return float(variance.sqrt())


def build_instruction_task(cfg: DictConfig) -> Task:
    name = tokenizer_name(cfg.model)
    tokenizer = load_tokenizer(name, "model.tokenizer" if cfg.model.tokenizer is not None else "model.pretrained")
    splits = load_instruction_splits(cfg.data, tokenizer, progress=cfg.progress)
    model = build_causal_lm(cfg.model, cfg.L, len(tokenizer))
    return Task(
        model=model,
        objective=TokenCrossEntropyObjective(),
        train_set=splits.train,
        val_set=splits.val,
        test_set=splits.test,
        prepare=instruction_batch,
        sigma=embedding_sigma(model.base.get_input_embeddings(), splits.train),
        source=f"{cfg.data.root}; model {cfg.model.pretrained or 'random-init Llama'}; tokenizer {name}",
    )
