"""`kvcalc search`: from a workload and its targets to the cheapest vLLM deployment that meets them.

The space is GPU type x TP x PP x replicas x weight format x KV format x gpu_memory_utilization x max_num_seqs.
Memory comes from the vectorized core (search_core.py, equal to `kvcalc plan` by construction and by test); TTFT and
TPOT from latency.py (the speed model v2); prices from prices.py. Constraints are checked in a fixed order, and
the first one a deployment fails is the one that binds it:

    quality risk -> memory (vLLM starts with one max_model_len request) -> throughput (request-rate workloads: some
    concurrency reaches the rate) -> KV concurrency (and max_num_seqs) -> TTFT -> TPOT
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import latency
from .engines import vllm as vllm_engine
from .engines.vllm_support import unserved_gate, unserved_reason
from .engines.vllm_versions import rules_for
from .errors import UsageError
from .formats import kv_format, weight_format
from .hardware import GpuProfile
from .model import ModelSpec
from .plan import RISK_LEVELS
from .plan import _risk  # the quality-risk rule of plan's rows, one source
from .prices import Price, has_published_price, rent
from .search_core import Structure, build_structure, evaluate_grid, valid_tp_sizes
from .trust import speed_trust
from .workload import ASSUMPTIONS as WORKLOAD_ASSUMPTIONS
from .workload import Workload  # noqa: F401  (search's workload is plan's: kvcalc.search.Workload)

SCHEMA = "kvcalc.search/1"
# Profiles `search` leaves out unless --gpus names them. None since the search got fast enough to take every profile
# (issue 19.4: per-model memos and a batch-vectorised weight-time table, kvcalc/memo.py and latency.weight_time_table);
# a profile whose only price is an estimate is searched at that estimate, which the rows say.
NOT_SEARCHED_BY_DEFAULT: frozenset[str] = frozenset()
CONSTRAINTS = ("quality", "memory", "throughput", "concurrency", "ttft", "tpot")
DEFAULT_WEIGHTS = ("bf16", "fp8", "awq")
DEFAULT_KV = ("auto", "fp8")
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_UTILS = tuple(round(0.80 + 0.01 * i, 2) for i in range(16))  # 0.80 .. 0.95
DEFAULT_SEQS = tuple(2 ** i for i in range(11))  # 1 .. 1024
MAX_CONFIGURATIONS = 50_000_000  # a few bytes each in the boolean arrays: bounded memory
SIMULATED_ROWS = 50  # rows re-timed by the simulation (~0.1 s each); more --top rows keep the screen's figures


def preferred_util(vllm_version: str) -> float:
    """The util a deployment keeps when it works: what `vllm serve` uses without --gpu-memory-utilization."""
    return rules_for(vllm_version).default_util_for()


@dataclass
class Targets:
    max_ttft_ms: float | None = None
    max_tpot_ms: float | None = None
    min_context: int | None = None
    max_quality_risk: str | None = None


@dataclass
class Space:
    gpus: list[GpuProfile]
    weights: tuple[str, ...] = DEFAULT_WEIGHTS
    kv: tuple[str, ...] = DEFAULT_KV
    tp: tuple[int, ...] = DEFAULT_TP
    pp: tuple[int, ...] = (1,)
    max_replicas: int = 8
    max_gpus_per_replica: int = 8
    utils: tuple[float, ...] = DEFAULT_UTILS
    seqs: tuple[int, ...] = DEFAULT_SEQS


@dataclass
class SearchRequest:
    spec: ModelSpec
    workload: Workload
    targets: Targets
    space: Space
    prices: dict[str, Price]
    vllm_version: str = vllm_engine.DEFAULT_VERSION
    max_num_batched_tokens: int | None = None  # None: `vllm serve`'s default for each GPU
    top: int = 10
    price_tier: str = "on-demand"  # on-demand | spot | reserved: which published price a rental is charged at
    published_prices_only: bool = False  # leave out GPUs whose price is an estimate
    # SGLang's candidates (search_sglang.py): SglangSettings values, the search options that set them, and the
    # --max-running-requests values searched (empty: SGLang's own)
    sglang: dict = field(default_factory=dict)
    sglang_given: dict = field(default_factory=dict)
    sglang_running: tuple = ()
    server: str = "vllm"  # --server: vllm, sglang or both (a pasted --sglang-command makes it sglang)


@dataclass
class Deployment:
    rank: int
    gpu: str
    gpu_name: str
    tp: int
    pp: int
    replicas: int
    gpus_total: int
    weights_format: str
    kv_format: str
    util: float
    min_util: float  # the smallest util of the grid that also meets every target
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    cost_per_hour: float
    usd_per_million_output_tokens: float
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    concurrency_per_replica: int  # requests each replica holds to serve the workload
    max_concurrency: int  # requests of input+output tokens the KV caches of all replicas hold at once at this util
    kv_capacity_tokens: int  # per replica: vLLM's logged "GPU KV cache size" (plan's kv_capacity_tokens, one rule)
    quality_risk: str
    price_source: str
    price_is_estimate: bool
    pareto: bool = False
    command: str = ""
    # what the deployment's speed rests on (kvcalc/trust.py): label, backing, and the TTFT / TPOT ranges
    speed_evidence: dict = field(default_factory=dict)
    # from the simulation (workload.vllm_bench, the plan row of this deployment): vllm bench's figures per replica
    e2e_ms: float | None = None
    itl_ms: float | None = None
    percentiles: dict = field(default_factory=dict)  # median_ttft_ms, p99_ttft_ms, ... as vllm bench names them
    timing: str = "closed form"  # "simulation" once re-timed
    # how it is rented (prices.rent): per GPU, or whole instances of a provider's offer; fields added to the schema
    price_tier: str = "on-demand"
    rented_as: str = "per GPU"
    gpus_per_instance: int = 1
    instances: int = 0
    # the capacity as a low/high range where the start kind leaves it open (a cold torch.compile start on vLLM
    # 0.27-0.30): plan's trust.capacity_range of this deployment's row (plan.capacity_range, one function), its
    # max_concurrency ends over all replicas as max_concurrency is; None where the figure is one value, and on rows
    # past SIMULATED_ROWS (they keep the screen's figures, timing "closed form")
    capacity_range: dict | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Rejection:
    gpu: str
    tp: int
    pp: int
    replicas: int
    weights_format: str
    kv_format: str
    constraint: str
    value: float | None
    limit: float | None
    detail: str
    cost_per_hour: float | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SearchResult:
    request: SearchRequest
    results: list[Deployment]
    pareto: list[Deployment]
    feasible: int
    evaluated: int
    structures: int
    rejected_by: dict[str, int]
    rejected: list[Rejection]
    message: str | None
    binding: str | None
    closest: dict | None
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ helpers


def _ratio(table: np.ndarray, b) -> np.ndarray:
    idx = np.clip(np.asarray(b, dtype=np.int64), 0, len(table) - 1)
    return table[idx]


def serve_command(spec: ModelSpec, hf_id: str | None, d: Deployment) -> str:
    """The `vllm serve` line that reproduces the deployment (one replica); its flags are deploy.vllm_flags', as in
    every deployment file `--emit` writes."""
    from .deploy import model_argument, vllm_flags

    model = hf_id or spec.name
    parts = ["vllm serve", model_argument(model, d.weights_format, spec)]
    for flag, value in vllm_flags(d.weights_format, d.kv_format, d.tp, d.pp, d.util, d.max_model_len,
                                  d.max_num_seqs, d.max_num_batched_tokens):
        parts += [flag] if value is None else [flag, value]
    return " ".join(parts)


def pareto_front(rows: list[Deployment]) -> list[Deployment]:
    """Deployments no other beats on both cost per hour and TPOT."""
    front, best_tpot = [], math.inf
    for d in sorted(rows, key=lambda r: (r.cost_per_hour, r.tpot_ms)):
        if d.tpot_ms < best_tpot:
            front.append(d)
            best_tpot = d.tpot_ms
    return front


# ------------------------------------------------------------------------------------------------ search


@dataclass
class _Candidate:
    structure: Structure
    risk: str
    price: Price
    line: latency.DecodeLine
    ratio: np.ndarray


def priced_gpus(req: SearchRequest, warnings: list[str]):
    """(gpu, price) for the searched GPUs that can be rented at the request's price tier (both servers' searches);
    the GPUs --published-prices-only leaves out are named in one warning once the loop is done."""
    estimated: list[str] = []
    for gpu in req.space.gpus:
        price = req.prices.get(gpu.id)
        if price is None:
            warnings.append(f"{gpu.id}: no price known; left out (give one with --price {gpu.id}=USD)")
            continue
        if req.published_prices_only and not has_published_price(price, req.price_tier):
            estimated.append(gpu.id)
            continue
        if req.price_tier != "on-demand" and not any(o.usd_per_hour(req.price_tier) for o in price.offers):
            warnings.append(f"{gpu.id}: no {req.price_tier} offer known; left out (kvcalc/data/prices.yaml offers)")
            continue
        yield gpu, price
    if estimated:
        warnings.append(f"left out, their prices being estimates (--published-prices-only): {', '.join(estimated)}")


def searched_formats(space: Space, kv_runs):
    """(weights, kv) pairs of the space that the server loads: weight formats vLLM's layers run (SGLang's are
    vLLM's), KV formats kv_runs(kv) accepts."""
    for wname in space.weights:
        w = weight_format(wname)
        if "vllm" not in w.engines:
            continue
        for kname in space.kv:
            k = kv_format(kname)
            if kv_runs(k):
                yield w, k


