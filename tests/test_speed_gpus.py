"""Issue 18: the public speed corpus, the class constants that transfer between GPUs, the dequantization paths, the
evidence labels and ranges every speed figure carries; and the seed's story still falling out of one model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc import throughput
from kvcalc.catalog import load_model
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.throughput import decode_speed
from kvcalc.trust import LABELS, capacity_trust, speed_basis, speed_trust
from tests.cli_helper import invoke
from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"


def _rows():
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def _tps(model, gpu, weights, kv, batch, context):
    return decode_speed(load_model(model), get_gpu(gpu), "vllm", weight_format(weights), kv_format(kv), batch,
                        context).tokens_per_s


# -- the corpus --------------------------------------------------------------------------------------------------


def test_corpus_size_and_quotes():
    rows = _rows()
    assert len(rows) >= 100
    assert len({r["gpu"] for r in rows}) >= 10
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source_url"].startswith("https://"), r["id"]
        assert r["quote"] and r["value"] is not None and r["unit"], r["id"]
        get_gpu(r["gpu"])  # every row names a kvcalc profile
        if r.get("kvcalc_model"):
            load_model(r["kvcalc_model"])


def test_quote_holds_the_value():
    """No row invents its value: a number in the quoted line is the value (or rounds to it)."""
    import re

    for r in _rows():
        v = float(r["value"])
        numbers = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", r["quote"])]
        assert any(abs(n - v) <= max(5e-4, 5e-4 * abs(v)) for n in numbers), (r["id"], v)


def test_no_unmarked_lone_ttft_beats_the_tensor_peak():
    """A lone prompt's TTFT bounds its prefill: 2 x active params x tokens + causal attention FLOPs over the TP group's
    dense tensor peak (FP8's where the weights and the GPU run FP8). A row faster than that is no cold prefill (the
    prefix cache held its prompt: Tenstorrent's length sweeps) and must be marked a known miss, never fitted."""
    for r in _rows():
        if r["metric"] != "ttft_ms" or r.get("concurrency") != 1 or not r.get("kvcalc_model") \
                or r.get("input_len") is None or r.get("engine", "vllm") != "vllm":
            continue
        spec, gpu, n = load_model(r["kvcalc_model"]), get_gpu(r["gpu"]), float(r["input_len"])
        flops = 2 * spec.params.active * n + throughput.attention_flops_per_token(spec) * n * (n + 1) / 2
        fp8 = str(r.get("weights", "")).startswith("fp8") and gpu.native_fp8
        peak = (gpu.flops_for("fp8") if fp8 else None) or gpu.flops_for("bf16") or gpu.flops_for("fp16")
        implied = flops / (r["value"] / 1e3) / (peak * int(r.get("tp") or 1))
        assert implied <= 1.0 or r.get("outlier"), (r["id"], round(implied, 2))


# -- mechanisms ------------------------------------------------------------------------------------------------------


def test_seed_story_fp8_kv_t4_vs_l4():
    """FP8 KV costs speed on a T4 (no fused FP8 attention below sm_80) and nothing on an L4 (native conversion)."""
    t4 = _tps("llama-3.2-3b", "t4", "bf16", "fp8", 1, 32768) / _tps("llama-3.2-3b", "t4", "bf16", "auto", 1, 32768)
    l4 = _tps("llama-3.2-3b", "l4", "bf16", "fp8", 1, 32768) / _tps("llama-3.2-3b", "l4", "bf16", "auto", 1, 32768)
    assert t4 < 0.97 and l4 > 1.0


def test_fp8_kv_on_a100_is_not_emulated_at_legacy_cost():
    """Issue 24: the 75 ops/element T4 assumption made FP8 KV 3.9x slower on an A100; sm_80 kernels upcast in
    registers, so halving the cache bytes cannot make batched long-context decode slower there."""
    a100 = get_gpu("a100-80gb")
    assert throughput.fp8_kv_path(a100) == "fused-upcast"
    assert throughput.fp8_kv_path(get_gpu("t4")) == "emulated-legacy"
    assert throughput.fp8_kv_path(get_gpu("h200")) == "hopper"
    ratio = _tps("llama-3.1-8b", "a100-80gb", "bf16", "fp8", 16, 32768) / \
        _tps("llama-3.1-8b", "a100-80gb", "bf16", "auto", 16, 32768)
    assert ratio > 1.0


def test_fp8_weights_on_ampere_run_through_marlin():
    """An FP8 checkpoint on sm_75-86 runs weight-only through Marlin (1 byte a weight, dequantized in registers inside
    the bf16 GEMM), not through the T4's software upcast: batch-1 decode on an A100 reads half the bytes of BF16 and
    is nearly that much faster (the 75-operation upcast made it 0.31x BF16), slower than 4-bit AWQ through the same
    kernel (twice its bytes); the GEMMs stay on the BF16 tensor cores, so prefill is no faster than BF16's."""
    a100 = get_gpu("a100-80gb")
    assert throughput.fp8_weight_path(a100) == "marlin"
    assert throughput.fp8_weight_path(get_gpu("a10g")) == "marlin"
    assert throughput.fp8_weight_path(get_gpu("t4")) == "marlin"  # vllm#29901: Marlin for sm_75
    assert throughput.fp8_weight_path(get_gpu("v100-16gb")) == "emulated-legacy"
    assert throughput.fp8_weight_path(get_gpu("l4")) == throughput.fp8_weight_path(get_gpu("h200")) == "native"
    fp8 = _tps("llama-3.1-8b", "a100-80gb", "fp8", "auto", 1, 1024)
    bf16 = _tps("llama-3.1-8b", "a100-80gb", "bf16", "auto", 1, 1024)
    awq = _tps("llama-3.1-8b", "a100-80gb", "awq", "auto", 1, 1024)
    assert 1.5 < fp8 / bf16 < 2.0
    assert fp8 < awq
    # the Marlin count is the 4-bit one, not the software upcast's
    ops = throughput.weight_conversion_ops(weight_format("fp8"), a100)
    assert ops == throughput.weight_conversion_ops(weight_format("awq"), a100)
    assert throughput.weight_conversion_ops(weight_format("fp8"), get_gpu("v100-16gb")) > 4 * ops
    spec = load_model("llama-3.1-8b")
    p_fp8 = throughput.prefill_s(spec, a100, weight_format("fp8"), kv_format("auto"), 8192, 2048)
    p_bf16 = throughput.prefill_s(spec, a100, weight_format("bf16"), kv_format("auto"), 8192, 2048)
    assert p_fp8 >= 0.97 * p_bf16


def test_gemm_ratio_of_a_gpu_without_bf16_uses_its_fp16_measurement():
    """A T4 computes in FP16 (no BF16 tensor cores): its GEMM rate is the public FP16 torch.mm figure over its FP16
    peak (42.31 of 65 TFLOPS), not 1.0 for want of a BF16 one."""
    t4 = get_gpu("t4")
    assert t4.measured_fp16_matmul_flops == pytest.approx(42.31e12)
    h200 = get_gpu("h200")
    expected = (42.31 / 65.0) / (h200.measured_bf16_matmul_flops / h200.flops_for("bf16"))
    assert throughput.gemm_ratio(t4) == pytest.approx(expected)
    assert throughput.gemm_ratio(t4) < 0.9


def test_nf4_dequantization_paths():
    """bitsandbytes: gemv at one row (ALU-bound on an H200: 0.83x bf16, a speed-up on bandwidth-poor cards), the
    dequantize-then-GEMM path above one row (0.41x on the H200 at batch 16)."""
    h200_b1 = _tps("llama-3.1-8b", "h200", "nf4", "auto", 1, 1024) / _tps("llama-3.1-8b", "h200", "bf16", "auto", 1, 1024)
    h200_b16 = _tps("llama-3.1-8b", "h200", "nf4", "auto", 16, 1024) / \
        _tps("llama-3.1-8b", "h200", "bf16", "auto", 16, 1024)
    l4_b1 = _tps("llama-3.1-8b", "l4", "nf4", "auto", 1, 1024) / _tps("llama-3.1-8b", "l4", "bf16", "auto", 1, 1024)
    assert h200_b1 == pytest.approx(0.83, abs=0.04)
    assert h200_b16 == pytest.approx(0.41, abs=0.04)
    assert l4_b1 > 2.0


def test_class_keys_follow_the_hardware():
    keys = throughput.class_keys(get_gpu("rtx-4090"))
    assert keys == {"bandwidth": "GDDR6X", "tensor": "Ada-pcie", "step": "cuda", "comm": "pcie-consumer"}
    assert throughput.class_keys(get_gpu("mi300x"))["comm"] == "xgmi"
    assert throughput.class_keys(get_gpu("h100-sxm"))["tensor"] == "Hopper-module"
    assert throughput.class_keys(get_gpu("h100-pcie"))["tensor"] == "Hopper-pcie"


def test_tensor_rate_takes_the_measured_gemm_rate_over_the_h200s():
    # hand-checked: RTX 5090 datasheet 209.5 TFLOPS BF16 (FP32 accumulate), torch.mm measured 238.04 (1.1362 of it);
    # H200 989.5 datasheet, 790.29 measured (0.7987); the H200's fitted fraction 0.6364 on the 5090's datasheet, x
    # 1.1362 / 0.7987 = 1.4227: 209.5 x 0.6364 x 1.4227 = 189.7 TFLOPS (without it 133.3: the held-out 5090's
    # prefill came out ~1.4x too slow and its 8-12 req/s runs saturated early)
    g5090, spark, h200 = get_gpu("rtx-5090"), get_gpu("dgx-spark"), get_gpu("h200")
    assert throughput.gemm_ratio(g5090) == pytest.approx((238.04 / 209.5) / (790.29 / 989.5))
    assert throughput.gemm_ratio(g5090) == pytest.approx(1.4227, abs=1e-3)
    with throughput.class_override({}):
        rates = throughput.gpu_rates(g5090)
        assert rates.tensor == pytest.approx(189.7e12, rel=1e-3)
        assert rates.tensor_fp8 == pytest.approx(419e12 * 0.6364 * 1.4227, rel=1e-3)
        assert "x1.423" in rates.source
        # no public measurement: the datasheet stands (DGX Spark); the H200 keeps its own fit, whatever its profile says
        assert throughput.gemm_ratio(spark) == 1.0
        assert throughput.gpu_rates(spark).tensor == pytest.approx(62.5e12 * 0.6364, rel=1e-3)
        assert throughput.gpu_rates(h200).tensor == pytest.approx(989.5e12 * 0.6364, rel=1e-3)
    # a power-limited PCIe board runs below the H200's fraction: H100 PCIe 495.93 / 756.5 = 0.6556 -> x0.821
    assert throughput.gemm_ratio(get_gpu("h100-pcie")) == pytest.approx(0.821, abs=1e-3)
    # `kvcalc gpus` says so where it applies, and not where it does not
    assert "x0.93 from a public torch.mm measurement" in speed_basis(get_gpu("l40s"))[1]
    assert "torch.mm" not in speed_basis(spark)[1] and "torch.mm" not in speed_basis(h200)[1]


def test_class_override_moves_only_unfitted_gpus():
    spec, w, kv = load_model("llama-3.1-8b"), weight_format("bf16"), kv_format("auto")
    l4, h200 = get_gpu("l4"), get_gpu("h200")
    with throughput.class_override({}):
        base_l4 = decode_speed(spec, l4, "vllm", w, kv, 1, 1024).step_s
        base_h200 = decode_speed(spec, h200, "vllm", w, kv, 1, 1024).step_s
    with throughput.class_override({"bandwidth": {"GDDR6": 0.5}}):
        slow_l4 = decode_speed(spec, l4, "vllm", w, kv, 1, 1024).step_s
        same_h200 = decode_speed(spec, h200, "vllm", w, kv, 1, 1024).step_s
    assert slow_l4 > 1.3 * base_l4
    assert same_h200 == pytest.approx(base_h200)  # the H200 keeps its own fit


def test_hf_norm_launches_by_architecture():
    llama, gemma = load_model("llama-3.2-3b"), load_model("gemma-3-1b")
    assert throughput.hf_layer_launch_s(gemma) > 1.5 * throughput.hf_layer_launch_s(llama)


def test_hf_decode_step_overlaps_the_host_and_the_gpu():
    """Item 4: eager decode queues kernels while the GPU runs the ones before (one sync a step, generate()'s stop
    check): the step is more than the longer of the two and less than their sum; the host part follows the host."""
    spec, gpu, w, kv = load_model("qwen2.5-14b"), get_gpu("h200"), weight_format("bf16"), kv_format("auto")
    est = throughput.hf_decode_speed(spec, gpu, w, kv, 8, 1100)
    gpu_s = throughput.hf_decode_speed(spec, gpu, w, kv, 8, 1100, host_scale=0.0).step_s
    assert gpu_s > 0.3 * est.fixed_s  # a case where the overlap matters
    assert max(est.fixed_s, gpu_s) < est.step_s < est.fixed_s + gpu_s
    slow = throughput.hf_decode_speed(spec, gpu, w, kv, 8, 1100, host_scale=2.0)
    assert slow.fixed_s == pytest.approx(2 * est.fixed_s) and slow.step_s > 1.5 * est.step_s
    ref = throughput.load("throughput")["engines"]["hf"]["reference_launch_us"]
    assert throughput.hf_host_scale(None) == 1.0 and throughput.hf_host_scale(2 * ref) == pytest.approx(2.0)
    # the quantized cache's chain is host time per layer, the same at batch 1 and 8 (the v5 rows: no batch trend)
    q = kv_format("hqq-4")
    extra = [throughput.hf_decode_speed(spec, gpu, w, q, b, 1100).fixed_s
             - throughput.hf_decode_speed(spec, gpu, w, kv, b, 1100).fixed_s for b in (1, 8)]
    per_layer = throughput.load("throughput")["engines"]["hf"]["kv_per_layer_s"]["hqq"]
    assert extra[0] == pytest.approx(extra[1]) == pytest.approx(spec.num_layers * per_layer)


def test_hf_decode_constants_are_the_reports_fit_of_the_committed_data():
    """throughput.yaml `hf` holds what scripts/hf_decode_report.py --fit computes from the committed runs (GPU side on
    the v4 profiles, host side on the v5 interleaved rows, the reference host the median lease), and the README's
    transformers block is that report's output."""
    report = load_script("hf_decode_report")
    fitted = report.fitted_constants()
    e = throughput.load("throughput")["engines"]["hf"]
    for k in ("gpu_kernel_s", "kv_copy_efficiency", "step_host_layers", "reference_launch_us", "per_layer_s"):
        assert e[k] == pytest.approx(fitted[k], rel=1e-9), k
    for k in ("hqq", "quanto"):
        assert e["kv_per_layer_s"][k] == pytest.approx(fitted[k], rel=1e-9), k
    assert report.readme_block() == report.v5_markdown().strip("\n")


def test_hf_leave_one_model_out_never_sees_the_held_out_model(tmp_path):
    """The v5 held-out column: a model's rows are predicted from constants fitted on the other models only, so
    tripling the 14B's measurements leaves kvcalc's held-out predictions for it where they were."""
    report = load_script("hf_decode_report")
    lines = report.V5.read_text().splitlines()
    moved = []
    for line in lines:
        r = json.loads(line)
        if r["settings"]["model"] == "qwen2.5-14b":
            r["decode_ms_per_step"] *= 3
        moved.append(json.dumps(r))
    path = tmp_path / "v5.jsonl"
    path.write_text("\n".join(moved) + "\n")
    before, after = report.v5_check(), report.v5_check(path)
    for cid, c in before["cases"].items():
        a = after["cases"][cid]
        if c["model"] == "qwen2.5-14b":
            assert (1 + a["lomo_error"]) * 3 == pytest.approx(1 + c["lomo_error"])
            assert (1 + a["in_sample_error"]) * 3 != pytest.approx(1 + c["in_sample_error"])  # in sample: it moves
        else:  # the other models' held-out constants now see a slower 14B
            assert a["lomo_error"] != pytest.approx(c["lomo_error"])


# -- trust -------------------------------------------------------------------------------------------------------


def test_labels_by_evidence():
    assert speed_basis(get_gpu("h200"))[0] == LABELS[0]
    assert speed_basis(get_gpu("l40s"))[0] == LABELS[2]  # no public result for an L40S
    corpus = Path(__file__).resolve().parents[1] / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"
    t4_rows = sum(json.loads(line)["gpu"] == "t4" for line in corpus.read_text().splitlines() if line.strip())
    assert t4_rows > 0  # the T4's public results (corpus-more) move it off the datasheet label
    label, backing = speed_basis(get_gpu("t4"))[:2]
    assert label == LABELS[1] and f"{t4_rows} public results" in backing
    assert speed_basis(get_gpu("l4"))[0] == LABELS[1]  # public results, held out
    fp8_t4 = speed_trust(get_gpu("t4"), "vllm", weight_format("bf16"), kv_format("fp8"))
    assert fp8_t4.label == "assumption" and any("fp8_emulated_extra" in a for a in fp8_t4.assumptions)
    for gid in ("h200", "l4", "b200", "mi300x", "rtx-4090"):
        t = speed_trust(get_gpu(gid), "vllm", weight_format("bf16"), kv_format("auto"), "TPOT", inverse=True)
        assert t.label in LABELS and t.backing.startswith(gid)
        lo, hi = t.bounds(100.0)
        assert lo <= 100.0 <= hi
    cap = capacity_trust(get_gpu("l4"), "vllm")
    assert cap.low <= 0 <= cap.high


def cli(args):
    code, out, err = invoke(args)
    assert code == 0, err
    return out


def test_plan_rows_carry_trust():
    out = cli(["plan", "--gpu", "l4", "--model", "llama-3.2-3b", "--context", "4k", "--engine", "vllm", "--json"])
    rows = json.loads(out)["rows"]
    for r in rows:
        assert {"speed", "capacity"} <= set(r["trust"])
        assert r["trust"]["speed"]["label"] in LABELS


def test_gpus_say_what_speed_rests_on():
    payload = json.loads(cli(["gpus", "--json"]))
    assert all(p["speed_evidence"]["label"] in LABELS for p in payload)
    text = cli(["gpus"])
    assert "speed rests on" in text


# -- the report ----------------------------------------------------------------------------------------------------


def test_report_predicts_and_holds_out():
    report = load_script("speed_corpus_report")
    rows = [r for r in report.load_rows() if r["source"] == "bereketlemma-l4"]
    res = report.evaluate(rows, {})
    assert len(res) == len(rows) and all(isinstance(x["error"], float) for x in res)
    # a class no training row informs stays unfitted: held-out GPUs fall back to the defaults
    train = [r for r in report.load_rows() if r["gpu"] != "mi300x" and r["source"] in ("bereketlemma-l4",
                                                                                       "iog-llm-inference-benchmarks")]
    classes = report.fit_classes(train, grid_steps=3)
    assert "CDNA3-module" not in classes["tensor"]
    assert not classes["comm"]  # the TP all-reduce is kvcalc/allreduce.py's published model, never fitted here
    # decode bandwidth is one fraction pooled over the memory technologies (each one's rows come from one GPU type)
    assert set(classes["bandwidth"]) == {throughput.POOLED}


def test_pooled_bandwidth_reaches_technologies_without_a_class():
    """A memory technology with no class of its own (HBM3: the H100 SXM) takes the pooled fraction instead of its
    profile's assumption; a technology's own class, where one is given, stands; a measured GPU keeps its own fit."""
    spec, w, kv = load_model("llama-3.1-8b"), weight_format("bf16"), kv_format("auto")
    sxm, l4, h200 = get_gpu("h100-sxm"), get_gpu("l4"), get_gpu("h200")
    with throughput.class_override({"bandwidth": {throughput.POOLED: 0.6, "GDDR6": 0.5}}):
        assert throughput.class_factors(sxm)["bandwidth"] == 0.6
        assert throughput.class_factors(l4)["bandwidth"] == 0.5
        assert throughput.gpu_rates(sxm).bandwidth == pytest.approx(0.6 * sxm.memory_bandwidth_bytes_per_s)
        assert "pooled" in throughput.gpu_rates(sxm).source
        pooled_h200 = decode_speed(spec, h200, "vllm", w, kv, 1, 1024).step_s
    with throughput.class_override({}):
        assert throughput.gpu_rates(sxm).bandwidth == pytest.approx(
            sxm.achievable_bandwidth_fraction * sxm.memory_bandwidth_bytes_per_s)
        assert decode_speed(spec, h200, "vllm", w, kv, 1, 1024).step_s == pytest.approx(pooled_h200)


def test_async_scheduling_by_release():
    """vLLM turned async scheduling on by default in v0.14.0, not with pipeline parallel (release notes, #27614)."""
    from kvcalc.engines.vllm_versions import async_scheduling_default

    assert not async_scheduling_default("0.8.5") and not async_scheduling_default("0.13.0")
    assert async_scheduling_default("0.14.0") and async_scheduling_default("0.26.0")
    assert not async_scheduling_default("0.26.0", pp=2)


def test_async_scheduling_costs_a_lone_prompt_one_step():
    """At a request rate the other requests decode when a prompt arrives: without async scheduling it waits for the
    step in flight; with it, one step more (scheduled into step k+2). TPOT barely moves."""
    from kvcalc.workload import Workload, vllm_bench

    spec, gpu, bf16, auto = load_model("llama-3.1-8b"), get_gpu("h100-pcie"), weight_format("bf16"), kv_format("auto")
    wl = Workload(200, 200, request_rate=1.0, num_prompts=60)
    kw = dict(chunk_tokens=8192, slots=256, entrypoint="offline")
    sync = vllm_bench(spec, gpu, bf16, auto, wl, async_scheduling=False, **kw)
    asyn = vllm_bench(spec, gpu, bf16, auto, wl, async_scheduling=True, **kw)
    step = sync.tpot_s
    assert 0.3 * step < asyn.ttft_s - sync.ttft_s < 1.5 * step
    assert asyn.tpot_s == pytest.approx(sync.tpot_s, rel=0.15)
    # the release decides it inside vllm_bench, so plan, search (plan's rows) and validate --bench share the rule
    assert vllm_bench(spec, gpu, bf16, auto, wl, vllm_version="0.8.5", **kw).ttft_s == sync.ttft_s
    assert vllm_bench(spec, gpu, bf16, auto, wl, vllm_version="0.26.0", **kw).ttft_s == asyn.ttft_s
    assert vllm_bench(spec, gpu, bf16, auto, wl, vllm_version="0.26.0", pp=2, **kw).ttft_s == sync.ttft_s


def test_frontend_is_the_hosts():
    """The H200 (measured on the project's host) keeps that host's front end; other GPUs take the public hosts'
    figure; the LLM class has none."""
    from kvcalc.constants import load
    from kvcalc.workload import frontend_s

    fe = load("serve")["frontend"]
    assert frontend_s("serve", get_gpu("h200")) == fe["per_request_s"] == frontend_s("serve")
    # two fits of two kinds of host (7.4 ms on the public corpus, 7.3 ms on the project's H200 host at its
    # reference CPU since the fresh server's first request is modelled apart): neither is bounded by the other
    assert frontend_s("serve", get_gpu("l4")) == fe["public_hosts_s"] != fe["per_request_s"]
    assert 0 < fe["public_hosts_s"] < 0.05 and 0 < fe["per_request_s"] < 0.05
    assert frontend_s("offline", get_gpu("l4")) == 0.0


def test_corpus_lengths_follow_the_sources_own_columns():
    """mushfiqrahman.dev states 128 output tokens, but its Output Tok/s over Req/s is 100 tokens per request."""
    import re

    rows = [r for r in _rows() if r["source"] == "mushfiqrahman-4090"]
    assert rows
    for r in rows:
        cells = [c.strip() for c in r["quote"].split("|") if c.strip()]
        req_s, tok_s = float(cells[-5]), float(cells[-4])
        assert re.search(r"\| \d+ \| [\d.]+ \| \d+ \|", r["quote"])
        assert r["output_len"] == pytest.approx(tok_s / req_s, rel=0.01)


def test_report_runs_pass_the_prompt_count():
    """A saturated run's queue grows with --num-prompts: the corpus row's count reaches the simulation."""
    report = load_script("speed_corpus_report")
    row = next(r for r in report.load_rows() if r["source"] == "iog-llm-inference-benchmarks")
    assert report._workload(row).num_prompts == row["num_prompts"] == 200


def test_hf_decode_split_was_named_before_the_second_session():
    """Item 4: the fit cases (named before the 02:14 session's cases were seen) are the first session's; a host
    factor fitted on them is reported with the held-out cases' errors, not shipped."""
    report = load_script("hf_decode_report")
    rows = report.rows()
    fit = {r["case"]: r for r in rows if r["fit"]}
    assert set(fit) == report.FIT_CASES
    assert all(r["session"] < "2026-12-02" for r in fit.values())  # a later session's repeat is held out
    assert any(not r["fit"] for r in rows)
    check = report.host_refit(rows)
    assert check["fit"]["refit_median"] <= check["fit"]["shipped_median"]  # fitted there
    assert check["held_out"]["n"] == len(rows) - len(report.FIT_CASES)
    r = rows[0]  # the shipped figure is hf_bench's: measured x (1 + error)
    assert r["predicted_ms"] == pytest.approx(r["measured_ms"] * (1 + r["error"]), rel=1e-3)
    assert "held out" in report.markdown(rows)


def test_v0_releases_pay_the_hosts_per_sequence_work_between_steps():
    """The V0 engine (releases before 0.8.0) schedules, prepares inputs and processes outputs per sequence between
    steps while the GPU waits (vllm#6801: ~20 ms at batch 200); V1 and an unnamed release do not."""
    from kvcalc.constants import load
    from kvcalc.engines.vllm_versions import serial_host_per_seq_s

    per = load("throughput")["engines"]["vllm"]["v0_host_per_seq_s"]
    assert per == pytest.approx(20e-3 / 200)  # the figure of the comment cited beside it
    assert serial_host_per_seq_s("0.6.2") == serial_host_per_seq_s("0.5.3") == per
    assert serial_host_per_seq_s("0.8.0") == serial_host_per_seq_s("0.8.5") == serial_host_per_seq_s(None) == 0.0


def test_the_host_cost_adds_per_sequence_per_step_in_the_simulation_and_the_closed_form():
    """4 prompts at once, one prefill step then 10 decode steps of 4: each step 4 x host longer, TTFT too."""
    import numpy as np

    from kvcalc.serve_sim import EngineConfig, Load, simulate
    from kvcalc.step_cost import step_cost
    from kvcalc.workload import Workload, closed_form_bench

    spec, gpu, bf16, auto = load_model("llama-3.2-3b"), get_gpu("h200"), weight_format("bf16"), kv_format("auto")
    cost = step_cost(spec, gpu, bf16, auto)
    base = dict(prefix_caching=False, async_scheduling=False)
    a = simulate(cost, EngineConfig(8192, 64, 10_000, 16, 4096, **base), Load(100, 11, 4))
    b = simulate(cost, EngineConfig(8192, 64, 10_000, 16, 4096, host_per_seq_s=5e-4, **base), Load(100, 11, 4))
    assert np.allclose(b.tpot_s - a.tpot_s, 4 * 5e-4) and np.allclose(b.ttft_s - a.ttft_s, 4 * 5e-4)
    wl = Workload(128, 128, concurrency=32, burst=True)
    kw = dict(chunk_tokens=2048, slots=256, tp=1)
    # a V1 release with full decode graphs (0.8-0.10 add their piecewise graphs' CPU floor: test_piecewise_floor.py)
    v1 = closed_form_bench(spec, gpu, bf16, auto, wl, **kw, vllm_version="0.11.0")
    v0 = closed_form_bench(spec, gpu, bf16, auto, wl, **kw, vllm_version="0.6.2")
    assert v0.tpot_s - v1.tpot_s == pytest.approx(32 * serial_host_per_seq(), rel=1e-6)
    # the simulation (what plan shows) says so in its notes, for a V0 release only
    from kvcalc.workload import vllm_bench

    sim = dict(chunk_tokens=2048, slots=256, entrypoint="offline")
    assert any("V0 engine" in n for n in vllm_bench(spec, gpu, bf16, auto, wl, vllm_version="0.6.2", **sim).notes)
    assert not any("V0 engine" in n for n in vllm_bench(spec, gpu, bf16, auto, wl, vllm_version="0.8.5", **sim).notes)


def test_plans_decode_column_pays_the_v0_hosts_work_and_eager_forward():
    """`kvcalc plan --vllm-version 0.6.3` (V0) prices a decode step as the simulation does (workload.vllm_decode_step):
    Llama-3.2-3B on an H200 at batch 32 and 1,024 tokens is its GPU step plus 32 x 0.1 ms of host work; at 9,000
    tokens (past max_seq_len_to_capture, 8,192) one request's step runs eager: the CPU's launches of 28 layers,
    2 ms + 28 x 0.4333 ms = 14.13 ms, above the GPU's ~3 ms, plus 0.1 ms. 0.26.0 (V1) has neither."""
    from kvcalc.constants import load
    from kvcalc.inverse import row_for
    from kvcalc.plan import PlanRequest

    def row(context, batch, version):
        return row_for(PlanRequest(spec=load_model("llama-3.2-3b"), gpu=get_gpu("h200"), context=context,
                                   batch=batch, engines=("vllm",), vllm_version=version))

    host = serial_host_per_seq()  # 0.1 ms as shipped
    v0, v1 = row(1024, 32, "0.6.3"), row(1024, 32, "0.26.0")
    gpu_step = v1.speed.step_s
    assert v0.speed.gpu_step_s == pytest.approx(gpu_step, rel=1e-9) and v1.speed.gpu_step_s is None
    assert v0.speed.step_s == pytest.approx(gpu_step + 32 * host, rel=1e-9)
    assert v0.decode_tokens_per_s == pytest.approx(32 / (gpu_step + 3.2e-3), rel=1e-9)
    assert any("V0 engine" in n for n in v0.notes) and not any("V0 engine" in n for n in v1.notes)
    long_v0, long_v1 = row(9000, 1, "0.6.3"), row(9000, 1, "0.26.0")
    e = load("throughput")["engines"]["vllm"]
    eager = e["eager_fixed_step_s"] + 28 * e["eager_per_layer_s"]  # 2 ms + 28 x 0.4333 ms = 14.13 ms as shipped
    assert long_v1.speed.step_s < eager
    assert long_v0.speed.step_s == pytest.approx(eager + host, rel=1e-9)
    assert long_v0.decode_tokens_per_s == pytest.approx(1 / (eager + host), rel=1e-9)
    assert row(8000, 1, "0.6.3").speed.step_s < eager  # within max_seq_len_to_capture: the graph, no eager floor


def serial_host_per_seq():
    from kvcalc.engines.vllm_versions import serial_host_per_seq_s

    return serial_host_per_seq_s("0.6.2")


def test_the_oracle_mi300x_rows_name_a_v0_release_and_say_why():
    """The post states no release; its date (2024-10-10) is before v0.6.3 (2024-10-14): V0 either way."""
    from kvcalc.engines.vllm_versions import rules_for

    rows = [r for r in _rows() if r["source"] == "oracle-mi300x-405b"]
    assert len(rows) == 9
    for r in rows:
        assert rules_for(r["vllm_version"]).engine == "v0"
        assert "2024-10-10" in r["vllm_version_basis"] and "v0.6.3" in r["vllm_version_basis"]


def test_session_reference_never_puts_a_row_in_its_own_host_scale():
    """Item 4: a row's host scale comes from its session's OTHER default-cache rows: moving one default row's
    measurement moves the scaled prediction of its session's other rows, never its own."""
    report = load_script("hf_decode_report")
    rows = report.rows()
    base = {r["case"] + r["time"]: r for r in report.session_reference(rows)}
    target = next(r for r in rows if r["case"] == "v4hf-llama-3.2-1b-bf16-auto-b1")
    moved = [dict(r, measured_ms=r["measured_ms"] * 3) if r is target else r for r in rows]
    after = {r["case"] + r["time"]: r for r in report.session_reference(moved)}
    key = target["case"] + target["time"]
    assert after[key]["scaled_ms"] == pytest.approx(base[key]["scaled_ms"])
    same = [k for k, r in after.items() if r["host_session"] == after[key]["host_session"] and k != key]
    assert same and any(after[k]["scaled_ms"] != pytest.approx(base[k]["scaled_ms"]) for k in same)
    # a session with one default-cache row (the 2026-12-02 18h and 19h repeats) tests nothing
    lone = [r for r in after.values() if r["host_refs"] == 0]
    assert lone and all(r["scaled_error"] is None for r in lone)
    s = report.summary(rows)
    assert s["tested_scaled"]["n"] == len(rows) - len(lone)


def _interleaved_rows(tmp_path, measured):
    """Synthetic interleaved rows (2 models x default/HQQ x batch 1, 3 rounds) with measured = measured(pred,
    launch, probe, round)."""
    report = load_script("hf_decode_report")
    lines = []
    for rnd, probe in enumerate((10.0, 14.0, 20.0)):
        for model in ("llama-3.2-1b", "llama-3.1-8b"):
            for kv in ("auto", "hqq-4"):
                st = {"model": model, "weights": "bf16", "kv": kv, "batch": 1, "prompt_len": 1024, "new_tokens": 96}
                pred, launch = report._kvcalc_step(st)
                lines.append(json.dumps({"case_id": f"{model}-{kv}", "round": rnd, "status": "ok", "settings": st,
                                         "decode_ms_per_step": measured(pred, launch, probe, rnd, kv),
                                         "probe_before": {"launch_us": probe}, "probe_after": {"launch_us": probe}}))
    path = tmp_path / "hfi.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return report.interleaved_summary(path)


def test_interleaved_ratio_cancels_the_host_and_the_probe_scales_it(tmp_path):
    # a host that slows every step of a round by the same factor: the ratio test is exact, whatever the factor
    s = _interleaved_rows(tmp_path, lambda pred, launch, probe, rnd, kv: pred * (1.0, 1.7, 0.8)[rnd])
    assert s["ratio"]["n"] == 2 and all(abs(c["ratio_error"]) < 1e-9 for c in s["cases"].values()
                                        if c["ratio_error"] is not None)
    # a host whose launch part follows the probe (0.09 x the probe's us): the probe test is exact
    s = _interleaved_rows(tmp_path, lambda pred, launch, probe, rnd, kv: pred + (0.09 * probe - 1) * launch)
    assert s["probe"]["n"] == 4 and all(abs(c["probe_error"]) < 1e-9 for c in s["cases"].values())
    assert s["probe"]["within_15"] == 4
    # and a quantized cache that costs 30% more than kvcalc says (same host factor per round) reads -23% there
    s = _interleaved_rows(tmp_path, lambda pred, launch, probe, rnd, kv: pred * (1.0, 1.7, 0.8)[rnd]
                          * (1.3 if kv != "auto" else 1.0))
    errs = [c["ratio_error"] for c in s["cases"].values() if c["ratio_error"] is not None]
    assert len(errs) == 2 and all(e == pytest.approx(1 / 1.3 - 1) for e in errs)
    assert s["ratio"]["within_15"] == 0


@pytest.mark.cpu_engine
def test_interleaved_runner_visits_every_case_once_a_round_with_a_probe(tmp_path):
    """The measurement item 4 asks the lead to run (scripts/gpu_v5/hf_decode_interleaved.py), smoke-run on the CPU
    with a tiny catalog model: every case once per round, a shuffled order that differs between rounds, a host probe
    before and after each measurement; the case file's parts name real catalog models."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("optimum.quanto")
    from kvcalc.catalog import load_model

    runner = load_script("gpu_v5/hf_decode_interleaved")  # registered as that name; it imports nothing of scripts/
    spec = json.loads(runner.CASES.read_text())
    assert all(load_model(m) for p in spec["parts"].values() for m in p["models"])
    assert sum(p["estimate_s"] for p in spec["parts"].values()) / len(spec["parts"]) < 530
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"seed": 3, "rounds": 3, "probe_launches": 20, "prompt_len": 8, "new_tokens": 3,
                                 "kvs": ["auto", "quanto-4"], "batches": [1],
                                 "parts": {"t": {"models": ["smollm2-135m"]}}}))
    out = tmp_path / "rows.jsonl"
    assert runner.main(["--part", "t", "--cases", str(cases), "--out", str(out), "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], []).append(r["case_id"])
        assert r["probe_before"]["launch_us"] > 0 and r["probe_after"]["python_ns_per_iter"] > 0
    assert all(sorted(v) == sorted(by_round[0]) and len(set(v)) == 2 for v in by_round.values())
    assert len({tuple(v) for v in by_round.values()}) > 1  # shuffled differently


def test_a_lone_prompt_is_one_with_a_small_batch_in_flight_by_the_runs_own_figures():
    """The lone-prompt rule (front-end and tensor-class fits) counts a request-rate run's requests in flight from its
    measured TTFT and TPOT (Little's law), so a low rate with long outputs is a loaded run, not a lone prompt."""
    report = load_script("speed_corpus_report")
    rows = {r["id"]: r for r in report.load_rows()}
    spark = rows["djangodevreng-gpt-oss-20b-mxfp4-reasoning-ttft"]  # 0.2 req/s, ~3,559 output tokens of ~59 ms
    assert spark["request_rate"] <= 1.0 and report.in_flight(spark) > report.LONE_IN_FLIGHT
    assert not report.lone(spark)
    qps1 = rows["pegainfer5090-qwen3-4b-qps1-ttft"]  # 1 req/s, 128 tokens of 6.9 ms: under one request in flight
    assert report.in_flight(qps1) == pytest.approx(1.0 * (56 + 127 * 6.86) / 1e3)
    assert report.lone(qps1)
    # a run without its TTFT and TPOT keeps the rate rule; concurrency 1 is always lone
    bare = dict(qps1, id="x", source_url="nowhere")
    assert report.in_flight(bare) is None and report.lone(bare)
    assert report.lone(dict(spark, request_rate=None, concurrency=1))
