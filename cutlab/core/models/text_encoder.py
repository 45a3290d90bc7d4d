"""A pretrained (or random-init) Hugging Face encoder as a layerwise classifier (paper Sec. 5).

Phi_l is the class logits of the shared readout psi (one Linear; softmax is in the loss) applied to the first
token ([CLS] / <s>) of hidden state l; hidden state 0 is the embedding layer's output. The perturbation acts on
the word embeddings, before the encoder adds position embeddings and normalises (``inputs_embeds``).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from cutlab.core.errors import CutlabError
from cutlab.core.models.base import LayerwiseModel


def encoder_depth(config) -> int:
    """Number of blocks of a Hugging Face encoder config (DistilBERT calls it n_layers)."""
    for key in ("num_hidden_layers", "n_layers"):
        if getattr(config, key, None) is not None:
            return int(getattr(config, key))
    raise ValueError(f"cannot tell the depth of a {type(config).__name__}")


def keep_first_layers(encoder: nn.Module, depth: int) -> None:
    """Keep the encoder's first ``depth`` blocks (``model.truncate=true`` with L below the encoder's depth)."""
    for holder in (encoder, getattr(encoder, "encoder", None), getattr(encoder, "transformer", None)):
        for name in ("layer", "layers"):
            blocks = getattr(holder, name, None) if holder is not None else None
            if isinstance(blocks, nn.ModuleList):
                setattr(holder, name, blocks[:depth])
                for key in ("num_hidden_layers", "n_layers"):
                    if hasattr(encoder.config, key):
                        setattr(encoder.config, key, depth)
                return
    raise ValueError(f"cannot find the block list of a {type(encoder).__name__} to truncate")


def position_limit(encoder: nn.Module) -> int | None:
    """The most tokens ``encoder`` can place: its max_position_embeddings, less RoBERTa's offset (its embeddings
    number positions from padding_idx + 1, so roberta-base's 514 place 512); None where the config gives none."""
    limit = getattr(encoder.config, "max_position_embeddings", None)
    if limit is None:
        return None
    offset = getattr(getattr(encoder, "embeddings", None), "padding_idx", None)
    return int(limit) - (int(offset) + 1 if offset is not None else 0)


class EncoderClassifier(LayerwiseModel):
    """``encoder``: a ``transformers`` encoder (BertModel, DistilBertModel, RobertaModel, ...)."""

    def __init__(self, encoder: nn.Module, num_labels: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.depth = encoder_depth(encoder.config)
        width = encoder.get_input_embeddings().embedding_dim
        self.readout = nn.Linear(width, num_labels)  # psi, shared by every layer
        accepted = inspect.signature(encoder.forward).parameters
        self._forwarded = [key for key in ("token_type_ids",) if key in accepted]
        self.pad_token_id = getattr(encoder.config, "pad_token_id", None)  # the tokenizer must pad with it
        self.max_positions = position_limit(encoder)  # data.max_length may not pass it

    def input_embeddings(self) -> nn.Embedding:
        """The word-embedding table the tokenizer's ids index (and sigma_x may be measured on)."""
        return self.encoder.get_input_embeddings()

    def perturbable(self, inputs: dict) -> torch.Tensor:
        return self.encoder.get_input_embeddings()(inputs["input_ids"])

    def unroll(self, embedded: torch.Tensor, inputs: dict) -> list[torch.Tensor]:
        extra = {key: inputs[key] for key in self._forwarded if key in inputs}
        out = self.encoder(inputs_embeds=embedded, attention_mask=inputs["attention_mask"],
                           output_hidden_states=True, return_dict=True, **extra)
        return [self.readout(hidden[:, 0]) for hidden in out.hidden_states]

    def forward(self, inputs: dict) -> list[torch.Tensor]:
        return self.unroll(self.perturbable(inputs), inputs)


def build_encoder_classifier(source: str, depth: int, num_labels: int, pretrained: bool = True,
                             architecture: dict | None = None, truncate: bool = False,
                             name: str = "hf_encoder", config_if_missing: dict | None = None) -> EncoderClassifier:
    """``model=hf_encoder|distilbert|roberta``: the encoder ``source`` (its first ``depth`` blocks when
    ``truncate``), every hidden state's first token through one shared readout."""
    from cutlab.core.models.hf_loading import load_model

    encoder = load_model(source, bool(pretrained), dict(architecture or {}),
                         config_if_missing=dict(config_if_missing or {}))
    full = encoder_depth(encoder.config)
    if depth != full:
        if not (truncate and depth < full):
            raise CutlabError(
                f"model={name} ({source}) has {full} layers but L={depth}: pass L={full}, "
                f"or model.truncate=true to keep its first L < {full} layers"
            )
        keep_first_layers(encoder, depth)
    return EncoderClassifier(encoder, num_labels)
