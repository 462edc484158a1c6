"""Makes a small random Llama or DeepSeek (MLA) checkpoint directory in the Hugging Face format.

The directory holds ``config.json``, bf16 weights in ``.safetensors`` (one file, or shards with
``model.safetensors.index.json``) and a SentencePiece ``tokenizer.model`` trained on a few hundred
generated lines. Weights are random with a fixed seed, scaled so that every projection keeps unit
variance and the untied lm_head gives a spread of logits (greedy output varies, not one token).
"""

from __future__ import annotations

import io
import json
import os
import random
from dataclasses import dataclass
from typing import Dict, List, Optional

import sentencepiece as spm
import torch

import safetensors_io
from deepseek import DeepseekConfig
from llama import LlamaConfig

_SUBJECTS = ["the server", "a request", "the scheduler", "every block", "the cache", "a token",
             "the model", "each layer", "the kernel", "a prompt", "the batch", "our engine"]
_VERBS = ["reads", "writes", "shares", "frees", "plans", "merges", "schedules", "quantizes",
          "computes", "returns", "streams", "checks"]
_OBJECTS = ["the keys", "the values", "a prefix", "sixteen slots", "the logits", "a new chunk",
            "the block table", "its context", "the softmax state", "every head", "the queue",
            "a decode step"]
_TAILS = ["quickly", "in order", "once per step", "without copies", "for all readers",
          "before the next step", "on two cores", "as planned", "exactly", "again"]


@dataclass
class TinySizes:
    """Model sizes of the random checkpoint (defaults: ~4 M parameters, fast on 2 cores)."""

    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    tie_word_embeddings: bool = False


@dataclass
class TinyMlaSizes:
    """Sizes of the random DeepSeek-style (MLA) checkpoint: latent rows of 64 + 16."""

    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    q_lora_rank: Optional[int] = 96  # None: a plain q_proj
    kv_lora_rank: int = 64
    qk_rope_head_dim: int = 16
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    max_position_embeddings: int = 1024


def corpus(num_lines: int = 400, seed: int = 0) -> List[str]:
    """Generated English-like lines for the tokenizer (deterministic for a seed)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_lines):
        words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS),
                 rng.choice(_TAILS)]
        lines.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", "."]))
    return lines


def train_tokenizer(lines: List[str], vocab_size: int) -> bytes:
    """Trains a BPE SentencePiece model (Llama's ids: unk 0, bos 1, eos 2) and returns its bytes."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", unk_id=0, bos_id=1, eos_id=2, pad_id=-1, hard_vocab_limit=False,
        character_coverage=1.0, num_threads=1, minloglevel=2)
    return model.getvalue()


class RandomInit:
    """Seeded random tensors: projections scaled by 1/sqrt(fan_in), norm weights around 1."""

    def __init__(self, seed: int) -> None:
        self.gen = torch.Generator().manual_seed(seed)

    def linear(self, out_features: int, in_features: int) -> torch.Tensor:
        """A projection that keeps unit variance."""
        w = torch.randn(out_features, in_features, generator=self.gen)
        return w / in_features ** 0.5

    def norm(self, size: int) -> torch.Tensor:
        """An RMSNorm weight."""
        return 1.0 + 0.1 * torch.randn(size, generator=self.gen)

    def embedding(self, vocab_size: int, hidden_size: int) -> Dict[str, torch.Tensor]:
        """The token embedding and the final norm."""
        return {"model.embed_tokens.weight": torch.randn(vocab_size, hidden_size,
                                                         generator=self.gen),
                "model.norm.weight": self.norm(hidden_size)}

    def mlp(self, prefix: str, hidden_size: int, intermediate_size: int
            ) -> Dict[str, torch.Tensor]:
        """A layer's post-attention norm and SwiGLU MLP."""
        h, f = hidden_size, intermediate_size
        return {prefix + "post_attention_layernorm.weight": self.norm(h),
                prefix + "mlp.gate_proj.weight": self.linear(f, h),
                prefix + "mlp.up_proj.weight": self.linear(f, h),
                prefix + "mlp.down_proj.weight": self.linear(h, f)}

    def lm_head(self, vocab_size: int, hidden_size: int) -> Dict[str, torch.Tensor]:
        """An untied lm_head, 4x wider spread than a projection: varied greedy output."""
        return {"lm_head.weight": 4.0 * self.linear(vocab_size, hidden_size)}


def random_weights(config: LlamaConfig, seed: int) -> Dict[str, torch.Tensor]:
    """Random weights under Hugging Face names, each projection scaled by 1/sqrt(fan_in)."""
    init = RandomInit(seed)
    h, d = config.hidden_size, config.head_dim
    weights = init.embedding(config.vocab_size, h)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        weights.update({
            p + "input_layernorm.weight": init.norm(h),
            p + "self_attn.q_proj.weight": init.linear(config.num_attention_heads * d, h),
            p + "self_attn.k_proj.weight": init.linear(config.num_key_value_heads * d, h),
            p + "self_attn.v_proj.weight": init.linear(config.num_key_value_heads * d, h),
            p + "self_attn.o_proj.weight": init.linear(h, config.num_attention_heads * d),
        })
        weights.update(init.mlp(p, h, config.intermediate_size))
    if not config.tie_word_embeddings:
        weights.update(init.lm_head(config.vocab_size, h))
    return {name: w.to(torch.bfloat16) for name, w in weights.items()}


