"""cutlab's benchmark suite (issue 6): every figure is a ratio of two arms timed in the same run.

    python benchmarks/run.py                 # full measurement (~10 min on 2 idle cores)
    python benchmarks/run.py --quick         # tiny repeats, for developing the suite (numbers are not meaningful)
    python benchmarks/run.py --only 1,7      # a subset of the sections (1..7)

Arms are interleaved (A, B, B, A, A, B, ...: the order alternates every repetition so neither arm always runs
first) and every figure reports the median of the per-repetition ratios A_i / B_i, the number of repetitions and
their spread. Writes ``results.json`` (machine-readable) and ``RESULTS.md`` (human-readable) next to ``--out``;
``--readme README.md`` also rewrites the block between the ``bench:begin`` / ``bench:end`` markers of the README.
Sections: 1 constraint overhead, 2 framework overhead, 3 evaluation, 4 start-up, 5 sweep throughput,
6 data loading and peak memory, 7 hardware utilisation. See benchmarks/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import gc
import io
import json
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cutlab.core.data.video import (  # noqa: E402
    FrameWindows, denoising_batch, load_video_clips, pixel_std, split_validation, to_patch_tokens,
)
from cutlab.core.evaluation import evaluate  # noqa: E402
from cutlab.core.models import DUST, UT  # noqa: E402
from cutlab.core.objectives import DenoisingObjective  # noqa: E402
from cutlab.core.perturbation import TRAIN_STREAM, noise_generator, perturb  # noqa: E402
from cutlab.core.primal_dual import Constraints, DualSettings, PrimalDual  # noqa: E402
from cutlab.core.training import Schedule, Trainer, collate, epoch_batches  # noqa: E402

# Ped2-shaped batch: B=4 windows of T=10 frames, 160x160 -> P=100 patches of n=256 pixels; depth L=3.
BATCH, FRAMES, PATCH, IMAGE, DEPTH = 4, 10, 16, 160, 3
GAMMA = 0.09
K_GAMMAS = 11
GAMMA_GRID = [round(0.1 * i, 1) for i in range(K_GAMMAS)]
DEFAULT_PED2 = ROOT.parent / "shared" / "data" / "ucsd_ped2" / "ped2_gray160_uint8.npz"
ENV0 = dict(os.environ)  # subprocesses get the environment as it was at start (cutlab.tracking edits os.environ)

TARGETS = {  # figure id prefix -> (operator, bound, text)
    "constraint_overhead": ("<=", 1.10, "<= 1.10"),
    "framework_overhead": ("<=", 1.05, "<= 1.05"),
    "evaluation": ("<=", 1.20, "<= 1.2"),
    "startup": ("<=", 1.5, "<= 1.5 s above import torch"),
    "sweep_launcher": ("<=", 0.6, "<= 0.6"),
}


@dataclass(frozen=True)
class Mode:
    name: str
    cons_reps: int
    cons_warmup: int
    app_reps: int
    app_warmup: int
    fw_reps: int
    fw_steps: int
    eval_reps: int
    eval_samples: int
    startup_reps: int
    sweep_runs: int
    data_reps: int
    flops_reps: int
    matmul_size: int
    default_run_args: tuple[str, ...]
    ped2_run_args: tuple[str, ...]


FULL = Mode("full", cons_reps=12, cons_warmup=2, app_reps=8, app_warmup=1, fw_reps=8, fw_steps=2, eval_reps=4, eval_samples=4,
            startup_reps=5, sweep_runs=12, data_reps=3, flops_reps=5, matmul_size=2048,
            default_run_args=(),
            ped2_run_args=("train.epochs=1", "data.stride=100"))
QUICK = Mode("quick", cons_reps=2, cons_warmup=1, app_reps=2, app_warmup=1, fw_reps=2, fw_steps=1, eval_reps=1, eval_samples=4,
             startup_reps=1, sweep_runs=2, data_reps=1, flops_reps=2, matmul_size=2048,
             default_run_args=("train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0.0,0.5]"),
             ped2_run_args=("train.epochs=1", "train.max_steps_per_epoch=2", "data.stride=150",
                            "eval.gamma_test=[0.0,0.5]"))


# --------------------------------------------------------------------------- reporting helpers

T_START = time.perf_counter()


def say(text: str) -> None:
    elapsed = time.perf_counter() - T_START
    print(f"[bench {int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {text}", flush=True)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: list[float]) -> dict:
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values),
            "p25": quantile(values, 0.25), "p75": quantile(values, 0.75)}


def interleave(arms: dict[str, Callable[[], float]], reps: int, warmup: int, label: str) -> dict[str, list[float]]:
    """Each arm returns the seconds it measured. Warm-up rounds first, then ``reps`` rounds, the order of the
    arms reversed every other round (A B, B A, A B ...), so load drift and ordering effects hit both arms."""
    names = list(arms)
    for w in range(warmup):
        for name in names:
            arms[name]()
        say(f"  {label}: warm-up {w + 1}/{warmup} done")
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in (names if rep % 2 == 0 else names[::-1]):
            gc.collect()
            times[name].append(arms[name]())
        say(f"  {label}: repetition {rep + 1}/{reps}: "
            + ", ".join(f"{n} {times[n][-1] * 1e3:.0f} ms" for n in names))
    return times


def target_status(prefix: str, value: float | None) -> tuple[str, str]:
    if prefix not in TARGETS:
        return "no target", "-"
    op, bound, text = TARGETS[prefix]
    if value is None:
        return "not measured", text
    return ("met" if value <= bound else "NOT met"), text


@dataclass
class Results:
    mode: str
    figures: list[dict] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    profiles: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)

    def ratio(self, fid: str, section: int, title: str, a_name: str, a: list[float], b_name: str,
              b: list[float], notes: str = "", target_key: str | None = None) -> dict:
        pairs = [x / y for x, y in zip(a, b)]
        value = statistics.median(pairs)
        status, target = target_status(target_key or fid.split(".")[0], value)
        figure = {"id": fid, "section": section, "title": title, "value": value, "unit": "ratio",
                  "target": target, "status": status, "repeats": len(pairs), "pair_ratios": spread(pairs),
                  "ratio_of_medians": statistics.median(a) / statistics.median(b),
                  "arms": {"A": {"name": a_name, "seconds": spread(a), "raw_s": a},
                           "B": {"name": b_name, "seconds": spread(b), "raw_s": b}},
                  "notes": notes}
        self.figures.append(figure)
        say(f"  => {fid}: {value:.3f} (target {target}: {status})")
        return figure

    def value(self, fid: str, section: int, title: str, value: float | None, unit: str, notes: str = "",
              status: str | None = None, target: str = "-", extra: dict | None = None) -> dict:
        figure = {"id": fid, "section": section, "title": title, "value": value, "unit": unit,
                  "target": target, "status": status or ("no target" if value is not None else "not measured"),
                  "notes": notes, **(extra or {})}
        self.figures.append(figure)
        shown = f"{value:.4g} {unit}" if isinstance(value, (int, float)) else "—"
        say(f"  => {fid}: {shown} ({figure['status']})")
        return figure

    def not_measured(self, fid: str, section: int, title: str, reason: str, target: str = "-") -> None:
        self.figures.append({"id": fid, "section": section, "title": title, "value": None, "unit": None,
                             "target": target, "status": "not measured", "notes": reason})
        say(f"  => {fid}: not measured ({reason})")


# --------------------------------------------------------------------------- shared set-up

def conf_alpha(model: str, fallback: float) -> float:
    try:
        from omegaconf import OmegaConf

        return float(OmegaConf.load(ROOT / "conf" / "model" / f"{model}.yaml").paper.alpha)
    except Exception:  # the benchmark must not depend on the config layout
        return fallback


ALPHA = {"ut": conf_alpha("ut", 0.22), "dust": conf_alpha("dust", 0.25)}


class Data:
    """Ped2 clips (or, without the file, synthetic 160x160 clips of the same shapes) and a fixed batch."""

    def __init__(self, ped2: Path, cache_dir: Path) -> None:
        if ped2.is_file():
            clips = load_video_clips("ucsd_ped2", str(ped2), str(cache_dir), IMAGE, progress=False)
            self.source = f"UCSD Ped2 ({ped2})"
            self.ped2: Path | None = ped2
        else:
            clips = load_video_clips("synthetic", None, None, IMAGE, progress=False)
            self.source = f"synthetic 160x160 clips (Ped2 file {ped2} missing)"
            self.ped2 = None
        train_clips, _ = split_validation(clips.train, 2 if len(clips.train) > 2 else 1)
        self.train = FrameWindows(train_clips, FRAMES, 10)
        self.test = FrameWindows(clips.test, FRAMES, 10)
        self.sigma = pixel_std(train_clips)
        self.tokens = partial(to_patch_tokens, patch=PATCH)
        self.prepare = partial(denoising_batch, patch=PATCH)  # (input, target) for Trainer and evaluate()
        first = epoch_batches(len(self.train), BATCH, 0, 0)[0]
        self.clean = self.tokens(collate(self.train, first))
        self.noisy = perturb(self.clean, GAMMA, self.sigma, 0.0, noise_generator(0, TRAIN_STREAM, 0))


def make_model(kind: str, per_layer: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "ut":
        return UT(depth=DEPTH)
    return DUST(depth=DEPTH, per_layer_dictionary=per_layer)


def primal_dual_step(kind: str, constrained: bool, per_layer: bool, data: Data, full_backward: bool = False):
    """One training step of the core objects: forward, per-layer loss matrix, PrimalDual.step (Adam primal;
    with constraints: the Lagrangian, the backward, the dual Adam ascent and the slack step).

    ERM mirrors ``Trainer.train_step``: Phi_0 ... Phi_{L-1} are detached before the loss matrix, so the backward
    carries l_L alone. ``full_backward`` (ERM only) is cutlab's ERM before that change, kept as a reference arm:
    it back-propagates the exact zeros of every non-final layer's loss and readout (bit-identical update)."""
    model = make_model(kind, per_layer)
    model.train()
    objective = DenoisingObjective()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    if constrained:
        with torch.no_grad():
            epsilon = float(objective.loss_matrix(model(data.noisy), data.clean).mean(dim=0)[0])  # epsilon=auto
        pd = PrimalDual(params, optimizer, DEPTH + 1, Constraints(alpha=ALPHA[kind], epsilon=epsilon),
                        DualSettings(lr=1e-2, resilience="slack", resilience_c=1.0))
    else:
        pd = PrimalDual(params, optimizer, DEPTH + 1)

    def step() -> None:
        outputs = model(data.noisy)
        if not constrained and not full_backward:  # as Trainer.train_step
            outputs = [out.detach() for out in outputs[:-1]] + [outputs[-1]]
        pd.step(objective.loss_matrix(outputs, data.clean), dual_active=True)

    return model, step


