"""A finished run's final weights on new data: every layer at every gamma_test, and the feasibility verdict there.

The same machinery as the run's own evaluation (cutlab.run): the task is built from the run's config with the
new data, the noise of each gamma_test is fixed by the run's seed, and the verdict classifies the layer losses at
gamma_test = gamma_train against the run's constraints (eq. (4): l_l <= (1 - alpha) l_{l-1}; Sec. 4: l_0 <= epsilon),
with the run's own epsilon and resilience slack.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import ConcatDataset

from cutlab.core.data.groups import joined_groups
from cutlab.core.evaluation import STREAMS_PER_BATCH, Evaluation, evaluate, feasibility_verdict
from cutlab.errors import CutlabError
from cutlab.core.perturbation import Perturbation
from cutlab.run.build import build_primal_dual, constraints_of, pick_device, recorded_reference
from cutlab.run.checkpoints import mismatch_reason
from cutlab.run.progress import ProgressReporter
from cutlab.run.results import descent_in_distribution, validation_grid
from cutlab.tasks import Task, build_task

SPLITS = ("test", "val", "train", "all")
SIGMAS = ("data", "run")


@dataclass
class Request:
    """What one evaluation computes; its ``key`` names the record, so the same request is done once."""

    data: dict
    gamma_test: list[float]
    split: str
    sigma: str  # data: sigma_x of the evaluated data's training clips; run: the run's own sigma_x
    seed: int
    noise_mean: float
    batch_size: int  # the evaluation noise is drawn batch by batch, so another batch size draws other noise

    def as_dict(self) -> dict:
        return dict(vars(self))

    @classmethod
    def of(cls, cfg: DictConfig, split: str, sigma: str) -> "Request":
        if split not in SPLITS:
            raise CutlabError(f"--split {split!r} is not one of {', '.join(SPLITS)}; e.g. --split test")
        if sigma not in SIGMAS:
            raise CutlabError(f"--sigma {sigma!r} is not one of {', '.join(SIGMAS)}; e.g. --sigma data")
        return cls(OmegaConf.to_container(cfg.data, resolve=True), [float(g) for g in cfg.eval.gamma_test], split,
                   sigma, int(cfg.seed), float(cfg.noise_mean), int(cfg.eval.batch_size))


def split_of(task: Task, split: str):
    if split == "all":  # every clip of the new data: none of it was trained on
        parts = [task.train_set, task.val_set, task.test_set]
        joined = ConcatDataset(parts)
        own = getattr(task.train_set, "collate", None)
        if own is not None:
            joined.collate = own
        # a clip's windows stay one group, so the verdict's interval resamples clips as on one split
        joined.sample_groups = joined_groups(parts)
        return joined
    return {"test": task.test_set, "val": task.val_set, "train": task.train_set}[split]


def load_weights(task: Task, cfg: DictConfig, checkpoint: dict, run_name: str):
    """The evaluated weights into ``task.model`` and their resilience slacks: the final iterate and its multipliers'
    slack, or with eval.iterate=best the iterate the run selected on validation (what its own evaluation used)."""
    trainer = checkpoint["trainer"]
    selected = checkpoint.get("iterate_selection") or {}
    try:
        task.model.load_state_dict(trainer["model"])
        primal_dual = build_primal_dual(cfg, task.model, *recorded_reference(checkpoint))
        primal_dual.load_state_dict(trainer["primal_dual"])
        slacks = primal_dual.effective_slacks()
        if selected.get("best_state") is not None:
            task.model.load_state_dict(selected["best_state"])
            slacks = selected["best_slacks"]
    except (KeyError, TypeError, ValueError, RuntimeError) as error:  # e.g. an embedding table of another vocabulary
        raise CutlabError(f"{run_name}: its weights do not fit the model its config builds with this data "
                          f"({mismatch_reason(error)}); the model's class, or its source, tokenizer or vocabulary, "
                          "differs from the one it was trained with") from None
    return primal_dual, slacks


def sigma_of_run(summary: dict) -> float:
    """sigma_x of the run's training data as its summary.json records it (``--sigma run``): a positive number, or the
    noise gamma_test * sigma_x has no scale (null was a TypeError traceback; -5 or 1e6 were taken as they stood)."""
    value = summary.get("sigma_x")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CutlabError(f"its summary.json records sigma_x={value!r}, not a positive number, so --sigma run has no "
                          "noise scale; copy the run folder again from where it was trained, or use --sigma data")
    return float(value)


def noise_streams(gammas: list[float], run_cfg: DictConfig) -> list[int]:
    """Each gamma's noise stream (cutlab.core.evaluation.evaluate): its place in the run's own final grid, so that a
    gamma draws the run's own noise whatever else the request lists (by place in the request, [0, 1] and [1, 0]
    gave two sets of numbers, and the verdict's losses changed with the grid); a gamma the run never evaluated, a
    stream of its own named by its value's bits (cutlab.core.evaluation.noise_index)."""
    own = validation_grid(run_cfg)
    return [own.index(g) if g in own else STREAMS_PER_BATCH + int.from_bytes(struct.pack(">d", g), "big")
            for g in gammas]