def _structures(req: SearchRequest, max_model_len: int, warnings: list[str]) -> tuple[list[_Candidate], list[Rejection]]:
    spec, sp, wl = req.spec, req.space, req.workload
    cands: list[_Candidate] = []
    unsupported: list[Rejection] = []
    tps = [t for t in valid_tp_sizes(spec, sp.tp)]
    bmax = max(max(sp.seqs), 1)
    ratios: dict[tuple, np.ndarray] = {}
    lines: dict[tuple, latency.DecodeLine] = {}
    for gpu, price in priced_gpus(req, warnings):
        mnbt = req.max_num_batched_tokens or vllm_engine.batch_defaults(gpu, "serve")[0]
        for w, k in searched_formats(sp, lambda kv: kv.vllm_name is not None):
            for tp in tps:
                for pp in sp.pp:
                    if tp * pp > (1 if gpu.laptop else sp.max_gpus_per_replica) or pp > spec.num_layers:
                        continue  # a laptop GPU is one per machine: no split over several
                    try:
                        s = build_structure(spec, gpu, w, k, tp, pp, max_model_len, mnbt, list(sp.seqs),
                                            wl.context, req.vllm_version)
                    except UsageError as exc:
                        unsupported.append(Rejection(gpu.id, tp, pp, 1, w.name, k.name, "unsupported", None,
                                                     None, str(exc)))
                        continue
                    key = (gpu.id, w.name, k.name, tp)
                    if key not in lines:
                        lines[key] = latency.decode_line(spec, gpu, w, k, 1, False, tp)
                    wkey = (gpu.id, w.name, tp)  # W(b) has no attention in it: the same for every KV format
                    if wkey not in ratios:
                        ratios[wkey] = latency.weight_time_table(spec, gpu, w, k, tp, bmax)
                    cands.append(_Candidate(s, _risk(spec, w, k), price, lines[key], ratios[wkey]))
    return cands, unsupported


