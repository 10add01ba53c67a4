"""transformers end to end: tiny random Llama, Mistral, Qwen2 and Qwen3 checkpoints, written by
save_pretrained as several shards with an index, loaded by shardload (layout "spmd", tp=1: the
checkpoint's names and whole tensors) into a fresh transformers model, give bitwise the same
logits as from_pretrained of the same directory; the model's tensors are shardload's memory."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import shardload
from hf_tiny import build_model, config_dtype, save_tiny, torch, transformers

# (architecture, dtype, tie_word_embeddings, config overrides)
CASES = [
    ("LlamaForCausalLM", "float32", True, {}),
    ("MistralForCausalLM", "float32", False, {}),
    ("Qwen2ForCausalLM", "float32", False, {}),           # q/k/v biases
    ("Qwen3ForCausalLM", "float32", True, {"head_dim": 32}),  # head_dim != H/nh, q/k norms
    ("LlamaForCausalLM", "bfloat16", False, {}),
    ("Qwen2ForCausalLM", "bfloat16", True, {}),
]
IDS = [f"{a.removesuffix('ForCausalLM').lower()}-{d}-{'tied' if t else 'untied'}"
       for a, d, t, _ in CASES]
TIED_ALIASES = {"lm_head.weight": "model.embed_tokens.weight"}


class Case:
    """One saved checkpoint, the input ids, and from_pretrained's logits for them."""

    def __init__(self, arch: str, dtype: Any, tied: bool, ckpt: Path, ids: Any) -> None:
        self.arch, self.dtype, self.tied, self.ckpt, self.ids = arch, dtype, tied, ckpt, ids
        self.logits: Any = None

    def fresh(self, seed: int) -> Any:
        """A new model from the directory's own config, random weights (not the saved ones)."""
        cfg = transformers.AutoConfig.from_pretrained(self.ckpt)
        cfg._attn_implementation = "eager"
        cfg.dtype = self.dtype
        return build_model(self.arch, cfg, seed)

    def forward(self, model: Any) -> Any:
        with torch.no_grad():
            return model(self.ids).logits


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    arch, dname, tied, over = request.param
    dtype = getattr(torch, dname)
    ckpt, _ = save_tiny(tmp_path_factory.mktemp("hf") / "model", arch, dtype=dtype, tied=tied,
                        seed=7, **over)
    ref = transformers.AutoModelForCausalLM.from_pretrained(ckpt, attn_implementation="eager")
    assert ref.dtype == dtype and type(ref).__name__ == arch
    ids = torch.randint(0, 1000, (2, 11), generator=torch.Generator().manual_seed(3))
    c = Case(arch, dtype, tied, ckpt, ids)
    c.logits = c.forward(ref.eval())
    return c


def test_checkpoint_is_sharded_with_index(case: Case) -> None:
    index = json.loads((case.ckpt / "model.safetensors.index.json").read_text())
    with shardload.open(case.ckpt) as ck:
        assert sorted(Path(f).name for f in ck.files) == sorted(set(index["weight_map"].values()))
        assert {t.name for t in ck.tensors} == set(index["weight_map"])
        assert ("lm_head.weight" in index["weight_map"]) == (not case.tied)


def test_load_state_dict_bitwise_and_zero_copy(case: Case) -> None:
    with shardload.open(case.ckpt) as ck:
        ck_shapes = {t.name: t.shape for t in ck.tensors}
    model = shardload.load(case.ckpt, layout="spmd", tp=1, dtype=case.dtype)
    assert model.devices == [0]
    views = model.torch(0)
    # spmd at tp=1: exactly the checkpoint's names and whole tensors, in the model's dtype.
    assert {n: tuple(v.shape) for n, v in views.items()} == ck_shapes
    assert all(v.dtype == case.dtype for v in views.values())

    fresh = case.fresh(seed=1234)
    assert not torch.equal(case.forward(fresh), case.logits)  # it really starts elsewhere
    # A tied checkpoint has no lm_head.weight and shardload plans none (SHARDING.md: tied
    # embeddings); transformers' state dict still lists it, as an alias of the embedding.
    # That alias is the only key the engine adds, and it adds the same view.
    missing = set(fresh.state_dict()) - set(views)
    assert missing == (set(TIED_ALIASES) if case.tied else set())
    assert set(views) <= set(fresh.state_dict())
    state = dict(views)
    for alias in missing:
        state[alias] = views[TIED_ALIASES[alias]]
    result = fresh.load_state_dict(state, strict=True, assign=True)
    assert not result.missing_keys and not result.unexpected_keys

    for name, t in fresh.state_dict().items():  # zero-copy: the model holds shardload's memory
        assert t.data_ptr() == state[name].data_ptr(), name
    if case.tied:
        assert fresh.lm_head.weight.data_ptr() == fresh.model.embed_tokens.weight.data_ptr()
    model.close()  # the views, now the model's parameters, keep the weights alive
    assert torch.equal(case.forward(fresh), case.logits)


