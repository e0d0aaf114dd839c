"""Issue 9.2/9.3: every 2026 family read from its real config.json, with its per-token cache bytes and per-sequence
state bytes computed by hand here (bf16 cache, TP 1, vLLM's accounting unless said otherwise).

Fixtures: tests/fixtures/configs/ (verbatim copies, SOURCES.md); the three families without a verbatim copy found
(Gemma 3n, Granite 4.0-H, GLM-4.5-Air) use the configs the H200 runs were started with
(scripts/gpu_v2/configs/, each with a `_source` naming the public copy and what was changed: layers cut to fit one
GPU for GLM-4.5-Air).

Per token: every attention layer's K + V (MLA: the latent, + DSA indexer key), sliding / chunked layers counted in
full (the read of a long context). Per sequence: the recurrent states (conv + SSM), vLLM's
MambaStateShapeCalculator shapes and dtypes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.engines.hf import hf_bytes_per_token
from kvcalc.engines.vllm_groups import _mamba_dtype_bytes
from kvcalc.engines.vllm_specs import vllm_bytes_per_token
from kvcalc.errors import UnsupportedModelError, UsageError
from kvcalc.formats import kv_format
from kvcalc.layers import ChunkedLocal, MambaState, MultiLatentAttention, NoCache, SlidingWindow
from kvcalc.model import spec_from_config

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
GPU_CONFIGS = ROOT / "scripts" / "gpu_v2" / "configs"
AUTO = kv_format("auto")
BF16 = 2


def load(name: str):
    path = FIXTURES / name if (FIXTURES / name).exists() else GPU_CONFIGS / name
    cfg = json.loads(path.read_text())
    cfg.pop("_source", None)
    return spec_from_config(cfg, name)


def per_token(spec) -> int:
    return vllm_bytes_per_token(spec.layers, AUTO, spec.dtype_bytes)


def state_bytes(spec) -> int:
    """Bytes of recurrent state one sequence holds in vLLM (conv in the model dtype, SSM by vLLM's dtype rule)."""
    states = [layer for layer in spec.layers if isinstance(layer, MambaState)]
    if not states:
        return 0
    ssm_override = next((s.ssm_dtype_bytes for s in states if s.ssm_dtype_bytes), None)
    conv_b, ssm_b = _mamba_dtype_bytes(spec.model_type, spec.dtype_bytes, None, ssm_override)
    return sum(s.conv_state_elements * conv_b + s.ssm_state_elements * ssm_b for s in states)


def kinds(spec) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in spec.layers:
        kind = getattr(layer, "mixer", layer.kind)
        out[kind] = out.get(kind, 0) + 1
    return out


# (fixture, layer kinds, bytes per token, state bytes per sequence), each computed by hand in the comment
CASES = [
    # gpt-oss: 24 / 36 layers alternating sliding(128)/full, 8 KV heads x 64: 8 * 64 * 2 (K, V) * 2 B = 2,048 B/layer
    ("openai--gpt-oss-20b.json", {"sliding": 12, "full": 12}, 24 * 2_048, 0),
    ("openai--gpt-oss-120b.json", {"sliding": 18, "full": 18}, 36 * 2_048, 0),
    # Qwen3 dense: 64 layers x 8 KV heads x head_dim 128 (explicit; 5120/64 = 80 would be wrong) x 2 x 2 B
    ("Qwen--Qwen3-32B.json", {"full": 64}, 64 * 8 * 128 * 2 * 2, 0),
    # Qwen3 MoE: 94 layers x 4 KV heads x 128 x 2 x 2 B
    ("Qwen--Qwen3-235B-A22B.json", {"full": 94}, 94 * 4 * 128 * 2 * 2, 0),
    # Qwen3-Next: 12 full layers (every 4th) x 2 KV heads x 256 x 2 x 2 = 2,048 B each; 36 Gated DeltaNet layers:
    # conv 3 x (2*16*128 + 32*128) = 24,576, state 32 x 128 x 128 = 524,288 elements, both bf16 (no mamba_ssm_dtype)
    ("Qwen--Qwen3-Next-80B-A3B-Instruct.json", {"gdn": 36, "full": 12}, 12 * 2_048,
     36 * (24_576 + 524_288) * 2),
    # Qwen3.5 27B: 16 full x 4 KV x 256 x 2 x 2 = 4,096 B each; 48 GDN: conv 3 x (2*16*128 + 48*128) = 30,720,
    # state 48 x 128 x 128 = 786,432; mamba_ssm_dtype float32 -> 30,720 x 2 + 786,432 x 4 = 3,207,168 B each
    ("Qwen--Qwen3.5-27B.json", {"gdn": 48, "full": 16}, 16 * 4_096, 48 * 3_207_168),
    # Qwen3.5 35B-A3B: 10 full x 2 KV x 256 x 4 = 2,048 B; 30 GDN: conv 3 x (4096 + 32*128) = 24,576 (bf16),
    # state 32 x 128 x 128 fp32 -> 49,152 + 2,097,152 = 2,146,304 B (vLLM's page on the H200 before padding)
    ("Qwen--Qwen3.5-35B-A3B.json", {"gdn": 30, "full": 10}, 10 * 2_048, 30 * 2_146_304),
    # Qwen3.5 397B: 15 full x 2 KV x 256 x 4 = 2,048 B; 45 GDN with 64 value heads: conv 3 x (4096 + 8192) = 36,864,
    # state 64 x 128 x 128 = 1,048,576 fp32 -> 73,728 + 4,194,304 = 4,268,032 B
    ("Qwen--Qwen3.5-397B-A17B.json", {"gdn": 45, "full": 15}, 15 * 2_048, 45 * 4_268_032),
    # Gemma 3 27B (medgemma): 62 layers (52 sliding 1024 + 10 full) x 16 KV x 128 x 2 x 2 B = 8,192 B each
    ("google--medgemma-27b-it.json", {"sliding": 52, "full": 10}, 62 * 8_192, 0),
    # Gemma 4 26B-A4B: 25 sliding x 8 KV x 256 x 4 = 8,192 B; 5 global x 2 KV x 512 x 4 = 4,096 B (attention_k_eq_v:
    # K and V are the same projection, but both are cached: transformers and vLLM write keys and values)
    ("google--gemma-4-26B-A4B.json", {"sliding": 25, "full": 5}, 25 * 8_192 + 5 * 4_096, 0),
    # Gemma 4 31B: 50 sliding x 16 KV x 256 x 4 = 16,384 B; 10 global x 4 KV x 512 x 4 = 8,192 B
    ("nvidia--Gemma-4-31B-IT-NVFP4.json", {"sliding": 50, "full": 10}, 50 * 16_384 + 10 * 8_192, 0),
    # Gemma 3n E4B: 35 layers, the last 15 share KV (num_kv_shared_layers): 16 sliding(512) + 4 full keep a cache,
    # each 2 KV x 256 x 4 = 2,048 B
    ("gemma-3n-e4b-text.json", {"sliding": 16, "full": 4, "none": 15}, 20 * 2_048, 0),
    # Llama 4: 48 layers, 36 chunked (8192) + 12 full (every 4th, NoPE), 8 KV x 128 x 4 = 4,096 B each
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct.json", {"chunked": 36, "full": 12}, 48 * 4_096, 0),
    ("meta-llama--Llama-4-Maverick-17B-128E-Instruct.json", {"chunked": 36, "full": 12}, 48 * 4_096, 0),
    # DeepSeek V3 / R1, Kimi K2: 61 MLA layers caching the latent 512 + rope 64 = 576 x 2 B = 1,152 B each
    ("deepseek-ai--DeepSeek-V3.json", {"mla": 61}, 61 * 1_152, 0),
    ("deepseek-ai--DeepSeek-R1.json", {"mla": 61}, 61 * 1_152, 0),
    ("moonshotai--Kimi-K2-Instruct.json", {"mla": 61}, 61 * 1_152, 0),
    # DeepSeek V3.2: + the indexer key, 128 fp8 + 4 B scale = 132 B per layer per token
    ("deepseek-ai--DeepSeek-V3.2.json", {"mla": 61}, 61 * (1_152 + 132), 0),
    # GLM-4.5-Air (16 of its 46 layers, as run on the H200): 8 KV x 128 x 4 = 4,096 B each
    ("glm-4.5-air-l16.json", {"full": 16}, 16 * 4_096, 0),
    # MiniMax-M2.5: 62 layers x 8 KV x 128 x 4
    ("MiniMaxAI--MiniMax-M2.5.json", {"full": 62}, 62 * 4_096, 0),
    # Nemotron-H 56B: 118 blocks = 54 Mamba2 + 10 attention + 54 MLP-only. Attention 8 KV x 128 x 4 = 4,096 B.
    # Mamba2: conv 3 x (256*64 + 2*8*256) = 61,440 bf16, SSM 256 x 64 x 256 = 4,194,304 fp32 (vLLM's Nemotron-H
    # default) -> 122,880 + 16,777,216 = 16,900,096 B each
    ("nvidia--Nemotron-H-56B-Base-8K.json", {"mamba2": 54, "full": 10, "none": 54}, 10 * 4_096, 54 * 16_900_096),
    # Nemotron 3 Nano 30B-A3B: 23 Mamba2 + 6 attention + 23 MoE-only. Attention 2 KV x 128 x 4 = 1,024 B. Mamba2:
    # conv 3 x (64*64 + 2*8*128) = 18,432 bf16, SSM 64 x 64 x 128 = 524,288 fp32 -> 36,864 + 2,097,152 = 2,134,016
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", {"mamba2": 23, "full": 6, "none": 23}, 6 * 1_024,
     23 * 2_134_016),
    # Granite 4.0-H-Tiny: 36 Mamba2 + 4 attention (4 KV x 128 x 4 = 2,048 B). Mamba2: conv 3 x (48*64 + 2*1*128) =
    # 9,984, SSM 48 x 64 x 128 = 393,216, both bf16 -> 806,400 B each
    ("granite-4.0-h-tiny.json", {"mamba2": 36, "full": 4}, 4 * 2_048, 36 * 806_400),
    # LFM2-1.2B: 6 attention (8 KV x 64 x 4 = 2,048 B) + 10 short convs, conv state (3-1) x 2048 x 2 B = 8,192 B
    ("LiquidAI--LFM2-1.2B.json", {"short_conv": 10, "full": 6}, 6 * 2_048, 10 * 8_192),
    # Mistral Small 3.x (Devstral-Small-2507): 40 layers x 8 KV x head_dim 128 (explicit; 5120/32 = 160) x 4
    ("mistralai--Devstral-Small-2507.json", {"full": 40}, 40 * 4_096, 0),
    # SmolLM3-3B: 36 layers x 4 KV x 128 x 4 (NoPE layers cache the same)
    ("HuggingFaceTB--SmolLM3-3B.json", {"full": 36}, 36 * 2_048, 0),
]