def random_mla_weights(config: DeepseekConfig, seed: int) -> Dict[str, torch.Tensor]:
    """Random DeepSeek-V3-named weights (MLA attention, dense MLP), scaled like Llama's."""
    init = RandomInit(seed)
    h, heads = config.hidden_size, config.num_attention_heads
    weights = init.embedding(config.vocab_size, h)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}.self_attn."
        weights[f"model.layers.{i}.input_layernorm.weight"] = init.norm(h)
        if config.q_lora_rank is None:
            weights[p + "q_proj.weight"] = init.linear(heads * config.qk_head_dim, h)
        else:
            weights.update({
                p + "q_a_proj.weight": init.linear(config.q_lora_rank, h),
                p + "q_a_layernorm.weight": init.norm(config.q_lora_rank),
                p + "q_b_proj.weight": init.linear(heads * config.qk_head_dim,
                                                   config.q_lora_rank)})
        weights.update({
            p + "kv_a_proj_with_mqa.weight": init.linear(config.latent_dim, h),
            p + "kv_a_layernorm.weight": init.norm(config.kv_lora_rank),
            p + "kv_b_proj.weight": init.linear(
                heads * (config.qk_nope_head_dim + config.v_head_dim), config.kv_lora_rank),
            p + "o_proj.weight": init.linear(h, heads * config.v_head_dim)})
        weights.update(init.mlp(f"model.layers.{i}.", h, config.intermediate_size))
    if not config.tie_word_embeddings:
        weights.update(init.lm_head(config.vocab_size, h))
    return {name: w.to(torch.bfloat16) for name, w in weights.items()}


def write_weights(directory: str, weights: Dict[str, torch.Tensor], num_shards: int) -> None:
    """Writes ``model.safetensors``, or ``num_shards`` shards plus their index."""
    meta = {"format": "pt"}
    if num_shards <= 1:
        safetensors_io.save_file(weights, os.path.join(directory, "model.safetensors"), meta)
        return
    names = sorted(weights)
    weight_map: Dict[str, str] = {}
    for s in range(num_shards):
        shard = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
        part = {n: weights[n] for n in names[s::num_shards]}
        safetensors_io.save_file(part, os.path.join(directory, shard), meta)
        weight_map.update({n: shard for n in part})
    total = sum(w.numel() * w.element_size() for w in weights.values())
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)


def write_tokenizer(directory: str, vocab_size: int, seed: int) -> int:
    """Creates ``directory`` with a trained ``tokenizer.model``; returns its vocabulary size
    (hard_vocab_limit=False may give fewer pieces than asked: the vocab is the tokenizer's)."""
    os.makedirs(directory, exist_ok=True)
    tokenizer = train_tokenizer(corpus(seed=seed), vocab_size)
    with open(os.path.join(directory, "tokenizer.model"), "wb") as f:
        f.write(tokenizer)
    return spm.SentencePieceProcessor(model_proto=tokenizer).get_piece_size()


def write_config(directory: str, config: Dict[str, object]) -> None:
    """Writes ``config.json``."""
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def make_tiny_checkpoint(directory: str, sizes: TinySizes = TinySizes(), seed: int = 0,
                         num_shards: int = 1) -> LlamaConfig:
    """Writes a random checkpoint (config, weights, tokenizer) into ``directory``."""
    vocab = write_tokenizer(directory, sizes.vocab_size, seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=sizes.hidden_size,
                         intermediate_size=sizes.intermediate_size,
                         num_hidden_layers=sizes.num_hidden_layers,
                         num_attention_heads=sizes.num_attention_heads,
                         num_key_value_heads=sizes.num_key_value_heads,
                         max_position_embeddings=sizes.max_position_embeddings,
                         rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=sizes.tie_word_embeddings)
    write_config(directory, config.to_dict())
    write_weights(directory, random_weights(config, seed), num_shards)
    return config


def make_tiny_mla_checkpoint(directory: str, sizes: TinyMlaSizes = TinyMlaSizes(),
                             seed: int = 0, num_shards: int = 1) -> DeepseekConfig:
    """Writes a random DeepSeek-V3-format checkpoint (MLA, dense MLP) into ``directory``."""
    vocab = write_tokenizer(directory, sizes.vocab_size, seed)
    config = DeepseekConfig(**{**sizes.__dict__, "vocab_size": vocab}, rms_norm_eps=1e-5,
                            rope_theta=10000.0)
    write_config(directory, config.to_dict())
    write_weights(directory, random_mla_weights(config, seed), num_shards)
    return config
