"""What one run trains with, built from its config: device, epsilon, constraints, primal-dual step, trainer, evaluator."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from cutlab.core.data.video import check_video_loader
from cutlab.core.errors import NOT_FINITE_AS_INITIALISED, NonFiniteLoss
from cutlab.core.evaluation import Evaluation, buffers_kept, evaluate
from cutlab.core.perturbation import Perturbation
from cutlab.core.precision import DEFAULT_PRECISION, PRECISION_BEFORE_KEY
from cutlab.core.constraints import Constraints
from cutlab.core.out_of_memory import settings_named_on_out_of_memory
from cutlab.core.primal_dual import DualSettings, PrimalDual
from cutlab.core.training import Schedule, SampleSource, Trainer
from cutlab.errors import CutlabError
from cutlab.tasks import Task
from cutlab.tasks.models import check_model_settings

# An initial l_0 below this fraction of the largest initial layer loss is float round-off of an identity Phi_0
NUMERICAL_ZERO = 1e-6
SUSPICIOUSLY_SMALL = 1e-3  # l_0 / the largest untrained layer loss below which l_0 is checked against unit noise
TRAINING_DEVICES = ("cpu", "cuda", "mps", "xpu")
REFERENCE_BATCHES = 8  # train.epsilon=auto: l_0 is measured on this many training batches (reference_of)
# (label, about) -> the progress callback of one evaluation pass (cutlab.run.progress.evaluation_progress)
PassProgress = Callable[[str, str], Callable[[int, int], None]]


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when present, else CPU) or a device this machine has; anything else stops in one line."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(str(name))
        if device.type not in TRAINING_DEVICES:
            raise ValueError(device.type)
    except (RuntimeError, ValueError):
        raise CutlabError(f"device={name!r} is not a device; use device=auto (CUDA when present, else CPU), "
                          "device=cpu, device=cuda or device=cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise CutlabError(f"device={name} but this machine has no usable CUDA GPU (torch {torch.__version__}, "
                              "torch.cuda.is_available() is False); use device=auto or device=cpu")
        if device.index is not None and device.index >= count:
            raise CutlabError(f"device={name} but this machine has {count} CUDA GPU(s), cuda:0..cuda:{count - 1}; "
                              "use device=auto or one of those")
    elif device.type != "cpu" and not _available(device):
        raise CutlabError(f"device={name} is not available on this machine; use device=auto or device=cpu")
    return device


def make_reproducible(device: torch.device) -> None:
    """On CUDA, deterministic kernels, so that a killed run resumes to the uninterrupted one's numbers as on the CPU.

    cuBLAS needs its workspace fixed before its first call for that (NVIDIA's cuBLAS docs, "Results
    reproducibility"); an op with no deterministic CUDA kernel warns rather than stopping the run."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def _available(device: torch.device) -> bool:
    """Whether a device of another kind (mps, xpu, ...) exists here: a one-element tensor can be made on it."""
    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError):
        return False
    return True


def precision_of(cfg: DictConfig) -> str:
    """The run's ``precision`` (records written before the key existed ran in fp32)."""
    return str(cfg.get("precision", PRECISION_BEFORE_KEY))


def perturbation_of(cfg: DictConfig, task: Task) -> Perturbation:
    """The run's noise: gamma_train, the task's sigma_x, mu and the seed."""
    return Perturbation(gamma=float(cfg.gamma), sigma=task.sigma, mean=float(cfg.noise_mean), seed=int(cfg.seed))


@dataclass(frozen=True)
class Evaluator:
    """``evaluate`` bound to one run's model, objective, batch preparation, noise, batch size and device."""

    task: Task
    noise: Perturbation
    batch_size: int
    device: torch.device
    precision: str = DEFAULT_PRECISION  # the forward pass's arithmetic (cutlab.core.precision)

    def __call__(self, samples: SampleSource, gammas: list[float],
                 progress: Callable[[int, int], None] | None = None, streams: list[int] | None = None) -> Evaluation:
        return evaluate(self.task.model, self.task.objective, samples, self.task.prepare, gammas, self.noise,
                        self.batch_size, self.device, progress, self.precision, streams)


def reference_epsilon(cfg: DictConfig, task: Task, device: torch.device,
                      batches: int = REFERENCE_BATCHES) -> float | None:
    """``train.epsilon``, or with ``auto`` the mean l_0 of the untrained model (reference_of)."""
    return reference_of(cfg, task, device, batches)[0]


def recorded_reference(checkpoint: dict) -> tuple[float | None, bool]:
    """(epsilon, whether Phi_0 was at the target) as a run's checkpoint keeps them (reference_of); a checkpoint
    written before the second was recorded: False, as its run was judged then."""
    return checkpoint["epsilon"], bool(checkpoint.get("reference_at_target", False))


def reference_samples(cfg: DictConfig, task: Task, batches: int = REFERENCE_BATCHES) -> int:
    """How many of the first training windows train.epsilon=auto measures l_0 on."""
    return min(len(task.train_set), batches * cfg.train.batch_size)


