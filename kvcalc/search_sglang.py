"""`kvcalc search --server sglang|both`: SGLang deployments for the same workload and targets, beside vLLM's.

The same space (GPU x weights x KV x TP x replicas, pipeline parallel 1) and the same two-stage timing as the vLLM
search: a closed-form screen (search._latencies: the decode line and prefill chunks of latency.py, with SGLang's
chunked_prefill_size as the chunk and the prefill terms SGLang's step has, prefill_line), then the rows shown re-timed
by plan's own SGLang row of each deployment (retime: plan._sglang_row, the simulation with SGLang's scheduler), so a
figure search shows is the one `kvcalc plan --engine sglang` prints for that deployment
(tests/test_plan_search_parity.py). SGLang's memory ledger in place of vLLM's: one engine/sglang.estimate per
structure, at SGLang's default mem_fraction_static (SGLang has no util x max_num_seqs grid to search: its pool and
max_running_requests follow from the GPU, TP and context). A replica holds min(max_running_requests,
max_total_num_tokens // context) requests.

The SGLang settings `kvcalc plan --engine sglang` takes (SGLANG_SETTINGS: --mem-fraction-static, DP attention, the
speculative drafter, LoRA, the MoE A2A backend, CUDA-graph and torch.compile sizes, --page-size, --disable-cuda-graph,
--max-prefill-tokens, or a pasted --sglang-command) go into every candidate's settings, so its pool, request cap,
times and launch line are those of the server so started; --max-running-requests (search's --max-num-seqs grid) is
searched over. What the times have no term for is said once in the warnings (closed_form_notes): speculative
decoding's speed-up (plan does not model it either), and what the screen leaves to the simulation.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace

import numpy as np

from . import latency
from .engines import sglang as sglang_engine
from .errors import UnsupportedModelError, UsageError
from .plan import RISK_LEVELS, _risk, parallel_refusal
from .step_cost import sglang_mha_prefill_above, sglang_prefill_extra, sglang_prefill_floor_s, sglang_step_extra

# search options that only SGLang's candidates take (SglangSettings fields; `kvcalc plan`'s options of these names)
SGLANG_SETTINGS = ("mem_fraction_static", "dp_size", "enable_dp_attention", "speculative_algorithm",
                   "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
                   "speculative_num_draft_tokens", "moe_a2a_backend", "enable_lora", "max_prefill_tokens",
                   "cuda_graph_max_bs", "enable_torch_compile", "torch_compile_max_bs", "block_size", "enforce_eager",
                   "stream_interval", "disable_radix_cache", "max_total_tokens", "disable_overlap_schedule")
# the option's name -> the SglangSettings field (the rest keep their names; stream_interval and disable_radix_cache
# are the workload's and the launch line's, not the ledger's)
_FIELD = {"block_size": "page_size", "enforce_eager": "disable_cuda_graph"}
_NOT_SETTINGS = ("stream_interval", "disable_radix_cache")
# the SGLang flag each setting is launched with (sglang_command.FLAGS' spellings)
LAUNCH_FLAGS = {"mem_fraction_static": "--mem-fraction-static", "dp_size": "--dp-size",
                "enable_dp_attention": "--enable-dp-attention", "speculative_algorithm": "--speculative-algorithm",
                "speculative_draft_model_path": "--speculative-draft-model-path",
                "speculative_num_steps": "--speculative-num-steps",
                "speculative_eagle_topk": "--speculative-eagle-topk",
                "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
                "moe_a2a_backend": "--moe-a2a-backend", "enable_lora": "--enable-lora",
                "max_prefill_tokens": "--max-prefill-tokens", "cuda_graph_max_bs": "--cuda-graph-max-bs",
                "enable_torch_compile": "--enable-torch-compile", "torch_compile_max_bs": "--torch-compile-max-bs",
                "block_size": "--page-size", "enforce_eager": "--disable-cuda-graph",
                "stream_interval": "--stream-interval", "disable_radix_cache": "--disable-radix-cache",
                "max_total_tokens": "--max-total-tokens", "disable_overlap_schedule": "--disable-overlap-schedule"}
_DEFAULTS = {"dp_size": 1, "torch_compile_max_bs": 32, "stream_interval": 1}


def given_settings(kw: dict) -> dict:
    """The SGLang settings a search's options set ({option name: value}, only those not at their default)."""
    out = {}
    for name in SGLANG_SETTINGS:
        value = kw.get(name)
        if value is None or value is False or value == _DEFAULTS.get(name):
            continue
        out[name] = value
    return out


