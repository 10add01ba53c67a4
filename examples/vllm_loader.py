#!/usr/bin/env python3
"""How a vLLM model loader fills its rank's parameters with shardload.load_into.

    python examples/vllm_loader.py CKPT_DIR --tp 2 --rank 1 [--dtype bfloat16]

vLLM builds each rank's model with its parameters already at their per-rank shapes, allocated
on the device with torch.empty (RMSNorm weights with torch.ones), then streams whole checkpoint
tensors through each parameter's weight_loader, which narrows and copies them (vllm-notes.md,
section 1.2). shardload replaces that last step: `load_into` writes each parameter of the rank
in place, reading only the rank's bytes, with no second copy of the weights.

vLLM is not installable here, so this script carries a small stand-in for vLLM's Llama / Mistral /
Qwen2 / Qwen3 modules: the same module tree and parameter names (qkv_proj, gate_up_proj, a lm_head
that *is* embed_tokens when the embeddings are tied), the same per-rank shapes computed the way
vLLM's layers compute them (divide(), kv-head replication when tp > num_key_value_heads, vocab
padded to a multiple of 64). The engine's names and shapes are not taken from shardload: the
script checks that they agree with shardload.plan(...).devices[rank].params, fills them with
load_into, and checks the result against shardload.load(..., devices=[rank]).

In vLLM itself the same call sits in a model loader (a sketch; vllm.distributed gives the rank):

    class ShardloadModelLoader(BaseModelLoader):
        def load_weights(self, model, model_config):
            rank = get_tensor_model_parallel_rank()
            tp = get_tensor_model_parallel_world_size()
            params = dict(model.named_parameters())      # tied weights appear once
            shardload.load_into(model_config.model, params, tp=tp, rank=rank,
                                dtype=model_config.dtype,
                                config=model_config.hf_config)   # with vLLM's hf_overrides
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import shardload

SUPPORTED = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


# ---- the engine: a stand-in for vLLM's parallel layers, at one rank's shapes -------------------

def divide(a: int, b: int) -> int:
    """vllm.distributed.utils.divide."""
    if a % b:
        raise ValueError(f"{a} is not divisible by {b}")
    return a // b


def empty(*shape: int) -> nn.Parameter:
    """The engine's allocator: uninitialized memory in the default dtype, as vLLM allocates."""
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, tp: int) -> None:
        super().__init__()
        padded = math.ceil(vocab / 64) * 64          # pad_vocab_size(vocab, 64)
        self.weight = empty(divide(padded, tp), hidden)


class ParallelLMHead(VocabParallelEmbedding):
    pass


class QKVParallelLinear(nn.Module):
    def __init__(self, hidden: int, head_dim: int, heads: int, kv_heads: int, bias: bool,
                 tp: int) -> None:
        super().__init__()
        q = divide(heads, tp)
        if tp >= kv_heads:            # each kv head replicated on tp / kv_heads ranks
            kv, _replicas = 1, divide(tp, kv_heads)
        else:
            kv = divide(kv_heads, tp)
        out = (q + 2 * kv) * head_dim
        self.weight = empty(out, hidden)
        if bias:
            self.bias = empty(out)


class MergedColumnParallelLinear(nn.Module):
    def __init__(self, hidden: int, sizes: list[int], tp: int) -> None:
        super().__init__()
        self.weight = empty(sum(divide(s, tp) for s in sizes), hidden)


class RowParallelLinear(nn.Module):
    def __init__(self, inp: int, out: int, tp: int) -> None:
        super().__init__()
        self.weight = empty(out, divide(inp, tp))


class RMSNorm(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size), requires_grad=False)


class Attention(nn.Module):
    def __init__(self, c: dict[str, Any], arch: str, tp: int) -> None:
        super().__init__()
        H, nh = c["hidden_size"], c["num_attention_heads"]
        K = c.get("num_key_value_heads") or nh
        # vLLM reads getattr(config, "head_dim", None) of a transformers config, whose Qwen3Config
        # sets 128 when config.json has no head_dim (a null one stays None in transformers 4.x)
        D = c.get("head_dim", 128 if c.get("model_type") == "qwen3" else None) or H // nh
        bias = arch == "Qwen2ForCausalLM" or bool(c.get("attention_bias", False))
        self.qkv_proj = QKVParallelLinear(H, D, nh, K, bias, tp)
        self.o_proj = RowParallelLinear(nh * D, H, tp)
        if arch == "Qwen3ForCausalLM":
            self.q_norm = RMSNorm(D)
            self.k_norm = RMSNorm(D)


class MLP(nn.Module):
    def __init__(self, c: dict[str, Any], tp: int) -> None:
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_up_proj = MergedColumnParallelLinear(H, [I, I], tp)
        self.down_proj = RowParallelLinear(I, H, tp)