def _latencies(cands: list[_Candidate], wl: Workload, n: np.ndarray, mnbt: np.ndarray):
    """TTFT (S,) and TPOT (S, R) in seconds for per-replica concurrency n (S, R)."""
    fixed = np.array([c.line.fixed for c in cands])
    mem0 = np.array([c.line.mem0 for c in cands])
    mem1 = np.array([c.line.mem1 for c in cands])
    cmp0 = np.array([c.line.cmp0 for c in cands])
    cmp1 = np.array([c.line.cmp1 for c in cands])
    ratio_n = np.stack([_ratio(c.ratio, n[i]) for i, c in enumerate(cands)]) if cands else np.zeros_like(n, float)
    pre0 = np.array([c.line.pre0 for c in cands])
    pre1 = np.array([c.line.pre1 for c in cands])
    wread = np.array([c.line.wread for c in cands])
    # prefill-only terms of an engine's step (SGLang: its piecewise graphs' CPU floor and unfused kernels), 0 if none
    pfixed = np.array([c.line.pfixed or 0.0 for c in cands])
    pfloor = np.array([c.line.pfloor or 0.0 for c in cands])
    line = latency.DecodeLine(fixed, mem0, mem1, cmp0, cmp1, pre0, pre1, pfixed=pfixed, pfloor=pfloor)
    ttft = latency.ttft_s(line, wl.input_len, mnbt, wread)
    col = (slice(None), None)
    # one model: every candidate's sliding windows are its layers' (their shares move with the format and the TP)
    edges = sorted({w for c in cands for w, _ in c.line.windows})
    windows = tuple((w, np.array([dict(c.line.windows).get(w, 0.0) for c in cands])[col]) for w in edges)
    line_r = latency.DecodeLine(fixed[col], mem0[col], mem1[col], cmp0[col], cmp1[col], windows=windows)
    tpot = latency.tpot_s(line_r, wl.input_len, wl.output_len, batch_scale=n, mem0=mem0[col] * ratio_n)
    return np.asarray(ttft, dtype=float), np.asarray(tpot, dtype=float)


def _rate_concurrency(cands, wl: Workload, replicas: np.ndarray, mnbt: np.ndarray, nmax: int):
    """Per-replica concurrency a request rate needs (Little's law at the rate each replica serves): the smallest n
    whose throughput n / (TTFT + (output-1) x TPOT(n)) reaches rate / replicas; nmax + 1 where none does."""
    s = len(cands)
    target = wl.request_rate / replicas[None, :]  # (1, R)
    lo = np.ones((s, len(replicas)), dtype=np.int64)
    hi = np.full((s, len(replicas)), nmax, dtype=np.int64)

    def throughput(n):
        ttft, tpot = _latencies(cands, wl, n, mnbt)
        return n / (ttft[:, None] + (wl.output_len - 1) * tpot)

    ok_hi = throughput(hi) >= target
    for _ in range(int(math.ceil(math.log2(max(nmax, 2)))) + 1):
        mid = (lo + hi) // 2
        good = throughput(mid) >= target
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid + 1)
    n = np.where(ok_hi, hi, nmax + 1)
    return n, throughput(np.minimum(n, nmax))


def run_search(req: SearchRequest) -> SearchResult:
    spec, wl, tg, sp = req.spec, req.workload, req.targets, req.space
    warnings: list[str] = []
    if (wl.concurrency is None) == (wl.request_rate is None):
        raise UsageError("give exactly one of --concurrency and --request-rate")
    max_model_len = max(wl.context, tg.min_context or 0)
    empty = SearchResult(req, [], [], 0, 0, 0, {}, [], None, None, None, warnings)
    if spec.max_position_embeddings and max_model_len > spec.max_position_embeddings:
        empty.binding = "context"
        empty.message = (f"no configuration can serve max_model_len {max_model_len:,}: {spec.name} was trained for "
                         f"{spec.max_position_embeddings:,} tokens and vLLM refuses a longer max_model_len; the "
                         f"closest achievable is {spec.max_position_embeddings:,}")
        empty.closest = {"constraint": "context", "value": spec.max_position_embeddings}
        return empty

    unserved = unserved_gate(spec, req.vllm_version)
    if unserved is not None:  # engines/vllm_support.py: no configuration of this release starts the model
        empty.binding = "vllm_version"
        empty.message = f"no configuration can serve it: {unserved_reason(spec, req.vllm_version)}"
        empty.closest = {"constraint": "vllm_version", "value": unserved.since}
        return empty
    cands, unsupported = _structures(req, max_model_len, warnings)
    return evaluate(req, cands, unsupported, max_model_len, warnings)


