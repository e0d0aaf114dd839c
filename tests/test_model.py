"""spec_from_config on raw config dicts: refusals, config files and folders, text_config nesting, tying, per-layer cache
specs; and, where torch + transformers are installed, an exact cross-check of every supported model type's parameter
count against transformers' own modules (built on the meta device, so nothing is allocated)."""

import copy
import json
from pathlib import Path

import pytest

from kvcalc.catalog import load_model
from kvcalc.errors import UnsupportedModelError, UsageError
from kvcalc.layers import FullAttention, MambaState, MultiLatentAttention, SlidingWindow
from kvcalc.model import SUPPORTED, ModelSpec, load_config_file, spec_from_config

LLAMA = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}

GEMMA3_MM = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
    # like the released configs: the text part lists only what differs from Gemma3TextConfig's defaults
    "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                    "num_hidden_layers": 34, "sliding_window": 1024,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 896,
                      "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


def test_unknown_model_type_is_refused():
    with pytest.raises(UnsupportedModelError, match="'mamba2'.*refuses rather than guess.*supported: .*llama"):
        spec_from_config({**LLAMA, "model_type": "mamba2"}, name="x")
    with pytest.raises(UnsupportedModelError, match=r"\(none\)"):
        spec_from_config({k: v for k, v in LLAMA.items() if k != "model_type"})


def test_unsupported_is_a_usage_error():
    assert issubclass(UnsupportedModelError, UsageError)


def test_unknown_layer_type_is_refused():
    cfg = {**LLAMA, "model_type": "qwen3", "head_dim": 32,
           "layer_types": ["full_attention", "linear_attention", "full_attention", "full_attention"]}
    with pytest.raises(UnsupportedModelError, match="linear_attention"):
        spec_from_config(cfg)


def test_unknown_multimodal_wrapper_is_refused():
    cfg = {"model_type": "llava", "text_config": dict(LLAMA), "vision_config": {"hidden_size": 1024}}
    with pytest.raises(UnsupportedModelError, match="vision tower"):
        spec_from_config(cfg, name="llava-x")


def test_missing_field_is_a_usage_error():
    cfg = {k: v for k, v in LLAMA.items() if k != "hidden_size"}
    with pytest.raises(UsageError, match="hidden_size"):
        spec_from_config(cfg)


def test_config_file_and_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    from_dir = load_config_file(tmp_path)
    from_file = load_config_file(tmp_path / "config.json")
    assert from_dir == from_file == LLAMA
    spec = load_model(str(tmp_path))  # a folder path through the catalog loader
    assert spec.num_layers == 4 and spec.source.startswith("folder ")  # a checkpoint folder (checkpoint.py)
    other = tmp_path / "my-model.json"
    other.write_text(json.dumps(LLAMA))
    assert load_model(str(other)).name == "my-model"
    with pytest.raises(UsageError, match="not found"):
        load_config_file(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="model config .* not valid JSON"):
        load_config_file(tmp_path / "bad.json")


def test_tied_vs_untied_lm_head():
    untied = spec_from_config(LLAMA)
    tied = spec_from_config({**LLAMA, "tie_word_embeddings": True})
    assert untied.params.lm_head == 1000 * 256 and tied.params.lm_head == 0
    assert untied.params.total - tied.params.total == 1000 * 256
    assert untied.params.embedding == tied.params.embedding == 1000 * 256
    # lm_head is never among the quantizable Linears
    assert untied.linear_params == tied.linear_params
    # model-type defaults: Gemma ties unless told otherwise, Llama does not
    gemma = {**LLAMA, "model_type": "gemma2", "head_dim": 32, "sliding_window": 128}
    del gemma["tie_word_embeddings"]
    assert spec_from_config(gemma).tie_word_embeddings
    assert not spec_from_config({k: v for k, v in LLAMA.items() if k != "tie_word_embeddings"}).tie_word_embeddings


