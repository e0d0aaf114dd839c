"""Every quantization method kvcalc reads, with bytes computed by hand on small real configs.

Shapes used (Qwen2.5-0.5B-Instruct, kvcalc/catalog/qwen2.5-0.5b.json: hidden 896, 14 heads of 64, 2 KV heads,
intermediate 4864, 24 layers): q_proj/o_proj 896x896, k_proj/v_proj 896->128, gate/up 896->4864, down 4864->896.
Layouts: the vLLM create_weights() each method's docstring in kvcalc/quant_config.py cites.
"""

import json
from pathlib import Path

import pytest

from kvcalc.catalog import load_model
from kvcalc.checkpoint import closed_form_bytes
from kvcalc.errors import UsageError
from kvcalc.model import spec_from_config
from kvcalc.quant_config import Layout, find_quant_config, parse_scheme

FIXTURES = Path(__file__).parent / "fixtures" / "configs"

# awq: the shape transformers' docs quote for TheBloke/zephyr-7B-alpha-AWQ (tests/fixtures/configs/SOURCES.md)
AWQ = {"quant_method": "awq", "zero_point": True, "group_size": 128, "bits": 4, "version": "gemm"}
# gptq 4-bit group 128: the AutoGPTQ quantize_config shape of the GPTQ fixture, with bits 4 / group 128
GPTQ4 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
         "damp_percent": 0.01, "true_sequential": True}


def _fixture(name):
    return json.loads((FIXTURES / name).read_text())


# --- one Linear, by hand -----------------------------------------------------------------------------------------


def test_awq_linear_bytes():
    # q_proj 896 x 896, group 128 -> 7 groups: qweight 896*896/2, qzeros int32 [7, 896/8] = 7*896/2,
    # scales fp16 [7, 896]
    assert Layout("awq", 4, 128).linear_bytes(896, 896) == 896 * 896 // 2 + 7 * 896 // 2 + 7 * 896 * 2 == 417_088


def test_gptq_linear_bytes_has_g_idx():
    # as AWQ plus g_idx int32 [in]
    assert Layout("gptq", 4, 128).linear_bytes(896, 896) == 417_088 + 896 * 4
    # 3-bit, per channel (group_size -1, the genz-70b fixture): qweight in*3/32 int32 rows, one group of zeros/scales
    assert Layout("gptq", 3, 0).linear_bytes(8192, 8192) == 8192 * 8192 * 3 // 8 + 8192 * 3 // 8 + 8192 * 2 + 8192 * 4


def test_fp8_linear_bytes():
    # block 128x128: fp8 weight + fp32 scale per block (ceil(4864/128)=38 x ceil(896/128)=7 for gate_proj)
    block = Layout("fp8", 8, strategy="block", block=(128, 128), scale_bytes=4)
    assert block.linear_bytes(896, 4864) == 896 * 4864 + 38 * 7 * 4
    # ragged: 896 -> 128 is one block row
    assert block.linear_bytes(896, 128) == 896 * 128 + 1 * 7 * 4
    # per tensor, static activations: weight_scale + input_scale
    assert Layout("fp8", 8, scale_bytes=4, input_scales=1).linear_bytes(896, 896) == 896 * 896 + 8


def test_compressed_tensors_layouts():
    w4a16 = Layout("wna16", 4, group_size=128)  # weight_packed int32 [out, in/8], bf16 scale [out, 7], shape int64 [2]
    assert w4a16.linear_bytes(896, 896) == 896 * 896 // 2 + 896 * 7 * 2 + 16
    asym = Layout("wna16", 4, group_size=128, zero_points=True)  # + zero points int32 [out/8, 7]
    assert asym.linear_bytes(896, 896) == 896 * 896 // 2 + 896 * 7 * 2 + 16 + 896 // 8 * 4 * 7
    int8 = Layout("int8", 8, strategy="channel", scale_bytes=4)  # int8 weight + fp32 scale per output channel
    assert int8.linear_bytes(896, 4864) == 896 * 4864 + 4864 * 4
    nvfp4 = Layout("nvfp4", 4, group_size=16, input_scales=2)  # uint8 n/2 + fp8 per 16 + two fp32 globals
    assert nvfp4.linear_bytes(896, 896) == 896 * 896 // 2 + 896 * 896 // 16 + 8


