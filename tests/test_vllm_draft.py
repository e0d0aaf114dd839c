"""Issue 10.3: speculative decoding's drafter in vLLM 0.26 (engines/vllm_draft.py), every figure computed by hand
here from the configs and the vLLM source lines the module cites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helper import invoke
from kvcalc.catalog import load_model
from kvcalc.engines import vllm, vllm_draft
from kvcalc.engines.vllm_groups import vllm_kv_layout
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.layers import FullAttention, MultiLatentAttention
from kvcalc.model import spec_from_config
from kvcalc.plan import speculative_settings

ROOT = Path(__file__).resolve().parent.parent
GPU_CONFIGS = ROOT / "scripts" / "gpu_v2" / "configs"
BF16 = weight_format("bf16")


def _config(name: str) -> dict:
    cfg = json.loads((GPU_CONFIGS / name).read_text())
    cfg.pop("_source", None)
    return cfg


def test_deepseek_v3_mtp_is_the_hub_mtp_layer_less_its_embedding_and_head():
    # The hub checkpoint's MTP module model.layers.61 holds 13,463,426,304 parameters (catalog published_params_extra,
    # from the safetensors metadata): one MoE decoder layer, enorm, hnorm, eh_proj (14,336 -> 7,168), shared_head.norm,
    # and its own embed_tokens and shared_head.head (129,280 x 7,168 each), which vLLM replaces by the target's
    # (llm_base_proposer.py:1473-1508, 1549-1580). What stays: 13,463,426,304 - 2 x 926,679,040 = 11,610,068,224.
    spec = load_model("deepseek-v3")
    d = vllm_draft.drafter(spec, "mtp", weights=BF16, dtype_bytes=2, tp=1)
    assert d.num_layers == 1 and d.weight_bytes == 11_610_068_224 * 2
    assert d.kv_layers == (spec.layers[-1],) and isinstance(d.kv_layers[0], MultiLatentAttention)
    assert d.layer_spec.moe.moe_layers == 1  # layer index 61 >= first_k_dense_replace 3: an MoE layer
    # TP 8: the decoder layer's projections and experts split 8 ways, its norms (3 x 7,168) and the nn.Linear eh_proj
    # (102,760,448) and enorm/hnorm whole on every rank
    layer = 187_107_328 + 11_320_164_608  # attention + MoE (kvcalc's counts of one DeepSeek-V3 MoE layer)
    d8 = vllm_draft.drafter(spec, "mtp", weights=BF16, dtype_bytes=2, tp=8)
    assert d8.weight_bytes == layer * 2 // 8 + 3 * 7_168 * 2 + 2 * 7_168 * 2 + 102_760_448 * 2


def test_qwen3_next_mtp_by_hand():
    # qwen3_next_mtp.py: one full-attention MoE decoder layer (num_nextn_predict_layers absent -> 1), fc 2h -> h,
    # norm + pre_fc_norm_hidden + pre_fc_norm_embedding. h = 2048, 16 heads x 256 with the output gate (q_proj ->
    # 2 x 4,096), 2 KV heads, q/k norms of 256; 512 experts of width 512, one shared expert of 512 and its gate.
    h = 2048
    attention = h * 8192 + 2 * h * 512 + 4096 * h + 2 * 256  # 27,263,488
    moe = 512 * h + 512 * 3 * h * 512 + 3 * h * 512 + h  # router, experts, shared expert, shared_expert_gate
    params = attention + moe + 2 * h + 2 * h * h + 3 * h
    assert params == 1_650_471_424
    spec = load_model("qwen3-next-80b-a3b")
    d = vllm_draft.drafter(spec, "mtp", weights=BF16, dtype_bytes=2, tp=1)
    assert d.weight_bytes == params * 2
    assert d.kv_layers == (FullAttention(2, 256, 256),)


def test_eagle3_head_from_specforge_config_by_hand():
    # llama_eagle3.py with SpecForge's Llama-3.1-8B head: one Llama layer (q 4096x4096, k/v 4096x1024, o, MLP 3 x
    # 4096 x 14336, 2 norms) whose qkv_proj reads 2h (+6,144 x 4,096), hidden_norm, final norm, fc 3h -> h, an own
    # lm_head over the 32,000-token draft vocabulary, draft_id_to_target_id (32,000 int64) and a rotary cache of its
    # own (max_position 2048 x 128, bf16) since its max_position differs from the target's.
    layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096
    params = layer + 4096 + 6144 * 4096 + 4096 + 3 * 4096 * 4096 + 32_000 * 4096
    expected = params * 2 + 32_000 * 8 + 2048 * 128 * 2
    assert expected == 850_159_616
    target = load_model("llama-3.1-8b")
    head = _config("eagle3-llama-3.1-8b.json")
    d = vllm_draft.drafter(target, "eagle3", dtype_bytes=2, tp=1, draft_config=head)
    assert d.weight_bytes == expected and d.own_lm_head_rows == 32_000 and d.aux_hidden_states == 3
    # load_format=dummy loads no weights, so vLLM finds no lm_head in the head and shares the target's
    dummy = vllm_draft.drafter(target, "eagle3", dtype_bytes=2, tp=1, draft_config=head, own_lm_head=False)
    assert expected - dummy.weight_bytes == 32_000 * 4096 * 2
    assert d.kv_layers == (FullAttention(8, 128, 128),)


def test_mtp_needs_an_mtp_module():
    with pytest.raises(UsageError, match="no multi-token-prediction module"):
        vllm_draft.drafter(load_model("llama-3.1-8b"), "mtp")
    with pytest.raises(UsageError, match="no multi-token-prediction module"):
        vllm_draft.drafter(load_model("kimi-k2"), "mtp")  # num_nextn_predict_layers: 0
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--engine", "vllm",
                             "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "multi-token-prediction" in err


def test_drafter_layers_join_the_kv_groups():
    gpu = get_gpu("h200")
    base = dict(weights=BF16, kv=kv_format("auto"), max_model_len=8192, enforce_eager=True)
    spec = spec_from_config(_config("deepseek-v3-l5.json"), "dsv3-l5")
    plain = vllm.estimate(spec, gpu, vllm.VllmSettings(**base))
    mtp = vllm.estimate(spec, gpu, vllm.VllmSettings(**base, speculative_method="mtp", num_speculative_tokens=1))
    # one more MLA layer in the uniform group: 64 tokens x 576 latent x 2 B per block (0.34: FLASH_ATTN_MLA on sm90
    # takes the 64-token default, MultipleOf(16); 16 at 0.33)
    assert mtp.page_bytes_all_layers - plain.page_bytes_all_layers == 64 * 576 * 2
    assert plain.page_bytes_all_layers == 5 * 73_728 and mtp.layout.group_size == 6  # 64 x 576 x 2 B per layer


def test_mamba_layers_keep_a_state_block_per_speculative_token():
    # Qwen3-Next cut to 24 layers (the H200 v3 layout): 6 full-attention + 18 GDN layers; with MTP, 7 full. Block
    # 544 (the GDN state page 1,097,728 B rounded up to attention pages of 2,048 B/token: 544 x 2,048 = 1,114,112).
    # group_size = min(7, 18) = 7 (18 >= 1.5 x 7): one full group, ceil(18 / 7) = 3 GDN groups (one padding layer
    # each). A max_model_len request: cdiv(8192, 544) = 16 attention blocks + 3 groups x (1 + k) state blocks
    # (MambaSpec.max_memory_usage_bytes, mamba_cache_mode 'none').
    spec = spec_from_config(_config("qwen3-next-80b-a3b-l24.json"), "q3n-l24")
    d = vllm_draft.drafter(spec, "mtp")
    layers = spec.layers + d.kv_layers
    for k, per_request in ((0, 16 + 3), (1, 16 + 3 * 2), (3, 16 + 3 * 4)):
        lay = vllm_kv_layout(layers if k else spec.layers, kv_format("auto"), 2, None, 1, 8192, spec.model_type,
                             mamba_speculative_blocks=k)
        assert lay.block_size == 544 and lay.max_blocks_per_request == per_request
        assert lay.group_size == (7 if k else 6) and lay.bytes_per_block == lay.group_size * 1_114_112
    # the v3 start without a drafter: 7,598 blocks -> 7,598 / 19 = 399.89x (logged kv_cache_max_concurrency)
    plain = vllm_kv_layout(spec.layers, kv_format("auto"), 2, None, 1, 8192, spec.model_type)
    assert abs(plain.max_concurrency(7598) - 399.89473684210526) < 1e-9
    assert vllm_draft.mamba_speculative_blocks(spec, "ngram", 4) == 4
    assert vllm_draft.mamba_speculative_blocks(load_model("llama-3.1-8b"), "ngram", 4) == 0


def test_runner_choice_with_a_drafter():
    # config/vllm.py:2154-2180 (0.26): the V2 runner takes eagle/eagle3/mtp, not ngram; MoE and hybrid targets stay
    # on V1. 0.29 (config/vllm.py:645-677, :2562-2574): V2 for every model, n-gram drafting still on V1
    llama, moe = load_model("llama-3.1-8b"), load_model("qwen3-30b-a3b")
    s = dict(weights=BF16, kv=kv_format("auto"), version="0.26.0")
    assert vllm.uses_v2_runner(llama, vllm.VllmSettings(**s, speculative_method="eagle3", num_speculative_tokens=3))
    assert not vllm.uses_v2_runner(llama, vllm.VllmSettings(**s, speculative_method="ngram", num_speculative_tokens=4))
    assert not vllm.uses_v2_runner(moe, vllm.VllmSettings(**s, speculative_method="eagle3", num_speculative_tokens=3))
    s["version"] = "0.29.0"
    assert vllm.uses_v2_runner(moe, vllm.VllmSettings(**s, speculative_method="eagle3", num_speculative_tokens=3))
    assert not vllm.uses_v2_runner(moe, vllm.VllmSettings(**s, speculative_method="ngram", num_speculative_tokens=4))


def test_rejection_pass_of_the_v1_profile():
    # the tensors the H200 trace of s-3b-ngram4-16k shows live at the peak (Llama-3.2-3B, V = 128,256, H = 3,072,
    # R = 1,024 sequences, M = 16,384 tokens, bf16, FlashInfer sampler off, 132 SMs): random logits 2R x V x 2 B and
    # the bonus rows R x V x 2 B; six fp32 R x V tensors; the Triton top-k/top-p buffer 132 x V x 4 B; the forward
    # output M x H x 2 B; 2 x R x H x 2 B; the cuBLAS workspace (32 MiB)
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    by_hand = 1024 * 128_256 * (6 + 24) + 132 * 128_256 * 4 + 16_384 * 3072 * 2 + 2 * 1024 * 3072 * 2 + 32 * 2**20
    assert by_hand == 4_154_544_128  # vLLM's peak_activation_memory: 4,160,932,864 (-0.15%)
    assert vllm_draft.rejection_sampler_bytes(spec, 1024, 16_384, 2, gpu, flashinfer_sampler=False) == by_hand
    # FlashInfer's sampler keeps no Triton buffer; use_fp64_gumbel doubles the noise and its reciprocal
    assert vllm_draft.rejection_sampler_bytes(spec, 1024, 16_384, 2, gpu, flashinfer_sampler=True) == \
        by_hand - 132 * 128_256 * 4
    assert vllm_draft.rejection_sampler_bytes(spec, 1024, 16_384, 2, gpu, False, fp64_gumbel=True) == \
        by_hand + 2 * 1024 * 128_256 * 4


def test_speculative_config_reads_a_local_head_config(tmp_path):
    head = _config("eagle3-llama-3.1-8b.json")
    (tmp_path / "config.json").write_text(json.dumps(head))
    got = speculative_settings({"method": "eagle3", "num_speculative_tokens": 3, "model": str(tmp_path)})
    assert got["draft_config"]["draft_vocab_size"] == 32_000
    hub = speculative_settings({"method": "eagle3", "num_speculative_tokens": 3,
                                "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"})
    assert hub["draft_config"] is None  # not fetched: the head is taken to have the target's shape
    for odd in ("a\x00b", "x" * 5000, "~nosuchuser_kvcalc/head"):
        assert speculative_settings({"method": "eagle3", "model": odd})["draft_config"] is None
    (tmp_path / "config.json").write_text("{not json")
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--engine", "vllm",
                             "--speculative-config",
                             json.dumps({"method": "eagle3", "num_speculative_tokens": 3, "model": str(tmp_path)})])
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_pipeline_parallel_drafter_keeps_its_own_embedding():
    # llm_base_proposer.py / eagle/utils.py share the target's embedding only at PP 1
    spec = load_model("deepseek-v3")
    pp1 = vllm_draft.drafter(spec, "mtp", weights=BF16, tp=8)
    pp2 = vllm_draft.drafter(spec, "mtp", weights=BF16, tp=8, pp=2)
    assert pp2.weight_bytes - pp1.weight_bytes == 129_280 // 8 * 7_168 * 2  # 129,280 is a multiple of 64
    assert "own embedding" in pp2.described
