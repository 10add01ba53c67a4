"""vLLM-style tensor parallelism through the Python API, checked independently of shardload:
each rank's tensors from `load(..., tp=T, devices=[r])` equal slices of the transformers
model's own state dict, cut here with torch ops from the text of SHARDING.md (layout `tp`):
fused qkv_proj and gate_up_proj, kv heads replicated when T > K, vocabulary padded to a
multiple of 64 with zero rows, o_proj/down_proj column splits, replicated norms."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import shardload
from hf_tiny import save_tiny, torch

# (name, architecture, dtype, tied, overrides). Every case has V = 1000 (Vp = 1024).
CASES = [
    # K = 4: T=2 gives 2 kv heads a rank, T=4 one; untied, so lm_head is padded too.
    ("llama-k4", "LlamaForCausalLM", torch.float32, False,
     {"num_attention_heads": 8, "num_key_value_heads": 4}),
    # K = 2 < T = 4: each kv head copied onto 2 consecutive ranks; tied: no lm_head.
    ("llama-k2-tied", "LlamaForCausalLM", torch.float32, True,
     {"num_attention_heads": 8, "num_key_value_heads": 2}),
    # q/k/v biases cut like their weights; bf16; K = 2 < T = 4.
    ("qwen2-bias-bf16", "Qwen2ForCausalLM", torch.bfloat16, False,
     {"num_attention_heads": 4, "num_key_value_heads": 2}),
    # one kv head (K = 1 < T for both T), explicit head_dim, q_norm/k_norm replicated.
    ("qwen3-k1", "Qwen3ForCausalLM", torch.float32, False,
     {"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32}),
]
TPS = (2, 4)


def expected_rank(sd: dict[str, Any], cfg: Any, T: int, r: int) -> dict[str, Any]:
    """Rank r's parameters in vLLM's tp layout, per SHARDING.md's table, from the full tensors."""
    H, nh, L = cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers
    K = cfg.num_key_value_heads or nh
    D = getattr(cfg, "head_dim", None) or H // nh
    I, V = cfg.intermediate_size, cfg.vocab_size
    Vp = math.ceil(V / 64) * 64
    n = Vp // T
    kl, rep = (K // T, 1) if T <= K else (1, T // K)

    def rows(w: Any, lo: int, hi: int) -> Any:
        return w[lo:hi]

    def vocab(w: Any) -> Any:
        lo, hi = min(r * n, V), min((r + 1) * n, V)
        pad = torch.zeros((n - (hi - lo),) + tuple(w.shape[1:]), dtype=w.dtype)
        return torch.cat([w[lo:hi], pad])

    def qkv(q: Any, k: Any, v: Any) -> Any:
        qs, ks = nh // T * D, kl * D
        b = r // rep
        return torch.cat([rows(q, r * qs, (r + 1) * qs), rows(k, b * ks, (b + 1) * ks),
                          rows(v, b * ks, (b + 1) * ks)])

    def cols(w: Any, size: int) -> Any:
        return w[:, r * size:(r + 1) * size]

    out = {"model.embed_tokens.weight": vocab(sd["model.embed_tokens.weight"])}
    for i in range(L):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        out[a + "qkv_proj.weight"] = qkv(sd[a + "q_proj.weight"], sd[a + "k_proj.weight"],
                                         sd[a + "v_proj.weight"])
        if a + "q_proj.bias" in sd:
            out[a + "qkv_proj.bias"] = qkv(sd[a + "q_proj.bias"], sd[a + "k_proj.bias"],
                                           sd[a + "v_proj.bias"])
        out[a + "o_proj.weight"] = cols(sd[a + "o_proj.weight"], nh * D // T)
        for norm in ("q_norm.weight", "k_norm.weight"):
            if a + norm in sd:
                out[a + norm] = sd[a + norm]
        g = I // T
        out[m + "gate_up_proj.weight"] = torch.cat([rows(sd[m + "gate_proj.weight"], r * g, (r + 1) * g),
                                                    rows(sd[m + "up_proj.weight"], r * g, (r + 1) * g)])
        out[m + "down_proj.weight"] = cols(sd[m + "down_proj.weight"], g)
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + norm] = sd[p + norm]
    out["model.norm.weight"] = sd["model.norm.weight"]
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = vocab(sd["lm_head.weight"])
    return out


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def saved(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, Any]]:
    _, arch, dtype, tied, over = request.param
    ckpt, model = save_tiny(tmp_path_factory.mktemp("tp") / "model", arch, dtype=dtype,
                            tied=tied, seed=11, **over)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return ckpt, model.config, sd