class DecoderLayer(nn.Module):
    def __init__(self, c: dict[str, Any], arch: str, tp: int) -> None:
        super().__init__()
        self.self_attn = Attention(c, arch, tp)
        self.mlp = MLP(c, tp)
        self.input_layernorm = RMSNorm(c["hidden_size"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"])


class DecoderModel(nn.Module):
    def __init__(self, c: dict[str, Any], arch: str, tp: int) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(c["vocab_size"], c["hidden_size"], tp)
        self.layers = nn.ModuleList(DecoderLayer(c, arch, tp)
                                    for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"])


class ForCausalLM(nn.Module):
    """vLLM's LlamaForCausalLM (and Mistral, Qwen2, Qwen3) parameter tree at one TP rank."""

    def __init__(self, c: dict[str, Any], arch: str, tp: int) -> None:
        super().__init__()
        self.model = DecoderModel(c, arch, tp)
        if c.get("tie_word_embeddings", False):
            self.lm_head = self.model.embed_tokens   # named_parameters() lists it once
        else:
            self.lm_head = ParallelLMHead(c["vocab_size"], c["hidden_size"], tp)


def engine_dtype(c: dict[str, Any], override: str | None) -> torch.dtype:
    """vLLM's dtype "auto": the config's (transformers 5 writes "dtype", 4.x "torch_dtype")."""
    name = override or c.get("torch_dtype") or c.get("dtype") or "float32"
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise SystemExit(f"vllm_loader: unknown dtype {name!r}")
    return dt


def build_engine_model(c: dict[str, Any], tp: int, dtype: torch.dtype) -> ForCausalLM:
    arch = (c.get("architectures") or ["?"])[0]
    if arch not in SUPPORTED:
        raise SystemExit(f"vllm_loader: architecture {arch} is not one of {', '.join(SUPPORTED)}")
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)                 # vLLM: set_default_torch_dtype(model dtype)
    try:
        with torch.device("cpu"):                  # vLLM: with target_device (cuda:rank)
            return ForCausalLM(c, arch, tp)
    finally:
        torch.set_default_dtype(old)


# ---- the loader ---------------------------------------------------------------------------------

def check_against_plan(params: dict[str, torch.Tensor], plan: shardload.Plan, rank: int) -> None:
    """The engine's tree and shardload's plan for this rank must name the same tensors."""
    want = {p.name: p.shape for p in plan.devices[rank].params}
    have = {n: tuple(t.shape) for n, t in params.items()}
    if have != want:
        diff = sorted(set(have) ^ set(want)) or sorted(n for n in have if have[n] != want[n])
        raise SystemExit(f"vllm_loader: engine and plan disagree on rank {rank}: {diff[:5]}")


def load_rank(ckpt: Path, model: nn.Module, tp: int, rank: int,
              dtype: torch.dtype) -> dict[str, Any]:
    """What a vLLM loader's load_weights does with shardload: one call, in place."""
    params = {n: p.data for n, p in model.named_parameters()}
    plan = shardload.plan(ckpt, tp=tp, dtype=dtype)
    check_against_plan(params, plan, rank)
    return shardload.load_into(ckpt, params, tp=tp, rank=rank, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt", type=Path, help="a Hugging Face checkpoint directory")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    ap.add_argument("--rank", type=int, default=0, help="this process's TP rank")
    ap.add_argument("--dtype", default=None, help="model dtype (default: the config's)")
    a = ap.parse_args(argv)
    if a.tp < 1 or not 0 <= a.rank < a.tp:
        ap.error(f"--rank {a.rank} is not in [0, {a.tp})")

    cfg = json.loads((a.ckpt / "config.json").read_text())
    dtype = engine_dtype(cfg, a.dtype)
    model = build_engine_model(cfg, a.tp, dtype)
    params = dict(model.named_parameters())
    nbytes = sum(p.numel() * p.element_size() for p in params.values())
    print(f"engine: {cfg['architectures'][0]} tp {a.tp} rank {a.rank} {str(dtype)[6:]}: "
          f"{len(params)} parameters, {nbytes} bytes allocated")
    # torch.empty gives whatever the memory held (often zeros); NaN everywhere makes any byte
    # that load_into did not write, padding rows included, show up in the check below.
    for p in params.values():
        p.data.fill_(float("nan"))
    ptrs = {n: p.data_ptr() for n, p in params.items()}

    t0 = time.perf_counter()
    stats = load_rank(a.ckpt, model, a.tp, a.rank, dtype)
    dt = time.perf_counter() - t0
    print(f"load_into: {len(params)} parameters filled in place, {stats['bytes_read']} bytes "
          f"read in {dt:.3f} s")

    # The check: same memory as before, and the bytes shardload.load gives this rank.
    moved = [n for n, p in model.named_parameters() if p.data_ptr() != ptrs[n]]
    ref = shardload.load(a.ckpt, tp=a.tp, dtype=dtype, devices=[a.rank]).torch(a.rank)
    bad = [n for n, p in model.named_parameters()
           if n not in ref or not torch.equal(p.data.view(torch.uint8), ref[n].view(torch.uint8))]
    if moved or bad or set(ref) != set(params):
        print(f"FAIL: moved {moved[:5]}, differ {bad[:5]}, "
              f"names {sorted(set(ref) ^ set(params))[:5]}", file=sys.stderr)
        return 1
    print(f"check: all {len(params)} parameters equal shardload.load(devices=[{a.rank}]) "
          "bit for bit")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
