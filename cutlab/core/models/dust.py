"""DUST: the deep-unfolded sequential transformer for video (De Weerdt et al. 2023; paper App. C.3-C.4)."""

from __future__ import annotations

import torch
from torch import nn

from cutlab.core.models.base import LayerwiseModel, from_sequences, symmetric_attention, to_sequences
from cutlab.core.models.dct import check_dct_size, dct_2d_dictionary


#: how training computes c: power iteration (a few warm-started matrix-vector products a step; a lower bound that
#: lags ||D||_2^2 where the top singular values are close, as a DCT frame's are) or exact (an SVD a step)
LIPSCHITZ_ESTIMATES = ("power_iteration", "exact")


def soft_threshold(values: torch.Tensor, threshold: float) -> torch.Tensor:
    """The proximal operator of threshold*||.||_1."""
    return torch.sign(values) * torch.relu(values.abs() - threshold)


def power_iteration(dictionary: torch.Tensor, vector: torch.Tensor, iterations: int) -> torch.Tensor:
    """||D||_2^2 (the Lipschitz constant of the gradient of 1/2||x - D h||^2) by power iteration on D^T D.

    ``vector`` (the top right singular vector's estimate) is updated in place without gradient: warm-started
    from the last step, a couple of iterations track a dictionary that moves a little per step, at the cost of
    a few matrix-vector products instead of an SVD (19 ms per dictionary per step on 2 CPU cores). The value
    ||D v||^2 keeps its gradient, 2 D v v^T, which is the exact gradient of sigma_max^2: the step size c is part
    of the layer, and a gradient that treated it as constant would steer D against its own c (we saw ERM
    DUST's loss climb steadily from step 10 on Ped2 with a detached c).
    """
    with torch.no_grad():
        for _ in range(iterations):
            vector.copy_(dictionary.T @ (dictionary @ vector))
            vector.div_(vector.norm())
    return (dictionary @ vector.clone()).pow(2).sum()  # a snapshot: later refinements must not alter this graph


def _finite_or_nan(value: torch.Tensor) -> torch.Tensor:
    """A norm that overflows is a diverged dictionary: NaN, not inf (with c = inf every code is 0 and the
    reconstruction a finite 0, which the held-out check would take for a result)."""
    return value if torch.isfinite(value) else torch.full_like(value, torch.nan)


