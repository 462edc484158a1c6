"""A Llama-architecture decoder in plain torch, loading Hugging Face Llama checkpoint directories.

The model is written for serving: ``forward`` takes a flat batch of tokens (prompt chunks and
decodes of many requests, concatenated), their positions, and an ``attend`` callback that does
the attention of one layer over whatever KV cache the caller keeps. Everything else (RMSNorm,
RoPE in Hugging Face's rotate-half convention, GQA projections, SwiGLU MLP, lm_head) is here.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields
from typing import Callable, Dict, List, Optional, Tuple

import torch

import safetensors_io

# attend(layer, query (T, Hq, D), key (T, Hkv, D), value (T, Hkv, D)) -> (T, Hq, D); an MLA
# model's absorbed form passes value None (its latent keys carry the values).
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


def config_kwargs(cls, raw: Dict[str, object]) -> Dict[str, object]:
    """The keys of a ``config.json`` dict that dataclass ``cls`` has, without nulls; the first
    of several EOS ids."""
    known = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in raw.items() if k in known and v is not None}
    if isinstance(kwargs.get("eos_token_id"), list):  # Llama 3 lists several
        kwargs["eos_token_id"] = kwargs["eos_token_id"][0]
    return kwargs


@dataclass
class LlamaConfig:
    """The LlamaConfig keys this model uses (names as in a Hugging Face ``config.json``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    bos_token_id: int = 1
    eos_token_id: int = 2
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    rope_scaling: Optional[Dict[str, object]] = None  # None, "linear" or "llama3"

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError("RoPE needs an even head_dim")

    @classmethod
    def from_dict(cls, raw: Dict[str, object]) -> "LlamaConfig":
        """Builds a config from a ``config.json`` dict, ignoring keys this model does not use."""
        kwargs = config_kwargs(cls, raw)
        kwargs.setdefault("num_key_value_heads", raw["num_attention_heads"])
        return cls(**kwargs)

    def to_dict(self) -> Dict[str, object]:
        """The ``config.json`` contents of this config."""
        raw: Dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        if raw["rope_scaling"] is None:
            del raw["rope_scaling"]
        raw.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                    "hidden_act": "silu", "torch_dtype": "bfloat16"})
        return raw


@dataclass
class LayerWeights:
    """Weights of one decoder layer, float32, in torch's (out_features, in_features) order."""

    input_norm: torch.Tensor
    qkv_proj: torch.Tensor  # q_proj, k_proj and v_proj stacked: one matmul gives q, k and v
    o_proj: torch.Tensor
    post_norm: torch.Tensor
    gate_proj: torch.Tensor
    up_proj: torch.Tensor
    down_proj: torch.Tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm: x / sqrt(mean(x^2) + eps) * weight, computed in float32."""
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def scale_frequencies(inv_freq: torch.Tensor,
                      scaling: Optional[Dict[str, object]]) -> torch.Tensor:
    """Applies a config's ``rope_scaling`` to the RoPE frequencies.

    "linear" divides every frequency by ``factor``. "llama3" (Llama 3.1) keeps the frequencies
    whose wavelength is below original_max_position_embeddings / high_freq_factor, divides those
    above original_max_position_embeddings / low_freq_factor by ``factor``, and blends linearly
    (in 1/wavelength) in between.
    """
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind in (None, "default"):
        return inv_freq
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv_freq / factor
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not supported")
    original = float(scaling["original_max_position_embeddings"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelength > original / low, inv_freq / factor, blended)
    return torch.where(wavelength < original / high, inv_freq, out)


class RotaryEmbedding:
    """RoPE with Hugging Face's convention: dims i and i + D/2 form a rotated pair."""

    def __init__(self, head_dim: int, theta: float, max_positions: int,
                 scaling: Optional[Dict[str, object]] = None) -> None:
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
        inv_freq = scale_frequencies(1.0 / (theta ** exponents), scaling)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # (P, D)
        self.cos = angles.cos().float()
        self.sin = angles.sin().float()

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotates x (T, H, D) by the angles of ``positions`` (T,)."""
        if positions.numel() and int(positions.max()) >= self.cos.shape[0]:
            raise ValueError("position past max_position_embeddings")
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


def embedding_head_norm(weights: Dict[str, torch.Tensor], tie_word_embeddings: bool
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The token embedding, the output head (the embedding when tied or absent) and the final
    norm of a Hugging Face decoder checkpoint, float32."""
    embed = weights["model.embed_tokens.weight"].float()
    head = weights.get("lm_head.weight")
    lm_head = embed if tie_word_embeddings or head is None else head.float()
    return embed, lm_head, weights["model.norm.weight"].float()