@pytest.mark.parametrize("fixture, layer_kinds, bytes_per_token, state", CASES, ids=[c[0] for c in CASES])
def test_cache_bytes_by_hand(fixture, layer_kinds, bytes_per_token, state):
    spec = load(fixture)
    assert kinds(spec) == layer_kinds
    assert per_token(spec) == bytes_per_token
    assert state_bytes(spec) == state


def test_sliding_and_chunked_windows_come_from_the_config():
    assert {layer.window for layer in load("openai--gpt-oss-20b.json").layers
            if isinstance(layer, SlidingWindow)} == {128}
    scout = load("meta-llama--Llama-4-Scout-17B-16E-Instruct.json")
    chunked = [i for i, layer in enumerate(scout.layers) if isinstance(layer, ChunkedLocal)]
    assert {scout.layers[i].window for i in chunked} == {8192}
    assert [i for i in range(48) if i not in chunked] == list(range(3, 48, 4))  # NoPE layers 3, 7, ... attend fully


def test_gemma3n_shared_layers_point_at_the_last_own_layer_of_their_type():
    spec = load("gemma-3n-e4b-text.json")
    shared = {i: layer.shares_with for i, layer in enumerate(spec.layers) if isinstance(layer, NoCache)}
    assert sorted(shared) == list(range(20, 35))
    assert shared[24] == 19 and shared[20] == 18  # layer 24 full -> 19 (last full of 0-19); 20 sliding -> 18


