"""Inverse queries on plan's options (`kvcalc fit`): the largest or smallest setting for which a vLLM configuration
still fits, exact at vLLM's granularity (blocks of tokens, whole requests, 0.01 of gpu_memory_utilization, whole GPUs).

Every answer is found with the scalar plan path itself (plan.plan, the vLLM row of the configuration --weights/--kv
choose): "fits" means exactly what the `fits` column of `kvcalc plan` means. Each question is monotone in the setting
searched, so a binary search finds the boundary, and the answer comes with its proof: the answer fits and the next
step (one more token, one more request, 0.01 less util, one GPU fewer) does not.

`auto` follows vLLM's `--max-model-len -1` (auto-fit), vllm/v1/core/kv_cache_utils.py `get_kv_cache_configs` ->
`_auto_fit_max_model_len` -> `_estimate_max_model_len_from_groups` (read at vLLM commit 001cabc): the profile run uses
the model's derived max length (max_position_embeddings), then each worker binary-searches the largest max_model_len in
[1, derived] whose one-request KV need (`_max_memory_usage_bytes_from_groups`) fits its available KV memory; the
smallest over workers wins, and 0 (not even one token) is an error. vLLM PR #47272 (merge commit 76fb6d210a57,
2026-08-20; first in v0.28.1rc0, not in v0.28.0) reserves the null block first: auto-fit and the start check then plan
against the available memory minus one block. kvcalc applies that from --vllm-version 0.28.1 on, for `auto`
(engines/vllm.py's start check, `min_kv_bytes`, does not yet: for 0.28.1+ it may call a configuration that is one block
short a fit; now it does, through layout.min_kv_bytes and the 0.28.1 rules row).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .engines import vllm as vllm_engine
from .engines.vllm_support import unserved_reason
from .errors import UsageError
from .formats import kv_format, weight_format
from .plan import PlanRequest, Row, custom_key, plan, sweep_choice

SCHEMA = "kvcalc.fit/1"
QUESTIONS = ("max-context", "max-concurrency", "min-util", "min-gpus", "auto")


@dataclass
class Answer:
    question: str
    value: int | float | None  # None: nothing in range fits
    unit: str
    fits_at_answer: bool  # the proof, computed with the plan path
    fits_one_step_beyond: bool | None  # None where there is no next step (the range's end)
    step: str  # what "one step beyond" means
    detail: str
    config: str
    settings: dict = field(default_factory=dict)
    options: list[dict] = field(default_factory=list)  # min-gpus: every (tp, pp) that fits at the answer

    def to_json(self) -> dict:
        out = asdict(self)
        out["schema"] = SCHEMA
        return out


def _vllm(req: PlanRequest) -> PlanRequest:
    if req.weights_choices or req.kv_choices:
        raise UsageError("kvcalc fit answers for one configuration: give one --weights and one --kv "
                         "(kvcalc plan compares several)")
    if req.engines == ("sglang",):  # engines/sglang.py: the same questions on SGLang's token pool
        return req
    if "vllm" not in req.engines:
        raise UsageError("kvcalc fit answers for vLLM (block-granular) or SGLang (--engine sglang); drop --engine hf")
    if req.kv is not None and kv_format(req.kv).vllm_name is None:
        raise UsageError(f"vLLM has no {kv_format(req.kv).label} cache; choose --kv auto, fp8, fp8-e5m2, int8/fp8/int4_per_token_head or nvfp4")
    if req.weights is not None and "vllm" not in weight_format(req.weights).engines:
        raise UsageError(f"vLLM does not load {weight_format(req.weights).label} weights")
    unserved = unserved_reason(req.spec, req.vllm_version)
    if unserved:  # engines/vllm_support.py: no context, util or GPU count makes this release serve the model
        raise UsageError(unserved)
    return replace(req, engines=("vllm",))


def row_for(req: PlanRequest) -> Row:
    """The plan row of the configuration asked for (--weights/--kv, else the baseline)."""
    rows = plan(req)
    key = custom_key(req)
    return next(r for r in rows if r.config == key)


def fits(req: PlanRequest, **changes) -> bool:
    return row_for(replace(req, **changes)).fits


def _largest(lo: int, hi: int, ok) -> int | None:
    """Largest x in [lo, hi] with ok(x), for ok true up to some point and false after; None if ok(lo) is false."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_context(req: PlanRequest) -> Answer:
    """Longest context (tokens per request) at which --batch requests fit at once. With --max-model-len unset,
    max_model_len follows the context, as in `kvcalc plan`; set, the context is capped by it."""
    req = _vllm(req)
    cap = req.max_model_len or req.spec.max_position_embeddings
    value = _largest(1, cap, lambda c: fits(req, context=c))
    key = custom_key(req)
    if value is None:
        row = row_for(replace(req, context=1))
        return Answer("max-context", None, "tokens", False, None, "1 token", (
            f"nothing fits: {req.batch} request(s) of even 1 token do not fit "
            f"(short by {row.shortfall_bytes / 2**30:.2f} GiB)"), key, _settings(req))
    beyond = fits(req, context=value + 1) if value < cap else None
    row = row_for(replace(req, context=value))
    what = "max_model_len" if req.max_model_len else "the model's max_position_embeddings"
    held = (f"SGLang's pool of {row.sglang.max_total_num_tokens:,} tokens" if row.sglang is not None else
            f"{row.vllm.num_gpu_blocks:,} blocks of {row.vllm.block_size}")
    detail = (f"{req.batch} request(s) of {value:,} tokens fit at once ({held}); " + (
        f"{value + 1:,} do not" if beyond is False else f"the whole range fits, up to {what} {cap:,}"))
    return Answer("max-context", value, "tokens", True, beyond, "+1 token", detail, key, _settings(req))