def check_settings(given: dict, engine: str, kw: dict) -> None:
    """Usage errors for settings the search cannot carry: SGLang's settings with --server vllm (vLLM's search has no
    such setting), vLLM-only grids with --server sglang, and combinations SGLang refuses."""
    if given and engine == "vllm":
        name = next(iter(given))
        raise UsageError(f"{LAUNCH_FLAGS[name]} is an SGLang setting and vLLM's search has none like it: add "
                         "--server sglang (or both, where SGLang's candidates take it)")
    if engine == "both":
        for name in ("enable_lora", "enforce_eager", "block_size"):
            if name in given:
                raise UsageError(f"{LAUNCH_FLAGS[name]} is not searched for vLLM (its search has no "
                                 f"{'LoRA' if name == 'enable_lora' else 'such setting'}): search SGLang alone "
                                 "with --server sglang, or plan the vLLM deployment with kvcalc plan")
    if engine == "sglang":
        if kw.get("util"):
            raise UsageError("--util is vLLM's gpu_memory_utilization; SGLang's share is --mem-fraction-static "
                             "(default: SGLang's own for each GPU and TP)")
        if kw.get("pp") and tuple(kw["pp"]) != (1,):
            raise UsageError("kvcalc models SGLang at --pp 1: drop --pp from an SGLang search")
    if "dp_size" in given and not given.get("enable_dp_attention"):
        raise UsageError("--dp-size without --enable-dp-attention runs that many whole copies of the server: "
                         "search them as replicas (--max-replicas)")


def settings_of(given: dict, read_files: bool = True) -> dict:
    """SglangSettings keyword values for the given settings (the draft's config read as plan reads it)."""
    from .engines import sglang_draft

    out = {_FIELD.get(k, k): v for k, v in given.items() if k not in _NOT_SETTINGS}
    if "speculative_algorithm" in out:
        out["speculative_algorithm"] = sglang_draft.algorithm_of(out["speculative_algorithm"])
    elif any(k.startswith("speculative_") for k in out):
        first = next(k for k in given if k.startswith("speculative_"))
        raise UsageError(f"{LAUNCH_FLAGS[first]} sets SGLang's drafter: give --speculative-algorithm too")
    if out.get("speculative_draft_model_path"):
        out["speculative_draft_config"] = sglang_draft.draft_config_of(out["speculative_draft_model_path"],
                                                                       read_files)
    if "mem_fraction_static" in out and not 0 < out["mem_fraction_static"] < 1:
        raise UsageError(f"--mem-fraction-static must be in (0, 1), got {out['mem_fraction_static']}")
    return out


def closed_form_notes(given: dict) -> list[str]:
    """What the closed-form times of SGLang's candidates leave out for these settings (said once)."""
    out = []
    if given.get("speculative_algorithm"):
        out.append("sglang times: speculative decoding is in every candidate's memory (the drafter's weights and pool, "
                   "max_running_requests 48 unless given) but not in its times: kvcalc models no drafter speed-up "
                   "(nor does kvcalc plan)")
    off = [LAUNCH_FLAGS[k] for k in ("enable_lora", "moe_a2a_backend", "enable_dp_attention", "enable_torch_compile")
           if k in given]
    if off:
        out.append(f"sglang times: {', '.join(off)} switch SGLang's piecewise prefill graphs off; the rows shown are "
                   "timed without them (kvcalc plan's simulation), the screen that picks them keeps their CPU floor "
                   "only where SGLang captures them")
    if "disable_overlap_schedule" in given:
        out.append("sglang times: --disable-overlap-schedule runs SGLang's normal loop: the rows shown are timed "
                   "with it (kvcalc plan's simulation: no result lag, arrivals join the next step), the screen that "
                   "picks them has no term for either loop")
    if "stream_interval" in given:
        out.append("sglang times: --stream-interval spaces the ITL only (TTFT and TPOT unchanged); it is in the "
                   "launch line and the rows' itl_ms")
    return out


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
    settings: dict = field(default_factory=dict)  # the SGLang settings the search was given (SGLANG_SETTINGS names)
    max_running_requests_given: int = 0  # --max-running-requests of this candidate (0: SGLang's own)
    chunked_prefill_given: bool = False
    speculative_algorithm: str = ""
    draft_weights_bytes: int = 0  # per rank, as the pool is sized (engines/sglang_draft.py)
    # from the simulation (plan's SGLang row of this deployment: workload.vllm_bench with SGLang's scheduler), as the
    # vLLM rows carry them (search.Deployment)
    e2e_ms: float | None = None
    itl_ms: float | None = None
    percentiles: dict = field(default_factory=dict)
    timing: str = "closed form"  # "simulation" once re-timed
    # what its speed rests on (kvcalc/trust.py sglang_speed_trust: SGLang's own held-out errors), as the vLLM rows'
    # search.Deployment.speed_evidence; tpot_low/high None: no range (too few SGLang results)
    speed_evidence: dict = field(default_factory=dict)
    # plan's trust.capacity_range of its row, as search.Deployment.capacity_range (SGLang's rows have none: None)
    capacity_range: dict | None = None

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        for key in ("settings", "max_running_requests_given", "chunked_prefill_given"):
            out.pop(key)
        return out


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
    if d.max_running_requests_given:
        parts += ["--max-running-requests", str(d.max_running_requests_given)]
    if d.chunked_prefill_given:
        parts += ["--chunked-prefill-size", str(d.chunked_prefill_size)]
    for name, value in d.settings.items():
        if value is True:
            parts.append(LAUNCH_FLAGS[name])
        else:
            parts += [LAUNCH_FLAGS[name], shlex.quote(str(value))]
    return " ".join(parts)


