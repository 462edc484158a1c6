"""A DeepSeek-V2/V3-style decoder with multi-head latent attention (MLA), in two forms.

Why two forms: per token, MLA keeps one latent row, ``[kv_a_layernorm(c_kv), rope(k_pe)]``
(kv_lora_rank + qk_rope_head_dim elements shared by every head), instead of per-head keys and
values. A server caches that row and folds each head's key up-projection into its query and its
value up-projection into its output (the *absorbed* form): every query head attends to one
latent head whose first kv_lora_rank elements are also the values. That is what
``dynattn.latent_block_cache`` runs (``current_value=None``, ``head_dim_v=kv_lora_rank``). The
*non-absorbed* form expands each head's keys and values from the latent with ``kv_b_proj`` and
runs ordinary attention: the same function of the weights, so on PyTorch's own
``scaled_dot_product_attention`` it is the reference the engine checks the absorbed form against.

Config keys and tensor names are Hugging Face's DeepSeek-V3 ones; the MLP is dense SwiGLU (no
mixture of experts).
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, fields
from typing import Callable, Dict, List, Optional

import torch

import torch_unified
from llama import (AttendFn, RotaryEmbedding, config_kwargs, embedding_head_norm,
                   load_weights, mlp_residual, output_logits, rms_norm)
from paged_kv import CacheSpec

MODEL_TYPES = ("deepseek_v2", "deepseek_v3")


@dataclass
class DeepseekConfig:
    """The DeepseekV3Config keys this model uses (names as in a Hugging Face ``config.json``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: Optional[int] = None  # None: a plain q_proj
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Optional[Dict[str, object]] = None  # None, "linear" or "llama3" (not yarn)
    rope_interleave: bool = True
    tie_word_embeddings: bool = False
    bos_token_id: int = 1
    eos_token_id: int = 2

    def __post_init__(self) -> None:
        if self.qk_rope_head_dim % 2:
            raise ValueError("RoPE needs an even qk_rope_head_dim")

    @property
    def qk_head_dim(self) -> int:
        """Query/key width of a head in the non-absorbed form."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Width of a latent row: the absorbed form's key (and query) head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """1/sqrt(qk_head_dim) in both forms: the absorbed query is wider, its scores are not."""
        return 1.0 / math.sqrt(self.qk_head_dim)

    @classmethod
    def from_dict(cls, raw: Dict[str, object]) -> "DeepseekConfig":
        """Builds a config from a ``config.json`` dict; refuses mixture-of-experts layers."""
        if raw.get("n_routed_experts") and (raw.get("first_k_dense_replace", 0)
                                            < raw["num_hidden_layers"]):
            raise ValueError("mixture-of-experts layers are not supported (dense MLP only: "
                             "first_k_dense_replace must cover every layer)")
        return cls(**config_kwargs(cls, raw))

    def to_dict(self) -> Dict[str, object]:
        """The ``config.json`` contents of this config (every layer dense)."""
        raw: Dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        if raw["rope_scaling"] is None:
            del raw["rope_scaling"]
        raw.update({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                    "hidden_act": "silu", "torch_dtype": "bfloat16", "attention_bias": False,
                    "num_key_value_heads": self.num_attention_heads, "n_routed_experts": None,
                    "first_k_dense_replace": self.num_hidden_layers})
        return raw


@dataclass
class MlaLayerWeights:
    """Weights of one decoder layer, float32, in torch's (out_features, in_features) order."""

    input_norm: torch.Tensor
    q_a_proj: Optional[torch.Tensor]  # None without q_lora_rank
    q_a_norm: Optional[torch.Tensor]
    q_proj: torch.Tensor  # q_b_proj (or the plain q_proj): (H * qk_head_dim, q_lora_rank)
    kv_a_proj: torch.Tensor  # kv_a_proj_with_mqa: (kv_lora_rank + rope, hidden)
    kv_a_norm: torch.Tensor
    kv_b_proj: torch.Tensor  # (H * (nope + v_head_dim), kv_lora_rank)
    w_uk: torch.Tensor  # (H, nope, kv_lora_rank): kv_b_proj's key rows, absorbed into queries
    w_uv: torch.Tensor  # (H, kv_lora_rank, v_head_dim): its value rows, applied to outputs
    o_proj: torch.Tensor
    post_norm: torch.Tensor
    gate_proj: torch.Tensor
    up_proj: torch.Tensor
    down_proj: torch.Tensor


def apply_rope(rope: RotaryEmbedding, x: torch.Tensor, positions: torch.Tensor,
               interleaved: bool) -> torch.Tensor:
    """RoPE on the rope dims x (T, H, rope_dim) as Hugging Face's DeepSeek applies it.

    With ``interleaved`` (``rope_interleave``, the default) the checkpoint's rotated pairs are
    dims (2i, 2i + 1): they are regrouped into halves (even dims, then odd dims) and rotated in
    the rotate-half convention, so pair i turns by frequency i. The result stays in the halves
    order; queries and keys get the same order, so their dot products are unchanged by it.
    """
    if interleaved:
        x = torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)
    return rope.apply(x, positions)


