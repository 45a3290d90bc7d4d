"""Token-level objective of causal-LM fine-tuning: next-token cross-entropy per layer, token accuracy as metric."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cutlab.core.data.alpaca import IGNORE


class TokenCrossEntropyObjective:
    """f(Phi_l) = mean next-token CE of layer l's logits over the sample's response tokens (SPEC section 3).

    Logits at position t predict the label at t+1 (the usual causal shift); labels -100 (prompt, padding)
    do not count. A sample's loss is the mean over its own counted tokens, so the loss matrix row of a
    long response weighs as much as a short one. The metric is token accuracy (argmax = label) over all
    counted tokens of the split, accumulated as correct-token counts so it is exact over any batching.
    """

    metric_name = "token_accuracy"
    higher_is_better = True

    @staticmethod
    def _shifted(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return logits[:, :-1].float(), labels[:, 1:]

    def _layer_terms(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample mean CE [B] and per-token correctness [B, T-1] (False where not counted)."""
        logits, labels = self._shifted(logits, labels)
        counted = labels != IGNORE
        token_losses = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
        per_sample = token_losses.sum(dim=1) / counted.sum(dim=1).clamp_min(1)
        correct = (logits.argmax(dim=-1) == labels) & counted
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
