"""UT: the unrolled transformer of Yang, Huang & Wipf (2022), on video patch tokens."""

from __future__ import annotations

import torch
from torch import nn

from cutlab.core.models.base import LayerwiseModel, from_sequences, symmetric_attention, to_sequences
from cutlab.core.models.dct import check_dct_size, dct_2d_dictionary


class UT(LayerwiseModel):
    """Tied symmetric attention, then a ReLU descent step with a symmetric weight, in a DCT code space.

    Tokens are encoded once, ``Y_0 = x E``, and every layer is read out by the same decoder,
    ``Phi_l = Y_l D^T`` (D: DCT dictionary, E initialised to its right inverse so Phi_0 = x at the start). Per block:

        Z   = (1 - beta) Y + beta softmax(scale (Y W_a^T)(Y W_a^T)^T) Y     W_a shared by queries/keys, tied over layers
        Y_l = Z - ReLU(Z S_l + b_l) S_l                                     S_l = (W_l + W_l^T)/2 symmetric

    The second line is a gradient step on the energy 1/2 ||ReLU(Z S + b)||^2, the unrolled form of a
    ReLU feed-forward layer with a symmetric weight and a residual (Yang et al. 2022, section 4). Its output is not
    clipped at 0, where the paper's App. C words eq. (48) as a linear map, a residual and a ReLU: DCT codes are
    signed, and this form keeps an untrained layer near the identity (Phi_0 = x, and S near 0 changes little).
    """

    phi_0_is_input = True  # untrained: E is D's right inverse (LayerwiseModel.phi_0_is_input)

    def __init__(
        self,
        depth: int,
        patch: int = 16,
        atoms: int = 512,
        # the defaults are conf/model/ut.yaml's: a run builds UT from that yaml, which is where they are set and
        # why (chosen on validation; at feedforward_init_std 0.02 every untrained layer multiplied the loss ~9-fold)
        attention_step: float = 0.1,
        attention_scale: float | None = None,
        feedforward_init_std: float = 0.002,
    ) -> None:
        super().__init__()
        self.check_settings(depth, patch, atoms, attention_step, feedforward_init_std)
        self.depth = depth
        self.attention_step = attention_step
        self.attention_scale = attention_scale if attention_scale is not None else 1.0 / (patch * patch)
        decoder = dct_2d_dictionary(patch, atoms)
        self.decoder = nn.Parameter(decoder)
        # E = (D D^T)^-1 D, so x E D^T = x: the untrained model passes its input through exactly.
        self.encoder = nn.Parameter(torch.linalg.solve(decoder @ decoder.T, decoder))
        # W_a starts as D: attention scores compare reconstructed frames, like DUST's.
        self.attention = nn.Parameter(decoder.clone())
        self.weights = nn.ParameterList(
            [nn.Parameter(feedforward_init_std * torch.randn(atoms, atoms)) for _ in range(depth)]
        )
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(atoms)) for _ in range(depth)])

    @staticmethod
    def check_settings(depth: int, patch: int, atoms: int, attention_step: float, feedforward_init_std: float,
                       **others) -> None:
        """ValueError on a value ``__init__`` refuses; needs no weights, so a run is refused before it starts
        (cutlab.tasks.models.check_model_settings)."""
        if depth < 1:
            raise ValueError(f"UT needs depth L >= 1, got {depth}")
        if not attention_step >= 0 or not feedforward_init_std >= 0:
            raise ValueError(f"attention_step (beta) and feedforward_init_std must be >= 0, got {attention_step} and "
                             f"{feedforward_init_std}")
        check_dct_size(patch, atoms)

    def block(self, codes: torch.Tensor, layer: int) -> torch.Tensor:
        """Block ``layer`` (0-based) on codes Z: tied symmetric attention, then the ReLU descent step."""
        attended = symmetric_attention(codes, codes @ self.attention.T, self.attention_step, self.attention_scale)
        weight = self.weights[layer]
        symmetric = 0.5 * (weight + weight.T)
        return attended - torch.relu(attended @ symmetric + self.biases[layer]) @ symmetric

    def forward(self, noisy: torch.Tensor) -> list[torch.Tensor]:
        """noisy: [B, T, P, n] patch tokens -> [Phi_0, ..., Phi_L], each [B, T, P, n]."""
        return self._unroll(noisy, local=False)[0]

    def unroll_local(self, embedded: torch.Tensor, inputs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return self._unroll(embedded, local=True)

    def _unroll(self, noisy: torch.Tensor, local: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        batch = noisy.shape[0]
        codes = to_sequences(noisy) @ self.encoder
        outputs = [from_sequences(codes @ self.decoder.T, batch)]
        local_outputs = outputs[:1] if local else []
        for layer in range(self.depth):
            if local:
                local_outputs.append(from_sequences(self.block(codes.detach(), layer) @ self.decoder.T, batch))
            codes = self.block(codes, layer)
            outputs.append(from_sequences(codes @ self.decoder.T, batch))
        return outputs, local_outputs