class DUST(LayerwiseModel):
    """Symmetric attention over time, then one LISTA step with weights coupled to the dictionary D.

    Codes are row vectors h (d atoms), reconstructions ``Phi = h D^T`` (n pixels). Per block l:

        Z   = (1 - beta) H + beta softmax(scale (H D_l^T)(H D_l^T)^T) H       attention scored on reconstructions
        H_l = soft_theta( Z (I - D_l^T D_l / c) + x D_l / c )                 LISTA, coupled weights (Chen et al. 2018)

    and ``H_0 = soft_theta(x D_0 / c)``, the first ISTA step from zero. ``c = margin * ||D||_2^2`` is recomputed
    from the current dictionary (with its gradient) so the step stays a descent step as D trains. Only the dictionaries train:
    theta and beta are fixed, because learning them let the model meet the descent constraints trivially
    (paper App. C.4). ``per_layer_dictionary`` gives D_0 ... D_L (the paper's constrained DUST) instead of
    one shared D (its ERM DUST).
    """

    def __init__(
        self,
        depth: int,
        patch: int = 16,
        atoms: int = 512,
        threshold: float = 0.01,
        attention_step: float = 0.5,
        attention_scale: float | None = None,
        lipschitz_margin: float = 1.0,
        per_layer_dictionary: bool = False,
        power_iterations: int = 2,
        lipschitz_estimate: str = "power_iteration",
    ) -> None:
        super().__init__()
        self.check_settings(depth, patch, atoms, threshold, attention_step, lipschitz_margin, power_iterations,
                            lipschitz_estimate)
        self.depth = depth
        self.threshold = threshold
        self.attention_step = attention_step
        self.attention_scale = attention_scale if attention_scale is not None else 1.0 / (patch * patch)
        self.lipschitz_margin = lipschitz_margin
        initial = dct_2d_dictionary(patch, atoms)
        count = depth + 1 if per_layer_dictionary else 1
        self.dictionaries = nn.ParameterList([nn.Parameter(initial.clone()) for _ in range(count)])
        self.power_iterations = power_iterations
        self.lipschitz_estimate = lipschitz_estimate
        # one singular-vector estimate per dictionary, converged once here, then refined at every training forward
        self.register_buffer("singular_vectors", torch.ones(count, atoms) / atoms**0.5)
        self._exact_norms: dict[int, tuple[tuple[int, int], torch.Tensor]] = {}  # eval mode's ||D||_2^2 (step_size)
        self.converge_step_sizes()

    @staticmethod
    def check_settings(depth: int, patch: int, atoms: int, threshold: float, attention_step: float,
                       lipschitz_margin: float, power_iterations: int, lipschitz_estimate: str, **others) -> None:
        """ValueError on a value ``__init__`` refuses; needs no weights, so a run is refused before it starts
        (cutlab.tasks.models.check_model_settings)."""
        if depth < 1:
            raise ValueError(f"DUST needs depth L >= 1, got {depth}")
        if not threshold >= 0 or not attention_step >= 0:
            raise ValueError(f"threshold (theta) and attention_step (beta) must be >= 0, got {threshold} and "
                             f"{attention_step}")
        if lipschitz_margin < 1.0:
            raise ValueError(f"lipschitz_margin must be >= 1 (c >= ||D||_2^2), got {lipschitz_margin}")
        if lipschitz_estimate == "power_iteration" and not power_iterations >= 1:  # 0 left c where it started
            raise ValueError(f"power_iterations must be >= 1 (the step size c tracks ||D||_2^2 as D trains), got "
                             f"{power_iterations}")
        if lipschitz_estimate not in LIPSCHITZ_ESTIMATES:
            raise ValueError(f"lipschitz_estimate must be one of {', '.join(LIPSCHITZ_ESTIMATES)}, got "
                             f"{lipschitz_estimate!r}")
        check_dct_size(patch, atoms)

    def converge_step_sizes(self, iterations: int = 500) -> None:
        """Run power iteration to convergence, e.g. after dictionaries were replaced from outside training."""
        with torch.no_grad():
            for index, dictionary in enumerate(self.dictionaries):
                power_iteration(dictionary, self.singular_vectors[index], iterations)

    def dictionary_index(self, layer: int) -> int:
        return layer if len(self.dictionaries) > 1 else 0

    def step_size(self, index: int) -> torch.Tensor:
        """c = margin * ||D||_2^2 for dictionary ``index``: in training tracked by power iteration as the dictionary
        trains (``lipschitz_estimate=power_iteration``) or exact (``exact``); exact in eval mode.

        An evaluation uses the exact value, the paper's c (App. C), so that it is a function of the weights alone: with
        the estimate refined at every forward, a test number moved with the evaluation's batch size and with whatever
        was evaluated before it, and ``cutlab-eval`` could not repeat a run's own numbers."""
        dictionary = self.dictionaries[index]
        if self.training and self.lipschitz_estimate == "exact":  # with its gradient, 2 sigma u v^T
            return self.lipschitz_margin * _finite_or_nan(torch.linalg.matrix_norm(dictionary, ord=2).pow(2))
        if self.training:
            return self.lipschitz_margin * power_iteration(dictionary, self.singular_vectors[index],
                                                           self.power_iterations)
        return self.lipschitz_margin * self._squared_norm(index)

    def _squared_norm(self, index: int) -> torch.Tensor:
        # one SVD per dictionary while its weights stay the same (any in-place change, an optimiser step or a loaded
        # state, bumps the tensor's version), not one per evaluated batch
        dictionary = self.dictionaries[index]
        key = (dictionary.data_ptr(), dictionary._version)
        if self._exact_norms.get(index, (None,))[0] != key:
            with torch.no_grad():
                self._exact_norms[index] = (key, _finite_or_nan(torch.linalg.matrix_norm(dictionary, ord=2).pow(2)))
        return self._exact_norms[index][1]

    def block(self, codes: torch.Tensor, noisy: torch.Tensor, index: int,
              c: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Block l on codes H_{l-1}: attention scored on D_l's reconstructions, then the LISTA step
        ``soft(Z (I - D^T D / c) + x D / c)``, computed as ``Z - (Z D^T - x) D / c`` (no d x d matrix). Returns the
        codes and c, which a second pass of the same block reuses (power iteration moves the estimate at every call)."""
        dictionary = self.dictionaries[index]
        attended = symmetric_attention(codes, codes @ dictionary.T, self.attention_step, self.attention_scale)
        # c after the attention: the order the graph was always built in, so gradients sum in the same order
        c = self.step_size(index) if c is None else c
        return soft_threshold(attended - (attended @ dictionary.T - noisy) @ dictionary / c, self.threshold), c

    def forward(self, noisy: torch.Tensor) -> list[torch.Tensor]:
        """noisy: [B, T, P, n] patch tokens -> [Phi_0, ..., Phi_L], each [B, T, P, n]."""
        return self._unroll(noisy, local=False)[0]

    def unroll_local(self, embedded: torch.Tensor, inputs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return self._unroll(embedded, local=True)

    def _unroll(self, noisy: torch.Tensor, local: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        batch = noisy.shape[0]
        x = to_sequences(noisy)
        first = self.dictionaries[0]
        codes = soft_threshold(x @ first / self.step_size(0), self.threshold)
        outputs = [from_sequences(codes @ first.T, batch)]
        local_outputs = outputs[:1] if local else []
        for layer in range(1, self.depth + 1):
            index = self.dictionary_index(layer)
            dictionary = self.dictionaries[index]
            updated, c = self.block(codes, x, index)
            if local:
                local_codes, _ = self.block(codes.detach(), x, index, c)
                local_outputs.append(from_sequences(local_codes @ dictionary.T, batch))
            codes = updated
            outputs.append(from_sequences(codes @ dictionary.T, batch))
        return outputs, local_outputs
