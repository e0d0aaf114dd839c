"""Issue 18, the H100 SXM throughput bias: what dstack's 8x H100 Llama-3.1-405B-FP8 runs (vLLM 0.6.3, V0) have that
kvcalc had read differently. Meta's FBGEMM FP8 checkpoint keeps its self-attention and its first and last layers'
MLPs in bf16; the V0 engine admits a request only with its whole prompt's blocks free; V0 replays CUDA graphs only for
decode-only steps whose longest context is at most max_seq_len_to_capture (8192)."""

from __future__ import annotations

import pytest

from kvcalc.catalog import load_model
from kvcalc.checkpoint import baseline_weights
from kvcalc.engines.vllm_versions import reserve_full_prompt_default, v0_graph_max_context
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.quant_config import parse_scheme
from kvcalc.throughput import decode_speed
from kvcalc.workload import Workload, vllm_bench


def test_meta_fp8_405b_bytes_by_hand():
    """124 of 126 MLPs in FP8 (3 x 16384 x 53248 weights each, one fp32 scale per output row: 2 x 53248 gate/up +
    16384 down); every other parameter in bf16 (attention, layers 0 and 125's MLPs, embedding, lm_head, norms)."""
    spec = load_model("llama-3.1-405b-fp8")
    fmt = baseline_weights(spec)
    fp8 = 124 * 3 * 16384 * 53248
    assert fp8 == 324_538_466_304
    scales = 124 * (2 * 53248 + 16384) * 4
    rest = 405_853_388_800 - fp8
    assert fmt.name == "fp8" and fmt.total_bytes == fp8 + scales + 2 * rest == 487_229_259_776
    # kvcalc's earlier reading, every Linear FP8 (the bf16 catalog model with --weights fp8), is 17% lighter
    assert fmt.total_bytes / (405_853_388_800 - 2 * 128256 * 16384 + 2 * 2 * 128256 * 16384) > 1.15


def test_fbgemm_fp8_ignore_list_is_exact_module_paths():
    scheme = parse_scheme({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                           "modules_to_not_convert": ["model.layers.0.self_attn.q_proj", "lm_head"]})
    assert scheme.method == "fbgemm_fp8" and scheme.nearest == "fp8"
    assert scheme.layout_for(["model.layers.0.self_attn.q_proj"], "q_proj") is None
    assert scheme.layout_for(["model.layers.1.self_attn.q_proj"], "q_proj").kind == "fp8"


def test_v0_rules_by_release():
    assert reserve_full_prompt_default("0.6.3") and reserve_full_prompt_default("0.5.3")
    assert not reserve_full_prompt_default("0.9.2") and reserve_full_prompt_default("0.19.0")
    assert v0_graph_max_context("0.6.3.post2.dev308") == 8192
    assert v0_graph_max_context("0.9.2") is None and v0_graph_max_context(None) is None


@pytest.mark.parametrize("input_len,eager", [(4000, False), (9000, True)])
def test_v0_decode_past_8192_tokens_runs_eager(input_len, eager):
    """A lone request on V0: at 4,000 + 64 tokens its decode steps replay graphs (TPOT well under the eager
    launch time of the 8B's 32 layers); at 9,000 every decode step is past max_seq_len_to_capture and takes at least
    the CPU's eager launches. V1 (0.9.2) replays the graph at both lengths."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h100-sxm")
    w, kv = weight_format("bf16"), kv_format("auto")
    floor = decode_speed(spec, gpu, "vllm", w, kv, 1, input_len, enforce_eager=True).step_s
    graph = decode_speed(spec, gpu, "vllm", w, kv, 1, input_len).step_s
    assert floor > 1.5 * graph
    wl = Workload(input_len, 64, concurrency=1)
    args = dict(chunk_tokens=2048, slots=4)
    v0 = vllm_bench(spec, gpu, w, kv, wl, vllm_version="0.6.3", **args).tpot_s
    v1 = vllm_bench(spec, gpu, w, kv, wl, vllm_version="0.9.2", **args).tpot_s
    assert v1 < 1.1 * graph
    if eager:
        assert v0 >= floor
    else:
        assert v0 < 1.1 * graph + 1e-4  # V0's 0.1 ms host work per sequence on top