def test_transformers_caches_mla_decompressed():
    # transformers' DeepseekV3 cache: 128 heads x (nope 128 + rope 64) keys + 128 x 128 values, bf16, 61 layers
    spec = load("deepseek-ai--DeepSeek-V3.json")
    assert hf_bytes_per_token(spec.layers, AUTO, BF16) == 61 * 128 * (128 + 64 + 128) * 2
    assert all(isinstance(layer, MultiLatentAttention) and layer.index_head_dim == 0 for layer in spec.layers)


# --------------------------------------------------------------------------------------------------- parameter counts

TOTALS = json.loads((FIXTURES / "param_totals.json").read_text())
# fixtures whose hub total is known; the counts are the text decoder as vLLM and transformers load it
KNOWN = {
    "openai--gpt-oss-20b.json": "openai/gpt-oss-20b",  # logical counts, mxfp4 scales excluded (param_totals note)
    "openai--gpt-oss-120b.json": "openai/gpt-oss-120b",
    "LiquidAI--LFM2-1.2B.json": "LiquidAI/LFM2-1.2B",
    "mistralai--Devstral-Small-2507.json": "mistralai/Devstral-Small-2507",
}


@pytest.mark.parametrize("fixture, hub_id", sorted(KNOWN.items()))
def test_parameter_counts_equal_the_hub_totals(fixture, hub_id):
    assert load(fixture).params.total == TOTALS[hub_id]["total_params"]