# The ViT and text-encoder arms of section 1 are built by the app's own code: the config composed from conf/ as
# `python -m cutlab <overrides>` would (Hydra compose API), cutlab.tasks.build_task, reference_epsilon,
# build_primal_dual and Trainer.train_step on one fixed training batch.
VIT_OVERRIDES = ("model=vit", "L=12", "data.frames=2", "train.batch_size=2")
TEXT_OVERRIDES = ("model=hf_encoder", "data=imdb", "L=6", "data.train_file=imdb_train_tiny100.jsonl",
                  "data.test_file=imdb_test_tiny100.jsonl", "data.max_length=128", "train.batch_size=16")


def app_steps(overrides: list[str], train_groups: dict[str, str]) -> dict[str, tuple[torch.nn.Module, Callable]]:
    """{arm: (model, step)}: one Trainer per ``train`` group on the same task, initial weights and batch.

    ``train.warmup_epochs=0`` so the constrained arm's dual step is on, as in the UT/DUST arms; its multipliers
    are kept > 0 so that every layer is back-propagated, as in the UT/DUST arms (which never detach a layer)."""
    import copy

    from cutlab.experiment import build_primal_dual, reference_epsilon
    from cutlab.search.compose import compose_run_config
    from cutlab.tasks import build_task

    configs = {arm: compose_run_config([*overrides, f"train={group}", "train.warmup_epochs=0", "progress=false"])
               for arm, group in train_groups.items()}
    first = next(iter(configs.values()))
    for arm, cfg in configs.items():  # the arms may differ in their train group only
        if (cfg.model, cfg.data, cfg.train.batch_size) != (first.model, first.data, first.train.batch_size):
            raise RuntimeError(f"arm {arm} composes another model, data or batch size than the first arm")
    torch.manual_seed(first.seed)
    task = build_task(first)
    device = torch.device("cpu")
    batch = collate(task.train_set, epoch_batches(len(task.train_set), first.train.batch_size, first.seed, 0)[0])
    steps = {}
    for arm, cfg in configs.items():
        model = copy.deepcopy(task.model)
        arm_task = dataclasses.replace(task, model=model)
        epsilon = reference_epsilon(cfg, arm_task, device, batches=1) if cfg.train.constrained else None
        trainer = Trainer(model, task.objective, build_primal_dual(cfg, model, epsilon), task.train_set,
                          Schedule(1, cfg.train.batch_size, 0, None), task.prepare, cfg.gamma, task.sigma,
                          cfg.noise_mean, cfg.seed, device)
        steps[arm] = (model, partial(_every_constraint_active if cfg.train.constrained else Trainer.train_step,
                                     trainer, batch))
    return steps


def _every_constraint_active(trainer: Trainer, batch) -> None:
    """A constrained Trainer step with every multiplier > 0, so every layer is back-propagated: the cost the
    overhead figure states. (With lambda = 0, e.g. at the start or for a satisfied constraint, the Trainer leaves
    that layer out of the backward, PrimalDual.layers_in_gradient, and the step costs less, down to ERM's.)"""
    trainer.primal_dual.multipliers.clamp_(min=0.01)
    trainer.train_step(batch)


