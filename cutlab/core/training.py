"""The training loop around :class:`PrimalDual`: epochs, warm-up, deterministic batches and noise, resume.

Everything random in a step is a function of (seed, epoch, step), not of a running RNG, so a run resumed
from a checkpoint draws the same batches and the same noise as one that never stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import torch

from cutlab.core.errors import CutlabError
from cutlab.core.precision import DEFAULT_PRECISION, as_float32, forward_precision
from cutlab.core.perturbation import (TRAIN_STREAM, Perturbation, noise_generator, perturbed_forward,
                                     perturbed_forward_local)
from cutlab.core.primal_dual import PrimalDual, StepResult


class Objective(Protocol):
    def loss_matrix(self, outputs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor: ...


class SampleSource(Protocol):
    """A map-style dataset: ``len`` and ``[i]`` returning one clean sample (a tensor, or a dict of them).

    A source whose samples are not independent of one another (windows of one video clip) also has a
    ``sample_groups`` attribute (cutlab.core.data.groups.SampleGroups), which the verdict's sampling interval resamples instead of samples."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int): ...


@dataclass(frozen=True)
class Schedule:
    epochs: int
    batch_size: int
    warmup_epochs: int = 0  # primal warm-up: lambda frozen at 0 for the first epochs (paper App. B.2)
    max_steps_per_epoch: int | None = None  # a budget cap for quick runs; None = the whole training set


@dataclass
class Progress:
    """Where the loop is: the next step to run is batch ``batch`` of epoch ``epoch``; ``step`` counts all steps."""

    epoch: int = 0
    batch: int = 0
    step: int = 0


# torch seeds a generator with an unsigned 64-bit integer; seed * 100_003 + epoch stays below 2**64 for every seed up
# to this and any epoch count below 2**61 (a larger seed stopped epoch 0 with "Overflow when unpacking long long")
MAX_SEED = 2**47 - 1


def epoch_batches(count: int, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    """The shuffled sample indices of every batch of one epoch, determined by (seed, epoch)."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return list(torch.randperm(count, generator=generator).split(batch_size))


def collate(samples: SampleSource, indices: torch.Tensor):
    """Stack samples into a batch; a dataset with ragged samples (text) provides its own ``collate`` method."""
    # a torch Subset (e.g. the first batches that set epsilon=auto) collates like the dataset it views
    own = getattr(samples, "collate", None) or getattr(getattr(samples, "dataset", None), "collate", None)
    if own is not None:
        return own([samples[int(i)] for i in indices])
    return torch.stack([samples[int(i)] for i in indices])


def to_device(batch, device: torch.device):
    """A tensor, or a dict / tuple of tensors, moved to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(value, device) for value in batch)
    return batch


def detach_left_out(outputs: list[torch.Tensor], needed: list[bool]) -> list[torch.Tensor]:
    """Layers whose loss has a zero weight in the gradient are recorded, not back-propagated: for ERM every layer but
    the last, when constrained those whose multipliers are 0 (``needed``: PrimalDual.layers_in_gradient)."""
    return [out if keep else out.detach() for out, keep in zip(outputs, needed)]


StepCallback = Callable[[Progress, StepResult, float], None]
EpochCallback = Callable[[Progress], None]


