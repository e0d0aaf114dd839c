"""The built-in catalog: every entry loads, and its parameter count equals the published one (or the documented
relation: published = params.total + the parts listed in published_params_extra, each explained in params_note)."""

import pytest

from kvcalc.catalog import catalog_entry, catalog_names, load_model
from kvcalc.errors import UsageError
from kvcalc.layers import FullAttention, MambaState, MultiLatentAttention, SlidingWindow

NAMES = catalog_names()

REQUIRED = [
    "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
    "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b",
    "qwen3-0.6b", "qwen3-4b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
    "mistral-7b-v0.3", "mistral-7b-v0.1", "mixtral-8x7b", "phi-3-mini", "phi-4",
    "gemma-2-2b", "gemma-2-9b", "gemma-3-270m", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b",
    "deepseek-v2-lite", "deepseek-v3", "jamba-v0.1", "smollm2-135m",
]

# Entries whose published total is not the loaded model's parameter count (each explained in its params_note).
EXCEPTIONS = {"qwen3-0.6b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "deepseek-v3", "medgemma-27b", "kimi-k2.5"}


def test_catalog_is_large_enough_and_complete():
    assert len(NAMES) >= 12
    assert set(REQUIRED) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_entry_loads_and_matches_published_count(name):
    entry = catalog_entry(name)
    spec = load_model(name)
    assert spec.name == name
    assert entry["params_source"]
    if entry["published_params"] is None:  # no citable hub total: the entry says its count is kvcalc's closed form
        assert "closed form" in entry["params_source"]
        entry = {**entry, "published_params": spec.params.total}
    assert isinstance(entry["published_params"], int)
    extra = entry.get("published_params_extra", {})
    assert spec.params.total + sum(extra.values()) == entry["published_params"]
    if name in EXCEPTIONS:
        assert extra and len(entry["params_note"]) > 80
    else:
        assert not extra and spec.params.total == entry["published_params"]
    # one cache spec per decoder layer, and the layer count is the config's
    text = entry["config"].get("text_config", entry["config"])
    # Nemotron 3 Ultra lists its layers as layers_block_type and has no num_hidden_layers (NemotronHConfig)
    assert len(spec.layers) == spec.num_layers == text.get("num_hidden_layers", len(text.get("layers_block_type", ())))
    # quantizable Linears never include the embedding or lm_head, and never exceed what is left
    assert 0 < spec.linear_params <= spec.params.total - spec.params.embedding - spec.params.lm_head
    assert spec.params.active <= spec.params.total


@pytest.mark.parametrize("name", NAMES)
def test_entry_uses_config_field_names(name):
    entry = catalog_entry(name)
    cfg = entry["config"]
    text = cfg.get("text_config", cfg)
    if entry.get("config_source"):  # a verbatim copy of the hub's config.json: its fields are what they are
        assert entry["config_source"].startswith(("https://", "tests/")), entry["config_source"]
        assert "model_type" in text or cfg.get("model_type")  # a wrapper names its decoder (TEXT_TYPE_OF_WRAPPER)
        assert "num_hidden_layers" in text or "layers_block_type" in text
        return
    for key in ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        assert key in text, key
    assert "torch_dtype" in cfg


def test_llama_3_2_3b_by_part():
    spec = load_model("llama-3.2-3b")
    p = spec.params
    assert p.embedding == 128256 * 3072 == 394_002_432
    assert p.attention == 28 * 25_165_824  # q 3072x3072, k/v 3072x1024, o 3072x3072
    assert p.mlp == 28 * 75_497_472  # 3 x 3072 x 8192
    assert p.norms == 28 * 2 * 3072 + 3072
    assert p.lm_head == 0 and spec.tie_word_embeddings
    assert p.other == 0 and p.active_mlp is None
    assert p.total == 3_212_749_824
    assert spec.layers == tuple(FullAttention(8, 128, 128) for _ in range(28))
    assert spec.linear_params == p.attention + p.mlp  # no biases: every projection is a quantizable Linear
    assert spec.rotary_dim == 128


def test_explicit_head_dim_qwen3():
    # Qwen3-32B: 5120 / 64 heads would give 80, the config says 128.
    spec = load_model("qwen3-32b")
    assert spec.head_dim == 128 != spec.hidden_size // spec.num_heads == 80
    assert spec.layers[0] == FullAttention(8, 128, 128)
    small = load_model("qwen3-0.6b")
    assert small.head_dim == 128 != small.hidden_size // small.num_heads == 64
    # Qwen3-8B happens to agree (4096 / 32 = 128): the explicit value is used all the same.
    eight = load_model("qwen3-8b")
    assert eight.head_dim == 128 and eight.layers[0].elements_per_token() == 8 * 256
    # q/k norms: 2 x head_dim per layer in attention
    assert eight.params.attention == 36 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 2 * 128)


