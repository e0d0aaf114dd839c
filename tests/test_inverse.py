"""`kvcalc fit`: every answer fits on the scalar plan path and one step beyond does not."""

import json
from dataclasses import replace

import pytest
from cli_helper import invoke

from kvcalc.catalog import load_model
from kvcalc.engines import vllm as vllm_engine
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.inverse import answer, fits, row_for
from kvcalc.plan import PlanRequest

CASES = [
    ("llama-3.1-8b", "l4", None, None, 1),
    ("llama-3.1-8b", "l4", "awq", "fp8", 1),
    ("qwen3-8b", "a10g", None, "fp8", 1),
    ("gemma-3-4b", "t4", None, None, 1),  # sliding-window layers: capped per-request blocks
    ("llama-3.2-3b", "t4", "nf4", None, 1),
    ("llama-3.1-70b", "h100-sxm", None, None, 4),
    ("qwen3-30b-a3b", "h100-sxm", None, "fp8", 1),
]


def _req(model, gpu, w, k, tp, **kw):
    return PlanRequest(spec=load_model(model), gpu=get_gpu(gpu), context=kw.pop("context", 8192),
                       batch=kw.pop("batch", 1), engines=("vllm",), weights=w, kv=k, tp=tp, **kw)


@pytest.mark.parametrize("model,gpu,w,k,tp", CASES)
@pytest.mark.parametrize("batch", [1, 7])
def test_max_context_fits_and_one_more_token_does_not(model, gpu, w, k, tp, batch):
    req = _req(model, gpu, w, k, tp, batch=batch)
    a = answer("max-context", req)
    if a.value is None:
        assert not fits(req, context=1)
        return
    assert fits(req, context=a.value)
    if a.value < req.spec.max_position_embeddings:
        assert not fits(req, context=a.value + 1)
        assert a.fits_one_step_beyond is False


@pytest.mark.parametrize("model,gpu,w,k,tp", CASES)
@pytest.mark.parametrize("context", [1000, 32768])
def test_max_concurrency_fits_and_one_more_request_does_not(model, gpu, w, k, tp, context):
    req = _req(model, gpu, w, k, tp, context=context)
    a = answer("max-concurrency", req)
    if a.value:
        assert fits(req, batch=a.value) and not fits(req, batch=a.value + 1)
    else:
        assert not fits(req, batch=1)


@pytest.mark.parametrize("model,gpu,w,k,tp", CASES)
def test_min_util_fits_and_one_hundredth_less_does_not(model, gpu, w, k, tp):
    req = _req(model, gpu, w, k, tp, context=4096, batch=4)
    a = answer("min-util", req)
    if a.value is None:
        assert not fits(req, util=1.0)
        return
    assert fits(req, util=a.value)
    if a.value > 0.01:
        assert not fits(req, util=round(a.value - 0.01, 2))


def test_min_util_by_hand():
    """Llama-3.1-8B bf16 on an L4 at 2 x 4096: the answer's requested bytes cover weights + overheads + 2 requests'
    blocks + the null block; 0.01 less does not."""
    req = _req("llama-3.1-8b", "l4", None, None, 1, context=4096, batch=2)
    a = answer("min-util", req)
    row = row_for(replace(req, util=a.value))
    est = row.vllm
    need = est.weights_bytes + est.activation_bytes + est.non_torch_bytes + est.cudagraph_bytes + \
        (2 * 64 + 1) * est.page_bytes_all_layers  # 4096 / 64 = 64 blocks per request (0.34: 64-token blocks), one null block
    assert est.requested_memory >= need
    lower = row_for(replace(req, util=round(a.value - 0.01, 2))).vllm
    assert lower.requested_memory < need


@pytest.mark.parametrize("model,gpu,batch,context", [("llama-3.1-8b", "l4", 8, 32768), ("llama-3.1-70b", "a100-80gb", 1, 8192),
                                                     ("qwen2.5-0.5b", "t4", 1, 8192)])
def test_min_gpus_fits_and_no_fewer_gpus_do(model, gpu, batch, context):
    req = _req(model, gpu, None, None, 1, context=context, batch=batch)
    a = answer("min-gpus", req)
    assert a.value is not None and a.options
    for o in a.options:
        assert o["tp"] * o["pp"] == a.value and fits(req, tp=o["tp"], pp=o["pp"])
    from kvcalc.inverse import _tp_pp_options

    for count in range(1, a.value):
        for tp, pp in _tp_pp_options(req, count):
            assert not fits(req, tp=tp, pp=pp)


