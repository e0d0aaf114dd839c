"""One story per row (issue 24): over random plans, a row's table cells, its verdicts, its JSON and its place in the
plots say the same thing: fits or not, how many requests vLLM holds at once, and the speed at that many."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.catalog import load_model
from kvcalc.errors import UsageError
from kvcalc.hardware import get_gpu
from kvcalc.plan import UNMEASURED_SPEED, PlanRequest, plan
from kvcalc.plots import bar_status
from kvcalc.render import decode_text, fits_text
from kvcalc.sweeps import config_speed_series, memory_segments
from kvcalc.workload import Workload

GPUS = ["t4", "l4", "a100-80gb", "h100-sxm", "rtx-4090"]
MODELS = ["llama-3.2-3b", "llama-3.1-8b", "qwen3-8b", "gemma-3-1b"]
CHOICES = [(None, None), ("awq", "fp8"), ("nf4", None), (None, "fp8"), ("fp8", None), (None, "hqq-4")]


def _request(gpu, model, context, batch, choice, workload):
    weights, kv = choice
    wl = Workload(context // 2, context - context // 2, batch) if workload else None
    return PlanRequest(load_model(model), get_gpu(gpu), context, batch, weights=weights, kv=kv, workload=wl)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(GPUS), st.sampled_from(MODELS), st.sampled_from([1024, 4096, 4608, 16384, 32768]),
       st.sampled_from([1, 4, 16, 48]), st.sampled_from(CHOICES), st.booleans())
def test_verdict_table_json_and_plots_agree(gpu, model, context, batch, choice, workload):
    try:
        req = _request(gpu, model, context, batch, choice, workload)
        rows = plan(req, [])
    except UsageError:  # e.g. a format an engine does not run for the asked choice alone
        return
    bars = {(b.engine, b.config): b for b in memory_segments(req, rows)}
    speeds = config_speed_series(req)
    for r in rows:
        cell = fits_text(req, r)
        assert cell.startswith("yes") == r.fits, (r.config, r.engine, cell)
        assert "-0.00 GiB" not in cell
        assert (bar_status(req, bars[(r.engine, r.config)]) == "(fits)") == r.fits
        if {"most context", "fastest decode", "most context at low risk"} & set(r.verdicts):
            assert r.fits
        if "fastest decode" in r.verdicts:
            assert (r.engine, r.weights_format) not in UNMEASURED_SPEED
        assert 1 <= r.decode_batch <= batch
        if r.engine == "vllm":
            held = r.max_concurrency or 0
            assert r.decode_batch == max(1, min(batch, held, r.vllm.max_num_seqs))
            assert bool(re.fullmatch(r"no: \d+ of \d+", cell)) == (not r.fits and r.vllm.fits and held > 0), cell
            assert (f" @{r.decode_batch}" in decode_text(req, r)) == (r.decode_batch < batch)
            capacity, points = speeds[r.config]
            assert capacity == held  # the speed plot's "holds N" is the table's max concurrency
            at = [p for p in points if p.batch == r.decode_batch]
            if at:  # the table's speed lies on the plotted curve, at the batch vLLM holds
                assert abs(at[0].tokens_per_s - r.decode_tokens_per_s) <= 1e-9 * r.decode_tokens_per_s
            if r.bench is not None:  # vllm bench's in flight: the clients' requests, at most --concurrency
                assert r.bench.concurrency <= batch + 1e-9
        else:
            # the longest context that fits is at or past --context exactly when it fits (or it is the model's max)
            capped = r.fits and r.kv_capacity_tokens == req.spec.max_position_embeddings
            assert (r.kv_capacity_tokens >= context) == r.fits or capped, (r.config, r.kv_capacity_tokens)
