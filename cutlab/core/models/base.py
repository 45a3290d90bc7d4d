"""The layerwise-model protocol and the attention both unrolled video models share."""

from __future__ import annotations

import torch
from torch import nn


class LayerwiseModel(nn.Module):
    """A model with ``depth`` blocks that exposes all L+1 representations of its input.

    ``forward(x)`` returns a list ``[Phi_0, ..., Phi_L]``; Phi_0 is the representation before the first
    block. Every objective turns that list into the per-sample, per-layer loss matrix [batch, L+1]. For video, x and
    every Phi_l are patch tokens [batch, frames T, patches P, pixels n], each Phi_l a reconstruction of the clean x.
    """

    depth: int
    # whether the untrained model's Phi_0 is its input exactly: at gamma 0 it is then already the target, and a ratio
    # constraint form would divide by its l_0 of 0 (refused from the config: cutlab.run.build.check_before_building)
    phi_0_is_input: bool = False

    def perturbable(self, inputs):
        """The tensor the perturbation x~ = x + xi acts on (paper Sec. 4): the input itself for video models.

        Text models override it to return the word embeddings (``inputs_embeds``) of their token ids (Sec. 5).
        """
        return inputs

    def unroll(self, embedded: torch.Tensor, inputs) -> list[torch.Tensor]:
        """Phi_0..Phi_L from the (perturbed) output of :meth:`perturbable`; ``inputs`` carries masks and the like."""
        return self(embedded)

    def unroll_local(self, embedded: torch.Tensor, inputs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``(outputs, local)``: Phi_0..Phi_L as :meth:`unroll` gives them, and each Phi_l recomputed by block l from
        its *detached* input Phi_{l-1} (local[0] is Phi_0 itself). Equal in value; local[l]'s gradient reaches only
        block l's own computation. Models that can re-run one block override it (see :func:`supports_local_prev`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot re-run one block on a detached input")


def supports_local_prev(model: nn.Module) -> bool:
    """Whether ``model`` overrides :meth:`LayerwiseModel.unroll_local` (train.detach_prev=local needs it)."""
    return getattr(type(model), "unroll_local", LayerwiseModel.unroll_local) is not LayerwiseModel.unroll_local


def symmetric_attention(tokens: torch.Tensor, queries: torch.Tensor, step: float, scale: float) -> torch.Tensor:
    """One symmetric softmax-attention step over the sequence axis (paper App. C.2.1).

    ``Z = (1 - beta) Y + beta softmax(scale * Q Q^T) Y`` with ``Q = Y W_a^T``: queries and keys share one
    projection and there is no value matrix (Yang et al. 2022), which keeps the layer a descent step of
    a symmetric energy. tokens: [N, T, k]; queries: [N, T, q] (already projected).
    """
    return (1.0 - step) * tokens + step * (attention_weights(queries, scale) @ tokens)


def attention_weights(queries: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale * Q Q^T)`` over the sequence axis: [N, T, q] -> [N, T, T], each row summing to 1."""
    return torch.softmax(scale * queries @ queries.transpose(-1, -2), dim=-1)


def to_sequences(tokens: torch.Tensor) -> torch.Tensor:
    """[B, T, P, n] video patch tokens -> [B*P, T, n]: one sequence over time per patch position."""
    batch, frames, patches, width = tokens.shape
    return tokens.permute(0, 2, 1, 3).reshape(batch * patches, frames, width)


def from_sequences(sequences: torch.Tensor, batch: int) -> torch.Tensor:
    """Inverse of :func:`to_sequences`: [B*P, T, n] -> [B, T, P, n]."""
    _, frames, width = sequences.shape
    return sequences.reshape(batch, -1, frames, width).permute(0, 2, 1, 3)