@pytest.mark.parametrize("model,gpu,w,k,tp", CASES)
def test_auto_max_model_len_is_the_largest_that_starts(model, gpu, w, k, tp):
    req = _req(model, gpu, w, k, tp)
    a = answer("auto", req)
    derived = req.spec.max_position_embeddings
    wf, kf = weight_format(w or "bf16"), kv_format(k or "auto")
    # plan's defaults: `vllm serve` (max_num_batched_tokens 2048 on these GPUs), which the profile run's size follows
    base = vllm_engine.VllmSettings(weights=wf, kv=kf, max_model_len=derived, tensor_parallel=tp, entrypoint="serve")
    prof = vllm_engine.estimate(req.spec, req.gpu, base)
    pinned = replace(base, max_num_batched_tokens=prof.max_num_batched_tokens, max_num_seqs=prof.max_num_seqs)
    def kv_fits(length):  # vLLM's auto-fit asks only whether one request's KV fits each stage's budget
        est = vllm_engine.estimate(req.spec, req.gpu, replace(pinned, max_model_len=length))
        stages = est.stages or [est]
        return all(st.available_kv_bytes >= st.layout.min_kv_bytes for st in stages)

    if a.value is None:
        assert not kv_fits(1)
        return
    assert kv_fits(a.value)
    if a.value < derived:
        assert not kv_fits(a.value + 1)


def test_fit_cli_prints_answer_and_proof():
    code, out, err = invoke(["fit", "max-context", "--gpu", "l4", "--model", "llama-3.1-8b", "--batch", "16"])
    assert code == 0, err
    # 1,920 with the V2 runner's graphs sized from their structure (0.31 GiB for the L4's 256 seqs at 0.34,
    # engines/vllm_graphs.py; the 0.80 GiB constant before); 1,664 at 0.34 with the constant (util 1.0 with the extensible KV cache, capped by free memory less its 1 GiB margin, and
    # 64-token blocks); 1,584 at 0.33 (1,648 before 0.27's V2 sampler state, 0.13 GiB, was counted; 2,064 before 0.29's V2 runner took
    # its 0.8 GiB of CUDA graphs out of the KV budget; 2,064 since
    # issue 10: vLLM serve defaults (2048 batched tokens) and the default util 0.92; was 1,920 at 0.9)
    assert "max-context: 1,920 tokens" in out and "+1 token: does not fit" in out
    code, out, _ = invoke(["fit", "auto", "--gpu", "l4", "--model", "llama-3.1-8b", "--json"])
    data = json.loads(out)
    # 31,552 with the graphs sized from their structure (0.31 GiB, engines/vllm_graphs.py); 27,584 with the 0.80 GiB
    # constant at the 0.34 default (util 1.0, the extensible KV cache's free-memory cap, 64-token blocks); 25,568 at
    # 0.33: 0.27+ counts the V2 sampler's state (26,608 without it) and 0.29+ subtracts the V2
    # runner's CUDA graphs (33,168 before: one block held back
    # for the null block from 0.28.1, vLLM PR #47272)
    assert code == 0 and data["schema"] == "kvcalc.fit/1" and data["value"] == 31552
    assert data["fits_at_answer"] is True and data["fits_one_step_beyond"] is False
    code, out, _ = invoke(["fit", "auto", "--gpu", "l4", "--model", "llama-3.1-8b", "--json", "--vllm-version", "0.26.0"])
    # 33,184 at 0.26 (30,832 before issue 10: util 0.9, LLM-class batch defaults; 33,168 before the profile peak by
    # mechanism: the compile phase's embedding copy + 2 x 2048 x 4096 x 2 B)
    assert code == 0 and json.loads(out)["value"] == 33184


@pytest.mark.parametrize("args,needle", [
    (["fit", "max-contexts", "--gpu", "l4"], "max-contexts"),
    (["fit", "max-context", "--gpu", "l4", "--engine", "hf"], "vLLM"),
    (["fit", "min-util", "--gpu", "l4", "--kv", "hqq-4"], "vLLM has no"),
])
def test_fit_bad_input_is_one_line_exit_2(args, needle):
    code, out, err = invoke(args)
    assert code == 2 and "Traceback" not in err
    assert needle in err.strip().splitlines()[-1]  # the error itself is one line (click may print usage above it)


def test_auto_reserves_the_null_block_from_vllm_0_28_1():
    """vLLM PR #47272 (first in v0.28.1rc0): auto-fit plans against the memory minus one block. On a uniform model
    that is exactly one block (16 tokens) less when the budget sits on a block boundary, and never more."""
    # 0.28.0 against 0.28.1: the null block is the only rule between them (0.27 added the sampler state, 0.29 the graphs)
    old = answer("auto", _req("llama-3.1-8b", "l4", None, None, 1, vllm_version="0.28.0"))
    new = answer("auto", _req("llama-3.1-8b", "l4", None, None, 1, vllm_version="0.28.1"))
    assert old.value - 16 <= new.value < old.value
    assert new.fits_one_step_beyond is False and "null block" in new.detail