def bits(t: Any) -> Any:
    """The tensor's bits, so that the comparison is bit for bit whatever the values."""
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("T", TPS)
def test_each_rank_is_the_sharding_md_slice(saved: tuple[Path, Any, dict[str, Any]],
                                            T: int) -> None:
    ckpt, cfg, sd = saved
    full = shardload.load(ckpt, tp=T, dtype=cfg.dtype)
    assert full.devices == list(range(T))
    full_read = full.stats["bytes_read"]
    for r in range(T):
        want = expected_rank(sd, cfg, T, r)
        part = shardload.load(ckpt, tp=T, dtype=cfg.dtype, devices=[r])
        assert part.devices == [r] and [d["index"] for d in part.stats["devices"]] == [r]
        assert part.plan.devices[r].tp_rank == r
        for other in set(range(T)) - {r}:
            with pytest.raises(IndexError):
                part.torch(other)
        assert 0 < part.stats["bytes_read"] <= full_read
        got = part.torch(r)
        assert list(got) == [p.name for p in part.plan.devices[r].params]
        assert set(got) == set(want), (sorted(set(got) ^ set(want)))
        for name, w in want.items():
            g = got[name]
            assert (g.dtype, tuple(g.shape)) == (w.dtype, tuple(w.shape)), name
            assert torch.equal(bits(g), bits(w)), f"rank {r}/{T}: {name} differs"
        # the same bytes as rank r of the load of every device
        for name, g in full.torch(r).items():
            assert torch.equal(bits(g), bits(got[name])), name


def test_rank_reads_less_than_the_whole_mesh(saved: tuple[Path, Any, dict[str, Any]]) -> None:
    """A rank reads only its slices: at T=4 each rank reads well under the full load."""
    ckpt, cfg, _ = saved
    full = shardload.load(ckpt, tp=4, dtype=cfg.dtype).stats["bytes_read"]
    for r in range(4):
        part = shardload.load(ckpt, tp=4, dtype=cfg.dtype, devices=[r]).stats["bytes_read"]
        assert part < full, (r, part, full)


def test_padding_rows_are_zero_and_real_rows_end_at_v(saved: tuple[Path, Any, dict[str, Any]]) -> None:
    """The last rank's vocabulary slice ends in exactly Vp - V zero rows (Vp = 1024, V = 1000)."""
    ckpt, cfg, sd = saved
    T = 4
    n = 1024 // T
    last = shardload.load(ckpt, tp=T, dtype=cfg.dtype, devices=[T - 1]).torch(T - 1)
    names = ["model.embed_tokens.weight"] + ([] if cfg.tie_word_embeddings else ["lm_head.weight"])
    for name in names:
        w = last[name]
        assert w.shape[0] == n
        real = cfg.vocab_size - (T - 1) * n
        assert torch.equal(bits(w[:real]), bits(sd[name][(T - 1) * n:]))
        assert not w[real:].any()


def expected_spmd(sd: dict[str, Any], N: int, i: int) -> dict[str, Any]:
    """Device i of an N-device spmd mesh, per SHARDING.md's layout `spmd`: checkpoint names;
    q/k/v/gate/up/embed/lm_head tiled on dim 0, o/down on dim 1, tile c = ceil(dim/N) with zero
    padding up to c; 1-D tensors (norms, biases) replicated."""
    out = {}
    for name, w in sd.items():
        if w.dim() == 1:
            out[name] = w
            continue
        dim = 1 if name.endswith(("o_proj.weight", "down_proj.weight")) else 0
        size = w.shape[dim]
        c = math.ceil(size / N)
        lo, hi = min(i * c, size), min((i + 1) * c, size)
        tile = w.narrow(dim, lo, hi - lo)
        pad_shape = list(w.shape)
        pad_shape[dim] = c - (hi - lo)
        out[name] = torch.cat([tile, torch.zeros(pad_shape, dtype=w.dtype)], dim=dim)
    return out


@pytest.mark.parametrize("N", (2, 3))
def test_spmd_tiles(saved: tuple[Path, Any, dict[str, Any]], N: int) -> None:
    """N = 3 divides none of the dimensions, so every tiled tensor ends in padding somewhere."""
    ckpt, cfg, sd = saved
    sd = {k: v for k, v in sd.items() if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
    for i in range(N):
        got = shardload.load(ckpt, layout="spmd", tp=N, dtype=cfg.dtype, devices=[i]).torch(i)
        want = expected_spmd(sd, N, i)
        assert set(got) == set(want), sorted(set(got) ^ set(want))
        for name, w in want.items():
            g = got[name]
            assert (g.dtype, tuple(g.shape)) == (w.dtype, tuple(w.shape)), name
            assert torch.equal(bits(g), bits(w)), f"spmd device {i}/{N}: {name} differs"
