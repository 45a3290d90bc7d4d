"""Tokenized text is kept between runs (cutlab.core.data.token_cache): the same input is tokenized once, read back
exactly, and any change of text, tokenizer or max_length is another input."""

from __future__ import annotations

import pytest

from conftest import SHARED, require_shared
from cutlab.core.data import text, token_cache
from cutlab.core.data.text_readers import read_imdb
from cutlab.core.models.hf_loading import load_tokenizer

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(MINILM)


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """The names of the splits tokenized (not read from the cache)."""
    made: list[str] = []
    tokenize = token_cache.tokenize

    def counted(examples, tokenizer, max_length, name="", progress=True):
        made.append(name)
        return tokenize(examples, tokenizer, max_length, name, progress)

    monkeypatch.setattr(token_cache, "tokenize", counted)
    return made


def test_the_same_reviews_are_tokenized_once_and_read_back_exactly(tokenizer, calls, tmp_path):
    reviews = read_imdb(str(require_shared(SHARED / "data" / "imdb")), "train", "imdb_train_tiny100.jsonl")
    made = token_cache.cached_tokenize(reviews, tokenizer, 64, "train", False, tmp_path)
    again = token_cache.cached_tokenize(reviews, tokenizer, 64, "train", False, tmp_path)
    assert calls == ["train"] and again.encodings == made.encodings and again.labels == made.labels
    assert made.encodings == text.tokenize(reviews, tokenizer, 64, progress=False).encodings
    assert [type(row) for row in again.encodings["input_ids"][:2]] == [list, list]  # as tokenize's: int lists
    token_cache.cached_tokenize(reviews, tokenizer, 32, "train", False, tmp_path)  # another max_length
    token_cache.cached_tokenize(reviews[1:], tokenizer, 64, "train", False, tmp_path)  # other reviews (a subset)
    changed = [(review + "!", pair, label) if i == 5 else (review, pair, label)
               for i, (review, pair, label) in enumerate(reviews)]
    token_cache.cached_tokenize(changed, tokenizer, 64, "train", False, tmp_path)  # one review changed
    assert calls == ["train"] * 4
    token_cache.cached_tokenize(reviews, tokenizer, 64, "train", False, None)  # paths.cache_dir=null: no cache
    assert calls == ["train"] * 5


def test_sentence_pairs_keep_their_token_types(tokenizer, calls, tmp_path):
    pairs = [("A man walks in the park.", "Someone moves.", 0), ("A cat sleeps.", "A dog barks loudly.", 2)]
    made = token_cache.cached_tokenize(pairs, tokenizer, 48, "test", False, tmp_path)
    again = token_cache.cached_tokenize(pairs, tokenizer, 48, "test", False, tmp_path)
    assert calls == ["test"] and again.encodings == made.encodings and set(made.encodings) == {
        "input_ids", "token_type_ids"} and set(made.encodings["token_type_ids"][0]) == {0, 1}
    swapped = [(pair, premise, label) for premise, pair, label in pairs]  # the same strings in other places
    token_cache.cached_tokenize(swapped, tokenizer, 48, "test", False, tmp_path)
    assert calls == ["test", "test"]


def test_a_corrupt_cache_file_is_rebuilt_with_a_warning(tokenizer, calls, tmp_path):
    reviews = [("a fine film", None, 1), ("a dull film", None, 0)]
    made = token_cache.cached_tokenize(reviews, tokenizer, 16, "validation", False, tmp_path)
    (path,) = tmp_path.glob("tokens_validation_*.npz")
    path.write_bytes(b"not a zip")
    with pytest.warns(UserWarning, match="discarding corrupt tokenized text cache"):
        again = token_cache.cached_tokenize(reviews, tokenizer, 16, "validation", False, tmp_path)
    assert calls == ["validation", "validation"] and again.encodings == made.encodings