def test_llama_by_hand():
    spec = spec_from_config(LLAMA)
    h, hd, q, kv = 256, 32, 256, 64
    assert spec.head_dim == hd and spec.num_kv_heads == 2
    assert spec.params.attention == 4 * (h * q + 2 * h * kv + q * h)
    assert spec.params.mlp == 4 * 3 * h * 512
    assert spec.params.norms == 4 * 2 * h + h
    assert spec.layers == tuple(FullAttention(2, 32, 32) for _ in range(4))
    biased = spec_from_config({**LLAMA, "attention_bias": True, "mlp_bias": True})
    assert biased.params.attention - spec.params.attention == 4 * (q + 2 * kv + h)
    assert biased.params.mlp - spec.params.mlp == 4 * (2 * 512 + h)
    assert spec_from_config({**LLAMA, "torch_dtype": "float32"}).dtype_bytes == 4


def test_gemma3_text_config_nesting():
    spec = spec_from_config(GEMMA3_MM, name="g")
    assert spec.model_type == "gemma3_text"
    # defaults filled in from Gemma3TextConfig where the released text_config is silent
    assert (spec.vocab_size, spec.num_heads, spec.num_kv_heads, spec.head_dim) == (262_208, 8, 4, 256)
    assert spec.tie_word_embeddings and spec.params.lm_head == 0
    assert spec.params.total == 3_880_263_168
    assert spec.vision_params == 419_816_304
    assert spec.params.total + spec.vision_params == 4_300_079_472  # google/gemma-3-4b-it on the hub
    assert [layer.kind for layer in spec.layers].count("full") == 5
    assert spec.layers[0] == SlidingWindow(4, 256, 256, window=1024)
    assert spec.dtype_bytes == 2
    # the same text decoder given flat (as Gemma3ForCausalLM checkpoints do) has the same count, no vision part
    flat = spec_from_config({**GEMMA3_MM["text_config"], "torch_dtype": "bfloat16"})
    assert flat.params == spec.params and flat.vision_params == 0


def test_gemma3_layer_types_win_over_pattern():
    cfg = copy.deepcopy(GEMMA3_MM["text_config"])
    cfg["num_hidden_layers"] = 4
    cfg["layer_types"] = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert [layer.kind for layer in spec_from_config(cfg).layers] == ["full", "sliding", "sliding", "full"]
    cfg = {**cfg, "layer_types": None, "sliding_window_pattern": 2}
    assert [layer.kind for layer in spec_from_config(cfg).layers] == ["sliding", "full", "sliding", "full"]


def test_qwen_sliding_window_only_when_enabled():
    base = {**LLAMA, "model_type": "qwen2", "sliding_window": 64, "max_window_layers": 2}
    assert spec_from_config({**base, "use_sliding_window": False}).layer_kinds == {"full"}
    layers = spec_from_config({**base, "use_sliding_window": True}).layers
    assert [layer.kind for layer in layers] == ["full", "full", "sliding", "sliding"]
    assert layers[3] == SlidingWindow(2, 32, 32, window=64)


def test_mistral_window_default_and_null():
    cfg = {**LLAMA, "model_type": "mistral"}
    assert set(spec_from_config(cfg).layers) == {SlidingWindow(2, 32, 32, window=4096)}  # MistralConfig default
    assert spec_from_config({**cfg, "sliding_window": None}).layer_kinds == {"full"}
    assert set(spec_from_config({**cfg, "sliding_window": 100}).layers) == {SlidingWindow(2, 32, 32, window=100)}


def test_qwen2_biases_and_qwen3_norms():
    q2 = spec_from_config({**LLAMA, "model_type": "qwen2"})
    base = spec_from_config(LLAMA)
    assert q2.params.attention - base.params.attention == 4 * (256 + 2 * 64)  # q/k/v biases, none on o
    q3 = spec_from_config({**LLAMA, "model_type": "qwen3", "head_dim": 128})
    assert q3.head_dim == 128 and q3.layers[0] == FullAttention(2, 128, 128)
    assert q3.params.attention == 4 * (256 * 1024 + 2 * 256 * 256 + 1024 * 256 + 2 * 128)


