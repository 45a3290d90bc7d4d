"""Video denoising: the per-layer reconstruction loss on patch tokens, and RMSE on the 0-255 scale."""

from __future__ import annotations

import torch

from cutlab.core.errors import CutlabError
from cutlab.core.objectives.base import Headline


class DenoisingObjective(Headline):
    """f = 1/2 sum_t ||x_t - Phi_l(x~)_t||^2 (the paper's layer loss, Sec. 4; App. B.2), on pixels scaled to [0, 1].

    Tokens are [B, T, P, n] (T frames, P patch positions, n pixels per patch). The sum runs over frames and
    pixels of one patch-position sequence, the unit DUST and UT process; the sample's loss is the mean over
    its P sequences, so a sample's loss does not grow with the frame size. The metric is RMSE on the 0-255
    scale, ``255 sqrt(mean (x - x_hat)^2)``, accumulated as sums so it is exact over any number of batches.
    """

    metric_name = "rmse"
    higher_is_better = False

    @staticmethod
    def _sample_losses(squared_error: torch.Tensor) -> torch.Tensor:
        """[B, T, P, n] squared errors -> [B]: 1/2 sum over frames and pixels, mean over patch positions."""
        return 0.5 * squared_error.sum(dim=(1, 3)).mean(dim=1)

    def loss_matrix(self, outputs: list[torch.Tensor], clean: torch.Tensor) -> torch.Tensor:
        _check_shapes(outputs, clean)
        return torch.stack([self._sample_losses((out - clean).pow(2)) for out in outputs], dim=1)

    def evaluation_terms(self, outputs: list[torch.Tensor], clean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The loss matrix and the metric sums from one squared error per layer (evaluation needs both)."""
        _check_shapes(outputs, clean)
        losses, sums = [], []
        for out in outputs:
            squared_error = (out.detach() - clean).pow(2)
            losses.append(self._sample_losses(squared_error))
            sums.append(squared_error.sum())
        return torch.stack(losses, dim=1), torch.stack(sums), clean.numel()

    def metric_from_sums(self, sums: torch.Tensor, count: int) -> torch.Tensor:
        return 255.0 * torch.sqrt(sums / count)


def _check_shapes(outputs: list[torch.Tensor], clean: torch.Tensor) -> None:
    """Each Phi_l reconstructs the clean tokens, shape for shape: another shape would broadcast against them and give
    a loss of the wrong thing, silently."""
    for layer, out in enumerate(outputs):
        if out.shape != clean.shape:
            raise CutlabError(f"Phi_{layer} has shape {list(out.shape)} but the clean video tokens have "
                              f"{list(clean.shape)} ([batch, frames T, patches P, pixels n]); every layer's output "
                              "must reconstruct the input tokens, shape for shape")