def count_flops(fn: Callable[[], object]) -> int:
    """Matrix-product FLOPs of one call (torch.utils.flop_counter; elementwise ops are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started
    return run


@contextlib.contextmanager
def quiet_stderr_fd():
    """Silence file descriptor 2 (the profiler's native start/stop lines bypass sys.stderr)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def torch_profile(fn: Callable[[], object], rows: int = 12) -> str:
    """Top ops by self CPU time of one call of ``fn`` (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr_fd(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)


def op_self_times(fn: Callable[[], object]) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr_fd(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}


def op_deltas(slow: dict[str, float], fast: dict[str, float], rows: int = 8) -> str:
    deltas = sorted(((slow.get(k, 0.0) - fast.get(k, 0.0), k) for k in set(slow) | set(fast)), reverse=True)
    lines = [f"{'op':<40} {'slower arm ms':>14} {'faster arm ms':>14} {'difference ms':>14}"]
    for delta, key in deltas[:rows]:
        lines.append(f"{key[:40]:<40} {slow.get(key, 0.0):>14.2f} {fast.get(key, 0.0):>14.2f} {delta:>14.2f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- 1. constraint overhead

def section_constraint(res: Results, mode: Mode, data: Data, workdir: Path) -> None:
    say("1/7 constraint overhead: PrimalDual.step constrained vs ERM (B=4, T=10, P=100, n=256, L=3)")
    arms = {
        "ut_erm": primal_dual_step("ut", False, False, data),
        "ut_constrained": primal_dual_step("ut", True, False, data),
        "dust_erm_perlayer": primal_dual_step("dust", False, True, data),
        "dust_constrained_perlayer": primal_dual_step("dust", True, True, data),
        "dust_erm_shared": primal_dual_step("dust", False, False, data),
        "ut_erm_full_backward": primal_dual_step("ut", False, False, data, full_backward=True),
        "dust_erm_perlayer_full_backward": primal_dual_step("dust", False, True, data, full_backward=True),
    }
    times = interleave({name: timed(step) for name, (_, step) in arms.items()}, mode.cons_reps,
                       mode.cons_warmup, "constraint")
    note = ("Same model class, initial weights, batch and noise; the arms differ only in Constraints/DualSettings "
            "(alpha = the model's paper alpha, epsilon = l_0 at initialisation, slack resilience, dual Adam). ERM "
            "detaches Phi_0..Phi_{L-1} before the loss matrix, as Trainer.train_step does.")
    res.ratio("constraint_overhead.ut", 1, "UT: constrained step ÷ ERM step", "ut_constrained",
              times["ut_constrained"], "ut_erm", times["ut_erm"], note)
    res.ratio("constraint_overhead.dust", 1, "DUST (per-layer D in both arms): constrained ÷ ERM",
              "dust_constrained_perlayer", times["dust_constrained_perlayer"], "dust_erm_perlayer",
              times["dust_erm_perlayer"], note + " DUST uses one dictionary per layer in BOTH arms, so only the "
              "constraints differ.")
    res.ratio("constraint_overhead.dust_paper_pairing", 1,
              "DUST, paper pairing: constrained (per-layer D) ÷ ERM (shared D)", "dust_constrained_perlayer",
              times["dust_constrained_perlayer"], "dust_erm_shared", times["dust_erm_shared"],
              "The paper's configurations (App. C.4): ERM DUST has one shared dictionary, constrained DUST one per "
              "layer; this ratio mixes the constraint cost with the extra dictionaries.")
    waste_note = ("Reference arm, cutlab's ERM before commit f26cf11: PrimalDual.step on the loss matrix of undetached "
                  "Phi_0..Phi_L, which back-propagates exact zeros through every non-final layer's loss and readout "
                  "(the update is bit-identical). The figure is what the Trainer's detach saves per ERM step.")
    for kind, erm, full in (("ut", "ut_erm", "ut_erm_full_backward"),
                            ("dust", "dust_erm_perlayer", "dust_erm_perlayer_full_backward")):
        res.ratio(f"erm_waste.{kind}", 1, f"{kind.upper()}: ERM with the full backward (before f26cf11) ÷ cutlab's ERM",
                  full, times[full], erm, times[erm], waste_note, target_key="erm_waste")
    details = {
        "parameters": {name: sum(p.numel() for p in model.parameters()) for name, (model, _) in arms.items()},
        "step_medians_s": {name: statistics.median(t) for name, t in times.items()},
        "matmul_gflop_per_step": {name: count_flops(step) / 1e9 for name, (_, step) in arms.items()},
    }
    profiled = [("constraint_overhead.ut", arms, "ut_constrained", "ut_erm"),
                ("constraint_overhead.dust", arms, "dust_constrained_perlayer", "dust_erm_perlayer"),
                ("constraint_overhead.dust_paper_pairing", arms, "dust_constrained_perlayer", "dust_erm_shared")]
    app_note = ("Built by the app's code: the config composed from conf/ as `python -m cutlab {overrides} train=<erm|"
                "constrained> train.warmup_epochs=0` would (Hydra compose API), cutlab.tasks.build_task, "
                "reference_epsilon (one batch) and build_primal_dual; each arm times Trainer.train_step (batch to "
                "tokens/embeddings, seeded noise, forward, loss matrix, PrimalDual.step; ERM detaches "
                "Phi_0..Phi_{{L-1}}) on the same fixed training batch, from the same initial weights. {what}")
    for key, what, overrides, groups, detail in (
            ("vit", "ViT (DINOv2-small)", [*VIT_OVERRIDES, *vit_data(data, workdir)],
             {"erm": "erm", "constrained": "constrained"},
             "Real DINOv2-small weights (../shared/models/dinov2-small), all 12 blocks (the paper's L), 2 windows of "
             "2 frames of 160x160 (reflect-padded to 168: 145 tokens a frame); alpha = the paper's ViT alpha, "
             "epsilon=auto, slack resilience, dual lr 1e-2."),
            ("text", "text encoder (MiniLM-L6)", list(TEXT_OVERRIDES),
             {"erm": "erm_text", "constrained": "constrained_text"},
             "all-MiniLM-L6-v2 (model=hf_encoder, L=6), 16 real IMDb reviews (imdb_train_tiny100.jsonl) "
             "truncated to 128 tokens; train presets erm_text / constrained_text (the paper's language alpha, "
             "epsilon 1.0, dual lr 1.07, weight-decay resilience), train mode (dropout on)."),
    ):
        say(f"  {what}: building the task through the app ({' '.join(overrides)})")
        app_arms = {f"{key}_{arm}": value for arm, value in app_steps(overrides, groups).items()}
        erm, constrained = f"{key}_erm", f"{key}_constrained"
        app_times = interleave({name: timed(step) for name, (_, step) in app_arms.items()}, mode.app_reps,
                               mode.app_warmup, f"constraint {key}")
        res.ratio(f"constraint_overhead.{key}", 1, f"{what}: constrained step ÷ ERM step", constrained,
                  app_times[constrained], erm, app_times[erm],
                  app_note.format(overrides=" ".join(overrides), what=detail))
        details["parameters"].update({n: sum(p.numel() for p in m.parameters()) for n, (m, _) in app_arms.items()})
        details["step_medians_s"].update({n: statistics.median(t) for n, t in app_times.items()})
        details["matmul_gflop_per_step"].update({n: count_flops(step) / 1e9 for n, (_, step) in app_arms.items()})
        profiled.append((f"constraint_overhead.{key}", app_arms, constrained, erm))
    res.details["constraint_overhead"] = details
    for fid, steps, slow, fast in profiled:
        if _status(res, fid) == "NOT met":
            say(f"  profiling {slow} (target not met)")
            res.profiles[fid] = {
                "slower arm": slow,
                "table": torch_profile(steps[slow][1]),
                "differences": op_deltas(op_self_times(steps[slow][1]), op_self_times(steps[fast][1])),
            }


def vit_data(data: Data, workdir: Path) -> list[str]:
    """The ViT arms read the benchmark's video: Ped2 through its cache (already filled by Data), else synthetic."""
    cache = f"paths.cache_dir={workdir / 'cutlab-cache'}"
    if data.ped2 is not None:
        return ["data=ucsd_ped2", f"data.root={data.ped2}", cache]
    return ["data=synthetic", cache]


def _status(res: Results, fid: str) -> str | None:
    return next((f["status"] for f in res.figures if f["id"] == fid), None)


# --------------------------------------------------------------------------- 2. framework overhead

def section_framework(res: Results, mode: Mode, data: Data, workdir: Path) -> None:
    say("2/7 framework overhead: Trainer.run + history CSV + W&B offline + progress ÷ a bare PyTorch loop")
    from cutlab.checkpoints import save_checkpoint
    from cutlab.experiment import _history_row, _ProgressReporter
    from cutlab.records import HISTORY, RECORD_VERSION, HistoryWriter
    from cutlab.tracking import Tracker

    every_steps = 100  # conf/config.yaml checkpoint.every_steps
    full_epoch = -(-len(data.train) // BATCH)
    details: dict = {"steps_per_rep": mode.fw_steps, "ped2_steps_per_epoch": full_epoch,
                     "checkpoint_every_steps": every_steps}
    windows = torch.stack([data.train[i] for i in range(len(data.train))])  # the bare loop's preloaded uint8 set
    noise_std = GAMMA * data.sigma

    for kind in ("dust", "ut"):
        run_dir = workdir / f"framework_{kind}"
        run_dir.mkdir(parents=True)
        # --- cutlab arm: what run_experiment builds for train=erm (Adam lr 1e-3, no clipping; shared D for DUST)
        model = make_model(kind, per_layer=False)
        params = [p for p in model.parameters() if p.requires_grad]
        pd = PrimalDual(params, torch.optim.Adam(params, lr=1e-3), DEPTH + 1)
        schedule = Schedule(epochs=1, batch_size=BATCH, warmup_epochs=0, max_steps_per_epoch=mode.fw_steps)
        trainer = Trainer(model, DenoisingObjective(), pd, data.train, schedule, data.prepare, GAMMA, data.sigma,
                          0.0, 0, "cpu")
        config = {"model": {"name": kind}, "train": {"constrained": False}, "benchmark": "framework_overhead"}
        with contextlib.redirect_stderr(io.StringIO()):
            tracker = Tracker("offline", run_dir, run_dir.name, config, "cutlab-bench", None, None, [], None)
        history = HistoryWriter(run_dir / HISTORY, DEPTH + 1, None)
        reporter = _ProgressReporter(enabled=True, total_steps=10**9, epochs=10**9)
        callback_s: list[float] = []
        checkpoint_s: list[float] = []

        def checkpoint_now() -> None:
            save_checkpoint(run_dir, {"trainer": trainer.state_dict(), "wandb_id": tracker.run_id,
                                      "epsilon": None, "record_version": RECORD_VERSION})

        def on_step(progress, result, seconds, trainer=trainer, history=history, tracker=tracker,
                    reporter=reporter, checkpoint_now=checkpoint_now, callback_s=callback_s) -> None:
            started = time.perf_counter()
            row = _history_row(progress, result, trainer, seconds)  # as cutlab.experiment's on_step
            history.write(row)
            tracker.log({k: v for k, v in row.items() if k not in ("step", "phase")}, step=progress.step)
            reporter.step(progress, result, seconds)
            if progress.step % every_steps == 0:
                checkpoint_now()
            callback_s.append(time.perf_counter() - started)

        def on_epoch_end(progress, checkpoint_now=checkpoint_now, checkpoint_s=checkpoint_s) -> None:
            started = time.perf_counter()
            checkpoint_now()  # the app checkpoints at every epoch end
            checkpoint_s.append(time.perf_counter() - started)

        def cutlab_arm(trainer=trainer, on_step=on_step, on_epoch_end=on_epoch_end, checkpoint_s=checkpoint_s) -> float:
            trainer.schedule = Schedule(trainer.progress.epoch + 1, BATCH, 0, mode.fw_steps)
            before = len(checkpoint_s)
            started = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):
                trainer.run(on_step=on_step, on_epoch_end=on_epoch_end)
            elapsed = time.perf_counter() - started - sum(checkpoint_s[before:])
            return elapsed / mode.fw_steps  # per step; the epoch-end checkpoint is amortised separately below

        # --- bare arm: a hand-written loop, same model class and init, same batch size and noise level.
        # --- core arm: the same loop, but the step is cutlab's core (loss matrix + PrimalDual.step, ERM), which
        #     splits the gap into the core step's share and the Trainer/records/W&B share.
        def loop_arm(core: bool):
            model = make_model(kind, per_layer=False)
            model.train()
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = torch.optim.Adam(params, lr=1e-3)
            pd = PrimalDual(params, optimizer, DEPTH + 1)
            objective = DenoisingObjective()
            generator = torch.Generator().manual_seed(0)

            def run() -> float:
                started = time.perf_counter()
                order = torch.randperm(len(windows), generator=generator)
                for i in range(mode.fw_steps):
                    frames = windows[order[i * BATCH:(i + 1) * BATCH]].float().div_(255.0)
                    b, t, h, w = frames.shape
                    clean = frames.reshape(b, t, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 1, 2, 4, 3, 5)
                    clean = clean.reshape(b, t, -1, PATCH * PATCH)
                    noisy = clean + noise_std * torch.randn(clean.shape, generator=generator)
                    if core:  # as Trainer.train_step's ERM: Phi_0..Phi_{L-1} detached, l_L alone back-propagated
                        outputs = model(noisy)
                        outputs = [out.detach() for out in outputs[:-1]] + [outputs[-1]]
                        pd.step(objective.loss_matrix(outputs, clean), dual_active=True)
                        continue
                    output = model(noisy)[-1]
                    loss = 0.5 * (output - clean).pow(2).sum(dim=(1, 3)).mean()
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                return (time.perf_counter() - started) / mode.fw_steps
            return run

        bare_arm, core_arm = loop_arm(core=False), loop_arm(core=True)
        times = interleave({"cutlab": cutlab_arm, "core": core_arm, "bare": bare_arm}, mode.fw_reps, 1,
                           f"framework {kind}")
        warm_callbacks = callback_s[mode.fw_steps:]  # the warm-up round's callbacks include W&B's first-log cost
        checkpoint_median = statistics.median(checkpoint_s[1:] or checkpoint_s)
        amortised = checkpoint_median * (1.0 / full_epoch + 1.0 / every_steps)
        cutlab_with_ckpt = [t + amortised for t in times["cutlab"]]
        res.ratio(f"framework_overhead.{kind}", 2,
                  f"{kind.upper()} ERM: cutlab training step (logging + W&B offline on) ÷ bare PyTorch loop",
                  "cutlab Trainer.run + on_step (+ amortised checkpoints)", cutlab_with_ckpt, "bare loop",
                  times["bare"],
                  f"Per step over {mode.fw_steps}-step repetitions on real Ped2 windows. The cutlab arm includes "
                  "collate, uint8->patch tokens, seeded noise, the per-layer loss matrix, grad norm, the history.csv "
                  "row, Tracker.log (W&B offline), the progress reporter, and the checkpoint amortised at the app's "
                  f"cadence (every epoch = {full_epoch} Ped2 steps, and every {every_steps} steps).")
        res.ratio(f"framework_split.{kind}_core", 2,
                  f"{kind.upper()} ERM: cutlab's core step (loss matrix + PrimalDual.step) in the bare loop ÷ bare loop",
                  "core step in the bare loop", times["core"], "bare loop", times["bare"],
                  "The core's share of the framework overhead: same loop and data handling as the bare arm, only the "
                  "step differs (per-layer loss matrix, PrimalDual.step: finiteness check, grad norm, detached "
                  "copies; the non-final layers' losses are computed and recorded, not back-propagated).",
                  target_key="split")
        res.ratio(f"framework_split.{kind}_trainer", 2,
                  f"{kind.upper()} ERM: cutlab Trainer.run + records + W&B ÷ the core step in the bare loop",
                  "cutlab Trainer.run + on_step (+ amortised checkpoints)", cutlab_with_ckpt,
                  "core step in the bare loop", times["core"],
                  "The share of Trainer (collate from numpy clips, to_patch_tokens, per-step noise generator), the "
                  "history row, W&B offline log, progress reporter and checkpoints.", target_key="split")
        details[kind] = {
            "on_step_callback_ms_median": 1e3 * statistics.median(warm_callbacks or callback_s),
            "checkpoint_ms_median": 1e3 * checkpoint_median,
            "checkpoint_amortised_ms_per_step_ped2": 1e3 * amortised,
            "checkpoint_amortised_ms_per_step_synthetic_default": 1e3 * checkpoint_median * (1.0 / 9 + 1 / every_steps),
            "checkpoint_bytes": (run_dir / "checkpoint.pt").stat().st_size,
            "cutlab_step_ms_median_without_checkpoint": 1e3 * statistics.median(times["cutlab"]),
            "bare_step_ms_median": 1e3 * statistics.median(times["bare"]),
            "core_step_ms_median": 1e3 * statistics.median(times["core"]),
        }
        if _status(res, f"framework_overhead.{kind}") == "NOT met":
            say(f"  profiling the cutlab arm of {kind} (target not met)")
            res.profiles[f"framework_overhead.{kind}"] = {
                "slower arm": "cutlab",
                "table": torch_profile(cutlab_arm),
                "differences": op_deltas(op_self_times(cutlab_arm), op_self_times(bare_arm)),
                "decomposition": details[kind],
            }
        history.close()
        with contextlib.redirect_stderr(io.StringIO()):
            tracker.finish()
    res.details["framework_overhead"] = details


# --------------------------------------------------------------------------- 3. evaluation

def section_evaluation(res: Results, mode: Mode, data: Data) -> None:
    say(f"3/7 evaluation: evaluate() over a {K_GAMMAS}-point gamma_test grid ÷ {K_GAMMAS} plain forward passes")
    samples = torch.utils.data.Subset(data.test, range(min(mode.eval_samples, len(data.test))))
    objective = DenoisingObjective()
    batches = [data.tokens(collate(samples, idx)) for idx in torch.arange(len(samples)).split(BATCH)]
    for kind in ("dust", "ut"):
        model = make_model(kind, per_layer=(kind == "dust"))  # the app's constrained DUST has per-layer D
        model.eval()

        def sweep(model=model) -> None:
            evaluate(model, objective, samples, data.prepare, GAMMA_GRID, data.sigma, 0.0, 0, BATCH, "cpu")

        def plain(model=model) -> None:
            with torch.no_grad():
                for batch in batches:
                    for _ in range(K_GAMMAS):
                        model(batch)

        stacked_batches = [torch.cat([batch] * K_GAMMAS) for batch in batches]

        def stacked(model=model, stacked_batches=stacked_batches) -> None:
            with torch.no_grad():
                for batch in stacked_batches:
                    model(batch)

        times = interleave({"evaluate": timed(sweep), "stacked": timed(stacked), "plain": timed(plain)},
                           mode.eval_reps, 1 if mode.name == "full" else 0, f"evaluation {kind}")
        fid = f"evaluation.{kind}"
        res.ratio(fid, 3, f"{kind.upper()}: evaluate() over {K_GAMMAS} gammas × all L+1 layers ÷ "
                  f"{K_GAMMAS} plain forward passes", "evaluate", times["evaluate"], "plain forwards",
                  times["plain"],
                  f"{len(samples)} Ped2 test windows in batches of {BATCH}. evaluate() perturbs every batch at all "
                  f"{K_GAMMAS} gammas, runs one forward on the {K_GAMMAS * BATCH} stacked copies and reads every layer; "
                  "the plain arm is the bare forward of the clean batch, k times (no noise, no metrics).")
        res.ratio(f"evaluation_split.{kind}_batching", 3,
                  f"{kind.upper()}: one forward of the {K_GAMMAS}×{BATCH} stacked copies ÷ {K_GAMMAS} forwards of {BATCH}",
                  "stacked forward", times["stacked"], "plain forwards", times["plain"],
                  "The batching choice of evaluate() alone (no noise, no metrics): on CPU a bigger batch is not "
                  "free, its activations leave the caches.", target_key="split")
        res.ratio(f"evaluation_split.{kind}_metrics", 3,
                  f"{kind.upper()}: evaluate() ÷ the stacked forward alone",
                  "evaluate", times["evaluate"], "stacked forward", times["stacked"],
                  "Everything evaluate() adds to the forward: collate and patch tokens, k seeded noise draws, the "
                  "concatenation, per-gamma metric sums and loss matrix (each recomputes (out - clean)^2).",
                  target_key="split")
        if _status(res, fid) == "NOT met":
            say(f"  profiling evaluate() for {kind} (target not met)")
            res.profiles[fid] = {"slower arm": "evaluate", "table": torch_profile(sweep),
                                 "differences": op_deltas(op_self_times(sweep), op_self_times(plain))}


# --------------------------------------------------------------------------- 4. start-up

def cutlab_cmd(*overrides: str, multirun: bool = False) -> list[str]:
    return [sys.executable, "-m", "cutlab", *(["-m"] if multirun else []), *overrides]


TINY = ("data=synthetic", "train.epochs=1", "train.max_steps_per_epoch=1", "eval.gamma_test=[0.0]", "progress=false")


def run_quiet(cmd: list[str], env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def sub_env(workdir: Path) -> dict:
    env = dict(ENV0)
    env["CUTLAB_CACHE_DIR"] = str(workdir / "cutlab-cache")
    env.setdefault("WANDB_SILENT", "true")
    return env


def first_row_time(run_dir: Path) -> tuple[float, float]:
    """(mtime of history.csv, step_time of its single row): with one step, the file's last write is that row."""
    path = run_dir / "history.csv"
    lines = path.read_text().splitlines()
    if len(lines) != 2:
        raise RuntimeError(f"{path} should hold exactly one step, it has {len(lines) - 1}")
    columns = lines[0].split(",")
    return path.stat().st_mtime, float(lines[1].split(",")[columns.index("step_time")])


def section_startup(res: Results, mode: Mode, workdir: Path, data: Data | None) -> None:
    say("4/7 start-up: process start -> first history.csv row of `python -m cutlab` (tiny synthetic run)")
    env = sub_env(workdir)
    counter = iter(range(10**6))
    marker_script = "import sys, torch; open(sys.argv[1], 'w').write('imported')"

    def python_bare() -> float:
        marker = workdir / f"marker_py_{next(counter)}"
        started = time.time()
        run_quiet([sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('x')", str(marker)], env)
        return marker.stat().st_mtime - started

    def import_torch() -> float:
        marker = workdir / f"marker_torch_{next(counter)}"
        started = time.time()
        run_quiet([sys.executable, "-c", marker_script, str(marker)], env)
        return marker.stat().st_mtime - started

    bare_train_script = ("import sys, torch\n"
                         "model = torch.nn.Linear(256, 256)\n"
                         "optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
                         "loss = model(torch.randn(4, 256)).pow(2).mean()\n"
                         "optimizer.zero_grad(); loss.backward(); optimizer.step()\n"
                         "open(sys.argv[1], 'w').write('stepped')\n")

    def bare_training() -> float:
        marker = workdir / f"marker_train_{next(counter)}"
        started = time.time()
        run_quiet([sys.executable, "-c", bare_train_script, str(marker)], env)
        return marker.stat().st_mtime - started

    step_times: dict[str, list[float]] = {"disabled": [], "offline": []}
    exit_times: dict[str, list[float]] = {"disabled": [], "offline": []}

    def app(wandb_mode: str) -> Callable[[], float]:
        def run() -> float:
            runs = workdir / f"startup_{wandb_mode}_{next(counter)}"
            started = time.time()
            run_quiet(cutlab_cmd(*TINY, f"wandb.mode={wandb_mode}", f"paths.runs_dir={runs}", "run_name=s"), env)
            exit_times[wandb_mode].append(time.time() - started)
            written, step_time = first_row_time(runs / "s")
            step_times[wandb_mode].append(step_time)
            return written - started
        return run

    times = interleave({"python": python_bare, "import_torch": import_torch, "bare_training": bare_training,
                        "cutlab_disabled": app("disabled"), "cutlab_offline": app("offline")},
                       mode.startup_reps, 1, "start-up")
    note = ("Wall time from just before the process is spawned to the mtime of history.csv after its first (only) "
            "row; the import-torch arm is timed the same way (a file written right after `import torch`), and so is "
            "a bare torch training script (import torch, Adam, one step). "
            "Tiny run: " + " ".join(TINY) + ". The figure is the difference (seconds above import torch).")
    torch_median = statistics.median(times["import_torch"])
    for wandb_mode in ("disabled", "offline"):
        arm = times[f"cutlab_{wandb_mode}"]
        above = [a - b for a, b in zip(arm, times["import_torch"])]
        value = statistics.median(above)
        status, target = target_status("startup", value)
        to_step_start = [a - s for a, s in zip(arm, step_times[wandb_mode][-len(arm):])]
        res.figures.append({
            "id": f"startup.wandb_{wandb_mode}", "section": 4,
            "title": f"Start-up above import torch, wandb.mode={wandb_mode}", "value": value, "unit": "s",
            "target": target, "status": status, "repeats": len(above), "pair_differences_s": spread(above),
            "first_row_s": spread(arm), "first_step_start_s": spread(to_step_start),
            "import_torch_s": spread(times["import_torch"]), "python_bare_s": spread(times["python"]),
            "bare_training_script_s": spread(times["bare_training"]),
            "process_exit_s": spread(exit_times[wandb_mode][-len(arm):]),
            "above_bare_training_script_s": spread([a - b for a, b in zip(arm, times["bare_training"])]),
            "ratio_to_import_torch": statistics.median(arm) / torch_median, "notes": note})
        say(f"  => startup.wandb_{wandb_mode}: {value:.2f} s above import torch "
            f"(first row at {statistics.median(arm):.2f} s; target {target}: {status})")
    res.details["startup"] = {"medians_s": {k: statistics.median(v) for k, v in times.items()},
                              "first_step_time_s": {k: statistics.median(v) for k, v in step_times.items() if v}}

    say("  import-time breakdown (python -X importtime -m cutlab ..., wandb offline)")
    runs = workdir / "startup_importtime"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "cutlab", *TINY, "wandb.mode=offline",
                           f"paths.runs_dir={runs}", "run_name=s"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    res.details["startup"]["imports"] = summarise_importtime(done.stderr)
    say("  phase breakdown (cProfile of one run, wandb offline)")
    res.details["startup"]["phases"] = profile_phases(workdir, env)
    if data is not None:
        res.details["startup"]["reference_epsilon"] = time_reference_epsilon(data)
    if any(_status(res, f"startup.wandb_{m}") == "NOT met" for m in ("disabled", "offline")):
        res.profiles["startup"] = {
            "slower arm": "python -m cutlab (tiny run)",
            "table": startup_profile_text(res.details["startup"]),
            "text": "torch.profiler does not see start-up (imports, Hydra, W&B, file I/O), so the profile is the "
                    "import-time breakdown and a cProfile of the run's phases (also under 'What start-up is made of').",
        }


def startup_profile_text(startup: dict) -> str:
    lines = []
    phases = startup.get("phases", {}).get("phases_s", [])
    if phases:
        lines.append("cProfile phases of one run (cumulative s):")
        lines += [f"  {label:<42} {sec:8.3f}" for label, sec in phases]
    imports = startup.get("imports")
    if imports:
        lines.append(f"imports, by package (sum of self times; {imports['total_s']:.2f} s in total):")
        lines += [f"  {name:<42} {sec:8.3f}" for name, sec in imports["by_package_self_s"][:8]]
    return "\n".join(lines)


def summarise_importtime(stderr: str, top: int = 12) -> dict:
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if match:
            rows.append((int(match[1]), int(match[2]), (len(match[3]) - 1) // 2, match[4]))
    top_level = sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])
    by_package: dict[str, int] = {}
    for self_us, _, _, name in rows:
        root = name.split(".")[0]
        by_package[root] = by_package.get(root, 0) + self_us
    return {
        "total_s": sum(r[0] for r in rows) / 1e6,
        "top_level_cumulative_s": [(name, cum / 1e6) for _, cum, _, name in top_level[:top]],
        "by_package_self_s": sorted(((k, v / 1e6) for k, v in by_package.items()), key=lambda kv: -kv[1])[:top],
        "note": "-X importtime adds its own overhead; top-level rows are import statements not nested in another "
                "import (lazy imports inside functions appear here too).",
    }


PHASES = [  # (label, file suffix, function name)
    ("module imports (all, incl. lazy)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("cutlab main() (Hydra + the run)", "cutlab/__main__.py", "main"),
    ("run_experiment", "cutlab/experiment.py", "run_experiment"),
    ("provenance (git, versions)", "cutlab/provenance.py", "provenance"),
    ("build_video_task (data, sigma, model)", "cutlab/video_task.py", "build_video_task"),
    ("reference_epsilon (epsilon=auto pass)", "cutlab/experiment.py", "reference_epsilon"),
    ("build_primal_dual", "cutlab/experiment.py", "build_primal_dual"),
    ("Tracker.__init__ (wandb.init)", "cutlab/tracking.py", "__init__"),
    ("Trainer.train_step (all steps)", "cutlab/core/training.py", "train_step"),
    ("save_checkpoint", "cutlab/checkpoints.py", "save_checkpoint"),
    ("_evaluate_and_write", "cutlab/experiment.py", "_evaluate_and_write"),
    ("Tracker.finish", "cutlab/tracking.py", "finish"),
]


def profile_phases(workdir: Path, env: dict) -> dict:
    """Cumulative time of the main phases of one tiny run, from cProfile (which slows Python code a little)."""
    out = workdir / "startup.prof"
    runs = workdir / "startup_cprofile"
    run_quiet([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "cutlab", *TINY, "wandb.mode=offline",
               f"paths.runs_dir={runs}", "run_name=s"], env)
    stats = pstats.Stats(str(out)).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    phases = []
    for label, suffix, name in PHASES:
        total = sum(v[3] for (file, _, func), v in stats.items() if func == name and file.endswith(suffix))
        phases.append((label, total))
    return {"phases_s": phases, "note": "cProfile cumulative times of one run (profiler overhead included); "
                                         "imports overlap the other phases (lazy imports)."}


def time_reference_epsilon(data: Data) -> dict:
    """epsilon=auto evaluates the untrained model on 8 training batches before the first step: its cost on Ped2."""
    from omegaconf import OmegaConf

    from cutlab.experiment import reference_epsilon

    cfg = OmegaConf.create({"train": {"epsilon": "auto", "batch_size": BATCH}, "gamma": GAMMA, "noise_mean": 0.0,
                            "seed": 0})
    task = SimpleNamespace(model=make_model("dust", per_layer=True), objective=DenoisingObjective(),
                           train_set=data.train, prepare=data.prepare, sigma=data.sigma)
    started = time.perf_counter()
    reference_epsilon(cfg, task, torch.device("cpu"))
    seconds = time.perf_counter() - started
    say(f"  epsilon=auto reference pass on {data.source.split(' (')[0]} (DUST, 8 batches of 4): {seconds:.2f} s")
    return {"seconds": seconds, "data": data.source, "model": "dust (per-layer D)",
            "note": "paid once per Ped2 run before its first step (not in the synthetic start-up figure)"}


# --------------------------------------------------------------------------- 5. sweep throughput

GRID = {"model": ["dust", "ut"], "train": ["erm", "constrained"], "seed": ["0", "1", "2"]}
SWEEP_TINY = ("data=synthetic", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0.0,0.5]",
              "progress=false")


# sweeps/smoke.yaml: model=dust,ut x gamma=0,0.09,0.15 x train=constrained,erm, L=2, 1 epoch of 3 steps, synthetic.
SMOKE_QUICK = ("model=dust", "gamma=0,0.09")  # --quick: 4 of its runs (command-line values replace the file's)


def section_sweep(res: Results, mode: Mode, workdir: Path) -> None:
    section_sweep_launcher(res, mode, workdir)
    grid = dict(GRID) if mode.sweep_runs >= 12 else {"model": ["dust"], "train": ["erm", "constrained"],
                                                       "seed": ["0"]}
    combos = [(m, t, s) for m in grid["model"] for t in grid["train"] for s in grid["seed"]]
    say(f"5/7 sweep: {len(combos)}-run grid, one `python -m cutlab -m` process vs {len(combos)} separate processes")
    env = sub_env(workdir)
    counter = iter(range(10**6))

    def serial_multirun() -> float:
        runs = workdir / f"sweep_multi_{next(counter)}"
        started = time.perf_counter()
        run_quiet(cutlab_cmd(*SWEEP_TINY, *(f"{k}={','.join(v)}" for k, v in grid.items()),
                             f"paths.runs_dir={runs}", multirun=True), env)
        elapsed = time.perf_counter() - started
        check_complete(runs, len(combos))
        return elapsed / len(combos)

    def separate() -> float:
        runs = workdir / f"sweep_separate_{next(counter)}"
        started = time.perf_counter()
        for m, t, s in combos:
            run_quiet(cutlab_cmd(*SWEEP_TINY, f"model={m}", f"train={t}", f"seed={s}", f"paths.runs_dir={runs}"), env)
        elapsed = time.perf_counter() - started
        check_complete(runs, len(combos))
        return elapsed / len(combos)

    times = interleave({"multirun": serial_multirun, "separate": separate}, 1, 0, "sweep")
    res.ratio("sweep.serial_in_process", 5,
              f"{len(combos)}-run grid: per-run wall time, serial in one process (Hydra basic launcher) ÷ "
              "one process per run", "python -m cutlab -m (one process)", times["multirun"],
              "separate python -m cutlab processes", times["separate"],
              f"Grid {' '.join(f'{k}={chr(44).join(v)}' for k, v in grid.items())} with "
              + " ".join(SWEEP_TINY) + " and wandb.mode=offline (the default). Single repetition (each arm runs "
              f"{len(combos)} trainings). The per-run fixed cost of a process of its own, which the local launcher "
              "pays for every run with launcher.warm_workers=false (see sweep_launcher).", target_key="sweep_serial")
    res.details["sweep"] = {"runs": len(combos), "per_run_s": {k: v[0] for k, v in times.items()},
                            "total_s": {k: v[0] * len(combos) for k, v in times.items()}}


def section_sweep_launcher(res: Results, mode: Mode, workdir: Path) -> None:
    """The smoke grid with launcher=local (2 processes at a time) vs launcher=inprocess (serial, one process)."""
    narrowed = () if mode.sweep_runs >= 12 else SMOKE_QUICK
    base = ("--config-name", "smoke", *narrowed, "progress=false")
    runs_count = 12 if not narrowed else 4
    say(f"5/7 sweep: the smoke grid ({runs_count} runs), launcher=local launcher.max_parallel=2 vs launcher=inprocess")
    env = sub_env(workdir)
    counter = iter(range(10**6))

    def sweep(*launcher: str) -> Callable[[], float]:
        def run() -> float:
            runs = workdir / f"sweep_{launcher[0].split('=')[1]}_{next(counter)}"  # fresh: nothing skipped as complete
            started = time.perf_counter()
            run_quiet(cutlab_cmd(*base, *launcher, f"paths.runs_dir={runs}", multirun=True), env)
            elapsed = time.perf_counter() - started
            check_complete(runs, runs_count)
            return elapsed / runs_count
        return run

    times = interleave({"local": sweep("launcher=local", "launcher.max_parallel=2"),
                        "inprocess": sweep("launcher=inprocess")}, 1, 0, "sweep launcher")
    res.ratio("sweep_launcher", 5,
              f"{runs_count}-run smoke grid: per-run wall time, local parallel launcher (2 at a time) ÷ serial in one "
              "process", "launcher=local launcher.max_parallel=2", times["local"], "launcher=inprocess",
              times["inprocess"],
              f"`python -m cutlab -m --config-name smoke {' '.join(narrowed)} progress=false launcher=...` "
              "(sweeps/smoke.yaml: synthetic video, L=2, 1 epoch of 3 steps, gamma_test {0, 0.5}; W&B offline), "
              "each arm into a fresh runs folder, wall time from spawn to exit ÷ the number of runs. The local "
              "launcher runs the runs in 2 warm workers (launcher.warm_workers=true, its default: long-lived "
              "processes that import cutlab once and run their runs one after another, each as `python -m cutlab` "
              "would) with launcher.threads=1 (its default); in-process runs use torch's default threads. "
              "Single repetition.")
    res.details["sweep_launcher"] = {"runs": runs_count, "per_run_s": {k: v[0] for k, v in times.items()},
                                     "total_s": {k: v[0] * runs_count for k, v in times.items()}}
    if _status(res, "sweep_launcher") == "NOT met":
        local, inprocess = times["local"][0], times["inprocess"][0]
        res.profiles["sweep_launcher"] = {
            "slower arm": "launcher=local",
            "table": (f"per run: local {local:.2f} s, in-process {inprocess:.2f} s; local x 2 parallel slots = "
                      f"{2 * local:.2f} s of slot time per run, i.e. {2 * local - inprocess:.2f} s per run above the "
                      "in-process run itself"),
            "text": "torch.profiler does not see process start-up. Each of the 2 warm workers pays the start-up of "
                    "section 4 (imports of torch and Hydra, W&B's service) once, as the in-process sweep does, plus "
                    "the launcher's own process; with 12 runs of about a second that fixed cost is still a large "
                    "share, and 2 workers only halve the wall time when 2 cores are free (other load on the machine "
                    "takes them). With launcher.warm_workers=false every run pays the start-up (see "
                    "sweep.serial_in_process below for the cost of one process per run).",
        }


def check_complete(runs: Path, expected: int) -> None:
    complete = [p for p in runs.glob("*/summary.json") if json.loads(p.read_text()).get("status") == "complete"]
    if len(complete) != expected:
        raise RuntimeError(f"{runs}: {len(complete)} of {expected} runs complete")


# --------------------------------------------------------------------------- 6. data

def section_data_load(res: Results, mode: Mode, ped2: Path, workdir: Path) -> None:
    say("6/7 data: load_video_clips('ucsd_ped2') with an empty cache vs the cached second load")
    if not ped2.is_file():
        res.not_measured("data.cached_over_first", 6, "Ped2 load: cached ÷ first", f"{ped2} missing")
        return
    counter = iter(range(10**6))
    pending: list[Path] = []

    def first() -> float:
        cache = workdir / f"load_cache_{next(counter)}"
        pending.append(cache)
        started = time.perf_counter()
        clips = load_video_clips("ucsd_ped2", str(ped2), str(cache), IMAGE, progress=False)
        elapsed = time.perf_counter() - started
        del clips
        return elapsed

    def second() -> float:
        cache = pending[-1]
        started = time.perf_counter()
        clips = load_video_clips("ucsd_ped2", str(ped2), str(cache), IMAGE, progress=False)
        elapsed = time.perf_counter() - started
        if "cached in" not in clips.source:
            raise RuntimeError(f"second load did not come from the cache: {clips.source}")
        del clips
        return elapsed

    times = {"first": [], "second": []}
    first()  # warm the page cache of the source file and the imports
    for rep in range(mode.data_reps):
        gc.collect()
        times["first"].append(first())
        gc.collect()
        times["second"].append(second())
        say(f"  data: repetition {rep + 1}/{mode.data_reps}: first {times['first'][-1]:.2f} s, "
            f"cached {times['second'][-1]:.2f} s")
    size = sum(p.stat().st_size for p in pending[-1].glob("*.npz"))
    res.ratio("data.cached_over_first", 6, "Full Ped2 load: second (cached) ÷ first (empty cache)",
              "cached load", times["second"], "first load (decompress + write cache)", times["first"],
              f"{ped2.name} ({ped2.stat().st_size / 1e6:.0f} MB deflated) -> uncompressed cache of {size / 1e6:.0f} MB. "
              "Each repetition starts from an empty cache folder; the source file is in the page cache (one "
              "unmeasured load first).", target_key="data")
    res.details["data_load"] = {"first_s": statistics.median(times["first"]),
                                "cached_s": statistics.median(times["second"]), "cache_bytes": size}


# Runs the command as its own child and prints that child's rusage. Linux keeps a process's max RSS across
# exec, and a child forked from this (large) benchmark process would inherit our high-water mark, so the
# measured process must be forked from this small launcher instead.
RSS_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, usage = os.wait4(proc.pid, 0)
tail = proc.stderr.read().decode(errors="replace")[-3000:]
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss,
                  "wall_s": time.perf_counter() - started, "stderr": tail}))
"""


def peak_rss(cmd: list[str], env: dict) -> tuple[float, float]:
    """(max RSS in MiB, wall seconds) of one child process, from os.wait4's rusage of that process alone."""
    done = subprocess.run([sys.executable, "-c", RSS_LAUNCHER, *cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the RSS launcher failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with {report['rc']}:\n{report['stderr']}")
    return report["maxrss_kib"] / 1024.0, report["wall_s"]  # ru_maxrss is in KiB on Linux


def section_peak_memory(res: Results, mode: Mode, ped2: Path, workdir: Path) -> None:
    say("6/7 data: peak memory (max RSS) of the default run and of a 1-epoch Ped2 run")
    env = sub_env(workdir)
    runs = workdir / "memory"
    baseline, _ = peak_rss([sys.executable, "-c", "import torch"], env)
    res.value("memory.import_torch", 6, "Peak RSS of `python -c 'import torch'` (baseline)", baseline, "MiB")
    args = list(mode.default_run_args)
    rss, wall = peak_rss(cutlab_cmd(*args, f"paths.runs_dir={runs}", "run_name=default"), env)
    res.value("memory.default_run", 6, "Peak RSS of the default run `python -m cutlab`", rss, "MiB",
              f"args: {' '.join(args) or '(none: the embedded default, 20 epochs on synthetic video)'}; "
              f"wall {wall:.1f} s. max RSS of the cutlab process (os.wait4); the W&B service process is separate.",
              extra={"wall_s": wall})
    if not ped2.is_file():
        res.not_measured("memory.ped2_1epoch", 6, "Peak RSS of a 1-epoch Ped2 run", f"{ped2} missing")
        return
    # a typical run: the preprocessed cache exists (the first-ever load is measured in the data-load figure)
    load_video_clips("ucsd_ped2", str(ped2), env["CUTLAB_CACHE_DIR"], IMAGE, progress=False)
    args = ["model=dust", "data=ucsd_ped2", f"data.root={ped2}", *mode.ped2_run_args]
    rss, wall = peak_rss(cutlab_cmd(*args, f"paths.runs_dir={runs}", "run_name=ped2"), env)
    res.value("memory.ped2_1epoch", 6, "Peak RSS of a 1-epoch-capped Ped2 run", rss, "MiB",
              f"args: {' '.join(args)}; wall {wall:.1f} s. A larger data.stride only thins the windows: the "
              "whole set is in memory and train/eval batches have the usual shapes "
              f"({BATCH} and {BATCH}×{K_GAMMAS} windows).", extra={"wall_s": wall})


# --------------------------------------------------------------------------- 7. hardware utilisation

def section_flops(res: Results, mode: Mode, data: Data) -> None:
    say("7/7 hardware utilisation: FLOP/s of a training step ÷ measured float32 matmul FLOP/s")
    steps = {"ut": primal_dual_step("ut", True, False, data)[1], "dust": primal_dual_step("dust", True, True, data)[1]}
    flops = {kind: count_flops(step) for kind, step in steps.items()}
    n = mode.matmul_size
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)

    def matmul() -> float:
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        return time.perf_counter() - started

    times = interleave({"ut": timed(steps["ut"]), "dust": timed(steps["dust"]), "matmul": matmul},
                       mode.flops_reps, 1, "flops")
    peak = 2 * n**3 / statistics.median(times["matmul"])
    res.value("hardware.matmul_peak", 7, f"Measured dense float32 matmul ({n}×{n})", peak / 1e9, "GFLOP/s",
              f"median of {len(times['matmul'])} torch.mm calls, {torch.get_num_threads()} threads",
              extra={"seconds": spread(times["matmul"])})
    for kind in ("ut", "dust"):
        achieved = [flops[kind] / t for t in times[kind]]
        ratios = [flops[kind] / t / (2 * n**3 / m) for t, m in zip(times[kind], times["matmul"])]
        res.value(f"hardware.{kind}_utilisation", 7,
                  f"{kind.upper()} constrained training step: achieved FLOP/s ÷ matmul FLOP/s",
                  statistics.median(ratios), "fraction",
                  f"{flops[kind] / 1e9:.2f} GFLOP per step (FlopCounterMode: matrix products of forward + backward; "
                  f"elementwise ops not counted) in {statistics.median(times[kind]) * 1e3:.0f} ms = "
                  f"{statistics.median(achieved) / 1e9:.1f} GFLOP/s vs {peak / 1e9:.1f} GFLOP/s matmul.",
                  extra={"flops_per_step": flops[kind], "achieved_gflops": statistics.median(achieved) / 1e9,
                         "matmul_gflops": peak / 1e9, "step_seconds": spread(times[kind]),
                         "pair_ratios": spread(ratios), "repeats": len(ratios)})


# --------------------------------------------------------------------------- machine and output

def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    try:
        import wandb  # noqa: F401  (version only)
        wandb_version = sys.modules["wandb"].__version__
    except Exception:
        wandb_version = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "wandb": wandb_version,
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "loadavg_start": _loadavg(),
    }


def _loadavg() -> str | None:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


def _busy(machine: dict) -> str | None:
    """A warning when other work is running: torch's threads then wait on each other and small ops slow down."""
    try:
        load = float(str(machine.get("loadavg_start") or "0").split()[0])
    except ValueError:
        return None
    cores = machine.get("cores_available") or machine.get("cores") or 1
    if load > 0.5 * cores:
        return (f"load average {load:.2f} on {cores} cores when the benchmark started: other work is running, so "
                "timings (and even ratios) are unreliable; run on an idle machine")
    return None


def fmt_value(fig: dict) -> str:
    value = fig.get("value")
    if value is None:
        return "—"
    unit = fig.get("unit") or ""
    if unit == "ratio":
        return f"{value:.3f}"
    if unit == "fraction":
        return f"{100 * value:.1f} %"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.4g} {unit}"


