#!/usr/bin/python3
"""Independent oracle for shard contents.

Writes small multi-file checkpoints itself (its own safetensors writer, tensors shuffled across
files, with an index), computes every device's parameters with numpy slicing straight from
SHARDING.md, and compares them by XXH3-64 with `shardload load --checksums --json` for the four
architectures, T in {1,2,4,8}, P in {1,2,3}, both layouts, and bf16<->f32 conversion. The
mixture-of-experts families (Mixtral, Qwen2-MoE, Qwen3-MoE) follow SHARDING-MOE-FP8.md: T in
{1,2,4}, P in {1,2}, with and without expert parallelism (E % T != 0 included), layout spmd, and
the files `shardload reshard` writes, read back with this file's own reader. Block-FP8 checkpoints
(DeepSeek with F32 scales, Qwen3-MoE with BF16 ones): FP8 bytes bit for bit, scales sliced in
blocks and widened, through load and reshard. Per-tensor and per-channel FP8 (AutoFP8 0-d
scales with static input scales on Llama, compressed-tensors [1] scales on Mixtral with E % 4 != 0,
fbgemm [out, 1] on Qwen2 and DeepSeek-V3's MLA, AutoFP8 static on DeepSeek-V2 (q_lora_rank null),
compressed-tensors channels on Qwen3-MoE, compressed-tensors blocks on DeepSeek): T 1/2/4, P 1/2, with and without EP, load and reshard.
Explicit pipeline splits (vLLM's VLLM_PP_LAYER_PARTITION; PARTITIONS): the stage ranges computed
here from the partition text, through --pp-partition (load and reshard) and the variable. Nothing here
uses shardload's code: the reference is numpy and the text of the spec.

usage: oracle_shards.py path/to/shardload
"""
import ctypes
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy missing (Debian: python3-numpy for /usr/bin/python3): skipped")
    sys.exit(77)

try:
    _xxh = ctypes.CDLL("libxxhash.so.0")
    _xxh.XXH3_64bits.restype = ctypes.c_uint64
    _xxh.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
except OSError:
    print("libxxhash.so.0 missing: skipped")
    sys.exit(77)


def xxh3(arr):
    b = np.ascontiguousarray(arr).tobytes()
    return "%016x" % _xxh.XXH3_64bits(b, len(b))


# ---- numbers -----------------------------------------------------------------------------------

def f32_to_bf16(x):
    """Round-to-nearest-even f32 -> bf16 bits (uint16), on the bit pattern."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


NP_OF = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8,
         "F64": np.float64}


def convert(arr, src, dst):
    """Elements of dtype src (bf16 as uint16 bits) to dtype dst, rounding to nearest even. FP8
    weights (uint8 bits) and their F32 scales keep their dtype under any target."""
    if src == dst or arr.dtype == np.uint8 or arr.dtype == np.float32 and src != "F32":
        return arr
    f = bf16_to_f32(arr) if src == "BF16" else arr.astype(np.float32)
    if dst == "BF16":
        return f32_to_bf16(f)
    return f.astype(NP_OF[dst])


# ---- a checkpoint writer of our own --------------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, array). Unaligned header on purpose (readers must cope)."""
    header, blobs, off = {}, [], 0
    for name, dt, arr in tensors:
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(outdir, tensors, nfiles, rng):
    """Shuffles tensors over nfiles shards and writes model.safetensors.index.json."""
    order = list(tensors.items())
    rng.shuffle(order)
    files = [[] for _ in range(nfiles)]
    for k, (name, (dt, arr)) in enumerate(order):
        files[k % nfiles].append((name, dt, arr))
    wmap = {}
    for i, items in enumerate(files):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, nfiles)
        write_safetensors(os.path.join(outdir, fname), items)
        for name, _, _ in items:
            wmap[name] = fname
    total = sum(a.nbytes for _, a in tensors.values())
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f)


# ---- models ------------------------------------------------------------------------------------

ARCHS = {
    # Small shapes that keep every feature: T > K replication, V not a multiple of 64,
    # an explicit head_dim (Qwen3), q/k/v biases (Qwen2), tied embeddings (Qwen).
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
                  intermediate_size=96, num_attention_heads=8, num_key_value_heads=2,
                  num_hidden_layers=7, vocab_size=300, tie_word_embeddings=False),
    "mistral": dict(architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=32,
                    intermediate_size=64, num_attention_heads=8, num_key_value_heads=4,
                    num_hidden_layers=5, vocab_size=200, tie_word_embeddings=False),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=48,
                  intermediate_size=80, num_attention_heads=8, num_key_value_heads=2,
                  num_hidden_layers=5, vocab_size=130, tie_word_embeddings=True),
    # Tensors of 2 MiB and more: whole tensors at T=1 (and the vocab blocks) are read straight
    # into the device buffers, the rest through staging.
    "llama-big": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=1024,
                      intermediate_size=1536, num_attention_heads=8, num_key_value_heads=4,
                      num_hidden_layers=2, vocab_size=2000, tie_word_embeddings=False),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=32,
                  intermediate_size=64, num_attention_heads=8, num_key_value_heads=4,
                  num_hidden_layers=5, vocab_size=100, tie_word_embeddings=True, head_dim=12),
}


# Mixture-of-experts configs (SHARDING-MOE-FP8.md). E % T != 0 for some T (uneven EP ranges);
# Qwen2-MoE mixes dense and MoE layers (decoder_sparse_step 2, mlp_only_layers) and has a shared
# expert; Qwen3-MoE has none (shared_expert_intermediate_size 0), q/k norms and a head_dim.
MOE_ARCHS = {
    "mixtral": dict(architectures=["MixtralForCausalLM"], model_type="mixtral", hidden_size=32,
                    intermediate_size=64, num_attention_heads=8, num_key_value_heads=2,
                    num_hidden_layers=3, vocab_size=100, tie_word_embeddings=False,
                    num_local_experts=6, num_experts_per_tok=2),
    "qwen2_moe": dict(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", hidden_size=48,
                      intermediate_size=80, num_attention_heads=8, num_key_value_heads=4,
                      num_hidden_layers=4, vocab_size=130, tie_word_embeddings=True, num_experts=5,
                      moe_intermediate_size=32, shared_expert_intermediate_size=48,
                      decoder_sparse_step=2, mlp_only_layers=[3], num_experts_per_tok=2),
    "qwen3_moe": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=32,
                      intermediate_size=64, num_attention_heads=8, num_key_value_heads=4,
                      num_hidden_layers=3, vocab_size=100, tie_word_embeddings=False, head_dim=12,
                      num_experts=4, moe_intermediate_size=16, shared_expert_intermediate_size=0,
                      decoder_sparse_step=1, mlp_only_layers=[], num_experts_per_tok=2),
    # DeepSeek MLA: q_lora_rank set (fused_qkv_a_proj) with 1 dense layer, 2 shared experts; and
    # q_lora_rank null (q_proj) with MoE every other layer. Both ship an MTP layer L to be skipped;
    # The first with topk_method "noaux_tc": the router's e_score_correction_bias, F32 in the
    # checkpoint and kept F32 under any --dtype (the spec); the second "greedy": no bias.
    "deepseek_v3": dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", hidden_size=64,
                        intermediate_size=96, num_attention_heads=4, num_hidden_layers=3,
                        vocab_size=100, tie_word_embeddings=False, q_lora_rank=32, kv_lora_rank=16,
                        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=6,
                        moe_intermediate_size=16, n_shared_experts=2, first_k_dense_replace=1,
                        moe_layer_freq=1, topk_method="noaux_tc", num_nextn_predict_layers=1),
    "deepseek_v2": dict(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", hidden_size=64,
                        intermediate_size=96, num_attention_heads=4, num_hidden_layers=3,
                        vocab_size=100, tie_word_embeddings=False, q_lora_rank=None, kv_lora_rank=16,
                        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=4,
                        moe_intermediate_size=16, n_shared_experts=None, first_k_dense_replace=0,
                        moe_layer_freq=2, topk_method="greedy"),
}
# tie_word_embeddings, which vLLM's DeepSeek ignores: lm_head its own, embed on stage 0 only
MOE_ARCHS["deepseek_v3_tied"] = dict(MOE_ARCHS["deepseek_v3"], tie_word_embeddings=True)