def prefill_line(spec, gpu, w, k, tp: int, eager: bool, est, wl, batch: int) -> latency.DecodeLine:
    """The closed form's step of one SGLang candidate (latency.DecodeLine) with the terms the simulation's step
    (step_cost.step_cost as workload.vllm_bench builds it for SGLang) has on top of vLLM's, from the same functions:
    the prefill terms as SGLang's prefill runs them (lm_head at the sampled rows, fused-MoE blocks and activation
    kernels: latency.decode_line sglang=True); Gemma 3's eager norm chains in every step (sglang_step_extra; decode
    steps of at most est.fused_decode_max_bs requests skip them, --enable-torch-compile, so a decode line of `batch`
    requests drops them when that batch is fused; a prefill step always pays them: StepCost.extra_s); with the
    piecewise prefill graphs, their unfused rotary embedding in a chunk of at most est.prefill_graph_max_tokens
    tokens (sglang_prefill_extra) and the CPU floor of a prefill step (sglang_prefill_floor_s: StepCost.step_s takes
    max(step, floor) for a step with a prefill chunk); an MLA model's decompressed attention where its first chunk
    runs outside the graphs (sglang_mha_prefill_above: every chunk priced so, a lower bound). Not in it (a lower bound
    still): the fused MoE's block padding and activation kernels in decode steps."""
    # the prefill terms read at SGLang's chunk, its largest prefill step of one prompt (latency.decode_line)
    line = latency.decode_line(spec, gpu, w, k, 1, eager, tp, sglang=True, prefill_rows=est.chunked_prefill_size)
    pre0, pfixed = line.prefill_terms()[0], 0.0
    per_step, per_token = sglang_step_extra(spec, gpu)  # SGLang's eager norm chains (Gemma 3)
    if per_step or per_token:
        pre0 += per_token
        if est.fused_decode_max_bs >= batch:  # decode steps fused: the chains stay in prefill steps only
            pfixed += per_step
        else:
            line = replace(line, fixed=line.fixed + per_step)
    pfloor = 0.0
    if not eager and est.prefill_graph_max_tokens > 0:
        pfloor = sglang_prefill_floor_s(spec)
        rope_step, rope_token, most = sglang_prefill_extra(spec, gpu, est.prefill_graph_max_tokens)
        chunk = est.chunked_prefill_size if est.chunked_prefill_size > 0 else wl.input_len
        if (rope_step or rope_token) and min(chunk, wl.input_len) <= most:  # every chunk replays the graphs
            pfixed += rope_step
            pre0 += rope_token
    pre1 = line.prefill_terms()[1]
    above = sglang_mha_prefill_above(est, eager)
    chunk = est.chunked_prefill_size if est.chunked_prefill_size > 0 else wl.input_len
    if above >= 0 and min(chunk, wl.input_len) > above:  # an MLA prompt's first chunk outside the graphs: MHA
        from .throughput import attention_flops_per_token, mha_attention_flops_per_token

        pre1 *= mha_attention_flops_per_token(spec) / attention_flops_per_token(spec)
    return replace(line, pre0=pre0, pre1=pre1, pfixed=pfixed, pfloor=pfloor)