def test_load_into_own_parameters_bitwise(case: Case) -> None:
    fresh = case.fresh(seed=4321)
    plan = shardload.plan(case.ckpt, layout="spmd", tp=1, dtype=case.dtype)
    sd = fresh.state_dict()
    names = [p.name for p in plan.devices[0].params]
    # The engine's own parameters: named_parameters() lists a tied lm_head once, as the
    # embedding, which is exactly the plan (the state dict also has the alias).
    assert set(sd) - set(names) == (set(TIED_ALIASES) if case.tied else set())
    targets = dict(fresh.named_parameters())
    assert set(targets) == set(names)
    ptrs = {n: t.data_ptr() for n, t in sd.items()}

    stats = shardload.load_into(case.ckpt, targets, layout="spmd", tp=1, dtype=case.dtype)
    assert stats["bytes_read"] >= sum(p.nbytes for p in plan.devices[0].params)
    assert {n: t.data_ptr() for n, t in fresh.state_dict().items()} == ptrs  # filled in place
    if case.tied:
        assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    assert torch.equal(case.forward(fresh), case.logits)


def test_load_into_whole_state_dict(case: Case) -> None:
    """The whole state dict is accepted when it is the plan (untied); a tied model's names the
    alias lm_head.weight, which the plan has not: refused, naming it, before any byte is read."""
    fresh = case.fresh(seed=99)
    sd = fresh.state_dict()
    before = {n: t.clone() for n, t in sd.items()}
    if case.tied:
        with pytest.raises(ValueError, match="'lm_head.weight' is not a parameter of rank 0"):
            shardload.load_into(case.ckpt, sd, layout="spmd", tp=1, dtype=case.dtype)
        assert all(torch.equal(t, before[n]) for n, t in fresh.state_dict().items())
    else:
        shardload.load_into(case.ckpt, sd, layout="spmd", tp=1, dtype=case.dtype)
        assert torch.equal(case.forward(fresh), case.logits)


def test_plan_takes_dtype_from_transformers5_config(tmp_path: Path) -> None:
    ckpt, _ = save_tiny(tmp_path / "m", "LlamaForCausalLM", dtype=torch.bfloat16)
    cfg = json.loads((ckpt / "config.json").read_text())
    assert "torch_dtype" not in cfg and cfg["dtype"] == "bfloat16"  # what transformers 5 writes
    assert config_dtype(ckpt) == torch.bfloat16
    assert shardload.plan(ckpt, layout="spmd").dtype == "BF16"


def test_qwen3_head_dim_default(tmp_path: Path) -> None:
    """A Qwen3 config.json without head_dim: transformers' Qwen3Config makes it 128 (a field
    default), not hidden_size / num_attention_heads (16 here), and vLLM's qwen3.py reads that
    (getattr(config, "head_dim", None) or ...), so shardload plans 128 too; the checkpoint's
    tensors, written by transformers at 128, are its shapes. Qwen3-MoE's config class has no
    such default."""
    ckpt, _ = save_tiny(tmp_path / "q3", "Qwen3ForCausalLM", seed=5)   # BASE: H 64, 4 heads
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg.pop("head_dim") == 128
    (ckpt / "config.json").write_text(json.dumps(cfg))
    assert transformers.AutoConfig.from_pretrained(ckpt).head_dim == 128   # what vLLM sees
    p = shardload.plan(ckpt, tp=2)   # with the checkpoint: every tensor's shape checked
    shapes = {q.name: q.shape for q in p.devices[1].params}
    assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == ((2 + 2 * 1) * 128, 64)
    assert shapes["model.layers.0.self_attn.q_norm.weight"] == (128,)
    moe = dict(cfg, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=4,
               moe_intermediate_size=32)
    assert not hasattr(transformers.Qwen3MoeConfig(**{k: v for k, v in moe.items()
                                                      if k not in ("architectures", "model_type")}),
                       "head_dim")
    q = shardload.plan(config=moe, tp=2)
    assert {x.name: x.shape for x in q.devices[0].params}[
        "model.layers.0.self_attn.q_norm.weight"] == (16,)
