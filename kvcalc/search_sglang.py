"""`kvcalc search --server sglang|both`: SGLang deployments for the same workload and targets, beside vLLM's.

The same space (GPU x weights x KV x TP x replicas, pipeline parallel 1) and the same latency model as the vLLM search
(search._latencies: the decode line and prefill chunks of latency.py, with SGLang's chunked_prefill_size as the
chunk), with SGLang's memory ledger in place of vLLM's: one engine/sglang.estimate per structure, at SGLang's default
mem_fraction_static (SGLang has no util x max_num_seqs grid to search: its pool and max_running_requests follow from
the GPU, TP and context). A replica holds min(max_running_requests, max_total_num_tokens // context) requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from . import latency
from .engines import sglang as sglang_engine
from .errors import UnsupportedModelError, UsageError
from .plan import RISK_LEVELS, _risk, parallel_refusal
from .step_cost import sglang_step_extra


@dataclass
class SglangDeployment:
    rank: int
    gpu: str
    tp: int
    replicas: int
    gpus_total: int
    weights_format: str
    kv_format: str
    mem_fraction_static: float
    max_running_requests: int
    chunked_prefill_size: int
    context_length: int
    cost_per_hour: float
    usd_per_million_output_tokens: float
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    concurrency_per_replica: int
    max_concurrency: int  # all replicas
    kv_capacity_tokens: int  # per replica: max_total_num_tokens
    quality_risk: str
    price_source: str
    price_is_estimate: bool
    engine: str = "sglang"
    command: str = ""

    def to_json(self) -> dict:
        return dict(self.__dict__)


def launch_command(model: str, d: SglangDeployment) -> str:
    """The `python -m sglang.launch_server` line that reproduces the deployment (one replica)."""
    parts = ["python -m sglang.launch_server --model-path", model]
    w = d.weights_format
    if w in ("awq", "gptq"):
        parts[1] = f"<{w.upper()} int4 checkpoint of {model}>"
        parts += ["--quantization", w]
    elif w in ("w4a16", "w8a8"):  # the scheme comes from the checkpoint's quantization_config
        parts[1] = f"<compressed-tensors {w.upper()} checkpoint of {model}>"
    elif w == "fp8":
        parts += ["--quantization", "fp8"]
    elif w == "nf4":
        parts += ["--quantization", "bitsandbytes"]
    if d.tp > 1:
        parts += ["--tp", str(d.tp)]
    parts += ["--context-length", str(d.context_length)]
    if d.kv_format != "auto":
        parts += ["--kv-cache-dtype", {"fp8": "fp8_e4m3", "fp8-e5m2": "fp8_e5m2"}[d.kv_format]]
    return " ".join(parts)


def sglang_search(req, sglang_version: str | None = None) -> tuple[list[SglangDeployment], list[str]]:
    """The feasible SGLang deployments of a search.SearchRequest, cheapest first, and why structures were left out."""
    from .catalog import catalog_entry
    from .prices import rent
    from .search import _Candidate, _latencies, _rate_concurrency, priced_gpus, searched_formats

    spec, wl, tg, sp = req.spec, req.workload, req.targets, req.space
    version = sglang_version or sglang_engine.DEFAULT_VERSION
    context = max(wl.context, tg.min_context or 0)
    notes: list[str] = []
    cands, ests, meta = [], [], []
    # the vLLM search already warned about the GPUs it left out (no price, or none at this tier)
    for gpu, price in priced_gpus(req, []):
        for w, k in searched_formats(sp, lambda kv: kv.name in sglang_engine.KV_DTYPES):
            for tp in sp.tp:
                if tp > sp.max_gpus_per_replica or parallel_refusal(spec, tp):
                    continue
                s = sglang_engine.SglangSettings(weights=w, kv=k, context_length=context, tensor_parallel=tp,
                                                 version=version, chunked_prefill_size=req.max_num_batched_tokens)
                try:
                    est = sglang_engine.estimate(spec, gpu, s)
                except (UsageError, UnsupportedModelError) as exc:
                    notes.append(f"sglang: {gpu.id} TP {tp} {w.name}/{k.name}: {exc}")
                    continue
                if not est.fits or est.concurrency_at(wl.context) < 1:
                    continue
                line = latency.decode_line(spec, gpu, w, k, 1, False, tp)
                per_step, per_token = sglang_step_extra(spec, gpu)  # SGLang's eager norm chains (Gemma 3)
                if per_step:
                    line = replace(line, fixed=line.fixed + per_step, pre0=line.prefill_terms()[0] + per_token)
                ratio = latency.weight_time_table(spec, gpu, w, k, tp, max(est.max_running_requests, 1))
                cands.append(_Candidate(None, _risk(spec, w, k), price, line, ratio))
                ests.append(est)
                meta.append((gpu, w, k, tp))
    if not cands:
        return [], notes
    cap = np.array([e.concurrency_at(wl.context) for e in ests])
    max_r = sp.max_replicas if wl.concurrency is None else min(sp.max_replicas, wl.concurrency)
    replicas = np.arange(1, max_r + 1)
    mnbt = np.array([max(e.chunked_prefill_size, 1) for e in ests])
    S, R = len(cands), len(replicas)
    if wl.concurrency is not None:
        n = np.broadcast_to(-(-wl.concurrency // replicas)[None, :], (S, R)).copy()
        ttft, tpot = _latencies(cands, wl, n, mnbt)
        tokens_per_s = wl.concurrency * wl.output_len / (ttft[:, None] + (wl.output_len - 1) * tpot)
        rate_ok = np.ones((S, R), dtype=bool)
    else:
        n, _ = _rate_concurrency(cands, wl, replicas, mnbt, int(cap.max()))
        rate_ok = n <= cap[:, None]
        n = np.minimum(n, np.maximum(cap, 1)[:, None])
        ttft, tpot = _latencies(cands, wl, n, mnbt)
        tokens_per_s = np.full((S, R), wl.request_rate * wl.output_len)
    risk_ok = np.array([RISK_LEVELS.index(c.risk) <= RISK_LEVELS.index(tg.max_quality_risk or "high") for c in cands])
    ok = (risk_ok[:, None] & rate_ok & (n <= cap[:, None])
          & (ttft[:, None] * 1e3 <= (tg.max_ttft_ms if tg.max_ttft_ms is not None else math.inf))
          & (tpot * 1e3 <= (tg.max_tpot_ms if tg.max_tpot_ms is not None else math.inf)))
    try:
        model = catalog_entry(spec.name).get("hf_id") or spec.name
    except KeyError:
        model = spec.name
    rows = []
    for si, ri in zip(*np.nonzero(ok)):
        (gpu, w, k, tp), e, c, r = meta[si], ests[si], cands[si], int(replicas[ri])
        rental = rent(c.price, tp, r, req.price_tier, req.published_prices_only)  # search.py evaluate's cost model
        if rental is None:
            continue
        cost = rental.usd_per_hour
        tps = float(tokens_per_s[si, ri])
        rows.append(SglangDeployment(
            0, gpu.id, tp, r, tp * r, w.name, k.name, round(e.mem_fraction_static, 4), e.max_running_requests,
            e.chunked_prefill_size, context, cost, cost / (tps * 3600) * 1e6 if tps > 0 else math.inf,
            float(ttft[si]) * 1e3, float(tpot[si, ri]) * 1e3, tps, int(n[si, ri]), int(cap[si]) * r,
            e.max_total_num_tokens, c.risk, rental.source, rental.estimate))
    rows.sort(key=lambda d: (round(d.cost_per_hour, 6), d.usd_per_million_output_tokens, d.tpot_ms, d.gpus_total,
                             d.gpu, d.weights_format, d.kv_format, d.tp))
    for i, d in enumerate(rows, 1):
        d.rank = i
    if rows:
        rows[0].command = launch_command(model, rows[0])
    return rows, notes


def sglang_rows_for(kw: dict, res) -> list[SglangDeployment] | None:
    """SGLang's deployments for `kvcalc search --server sglang|both` (None for --server vllm), --top of them; why
    structures were left out goes to the result's warnings."""
    engine = kw.get("search_engine") or "vllm"
    if engine not in ("sglang", "both"):
        return None
    from .engines.sglang_versions import resolve_version

    rows, notes = sglang_search(res.request, resolve_version(kw.get("sglang_version")))
    res.warnings.extend(notes[:5])
    return rows[: res.request.top]


def search_payload(kw: dict, res, sglang_rows) -> dict:
    """kvcalc.search/1 JSON: vLLM's results; with --server both an "sglang" list beside them, with --server sglang
    SGLang's deployments as the results (the CLI's --json and the page's /api/search)."""
    from . import search as S

    out = S.search_json(res)
    engine = kw.get("search_engine") or "vllm"
    if engine == "vllm":  # the plain vLLM search: kvcalc.search/1 as the Python API gives it
        return out
    out["engine"] = engine
    if engine == "sglang":
        out["results"], out["pareto"] = [d.to_json() for d in sglang_rows], []
        out["winner_command"] = sglang_rows[0].command if sglang_rows else None
    elif sglang_rows is not None:
        out["sglang"] = [d.to_json() for d in sglang_rows]
    return out
