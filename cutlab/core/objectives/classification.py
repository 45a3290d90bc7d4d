"""Classification objective: per-layer class logits Phi_0..Phi_L -> per-sample cross-entropy [batch, L+1]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cutlab.core.objectives.base import Headline


class ClassificationObjective(Headline):
    """f = cross-entropy of the shared readout's logits at each layer (paper Sec. 5: a shared readout on every layer); metric: accuracy.

    Accuracy is accumulated as per-layer counts of correct predictions, so it is exact over any number of batches.
    """

    metric_name = "accuracy"
    higher_is_better = True
    area_under_gamma = True  # Table 4: the area under accuracy(gamma_test)

    def loss_matrix(self, outputs: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        return torch.stack([F.cross_entropy(logits, labels, reduction="none") for logits in outputs], dim=1)

    def evaluation_terms(self, outputs: list[torch.Tensor], labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The loss matrix, the number of correct predictions per layer [L+1], and the number of samples."""
        outputs = [logits.detach() for logits in outputs]
        correct = torch.stack([(logits.argmax(dim=-1) == labels).sum() for logits in outputs])
        return self.loss_matrix(outputs, labels), correct, labels.numel()

    def metric_from_sums(self, sums: torch.Tensor, count: int) -> torch.Tensor:
        return sums / count
