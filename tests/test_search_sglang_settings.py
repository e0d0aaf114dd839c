"""`kvcalc search --server sglang` takes the SGLang settings `kvcalc plan --engine sglang` takes (search_sglang.py
SGLANG_SETTINGS, or a pasted --sglang-command) into every candidate: its memory (the same engines/sglang.estimate
plan runs), its closed-form times and its launch line; settings it cannot search are usage errors."""

import json

import pytest

from kvcalc.catalog import load_model
from kvcalc.engines import sglang as S
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.sglang_command import parse_sglang_command

from cli_helper import invoke as run_cli

BASE = ["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "256", "--concurrency", "64",
        "--gpus", "h200", "--weights", "bf16", "--kv", "auto", "--json", "--top", "50"]


def search(*extra):
    code, out, err = run_cli(BASE + list(extra))
    assert code == 0, err
    return json.JSONDecoder().raw_decode(out)[0]


def estimate(tp=1, **kw):
    s = S.SglangSettings(weights=weight_format("bf16"), kv=kv_format("auto"), context_length=2048 + 256,
                         tensor_parallel=tp, **kw)
    return S.estimate(load_model("llama-3.1-8b"), get_gpu("h200"), s)


def test_every_candidate_runs_the_drafter_plan_runs():
    data = search("--server", "sglang", "--speculative-algorithm", "EAGLE3", "--tp", "1,2")
    rows = data["results"]
    assert rows and {d["tp"] for d in rows} == {1, 2}
    for d in rows:
        est = estimate(d["tp"], speculative_algorithm="EAGLE3")
        assert d["kv_capacity_tokens"] == est.max_total_num_tokens
        assert d["max_running_requests"] == 48  # speculative decoding's cap (speculative_hook.py:270-275)
        assert d["max_concurrency"] == est.concurrency_at(2048 + 256) * d["replicas"]
        assert d["speculative_algorithm"] == "EAGLE3" and d["draft_weights_bytes"] == est.draft_weights_bytes
    # 64 clients over replicas of 48: two replicas at least, where the plain search serves them on one
    assert min(d["replicas"] for d in rows) == 2
    assert min(d["replicas"] for d in search("--server", "sglang", "--tp", "1,2")["results"]) == 1
    assert "--speculative-algorithm EAGLE3" in data["winner_command"]
    assert any("no drafter speed-up" in w for w in data["warnings"])


def test_settings_reach_memory_and_the_launch_line_and_round_trip():
    extra = ["--server", "sglang", "--tp", "2", "--mem-fraction-static", "0.8", "--enable-dp-attention", "--dp-size",
             "2", "--max-running-requests", "32", "--page-size", "16", "--cuda-graph-max-bs", "64",
             "--enable-torch-compile", "--moe-a2a-backend", "deepep", "--max-prefill-tokens", "8192"]
    data = search(*extra)
    d = data["results"][0]
    est = estimate(2, mem_fraction_static=0.8, enable_dp_attention=True, dp_size=2, max_running_requests=32,
                   page_size=16, cuda_graph_max_bs=64, enable_torch_compile=True, moe_a2a_backend="deepep",
                   max_prefill_tokens=8192)
    assert d["mem_fraction_static"] == 0.8 and d["kv_capacity_tokens"] == est.max_total_num_tokens
    assert d["max_running_requests"] == est.max_running_requests == 16  # 32 over 2 DP ranks
    # the winner's line, read back by kvcalc's own --sglang-command parser, is the configuration searched
    values, warnings = parse_sglang_command(data["winner_command"])
    assert not warnings
    assert values | {"model": None} == {
        "engine": "sglang", "model": None, "tp": 2, "max_model_len": 2304, "mem_fraction_static": 0.8,
        "enable_dp_attention": True, "dp_size": 2, "max_num_seqs": 32, "block_size": 16, "cuda_graph_max_bs": 64,
        "enable_torch_compile": True, "moe_a2a_backend": "deepep", "max_prefill_tokens": 8192}


def test_max_running_requests_is_searched_over():
    data = search("--server", "sglang", "--tp", "1", "--max-running-requests", "8,64")
    rows = data["results"]
    assert {d["max_running_requests"] for d in rows} == {8, 64}
    assert min(d["replicas"] for d in rows if d["max_running_requests"] == 8) == 8  # 64 clients, 8 a replica
    assert rows[0]["max_running_requests"] == 64 and rows[0]["replicas"] == 1
    assert "--max-running-requests 64" in data["winner_command"]


