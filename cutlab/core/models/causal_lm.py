"""A Hugging Face causal LM read layer by layer: Phi_l = LM head(final norm(hidden state l)) (paper Sec. 6).

Every decoder layer's hidden state is passed through the model's own final norm and LM head (the
"logit lens"), so each layer yields next-token logits and the descent constraints act on token
cross-entropy. Noise goes on the token embeddings (``inputs_embeds``), as for the text encoders.

Supported: Llama-family decoders (Llama, Mistral, Qwen2, Gemma, ...: a decoder with a final ``norm``
and an ``lm_head``), float32 or bfloat16, full fine-tuning or LoRA through ``peft``, one device.
Not supported (refused with a message): float16 (no loss scaling here), ``device_map`` / model
sharding over several GPUs, quantised (4/8-bit) weights. transformers and peft are imported lazily.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

from cutlab.core.models.base import LayerwiseModel
from cutlab.core.errors import CutlabError
from cutlab.core.extras import optional_import
from cutlab.core.models.memory_bound import check_weights_fit, host_available_bytes, weight_bytes, weights_text

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    if name == "float16":
        raise CutlabError("model.dtype=float16 is not supported (training here has no loss scaling); "
                          "use model.dtype=bfloat16 (or float32)")
    if name not in DTYPES:
        raise CutlabError(f"model.dtype must be one of {', '.join(DTYPES)}, got {name!r}; e.g. model.dtype=bfloat16")
    return DTYPES[name]


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def load_pretrained(loader, name: str, key: str, **kwargs):
    """``loader.from_pretrained(name)`` for a hub id or a local folder, with a clear error when it cannot be had."""
    if str(name).startswith((".", "/", "~")) and not os.path.isdir(os.path.expanduser(name)):
        # a path, not a hub id: the hub's advice (`hf download /a/path`) would send the user the wrong way
        raise CutlabError(f"{key}={name} does not exist; point {key} at a local Hugging Face model folder "
                          "(config.json, weights and tokenizer files) or give a hub id, e.g. meta-llama/Llama-3.1-8B")
    try:
        return loader.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as error:
        if os.path.isdir(os.path.expanduser(name)):  # a folder: the hub's advice (`hf download /a/path`) would mislead
            raise CutlabError(
                f"{key}={name} cannot be loaded: the folder does not hold a whole Hugging Face checkpoint "
                f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); point {key} at a folder with "
                "config.json, weights and tokenizer files") from None
        where = "it is neither a local folder nor in the local Hugging Face cache" + (
            ", and the hub is offline (HF_HUB_OFFLINE=1)" if _offline() else ", and the hub could not be reached")
        raise CutlabError(
            f"{key}={name!r} cannot be loaded: {where} ({type(error).__name__}: {str(error).splitlines()[0][:200]}). "
            f"Download it where the hub is reachable (e.g. `hf download {name} --local-dir /path/to/model`; "
            f"gated models such as meta-llama/* need an accepted licence and HF_TOKEN) and pass {key}=/path/to/model"
        ) from None


def load_tokenizer(name: str, key: str = "model.tokenizer"):
    AutoTokenizer = optional_import("transformers").AutoTokenizer

    tokenizer = load_pretrained(AutoTokenizer, name, key)
    if tokenizer.pad_token_id is None:  # Llama ships no pad token; padding is masked out of attention and loss
        if tokenizer.eos_token_id is None:
            raise CutlabError(f"{key}={name!r} has neither a pad nor an eos token; use a causal-LM tokenizer")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_causal_lm(model_cfg: Any, depth: int, vocab_size: int,
                    say: Callable[[str], None] | None = None) -> "CausalLM":
    """The configured network: ``model.pretrained`` (hub id or folder) or, when null, a random-init Llama
    of ``model.architecture`` with ``depth`` layers and the tokenizer's vocabulary. ``say`` gets a line naming the
    pretrained weights and their size before they load (minutes for an 8B model)."""
    transformers = optional_import("transformers")
    AutoConfig, AutoModelForCausalLM = transformers.AutoConfig, transformers.AutoModelForCausalLM
    LlamaConfig, LlamaForCausalLM = transformers.LlamaConfig, transformers.LlamaForCausalLM

    if model_cfg.get("device_map") is not None:
        raise CutlabError("model.device_map is not supported: cutlab trains on one device (device=cuda or cpu); "
                          "shard-free options for large models are model.dtype=bfloat16, model.lora.enabled=true "
                          "and model.gradient_checkpointing=true; set model.device_map=null")
    dtype = torch_dtype(model_cfg.dtype)
    if model_cfg.pretrained is None:
        architecture = dict(model_cfg.architecture or {})
        if "num_hidden_layers" in architecture:
            raise CutlabError("model.architecture.num_hidden_layers is set by L; remove it and pass L=<layers>")
        # the vocabulary defaults to the tokenizer's; a larger one (Llama 3's 128256 rows) may be given
        architecture.setdefault("vocab_size", vocab_size)
        try:
            config = LlamaConfig(**architecture, num_hidden_layers=depth)
        except Exception as error:  # TypeError, ValueError, or huggingface_hub's strict-dataclass validation error
            raise CutlabError(f"model.architecture is not a valid LlamaConfig ({error}); e.g. "
                              "model.architecture={hidden_size:64,intermediate_size:128,num_attention_heads:4,"
                              "num_key_value_heads:2}") from None
        # initialised in float32, then cast: the float32 weights are what must fit
        count, needed = weight_bytes(lambda: LlamaForCausalLM(config), torch.float32)
        check_weights_fit(f"the random-init Llama (L={depth}, model.architecture)", count, needed, torch.float32,
                          host_available_bytes(), halvable=False)
        network = LlamaForCausalLM(config).to(dtype)
    else:
        config = load_pretrained(AutoConfig, model_cfg.pretrained, "model.pretrained")
        layers = getattr(config, "num_hidden_layers", None)
        if layers != depth:
            raise CutlabError(f"model.pretrained={model_cfg.pretrained!r} has {layers} decoder layers but L={depth}; "
                              f"pass L={layers} (the model's depth is its number of layers)")
        if getattr(config, "quantization_config", None) is not None:
            raise CutlabError(f"model.pretrained={model_cfg.pretrained!r} is quantised; quantised weights are not "
                              "supported: use an unquantised checkpoint (with model.dtype=bfloat16 to halve memory)")
        transformers = optional_import("transformers")

        # the keyword is `dtype` since transformers 4.56 (`torch_dtype` before); loading in dtype halves bf16 memory
        keyword = "dtype" if tuple(int(p) for p in transformers.__version__.split(".")[:2]) >= (4, 56) else "torch_dtype"
        count, needed = weight_bytes(lambda: AutoModelForCausalLM.from_config(config), dtype)
        check_weights_fit(f"model.pretrained={model_cfg.pretrained!r}", count, needed, dtype, host_available_bytes())
        if say is not None:
            say(f"loading model.pretrained={model_cfg.pretrained}: {weights_text(count, needed, dtype)}")
        network = load_pretrained(AutoModelForCausalLM, model_cfg.pretrained, "model.pretrained", **{keyword: dtype})
    rows = network.get_input_embeddings().num_embeddings
    if vocab_size > rows:
        raise CutlabError(
            f"the tokenizer has {vocab_size} tokens but the model's embedding has only {rows} rows, so some token "
            f"ids have no embedding; use the model's own tokenizer (model.tokenizer=null reads it from "
            f"model.pretrained) or a tokenizer with at most {rows} tokens"
        )
    if model_cfg.get("gradient_checkpointing"):
        network.gradient_checkpointing_enable()
    if model_cfg.lora.enabled:
        network = with_lora(network, model_cfg.lora)
    return CausalLM(network)


def with_lora(network, lora_cfg):
    """LoRA adapters (peft) on ``lora.target_modules``; the base weights, embeddings, norm and head stay frozen."""
    peft = optional_import("peft")  # missing: one line naming cutlab[lora] and model.lora.enabled=false
    LoraConfig, get_peft_model = peft.LoraConfig, peft.get_peft_model

    config = LoraConfig(r=lora_cfg.r, lora_alpha=lora_cfg.alpha, lora_dropout=lora_cfg.dropout,
                        target_modules=list(lora_cfg.target_modules), task_type="CAUSAL_LM")
    try:
        return get_peft_model(network, config)
    except ValueError as error:
        raise CutlabError(f"model.lora.target_modules={list(lora_cfg.target_modules)} does not match the model's "
                          f"layers ({error}); Llama-family names are q_proj, k_proj, v_proj, o_proj, gate_proj, "
                          "up_proj, down_proj") from None


class CausalLM(LayerwiseModel):
    """Wraps a (possibly peft-wrapped) ``*ForCausalLM``; ``forward`` returns the L+1 logit-lens logits.

    Inputs are dicts with ``input_ids`` and ``attention_mask`` [B, T]; each Phi_l is [B, T, vocab].
    """

    def __init__(self, network) -> None:
        super().__init__()
        self.network = network
        base = self.base
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        if decoder is None or not isinstance(getattr(decoder, "norm", None), torch.nn.Module) \
                or base.get_output_embeddings() is None:
            raise CutlabError(f"{type(base).__name__} is not supported: the logit lens needs a decoder with a final "
                              "`norm` and an `lm_head` (Llama-family models: Llama, Mistral, Qwen2, Gemma)")
        self.depth = base.config.num_hidden_layers

    @property
    def base(self):
        """The transformers model itself (under a peft wrapper, when LoRA is on)."""
        return self.network.get_base_model() if hasattr(self.network, "get_base_model") else self.network

    @property
    def final_norm(self) -> torch.nn.Module:
        return self.base.get_decoder().norm

    def perturbable(self, inputs: dict) -> torch.Tensor:
        return self.base.get_input_embeddings()(inputs["input_ids"])

    def unroll(self, embedded: torch.Tensor, inputs: dict) -> list[torch.Tensor]:
        out = self.network(inputs_embeds=embedded, attention_mask=inputs["attention_mask"],
                           output_hidden_states=True, use_cache=False)
        hidden = out.hidden_states  # L+1 states; transformers applies the final norm to the last one already
        head = self.base.get_output_embeddings()
        return [head(self.final_norm(state)) for state in hidden[:-1]] + [out.logits]

    def forward(self, inputs: dict) -> list[torch.Tensor]:
        return self.unroll(self.perturbable(inputs), inputs)