class DeepseekModel:
    """DeepSeek-style decoder for inference (float32 weights and activations).

    ``forward`` calls ``attend`` once per layer. In the absorbed form (the default) it passes the
    absorbed queries (T, H, latent_dim), the step's latent rows (T, 1, latent_dim) as the keys
    and None as the values, and expects (T, H, kv_lora_rank). ``non_absorbed()`` gives the same
    model passing per-head queries and keys (T, H, qk_head_dim) and values (T, H, v_head_dim).
    """

    def __init__(self, config: DeepseekConfig, weights: Dict[str, torch.Tensor]) -> None:
        self.config = config
        self.embed, self.lm_head, self.norm = embedding_head_norm(weights,
                                                                  config.tie_word_embeddings)
        self.layers: List[MlaLayerWeights] = [
            _layer_weights(weights, i, config) for i in range(config.num_hidden_layers)]
        self.rope = RotaryEmbedding(config.qk_rope_head_dim, config.rope_theta,
                                    config.max_position_embeddings, config.rope_scaling)
        self.absorbed = True
        self.round_latent: Optional[Callable[[torch.Tensor], torch.Tensor]] = None

    def non_absorbed(self, round_latent: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
                     ) -> "DeepseekModel":
        """The same model (weights shared) in the non-absorbed form. ``round_latent`` maps the
        latent rows (T, latent_dim) to what a cache of them gives back before they are expanded
        (the fp16 rounding or int8 quantization of the cache under check)."""
        other = copy.copy(self)
        other.absorbed, other.round_latent = False, round_latent
        return other

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: AttendFn,
                logit_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Runs the flat batch ``tokens`` (T,) at ``positions`` (T,) through every layer; returns
        the logits (R, vocab) of the rows ``logit_rows`` (all rows when None), in float32."""
        cfg = self.config
        attention = self._absorbed if self.absorbed else self._expanded
        x = self.embed[tokens]
        for index, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, cfg.rms_norm_eps)
            x = x + attention(index, layer, h, positions, attend) @ layer.o_proj.t()
            x = mlp_residual(x, layer, cfg.rms_norm_eps)
        return output_logits(x, self.norm, self.lm_head, cfg.rms_norm_eps, logit_rows)

    def _project(self, layer: MlaLayerWeights, h: torch.Tensor, positions: torch.Tensor):
        """q_nope (T, H, nope), roped q_pe (T, H, rope) and the latent rows (T, latent_dim)."""
        cfg = self.config
        if layer.q_a_proj is not None:
            h_q = rms_norm(h @ layer.q_a_proj.t(), layer.q_a_norm, cfg.rms_norm_eps)
        else:
            h_q = h
        q = (h_q @ layer.q_proj.t()).view(-1, cfg.num_attention_heads, cfg.qk_head_dim)
        q_nope, q_pe = q.split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
        c_kv, k_pe = (h @ layer.kv_a_proj.t()).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim],
                                                     dim=-1)
        q_pe = apply_rope(self.rope, q_pe, positions, cfg.rope_interleave)
        k_pe = apply_rope(self.rope, k_pe.unsqueeze(1), positions, cfg.rope_interleave)
        latent = torch.cat([rms_norm(c_kv, layer.kv_a_norm, cfg.rms_norm_eps), k_pe[:, 0]], -1)
        return q_nope, q_pe, latent

    def _absorbed(self, index: int, layer: MlaLayerWeights, h: torch.Tensor,
                  positions: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        """Attention output (T, H * v_head_dim) through the latent rows: scores
        [q_nope W_UK, q_pe] . [c, k_pe] = q_nope . k_nope + q_pe . k_pe; outputs o W_UV."""
        q_nope, q_pe, latent = self._project(layer, h, positions)
        query = torch.cat([torch.einsum("thn,hnr->thr", q_nope, layer.w_uk), q_pe], dim=-1)
        out = attend(index, query, latent.unsqueeze(1), None)  # (T, H, kv_lora_rank)
        return torch.einsum("thr,hrv->thv", out.float(), layer.w_uv).flatten(1)

    def _expanded(self, index: int, layer: MlaLayerWeights, h: torch.Tensor,
                  positions: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        """Attention output (T, H * v_head_dim) over per-head keys [k_nope, k_pe] and values
        expanded from the (rounded) latent rows by kv_b_proj."""
        cfg = self.config
        q_nope, q_pe, latent = self._project(layer, h, positions)
        if self.round_latent is not None:
            latent = self.round_latent(latent)
        c_kv, k_pe = latent.split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
        kv = (c_kv @ layer.kv_b_proj.t()).view(-1, cfg.num_attention_heads,
                                               cfg.qk_nope_head_dim + cfg.v_head_dim)
        k_nope, value = kv.split([cfg.qk_nope_head_dim, cfg.v_head_dim], dim=-1)
        key = torch.cat([k_nope, k_pe.unsqueeze(1).expand(-1, cfg.num_attention_heads, -1)], -1)
        return attend(index, torch.cat([q_nope, q_pe], dim=-1), key, value).float().flatten(1)


def _layer_weights(weights: Dict[str, torch.Tensor], i: int,
                   cfg: DeepseekConfig) -> MlaLayerWeights:
    """The float32 weights of layer ``i`` from Hugging Face tensor names."""
    p = f"model.layers.{i}."

    def get(name: str) -> torch.Tensor:
        return weights[p + name].float()

    low_rank_q = cfg.q_lora_rank is not None
    kv_b = get("self_attn.kv_b_proj.weight")
    per_head = kv_b.view(cfg.num_attention_heads, cfg.qk_nope_head_dim + cfg.v_head_dim, -1)
    return MlaLayerWeights(
        input_norm=get("input_layernorm.weight"),
        q_a_proj=get("self_attn.q_a_proj.weight") if low_rank_q else None,
        q_a_norm=get("self_attn.q_a_layernorm.weight") if low_rank_q else None,
        q_proj=get("self_attn.q_b_proj.weight" if low_rank_q else "self_attn.q_proj.weight"),
        kv_a_proj=get("self_attn.kv_a_proj_with_mqa.weight"),
        kv_a_norm=get("self_attn.kv_a_layernorm.weight"), kv_b_proj=kv_b,
        w_uk=per_head[:, :cfg.qk_nope_head_dim].contiguous(),
        w_uv=per_head[:, cfg.qk_nope_head_dim:].transpose(1, 2).contiguous(),
        o_proj=get("self_attn.o_proj.weight"), post_norm=get("post_attention_layernorm.weight"),
        gate_proj=get("mlp.gate_proj.weight"), up_proj=get("mlp.up_proj.weight"),
        down_proj=get("mlp.down_proj.weight"))


def load_model(directory: str) -> DeepseekModel:
    """Loads ``config.json`` and the safetensors weights of a DeepSeek checkpoint directory."""
    with open(os.path.join(directory, "config.json")) as f:
        config = DeepseekConfig.from_dict(json.load(f))
    return DeepseekModel(config, load_weights(directory))


# -- the reference: the non-absorbed form on PyTorch's attention --------------------------------

def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
         allowed: torch.Tensor) -> torch.Tensor:
    """torch's scaled_dot_product_attention (softmax scale 1/sqrt(query's last dim)); in torch
    1.13 it is the private ``_scaled_dot_product_attention``, which returns a pair. ``allowed``
    is a boolean mask, True where a query may see a key."""
    public = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if public is not None:
        return public(query, key, value, attn_mask=allowed)
    return torch.nn.functional._scaled_dot_product_attention(
        query, key, value, allowed, 0.0, False, False)[0]


class SdpaBackend:
    """The reference's attention: ``sdpa`` in float64 over its own paged cache of the
    non-absorbed keys (T, H, qk_head_dim) and values (T, H, v_head_dim), addressed by the same
    block tables as the engine's cache, with the same interface as ``UnifiedBackend``."""

    def __init__(self, spec: CacheSpec, config: DeepseekConfig,
                 dtype: torch.dtype = torch.float64) -> None:
        self.name, self.spec, self.dtype = "torch sdpa reference", spec, dtype
        heads = (spec.num_blocks, spec.block_size, config.num_attention_heads)
        self.keys = [torch.zeros(heads + (config.qk_head_dim,), dtype=dtype)
                     for _ in range(spec.num_layers)]
        self.values = [torch.zeros(heads + (config.v_head_dim,), dtype=dtype)
                       for _ in range(spec.num_layers)]
        self.plan: Optional[torch_unified.UnifiedPlan] = None
        self.seconds = 0.0

    def begin_step(self, num_heads: int, query_start_loc: torch.Tensor,
                   context_lens: torch.Tensor, block_table: torch.Tensor) -> None:
        """The step's slots and causal masks (torch_unified's index arithmetic)."""
        self.plan = torch_unified.UnifiedPlan(query_start_loc, context_lens, block_table,
                                              self.spec.block_size, int(query_start_loc[-1]))

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Stores the fresh K/V, then attends per request over positions 0..p; (T, H, Dv)."""
        plan, keys, values = self.plan, self.keys[layer], self.values[layer]
        keys[plan.write_blocks, plan.write_offsets] = k.to(self.dtype)
        values[plan.write_blocks, plan.write_offsets] = v.to(self.dtype)
        out = torch.zeros(q.shape[:2] + (v.shape[2],), dtype=torch.float32)
        for b in range(len(plan.ctx)):
            lo, hi = plan.qsl[b], plan.qsl[b + 1]
            if lo == hi:
                continue
            rows = (plan.read_blocks[b], plan.read_offsets[b])
            o = sdpa(q[lo:hi].to(self.dtype).transpose(0, 1), keys[rows].transpose(0, 1),
                     values[rows].transpose(0, 1), ~plan.masks[b])
            out[lo:hi] = o.transpose(0, 1).float()
        return out


def round_fp8_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x (float32) rounded to nearest even into fp8 e4m3fn, finite values saturating at 448."""
    magnitude = x.abs().clamp(max=448.0)
    _, exponent = torch.frexp(magnitude)  # magnitude = m * 2^exponent, m in [0.5, 1)
    quantum = torch.pow(2.0, (exponent - 1).clamp(min=-6).float() - 3)  # 3 mantissa bits
    return torch.copysign(torch.round(magnitude / quantum) * quantum, x)


def latent_rounding(spec: CacheSpec, attn_dtype: torch.dtype
                    ) -> Callable[[torch.Tensor], torch.Tensor]:
    """What a latent cache of ``spec`` gives back for rows handed to it in ``attn_dtype``: fp16
    rounding, the int8 group quantization of the library's contract (``torch_unified``), or fp8
    e4m3 with scale 1. Values, as float32."""
    group = spec.quant_group

    def rounded(latent: torch.Tensor) -> torch.Tensor:
        x = latent.to(attn_dtype)
        if spec.dtype == "int8":
            return torch_unified.dequantize_int8(*torch_unified.quantize_int8(x, group), group)
        if spec.dtype == "fp8":
            return round_fp8_e4m3(x.float())
        return x.to(spec.element_dtype()).float()

    return rounded
