"""One timing model for `plan` and `search`: on random deployments, a search over exactly that deployment shows the
numbers `kvcalc plan` prints for it, field by field (KV capacity, concurrency, TTFT, TPOT, e2e, throughput,
percentiles), and the closed form search screens with stays below the simulation it is checked against."""

from __future__ import annotations

import random

import pytest

from kvcalc.catalog import load_model
from kvcalc.hardware import get_gpu
from kvcalc.inverse import row_for
from kvcalc.plan import PlanRequest
from kvcalc.prices import load_prices
from kvcalc.search import SearchRequest, Space, Targets, run_search
from kvcalc.workload import Workload

MODELS = ("llama-3.1-8b", "llama-3.2-3b", "qwen3-30b-a3b", "gemma-3-27b")
GPUS = ("h200", "h100-sxm", "a100-80gb", "l40s")


def _cases(n=6, seed=25):
    rng = random.Random(seed)
    for _ in range(n):
        model, gpu = rng.choice(MODELS), rng.choice(GPUS)
        w, k = rng.choice(("bf16", "fp8", "awq")), rng.choice(("auto", "fp8"))
        conc = rng.choice((1, 4, 16, 32))
        i, o = rng.choice((256, 1024, 2048)), rng.choice((64, 128, 256))
        rate = rng.choice((None, None, 2.0))
        util = rng.choice((0.85, 0.9, 0.92))
        yield model, gpu, w, k, conc if rate is None else None, rate, i, o, util


def assert_shared_fields_equal(d, row, **extra) -> None:
    """Every field search's deployment d and plan's row both print is the same number (extra: engine-specific
    pairs, (search's, plan's))."""
    b = row.bench
    shared = {
        "kv_capacity_tokens": (d.kv_capacity_tokens, row.kv_capacity_tokens),
        "max_concurrency": (d.max_concurrency, row.max_concurrency),
        # one replica: search's range is plan's trust.capacity_range as it is (search.deployment_capacity_range)
        "capacity_range": (d.capacity_range, row.trust["capacity_range"]),
        **extra,
        "ttft_ms": (d.ttft_ms, b.ttft_s * 1e3),
        "tpot_ms": (d.tpot_ms, b.tpot_s * 1e3),
        "e2e_ms": (d.e2e_ms, b.e2e_s * 1e3),
        "itl_ms": (d.itl_ms, (b.itl_s or 0) * 1e3),
        "output_tokens_per_s": (d.output_tokens_per_s, b.output_tokens_per_s),
        "percentiles": (d.percentiles, b.percentiles),
    }
    for name, (theirs, ours) in shared.items():
        assert theirs == ours, name


@pytest.mark.parametrize("model,gpu,w,k,conc,rate,i,o,util", list(_cases()))
def test_search_shows_what_plan_says(model, gpu, w, k, conc, rate, i, o, util):
    spec = load_model(model)
    wl = Workload(i, o, concurrency=conc, request_rate=rate)
    space = Space([get_gpu(gpu)], weights=(w,), kv=(k,), tp=(1, 2), utils=(util,), seqs=(64, 256), max_replicas=1)
    res = run_search(SearchRequest(spec, wl, Targets(), space, load_prices(use_user_file=False), top=2))
    if not res.results:
        pytest.skip(f"{model} {w}+{k} does not fit one {gpu} ({res.binding})")
    for d in res.results:
        req = PlanRequest(spec=spec, gpu=get_gpu(gpu), context=wl.context, batch=d.concurrency_per_replica,
                          engines=("vllm",), weights=w, kv=k, util=d.util, max_model_len=d.max_model_len,
                          max_num_batched_tokens=d.max_num_batched_tokens, max_num_seqs=d.max_num_seqs, tp=d.tp,
                          workload=wl)
        row = row_for(req)
        assert_shared_fields_equal(d, row)