def mlp_residual(x: torch.Tensor, layer, eps: float) -> torch.Tensor:
    """x plus the layer's SwiGLU MLP of its post-attention RMSNorm (``post_norm``, ``gate_proj``,
    ``up_proj``, ``down_proj``)."""
    h = rms_norm(x, layer.post_norm, eps)
    gated = torch.nn.functional.silu(h @ layer.gate_proj.t()) * (h @ layer.up_proj.t())
    return x + gated @ layer.down_proj.t()


def output_logits(x: torch.Tensor, norm: torch.Tensor, lm_head: torch.Tensor, eps: float,
                  logit_rows: Optional[List[int]]) -> torch.Tensor:
    """The logits of rows ``logit_rows`` of x (all rows when None): final RMSNorm, then the head."""
    if logit_rows is not None:
        x = x[logit_rows]
    return rms_norm(x, norm, eps) @ lm_head.t()


class LlamaModel:
    """Llama decoder for inference (float32 weights and activations)."""

    def __init__(self, config: LlamaConfig, weights: Dict[str, torch.Tensor]) -> None:
        self.config = config
        self.embed, self.lm_head, self.norm = embedding_head_norm(weights,
                                                                  config.tie_word_embeddings)
        self.layers: List[LayerWeights] = [
            _layer_weights(weights, i) for i in range(config.num_hidden_layers)]
        self.rope = RotaryEmbedding(config.head_dim, config.rope_theta,
                                    config.max_position_embeddings, config.rope_scaling)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: AttendFn,
                logit_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Runs the flat batch ``tokens`` (T,) at ``positions`` (T,) through every layer.

        ``attend`` does each layer's attention (and keeps its KV cache). Returns the logits
        (R, vocab) of the rows ``logit_rows`` (all rows when None), in float32.
        """
        cfg = self.config
        x = self.embed[tokens]
        for index, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, cfg.rms_norm_eps)
            # Column slices of the fused projection (row stride (Hq + 2 Hkv) * D): the attention
            # backends take them as they are, without a copy.
            qkv = h @ layer.qkv_proj.t()
            nq = cfg.num_attention_heads * cfg.head_dim
            nk = cfg.num_key_value_heads * cfg.head_dim
            q = qkv[:, :nq].view(-1, cfg.num_attention_heads, cfg.head_dim)
            k = qkv[:, nq:nq + nk].view(-1, cfg.num_key_value_heads, cfg.head_dim)
            v = qkv[:, nq + nk:].view(-1, cfg.num_key_value_heads, cfg.head_dim)
            q = self.rope.apply(q, positions)
            k = self.rope.apply(k, positions)
            attn = attend(index, q, k, v)
            x = x + attn.float().reshape(x.shape[0], -1) @ layer.o_proj.t()
            x = mlp_residual(x, layer, cfg.rms_norm_eps)
        return output_logits(x, self.norm, self.lm_head, cfg.rms_norm_eps, logit_rows)


def _layer_weights(weights: Dict[str, torch.Tensor], i: int) -> LayerWeights:
    """The float32 weights of layer ``i`` from Hugging Face tensor names."""
    p = f"model.layers.{i}."

    def get(name: str) -> torch.Tensor:
        return weights[p + name].float()

    return LayerWeights(
        input_norm=get("input_layernorm.weight"),
        qkv_proj=torch.cat([get("self_attn.q_proj.weight"), get("self_attn.k_proj.weight"),
                            get("self_attn.v_proj.weight")]),
        o_proj=get("self_attn.o_proj.weight"), post_norm=get("post_attention_layernorm.weight"),
        gate_proj=get("mlp.gate_proj.weight"), up_proj=get("mlp.up_proj.weight"),
        down_proj=get("mlp.down_proj.weight"))


def load_weights(directory: str) -> Dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory: ``model.safetensors`` or a sharded index."""
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    if not shards:
        raise FileNotFoundError(f"{directory}: no .safetensors weights")
    weights: Dict[str, torch.Tensor] = {}
    for shard in shards:
        weights.update(safetensors_io.load_file(os.path.join(directory, shard)))
    return weights


def load_model(directory: str) -> LlamaModel:
    """Loads ``config.json`` and the safetensors weights of a Llama checkpoint directory."""
    with open(os.path.join(directory, "config.json")) as f:
        config = LlamaConfig.from_dict(json.load(f))
    return LlamaModel(config, load_weights(directory))