def max_concurrency(req: PlanRequest) -> Answer:
    """Most requests of --context tokens held at once (KV blocks; the null block reserved)."""
    req = _vllm(req)
    row = row_for(req)
    value = row.max_concurrency or 0
    key = custom_key(req)
    if value < 1:
        return Answer("max-concurrency", 0, "requests", False, None, "+1 request",
                      f"not one request of {req.context:,} tokens fits (short by "
                      f"{row.shortfall_bytes / 2**30:.2f} GiB)", key, _settings(req))
    at, beyond = fits(req, batch=value), fits(req, batch=value + 1)
    if row.sglang is not None:
        g = row.sglang
        detail = (f"{value:,} requests of {req.context:,} tokens fit at once (SGLang's pool of "
                  f"{g.max_total_num_tokens:,} tokens, max_running_requests {g.max_running_requests:,}); "
                  f"{value + 1:,} do not")
        return Answer("max-concurrency", value, "requests", at, beyond, "+1 request", detail, key, _settings(req))
    seqs = row.vllm.max_num_seqs
    detail = (f"{value:,} requests of {req.context:,} tokens fit at once ({row.vllm.num_gpu_blocks:,} blocks, "
              f"{row.vllm.layout.blocks_per_request(req.context)} per request, 1 null block); {value + 1:,} do not")
    if seqs < value:
        detail += f"; max_num_seqs {seqs} caps the running batch below that"
    return Answer("max-concurrency", value, "requests", at, beyond, "+1 request", detail, key, _settings(req))


def min_util(req: PlanRequest) -> Answer:
    """Smallest gpu_memory_utilization (in steps of 0.01) at which --batch requests of --context tokens fit.

    KV capacity grows with util, so "fits" is monotone up to the point where the V2 runner's CUDA graphs, captured
    after the KV cache, no longer find room outside vLLM's share of the GPU: the answer is searched below that cap."""
    req = _vllm(req)
    key = custom_key(req)

    def overflows(h: int) -> bool:  # h hundredths of util
        return row_for(replace(req, util=h / 100)).vllm.cudagraph_overflow_bytes > 0

    cap = 100 if not overflows(100) else (_largest(1, 100, lambda h: not overflows(h)) or 0)
    # fits grows with util below the cap: the largest g with "fits at (cap + 1 - g)/100" gives the smallest util
    ok = lambda g: fits(req, util=(cap + 1 - g) / 100)  # noqa: E731
    g = _largest(1, cap, ok) if cap else None
    if g is None:
        top = max(cap, 1) / 100
        row = row_for(replace(req, util=top))
        why = (f"short by {row.shortfall_bytes / 2**30:.2f} GiB" if cap else
               "the CUDA graphs captured after the KV cache find no room at any util")
        return Answer("min-util", None, "gpu_memory_utilization", False, None, "-0.01",
                      f"does not fit at any util up to {top:.2f}: {why}", key, _settings(req))
    value = (cap + 1 - g) / 100
    below = fits(req, util=round(value - 0.01, 2)) if value > 0.01 else None
    row = row_for(replace(req, util=value))
    detail = (f"at util {value:.2f} vLLM may use {row.vllm.requested_memory / 2**30:.2f} GiB and holds "
              f"{row.max_concurrency} request(s) of {req.context:,} tokens (needs {req.batch}); at "
              f"{value - 0.01:.2f} it does not fit")
    if cap < 100:
        detail += f"; above util {cap / 100:.2f} the CUDA graphs captured after the KV cache would not fit"
    return Answer("min-util", value, "gpu_memory_utilization", True, below, "-0.01", detail, key, _settings(req))