class Trainer:
    """Runs the schedule; ``on_step`` sees every step's result, ``on_epoch_end`` every finished epoch.

    ``prepare`` turns a collated clean batch, already on the device, into (model input, target): uint8
    frames into float patch tokens for both (denoising), or token ids and labels (classification).
    Perturbation of ``model.perturbable(input)`` uses ``noise`` (gamma_train) with a generator of (seed, step).
    ``precision`` (cutlab.core.precision) is the forward pass's arithmetic; losses and constraints stay float32.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        objective: Objective,
        primal_dual: PrimalDual,
        train_set: SampleSource,
        schedule: Schedule,
        prepare: Callable,
        noise: Perturbation,
        device: torch.device | str = "cpu",
        precision: str = DEFAULT_PRECISION,
    ) -> None:
        self.model = model
        self.objective = objective
        self.primal_dual = primal_dual
        self.train_set = train_set
        self.schedule = schedule
        self.prepare = prepare
        self.noise = noise
        self.device = torch.device(device)
        self.precision = precision
        self.progress = Progress()

    def steps_per_epoch(self) -> int:
        full = -(-len(self.train_set) // self.schedule.batch_size)
        cap = self.schedule.max_steps_per_epoch
        return min(full, cap) if cap else full

    def dual_active(self, epoch: int) -> bool:
        return epoch >= self.schedule.warmup_epochs

    def train_step(self, clean_batch) -> StepResult:
        inputs, target = self.prepare(to_device(clean_batch, self.device))
        generator = noise_generator(self.noise.seed, TRAIN_STREAM, self.progress.step, self.device)
        self.model.train()
        noise = self.noise
        dual_active = self.dual_active(self.progress.epoch)
        local = local_losses = None
        with forward_precision(self.precision, self.device):  # the losses below are taken in float32
            if dual_active and self.primal_dual.uses_local_losses:  # detach_prev=local, constraint_gradient=block
                outputs, local = perturbed_forward_local(self.model, inputs, noise.gamma, noise.sigma, noise.mean,
                                                         generator)
            else:
                outputs = perturbed_forward(self.model, inputs, noise.gamma, noise.sigma, noise.mean, generator)
        if local is not None:
            local_losses = self.objective.loss_matrix(as_float32(local), target)
        outputs = as_float32(outputs)
        outputs = detach_left_out(outputs, self.primal_dual.layers_in_gradient(dual_active))
        return self.primal_dual.step(self.objective.loss_matrix(outputs, target), dual_active, local_losses)

    def batches_left_in_epoch(self) -> Iterator[torch.Tensor]:  # of sample indices
        indices = epoch_batches(len(self.train_set), self.schedule.batch_size, self.noise.seed, self.progress.epoch)
        yield from indices[self.progress.batch : self.steps_per_epoch()]

    def run(self, on_step: StepCallback | None = None, on_epoch_end: EpochCallback | None = None) -> Progress:
        """Train from ``self.progress`` to the end of the schedule (resumes mid-epoch after ``load_state_dict``)."""
        while self.progress.epoch < self.schedule.epochs:
            for indices in self.batches_left_in_epoch():
                started = time.perf_counter()
                result = self.train_step(collate(self.train_set, indices))
                self.progress.batch += 1
                self.progress.step += 1
                if on_step:
                    on_step(self.progress, result, time.perf_counter() - started)
            self.primal_dual.end_epoch(self.dual_active(self.progress.epoch))
            self.progress.epoch += 1
            self.progress.batch = 0
            if on_epoch_end:
                on_epoch_end(self.progress)
        return self.progress

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "primal_optimizer": self.primal_dual.primal_optimizer.state_dict(),
            "primal_dual": self.primal_dual.state_dict(),
            "progress": vars(self.progress).copy(),
            # dropout (the Hugging Face encoders', LoRA's) draws from the device's global generator: on CUDA not the CPU's
            "rng": {"torch": torch.get_rng_state(),
                    **({"cuda": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {})},
            "noise_device": self.device.type,
        }

    def load_state_dict(self, state: dict) -> None:
        # The noise comes from the device's own generator (CPU: Mersenne Twister, CUDA: Philox), so the same seed
        # draws other noise on another kind of device: resumed there, a run would be neither the one it started as
        # nor one started there. Checkpoints from before the key was written all trained on the CPU.
        trained_on = state.get("noise_device", "cpu")
        if trained_on != self.device.type:
            raise CutlabError(f"this run trained on {trained_on} and would resume on {self.device.type}: its training "
                              f"noise is drawn by the device's own generator, which differs between the two, so the "
                              f"resumed run would be neither; resume it with device={trained_on}, or pass "
                              "run_name=<new name> to start a separate run on this device")
        self.model.load_state_dict(state["model"])
        self.primal_dual.primal_optimizer.load_state_dict(state["primal_optimizer"])
        self.primal_dual.load_state_dict(state["primal_dual"])
        self.progress = Progress(**state["progress"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"]:  # same device kind, checked above; absent from checkpoints before 2026-12-03
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
