"""UT text classifier: a pretrained encoder's word embeddings -> UT layers -> mean pooling -> shared readout.

The block is the video UT's (cutlab/core/models/ut.py; Yang, Huang & Wipf 2022), acting directly on the
embedding width d instead of a DCT code space, with padding masked out of the attention:

    Z   = (1 - beta) Y + beta softmax(scale (Y W_a^T)(Y W_a^T)^T + mask) Y     W_a tied across layers
    Y_l = Z - ReLU(Z S_l + b_l) S_l                                            S_l = (W_l + W_l^T)/2

Phi_l = psi(mean over real tokens of Y_l): the logits of one Linear readout shared by every layer.
Parameters are Xavier-initialised (paper App. B.3). There are no position embeddings: the symmetric
attention and the mean pooling make the model a function of the bag of tokens [default, as in Yang et al.].
"""

from __future__ import annotations

import torch
from torch import nn

from cutlab.core.models.base import LayerwiseModel


def masked_symmetric_attention(tokens: torch.Tensor, queries: torch.Tensor, mask: torch.Tensor, step: float,
                               scale: float) -> torch.Tensor:
    """``(1 - step) Y + step softmax(scale Q Q^T) Y`` with padded keys excluded; mask: [B, T], 1 for real tokens."""
    scores = scale * queries @ queries.transpose(-1, -2)
    scores = scores.masked_fill(~mask[:, None, :].bool(), torch.finfo(scores.dtype).min)
    return (1.0 - step) * tokens + step * (torch.softmax(scores, dim=-1) @ tokens)


def mean_pool(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.to(tokens.dtype).unsqueeze(-1)
    return (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


class UTTextClassifier(LayerwiseModel):
    def __init__(self, embeddings: torch.Tensor, depth: int, num_labels: int, attention_step: float = 0.5,
                 attention_scale: float | None = None, train_embeddings: bool = False) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"UT needs depth L >= 1, got {depth}")
        self.depth = depth
        vocab, width = embeddings.shape
        self.embeddings = nn.Embedding.from_pretrained(embeddings.clone(), freeze=not train_embeddings)
        self.attention_step = attention_step
        self.attention_scale = attention_scale if attention_scale is not None else 1.0 / width
        self.attention = nn.Parameter(nn.init.xavier_uniform_(torch.empty(width, width)))
        self.weights = nn.ParameterList(
            [nn.Parameter(nn.init.xavier_uniform_(torch.empty(width, width))) for _ in range(depth)])
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(width)) for _ in range(depth)])
        self.readout = nn.Linear(width, num_labels)  # psi, shared by every layer

    pad_token_id = None  # UT masks padding itself: any pad id is fine

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings

    def perturbable(self, inputs: dict) -> torch.Tensor:
        return self.embeddings(inputs["input_ids"])

    def unroll(self, embedded: torch.Tensor, inputs: dict) -> list[torch.Tensor]:
        mask = inputs["attention_mask"]
        tokens = embedded
        outputs = [self.readout(mean_pool(tokens, mask))]
        for weight, bias in zip(self.weights, self.biases):
            attended = masked_symmetric_attention(tokens, tokens @ self.attention.T, mask, self.attention_step,
                                                  self.attention_scale)
            symmetric = 0.5 * (weight + weight.T)
            tokens = attended - torch.relu(attended @ symmetric + bias) @ symmetric
            outputs.append(self.readout(mean_pool(tokens, mask)))
        return outputs

    def forward(self, inputs: dict) -> list[torch.Tensor]:
        return self.unroll(self.perturbable(inputs), inputs)


def build_ut_text_classifier(source: str, depth: int, num_labels: int, attention_step: float = 0.5,
                             attention_scale: float | None = None, train_embeddings: bool = False) -> UTTextClassifier:
    """``model=ut_text``: the word embeddings of the pretrained encoder ``source`` under ``depth`` UT layers."""
    from cutlab.core.models.hf_loading import load_model

    embeddings = load_model(source, pretrained=True).get_input_embeddings().weight.detach().float()
    return UTTextClassifier(embeddings, depth, num_labels, attention_step=attention_step,
                            attention_scale=attention_scale, train_embeddings=bool(train_embeddings))