def test_mxfp4_bnb_hqq_torchao_layouts():
    assert Layout("mxfp4", 4, group_size=32).linear_bytes(2880, 5760) == 2880 * 5760 // 2 + 2880 * 5760 // 32
    assert Layout("nf4", 4).linear_bytes(896, 896) == 896 * 896 // 2 + 896 * 896 // 64 * 4
    blocks = 896 * 896 // 64
    assert Layout("nf4-dq", 4).linear_bytes(896, 896) == 896 * 896 // 2 + blocks + -(-blocks // 256) * 4 + 4 + 1024
    assert Layout("bnb8", 8).linear_bytes(896, 896) == 896 * 896 + 896 * 4
    assert Layout("hqq", 4, group_size=64, scale_bytes=2).linear_bytes(896, 896) == 896 * 896 // 2 + 2 * 896 * 14 * 2
    assert Layout("int4-tinygemm", 4, group_size=128).linear_bytes(896, 896) == 896 * 896 // 2 + 7 * 896 * 4


# --- schemes from real config shapes -----------------------------------------------------------------------------


def test_every_fixture_quant_config_parses():
    labels = {}
    for path in sorted(FIXTURES.glob("*.json")):
        if path.name == "param_totals.json" or path.name.endswith(".hf_quant_config.json"):
            continue
        cfg = json.loads(path.read_text())
        hq = FIXTURES / path.name.replace(".json", ".hf_quant_config.json")
        scheme = parse_scheme(find_quant_config(cfg), json.loads(hq.read_text()) if hq.exists() else None)
        if scheme:
            labels[path.name] = scheme.label
    assert labels["openai--gpt-oss-20b.json"].startswith("MXFP4 experts")
    assert labels["deepseek-ai--DeepSeek-V3.json"] == "FP8 e4m3, 128x128 block scales"
    assert labels["budecosystem--genz-70b-GPTQ.json"] == "GPTQ int3, per channel, desc_act"
    assert labels["reubzdubz--Molmo7B_D_NF4Quant.json"] == "bitsandbytes 4-bit nf4"
    assert labels["moonshotai--Kimi-K2.5.json"] == "W4A16 int4 group 32 (compressed-tensors)"
    assert labels["nvidia--Llama-3.1-70B-Instruct-FP8.json"] == "ModelOpt FP8, per-tensor scales"
    assert labels["Qwen--Qwen3-32B-FP8-Static-PerTensor.json"] == "ModelOpt FP8, per-tensor scales"
    assert labels["nvidia--MiniMax-M2.5-NVFP4.json"] == "ModelOpt NVFP4, group 16"
    assert "NVFP4 W4A4" in labels["RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8.json"]
    assert "FP8 W8A8, fp8 128x128 block scales" in labels["RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8.json"]


def test_awq_qwen25_05b_whole_model_by_hand():
    spec = load_model("qwen2.5-0.5b")
    q = 896 * 896 // 2 + 7 * 896 // 2 + 7 * 896 * 2  # q_proj, o_proj
    k = 896 * 128 // 2 + 7 * 128 // 2 + 7 * 128 * 2  # k_proj, v_proj
    up = 896 * 4864 // 2 + 7 * 4864 // 2 + 7 * 4864 * 2  # gate_proj, up_proj
    down = 4864 * 896 // 2 + 38 * 896 // 2 + 38 * 896 * 2
    per_layer = 2 * q + 2 * k + 2 * up + down
    linear_params = 24 * (2 * 896 * 896 + 2 * 896 * 128 + 3 * 896 * 4864)
    rest = (494_032_768 - linear_params) * 2  # embeddings (tied), norms, q/k/v biases in bf16
    total, quantized = closed_form_bytes(spec, parse_scheme(AWQ))
    assert quantized == linear_params
    assert total == 24 * per_layer + rest == 458_314_496


def test_gptq_adds_g_idx_per_linear():
    spec = load_model("qwen2.5-0.5b")
    awq, _ = closed_form_bytes(spec, parse_scheme(AWQ))
    gptq, _ = closed_form_bytes(spec, parse_scheme(GPTQ4))
    assert gptq - awq == 24 * (4 * 896 + 2 * 896 + 4864) * 4  # g_idx int32 [in] of 7 Linears per layer


def test_fp8_block_deepseek_v3_is_not_1250_gib():
    spec = load_model("deepseek-v3")
    total, quantized = closed_form_bytes(spec, parse_scheme(find_quant_config(spec.config)))
    assert quantized == sum(g.in_features * g.out_features * g.count for g in spec.linears)
    assert 620 * 2**30 < total < 640 * 2**30  # ~627 GiB: 1 byte per Linear weight + block scales, rest bf16


