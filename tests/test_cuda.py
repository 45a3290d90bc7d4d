"""On a CUDA GPU: cutlab's step against the CPU's, resume on the GPU, resume across devices, and precision.

Every test here but the last two needs a CUDA GPU and is skipped elsewhere (CI has none); the device the numbers
come from is named in the README's GPU section.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from cutlab.config.compose import compose_run_config
from cutlab.run.build import build_trainer, reference_epsilon
from cutlab.tasks import build_task
from helpers.cli import cutlab
from helpers.contract import assert_same_records, start_and_kill

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# a short constrained run of the embedded default (generated video): 2 epochs of warm-up then dual steps
RUN = ["train.epochs=4", "checkpoint.every_steps=3", "wandb.mode=disabled", "L=2", "eval.gamma_test=[0,0.3]"]


def steps_on(device: str, model: str, steps: int = 3) -> tuple[list[tuple[torch.Tensor, ...]], float]:
    """``steps`` constrained steps of the default settings on one fixed perturbed batch, drawn on the CPU, and the
    primal learning rate: (layer losses, multipliers, all weights) after each step."""
    cfg = compose_run_config([f"model={model}", "L=2", "train.warmup_epochs=0"])
    torch.manual_seed(0)
    task = build_task(cfg)
    epsilon = reference_epsilon(cfg, task, torch.device("cpu"))
    task.model.to(device)
    trainer = build_trainer(cfg, task, epsilon, torch.device(device))
    inputs, target = task.prepare(torch.stack([task.train_set[i] for i in range(4)]))
    clean = task.model.perturbable(inputs)
    noisy = clean + 0.09 * task.sigma * torch.randn(clean.shape, generator=torch.Generator().manual_seed(1))
    results = []
    for _ in range(steps):
        outputs = task.model.unroll(noisy.to(device), inputs.to(device))
        losses = task.objective.loss_matrix(outputs, target.to(device))
        result = trainer.primal_dual.step(losses, dual_active=True)
        results.append((result.layer_losses.cpu(), result.multipliers.cpu(),
                        torch.cat([p.detach().flatten().cpu() for p in task.model.parameters()])))
    return results, trainer.primal_dual.primal_optimizer.param_groups[0]["lr"]


@needs_cuda
@pytest.mark.parametrize("model", ["dust", "ut"])
def test_a_constrained_step_on_cuda_equals_the_step_on_cpu(model):
    # same weights, batch and noise: only the kernels' summation order differs. The losses and multipliers agree to
    # 1e-4 relative. Adam moves each weight by about lr * sign(gradient) in its first steps, so where a gradient is at
    # round-off level its sign, and that weight, may differ by up to 2 lr per step (seen on an H100: 6 of 393 216 UT
    # weights after 3 steps, 0.01 % of DUST's): all weights within that bound, and all but 0.1 % of them within 1e-5
    (cpu_steps, lr), (cuda_steps, _) = steps_on("cpu", model), steps_on("cuda", model)
    for step, (cpu, cuda) in enumerate(zip(cpu_steps, cuda_steps), start=1):
        (cpu_losses, cpu_multipliers, cpu_weights), (cuda_losses, cuda_multipliers, cuda_weights) = cpu, cuda
        torch.testing.assert_close(cuda_losses, cpu_losses, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(cuda_multipliers, cpu_multipliers, rtol=1e-4, atol=1e-6)
        difference = (cuda_weights - cpu_weights).abs()
        assert difference.max() <= 2 * lr * step
        assert (difference > 1e-5 + 1e-4 * cpu_weights.abs()).float().mean() < 1e-3


@needs_cuda
def test_a_killed_cuda_run_resumes_and_ends_identical_to_an_uninterrupted_one(tmp_path):
    runs = tmp_path / "runs"
    cutlab([*RUN, "device=cuda", "run_name=uninterrupted"], runs)
    start_and_kill([*RUN, "device=cuda", "run_name=killed"], runs / "killed", rows=8)
    result = cutlab([*RUN, "device=cuda", "run_name=killed"], runs)
    assert "[cutlab] resuming " in result.stderr
    assert_same_records(runs / "killed", runs / "uninterrupted")
    provenance = json.loads((runs / "uninterrupted" / "provenance.json").read_text())
    assert provenance["device"] == "cuda" and provenance["device_name"] == torch.cuda.get_device_name()


@needs_cuda
def test_a_cuda_checkpoint_carries_the_gpus_random_state_for_dropout():
    # the Hugging Face encoders and LoRA keep their dropout, whose masks come from the CUDA generator
    cfg = compose_run_config(["L=2", "train.warmup_epochs=0"])
    task = build_task(cfg)
    task.model.to("cuda")
    trainer = build_trainer(cfg, task, reference_epsilon(cfg, task, torch.device("cuda")), torch.device("cuda"))
    state = trainer.state_dict()
    expected = torch.rand(4, device="cuda")
    torch.rand(100, device="cuda")  # move the generator on
    trainer.load_state_dict(state)
    assert torch.equal(torch.rand(4, device="cuda"), expected)


@needs_cuda
@pytest.mark.parametrize("started, resumed", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_run_resumed_on_another_kind_of_device_is_refused_in_one_line_and_resumes_on_its_own(tmp_path, started,
                                                                                               resumed):
    runs = tmp_path / "runs"
    start_and_kill([*RUN, f"device={started}", "run_name=moved"], runs / "moved", rows=5)
    refused = cutlab([*RUN, f"device={resumed}", "run_name=moved"], runs, check=False)
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if line.startswith("cutlab: error:")]
    assert len(lines) == 1 and f"this run trained on {started} and would resume on {resumed}" in lines[0]
    assert f"resume it with device={started}" in lines[0]
    cutlab([*RUN, f"device={started}", "run_name=moved"], runs)  # the run itself is untouched and finishes
    assert json.loads((runs / "moved" / "summary.json").read_text())["status"] == "complete"


@needs_cuda
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_lower_precision_runs_keep_float32_constraints_and_stay_close_to_fp32(tmp_path, precision):
    runs = tmp_path / "runs"
    cutlab([*RUN, "device=cuda", "run_name=fp32"], runs)
    cutlab([*RUN, "device=cuda", f"precision={precision}", f"run_name={precision}"], runs)
    fp32 = pd.read_csv(runs / "fp32" / "history.csv")
    lower = pd.read_csv(runs / precision / "history.csv")
    first = [column for column in fp32.columns if column.startswith("loss_")]
    # the first step (same weights, same noise) differs only by the products' rounding: bf16 carries 8 bits of
    # mantissa (0.4 %), tf32 10; losses sum many products, so 2 % bounds both
    torch.testing.assert_close(torch.tensor(lower[first].iloc[0].values), torch.tensor(fp32[first].iloc[0].values),
                               rtol=2e-2, atol=0)
    summary = json.loads((runs / precision / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert (runs / precision / "config.yaml").read_text().count(f"precision: {precision}") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA refuses tf32")
def test_tf32_without_cuda_is_refused_in_one_line(tmp_path):
    result = cutlab(["precision=tf32", "wandb.mode=disabled"], tmp_path / "runs", check=False)
    assert result.returncode != 0 and "precision=tf32 needs a CUDA GPU" in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bf16_on_the_cpu_trains_with_float32_losses_and_multipliers(tmp_path):
    # autocast to bfloat16 also runs on the CPU, so the precision path is tested where CI runs
    runs = tmp_path / "runs"
    args = ["train.epochs=2", "wandb.mode=disabled", "L=2", "eval.gamma_test=[0]", "device=cpu"]
    cutlab([*args, "precision=bf16"], runs)
    cutlab([*args, "run_name=fp32"], runs)
    run = next(runs.glob("*precision=bf16*"))
    history = pd.read_csv(run / "history.csv")
    assert history.filter(like="loss_").notna().all().all() and (history.filter(like="lambda_") >= 0).all().all()
    assert json.loads((run / "summary.json").read_text())["status"] == "complete"
    # the first step (same weights and noise) shows bf16 was in effect, and its float32 losses stay within 2 %
    first = [column for column in history.columns if column.startswith("loss_")]
    bf16, fp32 = history[first].iloc[0].values, pd.read_csv(runs / "fp32" / "history.csv")[first].iloc[0].values
    assert (bf16 != fp32).any()
    torch.testing.assert_close(torch.tensor(bf16), torch.tensor(fp32), rtol=2e-2, atol=0)