def test_llama4_chunked_layers_read_their_chunk_in_both():
    """Llama 4 Scout (36 of 48 layers chunked local, 8,192-token chunks) with prompts of 8,000 tokens whose decode
    crosses a chunk boundary: search's simulated row is plan's (one helper, throughput.effective_context), and both
    TPOTs are below what charging every layer the whole context would give (the screen's closed form too)."""
    from kvcalc import latency
    from kvcalc.formats import kv_format, weight_format

    spec, gpu = load_model("llama-4-scout"), get_gpu("h200")
    wl = Workload(8000, 400, concurrency=8)
    space = Space([gpu], weights=("fp8",), kv=("auto",), tp=(1,), utils=(0.92,), seqs=(64,), max_replicas=1)
    res = run_search(SearchRequest(spec, wl, Targets(), space, load_prices(use_user_file=False), top=1))
    d = res.results[0]
    req = PlanRequest(spec=spec, gpu=gpu, context=wl.context, batch=d.concurrency_per_replica, engines=("vllm",),
                      weights="fp8", kv="auto", util=d.util, max_model_len=d.max_model_len,
                      max_num_batched_tokens=d.max_num_batched_tokens, max_num_seqs=d.max_num_seqs, workload=wl)
    row = row_for(req)
    assert_shared_fields_equal(d, row)
    line = latency.decode_line(spec, gpu, weight_format("fp8"), kv_format("auto"), 1)
    full = latency.DecodeLine(line.fixed, line.mem0, line.mem1, line.cmp0, line.cmp1)  # no chunks: whole context
    assert latency.tpot_s(line, 8000, 400) < latency.tpot_s(full, 8000, 400)


def test_gemma3_kv_capacity_is_vllms_logged_figure_in_both():
    """Gemma 3 27B on an H200 (2k in / 256 out, 32 clients): both commands give the 'GPU KV cache size' vLLM logs
    (concurrency x max_model_len over the hybrid groups), not the pool's blocks x block size."""
    spec, gpu = load_model("gemma-3-27b"), get_gpu("h200")
    wl = Workload(2048, 256, concurrency=32)
    space = Space([gpu], weights=("bf16",), kv=("auto",), tp=(1,), utils=(0.92,), seqs=(64,), max_replicas=1)
    res = run_search(SearchRequest(spec, wl, Targets(), space, load_prices(use_user_file=False), top=1))
    d = res.results[0]
    req = PlanRequest(spec=spec, gpu=gpu, context=wl.context, batch=32, engines=("vllm",), weights="bf16",
                      kv="auto", util=0.92, max_model_len=d.max_model_len, max_num_seqs=64, workload=wl)
    row = row_for(req)
    assert d.kv_capacity_tokens == row.kv_capacity_tokens == row.vllm.logged_kv_tokens
    assert row.kv_capacity_tokens < row.vllm.num_gpu_blocks * row.vllm.block_size  # the pool counts every group


@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "llama-3.2-3b"])
def test_capacity_range_of_a_cold_compile_start_is_plans_in_search(model):
    """vLLM 0.29, a cold torch.compile start of a tied-embedding model on an RTX 4090: plan's rows carry a capacity
    range (the Inductor embedding copy's segment pinned or not, plan.capacity_range), and search's row of the same
    deployment carries the same range, field by field, beside the same figures; its table prints max conc. as
    low-high."""
    from kvcalc.search_render import conc_text

    spec, gpu = load_model(model), get_gpu("rtx-4090")
    wl = Workload(2048, 256, concurrency=16)
    space = Space([gpu], weights=("bf16", "fp8"), kv=("auto",), tp=(1,), utils=(0.9,), seqs=(16, 64), max_replicas=1)
    res = run_search(SearchRequest(spec, wl, Targets(), space, load_prices(use_user_file=False), vllm_version="0.29",
                                   top=2))
    assert res.results
    for d in res.results:
        req = PlanRequest(spec=spec, gpu=gpu, context=wl.context, batch=d.concurrency_per_replica, engines=("vllm",),
                          weights=d.weights_format, kv=d.kv_format, util=d.util, max_model_len=d.max_model_len,
                          max_num_batched_tokens=d.max_num_batched_tokens, max_num_seqs=d.max_num_seqs, tp=d.tp,
                          vllm_version="0.29", workload=wl)
        row = row_for(req)
        span = row.trust["capacity_range"]
        assert span is not None and span["kv_capacity_tokens_low"] < span["kv_capacity_tokens_high"]
        assert span["kv_capacity_tokens_high"] == row.kv_capacity_tokens
        assert_shared_fields_equal(d, row)
        low, high = span["max_concurrency_low"], span["max_concurrency_high"]
        assert conc_text(d) == (f"{low:,}-{high:,}" if low != high else f"{high:,}")
    # the same deployment at 0.31+ (profile run capped at max_split_size_mb 20): one value in both
    res = run_search(SearchRequest(spec, wl, Targets(), space, load_prices(use_user_file=False), vllm_version="0.31",
                                   top=1))
    assert res.results and res.results[0].capacity_range is None