def test_fp8_modules_to_not_convert_keeps_named_modules_bf16():
    cfg = load_model("qwen2.5-0.5b").config
    base = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    spec = spec_from_config(cfg)
    all_fp8, q_all = closed_form_bytes(spec, parse_scheme(base))
    # every layer's self_attn named (as Qwen3-235B-FP8 names mlp.gate per layer): attention stays bf16
    ignore = [f"model.layers.{i}.self_attn" for i in range(24)]
    kept, q_kept = closed_form_bytes(spec, parse_scheme({**base, "modules_to_not_convert": ignore}))
    attn = 24 * (2 * 896 * 896 + 2 * 896 * 128)
    assert q_all - q_kept == attn
    # half the layers named: half the attention weights stay bf16
    half, q_half = closed_form_bytes(spec, parse_scheme({**base, "modules_to_not_convert": ignore[:12]}))
    assert q_all - q_half == attn // 2


def test_mxfp4_quantizes_routed_experts_only():
    spec = load_model("qwen3-30b-a3b")  # 48 layers x 128 experts of 2048 -> 768
    scheme = parse_scheme(_fixture("openai--gpt-oss-20b.json")["quantization_config"])
    total, quantized = closed_form_bytes(spec, scheme)
    experts = 48 * 128 * 3 * 2048 * 768
    assert quantized == experts
    expert_bytes = 48 * 128 * (2 * (2048 * 768 // 2 + 768 * 2048 // 32) + (768 * 2048 // 2 + 2048 * 768 // 32))
    assert total == expert_bytes + (spec.params.total - experts) * 2


def test_compressed_tensors_regex_ignore_leaves_attention_bf16():
    # Kimi-K2.5's scheme (int4 group 32, ignore re:.*self_attn.*, shared experts and dense MLPs) on DeepSeek-V3
    qc = find_quant_config(_fixture("moonshotai--Kimi-K2.5.json"))
    spec = load_model("deepseek-v3")
    total, quantized = closed_form_bytes(spec, parse_scheme(qc))
    routed = 58 * 256 * 3 * 7168 * 2048
    assert quantized == routed
    per_expert = 2 * (2048 * 7168 // 2 + 2048 * 224 * 2 + 16) + (7168 * 2048 // 2 + 7168 * 64 * 2 + 16)
    assert total == 58 * 256 * per_expert + (spec.params.total - routed) * 2


def test_modelopt_exclude_globs():
    spec = load_model("qwen2.5-0.5b")
    scheme = parse_scheme({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                           "ignore": ["lm_head", "model.layers.*.self_attn*"]})
    total, quantized = closed_form_bytes(spec, scheme)
    mlp = 24 * 3 * 896 * 4864
    assert quantized == mlp
    per = 896 * 4864 // 2 + 896 * 4864 // 16 + 8
    assert total == 24 * 3 * per + (spec.params.total - mlp) * 2


def test_bnb_skip_and_hqq_component_match():
    spec = load_model("qwen2.5-0.5b")
    bnb = parse_scheme({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                        "llm_int8_skip_modules": ["down_proj"]})
    _, q = closed_form_bytes(spec, bnb)
    assert q == 24 * (2 * 896 * 896 + 2 * 896 * 128 + 2 * 896 * 4864)
    hqq = parse_scheme({"quant_method": "hqq", "quant_config": {"weight_quant_params": {"nbits": 4, "group_size": 64}},
                        "skip_modules": ["lm_head", "o_proj"]})
    _, q = closed_form_bytes(spec, hqq)
    assert q == 24 * (896 * 896 + 2 * 896 * 128 + 3 * 896 * 4864)


def test_torchao_int4():
    spec = load_model("qwen2.5-0.5b")
    qc = {"quant_method": "torchao", "quant_type": {"default": {"_type": "Int4WeightOnlyConfig",
                                                                "_data": {"group_size": 128}}}}
    total, q = closed_form_bytes(spec, parse_scheme(qc))
    layout = Layout("int4-tinygemm", 4, group_size=128)
    lin = sum(layout.linear_bytes(g.in_features, g.out_features) * g.count for g in spec.linears)
    assert total == lin + (spec.params.total - q) * 2


@pytest.mark.parametrize("qc, words", [
    ({"quant_method": "squeezellm"}, "unknown quantization method 'squeezellm'"),
    ({"bits": 4}, "no quant_method"),
    ({"quant_method": "awq", "bits": 3}, "3-bit"),
    ({"quant_method": "bitsandbytes"}, "neither load_in_4bit"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "unknown ModelOpt quant_algo 'W4A8_AWQ'"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "UIntXWeightOnlyConfig"}}}, "safetensors"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "no config_groups"),
])
def test_bad_quant_configs_are_one_line(qc, words):
    with pytest.raises(UsageError) as exc:
        parse_scheme(qc)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_deepseek_v3_fp8_block_layout_reproduces_the_published_dtype_split():
    """The hub's safetensors metadata of deepseek-ai/DeepSeek-V3 (kvcalc/catalog/deepseek-v3.json params_source):
    F8_E4M3 680,571,043,840 and F32 41,555,600 elements. The checkpoint also holds the MTP layer 61 (one MoE decoder
    layer; its eh_proj stays bf16) and 59 e_score_correction_bias vectors of 256 in F32. kvcalc's fp8 layout for the
    61 main layers plus that one MTP layer must give exactly those counts."""
    spec = load_model("deepseek-v3")
    scheme = parse_scheme(find_quant_config(spec.config))
    _, fp8_main = closed_form_bytes(spec, scheme)
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168  # one MLA layer
    moe = 257 * 3 * 7168 * 2048  # 256 routed + 1 shared expert
    assert fp8_main + attn + moe == 680_571_043_840

    def blocks(fin, fout):
        return -(-fout // 128) * -(-fin // 128)

    scales_main = sum(g.count * blocks(g.in_features, g.out_features) for g in spec.linears)
    mtp = (blocks(7168, 1536) + blocks(1536, 24576) + blocks(7168, 576) + blocks(512, 32768) + blocks(16384, 7168)
           + 257 * (2 * blocks(7168, 2048) + blocks(2048, 7168)))
    assert scales_main + mtp + 59 * 256 == 41_555_600
    # and the bytes kvcalc counts for those scales are the layout's
    layout = scheme.rules[0].layout
    assert sum(g.count * layout.linear_bytes(g.in_features, g.out_features) for g in spec.linears) == \
        fp8_main + 4 * scales_main


def test_pending_catalog_entries_quantization_parses():
    """The staged entries (tests/fixtures/catalog_pending/) already carry their checkpoint's format."""
    labels = {}
    for path in sorted((Path(__file__).parent / "fixtures" / "catalog_pending").glob("*.json")):
        entry = json.loads(path.read_text())
        scheme = parse_scheme(find_quant_config(entry["config"]), entry.get("hf_quant_config"))
        labels[path.stem] = scheme.label if scheme else None
    assert labels["gpt-oss-20b"] == labels["gpt-oss-120b"] == "MXFP4 experts (attention, router, embeddings in bf16)"
    assert labels["gemma-4-31b-nvfp4"] == labels["minimax-m2.5-nvfp4"] == "ModelOpt NVFP4, group 16"
    assert labels["kimi-k2"] == labels["deepseek-v3.2"] == "FP8 e4m3, 128x128 block scales"
    assert labels["kimi-k2.5"] == "W4A16 int4 group 32 (compressed-tensors)"
    assert labels["qwen3.5-27b"] is None and labels["smollm3-3b"] is None


def test_module_paths_of_every_linear_kind():
    from kvcalc.checkpoint import module_paths

    first = {name: module_paths(name, 3, False)[0] for name in (
        "q_proj", "kv_b_proj", "indexer.wk", "experts.down_proj", "shared_experts.up_proj", "gate_proj", "router",
        "linear_attn.in_proj_qkvz", "mixer.in_proj", "conv.out_proj", "mamba.x_proj")}
    assert first == {
        "q_proj": "model.layers.3.self_attn.q_proj", "kv_b_proj": "model.layers.3.self_attn.kv_b_proj",
        "indexer.wk": "model.layers.3.self_attn.indexer.wk",
        "experts.down_proj": "model.layers.3.mlp.experts.0.down_proj",
        "shared_experts.up_proj": "model.layers.3.mlp.shared_experts.up_proj",
        "gate_proj": "model.layers.3.mlp.gate_proj",
        "router": "model.layers.3.mlp.gate", "linear_attn.in_proj_qkvz": "model.layers.3.linear_attn.in_proj_qkvz",
        "mixer.in_proj": "model.layers.3.mixer.in_proj", "conv.out_proj": "model.layers.3.conv.out_proj",
        "mamba.x_proj": "model.layers.3.mamba.x_proj"}
    assert module_paths("q_proj", 0, True)[1] == "model.language_model.layers.0.self_attn.q_proj"
    scheme = parse_scheme({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert scheme.layout_for(["model.layers.0.mlp.shared_expert_gate"], "shared_expert_gate") is None
    assert scheme.layout_for(["model.layers.0.mlp.gate"], "router") is None