def evaluate(req: SearchRequest, cands: list[_Candidate], unsupported: list[Rejection], max_model_len: int,
             warnings: list[str]) -> SearchResult:
    """The numeric part of the search, over structures already built (benchmarks/search_bench.py times it)."""
    spec, wl, tg, sp = req.spec, req.workload, req.targets, req.space
    empty = SearchResult(req, [], [], 0, 0, 0, {}, [], None, None, None, warnings)
    if not cands:
        missing = [w for w in warnings if "no price" in w]
        empty.message = ("no GPU in the search space has a price: " + "; ".join(missing) if missing and not unsupported
                         else "no GPU, format and parallelism in the search space can run this model under vLLM")
        empty.binding = "unsupported"
        empty.rejected = unsupported[:20]
        return empty
    structures = [c.structure for c in cands]
    grid_utils = tuple(sp.utils)
    if grid_utils == DEFAULT_UTILS and preferred_util(req.vllm_version) not in grid_utils:
        # vLLM 0.34+: 1.0 by default with the extensible KV cache (config/cache.py:495-501): the default grid
        # offers the release's own default beside 0.80-0.95
        grid_utils += (preferred_util(req.vllm_version),)
    utils = np.array(grid_utils, dtype=float)
    seqs = np.array(sp.seqs, dtype=np.int64)
    max_r = sp.max_replicas if wl.concurrency is None else min(sp.max_replicas, wl.concurrency)
    replicas = np.arange(1, max_r + 1)
    R, S = len(replicas), len(structures)
    if S * len(utils) * len(seqs) * R > MAX_CONFIGURATIONS:
        raise UsageError(f"the search space has {S * len(utils) * len(seqs) * R:,} configurations, more than "
                         f"{MAX_CONFIGURATIONS:,}: narrow --gpus, --utils, --max-num-seqs or --max-replicas")
    grid = evaluate_grid(structures, utils, list(sp.seqs))  # (S, U, Q)
    S, U, Q = grid.blocks.shape
    mnbt = np.array([s.max_num_batched_tokens for s in structures])
    if wl.concurrency is not None:
        n = np.broadcast_to(-(-wl.concurrency // replicas)[None, :], (S, R)).copy()  # ceil(N / r)
        ttft, tpot = _latencies(cands, wl, n, mnbt)
        e2e = ttft[:, None] + (wl.output_len - 1) * tpot
        tokens_per_s = wl.concurrency * wl.output_len / e2e
        rate_ok = np.ones((S, R), dtype=bool)
        reach = None
    else:
        n, _ = _rate_concurrency(cands, wl, replicas, mnbt, int(seqs.max()))
        # the most requests a replica can hold (KV at the grid's largest util, max_num_seqs): the rate is in reach
        # only at a concurrency within it
        cap = np.minimum(grid.concurrency.max(axis=(1, 2)), seqs.max())  # (S,)
        cap_sr = np.broadcast_to(np.maximum(cap, 1)[:, None], (S, R)).copy()
        t_cap, p_cap = _latencies(cands, wl, cap_sr, mnbt)
        reach = cap_sr / (t_cap[:, None] + (wl.output_len - 1) * p_cap) * replicas[None, :]  # requests/s served
        reach = np.where(cap[:, None] > 0, reach, 0.0)
        rate_ok = n <= cap[:, None]
        n = np.minimum(n, cap_sr)  # where the rate is out of reach, judge the rest at the most the replica holds
        ttft, tpot = _latencies(cands, wl, n, mnbt)
        # the GPU's time per request: its prefill GEMMs and attention (their compute alone: what mixing them into
        # decode steps cannot hide) plus its share of the decode steps at the most requests a replica holds; a rate
        # that needs more than the GPU's second grows the queue at any concurrency
        pre0 = np.array([c.line.pre0 for c in cands])[:, None]
        pre1 = np.array([c.line.pre1 for c in cands])[:, None]
        p_len = wl.input_len + wl.prefix_len
        per_request = pre0 * p_len + pre1 * p_len * (p_len + 1) / 2 + (wl.output_len - 1) * p_cap / cap_sr
        gpu_reach = replicas[None, :] / np.maximum(per_request, 1e-12)
        rate_ok &= wl.request_rate <= gpu_reach
        reach = np.minimum(reach, gpu_reach)
        tokens_per_s = np.full((S, R), wl.request_rate * wl.output_len)
    evaluated = S * U * Q * R

    # constraint masks, in binding order
    risk_ok = np.array([RISK_LEVELS.index(c.risk) <= RISK_LEVELS.index(tg.max_quality_risk or "high")
                        for c in cands])  # (S,)
    starts = grid.starts  # (S, U, Q)
    fits_n = (grid.concurrency[:, :, :, None] >= n[:, None, None, :]) & (seqs[None, None, :, None] >= n[:, None, None, :])
    ttft_ok = ttft * 1e3 <= (tg.max_ttft_ms if tg.max_ttft_ms is not None else math.inf)  # (S,)
    tpot_ok = tpot * 1e3 <= (tg.max_tpot_ms if tg.max_tpot_ms is not None else math.inf)  # (S, R)
    feasible = (risk_ok[:, None, None, None] & starts[:, :, :, None] & fits_n & rate_ok[:, None, None, :]
                & ttft_ok[:, None, None, None] & tpot_ok[:, None, None, :])  # (S, U, Q, R)

    # per deployment (S, R): which constraint binds (the first failed), for every deployment
    any_start = starts.any(axis=(1, 2))  # (S,)
    any_fit = (starts[:, :, :, None] & fits_n).any(axis=(1, 2))  # (S, R)
    stage = np.full((S, R), len(CONSTRAINTS), dtype=np.int64)  # index of the binding constraint; len = feasible
    checks = [np.broadcast_to(risk_ok[:, None], (S, R)), np.broadcast_to(any_start[:, None], (S, R)), rate_ok,
              any_fit, np.broadcast_to(ttft_ok[:, None], (S, R)), tpot_ok]
    for i in reversed(range(len(CONSTRAINTS))):
        stage = np.where(~checks[i], i, stage)
    dep_ok = feasible.any(axis=(1, 2))
    assert np.array_equal(dep_ok, stage == len(CONSTRAINTS))

    # the cheapest rental of each deployment (prices.rent): per GPU, or whole instances of an offer
    rentals = [[rent(c.price, s.tp * s.pp, int(r), req.price_tier, req.published_prices_only) for r in replicas]
               for c, s in zip(cands, structures)]
    cost = np.array([[x.usd_per_hour if x is not None else np.inf for x in row] for row in rentals],
                    dtype=float).reshape(len(cands), len(replicas))  # (S, R)
    usd_per_m = np.where(tokens_per_s > 0, cost / (tokens_per_s * 3600) * 1e6, np.inf)

    # choose util and max_num_seqs per feasible deployment: the version's default gpu_memory_utilization when it
    # works (0.92 from vLLM 0.21, 0.9 before: config/cache.py, kvcalc/engines/vllm_versions.py), else the closest
    # below it (leaving memory to the rest of the GPU), else the closest above; the smallest max_num_seqs that holds
    # the replica's requests
    preferred = preferred_util(req.vllm_version)
    util_pref = np.where(utils <= preferred + 1e-9, preferred - utils, 1 + utils - preferred)
    score = util_pref[None, :, None, None] * 1e4 + np.arange(Q)[None, None, :, None]
    if wl.request_rate is not None:
        # Poisson arrivals bunch: more than the mean n are in flight at times, and vLLM queues what max_num_seqs
        # does not seat, so prefer a max_num_seqs of at least twice the mean when the grid has one that fits
        short = seqs[None, None, :, None] < 2 * n[:, None, None, :]
        score = score + np.where(short, 1e3, 0.0)
    score = np.where(feasible, score, np.inf)
    flat = score.reshape(S, U * Q, R).argmin(axis=1)  # (S, R)
    u_idx, q_idx = flat // Q, flat % Q
    idx_s, idx_r = np.nonzero(dep_ok)
    rows: list[Deployment] = []
    from .catalog import catalog_entry

    try:
        hf_id = catalog_entry(spec.name).get("hf_id")
    except KeyError:  # a config.json or hub model: no catalog entry
        hf_id = None
    for si, ri in zip(idx_s.tolist(), idx_r.tolist()):
        c, s = cands[si], structures[si]
        ui, qi = int(u_idx[si, ri]), int(q_idx[si, ri])
        r = int(replicas[ri])
        min_u = float(utils[feasible[si, :, :, ri].any(axis=1)].min())
        conc = int(grid.concurrency[si, ui, qi])
        rows.append(Deployment(
            0, s.gpu.id, s.gpu.name, s.tp, s.pp, r, s.tp * s.pp * r, s.weights.name, s.kv.name, float(utils[ui]), min_u,
            int(seqs[qi]), s.max_num_batched_tokens, max_model_len, float(cost[si, ri]), float(usd_per_m[si, ri]),
            float(ttft[si]) * 1e3, float(tpot[si, ri]) * 1e3, float(tokens_per_s[si, ri]), int(n[si, ri]),
            conc * r, s.kv_capacity_tokens(grid.blocks[si, ui, qi], int(grid.stage[si, ui, qi])), c.risk,
            rentals[si][ri].source, rentals[si][ri].estimate, price_tier=req.price_tier,
            rented_as=rentals[si][ri].provider, gpus_per_instance=rentals[si][ri].gpus_per_instance,
            instances=rentals[si][ri].instances))
    evidence: dict = {}
    for d, si in zip(rows, idx_s.tolist()):
        s = structures[si]
        key = (s.gpu.id, s.weights.name, s.kv.name, s.tp)
        if key not in evidence:
            tpot_t = speed_trust(s.gpu, "vllm", s.weights, s.kv, "TPOT", tp=s.tp)
            ttft_t = speed_trust(s.gpu, "vllm", s.weights, s.kv, "TTFT", tp=s.tp)
            evidence[key] = evidence_of(tpot_t, ttft_t)
        d.speed_evidence = evidence[key]
    rows.sort(key=_rank_key)
    screened = len(rows)
    # the closed form screened; the rows shown are re-timed by the simulation (plan's own row of each deployment)
    rows, after_sim = retime(req, rows, max_model_len)
    rows.sort(key=_rank_key)
    for i, d in enumerate(rows, 1):
        d.rank = i
    front = pareto_front(rows)
    for d in front:
        d.pareto = True
    if rows:
        rows[0].command = serve_command(spec, hf_id, rows[0])

    # rejections: counts per binding constraint, and per GPU the rejected deployment that got furthest
    rejected_by = {CONSTRAINTS[i]: int((stage == i).sum()) for i in range(len(CONSTRAINTS)) if (stage == i).any()}
    if unsupported:
        rejected_by["unsupported"] = len(unsupported)
    rejected = _furthest_rejections(cands, structures, stage, replicas, n, grid, ttft, tpot, cost, tg, wl, dep_ok)
    for name, count in after_sim.items():
        if count:
            rejected_by[f"{name} (simulated)"] = count
    result = SearchResult(req, rows[: req.top], front, screened, evaluated, S, rejected_by, rejected, None, None,
                          None, warnings)
    if not rows and screened:
        worst = max(after_sim, key=after_sim.get)
        result.binding = worst
        target = "--request-rate" if worst == "throughput" else f"--max-{worst}-ms"
        result.message = (f"no configuration meets the targets: {screened:,} deployments pass the closed-form screen, "
                          f"but the simulation of the cheapest {sum(after_sim.values())} puts every one over the "
                          f"{target} target (it queues the prompts and mixes their prefills into the decode "
                          "steps, as vLLM's scheduler does)")
        result.closest = {"constraint": worst}
    elif not rows:
        _explain_empty(result, cands, stage, replicas, n, grid, ttft, tpot, tg, wl, reach)
    return result


def evidence_of(tpot_t, ttft_t) -> dict:
    """A search row's speed_evidence (kvcalc/trust.py): the label and backing of its TPOT, the TPOT and TTFT ranges
    (None: no range) and whose held-out errors each range is (range_basis, ttft_range_basis)."""
    return {"label": tpot_t.label, "backing": tpot_t.backing, "tpot_low": tpot_t.low, "tpot_high": tpot_t.high,
            "ttft_low": ttft_t.low, "ttft_high": ttft_t.high, "assumptions": list(tpot_t.assumptions),
            "range_basis": tpot_t.range_basis, "ttft_range_basis": ttft_t.range_basis}


def _rank_key(d: Deployment):
    return (round(d.cost_per_hour, 6), d.usd_per_million_output_tokens, d.tpot_ms, d.gpus_total, d.gpu,
            d.weights_format, d.kv_format, d.tp)


def replica_request(req: SearchRequest, d: Deployment, max_model_len: int):
    """One replica of deployment d as a `kvcalc plan` request: its GPU, formats, util, max_num_seqs and batching, and
    its share of the workload (ceil(concurrency / replicas) clients, or rate / replicas)."""
    from dataclasses import replace as _replace

    from .hardware import get_gpu
    from .plan import PlanRequest

    wl = req.workload
    share = _replace(wl, concurrency=d.concurrency_per_replica if wl.request_rate is None else wl.concurrency,
                     request_rate=None if wl.request_rate is None else wl.request_rate / d.replicas,
                     num_prompts=-(-wl.num_prompts // d.replicas) if wl.num_prompts else None)
    return PlanRequest(spec=req.spec, gpu=get_gpu(d.gpu), context=wl.context, batch=d.concurrency_per_replica,
                       engines=("vllm",), weights=d.weights_format, kv=d.kv_format, util=d.util,
                       max_model_len=max_model_len, max_num_batched_tokens=d.max_num_batched_tokens,
                       max_num_seqs=d.max_num_seqs, vllm_version=req.vllm_version, tp=d.tp, pp=d.pp, workload=share)


def retime(req: SearchRequest, rows: list[Deployment], max_model_len: int) -> tuple[list[Deployment], dict]:
    """Re-time the cheapest screened rows with plan's row of each (the simulation, workload.vllm_bench), until --top
    meet the targets or 3 x --top were tried; KV capacity and concurrency from the same row. Returns the rows that
    still meet the targets and how many the simulation put over each."""
    from .plan import FormatChoice, _vllm_row

    def plan_row(d: Deployment):
        preq = replica_request(req, d, max_model_len)
        return _vllm_row(preq, FormatChoice("search", "search", preq.asked_weights, preq.asked_kv, None))

    return retime_with(req, rows, plan_row)


def retime_with(req, rows: list, plan_row) -> tuple[list, dict]:
    """retime's loop for either engine: `plan_row(d)` is plan's row of a screened deployment d (vLLM's or SGLang's),
    whose simulated figures replace the screen's on d; the rows past SIMULATED_ROWS keep the screen's figures."""
    tg = req.targets
    kept: list = []
    over = {"throughput": 0, "ttft": 0, "tpot": 0}
    want = min(req.top, SIMULATED_ROWS)
    for i, d in enumerate(rows):
        if len(kept) >= want:  # past SIMULATED_ROWS: the rest keep the screen's figures (their `timing` says so)
            kept += rows[i:i + req.top - len(kept)]
            break
        if i >= 3 * want:
            break
        row = plan_row(d)
        b = row.bench
        d.ttft_ms, d.tpot_ms = b.ttft_s * 1e3, b.tpot_s * 1e3
        d.e2e_ms, d.itl_ms = b.e2e_s * 1e3, (b.itl_s or 0.0) * 1e3
        d.percentiles = dict(b.percentiles)
        d.output_tokens_per_s = b.output_tokens_per_s * d.replicas
        d.usd_per_million_output_tokens = d.cost_per_hour / (d.output_tokens_per_s * 3600) * 1e6 \
            if d.output_tokens_per_s > 0 else math.inf
        d.kv_capacity_tokens = int(row.kv_capacity_tokens)
        d.max_concurrency = int(row.max_concurrency) * d.replicas
        d.capacity_range = deployment_capacity_range(row, d.replicas)
        d.timing = "simulation"
        if b.saturated:  # the replica's share of the rate is more than it serves: its queue grows without bound
            over["throughput"] += 1
        elif tg.max_ttft_ms is not None and d.ttft_ms > tg.max_ttft_ms:
            over["ttft"] += 1
        elif tg.max_tpot_ms is not None and d.tpot_ms > tg.max_tpot_ms:
            over["tpot"] += 1
        else:
            kept.append(d)
    return kept, over


def deployment_capacity_range(row, replicas: int) -> dict | None:
    """Plan's trust.capacity_range of one replica's row (plan.capacity_range) for a deployment of `replicas` of them:
    KV tokens per replica (as kv_capacity_tokens), requests held at once over all replicas (as max_concurrency),
    fits_low / fits_high as the replica's (every replica serves an equal share). None where plan's row has none."""
    span = (row.trust or {}).get("capacity_range")
    if span is None:
        return None
    return {**span, "max_concurrency_low": span["max_concurrency_low"] * replicas,
            "max_concurrency_high": span["max_concurrency_high"] * replicas}


def _label(s: Structure, r: int) -> str:
    par = f"TP {s.tp}" + (f" PP {s.pp}" if s.pp > 1 else "")
    kv = "" if s.kv.name == "auto" else f" + {s.kv.name} KV"
    return f"{r} x ({s.tp * s.pp} x {s.gpu.id}, {par}, {s.weights.name}{kv})"


def _detail(i: int, si: int, ri: int, structures, replicas, n, grid, ttft, tpot, tg, wl) -> tuple:
    s = structures[si]
    name = CONSTRAINTS[i]
    if name == "quality":
        return None, None, f"quality risk above --max-quality-risk {tg.max_quality_risk}"
    if name == "memory":
        need = max(s.min_kv_bytes[k] + s.base_bytes[k] + min(s.activation_bytes[k]) for k in range(len(s.page_bytes)))
        return float(need), float(s.total_bytes), (f"vLLM does not start: weights, activations and one "
                                                   f"max_model_len request need {need / 2**30:.2f} GiB per GPU of "
                                                   f"{s.total_bytes / 2**30:.2f} GiB")
    if name == "concurrency":
        best = int(grid.concurrency[si].max())
        return float(best), float(n[si, ri]), f"holds {best} requests per replica, needs {int(n[si, ri])}"
    if name == "throughput":
        return None, float(wl.request_rate), "cannot reach the request rate at any concurrency"
    if name == "ttft":
        return float(ttft[si] * 1e3), tg.max_ttft_ms, f"TTFT {ttft[si] * 1e3:.1f} ms > {tg.max_ttft_ms:g} ms"
    return float(tpot[si, ri] * 1e3), tg.max_tpot_ms, f"TPOT {tpot[si, ri] * 1e3:.2f} ms > {tg.max_tpot_ms:g} ms"


def _furthest_rejections(cands, structures, stage, replicas, n, grid, ttft, tpot, cost, tg, wl, dep_ok):
    """Per GPU type with no feasible deployment: the rejected one that passed the most constraints (cheapest first)."""
    out = []
    for gpu_id in dict.fromkeys(s.gpu.id for s in structures):
        idx = [i for i, s in enumerate(structures) if s.gpu.id == gpu_id]
        if dep_ok[idx].any():
            continue
        best = max(((int(stage[si, ri]), -float(cost[si, ri]), si, ri) for si in idx for ri in range(len(replicas))))
        i, _, si, ri = best
        value, limit, text = _detail(i, si, ri, structures, replicas, n, grid, ttft, tpot, tg, wl)
        s = structures[si]
        out.append(Rejection(gpu_id, s.tp, s.pp, int(replicas[ri]), s.weights.name, s.kv.name, CONSTRAINTS[i], value,
                             limit, text, float(cost[si, ri])))
    return out


def _explain_empty(result: SearchResult, cands, stage, replicas, n, grid, ttft, tpot, tg, wl, reach) -> None:
    """Name the constraint that empties the set (the furthest any deployment got) and the closest value to it."""
    structures = [c.structure for c in cands]
    furthest = int(stage.max())
    name = CONSTRAINTS[furthest]
    at = np.argwhere(stage == furthest)
    if name == "tpot":
        vals = np.array([tpot[si, ri] for si, ri in at]) * 1e3
        j = int(vals.argmin())
        si, ri = at[j]
        closest = {"constraint": "tpot", "value_ms": round(float(vals[j]), 3), "limit_ms": tg.max_tpot_ms,
                   "deployment": _label(structures[si], int(replicas[ri]))}
        text = (f"--max-tpot-ms {tg.max_tpot_ms:g} binds: the lowest TPOT among deployments that meet every other "
                f"target is {vals[j]:.2f} ms by the closed-form screen, a lower bound ({closest['deployment']})")
    elif name == "ttft":
        vals = np.array([ttft[si] for si, _ in at]) * 1e3
        j = int(vals.argmin())
        si, ri = at[j]
        closest = {"constraint": "ttft", "value_ms": round(float(vals[j]), 3), "limit_ms": tg.max_ttft_ms,
                   "deployment": _label(structures[si], int(replicas[ri]))}
        text = (f"--max-ttft-ms {tg.max_ttft_ms:g} binds: the lowest TTFT among deployments that meet the memory and "
                f"concurrency targets is {vals[j]:.1f} ms by the closed-form screen, a lower bound "
                f"({closest['deployment']})")
    elif name == "throughput":
        vals = np.array([reach[si, ri] for si, ri in at])
        j = int(vals.argmax())
        si, ri = at[j]
        closest = {"constraint": "throughput", "value": round(float(vals[j]), 3), "limit": wl.request_rate,
                   "deployment": _label(structures[si], int(replicas[ri]))}
        text = (f"--request-rate {wl.request_rate:g} binds: the most any deployment of up to {int(replicas.max())} "
                f"replicas serves, with the requests its KV cache holds, is {vals[j]:.2f} requests/s "
                f"({closest['deployment']}); raise --max-replicas")
    elif name == "concurrency":
        per = [(int(grid.concurrency[si].max()) * int(replicas[ri]), si, ri) for si, ri in at]
        best, si, ri = max(per)
        closest = {"constraint": "concurrency", "value": best, "limit": wl.concurrency,
                   "deployment": _label(structures[si], int(replicas[ri]))}
        lower = "--concurrency" if wl.concurrency is not None else "--request-rate"
        text = (f"the concurrency binds: at most {best} requests of {wl.context:,} tokens fit at once "
                f"({closest['deployment']}); raise --max-replicas or lower {lower}")
    elif name == "memory":
        need = []
        for si, ri in at:
            s = structures[si]
            k = 0
            need.append((s.min_kv_bytes[k] + s.base_bytes[k] + min(s.activation_bytes[k]) - s.total_bytes, si, ri))
        short, si, ri = min(need)
        closest = {"constraint": "memory", "shortfall_bytes": int(short),
                   "deployment": _label(structures[si], int(replicas[ri]))}
        text = (f"memory binds: no GPU in the space holds the weights plus one request of max_model_len "
                f"{max(wl.context, tg.min_context or 0):,} tokens; the closest ({closest['deployment']}) is "
                f"{short / 2**30:.2f} GiB short at util 1.0")
    else:
        closest = {"constraint": "quality", "limit": tg.max_quality_risk}
        text = f"--max-quality-risk {tg.max_quality_risk} binds: every format in the space carries more risk"
    result.binding = name
    result.closest = closest
    result.message = "no configuration meets the targets: " + text


def search_json(res: SearchResult) -> dict:
    req = res.request
    wl, tg, sp = req.workload, req.targets, req.space
    return {
        "schema": SCHEMA,
        "model": req.spec.name,
        "workload": {"input_len": wl.input_len, "output_len": wl.output_len, "concurrency": wl.concurrency,
                     "request_rate": wl.request_rate, "num_prompts": wl.num_prompts,
                     "random_range_ratio": wl.random_range_ratio, "prefix_len": wl.prefix_len,
                     "burstiness": wl.burstiness, "percentiles": list(wl.percentiles),
                     "fresh_server": wl.fresh_server},
        "targets": {"max_ttft_ms": tg.max_ttft_ms, "max_tpot_ms": tg.max_tpot_ms, "min_context": tg.min_context,
                    "max_quality_risk": tg.max_quality_risk},
        "space": {"gpus": [g.id for g in sp.gpus], "weights": list(sp.weights), "kv": list(sp.kv), "tp": list(sp.tp),
                  "pp": list(sp.pp), "max_replicas": sp.max_replicas, "utils": list(sp.utils), "max_num_seqs": list(sp.seqs),
                  "vllm_version": req.vllm_version},
        "evaluated": res.evaluated,
        "structures": res.structures,
        "feasible": res.feasible,
        "results": [d.to_json() for d in res.results],
        "pareto": [d.to_json() for d in res.pareto],
        "winner_command": res.results[0].command if res.results else None,
        "rejected_by": res.rejected_by,
        "rejected": [r.to_json() for r in res.rejected],
        "binding": res.binding,
        "closest": res.closest,
        "message": res.message,
        "assumptions": list(WORKLOAD_ASSUMPTIONS) + ["screen: " + a for a in latency.ASSUMPTIONS] + [
            "memory: kvcalc plan's vLLM accounting (engines/vllm.py), exact at block granularity",
            f"cost: the cheapest {req.price_tier} rental: per GPU-hour x GPUs x replicas, or whole instances of a "
            "provider's offer (a replica inside one instance); $/M output tokens at the workload's throughput"],
        "warnings": res.warnings,
    }