def test_capacity_range_over_replicas_counts_every_replicas_requests():
    """search's max_concurrency is over all replicas; so are the ends of its capacity range, KV tokens per replica."""
    from kvcalc.search import deployment_capacity_range

    req = PlanRequest(spec=load_model("qwen2.5-1.5b"), gpu=get_gpu("rtx-4090"), context=32768, batch=4,
                      engines=("vllm",), vllm_version="0.29")
    row = row_for(req)
    span = row.trust["capacity_range"]
    three = deployment_capacity_range(row, 3)
    assert three["max_concurrency_low"] == 3 * span["max_concurrency_low"]
    assert three["max_concurrency_high"] == 3 * row.max_concurrency
    assert three["kv_capacity_tokens_low"] == span["kv_capacity_tokens_low"]
    assert deployment_capacity_range(row, 1) == span


# SGLang (issue 20 item 4, issue 25 item 1): its candidates are shown as plan's SGLang row of the same deployment
SGLANG_MODELS = MODELS + ("deepseek-v2-lite", "gemma-3-1b")


def _sglang_cases(n=8, seed=22):  # a seed whose draw has an MLA, an MoE, Gemma 3, rates, c1, 16-token prompts
    rng = random.Random(seed)
    for _ in range(n):
        model, gpu = rng.choice(SGLANG_MODELS), rng.choice(GPUS)
        w, k = rng.choice(("bf16", "fp8", "awq")), rng.choice(("auto", "fp8"))
        conc = rng.choice((1, 4, 16, 32))
        i, o = rng.choice((16, 256, 1024, 2048)), rng.choice((64, 128, 256))
        rate = rng.choice((None, None, 2.0))
        yield model, gpu, w, k, conc if rate is None else None, rate, i, o


def _sglang_search(spec, gpu, w, k, wl, top=2, screen_only=False, **kw):
    from kvcalc import search_sglang

    space = Space([get_gpu(gpu)], weights=(w,), kv=(k,), tp=(1, 2), max_replicas=kw.pop("max_replicas", 1))
    req = SearchRequest(spec, wl, Targets(), space, load_prices(use_user_file=False), top=top, server="sglang", **kw)
    if screen_only:  # the closed-form screen's own figures (the rows before the simulation re-times them)
        orig = search_sglang.retime
        search_sglang.retime = lambda req, rows, context, version: (rows, {})
        try:
            return search_sglang.sglang_search(req)[0]
        finally:
            search_sglang.retime = orig
    return search_sglang.sglang_search(req)[0]


@pytest.mark.parametrize("model,gpu,w,k,conc,rate,i,o", list(_sglang_cases()))
def test_sglang_search_shows_what_plan_says(model, gpu, w, k, conc, rate, i, o):
    """Every field an SGLang candidate and `kvcalc plan --engine sglang` both print is the same number: before,
    search showed its closed form (no queueing, no piecewise-graph prefill floor: Llama-3.1-8B on an H200 at 16
    clients of 1k + 128, TTFT 25.5 ms in search, 278 in plan)."""
    spec = load_model(model)
    wl = Workload(i, o, concurrency=conc, request_rate=rate)
    rows = _sglang_search(spec, gpu, w, k, wl)
    if not rows:
        pytest.skip(f"{model} {w}+{k} does not fit one {gpu} under SGLang")
    screen = {(d.tp, d.replicas): d for d in _sglang_search(spec, gpu, w, k, wl, screen_only=True)}
    for d in rows:
        assert d.timing == "simulation"
        req = PlanRequest(spec=spec, gpu=get_gpu(gpu), context=wl.context, batch=d.concurrency_per_replica,
                          engines=("sglang",), weights=w, kv=k, max_model_len=d.context_length, tp=d.tp, workload=wl)
        row = row_for(req)
        assert row.engine == "sglang" and row.sglang.mem_fraction_static == pytest.approx(d.mem_fraction_static,
                                                                                         abs=1e-4)
        assert_shared_fields_equal(d, row, max_running_requests=(d.max_running_requests,
                                                                row.sglang.max_running_requests))
        # the screen it passed stays below the simulation: TPOT within 5% (as vLLM's), TTFT below it but for the
        # warm-up's cached prompt (sglang.bench_serving primes the radix cache with the run's first prompt, so one
        # request of num_prompts prefills its last token only: workload.vllm_bench)
        s = screen[(d.tp, d.replicas)]
        assert s.tpot_ms <= d.tpot_ms * 1.05
        prompts = wl.prompts()
        assert s.ttft_ms * (prompts - 1) / prompts <= d.ttft_ms * (1 + 1e-9)


