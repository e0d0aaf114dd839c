"""The vectorized core of `kvcalc search`: vLLM's block arithmetic over a numeric grid, in numpy.

Why it cannot drift from `kvcalc plan`: everything structural comes from the scalar engine functions, called once per
(model, GPU, weight format, KV format, TP, PP): weights per rank, non-torch and CUDA-graph bytes, the profile run's
activation peak (engines.vllm.activation_bytes, once per max_num_seqs value), the page bytes per block, the smallest
KV budget vLLM starts with and the blocks one request holds (the layout of engines/vllm_groups.py). Only the numeric
grid (gpu_memory_utilization x max_num_seqs) is vectorized, and only with the integer operations engines.vllm.estimate
and plan._fits_batch apply to those quantities:

    requested = ceil(total * util)                       (v1/worker/utils.py rounds up)
    available = requested - weights - activation(seqs) - non_torch - cudagraph        (per stage)
                (vLLM 0.34+, extensible KV cache: min(requested, free at start - margin(peak)) in place of requested)
    blocks    = available // page_bytes  if available > 0 else 0
    kv_fits   = available >= min_kv_bytes                 (one max_model_len request)
    stage     = the one with the fewest blocks, or any whose KV does not fit (as estimate() picks it)
    starts    = kv_fits and requested + graph_capture(seqs) <= total   (V2 runner: graphs captured after the KV cache)
    requests  = (blocks - 1) // blocks_per_request(context)   if it starts else 0     (the null block held back)

tests/test_search_core.py checks, over random configurations, that these arrays equal the scalar plan path exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .engines import vllm as vllm_engine
from .engines.vllm_encoders import encoder_profile_bytes
from .errors import UsageError
from .formats import KvFormat, WeightFormat
from .hardware import GpuProfile
from .model import ModelSpec


@dataclass
class Structure:
    """What one (model, GPU, formats, TP, PP) deployment fixes, whatever util and max_num_seqs are."""

    gpu: GpuProfile
    weights: WeightFormat
    kv: KvFormat
    tp: int
    pp: int
    total_bytes: int
    base_bytes: list[int]  # per stage: weights + non-torch + CUDA-graph estimate
    activation_bytes: list[list[int]]  # per stage, per max_num_seqs value of the grid
    page_bytes: list[int]  # per stage: bytes one block takes across the stage's layers
    min_kv_bytes: list[int]  # per stage: a max_model_len request's blocks (vLLM refuses to start below)
    blocks_per_request: list[int]  # per stage: blocks one request of `context` tokens holds
    # CUDA-graph capture after the KV cache, beyond gpu_memory_utilization (V2 runner), per max_num_seqs of the grid
    # (the V2 runner's graphs follow max_num_seqs: engines/vllm.py v2_graph_bytes)
    capture_bytes: list[int]
    block_size: int
    max_num_batched_tokens: int
    weights_per_gpu_bytes: int
    notes: list[str] = field(default_factory=list)
    layouts: list = field(default_factory=list)  # per stage: the engine's KvLayout (for the logged KV tokens)
    logged_mode: str = "concurrency"  # the release's rules.logged_tokens
    # vLLM 0.34+ extensible KV cache: per stage, per max_num_seqs, the cap free memory puts on `requested`
    # (free at the first snapshot less the margin on the stage's transient peak, engines/vllm.py stage_budgets);
    # None where the release sizes the cache from util alone
    free_cap_bytes: list[list[int]] | None = None

    def kv_capacity_tokens(self, blocks: int, stage: int = 0) -> int:
        """vLLM's logged 'GPU KV cache size' at this many blocks: engines.vllm.logged_kv_tokens, plan's rule."""
        return vllm_engine.logged_kv_tokens(self.layouts[stage], int(blocks), self.logged_mode)


def build_structure(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, tp: int, pp: int,
                    max_model_len: int, max_num_batched_tokens: int, seqs_grid: list[int], context: int,
                    vllm_version: str = vllm_engine.DEFAULT_VERSION, enforce_eager: bool = False) -> Structure:
    """Call the scalar engine once and read off the structural quantities. Raises UsageError (including
    UnsupportedModelError) where vLLM cannot serve this combination at all."""
    settings = vllm_engine.VllmSettings(
        weights=weights, kv=kv, gpu_memory_utilization=1.0, max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=seqs_grid[0], enforce_eager=enforce_eager,
        version=vllm_version, tensor_parallel=tp, pipeline_parallel=pp)
    est = vllm_engine.estimate(spec, gpu, settings)
    # every pipeline stage's own budget (engines/vllm.py keeps them beside the smallest one)
    stages = est.stages or [est]
    # at util 1.0 the whole GPU is requested, so the overflow estimate() reports is the capture itself; the V2
    # runner's graphs follow max_num_seqs (their capture sizes, engines/vllm.py v2_graph_bytes): per grid value, in
    # the budget (0.29+ estimate, 0.34 capture) or after it (0.26-0.28)
    if vllm_engine.uses_v2_runner(spec, settings):
        graphs = [vllm_engine.v2_graph_bytes(spec, replace(settings, max_num_seqs=q), gpu, est.max_num_batched_tokens,
                                             q) for q in seqs_grid]
    else:
        graphs = [(0, 0)] * len(seqs_grid)
    budget_step = [g[0] - graphs[0][0] for g in graphs]  # est.cudagraph_bytes holds the first value's
    capture = [est.cudagraph_overflow_bytes + g[1] - graphs[0][1] if est.cudagraph_overflow_bytes else 0
               for g in graphs]
    v2 = vllm_engine.uses_v2_model_runner(spec, vllm_engine.parse_version(vllm_version))
    base, act, page, min_kv, need, cap = [], [], [], [], [], []
    free = vllm_engine.extensible_free_bytes(settings, gpu)
    # non_torch_bytes holds the V2 sampler's state of vLLM 0.27+ (engines/vllm.py sampler_state_bytes), which scales
    # with max_num_seqs: the grid adds it per max_num_seqs on the last stage instead
    plain_non_torch = est.non_torch_bytes - est.sampler_state_bytes
    for i, st in enumerate(stages):
        base.append(st.weights_bytes + plain_non_torch + est.cudagraph_bytes)
        if i == len(stages) - 1:  # the last stage runs the sampler: its peak depends on max_num_seqs
            per_seqs = [vllm_engine.activation_bytes(spec, replace(settings, max_num_seqs=q),
                                                     est.max_num_batched_tokens, q, v2, gpu=gpu,
                                                     max_model_len=est.max_model_len, block_size=est.block_size)
                        for q in seqs_grid]
            per_seqs = [a + encoder_profile_bytes(spec, settings, est.max_num_batched_tokens, a, q, est.max_model_len,
                                                  vllm_engine.uses_v2_runner(spec, settings))
                        for a, q in zip(per_seqs, seqs_grid)]
            if per_seqs[0] != st.activation_bytes:  # the engine changed how it calls its own formula
                raise AssertionError("activation_bytes() no longer reproduces estimate(); update search_core")
            transient = list(per_seqs)
            v2_sampler = vllm_engine.uses_v2_runner(spec, settings)
            per_seqs = [a + vllm_engine.sampler_state_bytes(spec, settings, q, v2_sampler)
                        for a, q in zip(per_seqs, seqs_grid)]
        else:
            per_seqs = [st.activation_bytes] * len(seqs_grid)
            transient = per_seqs
        if free is not None:
            cap.append([free - vllm_engine.extensible_margin(gpu, a) for a in transient])
        per_seqs = [a + step for a, step in zip(per_seqs, budget_step)]  # every stage captures its own graphs
        act.append(per_seqs)
        page.append(st.layout.bytes_per_block)
        min_kv.append(st.layout.min_kv_bytes)
        need.append(st.layout.blocks_per_request(context))
    return Structure(gpu, weights, kv, tp, pp, est.total_memory, base, act, page, min_kv, need, capture,
                     est.block_size,
                     est.max_num_batched_tokens, max(s.weights_bytes for s in stages), list(est.notes),
                     [st.layout for st in stages], settings.rules.logged_tokens, cap if free is not None else None)


@dataclass
class GridResult:
    """Arrays over (structure, util, max_num_seqs)."""

    blocks: np.ndarray  # int64: num_gpu_blocks as vLLM allocates them (the smallest stage's)
    starts: np.ndarray  # bool: vLLM starts (one max_model_len request fits, and the CUDA graphs after it)
    concurrency: np.ndarray  # int64: requests of `context` tokens held at once
    stage: np.ndarray = None  # int64: the pipeline stage whose blocks these are


def evaluate_grid(structures: list[Structure], utils: np.ndarray, seqs_grid: list[int]) -> GridResult:
    """Blocks, start and concurrency for every structure x util x max_num_seqs, in numpy (see the module doc)."""
    n, k_max = len(structures), max((len(s.page_bytes) for s in structures), default=1)
    q = len(seqs_grid)
    total = np.array([s.total_bytes for s in structures], dtype=np.int64)
    capture = np.array([s.capture_bytes for s in structures], dtype=np.int64)  # (n, q)
    valid = np.zeros((n, k_max), dtype=bool)
    base = np.zeros((n, k_max), dtype=np.int64)
    act = np.zeros((n, k_max, q), dtype=np.int64)
    page = np.ones((n, k_max), dtype=np.int64)
    min_kv = np.zeros((n, k_max), dtype=np.int64)
    need = np.ones((n, k_max), dtype=np.int64)
    cap = np.full((n, k_max, q), np.iinfo(np.int64).max // 4, dtype=np.int64)  # no cap: util alone
    for i, s in enumerate(structures):
        k = len(s.page_bytes)
        valid[i, :k] = True
        base[i, :k] = s.base_bytes
        act[i, :k] = s.activation_bytes
        page[i, :k] = s.page_bytes
        min_kv[i, :k] = s.min_kv_bytes
        need[i, :k] = s.blocks_per_request
        if s.free_cap_bytes is not None:
            cap[i, :k] = s.free_cap_bytes
    utils = np.asarray(utils, dtype=np.float64)
    # math.ceil(total * util) in float64, exactly as estimate() computes it
    requested = np.ceil(total[:, None].astype(np.float64) * utils[None, :]).astype(np.int64)  # (n, u)
    best_blocks = best_starts = best_need = best_stage = None
    for k in range(k_max):
        over = base[:, k, None] + act[:, k, :]  # (n, q)
        # 0.34+ extensible KV cache: min(requested, free - margin) - over (engines/vllm.py stage_budgets)
        avail = np.minimum(requested[:, :, None], cap[:, k, None, :]) - over[:, None, :]  # (n, u, q)
        blocks = np.where(avail > 0, avail // page[:, k, None, None], 0)
        starts = avail >= min_kv[:, k, None, None]
        stage_need = np.broadcast_to(need[:, k, None, None], blocks.shape)
        if best_blocks is None:
            best_blocks, best_starts, best_need = blocks, starts, stage_need
            best_stage = np.zeros(blocks.shape, dtype=np.int64)
            continue
        # estimate(): a stage with fewer blocks, or one that does not start while the best so far does, wins
        take = valid[:, k, None, None] & ((blocks < best_blocks) | (~starts & best_starts))
        best_blocks = np.where(take, blocks, best_blocks)
        best_starts = np.where(take, starts, best_starts)
        best_need = np.where(take, stage_need, best_need)
        best_stage = np.where(take, k, best_stage)
    starts = best_starts & (requested[:, :, None] + capture[:, None, :] <= total[:, None, None])
    concurrency = np.where(starts, np.maximum(best_blocks - 1, 0) // np.maximum(best_need, 1), 0)
    return GridResult(best_blocks, starts, concurrency, best_stage)


def valid_tp_sizes(spec: ModelSpec, sizes=(1, 2, 4, 8)) -> list[int]:
    """TP sizes vLLM accepts for this model (plan.parallel_refusal: heads and KV heads split evenly, or KV heads
    replicated)."""
    from .plan import parallel_refusal

    return [tp for tp in sizes if parallel_refusal(spec, tp) is None]


def check_pp(spec: ModelSpec, pp: int) -> None:
    if pp > spec.num_layers:
        raise UsageError(f"--pp {pp} exceeds the model's {spec.num_layers} layers")
