"""Behaviour fixes of issue 14 item 1: vLLM notes kept, --context > --max-model-len refused, CUDA-graph memory beyond
--util 1.0, and pipeline parallel (stage split as vLLM's get_pp_indices, deployment weights, speed)."""

from kvcalc.catalog import load_model
from kvcalc.constants import engine_constants
from kvcalc.engines import vllm
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.plan import PlanRequest, plan
from kvcalc.throughput import decode_speed
from kvcalc.units import GiB

from cli_helper import invoke


def settings(**kw):
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=8192)
    base.update(kw)
    return vllm.VllmSettings(**base)


def test_estimate_keeps_the_notes_written_after_the_stage_loop():
    est = vllm.estimate(load_model("llama-3.2-3b"), get_gpu("t4"), settings())
    assert any("casts the model to fp16" in n for n in est.notes)
    assert any(n.startswith("non-torch and CUDA-graph memory:") for n in est.notes)  # 0.26: activation by mechanism
    assert any(n.startswith("profile peak") for n in est.notes)


def test_explain_on_t4_mentions_the_fp16_cast():
    code, out, _ = invoke(["explain", "--gpu", "t4", "--context", "8k", "--engine", "vllm"])
    assert code == 0
    assert "casts the model to fp16" in out


def test_tp_wider_than_kv_heads_is_noted():
    est = vllm.estimate(load_model("llama-3.2-3b"), get_gpu("h200"), settings(tensor_parallel=16))
    assert any("tp 16 > 8 KV heads" in n for n in est.notes)


def test_util_1_leaves_no_room_for_v2_cuda_graphs():
    """0.26-0.28's V2 runner captures graphs after the KV cache took total x util: at util 1.0 the capture (0.56 GiB
    for the L4's 256 seqs, engines/vllm_graphs.py) has no room. (0.29+ subtracts them from the budget first:
    test_graph_capture.test_v0_29_subtracts_the_v2_capture...)"""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("l4")
    s = settings(version="0.28.1", gpu_memory_utilization=1.0)
    est = vllm.estimate(spec, gpu, s)
    capture = vllm.v2_graph_bytes(spec, s, gpu, est.max_num_batched_tokens, est.max_num_seqs)[1]
    assert 0.5 * GiB < capture < 0.6 * GiB
    assert est.cudagraph_overflow_bytes == capture  # requested == total at util 1.0
    assert not est.fits and est.shortfall_bytes == capture
    ok = vllm.estimate(spec, gpu, settings(version="0.28.1", gpu_memory_utilization=0.9))
    assert ok.fits and ok.cudagraph_overflow_bytes == 0
    eager = vllm.estimate(spec, gpu, settings(version="0.28.1", gpu_memory_utilization=1.0, enforce_eager=True))
    assert eager.fits and eager.cudagraph_overflow_bytes == 0  # no graphs
    moe = vllm.estimate(load_model("qwen3-30b-a3b"), get_gpu("h200"), settings(gpu_memory_utilization=1.0))
    assert moe.cudagraph_overflow_bytes == 0  # V1 runner: the graph estimate comes out of the KV budget


def test_util_1_warns_in_the_table():
    code, _, err = invoke(["plan", "--util", "1.0", "--engine", "vllm", "--gpu", "l4", "--model", "llama-3.1-8b",
                           "--vllm-version", "0.28.1"])
    assert code == 0
    # L4: (22.04 - 0.56 GiB of graphs) / 22.04 = 0.974 -> 0.97 (0.96 with the 0.80 GiB constant)
    assert "CUDA graphs" in err and "--util 0.97" in err


def test_context_beyond_max_model_len_is_a_usage_error():
    # --max-model-len reads numbers as vLLM does (1K = 1,024, 1k = 1,000); --context as kvcalc does (32k = 32,768)
    code, out, err = invoke(["plan", "--context", "32k", "--max-model-len", "1K", "--engine", "vllm"])
    assert code == 2 and out == ""
    assert "32,768" in err and "1,024" in err and len(err.strip().splitlines()) == 1
    # HF has no max_model_len: the option does not apply there
    code, _, _ = invoke(["plan", "--context", "2k", "--max-model-len", "1k", "--engine", "hf"])
    assert code == 0


def test_pp_split_follows_get_pp_indices():
    # vllm/distributed/utils.py: the remainder goes to the stages before the last, from the second-to-last back
    assert vllm.pp_layer_partition(28, 3) == [9, 10, 9]
    assert vllm.pp_layer_partition(61, 2) == [31, 30]  # DeepSeek-V3 at pp 2 logs "[31,30]"
    assert vllm.pp_layer_partition(64, 3) == [21, 22, 21]
    assert vllm.pp_layer_partition(20, 4) == [5, 5, 5, 5]
    assert vllm.pp_layer_partition(28, 28) == [1] * 28


def test_pp_beyond_layers_is_a_usage_error_without_a_long_loop():
    code, out, err = invoke(["plan", "--pp", "1000000000"])  # refused by the CLI's bound (limits.MAX_PARALLEL)
    assert code == 2 and "--pp" in err and len(err.strip().splitlines()) == 1
    code, out, err = invoke(["plan", "--pp", "29"])
    assert code == 2 and "28 layers" in err and len(err.strip().splitlines()) == 1
    code, _, err = invoke(["explain", "--pp", "64"])
    assert code == 2 and "--pp 64" in err