def test_kimi_k25_text_decoder_and_its_moonvit_tower():
    """Kimi-K2.5 (hub total 1,026,879,376,368 with MoonViT): the text decoder is counted exactly as Kimi K2's
    layout, and MoonViT (encoders.py, from vLLM 0.26.0's kimi_k25_vit.py) is the remaining 471,143,920 exactly."""
    k25 = load("moonshotai--Kimi-K2.5.json")
    assert k25.params.total == load("moonshotai--Kimi-K2-Instruct.json").params.total
    assert k25.uncounted == ()
    assert k25.vision_params == 471_143_920
    assert TOTALS["moonshotai/Kimi-K2.5"]["total_params"] == k25.params.total + k25.vision_params


# --------------------------------------------------------------------------------------------------- refusals


def test_unknown_layer_kind_is_refused_by_name():
    cfg = json.loads((FIXTURES / "openai--gpt-oss-20b.json").read_text())
    cfg["layer_types"] = ["sliding_attention"] * 23 + ["hash_attention"]
    with pytest.raises(UnsupportedModelError, match="'hash_attention'"):
        spec_from_config(cfg, "x")


def test_unknown_hybrid_pattern_character_is_refused():
    cfg = json.loads((FIXTURES / "nvidia--Nemotron-H-56B-Base-8K.json").read_text())
    cfg["hybrid_override_pattern"] = "X" + cfg["hybrid_override_pattern"][1:]
    with pytest.raises(UnsupportedModelError, match="'X'"):
        spec_from_config(cfg, "x")


@pytest.mark.parametrize("field", ["linear_num_value_heads", "linear_key_head_dim"])
def test_a_missing_state_field_is_named(field):
    cfg = json.loads((FIXTURES / "Qwen--Qwen3-Next-80B-A3B-Instruct.json").read_text())
    del cfg[field]
    if field == "linear_num_value_heads":  # without it the interval no longer says "Gated DeltaNet": all full
        assert set(kinds(spec_from_config(cfg, "x"))) == {"full"}
        return
    with pytest.raises(UsageError, match=field):
        spec_from_config(cfg, "x")