def reference_of(cfg: DictConfig, task: Task, device: torch.device, batches: int = REFERENCE_BATCHES,
                 progress: PassProgress | None = None) -> tuple[float | None, bool]:
    """(epsilon, whether Phi_0 already equals the target): ``train.epsilon``, or with ``auto`` the mean l_0 of the
    untrained model on the first training windows.

    ``auto`` reads the reference constraint l_0 <= epsilon as "Phi_0 may not get worse than at
    initialisation": the paper's epsilon (6.5 for DUST) is in its own, unstated loss units. Where that l_0 is a
    round-off of 0 (a model whose Phi_0 is its input, at gamma 0), nothing can descend: the ratio forms, which divide
    by it, are refused; the difference form runs, and its verdict says degenerate (Constraints.reference_at_target).
    ``progress`` makes each evaluation pass's progress callback (none: the passes say nothing).
    """
    if cfg.train.epsilon != "auto":
        return cfg.train.epsilon, False
    first = torch.utils.data.Subset(task.train_set, range(reference_samples(cfg, task, batches)))
    evaluator = Evaluator(task, perturbation_of(cfg, task), cfg.train.batch_size, device, precision_of(cfg))
    ratio_form = cfg.train.constrained and cfg.train.constraint_form != "difference"
    # the batches are train.batch_size samples (the Evaluator above), so that is the setting a failed allocation names
    with settings_named_on_out_of_memory("the untrained model's evaluation (train.epsilon=auto)", "train.batch_size"):
        try:
            initial = evaluator(first, [float(cfg.gamma)], progress and progress(
                "evaluating the untrained model (train.epsilon=auto)", f"each at gamma_train {float(cfg.gamma):g}"))
        except NonFiniteLoss as error:  # the untrained model: nothing diverged, whatever the general line says
            raise NonFiniteLoss(f"model={cfg.model.name}: layer {error.layer}'s loss is {error.value} on the first "
                                "training windows, before any training step (train.epsilon=auto measures it): "
                                f"{NOT_FINITE_AS_INITIALISED}") from None
        epsilon = float(initial.mean_loss[0, 0])
        largest = float(initial.mean_loss[0].max())
        if cfg.train.constrained and epsilon <= SUSPICIOUSLY_SMALL * largest:
            # is l_0 a round-off of 0? Judged against the data's loss scale, l under unit noise (gamma 1), since
            # untrained layers near the identity can be nearly as small as l_0's round-off (another evaluation pass,
            # and DUST's power iteration moves at every forward, so only runs whose l_0 looks this small pay for it;
            # the difference form, which asked nothing of it before, keeps its buffers as they were, so its training
            # is unchanged)
            with (contextlib.nullcontext() if ratio_form else buffers_kept(task.model)):
                checked = evaluator(first, [1.0], progress and progress(
                    "evaluating the untrained model under unit noise (is its l_0 a round-off of 0?)",
                    "each at gamma 1"))
                largest = max(largest, float(checked.mean_loss.max()))
    if ratio_form and epsilon <= NUMERICAL_ZERO * largest:
        raise CutlabError(_at_target(cfg, f"{epsilon:.3g}", "a model whose Phi_0 is its input"))
    return epsilon, bool(cfg.train.constrained and epsilon <= NUMERICAL_ZERO * largest)


def check_before_building(cfg: DictConfig) -> None:
    """What refuses a run from its config and its model's class alone, before its folder is announced; found as the
    task was built, it came after the data were prepared (reference_of measures the rest)."""
    if cfg.data.get("task") == "video":  # before the run is announced
        check_video_loader(cfg.data.name)
    build = check_model_settings(cfg.model, cfg.L)
    ratio_form = cfg.train.constrained and cfg.train.constraint_form != "difference"
    no_noise = float(cfg.gamma) == 0 and float(cfg.noise_mean) == 0  # perturb returns the clean input itself
    if ratio_form and cfg.train.epsilon == "auto" and no_noise and getattr(build, "phi_0_is_input", False):
        raise CutlabError(_at_target(cfg, "0", f"model={cfg.model.name}, whose untrained Phi_0 is its input"))


def _at_target(cfg: DictConfig, epsilon: str, model: str) -> str:
    return (f"train.epsilon=auto is l_0 of the untrained model, {epsilon}: Phi_0 already equals the target (no noise, "
            f"gamma={cfg.gamma}, and {model}), so nothing can descend from it and train.constraint_form="
            f"{cfg.train.constraint_form} would divide by it; use gamma > 0, the paper's difference form "
            "(train=constrained_paper, or train.constraint_form=difference), or a number for train.epsilon")


def constraints_of(cfg: DictConfig, epsilon: float | None, reference_at_target: bool = False) -> Constraints:
    """The run's constraints; ERM gets them too (its verdict and time to feasibility are recorded for comparison)."""
    # ERM's train configs (erm*.yaml) have no constraint_form or constraint_gradient: its constraints, used only for its
    # verdict, are the paper's (difference form, every block)
    return Constraints(alpha=cfg.train.alpha, epsilon=epsilon, detach_prev=cfg.train.detach_prev,
                       form=cfg.train.get("constraint_form", "difference"),
                       gradient=cfg.train.get("constraint_gradient", "full"), reference_at_target=reference_at_target)


def build_primal_dual(cfg: DictConfig, model: torch.nn.Module, epsilon: float | None,
                      reference_at_target: bool = False) -> PrimalDual:
    train = cfg.train
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(parameters, lr=train.lr)
    constraints = dual = None
    if train.constrained:
        constraints = constraints_of(cfg, epsilon, reference_at_target)
        dual = DualSettings.of(train)
    return PrimalDual(parameters, optimizer, cfg.L + 1, constraints, dual, train.grad_clip)


def build_trainer(cfg: DictConfig, task: Task, epsilon: float | None, device: torch.device,
                  reference_at_target: bool = False) -> Trainer:
    """``epsilon`` and ``reference_at_target`` as reference_of measures them."""
    train = cfg.train
    return Trainer(
        task.model, task.objective, build_primal_dual(cfg, task.model, epsilon, reference_at_target), task.train_set,
        Schedule(train.epochs, train.batch_size, train.warmup_epochs, train.max_steps_per_epoch),
        task.prepare, perturbation_of(cfg, task), device, precision_of(cfg),
    )