def test_pp_weights_are_the_sum_of_the_stages():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    for pp in (1, 4, 28):
        rows = plan(PlanRequest(spec, gpu, 8192, engines=("vllm",), weights="bf16", kv="auto", pp=pp))
        parts = vllm.pp_layer_partition(spec.num_layers, pp)
        s = settings(pipeline_parallel=pp, max_model_len=8192)
        stages = [vllm.vllm_weight_bytes(spec, s, n, has_embedding=i == 0, has_lm_head=i == pp - 1)
                  for i, n in enumerate(parts)]
        assert rows[0].weights_bytes == sum(stages)
    one = plan(PlanRequest(spec, gpu, 8192, engines=("vllm",), pp=1))[0].weights_bytes
    many = plan(PlanRequest(spec, gpu, 8192, engines=("vllm",), pp=28))[0].weights_bytes
    # each extra stage adds only its rotary cache, and the last stage its own copy of the tied vocabulary
    assert many < 1.3 * one


def test_non_last_stages_run_the_same_forward_without_the_sampler():
    spec = load_model("qwen3-30b-a3b")
    s = settings(pipeline_parallel=2, version="0.24.0")  # the fitted profile model of releases before 0.26
    fwd = vllm.forward_bytes(spec, s, 8192)
    assert vllm.activation_bytes(spec, s, 8192, 256, last_stage=False) == fwd
    assert vllm.activation_bytes(spec, s, 8192, 256) == max(fwd, vllm.sampler_bytes(spec, s, 8192, 256) +
                                                            vllm.moe_workspace_bytes(spec, s, 8192))
    # 0.26 (by mechanism): a stage without the lm_head has no sampler phase; its peak is an attention layer's, run
    # with the MoE workspace held (0.26: MoE on the V1 runner, as traced on the H200; 0.29+ runs it on V2)
    s = settings(pipeline_parallel=2, version="0.26.0")
    mid = vllm.profile_peak_of(spec, s, 8192, 256, last_stage=False)
    last = vllm.profile_peak_of(spec, s, 8192, 256)
    assert mid.phase == "attention" and "sampler" not in dict(mid.others) and last.phase == "sampler"
    assert vllm.activation_bytes(spec, s, 8192, 256, last_stage=False) == mid.bytes < last.bytes


def test_pp_speed_round_is_pp_stage_steps_of_one_micro_batch():
    """Hand-computed: pp 2, batch 8 -> 2 micro-batches of 4; a round = 2 x fixed + (weights + KV of 4) / bandwidth."""
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("h200")
    w, k = weight_format("bf16"), kv_format("auto")
    one = decode_speed(spec, gpu, "vllm", w, k, 8, 32768)
    two = decode_speed(spec, gpu, "vllm", w, k, 8, 32768, pp=2)
    micro = decode_speed(spec, gpu, "vllm", w, k, 4, 32768)
    assert abs(two.fixed_s - 2 * one.fixed_s) < 1e-12
    assert abs(two.memory_s - micro.memory_s) < 1e-12
    assert abs(two.tokens_per_s - 8 / (two.fixed_s + sum(k.time_s for k in two.kernels))) < 1e-9
    # KV-bound (batch 8 x 32k): spreading the KV reads over two stages helps; batch 1 cannot be pipelined
    assert two.tokens_per_s > one.tokens_per_s
    assert decode_speed(spec, gpu, "vllm", w, k, 1, 32768, pp=2).tokens_per_s < \
        decode_speed(spec, gpu, "vllm", w, k, 1, 32768).tokens_per_s


def test_speed_reads_the_rows_kv_bytes_per_token():
    """One source: decode speed uses the row's deployment KV B/token (Jamba: Mamba state amortized, 16,680 B at
    32k on an H200), not a second per-layer sum (16,384 B)."""
    spec, gpu = load_model("jamba-1.5-mini"), get_gpu("h200")
    # 0.33.0's 16-token default block (0.34.0's 64 pads the Mamba page to a 64-multiple attention page: 16,832 B)
    row = plan(PlanRequest(spec, gpu, 32768, engines=("vllm",), vllm_version="0.33.0"))[0]
    assert row.kv_bytes_per_token == 16680
    w, k = weight_format("bf16"), kv_format("auto")
    same = decode_speed(spec, gpu, "vllm", w, k, 1, 32768, kv_bytes_per_token=16680)
    assert row.decode_tokens_per_s == same.tokens_per_s
    assert same.kv_bytes_read == 16680 * 32768


def test_estimate_keeps_every_stage_and_reports_the_smallest():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("l4")
    est = vllm.estimate(spec, gpu, settings(pipeline_parallel=3))
    assert [st.layout.group_size for st in est.stages] == [9, 10, 9]
    assert est.num_gpu_blocks == min(st.num_blocks for st in est.stages)
    assert est.deployment_weights_bytes == sum(st.weights_bytes for st in est.stages)
    assert "stages" not in est.to_json()