def sglang_search(req, sglang_version: str | None = None) -> tuple[list[SglangDeployment], list[str]]:
    """The feasible SGLang deployments of a search.SearchRequest, cheapest first, and why structures were left out.
    Every candidate runs with the request's SGLang settings (req.sglang: SglangSettings values) and, for each value
    of req.sglang_running (--max-running-requests; SGLang's own when empty), that request cap."""
    from .catalog import catalog_entry
    from .prices import rent
    from .search import _Candidate, _latencies, _rate_concurrency, priced_gpus, searched_formats

    spec, wl, tg, sp = req.spec, req.workload, req.targets, req.space
    version = sglang_version or sglang_engine.DEFAULT_VERSION
    context = max(wl.context, tg.min_context or 0)
    notes: list[str] = []
    given = dict(getattr(req, "sglang_given", None) or {})
    base = dict(getattr(req, "sglang", None) or {})
    eager = bool(base.get("disable_cuda_graph"))
    dp = int(base.get("dp_size") or 1) if base.get("enable_dp_attention") else 1
    if given.get("disable_radix_cache") and wl.prefix_len:
        # no prefix reuse: every prompt prefills its shared prefix too (the closed form's prompt is input_len)
        wl = replace(wl, input_len=wl.input_len + wl.prefix_len, prefix_len=0)
    cands, ests, meta = [], [], []
    # the vLLM search already warned about the GPUs it left out (no price, or none at this tier)
    for gpu, price in priced_gpus(req, []):
        for w, k in searched_formats(sp, lambda kv: kv.name in sglang_engine.KV_DTYPES):
            for tp in sp.tp:
                if tp > (1 if gpu.laptop else sp.max_gpus_per_replica):
                    continue  # a laptop GPU is one per machine
                refusal = parallel_refusal(spec, tp, engines=("sglang",))
                if refusal:
                    why = f"sglang: TP {tp} left out: {refusal}"
                    notes += [why] if why not in notes else []
                    continue
                if tp % dp:
                    why = f"sglang: TP {tp} left out: --dp-size {dp} must divide it with DP attention"
                    notes += [why] if why not in notes else []
                    continue
                for running in getattr(req, "sglang_running", None) or (None,):
                    s = sglang_engine.SglangSettings(weights=w, kv=k, context_length=context, tensor_parallel=tp,
                                                     version=version, chunked_prefill_size=req.max_num_batched_tokens,
                                                     max_running_requests=running, **base)
                    try:
                        est = sglang_engine.estimate(spec, gpu, s)
                    except (UsageError, UnsupportedModelError) as exc:
                        notes.append(f"sglang: {gpu.id} TP {tp} {w.name}/{k.name}: {exc}")
                        continue
                    if not est.fits or est.concurrency_at(wl.context) < 1:
                        continue
                    held = est.concurrency_at(wl.context)  # the most requests a decode step of it runs
                    line = prefill_line(spec, gpu, w, k, tp, eager, est, wl, min(wl.concurrency or held, held))
                    ratio = latency.weight_time_table(spec, gpu, w, k, tp, max(est.max_running_requests, 1))
                    cands.append(_Candidate(None, _risk(spec, w, k), price, line, ratio))
                    ests.append(est)
                    meta.append((gpu, w, k, tp, running))
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
    from .search import evidence_of
    from .trust import speed_trust

    evidence: dict = {}  # per (GPU, formats, TP), as search.py's vLLM rows (kvcalc/trust.py sglang_speed_trust)
    rows = []
    for si, ri in zip(*np.nonzero(ok)):
        (gpu, w, k, tp, running), e, c, r = meta[si], ests[si], cands[si], int(replicas[ri])
        key = (gpu.id, w.name, k.name, tp)
        if key not in evidence:
            evidence[key] = evidence_of(speed_trust(gpu, "sglang", w, k, "TPOT", tp=tp),
                                        speed_trust(gpu, "sglang", w, k, "TTFT", tp=tp))
        rental = rent(c.price, tp, r, req.price_tier, req.published_prices_only)  # search.py evaluate's cost model
        if rental is None:
            continue
        cost = rental.usd_per_hour
        tps = float(tokens_per_s[si, ri])
        rows.append(SglangDeployment(
            0, gpu.id, tp, r, tp * r, w.name, k.name, round(e.mem_fraction_static, 4), e.max_running_requests,
            e.chunked_prefill_size, context, cost, cost / (tps * 3600) * 1e6 if tps > 0 else math.inf,
            float(ttft[si]) * 1e3, float(tpot[si, ri]) * 1e3, tps, int(n[si, ri]), int(cap[si]) * r,
            e.max_total_num_tokens, c.risk, rental.source, rental.estimate, settings=given,
            max_running_requests_given=running or 0,
            chunked_prefill_given=req.max_num_batched_tokens is not None,
            speculative_algorithm=e.speculative_algorithm, draft_weights_bytes=e.draft_weights_bytes,
            speed_evidence=evidence[key]))
    rows.sort(key=_rank_key)
    # the closed form screened; the rows shown are re-timed by the simulation (plan's own SGLang row of each), as the
    # vLLM search's are (search.retime)
    rows, over = retime(req, rows, context, version)
    rows.sort(key=_rank_key)
    for i, d in enumerate(rows, 1):
        d.rank = i
    if rows:
        rows[0].command = launch_command(model, rows[0])
    over = {k: v for k, v in over.items() if v}
    if over:
        notes.append("sglang: the simulation put " + ", ".join(f"{v} over the {k} target" for k, v in over.items())
                     + " of the rows the closed-form screen let through")
    return rows, notes