def test_deepseek_mla_layers():
    cfg = {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8,
           "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 32,
           "q_lora_rank": 48, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32, "vocab_size": 1000,
           "max_position_embeddings": 2048, "topk_method": "noaux_tc"}
    spec = spec_from_config(cfg)
    assert spec.layers == tuple(MultiLatentAttention(4, 32, 16, 32, 32) for _ in range(4))
    assert spec.moe.moe_layers == 3 and spec.moe.shared_experts == 1
    expert = 3 * 256 * 64
    assert spec.params.mlp - spec.params.active_mlp == 3 * (8 - 2) * expert


def test_jamba_mamba_state():
    cfg = {"model_type": "jamba", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 8,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "attn_layer_period": 4,
           "attn_layer_offset": 2, "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 8,
           "mamba_d_conv": 4, "mamba_expand": 2}
    spec = spec_from_config(cfg)
    kinds = [layer.kind for layer in spec.layers]
    assert kinds == ["mamba", "mamba", "full", "mamba", "mamba", "mamba", "full", "mamba"]
    assert spec.layers[0] == MambaState(conv_state_elements=256 * 3, ssm_state_elements=256 * 8, conv_channels=256)
    assert spec.moe.moe_layers == 4


def test_spec_is_frozen():
    spec = spec_from_config(LLAMA)
    assert isinstance(spec, ModelSpec)
    with pytest.raises(Exception):
        spec.hidden_size = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------------------------------
# Cross-check against transformers (optional: skipped where the [validate] extra is not installed)