@pytest.mark.parametrize("name,full,sliding,window", [
    ("gemma-3-270m", 3, 15, 512),  # layer_types listed in the config
    ("gemma-3-1b", 4, 22, 512),
    ("gemma-3-4b", 5, 29, 1024),
    ("gemma-3-12b", 8, 40, 1024),
    ("gemma-3-27b", 10, 52, 1024),
])
def test_gemma3_layer_pattern(name, full, sliding, window):
    spec = load_model(name)
    kinds = [layer.kind for layer in spec.layers]
    assert kinds.count("full") == full and kinds.count("sliding") == sliding
    for i, layer in enumerate(spec.layers):  # every 6th layer (5, 11, ...) is global
        assert layer.kind == ("full" if (i + 1) % 6 == 0 else "sliding")
        if layer.kind == "sliding":
            assert isinstance(layer, SlidingWindow) and layer.window == window
        assert layer.num_kv_heads == spec.num_kv_heads and layer.head_dim == spec.head_dim


def test_gemma3_multimodal_text_part_only():
    spec = load_model("gemma-3-4b")
    entry = catalog_entry("gemma-3-4b")
    assert spec.model_type == "gemma3_text" and spec.vocab_size == 262_208
    assert spec.vision_params == entry["published_params_extra"]["vision_tower_and_projector"]
    assert spec.params.total + spec.vision_params == entry["published_params"] == 4_300_079_472
    # SigLIP so400m at 896 px, computed by hand: embeddings + 27 layers + post-norm, then the projector
    d, inter = 1152, 4304
    siglip = (3 * 14 * 14 * d + d + 64 * 64 * d) + 27 * (4 * (d * d + d) + 2 * d * inter + inter + d + 4 * d) + 2 * d
    assert spec.vision_params == siglip + d * 2560 + d


def test_gemma2_alternates_starting_with_sliding():
    spec = load_model("gemma-2-2b")
    assert [layer.kind for layer in spec.layers[:4]] == ["sliding", "full", "sliding", "full"]
    assert sum(layer.kind == "sliding" for layer in spec.layers) == 13
    assert spec.layers[0] == SlidingWindow(4, 256, 256, window=4096)


def test_mistral_window_by_version():
    assert set(load_model("mistral-7b-v0.1").layers) == {SlidingWindow(8, 128, 128, window=4096)}
    assert set(load_model("mistral-7b-v0.3").layers) == {FullAttention(8, 128, 128)}


def test_phi3_mini_4k_slides_everywhere_and_fuses_projections():
    spec = load_model("phi-3-mini")
    assert set(spec.layers) == {SlidingWindow(32, 96, 96, window=2047)}
    names = {g.name: g for g in spec.linears}
    assert names["qkv_proj"].out_features == 3 * 3072 and names["gate_up_proj"].out_features == 2 * 8192


def test_qwen25_sliding_window_is_off_in_released_configs():
    for name in ("qwen2.5-7b", "qwen2.5-72b"):
        spec = load_model(name)
        assert spec.config["sliding_window"] and not spec.config["use_sliding_window"]
        assert spec.layer_kinds == {"full"}


def test_deepseek_v3_mla_and_moe():
    spec = load_model("deepseek-v3")
    assert spec.layer_kinds == {"mla"} and len(spec.layers) == 61
    mla = spec.layers[0]
    assert isinstance(mla, MultiLatentAttention)
    assert mla.latent_elements_per_token() == 512 + 64
    assert mla.decompressed_elements_per_token() == 128 * (128 + 64 + 128)
    assert spec.moe.num_experts == 256 and spec.moe.experts_per_token == 8 and spec.moe.shared_experts == 1
    assert spec.moe.moe_layers == 61 - 3 and spec.moe.expert_intermediate_size == 2048
    assert spec.intermediate_size == 18432  # the 3 dense layers' width
    assert spec.rotary_dim == 64 and spec.head_dim == 192
    # the relation to the hub's 685B: main model + MTP layer + FP8 block scales
    entry = catalog_entry("deepseek-v3")
    assert spec.params.total == 671_026_419_200
    assert entry["published_params_extra"] == {"mtp_layer": 13_463_426_304, "fp8_weight_scale_inv": 41_540_496}
    # the MTP layer by hand: one MoE decoder layer + enorm/hnorm/eh_proj/shared_head.norm + embed and head copies
    h, v, experts = 7168, 129280, 256
    attention = h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h
    moe = (experts + 1) * 3 * h * 2048 + experts * h + experts
    assert attention + moe + 2 * h + 2 * h + 2 * h * h + h + 2 * v * h == 13_463_426_304
    # router weights and e_score_correction_bias stay float32 in transformers
    assert spec.fp32_params == 58 * (256 * h + 256)