def fmt_spread(fig: dict) -> str:
    for key, scale, unit in (("pair_ratios", 1, ""), ("pair_differences_s", 1, " s")):
        if key in fig:
            s = fig[key]
            if s["n"] == 1:
                return "1 repeat"
            if fig.get("unit") == "fraction":
                return f"{s['n']} pairs, range {100 * s['min']:.1f}–{100 * s['max']:.1f} %"
            return f"{s['n']} pairs, IQR {s['p25']:.3f}–{s['p75']:.3f}{unit}, range {s['min']:.3f}–{s['max']:.3f}{unit}"
    return "—"


def render_markdown(data: dict) -> str:
    meta, mode = data["machine"], data["mode"]
    lines = ["# cutlab benchmark results", ""]
    if mode != "full":
        lines += [f"> **{mode} mode**: tiny repeats for developing the suite; these numbers are not meaningful.", ""]
    if _busy(meta):
        lines += [f"> **Warning**: {_busy(meta)}.", ""]
    lines += [
        "Written by `python benchmarks/run.py` (see benchmarks/README.md). Every ratio is the median of per-repetition "
        "ratios A_i/B_i with the arms interleaved in the same run.", "",
        "| machine | |", "|---|---|",
        f"| CPU | {meta['cpu']} |", f"| cores | {meta['cores']} (available to this process: {meta['cores_available']}) |",
        f"| torch | {meta['torch']}, {meta['torch_threads']} threads |",
        f"| python / numpy / wandb | {meta['python']} / {meta['numpy']} / {meta['wandb']} |",
        f"| date (UTC) | {meta['date']} |",
        f"| git commit | {meta['git_commit']}{' (dirty tree)' if meta['git_dirty'] else ''} |",
        f"| load average at start / end | {meta['loadavg_start']} / {meta.get('loadavg_end')} |",
        f"| benchmark wall time | {data['wall_s'] / 60:.1f} min |", "",
        "## Figures", "",
        "| # | figure | value | target | status | repeats and spread |", "|---|---|---|---|---|---|",
    ]
    for fig in data["figures"]:
        status = fig["status"]
        shown = f"**{status}**" if status == "NOT met" else status
        lines.append(f"| {fig['section']} | {fig['title']} (`{fig['id']}`) | {fmt_value(fig)} | {fig['target']} | "
                     f"{shown} | {fmt_spread(fig)} |")
    lines += ["", "## Details", ""]
    for fig in data["figures"]:
        if fig.get("notes") or "arms" in fig:
            lines.append(f"- **`{fig['id']}`** — {fig.get('notes', '')}")
            if "arms" in fig:
                a, b = fig["arms"]["A"], fig["arms"]["B"]
                lines.append(f"  A = {a['name']}: median {a['seconds']['median'] * 1e3:.1f} ms; "
                             f"B = {b['name']}: median {b['seconds']['median'] * 1e3:.1f} ms; "
                             f"ratio of medians {fig['ratio_of_medians']:.3f}.")
            if "first_row_s" in fig:
                lines.append(f"  first history row at {fig['first_row_s']['median']:.2f} s (first step starts at "
                             f"{fig['first_step_start_s']['median']:.2f} s); `import torch` "
                             f"{fig['import_torch_s']['median']:.2f} s; a bare torch training script (import torch, "
                             f"Adam, one step — Adam's first use imports torch._dynamo) "
                             f"{fig['bare_training_script_s']['median']:.2f} s, so cutlab adds "
                             f"{fig['above_bare_training_script_s']['median']:.2f} s above that; bare python "
                             f"{fig['python_bare_s']['median']:.3f} s. The whole tiny run (1 step, evaluation at "
                             f"one gamma, records) exits after {fig['process_exit_s']['median']:.2f} s: the fixed "
                             "cost of a run.")
    details = data["details"]
    if "framework_overhead" in details:
        lines += ["", "### Framework overhead, per step", "", "| model | cutlab step (no ckpt) | core step in bare loop | "
                  "bare step | on_step callback | checkpoint | checkpoint amortised (Ped2 / synthetic default) |",
                  "|---|---|---|---|---|---|---|"]
        for kind in ("dust", "ut"):
            d = details["framework_overhead"].get(kind)
            if d:
                lines.append(f"| {kind} | {d['cutlab_step_ms_median_without_checkpoint']:.1f} ms | "
                             f"{d['core_step_ms_median']:.1f} ms | {d['bare_step_ms_median']:.1f} ms | {d['on_step_callback_ms_median']:.2f} ms | "
                             f"{d['checkpoint_ms_median']:.1f} ms ({d['checkpoint_bytes'] / 1e6:.1f} MB) | "
                             f"{d['checkpoint_amortised_ms_per_step_ped2']:.2f} / "
                             f"{d['checkpoint_amortised_ms_per_step_synthetic_default']:.2f} ms |")
    if "startup" in details:
        s = details["startup"]
        lines += ["", "### What start-up is made of", ""]
        if "imports" in s:
            imp = s["imports"]
            lines += [f"`python -X importtime -m cutlab` (tiny run, W&B offline): {imp['total_s']:.2f} s of imports in "
                      "total. " + imp["note"], "",
                      "| top-level import | cumulative s |", "|---|---|"]
            lines += [f"| {name} | {sec:.3f} |" for name, sec in imp["top_level_cumulative_s"]]
            lines += ["", "| package (sum of self times) | s |", "|---|---|"]
            lines += [f"| {name} | {sec:.3f} |" for name, sec in imp["by_package_self_s"]]
        if "phases" in s:
            lines += ["", "cProfile of one tiny run (" + s["phases"]["note"] + "):", "",
                      "| phase | cumulative s |", "|---|---|"]
            lines += [f"| {label} | {sec:.3f} |" for label, sec in s["phases"]["phases_s"]]
        if "reference_epsilon" in s:
            r = s["reference_epsilon"]
            lines += ["", f"`epsilon=auto` reference pass ({r['model']}, {r['data']}): {r['seconds']:.2f} s — {r['note']}."]
    if "sweep" in details or "sweep_launcher" in details:
        lines += ["", "### Sweep", ""]
        if "sweep_launcher" in details:
            sl = details["sweep_launcher"]
            lines.append(f"Smoke grid, {sl['runs']} runs: launcher=local (2 at a time) {sl['total_s']['local']:.1f} s in "
                         f"total ({sl['per_run_s']['local']:.2f} s per run); launcher=inprocess "
                         f"{sl['total_s']['inprocess']:.1f} s ({sl['per_run_s']['inprocess']:.2f} s per run).")
        if "sweep" in details:
            sw = details["sweep"]
            lines.append(f"{sw['runs']} runs: one process {sw['total_s']['multirun']:.1f} s in total "
                         f"({sw['per_run_s']['multirun']:.2f} s per run); separate processes "
                         f"{sw['total_s']['separate']:.1f} s ({sw['per_run_s']['separate']:.2f} s per run).")
    if data["profiles"]:
        lines += ["", "## Profiles of targets not met", ""]
        for fid, prof in data["profiles"].items():
            lines += [f"### `{fid}` — slower arm: {prof['slower arm']}", "",
                      "Top ops by self CPU time (torch.profiler, one call):", "", "```", prof["table"].rstrip(), "```"]
            if prof.get("differences"):
                lines += ["", "Largest self-CPU differences between the arms:", "", "```", prof["differences"], "```"]
            if prof.get("text"):
                lines += ["", prof["text"]]
            lines.append("")
    if data["errors"]:
        lines += ["", "## Sections that failed", ""]
        for name, text in data["errors"].items():
            lines += [f"### {name}", "", "```", text.rstrip()[-2000:], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def readme_block(data: dict, results_md: str) -> str:
    lines = ([f"> {_busy(data['machine'])}.", ""] if _busy(data["machine"]) else []) + [f"Measured on {data['machine']['cpu']} ({data['machine']['cores']} cores, torch "
             f"{data['machine']['torch']}, {data['machine']['torch_threads']} threads), {data['machine']['date'][:10]}, "
             f"commit {str(data['machine']['git_commit'])[:10]}; {data['mode']} mode. Full record: `{results_md}`.", "",
             "| figure | value | target | status |", "|---|---|---|---|"]
    for fig in data["figures"]:
        lines.append(f"| {fig['title']} | {fmt_value(fig)} | {fig['target']} | {fig['status']} |")
    return "\n".join(lines)


def update_readme(path: Path, block: str) -> None:
    text = path.read_text()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    if begin not in text or end not in text:
        say(f"README {path} has no {begin} ... {end} block; not updated")
        return
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{block}\n{end}{tail}")
    say(f"updated the performance block of {path}")


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny repeats for development (numbers not meaningful)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON (default benchmarks/results.json; --quick: benchmarks/results_quick.json); "
                             "RESULTS.md (RESULTS_quick.md) is written beside it")
    parser.add_argument("--only", default="1,2,3,4,5,6,7", help="comma-separated sections to run (default all)")
    parser.add_argument("--ped2", type=Path, default=DEFAULT_PED2, help="the preprocessed Ped2 npz")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in this process (default: torch's)")
    parser.add_argument("--readme", type=Path, default=None,
                        help="also rewrite the bench:begin/bench:end block of this README with the figures")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the temporary run folders")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    here = Path(__file__).resolve().parent
    out = args.out or here / ("results_quick.json" if args.quick else "results.json")
    md_path = out.with_name("RESULTS_quick.md" if out.name == "results_quick.json" else
                            ("RESULTS.md" if out.name == "results.json" else out.stem + ".md"))
    sections = {int(s) for s in args.only.split(",") if s.strip()}
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info()
    say(f"cutlab benchmarks, {mode.name} mode, sections {sorted(sections)}: {machine['cpu']}, {machine['cores']} cores, "
        f"torch {machine['torch']} ({machine['torch_threads']} threads), load {machine['loadavg_start']}")
    busy = _busy(machine)
    if busy:
        say(f"WARNING: {busy}")
    res = Results(mode.name)
    workdir = Path(tempfile.mkdtemp(prefix="cutlab-bench-"))
    os.environ.setdefault("WANDB_SILENT", "true")
    started = time.perf_counter()
    data: Data | None = None

    def guarded(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            res.errors[name] = traceback.format_exc()
            say(f"  !! section {name} failed:\n{res.errors[name]}")

    try:
        if sections & {6}:
            guarded("6 data load", lambda: section_data_load(res, mode, args.ped2, workdir))
        if sections & {1, 2, 3, 4, 7}:
            say(f"loading the benchmark data ({args.ped2.name})")
            data = Data(args.ped2, workdir / "cutlab-cache")
            say(f"  data: {data.source}; {len(data.train)} training windows, {len(data.test)} test windows")
        # in this order: the timing sections first, the process-spawning ones (start-up, sweep, memory) last
        runs = [
            (1, "1 constraint overhead", lambda: section_constraint(res, mode, data, workdir)),
            (2, "2 framework overhead", lambda: section_framework(res, mode, data, workdir)),
            (3, "3 evaluation", lambda: section_evaluation(res, mode, data)),
            (7, "7 hardware utilisation", lambda: section_flops(res, mode, data)),
            (4, "4 start-up", lambda: section_startup(res, mode, workdir, data)),
            (5, "5 sweep", lambda: section_sweep(res, mode, workdir)),
            (6, "6 peak memory", lambda: section_peak_memory(res, mode, args.ped2, workdir)),
        ]
        for number, name, section in runs:
            if number in sections:
                guarded(name, section)
    finally:
        if args.keep_workdir:
            say(f"run folders kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    res.figures.sort(key=lambda f: f["section"])
    machine["loadavg_end"] = _loadavg()
    payload = {"mode": mode.name, "machine": machine, "wall_s": time.perf_counter() - started,
               "sections": sorted(sections), "figures": res.figures, "details": res.details,
               "profiles": res.profiles, "errors": res.errors}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(render_markdown(payload))
    if args.readme and mode.name != "full":
        say(f"--readme ignored in {mode.name} mode: the README quotes full measurements only")
    elif args.readme:
        try:
            shown = md_path.resolve().relative_to(args.readme.resolve().parent)
        except ValueError:
            shown = md_path
        update_readme(args.readme, readme_block(payload, str(shown)))
    say(f"wrote {out} and {md_path} in {payload['wall_s'] / 60:.1f} min")
    for fig in res.figures:
        print(f"  {fig['id']:<42} {fmt_value(fig):>14}  target {fig['target']:<26} {fig['status']}")
    if res.errors:
        print(f"  sections failed: {', '.join(res.errors)}", file=sys.stderr)
    return 1 if res.errors else 0


if __name__ == "__main__":
    sys.exit(main())
