"""One check for every pretrained text model: a ``model.tokenizer`` other than the model's own must give each token
the id the model's own tokenizer gives it.

The pretrained embedding table is indexed by the ids of the tokenizer the model was trained with; the noise scale
sigma_x (paper Sec. 5) and every layer's input come from the rows those ids fetch. A tokenizer whose ids name other
tokens fetches other tokens' embeddings, and the run trains on scrambled text without a word: the size and pad
checks let through e.g. a cased vocabulary of fewer rows with an uncased encoder, or a causal LM's own BPE with its
special tokens in another order.
"""

from __future__ import annotations

from typing import Callable

from cutlab.errors import CutlabError


def check_same_vocabulary(tokenizer, name: str, source: str, load_own: Callable[[str], object]) -> None:
    """Stop ``tokenizer`` (given as ``model.tokenizer=name``) when its ids name other tokens than the tokenizer
    ``load_own(source)`` reads beside the pretrained model ``source``; a model that ships none passes."""
    try:
        own = load_own(source)
    except CutlabError:
        return  # the model ships no tokenizer to compare with
    ours, theirs = own.get_vocab(), tokenizer.get_vocab()
    moved = sum(1 for token, index in theirs.items() if ours.get(token) != index)
    if moved:
        raise CutlabError(
            f"tokenizer {name} gives {moved} of its {len(theirs)} tokens other ids than the pretrained "
            f"model {source}'s own tokenizer, so they would read other tokens' embeddings: set "
            "model.tokenizer=null (the model's own), or a tokenizer with the same vocabulary"
        )