# Block-FP8 checkpoints (SHARDING-MOE-FP8.md "FP8 checkpoints"): dims multiples of 128 where the
# blocks need it. DeepSeek with F32 scales and E = 3 (uneven EP at T = 2); Qwen3-MoE with BF16
# scales (widened exactly to F32) and mlp.gate listed in modules_to_not_convert.
FP8_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}
FP8_ARCHS = {
    "deepseek_v3": dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", hidden_size=256,
                        intermediate_size=512, num_attention_heads=4, num_hidden_layers=3,
                        vocab_size=256, tie_word_embeddings=False, q_lora_rank=256, kv_lora_rank=128,
                        qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64, n_routed_experts=3,
                        moe_intermediate_size=256, n_shared_experts=1, first_k_dense_replace=1,
                        moe_layer_freq=1, topk_method="greedy", num_nextn_predict_layers=1,
                        quantization_config=FP8_QUANT),
    "qwen3_moe": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=256,
                      intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=2, vocab_size=300, tie_word_embeddings=False, head_dim=128,
                      num_experts=4, moe_intermediate_size=256, decoder_sparse_step=1,
                      mlp_only_layers=[], quantization_config=dict(
                          FP8_QUANT, modules_to_not_convert=["model.layers.0.mlp.gate",
                                                             "model.layers.1.mlp.gate"])),
}
FP8_SCALE_DT = {"deepseek_v3": "F32", "qwen3_moe": "BF16"}

# A merged layer whose slots straddle blocks, which vLLM's Fp8Config loads since 969bbc7c6
# (linear.py _maybe_allow_fp8_block_shape_mismatch): gate and up of 480 rows, 240 a rank at T = 2
# (blocks [128, 16], so that down_proj's 240 columns a rank are whole blocks). vLLM reads rank r's
# cdiv(240, 128) = 2 scale rows of each from row 2r (Scales.rows), not from row 240r / 128.
FP8_STRADDLE = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=256,
                    intermediate_size=480, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                    num_hidden_layers=2, vocab_size=300, tie_word_embeddings=False,
                    quantization_config=dict(FP8_QUANT, weight_block_size=[128, 16]))

