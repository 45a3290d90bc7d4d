"""Tokenized text classification sets: tokenize once, pad per batch, and the splits and sigma_x (paper Sec. 5, App. B.3)."""

from __future__ import annotations

from typing import Sequence

import torch

from cutlab.core.data.text_readers import Example
from cutlab.core.errors import CutlabError
from cutlab.core.progress import Meter


class TokenizedText:
    """Token ids (unpadded, truncated to ``max_length``) and labels; ``collate`` pads a batch to its longest row.

    Samples are dicts of int lists; the collated batch is a dict of [B, T] tensors (``input_ids``,
    ``attention_mask``, ``token_type_ids`` when the tokenizer makes them) plus ``labels`` [B].
    """

    def __init__(self, encodings: dict[str, list[list[int]]], labels: Sequence[int], pad_id: int) -> None:
        self.encodings = {key: value for key, value in encodings.items() if key in ("input_ids", "token_type_ids")}
        self.labels = list(labels)
        self.pad_id = pad_id

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {**{key: value[index] for key, value in self.encodings.items()}, "label": self.labels[index]}

    def collate(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(sample["input_ids"]) for sample in samples)
        batch = {"input_ids": torch.full((len(samples), width), self.pad_id, dtype=torch.long),
                 "attention_mask": torch.zeros(len(samples), width, dtype=torch.long)}
        if "token_type_ids" in self.encodings:
            batch["token_type_ids"] = torch.zeros(len(samples), width, dtype=torch.long)
        for row, sample in enumerate(samples):
            length = len(sample["input_ids"])
            batch["input_ids"][row, :length] = torch.tensor(sample["input_ids"])
            batch["attention_mask"][row, :length] = 1
            if "token_type_ids" in batch:
                batch["token_type_ids"][row, :length] = torch.tensor(sample["token_type_ids"])
        batch["labels"] = torch.tensor([sample["label"] for sample in samples], dtype=torch.long)
        return batch


def classification_batch(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """``prepare`` for text: (model inputs without the labels, labels)."""
    return {key: value for key, value in batch.items() if key != "labels"}, batch["labels"]


def tokenize(examples: list[Example], tokenizer, max_length: int, name: str = "", progress: bool = True,
             chunk: int = 2000) -> TokenizedText:
    """Tokenize once (in chunks, with a progress line on stderr); pairs are encoded as one sequence with separators."""
    encodings: dict[str, list] = {}
    meter = Meter(f"tokenizing {name}".rstrip(), len(examples), "example", enabled=progress)
    for begin in range(0, len(examples), chunk):
        part = examples[begin : begin + chunk]
        texts = [text for text, _, _ in part]
        pairs = [pair for _, pair, _ in part] if part[0][1] is not None else None
        encoded = tokenizer(texts, pairs, truncation=True, max_length=max_length)
        for key in ("input_ids", "token_type_ids"):
            if key in encoded:
                encodings.setdefault(key, []).extend(encoded[key])
        meter.update(min(begin + chunk, len(examples)))
    meter.close()
    return TokenizedText(encodings, [label for _, _, label in examples], tokenizer.pad_token_id)


def shuffled(examples: list[Example], seed: int) -> list[Example]:
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))
    return [examples[int(i)] for i in order]


def split_sizes(total: int, val_size: float | int, train_subset: int | None) -> tuple[int, int]:
    """(validation count, training count) from a pool of ``total``: val_size is a count (>= 1) or a fraction (< 1);
    train_subset is at most that many of the rest."""
    fraction = isinstance(val_size, float) and val_size < 1
    if not fraction and int(val_size) >= total:  # it trained on the one row left, without a word
        raise CutlabError(f"data.val_size={val_size} holds out the whole training pool of {total} rows, leaving none "
                          f"to train on; give a count of at most {total - 1}, or a fraction such as 0.1")
    val = int(round(val_size * total)) if fraction else int(val_size)
    val = max(1, min(val, total - 1))
    train = total - val if train_subset is None else min(int(train_subset), total - val)
    return val, train


def token_embedding_std(embedding: torch.Tensor, token_lists: Sequence[Sequence[int]]) -> float:
    """sigma_x for text (paper Sec. 5: noise on the embeddings): the std of every entry of the embedded training tokens (padding excluded).

    Computed exactly from token counts (sum_v c_v e_v and sum_v c_v e_v^2) without embedding the corpus, which
    would be gigabytes for an LLM's vocabulary on Alpaca. ``token_lists``: lists or 1-D tensors of token ids.
    """
    ids = torch.cat([torch.as_tensor(tokens, dtype=torch.long).reshape(-1) for tokens in token_lists])
    counts = torch.bincount(ids, minlength=embedding.shape[0]).double()
    table = embedding.detach().double().cpu()
    entries = counts.sum() * table.shape[1]
    mean = (counts @ table.sum(dim=1)) / entries
    second = (counts @ table.pow(2).sum(dim=1)) / entries
    return float((second - mean**2).clamp_min(0).sqrt())
