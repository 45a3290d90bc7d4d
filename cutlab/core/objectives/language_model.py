"""Token-level objective of causal-LM fine-tuning: next-token cross-entropy per layer, token accuracy as metric."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cutlab.core.data.alpaca import IGNORE
from cutlab.core.objectives.base import Headline


class TokenCrossEntropyObjective(Headline):
    """f(Phi_l) = mean next-token CE of layer l's logits over the sample's response tokens (paper Sec. 6, App. B.7).

    Logits at position t predict the label at t+1 (the usual causal shift); labels -100 (prompt, padding)
    do not count. A sample's loss is the mean over its own counted tokens, so the loss matrix row of a
    long response weighs as much as a short one. The metric is token accuracy (argmax = label) over all
    counted tokens of the split, accumulated as correct-token counts so it is exact over any batching.
    """

    metric_name = "token_accuracy"
    higher_is_better = True

    @staticmethod
    def _layer_terms(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample mean CE [B] and per-sample correct-token counts [B] of one layer's logits [B, T, V].

        Only the counted positions are gathered and cast to float32, so prompt and padding positions cost
        no float32 copy of the [T, vocab] logits (gigabytes per layer for Llama's 128k vocabulary).
        """
        logits, labels = logits[:, :-1], labels[:, 1:]  # position t predicts token t+1
        counted = labels != IGNORE
        rows = counted.nonzero()[:, 0]
        selected, targets = logits[counted].float(), labels[counted]
        token_losses = F.cross_entropy(selected, targets, reduction="none")
        zeros = torch.zeros(len(labels), device=logits.device)
        per_sample = zeros.index_add(0, rows, token_losses) / counted.sum(dim=1).clamp_min(1)
        correct = zeros.index_add(0, rows, (selected.argmax(dim=-1) == targets).float())
        return per_sample, correct

    def loss_matrix(self, outputs: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        return torch.stack([self._layer_terms(logits, labels)[0] for logits in outputs], dim=1)

    def evaluation_terms(self, outputs: list[torch.Tensor], labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Loss matrix [B, L+1], correct-token counts per layer [L+1], and the number of counted tokens."""
        losses, correct = [], []
        for logits in outputs:
            per_sample, hits = self._layer_terms(logits.detach(), labels)
            losses.append(per_sample)
            correct.append(hits.sum())
        count = int((labels[:, 1:] != IGNORE).sum())
        return torch.stack(losses, dim=1), torch.stack(correct).double(), count

    def metric_from_sums(self, sums: torch.Tensor, count: int) -> torch.Tensor:
        return sums / max(count, 1)