def test_deepseek_v32_sparse_mla_in_vllm():
    """FLASHMLA_SPARSE (flashmla_sparse.py): block 64. Per layer and token: the latent 576 x 2 B (auto) or the
    fp8_ds_mla record 512 + 4 x 4 + 64 x 2 = 656 B (fp8), plus the indexer's 132 B. A block of 61 layers:
    61 x 64 x (1,152 + 132) = 5,012,736 B (auto), 61 x 64 x (656 + 132) = 3,076,352 B (fp8). No other GPU than
    sm90 / sm100 has a sparse-MLA backend: refused, with that reason."""
    from kvcalc.engines.vllm_groups import vllm_kv_layout

    spec = load("deepseek-ai--DeepSeek-V3.2.json")
    auto = vllm_kv_layout(spec.layers, AUTO, 2, None, 1, 8192, spec.model_type)
    assert (auto.block_size, auto.bytes_per_block) == (64, 5_012_736)
    fp8 = vllm_kv_layout(spec.layers, kv_format("fp8"), 2, None, 1, 8192, spec.model_type, compute_capability=10.0)
    assert (fp8.block_size, fp8.bytes_per_block) == (64, 3_076_352)
    with pytest.raises(NotImplementedError, match="FLASHMLA_SPARSE"):
        vllm_kv_layout(spec.layers, AUTO, 2, None, 1, 8192, spec.model_type, compute_capability=8.0)


def test_transformers_recurrent_state_bytes():
    """transformers 5.x LinearAttentionLayer: conv (channels x K) in bf16, recurrent state in fp32. Qwen3-Next GDN:
    channels 2*16*128 + 32*128 = 8,192 -> 8,192 x 4 x 2 B = 65,536; state 32 x 128 x 128 x 4 B = 2,097,152."""
    from kvcalc.engines.hf import hf_layer_cache_bytes

    spec = load("Qwen--Qwen3-Next-80B-A3B-Instruct.json")
    gdn = next(layer for layer in spec.layers if isinstance(layer, MambaState))
    assert hf_layer_cache_bytes(gdn, 1, 1000, 1000, AUTO, BF16) == 65_536 + 2_097_152
    assert hf_layer_cache_bytes(gdn, 3, 1000, 1000, AUTO, BF16) == 3 * (65_536 + 2_097_152)


def test_vllm_replicates_mamba2_groups_under_tp():
    """Granite 4.0-H-Tiny, TP 2: n_groups 1 is replicated to 2 (extra_groups_for_head_shards), so the conv channels are
    3,072 + 2 x 2 x 128 = 3,584, halved: 3 x 1,792 x 2 B = 10,752; SSM 48/2 heads x 64 x 128 x 2 B = 393,216."""
    from kvcalc.engines.vllm_specs import mamba_page

    layer = next(layer for layer in load("granite-4.0-h-tiny.json").layers if isinstance(layer, MambaState))
    assert mamba_page(layer, 1, 2, 2) == 806_400
    assert mamba_page(layer, 2, 2, 2) == 10_752 + 393_216


def test_the_plan_charges_the_encoder_weights_and_names_those_it_cannot_count(tmp_path):
    from cli_helper import invoke

    code, out, err = invoke(["explain", "--model", str(FIXTURES / "Qwen--Qwen3.5-27B.json"), "--gpu", "h200",
                             "--engine", "vllm"])
    assert code == 0
    assert "qwen3_vl image encoder: 460,730,096 params, 921,460,192 B in the weights" in out
    assert "not in their weights" not in out + err
    cfg = json.loads((FIXTURES / "Qwen--Qwen3.5-27B.json").read_text())
    cfg["audio_config"] = {"model_type": "some_audio_tower"}  # a tower kvcalc has no closed form for
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = invoke(["plan", "--model", str(path), "--gpu", "h200", "--engine", "vllm"])
    assert "not in their weights: audio encoder (qwen3_5.audio_config, not counted)" in out + err


