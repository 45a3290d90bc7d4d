"""The ViT denoiser (paper Sec. 4): a pretrained ViT-family encoder whose every layer is read out as a frame.

Any Hugging Face ViT-family encoder works (ViT, DeiT, DINOv2: a hub id or a local folder); ``transformers``
is imported only when this model is built, because importing it costs every other run seconds.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from cutlab.core.models.base import LayerwiseModel
from cutlab.core.errors import CutlabError
from cutlab.core.extras import optional_import

# ImageNet statistics: what ViT-family checkpoints (ViT, DeiT, DINOv2) were trained on, used when
# the checkpoint ships no preprocessor_config.json of its own.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PAD_MODES = ("reflect", "replicate", "constant", "circular")  # torch.nn.functional.pad modes


def load_encoder(pretrained: str, depth: int) -> nn.Module:
    """The checkpoint's bare encoder (classifier head dropped), in float32, cut to its first ``depth`` blocks.

    ``pretrained`` is a local folder or a hub id; with HF_HUB_OFFLINE=1 (or no network) a hub id must
    already be in the Hugging Face cache.
    """
    transformers = optional_import("transformers")  # lazy: only model=vit pays for transformers
    AutoConfig, AutoModel = transformers.AutoConfig, transformers.AutoModel

    source = _resolve_source(pretrained)
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise CutlabError(
            f"model.pretrained={pretrained!r} cannot be loaded ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
            "give a local folder holding config.json + weights (e.g. model.pretrained=../shared/models/dinov2-small) "
            "or a hub id that is in the local Hugging Face cache (nothing is downloaded with HF_HUB_OFFLINE=1)"
        ) from exc
    blocks = getattr(config, "num_hidden_layers", None)
    if not isinstance(blocks, int) or not hasattr(config, "patch_size"):
        raise CutlabError(
            f"model.pretrained={pretrained!r} is a {config.model_type} model, not a ViT-family image encoder "
            "(it needs patch_size and num_hidden_layers); use a ViT, DeiT or DINOv2 checkpoint"
        )
    if not 1 <= depth <= blocks:
        raise CutlabError(
            f"L={depth} but {pretrained} has {blocks} blocks; model=vit uses the first L blocks of the encoder, "
            f"so choose 1 <= L <= {blocks} (the paper's ViT uses all of its blocks)"
        )
    try:
        # AutoModel gives the bare encoder class: a classification checkpoint loads without its head. Asking for
        # num_hidden_layers=L builds only the first L blocks and loads their pretrained weights (Phi_l is the
        # output of block l of the pretrained stack); the report listing the unused blocks and head is silenced.
        with _quiet_transformers():
            encoder = AutoModel.from_pretrained(source, dtype=torch.float32, num_hidden_layers=depth)
    except (OSError, ValueError) as exc:
        raise CutlabError(f"model.pretrained={pretrained!r}: cannot load the weights ({exc})") from exc
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None  # the classification pooler is not part of any Phi_l
    return encoder


@contextlib.contextmanager
def _quiet_transformers():
    """transformers at error level while loading: its load report of deliberately skipped weights is noise here."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)


def encoder_blocks(encoder: nn.Module) -> nn.ModuleList:
    """The encoder's list of transformer blocks (``encoder.layer`` in DINOv2, ``layers`` in ViT/DeiT)."""
    return next(module for module in encoder.modules() if isinstance(module, nn.ModuleList))


def _resolve_source(pretrained: str) -> str:
    """A local folder as an absolute path; anything else is taken as a hub id, which must be cached when offline."""
    if not pretrained or not str(pretrained).strip():
        raise CutlabError("model.pretrained is empty; set it to a local folder or a hub id, e.g. facebook/dinov2-small")
    path = Path(str(pretrained)).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CutlabError(f"model.pretrained={path} has no config.json; point it at a Hugging Face model folder")
        return str(path.resolve())
    looks_like_path = str(pretrained).startswith((".", "/", "~")) or str(pretrained).count("/") > 1
    if looks_like_path:
        raise CutlabError(
            f"model.pretrained={pretrained} does not exist; point it at a local model folder "
            "(e.g. ${paths.models_dir}/dinov2-small) or give a hub id such as facebook/dinov2-small"
        )
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(str(pretrained), "config.json"), str):
            raise CutlabError(
                f"model.pretrained={pretrained} is a hub id that is not in the local Hugging Face cache and "
                "HF_HUB_OFFLINE=1 forbids downloading it; download it where there is network, or point "
                "model.pretrained at a local copy"
            )
    return str(pretrained)