# plan's decode column (issue 18/25: one model per quantity): the table's decode tok/s of a row is the simulation's
# pure decode step of the row's batch at --context, with the release's rules (0.8-0.10's piecewise-graph CPU floor,
# V0's host work per sequence and its eager forward past max_seq_len_to_capture), on every release
DECODE_MODELS = MODELS + ("qwen2.5-1.5b",)
DECODE_VERSIONS = ("0.6.3", "0.9.2", "0.26.0", None)  # V0, piecewise graphs only, full decode graphs, the newest


def _decode_cases(n=14, seed=26):  # a seed whose draw has each rule setting the step (test_the_draw_covers_each_rule)
    rng = random.Random(seed)
    for _ in range(n):
        yield (rng.choice(DECODE_MODELS), rng.choice(GPUS), rng.choice(DECODE_VERSIONS), rng.choice((1, 4, 16, 64)),
               rng.choice((256, 2048, 9000)), rng.choice(("bf16", "fp8")))


def simulated_decode_step(spec, gpu, version, batch, context, weights) -> tuple[float, float, object]:
    """(plan's decode step, the simulation's, plan's row): the simulation serves `batch` prompts of context - 1
    tokens at once, all prefilled in one step (a budget that holds them), then one pure decode step of the batch at
    `context` tokens each: its TPOT is that step (the LLM class: no front end in it)."""
    kw = dict(spec=spec, gpu=gpu, context=context, batch=batch, engines=("vllm",), weights=weights, kv="auto",
              vllm_version=version, entrypoint="offline", max_num_batched_tokens=max(8192, batch * context),
              max_model_len=context + 1)  # the workload's requests: context - 1 prompt tokens and 2 output tokens
    row = row_for(PlanRequest(**kw))
    if not row.fits:
        return 0.0, 0.0, row
    wl = Workload(context - 1, 2, concurrency=batch, burst=True)
    sim = row_for(PlanRequest(**kw, workload=wl))
    return row.decode_batch / row.decode_tokens_per_s, sim.bench.tpot_s, row


@pytest.mark.parametrize("model,gpu,version,batch,context,weights", list(_decode_cases()))
def test_plans_decode_is_the_simulations_decode_step(model, gpu, version, batch, context, weights):
    spec, g = load_model(model), get_gpu(gpu)
    plan_step, sim_step, row = simulated_decode_step(spec, g, version, batch, context, weights)
    if not row.fits:
        pytest.skip(f"{model} {weights} does not hold {batch} x {context} on one {gpu}")
    assert row.decode_batch == batch
    assert plan_step == pytest.approx(sim_step, rel=1e-6)
    # the rules are in it where the release has them: V0's host work on every step, the piecewise floor as a floor
    if version == "0.6.3":
        assert row.speed.gpu_step_s is not None and plan_step > row.speed.gpu_step_s
    if version in ("0.26.0", None):
        assert row.speed.gpu_step_s is None


def test_the_draw_covers_each_rule():
    """The random deployments above include one whose step is the piecewise floor (0.9.2), one past V0's
    max_seq_len_to_capture whose step is V0's eager forward plus its host work, and the four releases, so the
    property is tested on each rule."""
    from kvcalc.engines.vllm_versions import piecewise_decode_floor_s, serial_host_per_seq_s
    from kvcalc.workload import vllm_step_rules

    cases = list(_decode_cases())
    assert {c[2] for c in cases} == set(DECODE_VERSIONS)
    floored = eager = 0
    for model, gpu, version, batch, context, weights in cases:
        spec = load_model(model)
        if version not in ("0.9.2", "0.6.3"):
            continue
        plan_step, _, row = simulated_decode_step(spec, get_gpu(gpu), version, batch, context, weights)
        if not row.fits:
            continue
        if version == "0.9.2":
            floored += plan_step == pytest.approx(piecewise_decode_floor_s(version, spec.num_layers))
        elif context > 8192:
            rules, _ = vllm_step_rules(spec, vllm_version=version)
            eager += plan_step == pytest.approx(rules["eager_s"] + batch * serial_host_per_seq_s(version))
    assert floored and eager