def _rank_key(d: SglangDeployment):
    return (round(d.cost_per_hour, 6), d.usd_per_million_output_tokens, d.tpot_ms, d.gpus_total, d.gpu,
            d.weights_format, d.kv_format, d.tp)


def replica_request(req, d: SglangDeployment, context: int, version: str):
    """One replica of SGLang deployment d as a `kvcalc plan --engine sglang` request: its GPU, formats, TP, the
    search's SGLang settings and chunk, its --max-running-requests, and its share of the workload
    (ceil(concurrency / replicas) clients, or rate / replicas), as search.replica_request builds vLLM's."""
    from .hardware import get_gpu
    from .plan import PlanRequest

    wl = req.workload
    share = replace(wl, concurrency=d.concurrency_per_replica if wl.request_rate is None else wl.concurrency,
                    request_rate=None if wl.request_rate is None else wl.request_rate / d.replicas,
                    num_prompts=-(-wl.num_prompts // d.replicas) if wl.num_prompts else None)
    given = dict(getattr(req, "sglang_given", None) or {})
    base = dict(getattr(req, "sglang", None) or {})
    # the settings as the search gave them to SglangSettings (settings_of), under plan's option names
    extra = {name: given[name] for name in given if name not in ("speculative_draft_model_path",)}
    if "speculative_algorithm" in base:
        extra["speculative_algorithm"] = base["speculative_algorithm"]
    if base.get("speculative_draft_model_path"):
        extra["speculative_draft_model_path"] = base["speculative_draft_model_path"]
    return PlanRequest(spec=req.spec, gpu=get_gpu(d.gpu), context=wl.context, batch=d.concurrency_per_replica,
                       engines=("sglang",), weights=d.weights_format, kv=d.kv_format, max_model_len=context,
                       max_num_batched_tokens=req.max_num_batched_tokens,
                       max_num_seqs=d.max_running_requests_given or None, tp=d.tp, sglang_version=version,
                       workload=share, **extra)


def retime(req, rows: list[SglangDeployment], context: int, version: str) -> tuple[list[SglangDeployment], dict]:
    """Re-time the cheapest screened rows with plan's SGLang row of each (plan._sglang_row: the simulation with
    SGLang's scheduler, workload.vllm_bench sglang=), by search.retime_with's loop: until --top meet the targets or
    3 x --top were tried (the rest keep the screen's figures past search.SIMULATED_ROWS); KV capacity and concurrency
    from the same row. Returns the rows that still meet the targets and how many the simulation put over each."""
    from .plan import FormatChoice, _sglang_row
    from .search import retime_with

    def plan_row(d: SglangDeployment):
        preq = replica_request(req, d, context, version)
        return _sglang_row(preq, FormatChoice("search", "search", preq.asked_weights, preq.asked_kv, None))

    return retime_with(req, rows, plan_row)


def server_of(kw: dict, res) -> str:
    """Whose deployments the search shows: the request's (--server, or sglang for a pasted --sglang-command)."""
    return getattr(res.request, "server", None) or kw.get("search_engine") or "vllm"


def sglang_rows_for(kw: dict, res) -> list[SglangDeployment] | None:
    """SGLang's deployments for `kvcalc search --server sglang|both` (None for --server vllm), --top of them; why
    structures were left out goes to the result's warnings."""
    engine = server_of(kw, res)
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
    engine = server_of(kw, res)
    if engine == "vllm":  # the plain vLLM search: kvcalc.search/1 as the Python API gives it
        return out
    out["engine"] = engine
    # the SGLang settings every SGLang candidate ran with (SGLANG_SETTINGS names, as given)
    out["sglang_settings"] = dict(getattr(res.request, "sglang_given", None) or {})
    if engine == "sglang":
        out["results"], out["pareto"] = [d.to_json() for d in sglang_rows], []
        out["winner_command"] = sglang_rows[0].command if sglang_rows else None
    elif sglang_rows is not None:
        out["sglang"] = [d.to_json() for d in sglang_rows]
    return out