def _tp_pp_options(req: PlanRequest, count: int) -> list[tuple[int, int]]:
    from .search_core import valid_tp_sizes

    tps = valid_tp_sizes(req.spec, tuple(t for t in (1, 2, 4, 8, 16) if count % t == 0))
    splits = [(tp, count // tp) for tp in tps if count // tp <= req.spec.num_layers]
    if req.engines == ("sglang",):  # kvcalc models SGLang at PP 1 (engines/sglang.py)
        splits = [(tp, pp) for tp, pp in splits if pp == 1]
    return splits


def min_gpus(req: PlanRequest, max_gpus: int = 16) -> Answer:
    """Fewest GPUs (TP x PP, TP a size vLLM accepts for the model's heads) at which --batch requests of --context
    tokens fit; the answer lists every split at that count that fits, pure TP first."""
    req = _vllm(req)
    key = custom_key(req)
    if req.gpu.laptop:  # one GPU per machine: no split over several
        max_gpus = 1
    for count in range(1, max_gpus + 1):
        options = []
        for tp, pp in _tp_pp_options(req, count):
            row = row_for(replace(req, tp=tp, pp=pp))
            if row.fits:
                options.append({"tp": tp, "pp": pp, "max_concurrency": row.max_concurrency,
                                "decode_tokens_per_s": round(row.decode_tokens_per_s, 2)})
        if options:
            options.sort(key=lambda o: (o["pp"], -o["tp"]))
            fewer = [fits(req, tp=tp, pp=pp) for c in range(1, count) for tp, pp in _tp_pp_options(req, c)]
            best = options[0]
            detail = (f"{count} GPU(s) of {req.gpu.id}: TP {best['tp']}" + (f" x PP {best['pp']}" if best["pp"] > 1
                                                                            else "")
                      + f" holds {best['max_concurrency']} request(s) of {req.context:,} tokens (needs {req.batch});"
                      + (" no split over fewer GPUs fits" if count > 1 else " one GPU is enough"))
            return Answer("min-gpus", count, "GPUs", True, any(fewer) if count > 1 else None, "-1 GPU", detail,
                          key, _settings(req), options)
    return Answer("min-gpus", None, "GPUs", False, None, "-1 GPU",
                  f"no TP x PP split over up to {max_gpus} GPUs of {req.gpu.id} fits", key, _settings(req))


def auto_max_model_len(req: PlanRequest) -> Answer:
    """What `vllm serve --max-model-len -1` (auto-fit) picks at these settings (see the module doc for the rule)."""
    req = _vllm(req)
    key = custom_key(req)
    derived = req.spec.max_position_embeddings
    base = req.vllm_settings(sweep_choice(req), max_model_len=derived)  # plan's one request -> settings translation
    profiled = vllm_engine.estimate(req.spec, req.gpu, base)
    # the profile run happened at the derived length: pin the batching it resolved, then vary max_model_len only
    pinned = replace(base, max_num_batched_tokens=profiled.max_num_batched_tokens,
                     max_num_seqs=profiled.max_num_seqs)

    reserve_null_block = base.rules.null_block_first  # vLLM PR #47272 (0.28.1+): in layout.min_kv_bytes

    def ok(length: int) -> bool:
        est = vllm_engine.estimate(req.spec, req.gpu, replace(pinned, max_model_len=length))
        stages = est.stages or [est]
        return all(st.available_kv_bytes >= st.layout.min_kv_bytes for st in stages)

    value = _largest(1, derived, ok)
    if value is None:
        return Answer("auto", None, "tokens", False, None, "+1 token",
                      "vLLM refuses to start: 'Cannot auto-fit max_model_len: not enough GPU memory available to "
                      "serve even a single token'", key, _settings(req))
    beyond = ok(value + 1) if value < derived else None
    est = vllm_engine.estimate(req.spec, req.gpu, replace(pinned, max_model_len=value))
    if value == derived:
        detail = f"the full model context {derived:,} fits: vLLM keeps max_model_len {derived:,}"
    else:
        detail = (f"vLLM reduces max_model_len from {derived:,} to {value:,} ({est.available_kv_bytes / 2**30:.2f} "
                  f"GiB available for KV cache; one request of {value + 1:,} tokens would not fit)")
    if reserve_null_block:
        detail += "; one block held back for the null block (vLLM 0.28.1+)"
    detail += (f"; profile run at max_num_batched_tokens {profiled.max_num_batched_tokens:,}, max_num_seqs "
               f"{profiled.max_num_seqs}")
    return Answer("auto", value, "tokens", True, beyond, "+1 token", detail, key, _settings(req))


def _settings(req: PlanRequest) -> dict:
    return {"model": req.spec.name, "gpu": req.gpu.id, "context": req.context, "batch": req.batch, "util": req.util,
            "max_model_len": req.max_model_len, "max_num_batched_tokens": req.max_num_batched_tokens,
            "max_num_seqs": req.max_num_seqs, "tp": req.tp, "pp": req.pp, "weights": req.weights or "bf16",
            "kv": req.kv or "auto", "vllm_version": req.vllm_version}


def answer(question: str, req: PlanRequest, max_gpus: int = 16) -> Answer:
    if req.engines == ("sglang",) and question in ("min-util", "auto"):
        raise UsageError(f"kvcalc fit {question} is vLLM's (gpu_memory_utilization, --max-model-len -1); for SGLang "
                         "ask max-context, max-concurrency or min-gpus")
    if len(req.engines) > 1 and "sglang" in req.engines:
        raise UsageError("kvcalc fit answers for one server: --engine vllm or --engine sglang")
    if question == "max-context":
        return max_context(req)
    if question == "max-concurrency":
        return max_concurrency(req)
    if question == "min-util":
        return min_util(req)
    if question == "min-gpus":
        return min_gpus(req, max_gpus)
    if question == "auto":
        return auto_max_model_len(req)
    raise UsageError(f"unknown question {question!r}; ask one of {', '.join(QUESTIONS)}")
