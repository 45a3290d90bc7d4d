"""Tokenized text kept between runs: a text run tokenized its splits again at every start, resume and cutlab-eval
(45 s on IMDb's 50 000 reviews on 2 cores, before the first step of each run of a Table 4 grid).

The key is the examples' own text and labels (so subsets, shuffles and files are in it), the tokenizer's whole
definition (a fast tokenizer's JSON: vocabulary, normalizer, special tokens) and max_length; a slow tokenizer, which
has no such definition, is not cached. Files are written and checked as the clip cache's are
(cutlab.core.data.cache), and ``paths.cache_dir=null`` reads without a cache.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from cutlab.core.data import cache
from cutlab.core.data.text import TokenizedText, tokenize
from cutlab.core.data.text_readers import Example

KEYS = ("input_ids", "token_type_ids")


def cached_tokenize(examples: list[Example], tokenizer, max_length: int, name: str, progress: bool,
                    cache_dir) -> TokenizedText:
    """``tokenize``'s result, read from ``cache_dir`` when this input was tokenized before, else made and kept."""
    definition = _definition(tokenizer)
    if cache_dir is None or definition is None or not examples:
        return tokenize(examples, tokenizer, max_length, name, progress)
    key = cache.cache_key({"kind": "tokens", "examples": _digest(examples), "tokenizer": definition,
                           "max_length": int(max_length), "pad_id": tokenizer.pad_token_id})
    path = cache.cache_path(cache_dir, f"tokens_{name}".rstrip("_"), key)
    labels = [label for _, _, label in examples]
    arrays = cache.load_arrays(path, key, "tokenized text")
    if arrays is not None and len(arrays.get("input_ids__lengths", ())) == len(examples):
        return TokenizedText(_encodings(arrays), labels, tokenizer.pad_token_id)
    tokenized = tokenize(examples, tokenizer, max_length, name, progress)
    cache.save_arrays(path, key, _arrays(tokenized.encodings))
    return tokenized


def _definition(tokenizer) -> str | None:
    """A digest of what the tokenizer maps text to; its truncation and padding left out: they are the last call's
    settings (a call with max_length sets them), and max_length is in the key of its own."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    definition = json.loads(backend.to_str())
    for state in ("truncation", "padding"):
        definition.pop(state, None)
    text = json.dumps([type(tokenizer).__name__, definition], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _digest(examples: list[Example]) -> str:
    digest = hashlib.sha256()
    for text, pair, label in examples:  # each field length-prefixed: no two inputs run together alike
        for field in (text, "" if pair is None else pair, str(label), "1" if pair is not None else "0"):
            data = field.encode()
            digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def _arrays(encodings: dict[str, list[list[int]]]) -> dict[str, np.ndarray]:
    arrays = {}
    for key in KEYS:
        if key in encodings:
            rows = encodings[key]
            arrays[f"{key}__lengths"] = np.array([len(row) for row in rows], dtype=np.int32)
            arrays[f"{key}__ids"] = np.array([token for row in rows for token in row], dtype=np.int32)
    return arrays


def _encodings(arrays: dict[str, np.ndarray]) -> dict[str, list[list[int]]]:
    encodings = {}
    for key in KEYS:
        if f"{key}__lengths" in arrays:
            ends = np.cumsum(arrays[f"{key}__lengths"])[:-1]
            encodings[key] = [row.tolist() for row in np.split(arrays[f"{key}__ids"], ends)]
    return encodings
