"""Makes a small random Llama checkpoint directory in the Hugging Face format.

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
from typing import Dict, List

import sentencepiece as spm
import torch

import safetensors_io
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


def random_weights(config: LlamaConfig, seed: int) -> Dict[str, torch.Tensor]:
    """Random weights under Hugging Face names, each projection scaled by 1/sqrt(fan_in)."""
    gen = torch.Generator().manual_seed(seed)

    def linear(out_features: int, in_features: int) -> torch.Tensor:
        w = torch.randn(out_features, in_features, generator=gen)
        return w / in_features ** 0.5

    def norm(size: int) -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(size, generator=gen)

    h, d = config.hidden_size, config.head_dim
    weights = {"model.embed_tokens.weight": torch.randn(config.vocab_size, h, generator=gen),
               "model.norm.weight": norm(h)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        weights.update({
            p + "input_layernorm.weight": norm(h),
            p + "self_attn.q_proj.weight": linear(config.num_attention_heads * d, h),
            p + "self_attn.k_proj.weight": linear(config.num_key_value_heads * d, h),
            p + "self_attn.v_proj.weight": linear(config.num_key_value_heads * d, h),
            p + "self_attn.o_proj.weight": linear(h, config.num_attention_heads * d),
            p + "post_attention_layernorm.weight": norm(h),
            p + "mlp.gate_proj.weight": linear(config.intermediate_size, h),
            p + "mlp.up_proj.weight": linear(config.intermediate_size, h),
            p + "mlp.down_proj.weight": linear(h, config.intermediate_size),
        })
    if not config.tie_word_embeddings:
        weights["lm_head.weight"] = 4.0 * linear(config.vocab_size, h)
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


def make_tiny_checkpoint(directory: str, sizes: TinySizes = TinySizes(), seed: int = 0,
                         num_shards: int = 1) -> LlamaConfig:
    """Writes a random checkpoint (config, weights, tokenizer) into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    tokenizer = train_tokenizer(corpus(seed=seed), sizes.vocab_size)
    with open(os.path.join(directory, "tokenizer.model"), "wb") as f:
        f.write(tokenizer)
    # hard_vocab_limit=False may give fewer pieces than asked: the vocab is the tokenizer's.
    vocab = spm.SentencePieceProcessor(model_proto=tokenizer).get_piece_size()
    config = LlamaConfig(vocab_size=vocab, hidden_size=sizes.hidden_size,
                         intermediate_size=sizes.intermediate_size,
                         num_hidden_layers=sizes.num_hidden_layers,
                         num_attention_heads=sizes.num_attention_heads,
                         num_key_value_heads=sizes.num_key_value_heads,
                         max_position_embeddings=sizes.max_position_embeddings,
                         rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=sizes.tie_word_embeddings)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config.to_dict(), f, indent=1)
    write_weights(directory, random_weights(config, seed), num_shards)
    return config