def test_deepseek_v2_lite_mla_without_q_lora():
    spec = load_model("deepseek-v2-lite")
    assert spec.layers[0] == MultiLatentAttention(16, 512, 64, 128, 128)
    assert "q_proj" in {g.name for g in spec.linears} and "q_a_proj" not in {g.name for g in spec.linears}
    assert spec.moe.moe_layers == 26 and spec.moe.shared_experts == 2


def test_mixtral_active_vs_total():
    spec = load_model("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    assert spec.params.total == 46_702_792_704
    assert spec.params.active == spec.params.total - 32 * (8 - 2) * expert == 12_879_925_248
    assert spec.moe.num_experts == 8 and spec.moe.experts_per_token == 2
    names = {g.name: g for g in spec.linears}
    assert names["experts.gate_proj"].count == 32 * 8
    assert names["router"] == names["router"].__class__("router", 4096, 8, 32)
    # every parameter outside embeddings, lm_head and norms is a quantizable Linear (no biases in Mixtral)
    assert spec.linear_params == spec.params.total - spec.params.embedding - spec.params.lm_head - spec.params.norms


def test_qwen3_moe_active():
    spec = load_model("qwen3-30b-a3b")
    expert = 3 * 2048 * 768
    assert spec.params.active == spec.params.total - 48 * (128 - 8) * expert
    assert spec.intermediate_size == 768 == spec.moe.expert_intermediate_size  # no dense layers


def test_jamba_hybrid_layers():
    spec = load_model("jamba-v0.1")
    attention = [i for i, layer in enumerate(spec.layers) if layer.kind == "full"]
    assert attention == [4, 12, 20, 28]
    mamba = [layer for layer in spec.layers if layer.kind == "mamba"]
    assert len(mamba) == 28 and set(mamba) == {MambaState(8192 * 3, 8192 * 16, conv_channels=8192)}
    assert spec.moe.moe_layers == 16 and spec.params.other > 0
    assert spec.rotary_dim == 0  # Jamba has no positional encoding
    assert load_model("jamba-1.5-mini").params.total == spec.params.total


def test_load_by_hub_id():
    assert load_model("Qwen/Qwen3-8B").name == "qwen3-8b"
    assert load_model("meta-llama/llama-3.2-3b-instruct").name == "llama-3.2-3b"
    assert load_model("deepseek-ai/DeepSeek-V3").params.total == 671_026_419_200


def test_hub_ids_are_unique():
    ids = [catalog_entry(n)["hf_id"].lower() for n in NAMES]
    assert len(ids) == len(set(ids))


def test_unknown_name_suggests():
    with pytest.raises(UsageError, match="did you mean.*qwen3-8b"):
        load_model("qwen3-8")
    with pytest.raises(UsageError, match="unknown model"):
        load_model("zzzzzz")


def test_medgemma_index_total_parameters_counts_the_tied_lm_head_twice():
    """medgemma-27b-it's model.safetensors.index.json: total_size 54,864,813,280 B = 2 B x (text 27,009,346,304 +
    SigLIP tower and projector 423,060,336); its total_parameters 28,842,036,848 adds the tied embedding a second
    time as lm_head: 262,208 x 5,376 = 1,409,630,208."""
    spec = load_model("medgemma-27b")
    assert spec.tie_word_embeddings and spec.params.lm_head == 0
    assert (spec.params.total + spec.vision_params) * 2 == 54_864_813_280
    assert 28_842_036_848 - (spec.params.total + spec.vision_params) == 262_208 * 5_376 == spec.params.embedding
    assert spec.wrapper_type == "gemma3"


def test_kimi_k25_moonvit_in_closed_form():
    """Kimi-K2.5 = Kimi K2's text decoder + MoonViT (vision_config) + its patch-merger projector, by hand."""
    vc = catalog_entry("kimi-k2.5")["config"]["vision_config"]
    w, ff, n = vc["vt_hidden_size"], vc["vt_intermediate_size"], vc["vt_num_hidden_layers"]
    patch = 3 * vc["patch_size"] ** 2 * w + w
    pos = vc["init_pos_emb_height"] * vc["init_pos_emb_width"] * w  # learned 2D; the temporal part is fixed
    layer = 2 * (2 * w) + (w * 3 * w + 3 * w) + (w * w + w) + (w * ff + ff) + (ff * w + w)
    merged = w * vc["merge_kernel_size"][0] * vc["merge_kernel_size"][1]
    projector = 2 * w + (merged * merged + merged) + (merged * vc["text_hidden_size"] + vc["text_hidden_size"])
    tower = patch + pos + n * layer + 2 * w + projector
    assert tower == 471_143_920 == catalog_entry("kimi-k2.5")["published_params_extra"][
        "moonvit_vision_tower_and_projector"]
    assert load_model("kimi-k2.5").params.total == load_model("kimi-k2").params.total