# Per-tensor and per-channel FP8 (the spec's table; no block constraints, so any T): a dense
# family and an MoE family for each, every quantization_config form the spec names, and a
# compressed-tensors block checkpoint (scales named weight_scale, not _inv). Keys: (name, arch).
CT_GROUP = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}
CT_STATIC = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}
FP8_MORE = {
    # AutoFP8: 0-d F32 scales, static activations (input scales)
    ("llama-pt", "llama"): dict(ARCHS["llama"], quantization_config={
        "quant_method": "fp8", "activation_scheme": "static"}),
    # compressed-tensors per-tensor, static: [1] BF16 scales; an MoE with E % 4 != 0
    ("mixtral-ct", "mixtral"): dict(MOE_ARCHS["mixtral"], quantization_config={
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": dict(CT_GROUP, input_activations=CT_STATIC)},
        "ignore": ["lm_head"]}),
    # fbgemm per-channel [out, 1]: Qwen2's biases and tied embeddings stay unquantized
    ("qwen2-fbgemm", "qwen2"): dict(ARCHS["qwen2"], quantization_config={
        "quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"],
        "activation_scale_ub": 1200.0}),
    # compressed-tensors per-channel, dynamic per-token activations, BF16 scales; an MoE layer
    # kept whole (its o_proj listed for every layer)
    ("qwen3_moe-ct", "qwen3_moe"): dict(MOE_ARCHS["qwen3_moe"], quantization_config={
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": dict(CT_GROUP, weights=dict(CT_GROUP["weights"], strategy="channel"),
                                          input_activations={"num_bits": 8, "type": "float",
                                                             "strategy": "token", "dynamic": True})},
        "ignore": ["lm_head"] + ["model.layers.%d.self_attn.o_proj" % i for i in range(3)]}),
    # MLA's replicated layers: fused_qkv_a_proj's per-channel scales concatenated (fbgemm), and with
    # q_lora_rank null kv_a_proj_with_mqa's per-tensor and input scales whole (AutoFP8 static)
    # Qwen3-MoE's routers quantized, as vLLM does when the config does not list mlp.gate: block
    # scales [1, 2] whole on every rank, and AutoFP8's per-tensor and input scales
    ("qwen3_moe-router", "qwen3_moe"): dict(FP8_ARCHS["qwen3_moe"], quantization_config=FP8_QUANT),
    ("qwen3_moe-router-pt", "qwen3_moe"): dict(MOE_ARCHS["qwen3_moe"], quantization_config={
        "quant_method": "fp8", "activation_scheme": "static"}),
    ("deepseek_v3-fbgemm", "deepseek_v3"): dict(MOE_ARCHS["deepseek_v3"], quantization_config={
        "quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]}),
    ("deepseek_v2-pt", "deepseek_v2"): dict(MOE_ARCHS["deepseek_v2"], quantization_config={
        "quant_method": "fp8", "activation_scheme": "static"}),
    # compressed-tensors blocks: DeepSeek's FP8 shapes, scales named weight_scale
    ("deepseek_v3-ctblock", "deepseek_v3"): dict(FP8_ARCHS["deepseek_v3"], quantization_config={
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": dict(CT_GROUP, weights={
            "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
            input_activations={"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                               "dynamic": True})}}),
    # quantization_config listing a module in some layers only: vLLM's Fp8Config asks each layer's
    # module (is_layer_skipped), so those layers keep the model dtype and the others are FP8.
    # Qwen3-MoE: layer 0's router, layer 1's q, k and v, and layer 1's experts (every module of
    # every expert named); Llama per-channel with the first and last layers listed whole
    ("qwen3_moe-partial", "qwen3_moe"): dict(FP8_ARCHS["qwen3_moe"], quantization_config=dict(
        FP8_QUANT, modules_to_not_convert=["model.layers.0.mlp.gate"] +
        ["model.layers.1.self_attn.%s_proj" % x for x in "qkv"] +
        ["model.layers.1.mlp.experts.%d.%s_proj" % (e, x) for e in range(4) for x in ("gate", "up", "down")])),
    ("llama-fbgemm-partial", "llama"): dict(ARCHS["llama"], quantization_config={
        "quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
        "modules_to_not_convert": ["lm_head"] + ["model.layers.%d.%s" % (l, m) for l in (0, ARCHS["llama"]["num_hidden_layers"] - 1)
                                                 for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                           "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                           "mlp.down_proj")]}),
}
FP8_MORE_SCALE_DT = {"llama-pt": "F32", "mixtral-ct": "BF16", "qwen2-fbgemm": "F32",
                     "qwen3_moe-ct": "BF16", "deepseek_v3-fbgemm": "BF16", "deepseek_v2-pt": "F32",
                     "deepseek_v3-ctblock": "F32", "qwen3_moe-router": "BF16",
                     "qwen3_moe-router-pt": "F32", "qwen3_moe-partial": "BF16",
                     "llama-fbgemm-partial": "F32"}


def fp8_scheme(q):
    """(kind, scale suffix, static input scales, shape of a per-tensor scale, [bn, bk]) read from
    a quantization_config as the spec describes it."""
    m = q["quant_method"]
    if m == "fp8":
        if q.get("weight_block_size"):
            return "block", "_scale_inv", False, None, q["weight_block_size"]
        return "tensor", "_scale", q.get("activation_scheme") == "static", (), None
    if m == "fbgemm_fp8":
        return "channel", "_scale", False, None, None
    g = next(iter(q["config_groups"].values()))
    ia = g.get("input_activations")
    static = bool(ia) and ia.get("dynamic") is False
    w = g["weights"]
    return w["strategy"], "_scale", static, (1,), w.get("block_structure")


def fp8_ignored(q, name):
    mods = q.get("ignored_layers") or q.get("modules_to_not_convert") or q.get("ignore") or []
    return name[:-len(".weight")] in mods


def is_deepseek(arch):
    return arch.startswith("deepseek")


def ties(arch, cfg):
    """Whether the model shares embed_tokens with lm_head: vLLM's DeepSeek-V2/V3 ignores
    tie_word_embeddings (deepseek_v2.py makes and loads its own lm_head, at 9aaf83ef)."""
    return bool(cfg.get("tie_word_embeddings", False)) and not is_deepseek(arch)


def n_experts(cfg, key, alias):
    """The expert count: transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (its
    config's attribute_map), and reads Mixtral's num_local_experts under either name."""
    v = cfg.get(key)
    return v if v is not None else cfg.get(alias) or 0


def moe_info(arch, cfg):
    """(E, I of an expert, Is of the shared expert, the MoE-block prefix) from the spec's table."""
    if arch == "mixtral":
        return (n_experts(cfg, "num_local_experts", "num_experts"), cfg["intermediate_size"], 0,
                "block_sparse_moe.")
    if arch in ("qwen2_moe", "qwen3_moe"):
        return (n_experts(cfg, "num_experts", "num_local_experts"), cfg["moe_intermediate_size"],
                cfg.get("shared_expert_intermediate_size") or 0, "mlp.")
    if is_deepseek(arch):
        return (cfg.get("n_routed_experts") or 0, cfg["moe_intermediate_size"],
                cfg["moe_intermediate_size"] * (cfg.get("n_shared_experts") or 0), "mlp.")
    return 0, 0, 0, None


def is_moe_layer(arch, cfg, layer):
    if arch == "mixtral":
        return True
    if arch in ("qwen2_moe", "qwen3_moe"):
        return (layer not in (cfg.get("mlp_only_layers") or [])
                and n_experts(cfg, "num_experts", "num_local_experts") > 0
                and (layer + 1) % cfg.get("decoder_sparse_step", 1) == 0)
    if is_deepseek(arch):
        return (cfg.get("n_routed_experts") is not None and layer >= cfg.get("first_k_dense_replace", 0)
                and layer % cfg.get("moe_layer_freq", 1) == 0)
    return False


def shared_name(arch):
    return "shared_experts." if is_deepseek(arch) else "shared_expert."


def mla_shapes(cfg, p):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    rq, rkv = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    a = p + "self_attn."
    out = {a + "kv_a_proj_with_mqa.weight": (rkv + dr, H), a + "kv_a_layernorm.weight": (rkv,),
           a + "kv_b_proj.weight": (nh * (dn + dv), rkv), a + "o_proj.weight": (H, nh * dv)}
    if rq:
        out.update({a + "q_a_proj.weight": (rq, H), a + "q_a_layernorm.weight": (rq,),
                    a + "q_b_proj.weight": (nh * (dn + dr), rq)})
    else:
        out[a + "q_proj.weight"] = (nh * (dn + dr), H)
    return out


def expected_mla(cfg, w, p, T, r):
    """SHARDING-MOE-FP8.md, "DeepSeek MLA attention on rank r"."""
    nl, dq = cfg["num_attention_heads"] // T, cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    dn, dv = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    a = p + "self_attn."
    out = {a + "kv_a_layernorm.weight": w[a + "kv_a_layernorm.weight"],
           a + "kv_b_proj.weight": w[a + "kv_b_proj.weight"][r * nl * (dn + dv):(r + 1) * nl * (dn + dv)],
           a + "o_proj.weight": w[a + "o_proj.weight"][:, r * nl * dv:(r + 1) * nl * dv]}
    if cfg.get("q_lora_rank"):
        out[a + "fused_qkv_a_proj.weight"] = np.concatenate([w[a + "q_a_proj.weight"],
                                                             w[a + "kv_a_proj_with_mqa.weight"]])
        out[a + "q_a_layernorm.weight"] = w[a + "q_a_layernorm.weight"]
        out[a + "q_b_proj.weight"] = w[a + "q_b_proj.weight"][r * nl * dq:(r + 1) * nl * dq]
    else:
        out[a + "kv_a_proj_with_mqa.weight"] = w[a + "kv_a_proj_with_mqa.weight"]
        out[a + "q_proj.weight"] = w[a + "q_proj.weight"][r * nl * dq:(r + 1) * nl * dq]
    return out


def expert_names(arch):
    return ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")


def ep_range(E, T, r):
    """vLLM's placement since 2025-07-24: contiguous, the first E % T ranks one more."""
    base, rem = divmod(E, T)
    return r * base + min(r, rem), base + (1 if r < rem else 0)


def dims(cfg):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads") or nh   # null, as transformers writes an unset key: absent
    # vLLM's getattr(config, "head_dim", None) or H // nh, on transformers' config class: its
    # Qwen3Config (model_type qwen3) has head_dim 128 when config.json omits the key
    D = cfg.get("head_dim", 128 if cfg.get("model_type") == "qwen3" else None) or H // nh
    return H, nh, K, D, cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]


def checkpoint_tensors(arch, cfg, dtype, rng, scale_dt=None):
    """The Hugging Face tensors of a config, with random finite values (FP8 scales in scale_dt,
    else FP8_SCALE_DT's)."""
    H, nh, K, D, I, V, L = dims(cfg)
    E, Ie, Is, mp = moe_info(arch, cfg)
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,),
              "lm_head.weight": (V, H)}   # tied models still ship lm_head: it must be skipped
    for i in range(L):
        p = "model.layers.%d." % i
        if is_deepseek(arch):
            shapes.update(mla_shapes(cfg, p))
        else:
            shapes.update({p + "self_attn.q_proj.weight": (nh * D, H),
                           p + "self_attn.k_proj.weight": (K * D, H),
                           p + "self_attn.v_proj.weight": (K * D, H),
                           p + "self_attn.o_proj.weight": (H, nh * D)})
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)})
        if not is_moe_layer(arch, cfg, i):
            shapes.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                           p + "mlp.down_proj.weight": (H, I)})
        else:
            g, u, d = expert_names(arch)
            shapes[p + mp + "gate.weight"] = (E, H)
            if is_deepseek(arch) and cfg.get("topk_method") == "noaux_tc":
                shapes[p + mp + "gate.e_score_correction_bias"] = (E,)
            for e in range(E):
                x = p + mp + "experts.%d." % e
                shapes.update({x + g + ".weight": (Ie, H), x + u + ".weight": (Ie, H),
                               x + d + ".weight": (H, Ie)})
            if Is > 0:
                x = p + mp + shared_name(arch)
                shapes.update({x + "gate_proj.weight": (Is, H), x + "up_proj.weight": (Is, H),
                               x + "down_proj.weight": (H, Is)})
                if not is_deepseek(arch):
                    shapes[p + mp + "shared_expert_gate.weight"] = (1, H)
        if arch in ("qwen2", "qwen2_moe"):
            shapes.update({p + "self_attn.q_proj.bias": (nh * D,),
                           p + "self_attn.k_proj.bias": (K * D,),
                           p + "self_attn.v_proj.bias": (K * D,)})
        if arch in ("qwen3", "qwen3_moe"):
            shapes.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    shapes["model.layers.0.self_attn.rotary_emb.inv_freq"] = (D // 2,)   # skipped by rule
    if cfg.get("num_nextn_predict_layers"):   # DeepSeek's MTP layer L: skipped by the main model
        shapes.update({"model.layers.%d.eh_proj.weight" % L: (H, 2 * H),
                       "model.layers.%d.enorm.weight" % L: (H,)})
    out = {}
    q = cfg.get("quantization_config")
    for name, shp in shapes.items():
        if q and fp8_quantized(arch, name, shp) and not fp8_ignored(q, name):
            b = rng.integers(0, 256, size=shp, dtype=np.uint8)
            b[(b & 0x7F) == 0x7F] ^= 1   # never e4m3's NaN
            out[name] = ("F8_E4M3", b)
            kind, suffix, static, scalar, block = fp8_scheme(q)
            sshape = {"block": lambda: (-(-shp[0] // block[0]), -(-shp[1] // block[1])),
                      "tensor": lambda: scalar, "channel": lambda: (shp[0], 1)}[kind]()
            sdt = scale_dt or FP8_SCALE_DT.get(arch, "F32")

            def scale(shape):
                sc = rng.uniform(1e-4, 1e-2, size=shape).astype(np.float32)
                return (sdt, sc if sdt == "F32" else f32_to_bf16(sc))
            out[name + suffix] = scale(sshape)
            if static:
                out[name[:-len("weight")] + "input_scale"] = scale(scalar)
            continue
        f = rng.standard_normal(shp).astype(np.float32)
        if name.endswith("e_score_correction_bias"):   # F32 whatever the model's dtype
            out[name] = ("F32", f)
            continue
        if dtype == "F64":   # every bit of a double, so that each conversion rounds
            out[name] = ("F64", f + rng.standard_normal(shp) * 2.0 ** -30)
            continue
        out[name] = (("F32", f) if dtype == "F32" else ("F16", f.astype(np.float16))
                     if dtype == "F16" else ("BF16", f32_to_bf16(f)))
    # one input scale per expert in vLLM: w3's (up_proj's) equals w1's (gate_proj's) in the file
    g, u, _ = expert_names(arch)
    for name in list(out):
        if ".experts." in name and name.endswith("." + u + ".input_scale"):
            out[name] = out[name[:-len(u + ".input_scale")] + g + ".input_scale"]
    return out


def fp8_quantized(arch, name, shp):
    """The spec's list: linear weights, not embeddings, lm_head, norms, routers, shared_expert_gate
    (the MTP layer's eh_proj is quantized like any linear layer; it is skipped anyway). Qwen3-MoE's
    router is a linear layer like any other: vLLM's qwen3_moe.py makes mlp.gate with the model's
    quant_config (Mixtral's, Qwen2-MoE's and DeepSeek's with none)."""
    if len(shp) != 2 or not name.endswith(".weight") or "norm" in name:
        return False
    router = name.endswith(".gate.weight") and arch != "qwen3_moe"
    return not (name.endswith("embed_tokens.weight") or name == "lm_head.weight" or
                router or name.endswith("shared_expert_gate.weight"))


EVERY_STAGE = ("mixtral", "qwen2_moe", "qwen3_moe")


def pp_layers(L, P, s, part=None):
    """vLLM get_pp_indices: with VLLM_PP_LAYER_PARTITION (part, its text "1,6,0") each stage the
    layers its entry counts, after those of the stages before it; without, L//P each, the
    remainder one each to stages P-2, P-3, ..."""
    if part is not None:
        parts = [int(x) for x in part.split(",")]
        assert len(parts) == P and sum(parts) == L, "oracle case %s for L=%d P=%d" % (part, L, P)
    else:
        parts = [L // P] * P
        for i in range(2, L % P + 2):
            parts[-i] += 1
    start = sum(parts[:s])
    return range(start, start + parts[s])


def vocab_shard(w, T, r):
    V = w.shape[0]
    Vp = -(-V // 64) * 64
    n = Vp // T
    a, b = min(r * n, V), min((r + 1) * n, V)
    out = np.zeros((n,) + w.shape[1:], dtype=w.dtype)
    out[: b - a] = w[a:b]
    return out


def expected_moe(arch, cfg, w, p, T, r, ep):
    """An MoE layer's parameters on tp rank r (SHARDING-MOE-FP8.md, "Experts on rank r")."""
    E, Ie, Is, mp = moe_info(arch, cfg)
    g, u, dn = expert_names(arch)
    out = {p + mp + "gate.weight": w[p + mp + "gate.weight"]}
    if p + mp + "gate.e_score_correction_bias" in w:   # replicated, whole
        out[p + mp + "gate.e_score_correction_bias"] = w[p + mp + "gate.e_score_correction_bias"]
    first, count = ep_range(E, T, r) if ep else (0, E)
    Ip, t = (Ie, 0) if ep else (Ie // T, r)
    w13, w2 = [], []
    for e in range(first, first + count):
        x = p + mp + "experts.%d." % e
        w13.append(np.concatenate([w[x + g + ".weight"][t * Ip:(t + 1) * Ip],
                                   w[x + u + ".weight"][t * Ip:(t + 1) * Ip]]))
        w2.append(w[x + dn + ".weight"][:, t * Ip:(t + 1) * Ip])
    H = w[p + mp + "gate.weight"].shape[1]
    dt = w[p + mp + "gate.weight"].dtype   # under EP at T > E, ranks r >= E hold no expert
    out[p + mp + "experts.w13_weight"] = np.stack(w13) if w13 else np.zeros((0, 2 * Ip, H), dt)
    out[p + mp + "experts.w2_weight"] = np.stack(w2) if w2 else np.zeros((0, H, Ip), dt)
    if Is > 0:   # the shared expert is a dense MLP of width Is; its gate is replicated
        x, m = p + mp + shared_name(arch), Is // T
        out[x + "gate_up_proj.weight"] = np.concatenate(
            [w[x + "gate_proj.weight"][r * m:(r + 1) * m], w[x + "up_proj.weight"][r * m:(r + 1) * m]])
        out[x + "down_proj.weight"] = w[x + "down_proj.weight"][:, r * m:(r + 1) * m]
        if not is_deepseek(arch):
            out[p + mp + "shared_expert_gate.weight"] = w[p + mp + "shared_expert_gate.weight"]
    elif arch == "qwen2_moe" and p + mp + "shared_expert_gate.weight" in w:
        # vLLM's Qwen2-MoE makes shared_expert_gate whatever Is (qwen2_moe.py), and loads it
        # where the checkpoint has it (Qwen3-MoE makes it only when Is > 0)
        out[p + mp + "shared_expert_gate.weight"] = w[p + mp + "shared_expert_gate.weight"]
    return out


def expected_dense_mlp(w, p, m, r):
    return {p + "mlp.gate_up_proj.weight": np.concatenate(
                [w[p + "mlp.gate_proj.weight"][r * m:(r + 1) * m], w[p + "mlp.up_proj.weight"][r * m:(r + 1) * m]]),
            p + "mlp.down_proj.weight": w[p + "mlp.down_proj.weight"][:, r * m:(r + 1) * m]}


def cdiv(a, b):
    return -(-a // b)


def widened(s):
    """A checkpoint scale as F32 (a BF16 one widened exactly)."""
    return bf16_to_f32(s) if s.dtype == np.uint16 else s


class Scales:
    """One device's FP8 scale parameters, from the spec's table, for one quantization_config."""

    def __init__(self, cfg, w):
        self.kind, self.suffix, self.static, _, block = fp8_scheme(cfg["quantization_config"])
        self.bn, self.bk = block or (0, 0)
        self.w = w

    def of(self, name):
        return widened(self.w[name + self.suffix])

    def scalar(self, name, inp=False):
        """A per-tensor scale ([] or [1] in the file) as one element."""
        return widened(self.w[name[:-len("weight")] + "input_scale" if inp else name + self.suffix]).reshape(1)

    def rows(self, name, o, src):
        """Column slot of o rows a rank from source block src: the weight's rows, or in blocks."""
        if self.kind == "channel":
            return self.of(name)[src * o:(src + 1) * o]
        nb = cdiv(o, self.bn)
        return self.of(name)[src * nb:(src + 1) * nb]

    def cols(self, name, ii, r):
        """A row layer's scale: columns in blocks; a per-channel [out, 1] whole."""
        if self.kind == "channel":
            return self.of(name)
        kb = cdiv(ii, self.bk)
        return self.of(name)[:, r * kb:(r + 1) * kb]

    def slots(self, out, pname, parts, inp=False):
        """The parameter's scale from its slots: parts = [(checkpoint weight, rows, source block)];
        rows None: the whole tensor (replicated, concatenated)."""
        if self.kind == "tensor" or inp:
            arr = np.concatenate([self.scalar(n, inp) for n, _, _ in parts])
        else:
            arr = np.concatenate([self.of(n) if o is None else self.rows(n, o, b) for n, o, b in parts])
        out[pname[:-len("weight")] + "input_scale" if inp else pname + self.suffix] = arr


def cdiv(a, b):
    return -(-a // b)


def expected_fp8_scales(arch, cfg, w, out, T, r, ep):
    """SHARDING-MOE-FP8.md's scale table (block, per-tensor, per-channel and static input scales)
    for the FP8 parameters of `out` (one device)."""
    H, nh, K, D, I, V, L = dims(cfg)
    E, Ie, Is, mp = moe_info(arch, cfg)
    sc = Scales(cfg, w)
    for pname in list(out):
        if not pname.startswith("model.layers.") or out[pname].dtype != np.uint8:
            continue
        p = pname[:pname.index(".", len("model.layers.")) + 1]
        x = pname[len(p):]
        a = p + "self_attn."
        for inp in ((False, True) if sc.static else (False,)):
            if x == "self_attn.fused_qkv_a_proj.weight":
                sc.slots(out, pname, [(a + "q_a_proj.weight", None, 0),
                                      (a + "kv_a_proj_with_mqa.weight", None, 0)], inp)
            elif x == "self_attn.kv_a_proj_with_mqa.weight" or (mp and x == mp + "gate.weight"):   # replicated
                sc.slots(out, pname, [(pname, None, 0)], inp)
            elif x in ("self_attn.q_b_proj.weight", "self_attn.kv_b_proj.weight", "self_attn.q_proj.weight"):
                sc.slots(out, pname, [(pname, out[pname].shape[0], r)], inp)
            elif x == "self_attn.qkv_proj.weight":
                nq, kl = nh // T, (K // T if T <= K else 1)
                kb = r if T <= K else r // (T // K)
                sc.slots(out, pname, [(a + "q_proj.weight", nq * D, r), (a + "k_proj.weight", kl * D, kb),
                                      (a + "v_proj.weight", kl * D, kb)], inp)
            elif x.endswith("o_proj.weight") or x.endswith("down_proj.weight"):
                if sc.kind == "tensor" or inp:
                    sc.slots(out, pname, [(pname, None, 0)], inp)
                else:
                    out[pname + sc.suffix] = sc.cols(pname, out[pname].shape[1], r)
            elif x.endswith("gate_up_proj.weight"):
                base, o = pname[:-len("gate_up_proj.weight")], out[pname].shape[0] // 2
                sc.slots(out, pname, [(base + "gate_proj.weight", o, r), (base + "up_proj.weight", o, r)], inp)
            elif x == mp + "experts.w13_weight" or x == mp + "experts.w2_weight":
                expert_scales(arch, cfg, sc, out, pname, p + mp, T, r, ep, inp)
            else:
                raise AssertionError("no FP8 scale rule for " + pname)
    return out


def expert_scales(arch, cfg, sc, out, pname, pm, T, r, ep, inp):
    """w13 / w2 scales: per-tensor [El, 2] / [El], per-channel [El, 2*Ip, 1] / [El, H, 1], blocks
    [El, 2*nb, kb] / [El, cdiv(H, bn), kb], static input scales [El] (w1's, equal to w3's)."""
    E, Ie, Is, mp = moe_info(arch, cfg)
    first, count = ep_range(E, T, r) if ep else (0, E)
    Ip, t = (Ie, 0) if ep else (Ie // T, r)
    g, u, dn = expert_names(arch)
    w13 = pname.endswith("w13_weight")
    per = []
    for e in range(first, first + count):
        ex = pm + "experts.%d." % e
        if inp:
            per.append(sc.scalar(ex + (g if w13 else dn) + ".weight", True)[0])
        elif sc.kind == "tensor":
            per.append(np.concatenate([sc.scalar(ex + g + ".weight"), sc.scalar(ex + u + ".weight")])
                       if w13 else sc.scalar(ex + dn + ".weight")[0])
        elif w13:
            per.append(np.concatenate([sc.rows(ex + g + ".weight", Ip, t), sc.rows(ex + u + ".weight", Ip, t)]))
        else:
            per.append(sc.cols(ex + dn + ".weight", Ip, t))
    out[pname[:-len("weight")] + "input_scale" if inp else pname + sc.suffix] = np.stack(per)


def expected_tp(arch, cfg, ck, T, P, d, ep=False, part=None):
    H, nh, K, D, I, V, L = dims(cfg)
    s, r = divmod(d, T)
    tied = ties(arch, cfg)
    w = {k: v[1] for k, v in ck.items()}
    nq, kl = nh // T, (K // T if T <= K else 1)
    kb = r if T <= K else r // (T // K)
    out = {}
    # vLLM's Mixtral, Qwen2-MoE and Qwen3-MoE models make embed_tokens, norm and lm_head on every
    # pipeline stage (no PPMissingLayer for them, at vLLM 9aaf83ef), and load them there
    every = arch in EVERY_STAGE
    if s == 0 or every or (tied and s == P - 1):
        out["model.embed_tokens.weight"] = vocab_shard(w["model.embed_tokens.weight"], T, r)
    for i in pp_layers(L, P, s, part):
        p = "model.layers.%d." % i
        if is_deepseek(arch):
            out.update(expected_mla(cfg, w, p, T, r))
            out.update(expected_moe(arch, cfg, w, p, T, r, ep) if is_moe_layer(arch, cfg, i) else
                       expected_dense_mlp(w, p, I // T, r))
            for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
                out[p + n] = w[p + n]
            continue
        q, k, v = (w[p + "self_attn.%s_proj.weight" % x] for x in "qkv")
        out[p + "self_attn.qkv_proj.weight"] = np.concatenate(
            [q[r * nq * D:(r + 1) * nq * D], k[kb * kl * D:(kb + 1) * kl * D],
             v[kb * kl * D:(kb + 1) * kl * D]])
        if arch in ("qwen2", "qwen2_moe"):
            qb, kb_, vb = (w[p + "self_attn.%s_proj.bias" % x] for x in "qkv")
            out[p + "self_attn.qkv_proj.bias"] = np.concatenate(
                [qb[r * nq * D:(r + 1) * nq * D], kb_[kb * kl * D:(kb + 1) * kl * D],
                 vb[kb * kl * D:(kb + 1) * kl * D]])
        c = nh * D // T
        out[p + "self_attn.o_proj.weight"] = w[p + "self_attn.o_proj.weight"][:, r * c:(r + 1) * c]
        m = I // T
        if is_moe_layer(arch, cfg, i):
            out.update(expected_moe(arch, cfg, w, p, T, r, ep))
        else:
            out.update(expected_dense_mlp(w, p, m, r))
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = w[p + n]
        if arch in ("qwen3", "qwen3_moe"):
            for n in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
                out[p + n] = w[p + n]
    if s == P - 1 or every:
        out["model.norm.weight"] = w["model.norm.weight"]
        if not tied:
            out["lm_head.weight"] = vocab_shard(w["lm_head.weight"], T, r)
    if cfg.get("quantization_config"):
        out = expected_fp8_scales(arch, cfg, w, out, T, r, ep)
    return out


def tile(w, N, i, dim):
    n = w.shape[dim]
    c = -(-n // N)
    a, b = min(i * c, n), min((i + 1) * c, n)
    shape = list(w.shape)
    shape[dim] = c
    out = np.zeros(shape, dtype=w.dtype)
    src = w[a:b] if dim == 0 else w[:, a:b]
    if dim == 0:
        out[: b - a] = src
    else:
        out[:, : b - a] = src
    return out


def spmd_dim(name, w):
    """The dimension SHARDING.md's layout spmd tiles a checkpoint tensor along, None for whole."""
    # 1-D, the replicated routers and DeepSeek's replicated q_a / kv_a projections
    if w.ndim == 1 or name.endswith("gate.weight") or name.endswith("a_proj.weight") or \
            name.endswith("kv_a_proj_with_mqa.weight"):
        return None
    dim1 = (name.endswith("o_proj.weight") or name.endswith("down_proj.weight")
            or name.endswith(".w2.weight"))
    return 1 if dim1 else 0


def spmd_scale(cfg, ck, name, N, i):
    """An FP8 scale in layout spmd (SHARDING-MOE-FP8.md): a block scale tiled by the blocks of its
    weight's tile, a per-channel one with the weight's dim-0 tiles (whole for dim 1), a per-tensor
    or input scale whole."""
    kind, suffix, _, _, block = fp8_scheme(cfg["quantization_config"])
    s = widened(ck[name][1])
    if name.endswith(".input_scale") or kind == "tensor":
        return s
    wname = name[:-len(suffix)]
    w = ck[wname][1]
    dim = spmd_dim(wname, w)
    if dim is None or (kind == "channel" and dim == 1):
        return s
    if kind == "channel":
        return tile(s, N, i, 0)
    b = block[dim]
    c = cdiv(cdiv(w.shape[dim], N), b)   # the weight's tile in blocks
    n = s.shape[dim]
    lo, hi = min(i * c, n), min((i + 1) * c, n)
    shape = list(s.shape)
    shape[dim] = c
    out = np.zeros(shape, dtype=np.float32)
    if dim == 0:
        out[:hi - lo] = s[lo:hi]
    else:
        out[:, :hi - lo] = s[:, lo:hi]
    return out


def expected_spmd(arch, cfg, ck, N, i):
    tied = ties(arch, cfg)
    out = {}
    L = cfg["num_hidden_layers"]
    for name, (_, w) in ck.items():
        if "rotary_emb" in name or (tied and name == "lm_head.weight"):
            continue
        if name.startswith("model.layers.%d." % L):   # DeepSeek's MTP layer
            continue
        if name.endswith("_scale") or name.endswith("_scale_inv"):
            out[name] = spmd_scale(cfg, ck, name, N, i)
            continue
        dim = spmd_dim(name, w)
        out[name] = w if dim is None else tile(w, N, i, dim)
    return out


# ---- running shardload ---------------------------------------------------------------------------

def run_load(exe, path, args, env=None):
    cmd = [exe, "load", path, "--checksums", "--json"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env) if env else None)
    if p.returncode != 0:
        shown = ["%s=%s" % kv for kv in (env or {}).items()] + cmd
        raise AssertionError("%s failed (%d): %s" % (" ".join(shown), p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)


def read_safetensors(path):
    """name -> (dtype, array) of one file, with this file's own parser."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=NP_OF[t["dtype"]]).reshape(t["shape"])
        out[name] = (t["dtype"], arr)
    return out


def check_reshard(exe, path, arch, cfg, ck, T, P, ep, tmp, part=None):
    """`shardload reshard` for the mesh (and pipeline split part), each rank file read back here
    and compared array for array; the folder it wrote."""
    out = os.path.join(tmp, "rs-%s-%d-%d-%d-%s" % (os.path.basename(path), T, P, ep, part))
    cmd = [exe, "reshard", path, out, "--tp", str(T), "--pp", str(P)] + (["--ep"] if ep else [])
    cmd += ["--pp-partition", part] if part is not None else []
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    tied = ties(arch, cfg)
    for d in range(T * P):
        got = {}
        for fn in sorted(os.listdir(out)):
            if fn.startswith("model-rank-%d-part-" % d):
                got.update(read_safetensors(os.path.join(out, fn)))
        exp = expected_tp(arch, cfg, ck, T, P, d, ep, part)
        # vLLM's sharded_state keeps, of tensors sharing storage, the name that sorts lowest: a
        # tied embedding is lm_head.weight where lm_head is tied to it (the last stage; every
        # stage of the MoE models that make lm_head on each)
        stored = "lm_head.weight" if tied and (arch in EVERY_STAGE or d // T == P - 1) else None
        if stored and "model.embed_tokens.weight" in exp:
            if stored not in got or "model.embed_tokens.weight" in got:
                raise AssertionError("reshard %s T=%d P=%d dev %d: the tied embedding is not stored as %s: %s" % (
                    arch, T, P, d, stored, sorted(n for n in got if "embed" in n or "lm_head" in n)))
            got["model.embed_tokens.weight"] = got.pop(stored)
        if set(got) != set(exp):
            raise AssertionError("reshard %s T=%d P=%d ep=%d dev %d: tensors differ: missing %s, extra %s" % (
                arch, T, P, ep, d, sorted(set(exp) - set(got))[:5], sorted(set(got) - set(exp))[:5]))
        for name, arr in exp.items():
            if got[name][1].shape != arr.shape or not np.array_equal(got[name][1].view(np.uint8),
                                                                     np.ascontiguousarray(arr).view(np.uint8)):
                raise AssertionError("reshard %s T=%d P=%d ep=%d dev %d: %s differs" % (arch, T, P, ep, d, name))
    return out


def expected(arch, cfg, ck, layout, T, P, d, ep=False, part=None):
    """Mesh device d's parameters under layout tp or spmd."""
    return (expected_tp(arch, cfg, ck, T, P, d, ep, part) if layout == "tp"
            else expected_spmd(arch, cfg, ck, T, d))


def load_args(layout, T, P, dst_dt, ep=False, devices=None, extra=()):
    """shardload load's arguments for a case (after PATH)."""
    args = ["--tp", str(T), "--pp", str(P), "--layout", layout, "--dtype", dst_dt.lower()]
    args += (["--ep"] if ep else []) + list(extra)
    if devices is not None:
        args += ["--devices", ",".join(map(str, devices))]
    return args


def check(exe, path, arch, cfg, ck, layout, T, P, src_dt, dst_dt, ep=False, devices=None,
          extra=(), env=None, part=None):
    """A load (of the mesh devices `devices`, default all; more arguments in extra, environment
    variables in env; part: the pipeline split those give, "1,6,0") checked device by device
    against the oracle."""
    rep = run_load(exe, path, load_args(layout, T, P, dst_dt, ep, devices, extra), env)
    want = list(devices) if devices is not None else list(range(T * P))
    got_devs = sorted(dev["index"] for dev in rep["devices"])
    assert got_devs == want, "devices: %s != %s" % (got_devs, want)
    for dev in rep["devices"]:
        d = dev["index"]
        exp = expected(arch, cfg, ck, layout, T, P, d, ep, part)
        got = {p["name"]: p["xxh3"] for p in dev["params"]}
        if set(got) != set(exp):
            raise AssertionError("%s %s T=%d P=%d%s ep=%d dev %d: params differ: missing %s, extra %s" % (
                arch, layout, T, P, " (%s)" % part if part else "", ep, d, sorted(set(exp) - set(got))[:5], sorted(set(got) - set(exp))[:5]))
        nbytes = 0
        for name, arr in exp.items():
            # the checkpoint's F32 bias stays F32 (SHARDING-MOE-FP8.md); the rest in dst_dt
            f32 = name.endswith("e_score_correction_bias")
            want = convert(arr, "F32" if f32 else src_dt, "F32" if f32 else dst_dt)
            nbytes += want.nbytes
            if got[name] != xxh3(want):
                raise AssertionError("%s %s T=%d P=%d%s ep=%d %s->%s dev %d: %s differs" % (
                    arch, layout, T, P, " (%s)" % part if part else "", ep, src_dt, dst_dt, d, name))
        assert dev["allocated_bytes"] == nbytes, "dev %d allocated %d, oracle %d" % (
            d, dev["allocated_bytes"], nbytes)


def check_extra_layers(exe, tmp, rng, shuffle):
    """vLLM's DeepSeek skips its num_nextn_predict_layers MTP layers from L on and refuses any
    other layer past L (a KeyError): a tensor of layer L + 1 beside the MTP layer L, or layer L
    of a config without MTP layers, is unclaimed (they were skipped as MTP)."""
    for name, cfg, extra in (("ds-mtp2", MOE_ARCHS["deepseek_v3"], "model.layers.4.enorm.weight"),
                             ("ds-nomtp", dict(MOE_ARCHS["deepseek_v3"], num_nextn_predict_layers=0),
                              "model.layers.3.enorm.weight")):
        path = os.path.join(tmp, name)
        os.mkdir(path)
        c = dict(cfg, torch_dtype="bfloat16")
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(c, f)
        ck = checkpoint_tensors("deepseek_v3", c, "BF16", rng)
        ck[extra] = ck["model.norm.weight"]
        write_checkpoint(path, ck, 2, shuffle)
        p = subprocess.run([exe, "load", path], capture_output=True, text=True)
        assert p.returncode == 1 and "'%s'" % extra in p.stderr and "not claimed" in p.stderr, \
            "%s: a layer past the MTP ones: rc %d: %s" % (name, p.returncode, p.stderr.strip())


def check_qwen2_gate_without_shared(exe, tmp, rng, shuffle):
    """Qwen2-MoE with shared_expert_intermediate_size 0: vLLM still makes shared_expert_gate [1, H]
    in every MoE layer and loads it where the checkpoint has it (here MoE layers 0 and 2 of 0-2);
    a layer without it is no error. Through load, reshard (and its folder loaded back) and spmd."""
    cfg = dict(MOE_ARCHS["qwen2_moe"], shared_expert_intermediate_size=0, decoder_sparse_step=1,
               torch_dtype="bfloat16")
    path = os.path.join(tmp, "qwen2_moe-is0")
    os.mkdir(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    ck = checkpoint_tensors("qwen2_moe", cfg, "BF16", rng)
    for i in (0, 2):
        ck["model.layers.%d.mlp.shared_expert_gate.weight" % i] = (
            "BF16", f32_to_bf16(rng.standard_normal((1, cfg["hidden_size"])).astype(np.float32)))
    write_checkpoint(path, ck, 3, shuffle)
    passed = failed = 0
    for layout, T, P, ep in [("tp", 1, 1, False), ("tp", 2, 2, False), ("tp", 4, 1, True), ("spmd", 2, 1, False)]:
        try:
            check(exe, path, "qwen2_moe", cfg, ck, layout, T, P, "BF16", "BF16", ep)
            if layout == "tp":
                rs = check_reshard(exe, path, "qwen2_moe", cfg, ck, T, P, ep, tmp)
                check(exe, rs, "qwen2_moe", cfg, ck, layout, T, P, "BF16", "BF16", ep)
            passed += 1
        except AssertionError as e:
            print("FAIL: qwen2_moe-is0:", e)
            failed += 1
    return passed, failed


def check_refused(exe, path, cfg, T):
    """Qwen2-MoE and Qwen3-MoE at T > E: vLLM's error, with and without --ep."""
    E = cfg.get("num_experts") or cfg.get("num_local_experts")
    for ep in ([], ["--ep"]):
        p = subprocess.run([exe, "load", path, "--tp", str(T)] + ep, capture_output=True, text=True)
        want = "Tensor parallel size %d is greater than the number of experts %d" % (T, E)
        assert p.returncode == 1 and want in p.stderr, "T=%d %s: rc %d: %s" % (T, ep, p.returncode, p.stderr)


# Explicit pipeline splits (vLLM's VLLM_PP_LAYER_PARTITION, the CLI's --pp-partition): stages of
# no layers at either end and in the middle, a tied model (Qwen3: the embedding on stage 0 and on
# the last), an MoE model that holds embed/norm/lm_head on every stage (Mixtral), DeepSeek with its
# MTP layer (no stage's) and a dense first layer. (arch, T, P, partition, given as, ep): each load
# checked device by device and, through --pp-partition, each reshard read back.
PARTITIONS = [("llama", 2, 3, "1,6,0", "option", False), ("llama", 1, 4, "0,3,4,0", "env", False),
              ("llama", 4, 2, "5,2", "option", False), ("qwen3", 2, 3, "0,5,0", "option", False),
              ("qwen3", 2, 2, "4,1", "env", False), ("mixtral", 2, 2, "3,0", "option", True),
              ("mixtral", 2, 3, "1,0,2", "env", False), ("deepseek_v3", 2, 2, "1,2", "option", True),
              ("deepseek_v3", 1, 3, "0,2,1", "option", False)]


def check_partitions(exe, tmp, rng, shuffle):
    passed = failed = 0
    made = {}
    for arch, T, P, part, via, ep in PARTITIONS:
        if arch not in made:
            path = os.path.join(tmp, "part-" + arch)
            os.mkdir(path)
            c = dict(ARCHS.get(arch) or MOE_ARCHS[arch], torch_dtype="bfloat16")
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(c, f)
            ck = checkpoint_tensors(arch, c, "BF16", rng)
            write_checkpoint(path, ck, 3, shuffle)
            made[arch] = (path, c, ck)
        path, c, ck = made[arch]
        try:
            if via == "env":
                check(exe, path, arch, c, ck, "tp", T, P, "BF16", "BF16", ep,
                      env={"VLLM_PP_LAYER_PARTITION": part}, part=part)
            else:
                check(exe, path, arch, c, ck, "tp", T, P, "BF16", "BF16", ep,
                      extra=("--pp-partition", part), part=part)
                check_reshard(exe, path, arch, c, ck, T, P, ep, tmp, part)
            passed += 1
        except AssertionError as e:
            print("FAIL:", e)
            failed += 1
    return passed, failed


def check_qwen3_head_dim(exe, tmp, rng, shuffle):
    """A Qwen3 config.json without head_dim (H/nh = 4 here): transformers' Qwen3Config makes it
    128, and vLLM builds its layers from that; the checkpoint is written at 128."""
    passed = failed = 0
    path = os.path.join(tmp, "qwen3-nohd")
    os.mkdir(path)
    c = {k: v for k, v in ARCHS["qwen3"].items() if k != "head_dim"}
    c["torch_dtype"] = "bfloat16"
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(c, f)
    ck = checkpoint_tensors("qwen3", c, "BF16", rng)
    assert ck["model.layers.0.self_attn.q_norm.weight"][1].shape == (128,)
    write_checkpoint(path, ck, 2, shuffle)
    for layout, T, P in (("tp", 2, 1), ("tp", 4, 2), ("spmd", 2, 1)):
        try:
            check(exe, path, "qwen3", c, ck, layout, T, P, "BF16", "BF16")
            passed += 1
        except AssertionError as e:
            print("FAIL:", e)
            failed += 1
    return passed, failed


def main():
    exe = os.path.abspath(sys.argv[1])
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)   # the default split unless a case sets it
    rng = np.random.default_rng(20261129)
    shuffle = random.Random(7)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch, cfg in ARCHS.items():
            for src_dt in (("BF16",) if arch.endswith("-big") else ("BF16", "F32")):
                path = os.path.join(tmp, "%s-%s" % (arch, src_dt))
                os.mkdir(path)
                c = dict(cfg, torch_dtype="bfloat16")
                with open(os.path.join(path, "config.json"), "w") as f:
                    json.dump(c, f)
                ck = checkpoint_tensors(arch.replace("-big", ""), c, src_dt, rng)
                write_checkpoint(path, ck, 3, shuffle)
                cases = [("tp", T, P) for T in (1, 2, 4, 8) for P in (1, 2, 3)]
                cases += [("spmd", N, 1) for N in (1, 2, 4, 8)]
                if arch.endswith("-big"):
                    cases = [("tp", 1, 1), ("tp", 2, 2), ("tp", 8, 1), ("spmd", 2, 1)]
                # bf16 checkpoints: bit copies and widening to f32; f32 checkpoints: rounding to bf16.
                dsts = ("BF16", "F32") if src_dt == "BF16" else ("BF16",)
                for dst_dt in dsts:
                    for layout, T, P in cases:
                        if dst_dt != src_dt and (T, P) not in ((1, 1), (4, 2), (8, 3)):
                            continue
                        try:
                            check(exe, path, arch, c, ck, layout, T, P, src_dt, dst_dt)
                            passed += 1
                        except AssertionError as e:
                            print("FAIL:", e)
                            failed += 1
        for arch, cfg in MOE_ARCHS.items():
            path = os.path.join(tmp, arch)
            os.mkdir(path)
            c = dict(cfg, torch_dtype="bfloat16")
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(c, f)
            ck = checkpoint_tensors(arch, c, "BF16", rng)
            write_checkpoint(path, ck, 3, shuffle)
            cases = [("tp", T, P, ep, "BF16") for T in (1, 2, 4) for P in (1, 2) for ep in (False, True)]
            cases += [("tp", 2, 1, True, "F32"), ("tp", 4, 2, False, "F32")]
            cases += [("spmd", N, 1, False, "BF16") for N in (1, 2, 4)]
            # T > E (vLLM refuses it for Qwen2-MoE and Qwen3-MoE only): Mixtral's 6 experts at T = 8,
            # cut along I, or under EP on ranks 0-5 and none on 6-7
            if arch == "mixtral":
                cases += [("tp", 8, 1, False, "BF16"), ("tp", 8, 1, True, "BF16"), ("tp", 8, 2, True, "BF16")]
            elif arch.startswith("qwen"):
                try:
                    check_refused(exe, path, cfg, 8)
                    passed += 1
                except AssertionError as e:
                    print("FAIL:", e)
                    failed += 1
            for layout, T, P, ep, dst_dt in cases:
                try:
                    check(exe, path, arch, c, ck, layout, T, P, "BF16", dst_dt, ep)
                    if layout == "tp" and dst_dt == "BF16":
                        check_reshard(exe, path, arch, c, ck, T, P, ep, tmp)
                    passed += 1
                except AssertionError as e:
                    print("FAIL:", e)
                    failed += 1
        p_, f_ = check_partitions(exe, tmp, rng, shuffle)
        passed, failed = passed + p_, failed + f_
        p_, f_ = check_qwen3_head_dim(exe, tmp, rng, shuffle)
        passed, failed = passed + p_, failed + f_
        try:
            check_extra_layers(exe, tmp, rng, shuffle)
            passed += 1
        except AssertionError as e:
            print("FAIL:", e)
            failed += 1
        p_, f_ = check_fp8(exe, tmp, rng, shuffle)
        passed, failed = passed + p_, failed + f_
        p_, f_ = check_qwen2_gate_without_shared(exe, tmp, rng, shuffle)
        passed, failed = passed + p_, failed + f_
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


def check_fp8(exe, tmp, rng, shuffle):
    """Block-FP8 checkpoints: weights bit for bit, scales sharded in blocks and widened to F32,
    unquantized tensors converted to the target, through load and reshard."""
    passed = failed = 0
    for arch, cfg in FP8_ARCHS.items():
        cases = [(T, P, ep, "BF16") for T in (1, 2) for P in (1, 2) for ep in (False, True)]
        cases += [(2, 1, False, "F32"), (4, 1, True, "BF16")] if arch == "qwen3_moe" else [(2, 1, True, "F32")]
        p_, f_ = check_fp8_checkpoint(exe, tmp, arch + "-fp8", arch, cfg, None, cases, (1, 2), rng, shuffle)
        passed, failed = passed + p_, failed + f_
    cases = [(T, P, False, "BF16") for T in (1, 2) for P in (1, 2)] + [(2, 1, False, "F32")]
    p_, f_ = check_fp8_checkpoint(exe, tmp, "qwen3-straddle", "qwen3", FP8_STRADDLE, "BF16", cases, (1,),
                                  rng, shuffle)
    passed, failed = passed + p_, failed + f_
    for (name, arch), cfg in FP8_MORE.items():
        moe = arch in MOE_ARCHS
        block = fp8_scheme(cfg["quantization_config"])[0] == "block"
        if block:   # T = 4 splits o_proj below a block
            cases = [(T, P, ep, "BF16") for T in (1, 2) for P in (1, 2) for ep in (False, True)]
        else:
            cases = [(T, P, ep, "BF16") for T in (1, 2, 4) for P in (1, 2) for ep in (False, True)
                     if moe or not ep]
        cases.append((2, 1, moe, "F32"))
        p_, f_ = check_fp8_checkpoint(exe, tmp, name, arch, cfg, FP8_MORE_SCALE_DT[name], cases,
                                      (1, 2) if block else (1, 2, 4), rng, shuffle)
        passed, failed = passed + p_, failed + f_
    return passed, failed


def check_fp8_checkpoint(exe, tmp, name, arch, cfg, scale_dt, cases, spmd_sizes, rng, shuffle):
    """One FP8 checkpoint of cfg written into tmp/name (scales in scale_dt), checked for every
    (T, P, ep, target) case through load (and reshard, for BF16), then as spmd tiles."""
    passed = failed = 0
    path = os.path.join(tmp, name)
    os.mkdir(path)
    c = dict(cfg, torch_dtype="bfloat16")
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(c, f)
    ck = checkpoint_tensors(arch, c, "BF16", rng, scale_dt)
    write_checkpoint(path, ck, 3, shuffle)
    for T, P, ep, dst_dt in cases:
        try:
            check(exe, path, arch, c, ck, "tp", T, P, "BF16", dst_dt, ep)
            if dst_dt == "BF16":
                check_reshard(exe, path, arch, c, ck, T, P, ep, tmp)
            passed += 1
        except AssertionError as e:
            print("FAIL: %s:" % name, e)
            failed += 1
    p_, f_ = check_fp8_spmd(exe, path, arch, c, ck, spmd_sizes)
    return passed + p_, failed + f_


def check_fp8_spmd(exe, path, arch, cfg, ck, sizes):
    """Layout spmd of an FP8 checkpoint, to bf16 and (N = 2) to f32: only unquantized tensors
    change dtype."""
    passed = failed = 0
    for N, dst_dt in [(n, "BF16") for n in sizes] + [(min(2, sizes[-1]), "F32")]:
        try:
            check(exe, path, arch, cfg, ck, "spmd", N, 1, "BF16", dst_dt)
            passed += 1
        except AssertionError as e:
            print("FAIL: %s spmd:" % os.path.basename(path), e)
            failed += 1
    return passed, failed


if __name__ == "__main__":
    main()
