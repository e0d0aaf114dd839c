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
        b = row.bench
        shared = {  # every field both print
            "kv_capacity_tokens": (d.kv_capacity_tokens, row.kv_capacity_tokens),
            "max_concurrency": (d.max_concurrency, row.max_concurrency),
            "ttft_ms": (d.ttft_ms, b.ttft_s * 1e3),
            "tpot_ms": (d.tpot_ms, b.tpot_s * 1e3),
            "e2e_ms": (d.e2e_ms, b.e2e_s * 1e3),
            "itl_ms": (d.itl_ms, (b.itl_s or 0) * 1e3),
            "output_tokens_per_s": (d.output_tokens_per_s, b.output_tokens_per_s),
            "percentiles": (d.percentiles, b.percentiles),
        }
        for name, (theirs, ours) in shared.items():
            assert theirs == ours, name


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