def test_falcon_h1_parallel_hybrid_from_its_config_defaults():
    """Falcon-H1 (no verbatim config.json found: FalconH1Config's defaults, transformers 5.24): 32 layers, each with
    attention (8 KV heads x 4096/32 = 128: 8 x 128 x 2 x 2 B = 4,096 B/token) beside a Mamba2 mixer (mamba_d_ssm
    1024, 128 heads x 8, 1 group, state 256: conv 3 x (1024 + 2 x 256) = 4,608, SSM 128 x 8 x 256 = 262,144
    elements, bf16: 533,504 B). vLLM aligns the block so 16 x cdiv(533,504, 16 x 4,096) = 144 tokens of attention
    cover one state page (144 x 4,096 = 589,824 B), then keeps 32 attention + 32 Mamba layers in 2 groups of 32."""
    from kvcalc.engines.vllm_groups import vllm_kv_layout

    cfg = {"model_type": "falcon_h1", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128000, "mamba_d_ssm": 1024,
           "mamba_n_heads": 128, "mamba_d_head": 8, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
           "mamba_expand": 2, "max_position_embeddings": 8192}
    spec = spec_from_config(cfg, "falcon-h1-defaults")
    assert spec.layer_kinds == {"full", "mamba"} and kinds(spec) == {"parallel": 32}
    assert per_token(spec) == 32 * 4_096
    states = [layer.state for layer in spec.layers]
    assert {s.conv_state_elements for s in states} == {4_608} and {s.ssm_state_elements for s in states} == {262_144}
    # transformers: its KV (1 token: 4,096 B) + conv 1,536 x 4 x 2 B + SSM 262,144 x 4 B (fp32)
    from kvcalc.engines.hf import hf_layer_cache_bytes
    assert hf_layer_cache_bytes(spec.layers[0], 1, 1, 1, AUTO, 2) == 4_096 + 12_288 + 1_048_576
    layout = vllm_kv_layout(spec.layers, AUTO, 2, None, 1, 8192, spec.model_type)
    assert layout.cache_block_size == 144 and layout.mamba_page_padded == 589_824
    assert [(g.kind, g.n_layers) for g in layout.groups] == [("full", 32), ("mamba", 32)]
    assert layout.bytes_per_block == 32 * 589_824


def test_phi4_from_the_catalog():
    """Phi-4 (catalog; Phi-4-mini's config.json was not found verbatim): 40 layers x 10 KV heads x 128 x 2 x 2 B, and
    the hub's 14,659,507,200 parameters."""
    from kvcalc.catalog import load_model

    spec = load_model("phi-4")
    assert per_token(spec) == 40 * 10 * 128 * 2 * 2
    assert spec.params.total == TOTALS["microsoft/phi-4"]["total_params"]


REAL_SIZE = sorted(p.name for p in FIXTURES.glob("*.json")
                   if p.name != "param_totals.json" and "hf_quant_config" not in p.name
                   and json.loads(p.read_text()).get("model_type")
                   not in ("molmo", "deepseek_v4", "kimi_k2", "kimi_k25"))


@pytest.mark.parametrize("fixture", REAL_SIZE + ["gemma-3n-e4b-text.json", "granite-4.0-h-tiny.json"])
def test_real_size_counts_match_transformers(fixture):
    """Every fixture at its real size against the module transformers builds from it (meta device: nothing is
    allocated): text decoder + counted vision encoder = transformers' parameters (+ the e_score_correction_bias
    buffers checkpoints store). Llama 4's copies carry no vision_config: transformers builds Llama4VisionConfig's
    defaults, and so does kvcalc. Kimi K2 / K2.5 have no transformers class (their total: param_totals.json)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = FIXTURES / fixture if (FIXTURES / fixture).exists() else GPU_CONFIGS / fixture
    cfg = json.loads(path.read_text())
    cfg.pop("_source", None)
    spec = spec_from_config(dict(cfg), fixture)
    plain = {k: v for k, v in cfg.items() if k != "quantization_config"}
    config = transformers.AutoConfig.for_model(**plain)
    with torch.device("meta"):
        if "text_config" in plain and "num_hidden_layers" not in plain:
            model = transformers.AutoModelForImageTextToText.from_config(config)
        else:
            model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    total += sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert spec.params.total + spec.vision_params == total


def test_glm45_air_at_its_full_depth():
    """GLM-4.5-Air as published (the H200 config with its 46 layers restored, _source): 46 x 8 KV x 128 x 2 x 2 B of
    KV per token; partial RoPE (partial_rotary_factor 0.5) changes no cache byte; first layer dense, 45 MoE with one
    shared expert."""
    cfg = json.loads((GPU_CONFIGS / "glm-4.5-air-l16.json").read_text())
    cfg.pop("_source")
    cfg["num_hidden_layers"] = 46
    spec = spec_from_config(cfg, "glm-4.5-air")
    assert per_token(spec) == 46 * 4_096
    assert spec.moe.moe_layers == 45 and spec.moe.shared_experts == 1 and spec.moe.num_experts == 128