def evaluate_run(cfg: DictConfig, checkpoint: dict, summary: dict, request: Request,
                 run_name: str, run_cfg: DictConfig) -> tuple[dict, Evaluation]:
    """The evaluation record's numbers and the Evaluation over the request's grid (``run_cfg``: the run's own
    config, whose grid fixes each gamma's noise)."""
    started = time.perf_counter()
    run_sigma = sigma_of_run(summary) if request.sigma == "run" else None  # checked before anything is loaded
    device = pick_device(cfg.device)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    task = build_task(cfg)
    task.model.to(device)
    primal_dual, slacks = load_weights(task, cfg, checkpoint, run_name)
    sigma = task.sigma if run_sigma is None else run_sigma
    grid = list(request.gamma_test)
    gamma_train = float(cfg.gamma)
    full = grid + ([gamma_train] if gamma_train not in grid else [])  # the verdict's point, kept out of the table
    reporter = ProgressReporter(enabled=bool(cfg.progress), total_steps=0, epochs=0)
    noise = Perturbation(gamma=gamma_train, sigma=sigma, mean=float(cfg.noise_mean), seed=int(cfg.seed))
    evaluation = evaluate(task.model, task.objective, split_of(task, request.split), task.prepare, full, noise,
                          cfg.eval.batch_size, device, progress=reporter.evaluating(f"{run_name} on {cfg.data.name}"),
                          streams=noise_streams(full, run_cfg))
    constraints = constraints_of(cfg, *recorded_reference(checkpoint))
    index = full.index(gamma_train)
    verdict = feasibility_verdict(evaluation.mean_loss[index], constraints, slacks,
                                  cfg.eval.feasibility_tol, primal_dual.constrained, evaluation.sample_losses[index],
                                  evaluation.sample_groups)
    at_gamma_train = descent_in_distribution(evaluation, index, constraints)
    table = evaluation.restricted(len(grid))
    last = table.metric.shape[1] - 1
    numbers = {
        "metric": table.metric_name,
        "mean_metric": float(table.metric[:, last].mean()),  # last layer, mean over the grid (Table 3's number)
        "metric_by_gamma": {str(g): float(table.metric[i, last]) for i, g in enumerate(grid)},
        "layer_loss_by_gamma": {str(g): [float(v) for v in table.mean_loss[i]] for i, g in enumerate(grid)},
        "at_gamma_train": at_gamma_train,
        "verdict": verdict.status,
        "feasibility": verdict.as_dict(),
        "samples": len(split_of(task, request.split)),
        "data_source": task.source,
        "sigma_x": sigma,
        "sigma_x_data": task.sigma,
        "sigma_x_run": summary.get("sigma_x"),
        "epsilon": checkpoint["epsilon"],
        "gamma_train": gamma_train,
        "device": str(device),
        "wall_time_s": time.perf_counter() - started,
    }
    return numbers, table
