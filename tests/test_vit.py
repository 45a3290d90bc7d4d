"""The ViT denoiser (model=vit) on the real DINOv2-small weights: contract, readout geometry, errors, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import PED2_TINY, ROOT, SHARED, require_shared
from helpers.cli import cutlab
from helpers.contract import assert_same_records, start_and_kill, steps_on_a_fixed_batch

from cutlab.core.data.video import to_patch_tokens
from cutlab.core.models.vit import build_vit, encoder_blocks
from cutlab.core.objectives import DenoisingObjective
from cutlab.errors import CutlabError

DINOV2 = SHARED / "models" / "dinov2-small"


@pytest.fixture(scope="module")
def frames_tokens() -> torch.Tensor:
    """Two real Ped2 samples of 2 full 160x160 frames as [B, T, P, n] = [2, 2, 100, 256] tokens in [0, 1]."""
    clips = np.load(require_shared(PED2_TINY))
    frames = torch.from_numpy(np.stack([clips["training_01"][:2], clips["training_02"][:2]]))
    return to_patch_tokens(frames, patch=16)


@pytest.fixture(scope="module")
def tiny_vit_folder(tmp_path_factory) -> Path:
    """A real (randomly initialised) ViT image *classifier* saved like a hub checkpoint: width 48 = 4*4*3."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
                       image_size=32, patch_size=4, num_channels=3, num_labels=5)
    folder = tmp_path_factory.mktemp("vit") / "tiny-vit-classifier"
    ViTForImageClassification(config).save_pretrained(folder)
    return folder


def test_dinov2_gives_l_plus_1_frames_through_the_first_l_blocks(frames_tokens):
    model = build_vit(str(require_shared(DINOV2)), depth=2)
    assert len(encoder_blocks(model.encoder)) == 2 and model.depth == 2
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp16 checkpoint cast to float32
    assert isinstance(model.readout, torch.nn.Linear) and model.readout.weight.shape == (14 * 14 * 3, 384)
    outputs = model(frames_tokens)
    assert len(outputs) == 3 and all(o.shape == frames_tokens.shape for o in outputs)
    # zero-initialised readout: every layer starts as the flat frame of the ImageNet mean, averaged to gray
    torch.testing.assert_close(outputs[1], torch.full_like(outputs[1], (0.485 + 0.456 + 0.406) / 3))
    # block 1 holds the checkpoint's block-1 weights, read straight from the file (not a re-initialised copy)
    from safetensors import safe_open

    block = encoder_blocks(model.encoder)[1]
    with safe_open(DINOV2 / "model.safetensors", "pt") as weights:
        for ours, theirs in (("mlp.fc1.weight", "mlp.fc1.weight"), ("norm2.bias", "norm2.bias"),
                             ("attention.q_proj.weight", "attention.attention.query.weight")):
            stored = weights.get_tensor(f"encoder.layer.1.{theirs}")
            assert stored.dtype == torch.float16
            torch.testing.assert_close(block.get_parameter(ours), stored.float())


@pytest.mark.parametrize("encoder", ["dinov2", "vit-classifier"])
def test_each_blocks_local_output_equals_its_output_and_reaches_only_that_block(encoder, frames_tokens, tiny_vit_folder):
    """train.detach_prev=local: block l re-run on hidden state l-1, detached (LayerwiseModel.unroll_local)."""
    torch.manual_seed(0)
    source = str(require_shared(DINOV2)) if encoder == "dinov2" else str(tiny_vit_folder)
    model = build_vit(source, depth=2)
    if isinstance(model.readout, torch.nn.Linear):  # zero at initialisation, which would pass no gradient back
        torch.nn.init.normal_(model.readout.weight, std=0.01)
    tokens = frames_tokens[:1, :1]
    outputs, local = model.unroll_local(tokens, tokens)
    assert len(local) == 3
    for full, own in zip(outputs, local):
        torch.testing.assert_close(full, own)
    blocks = encoder_blocks(model.encoder)
    local[2].pow(2).sum().backward()
    assert all(p.grad is not None for p in blocks[1].parameters())
    assert all(p.grad is None for p in blocks[0].parameters())


@pytest.mark.parametrize("constrained", [False, True])
def test_contract_a_step_lowers_the_objective_on_a_fixed_batch(constrained, frames_tokens):
    """The same contract as UT and DUST (tests/test_models.py), with the real DINOv2 weights."""
    torch.manual_seed(0)
    model = build_vit(str(require_shared(DINOV2)), depth=2)
    noisy = frames_tokens + 0.05 * torch.randn_like(frames_tokens)
    objective = DenoisingObjective()
    assert steps_on_a_fixed_batch(model, objective, noisy, frames_tokens, constrained, lr=1e-4)[2]