class ViTDenoiser(LayerwiseModel):
    """Frames through a pretrained ViT encoder; each layer's patch tokens read out as the denoised frame.

    Input and outputs are the video patch tokens every video model uses, [B, T, P, n] in [0, 1] (n = 16*16
    data patches), so the objective and the 0-255 RMSE are the same as DUST's and UT's. Per frame (frames are
    processed one at a time, paper Sec. 4):

    1. tokens -> grayscale frame, reflect-padded to the next multiple of the encoder's patch size (160 -> 168
       for patch 14): padding keeps every original pixel in place, where a resize would put an interpolation
       error floor under every layer's RMSE; the gray channel is repeated to the encoder's channels and
       normalised with the checkpoint's mean/std;
    2. Phi_l = readout(final_norm(hidden state l)) for l = 0 (the patch embedding) ... L (block l), CLS and
       register tokens dropped; the readout is ONE module shared by every layer: the identity when the width
       equals patch*patch*channels (the paper's ViT-B/16, 768 = 16*16*3), else a linear map initialised
       to zero (every layer starts as the flat frame of the normalisation mean; training learns the map);
    3. the readout's normalised pixels are un-normalised, averaged over channels, cropped back to the frame.
    """

    def __init__(self, encoder: nn.Module, depth: int, mean=IMAGENET_MEAN, std=IMAGENET_STD, pad_mode: str = "reflect"):
        super().__init__()
        if pad_mode not in PAD_MODES:
            raise CutlabError(f"model.pad_mode={pad_mode!r} is not one of {', '.join(PAD_MODES)}; e.g. model.pad_mode=reflect")
        config = encoder.config
        self.encoder, self.depth, self.pad_mode = encoder, depth, pad_mode
        self.patch = _as_int(config.patch_size)
        self.channels = int(getattr(config, "num_channels", 3))
        if len(mean) != self.channels or len(std) != self.channels:
            raise CutlabError(f"model.mean/model.std need {self.channels} values (one per encoder channel)")
        if not all(value > 0 for value in std):  # the frames are divided by it: 0 gave NaN losses, blamed on training
            raise CutlabError(f"model.std must be > 0 for every channel, got {list(std)}; give the encoder's own std")
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))
        pixels = self.patch * self.patch * self.channels
        width = int(config.hidden_size)
        # The encoder's own final norm before the readout, at every layer (as the LM readout applies the final
        # norm to every hidden state, paper App. B.2). Without it one shared readout cannot serve all layers: the
        # raw residual stream of DINOv2's last blocks is far larger than the embedding's (a linear readout that
        # inverts the patch embedding gave RMSE 72 at layer 0 but 7434 at layer 12 on Ped2 frames).
        norm = getattr(encoder, "layernorm", None)
        self.final_norm = norm if isinstance(norm, nn.Module) else nn.Identity()
        self.readout = nn.Identity() if width == pixels else _flat_readout(width, pixels)
        forward_arguments = inspect.signature(encoder.forward).parameters
        # ViT/DeiT need this flag for frames of another size than pre-training; DINOv2 always interpolates.
        self.encoder_kwargs = {"interpolate_pos_encoding": True} if "interpolate_pos_encoding" in forward_arguments else {}

    def forward(self, noisy: torch.Tensor) -> list[torch.Tensor]:
        """noisy: [B, T, P, n] patch tokens -> [Phi_0, ..., Phi_L], each [B, T, P, n]."""
        hidden, read_out = self._hidden_states(noisy)
        return [read_out(state) for state in hidden]

    def unroll_local(self, embedded: torch.Tensor, inputs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Block l of the encoder re-run on hidden state l-1, detached (equal in value where it has no dropout)."""
        hidden, read_out = self._hidden_states(embedded)
        local = [read_out(hidden[0])]
        for block, previous in zip(encoder_blocks(self.encoder), hidden[:-1]):
            state = block(previous.detach())
            local.append(read_out(state[0] if isinstance(state, tuple) else state))
        return [read_out(state) for state in hidden], local

    def _hidden_states(self, noisy: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], Callable]:
        """The encoder's L+1 hidden states of the frames in ``noisy``, and the readout of one of them as tokens."""
        batch, frames, count, n = noisy.shape
        data_patch = math.isqrt(n)
        side = math.isqrt(count) * data_patch
        if data_patch * data_patch != n or side * side != count * n:
            raise CutlabError(f"model=vit needs square frames of square patches; got tokens {tuple(noisy.shape)}")
        images = _tokens_to_frames(noisy, data_patch, side).reshape(batch * frames, 1, side, side)
        padded, crop = self._pad(images)
        pixel_values = (padded.expand(-1, self.channels, -1, -1) - self.mean) / self.std
        output = self.encoder(pixel_values=pixel_values, output_hidden_states=True, **self.encoder_kwargs)
        hidden = output.hidden_states
        if len(hidden) != self.depth + 1:
            raise CutlabError(f"the encoder returned {len(hidden)} hidden states, expected L+1 = {self.depth + 1}")
        grid = (padded.shape[-2] // self.patch, padded.shape[-1] // self.patch)
        return hidden, lambda state: self._read_out(state, grid, crop, (batch, frames, count, n))

    def _pad(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Pad H and W up to multiples of the encoder patch, split evenly; returns the padded frames and (top, left)."""
        height, width = images.shape[-2:]
        extra_h, extra_w = -height % self.patch, -width % self.patch
        top, left = extra_h // 2, extra_w // 2
        padding = (left, extra_w - left, top, extra_h - top)
        return (F.pad(images, padding, mode=self.pad_mode) if any(padding) else images), (top, left)

    def _read_out(self, state: torch.Tensor, grid: tuple[int, int], crop: tuple[int, int], shape) -> torch.Tensor:
        """Hidden state [N, special + patches, width] -> patch tokens [B, T, P, n] in [0, 1] pixel units."""
        rows, cols = grid
        patches = state[:, state.shape[1] - rows * cols :]  # CLS (and DINOv2 register) tokens come first
        pixels = self.readout(self.final_norm(patches))  # [N, rows*cols, channels*patch*patch] as the patch embedding reads them
        images = pixels.reshape(-1, rows, cols, self.channels, self.patch, self.patch)
        images = images.permute(0, 3, 1, 4, 2, 5).reshape(-1, self.channels, rows * self.patch, cols * self.patch)
        gray = (images * self.std + self.mean).mean(dim=1)  # back to [0, 1] pixels, channels averaged to gray
        batch, frames, count, n = shape
        data_patch = math.isqrt(n)
        side = math.isqrt(count) * data_patch
        top, left = crop
        frame = gray[:, top : top + side, left : left + side].reshape(batch, frames, side, side)
        return _frames_to_tokens(frame, data_patch)


def _flat_readout(width: int, pixels: int) -> nn.Linear:
    """Linear readout starting at zero: every layer first reads out the flat frame of the normalisation mean,
    so training starts from the same, data-independent baseline at every layer (no random-weight noise)."""
    readout = nn.Linear(width, pixels)
    nn.init.zeros_(readout.weight)
    nn.init.zeros_(readout.bias)
    return readout


def _tokens_to_frames(tokens: torch.Tensor, patch: int, side: int) -> torch.Tensor:
    """[B, T, P, patch*patch] -> [B, T, side, side] (the inverse of the data pipeline's patching)."""
    batch, frames = tokens.shape[:2]
    rows = side // patch
    grid = tokens.reshape(batch, frames, rows, rows, patch, patch).permute(0, 1, 2, 4, 3, 5)
    return grid.reshape(batch, frames, side, side)


def _frames_to_tokens(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, T, side, side] -> [B, T, P, patch*patch], row-major patches like the data pipeline's."""
    batch, count, side = frames.shape[0], frames.shape[1], frames.shape[-1]
    rows = side // patch
    grid = frames.reshape(batch, count, rows, patch, rows, patch).permute(0, 1, 2, 4, 3, 5)
    return grid.reshape(batch, count, rows * rows, patch * patch)


def _as_int(value) -> int:
    """patch_size is an int in most configs, a pair in some."""
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise CutlabError(f"model=vit needs square encoder patches, got patch_size={value}")
        value = value[0]
    return int(value)


def build_vit(pretrained: str, depth: int, mean=None, std=None, pad_mode: str = "reflect") -> ViTDenoiser:
    """Load ``pretrained`` (first ``depth`` blocks) and wrap it; mean/std default to the checkpoint's own."""
    mean, std = (None if v is None else tuple(float(x) for x in v) for v in (mean, std))
    encoder = load_encoder(pretrained, depth)
    own_mean, own_std = _image_statistics(pretrained)
    return ViTDenoiser(encoder, depth, mean=mean or own_mean, std=std or own_std, pad_mode=pad_mode)


def _image_statistics(pretrained: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """image_mean/image_std of the checkpoint's preprocessor_config.json, else ImageNet's."""
    config = Path(str(pretrained)).expanduser() / "preprocessor_config.json"
    if config.is_file():
        values = json.loads(config.read_text())
        if "image_mean" in values and "image_std" in values:
            return tuple(values["image_mean"]), tuple(values["image_std"])
    return IMAGENET_MEAN, IMAGENET_STD