def test_a_pasted_sglang_command_fixes_the_search():
    cmd = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2 --kv-cache-dtype "
           "fp8_e4m3 --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
           "--disable-cuda-graph")
    code, out, err = run_cli(["search", "--input-len", "2k", "--output-len", "256", "--concurrency", "64", "--gpus",
                              "h200", "--weights", "bf16", "--json", "--sglang-command", cmd])
    assert code == 0, err
    data = json.JSONDecoder().raw_decode(out)[0]
    assert data["engine"] == "sglang" and data["results"]
    est = S.estimate(load_model("llama-3.1-8b"), get_gpu("h200"), S.SglangSettings(
        weights=weight_format("bf16"), kv=kv_format("fp8"), context_length=2048 + 256, tensor_parallel=2,
        speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1, disable_cuda_graph=True))
    for d in data["results"]:
        assert (d["tp"], d["kv_format"]) == (2, "fp8")
        assert d["kv_capacity_tokens"] == est.max_total_num_tokens
    assert est.speculative_params == (3, 1, 4)
    # --disable-cuda-graph: the closed form's decode step pays the eager launch (decode_line enforce_eager)
    graphs = search("--server", "sglang", "--tp", "2", "--kv", "fp8", "--speculative-algorithm", "EAGLE",
                    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")["results"][0]
    assert data["results"][0]["tpot_ms"] > graphs["tpot_ms"]


@pytest.mark.parametrize("extra, message", [
    (["--server", "vllm", "--enable-dp-attention"], "--enable-dp-attention is an SGLang setting"),
    (["--speculative-algorithm", "EAGLE"], "--speculative-algorithm is an SGLang setting"),
    (["--server", "both", "--enable-lora"], "not searched for vLLM"),
    (["--server", "sglang", "--dp-size", "2"], "as replicas"),
    (["--server", "sglang", "--utils", "0.9"], "--mem-fraction-static"),
    (["--server", "sglang", "--pp", "2"], "--pp 1"),
    (["--server", "sglang", "--speculative-num-steps", "2"], "give --speculative-algorithm"),
    (["--server", "sglang", "--speculative-algorithm", "DFLASH"], "kvcalc models SGLang's"),
    (["--server", "sglang", "--mem-fraction-static", "1"], "must be in (0, 1)"),
    (["--server", "sglang", "--emit", "serve"], "--emit writes the vLLM winner's"),
    (["--sglang-command", "python -m sglang.launch_server --model-path x", "--vllm-command", "vllm serve x"],
     "not both"),
])
def test_settings_the_search_cannot_carry_are_usage_errors(extra, message):
    code, out, err = run_cli(BASE[:-3] + extra)
    assert code == 2 and message in err and "Traceback" not in err, (code, err)


@pytest.mark.parametrize("extra, message", [
    (["--tp", "3"], "TP 3 left out: --tp 3 does not divide"),
    (["--tp", "2", "--enable-dp-attention", "--dp-size", "4"], "--dp-size 4 must divide it"),
])
def test_an_sglang_search_with_no_candidate_fails_its_gate_with_sglangs_reason(extra, message):
    """--server sglang gates on SGLang's deployments (gate.search_failure), not on the vLLM search run beside them."""
    code, out, err = run_cli(BASE[:-3] + ["--server", "sglang"] + extra)
    assert code == 1 and "no SGLang deployment meets the targets" in err and message in err, err


def test_kv_formats_sglang_lacks_and_refused_drafters_are_one_line():
    code, out, err = run_cli(BASE[:-3] + ["--server", "sglang", "--kv", "nvfp4"])
    assert code == 2 and "SGLang has no such cache" in err
    code, out, err = run_cli(BASE[:-3] + ["--server", "sglang", "--speculative-algorithm", "STANDALONE"])
    assert code == 2 and err.count("\n") == 1 and "--speculative-draft-model-path" in err


def test_plan_says_when_sglang_settings_plan_no_sglang_row():
    code, out, err = run_cli(["plan", "--gpu", "h200", "--model", "llama-3.1-8b", "--speculative-algorithm", "EAGLE",
                              "--enable-dp-attention"])
    assert code == 0 and "--enable-dp-attention, --speculative-algorithm: SGLang's setting(s), and no SGLang row" in err
    code, out, err = run_cli(["plan", "--gpu", "h200", "--model", "llama-3.1-8b", "--engine", "sglang",
                              "--speculative-algorithm", "NEXTN"])
    assert code == 2 and "has none (num_nextn_predict_layers" in err and "Traceback" not in err


def test_max_total_tokens_caps_the_pool_in_plan_and_search():
    """--max-total-tokens (a pasted command's too: it was ignored before) caps max_total_num_tokens, and on 0.5.14
    the prefill graphs (server_args.py:3248-3252: 58 sizes to 8192 -> 42 to 2048, 16 x 8 MiB less reserve)."""
    cmd = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --max-total-tokens 100000"
    code, out, err = run_cli(["plan", "--gpu", "h200", "--sglang-command", cmd, "--context", "8k", "--json"])
    assert code == 0, err
    row = json.loads(out)["rows"][0]["sglang_breakdown"]
    assert row["max_total_num_tokens"] == 100000
    capped = estimate(max_total_tokens=2048)
    assert capped.max_total_num_tokens == 2048 and capped.prefill_graph_max_tokens == 2048
    assert len(S.piecewise_graph_sizes(2048, "0.5.14")) == 8 + 14 + 8 + 8 + 4 == 42
    assert capped.mem_fraction_static == round((143771 - 13440 - 42 * 8) / 143771, 3)
    d = search("--server", "sglang", "--tp", "1", "--max-total-tokens", "20000")["results"][0]
    assert d["kv_capacity_tokens"] == 20000 and d["replicas"] == 8  # 20,000 // 2,304 = 8 requests a replica


def test_the_screen_takes_the_prefill_terms_the_simulation_has():
    """SGLang's closed-form screen (search_sglang.prefill_line) carries the step terms plan's simulation adds for
    SGLang, from the same functions: a prefill chunk takes at least the piecewise graphs' CPU floor (layers x
    piecewise_layer_cpu_s: 32 x 0.3186 ms = 10.2 ms for the 8B, where its 16-token prefill's GPU work is 4.7 ms on an
    H200), not with --disable-cuda-graph; Gemma 3's unfused rope adds its kernels per prefill chunk and its bytes per
    token, and none when a chunk runs past the captured sizes. Before, the screen had no floor: a lone 16-token TTFT
    of 4.7 ms."""
    from kvcalc import latency
    from kvcalc.search_sglang import prefill_line
    from kvcalc.step_cost import sglang_prefill_extra
    from kvcalc.workload import Workload

    spec, h200 = load_model("llama-3.1-8b"), get_gpu("h200")
    w, k = weight_format("bf16"), kv_format("auto")
    est = estimate()
    wl = Workload(16, 64, concurrency=1)
    line = prefill_line(spec, h200, w, k, 1, False, est, wl, 1)
    from kvcalc.constants import load
    per = load("throughput")["engines"]["sglang"]["piecewise_layer_cpu_s"]
    assert line.pfloor == pytest.approx(32 * per) and line.pfixed == 0.0
    pre0, pre1 = line.prefill_terms()
    gpu_work = line.fixed + max(line.wread, pre0 * 16 + pre1 * 16 * 17 / 2)
    assert gpu_work < line.pfloor  # the CPU binds the small prefill
    ttft = latency.ttft_s(line, 16, est.chunked_prefill_size, line.wread)
    assert ttft == pytest.approx(line.pfloor)
    eager = prefill_line(spec, h200, w, k, 1, True, estimate(disable_cuda_graph=True), wl, 1)
    assert eager.pfloor == 0.0
    # a 2k prompt: the GPU's work binds, the floor changes nothing
    assert latency.ttft_s(line, 2048, est.chunked_prefill_size, line.wread) == pytest.approx(
        line.fixed + max(line.wread, pre0 * 2048 + pre1 * 2048 * 2049 / 2))
    # Gemma 3: the rope's kernels per chunk (pfixed) and bytes per token (in pre0) while chunks replay the graphs
    g = load_model("gemma-3-1b")
    gest = S.estimate(g, h200, S.SglangSettings(weights=w, kv=k, context_length=1024 + 64))
    gl = prefill_line(g, h200, w, k, 1, False, gest, Workload(1024, 64, concurrency=1), 1)
    step, token, most = sglang_prefill_extra(g, h200, gest.prefill_graph_max_tokens)
    plain = latency.decode_line(g, h200, w, k, 1, tp=1, sglang=True, prefill_rows=gest.chunked_prefill_size)
    norm_step, norm_token = S_step_extra(g, h200)
    assert gl.pfixed == pytest.approx(step) and step > 0
    assert gl.pre0 == pytest.approx(plain.prefill_terms()[0] + norm_token + token)
    assert gl.fixed == pytest.approx(plain.fixed + norm_step)
    from dataclasses import replace

    small = replace(gest, prefill_graph_max_tokens=512)  # graphs captured to 512 tokens: a 1k chunk runs eager
    past = prefill_line(g, h200, w, k, 1, False, small, Workload(1024, 64, concurrency=1), 1)
    assert past.pfixed == 0.0 and past.pre0 == pytest.approx(plain.prefill_terms()[0] + norm_token)


def S_step_extra(spec, gpu):
    from kvcalc.step_cost import sglang_step_extra

    return sglang_step_extra(spec, gpu)


def test_the_screen_prices_an_mla_prompt_outside_the_graphs_decompressed():
    """DeepSeek-V2-Lite's prompt of more than 2,048 tokens prefills outside SGLang's graphs with decompressed
    attention (step_cost.sglang_mha_prefill_above): the screen's per-pair term is 10,240 / 36,864 of the absorbed
    one, so it stays below the simulation (8k lone prompt: screen 86 ms, simulation 88.5); a 1k prompt keeps it."""
    from kvcalc import latency
    from kvcalc.search_sglang import prefill_line
    from kvcalc.workload import Workload

    ds, h200 = load_model("deepseek-v2-lite"), get_gpu("h200")
    w, k = weight_format("bf16"), kv_format("auto")
    est = S.estimate(ds, h200, S.SglangSettings(weights=w, kv=k, context_length=8192 + 64))
    base = latency.decode_line(ds, h200, w, k, 1, tp=1, sglang=True, prefill_rows=est.chunked_prefill_size)
    long = prefill_line(ds, h200, w, k, 1, False, est, Workload(8192, 64, concurrency=1), 1)
    short = prefill_line(ds, h200, w, k, 1, False, est, Workload(1024, 64, concurrency=1), 1)
    assert long.pre1 == pytest.approx(base.prefill_terms()[1] * 10240 / 36864)
    assert short.pre1 == pytest.approx(base.prefill_terms()[1])