def test_identity_readout_drops_the_classifier_head_and_puts_every_pixel_back(tiny_vit_folder, frames_tokens):
    """Width 48 = 4*4*3 gives the identity readout (the paper's ViT-B/16 case). Fed tokens that hold the
    normalised pixels of their patch, the readout returns the input exactly: padding, patch order, channel
    handling and cropping lose nothing."""
    model = build_vit(str(tiny_vit_folder), depth=3)
    assert isinstance(model.readout, torch.nn.Identity)
    assert not hasattr(model.encoder, "classifier") and model.encoder.pooler is None
    assert len(model(frames_tokens[:1, :1])) == 4
    # 30x30 frames of 15x15 data patches: 30 is not a multiple of the encoder patch 4, so the frame is padded to 32
    frame = torch.rand(1, 1, 30, 30)
    tokens = frame.reshape(1, 1, 2, 15, 2, 15).permute(0, 1, 2, 4, 3, 5).reshape(1, 1, 4, 225)
    padded, crop = model._pad(frame.reshape(1, 1, 30, 30))
    assert padded.shape[-1] == 32 and crop == (1, 1)
    normalised = (padded.expand(-1, 3, -1, -1) - model.mean) / model.std
    hidden = F.unfold(normalised, kernel_size=4, stride=4).transpose(1, 2)  # [1, 64, 48] in conv-weight order
    hidden = torch.cat([torch.zeros(1, 1, 48), hidden], dim=1)  # a CLS token in front, as the encoder has
    model.final_norm = torch.nn.Identity()
    torch.testing.assert_close(model._read_out(hidden, (8, 8), crop, tokens.shape), tokens)


def test_a_zero_std_is_refused_before_it_gives_nan_losses_blamed_on_training(tiny_vit_folder):
    # 'model.std=[0,0,0]': "the held-out loss of layer 0 ... is nan ... lower the primal learning rate"
    with pytest.raises(CutlabError, match=r"model.std must be > 0 for every channel, got \[0.5, 0.0, 0.5\]"):
        build_vit(str(tiny_vit_folder), depth=1, std=[0.5, 0, 0.5])


def test_depth_beyond_the_encoder_is_refused_with_the_bound():
    with pytest.raises(CutlabError, match=r"L=13 but .* has 12 blocks.*1 <= L <= 12"):
        build_vit(str(require_shared(DINOV2)), depth=13)


def test_missing_folder_uncached_hub_id_and_non_vit_model_get_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(CutlabError, match="does not exist; point it at a local model folder"):
        build_vit(str(tmp_path / "nope"), depth=2)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(CutlabError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE=1"):
        build_vit("someone/vit-that-is-not-here", depth=2)
    text_model = require_shared(SHARED / "models" / "distilbert-base-uncased")
    with pytest.raises(CutlabError, match="not a ViT-family image encoder"):
        build_vit(str(text_model), depth=2)


def test_importing_the_video_path_does_not_import_transformers():
    code = "import sys, cutlab.tasks.video, cutlab.core.models; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


# ----------------------------------------------------------------------------- end to end, real command line

TINY_VIT = [
    "model=vit", "data=ucsd_ped2", f"data.root={PED2_TINY}", "data.val_clips=1", "data.frames=2", "data.stride=2",
    "L=2", "train.epochs=6", "train.batch_size=1", "train.lr=1e-4", "eval.gamma_test=[0,0.3]",
    "checkpoint.every_steps=2", "wandb.mode=disabled",
]


@pytest.mark.slow
def test_cli_vit_on_ped2_writes_a_complete_record_and_a_killed_run_resumes_identically(tmp_path):
    """python -m cutlab model=vit data=ucsd_ped2 with the real DINOv2 weights, then kill + resume."""
    require_shared(PED2_TINY), require_shared(DINOV2)
    cutlab([*TINY_VIT, "run_name=uninterrupted"], tmp_path / "runs")
    reference = tmp_path / "runs" / "uninterrupted"
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["steps"] == 6 * 4  # 1 train clip of 8 frames: 4 windows of 2
    history = pd.read_csv(reference / "history.csv")
    assert {"loss_0", "loss_2", "lambda_2", "g_2"} <= set(history.columns)
    assert history["loss_2"].iloc[-3:].mean() < history["loss_2"].iloc[:3].mean()  # it learns
    evaluation = pd.read_csv(reference / "eval.csv")
    rmse = evaluation.query("split == 'test' and metric == 'rmse'")
    assert sorted(rmse["layer"].unique()) == [0, 1, 2] and sorted(rmse["gamma_test"].unique()) == [0.0, 0.3]
    assert summary["test_mean_metric"] == pytest.approx(rmse.query("layer == 2")["value"].mean())
    assert 0 < summary["test_mean_metric"] < 255  # the same 0-255 pixel scale as DUST and UT
    assert "dinov2-small" in (reference / "config.yaml").read_text()

    killed = tmp_path / "runs" / "killed"
    start_and_kill([*TINY_VIT, "run_name=killed"], killed, rows=7)
    assert json.loads((killed / "summary.json").read_text())["status"] == "running"
    result = cutlab([*TINY_VIT, "run_name=killed"], tmp_path / "runs")
    assert "[cutlab] resuming " in result.stderr
    assert_same_records(killed, reference)


def test_cli_refuses_l_beyond_the_checkpoint_with_one_clear_line(tmp_path):
    require_shared(DINOV2)
    result = cutlab(["model=vit", "L=20", "wandb.mode=disabled"], tmp_path / "runs", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("cutlab: error: L=20 but ")