TINY = {
    "llama": {**LLAMA, "attention_bias": True, "mlp_bias": True, "head_dim": 48},
    "mistral": {**LLAMA, "model_type": "mistral", "sliding_window": 64},
    "qwen2": {**LLAMA, "model_type": "qwen2"},
    "qwen3": {**LLAMA, "model_type": "qwen3", "head_dim": 64, "tie_word_embeddings": True},
    "phi3": {**LLAMA, "model_type": "phi3", "sliding_window": 63},
    "granite": {**LLAMA, "model_type": "granite", "attention_bias": True},
    "olmo2": {**LLAMA, "model_type": "olmo2"},
    "gemma": {**LLAMA, "model_type": "gemma", "head_dim": 48},
    "gemma2": {**LLAMA, "model_type": "gemma2", "head_dim": 48, "sliding_window": 64},
    "gemma3_text": {**LLAMA, "model_type": "gemma3_text", "head_dim": 48, "sliding_window": 64},
    "mixtral": {**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {**LLAMA, "model_type": "qwen3_moe", "head_dim": 64, "num_experts": 6, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 96, "decoder_sparse_step": 2, "mlp_only_layers": [3]},
    "deepseek_v2": {**LLAMA, "model_type": "deepseek_v2", "moe_intermediate_size": 64, "n_routed_experts": 8,
                    "n_shared_experts": 2, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                    "kv_lora_rank": 32, "q_lora_rank": None, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                    "v_head_dim": 24, "num_key_value_heads": 8, "topk_method": "greedy"},
    "deepseek_v3": {**LLAMA, "model_type": "deepseek_v3", "moe_intermediate_size": 64, "n_routed_experts": 8,
                    "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 2,
                    "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                    "v_head_dim": 24, "num_key_value_heads": 8, "n_group": 2, "topk_group": 1},
    "jamba": {**LLAMA, "model_type": "jamba", "num_hidden_layers": 8, "num_experts": 4, "num_experts_per_tok": 2,
              "attn_layer_period": 4, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
              "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 12,
              "mamba_conv_bias": True, "mamba_proj_bias": True, "use_mamba_kernels": False},
    # 2026 families read layer by layer (kvcalc/layer_kinds.py): every layer kind and MoE flavour at toy size
    "smollm3": {**LLAMA, "model_type": "smollm3", "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
    "ministral": {**LLAMA, "model_type": "ministral", "sliding_window": 64, "head_dim": 32},
    "gpt_oss": {**LLAMA, "model_type": "gpt_oss", "head_dim": 32, "num_local_experts": 4, "num_experts_per_tok": 2,
                "intermediate_size": 96, "sliding_window": 16, "attention_bias": True,
                "layer_types": ["sliding_attention", "full_attention"] * 2},
    "qwen3_next": {**LLAMA, "model_type": "qwen3_next", "head_dim": 32, "num_experts": 6, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 48, "shared_expert_intermediate_size": 64, "linear_num_key_heads": 2,
                   "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 24,
                   "linear_conv_kernel_dim": 4, "full_attention_interval": 2, "decoder_sparse_step": 1,
                   "mlp_only_layers": []},
    "qwen3_5_text": {**LLAMA, "model_type": "qwen3_5_text", "head_dim": 32, "linear_num_key_heads": 2,
                     "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 24,
                     "linear_conv_kernel_dim": 4, "layer_types": ["linear_attention", "full_attention"] * 2},
    "qwen3_5_moe_text": {**LLAMA, "model_type": "qwen3_5_moe_text", "head_dim": 32, "num_experts": 6,
                         "num_experts_per_tok": 2, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 64,
                         "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                         "linear_value_head_dim": 24, "linear_conv_kernel_dim": 4,
                         "layer_types": ["linear_attention", "full_attention"] * 2},
    "llama4_text": {**LLAMA, "model_type": "llama4_text", "head_dim": 32, "num_local_experts": 4,
                    "num_experts_per_tok": 1, "intermediate_size": 96, "intermediate_size_mlp": 160,
                    "interleave_moe_layer_step": 2, "attention_chunk_size": 64},
    "glm4_moe": {**LLAMA, "model_type": "glm4_moe", "head_dim": 32, "n_routed_experts": 6, "n_shared_experts": 1,
                 "num_experts_per_tok": 2, "moe_intermediate_size": 48, "first_k_dense_replace": 1,
                 "attention_bias": True, "partial_rotary_factor": 0.5},
    "minimax_m2": {**LLAMA, "model_type": "minimax_m2", "head_dim": 32, "num_local_experts": 4,
                   "num_experts_per_tok": 2, "intermediate_size": 96, "use_qk_norm": True, "rotary_dim": 16},
    "nemotron_h": {**LLAMA, "model_type": "nemotron_h", "num_hidden_layers": 6, "hybrid_override_pattern": "M-M*-E",
                   "head_dim": 32, "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
                   "conv_kernel": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                   "moe_shared_expert_intermediate_size": 64, "n_shared_experts": 1, "use_conv_bias": True,
                   "mamba_proj_bias": False},
    "granitemoehybrid": {**LLAMA, "model_type": "granitemoehybrid", "num_local_experts": 4, "num_experts_per_tok": 2,
                         "intermediate_size": 48, "shared_intermediate_size": 64, "mamba_d_state": 16,
                         "mamba_n_groups": 1, "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_expand": 2,
                         "mamba_d_conv": 4, "layer_types": ["mamba", "attention", "mamba", "mamba"]},
    "lfm2": {**LLAMA, "model_type": "lfm2", "conv_L_cache": 3, "block_auto_adjust_ff_dim": False,
             "layer_types": ["conv", "full_attention", "conv", "full_attention"]},
    "gemma3n_text": {**LLAMA, "model_type": "gemma3n_text", "head_dim": 32, "num_hidden_layers": 5,
                     "sliding_window": 16, "num_kv_shared_layers": 2, "intermediate_size": [256] * 5,
                     "vocab_size_per_layer_input": 500, "hidden_size_per_layer_input": 16, "laurel_rank": 8,
                     "altup_num_inputs": 4, "activation_sparsity_pattern": [0.0] * 5,
                     "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                                     "full_attention"]},
    "gemma4_text": {**LLAMA, "model_type": "gemma4_text", "head_dim": 32, "global_head_dim": 64,
                    "num_global_key_value_heads": 1, "attention_k_eq_v": True, "sliding_window": 16,
                    "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0, "enable_moe_block": True,
                    "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 48,
                    "layer_types": ["sliding_attention", "full_attention"] * 2},
    "deepseek_v32": {**LLAMA, "model_type": "deepseek_v32", "moe_intermediate_size": 64, "n_routed_experts": 8,
                     "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 2,
                     "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                     "v_head_dim": 24, "num_key_value_heads": 4, "n_group": 2, "topk_group": 1,
                     "index_n_heads": 4, "index_head_dim": 32, "index_topk": 8},
    "qwen3_vl_text": {**LLAMA, "model_type": "qwen3_vl_text", "head_dim": 64},
    "qwen3_vl_moe_text": {**LLAMA, "model_type": "qwen3_vl_moe_text", "head_dim": 64, "num_experts": 6,
                          "num_experts_per_tok": 2, "moe_intermediate_size": 96, "decoder_sparse_step": 1,
                          "mlp_only_layers": []},
    "falcon_h1": {**LLAMA, "model_type": "falcon_h1", "num_hidden_layers": 3, "head_dim": 32, "mamba_d_ssm": 256,
                  "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_n_groups": 2, "mamba_d_state": 16,
                  "mamba_d_conv": 4, "mamba_expand": 2},
    # GLM-5.2: DeepSeek V3.2's MLA + DSA with IndexCache (indexer_types "shared" layers carry no indexer)
    "glm_moe_dsa": {**LLAMA, "model_type": "glm_moe_dsa", "num_hidden_layers": 5, "moe_intermediate_size": 64,
                    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                    "first_k_dense_replace": 1, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16,
                    "qk_nope_head_dim": 32, "v_head_dim": 24, "num_key_value_heads": 4, "n_group": 1,
                    "topk_group": 1, "index_n_heads": 4, "index_head_dim": 32, "index_topk": 8,
                    "mlp_layer_types": ["dense"] + ["sparse"] * 4,
                    "indexer_types": ["full", "shared", "shared", "full", "shared"]},
    # DeepSeek V4: sliding / CSA (ratio 4, with indexer) / HCA (ratio 128) layers, hash-routed first layer, mHC
    # (no intermediate_size: V4 configs ship only moe_intermediate_size, which DeepseekV4Config aliases it to)
    "deepseek_v4": {**{k: v for k, v in LLAMA.items() if k != "intermediate_size"}, "model_type": "deepseek_v4", "num_hidden_layers": 4, "num_attention_heads": 8,
                    "num_key_value_heads": 1, "head_dim": 64, "qk_rope_head_dim": 16, "q_lora_rank": 48,
                    "o_lora_rank": 32, "o_groups": 2, "index_n_heads": 4, "index_head_dim": 32, "index_topk": 8,
                    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                    "n_shared_experts": 1, "num_hash_layers": 1, "hc_mult": 2, "sliding_window": 16,
                    "compress_ratios": [0, 4, 128, 4, 0], "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
                    "norm_topk_prob": True, "routed_scaling_factor": 1.5, "hidden_act": "silu"},
    # MiniMax M3 (transformers has no minimax_m3 config: skipped there; tests/test_late_2026_layouts.py by hand)
    "minimax_m3": {**LLAMA, "model_type": "minimax_m3", "head_dim": 32, "num_key_value_heads": 2,
                   "dense_intermediate_size": 96, "moe_intermediate_size": 48, "num_local_experts": 4,
                   "num_experts_per_tok": 2, "n_shared_experts": 1, "shared_intermediate_size": 48,
                   "moe_layer_freq": [0, 1, 1, 1], "use_qk_norm": True, "use_routing_bias": True,
                   "sparse_attention_config": {"use_sparse_attention": True, "sparse_attention_freq": [0, 1, 1, 1],
                                               "sparse_num_index_heads": 2, "sparse_index_dim": 16}},
    # Kimi K2 is DeepSeek V3's layout under its own name (transformers has no kimi_k2 config: skipped there)
    "kimi_k2": {**LLAMA, "model_type": "kimi_k2", "moe_intermediate_size": 64, "n_routed_experts": 8,
                "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                "v_head_dim": 24, "num_key_value_heads": 8},
}


def test_every_supported_type_is_cross_checked():
    assert set(TINY) == SUPPORTED


def _transformers_count(cfg: dict) -> tuple[int, int]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    try:
        config_cls = transformers.CONFIG_MAPPING[model_type]
    except KeyError:
        pytest.skip(f"this transformers has no {model_type}")
    config = config_cls(**cfg)
    with torch.device("meta"):
        if model_type == "gemma3":
            model = transformers.Gemma3ForConditionalGeneration(config)
        else:
            try:
                model = transformers.AutoModelForCausalLM.from_config(config)
            except ValueError:  # a text config with no causal-LM class of its own (qwen3_vl_text): its base model
                model = transformers.AutoModel.from_config(config)
                embed = model.get_input_embeddings().weight.numel()
                untied = 0 if cfg.get("tie_word_embeddings") else embed
                return sum(p.numel() for p in model.parameters()) + untied, 0
    params = sum(p.numel() for p in model.parameters())  # tied weights are yielded once
    stored_buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    return params, stored_buffers


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_counts_match_transformers(model_type):
    cfg = TINY[model_type]
    params, stored_buffers = _transformers_count(cfg)
    spec = spec_from_config(cfg)
    # e_score_correction_bias is a buffer in transformers but a tensor of the checkpoint: kvcalc counts it
    assert spec.params.total == params + stored_buffers
    assert len(spec.layers) == cfg["num_hidden_layers"]


def test_nemotron_latent_moe_and_block_types_match_transformers():
    """Nemotron 3 Super/Ultra: routed experts in moe_latent_size between fc1/fc2_latent_proj; Ultra's config lists
    layers_block_type instead of hybrid_override_pattern and num_hidden_layers."""
    cfg = {k: v for k, v in TINY["nemotron_h"].items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    cfg.update(moe_latent_size=24, layers_block_type=["mamba", "mlp", "mamba", "attention", "mlp", "moe"])
    params, stored_buffers = _transformers_count(cfg)
    spec = spec_from_config(cfg)
    assert spec.params.total == params + stored_buffers
    assert [layer.kind for layer in spec.layers] == ["mamba", "none", "mamba", "full", "none", "none"]
    # the latent experts: 4 experts x (24 x 48 up + 48 x 24 down) + the two projections 256 x 24 and 24 x 256,
    # against 4 experts x (256 x 48 + 48 x 256) without the latent
    plain = spec_from_config({**cfg, "moe_latent_size": None})
    assert plain.params.total - spec.params.total == 4 * 2 * 48 * (256 - 24) - 2 * 256 * 24 == 76_800


def test_gemma3_multimodal_matches_transformers():
    cfg = copy.deepcopy(GEMMA3_MM)
    cfg["text_config"].update(num_hidden_layers=2, hidden_size=128, intermediate_size=256, vocab_size=1000)
    cfg["vision_config"].update(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                image_size=112)
    cfg["mm_tokens_per_image"] = 16
    params, _ = _transformers_count(cfg)
    spec = spec_from_config(cfg)
    assert spec.params.total + spec.vision_params == params


@pytest.mark.parametrize("fixture, wrapper_part", [
    ("Qwen--Qwen3.5-27B.json", "model.visual"),
    ("Qwen--Qwen3-VL-30B-A3B-Instruct.json", "model.visual"),
    ("google--gemma-4-26B-A4B.json", "model.vision_tower"),
])
def test_vision_encoders_match_transformers(fixture, wrapper_part):
    """encoders.py against the multimodal classes transformers builds from the real configs (meta device): the
    vision tower plus, for Gemma 4, its embed_vision projection; and the text decoder equals the rest."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = json.loads((Path(__file__).parent / "fixtures" / "configs" / fixture).read_text())
    config = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "quantization_config"})
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    vision = sum(p.numel() for n, p in model.named_parameters()
                 if n.startswith(wrapper_part) or n.startswith("model.embed_vision"))
    spec = spec_from_config(cfg)
    assert spec.vision_params == vision
    assert spec.params.total + spec.vision_params == sum(p.numel() for p in model.parameters())
