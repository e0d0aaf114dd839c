"""Time per request in `vllm bench` terms (TTFT, TPOT) for `kvcalc search`, vectorized over candidates, from the
speed model v2 of throughput.py (plan's rows use kvcalc/workload.py, the scalar form of the same model).

`ttft_s` and `tpot_s` work on Python floats and on numpy arrays alike, so `kvcalc search` and the scalar checks in the
tests evaluate the very same expressions.

- TPOT. At a fixed batch b, throughput.decode_speed's step is exactly affine in the per-request context c:
  fixed + W(b) + b * A * c, where W(b) is the weight GEMMs (+ MoE experts, sampler) at batch b and A the attention
  time per cached token of one request (bytes, FLOPs and conversion ops all scale with b * c). decode_line reads
  W(1) and A; search scales W with weight_time_table (W(b) / W(1), exact for dense models). TPOT is the exact
  mean of the step over the output.
- TTFT. Each chunk of max_num_batched_tokens costs fixed + max(weights read, GEMM time per token x n + attention
  time per attended pair x pairs), the per-token and per-pair times taken from the speed model's prefill kernels.
  No queueing behind other requests' prefills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ASSUMPTIONS = (
    "TTFT = the prefill chunks of max_num_batched_tokens, each the longer of one weight read and the speed model's "
    "GEMM + causal-attention time, plus the step overhead; no queueing",
    "TPOT = mean decode step of the speed model v2 (throughput.decode_speed) at the per-replica concurrency while the "
    "context grows from input+1 to input+output-1 (lock-step batch, no prefill interleaved)",
    "pipeline parallelism: stages run one after another, so a step costs what TP alone costs (no pipeline speed-up, "
    "no inter-stage transfer modelled)",
)


@dataclass(frozen=True)
class DecodeLine:
    """One decode step at batch b as a function of per-request context c:
    step(c) = fixed + max(mem0 + mem1 * c, cmp0 + cmp1 * c), in seconds."""

    fixed: float
    mem0: float
    mem1: float
    cmp0: float
    cmp1: float
    pre0: Any = None  # prefill: seconds per prompt token of the weight GEMMs (None: cmp0)
    pre1: Any = None  # prefill: seconds per attended (query, cached) pair (None: cmp1)
    wread: Any = None  # prefill: seconds of one weight read by a chunk of PREFILL_ROWS tokens (None: mem0)
    pfixed: Any = None  # prefill: seconds a chunk's step adds to `fixed` that decode steps do not pay (None: 0)
    pfloor: Any = None  # prefill: the least a chunk's step takes (the CPU's, SGLang's piecewise graphs; None: 0)
    # the sliding windows and chunks decode reads (throughput.decode_windows: (W, share), share a float or an array;
    # W < 0 a chunk of -W): c in the step is effective_context(c), each window's layers reading min(c, W), each
    # chunked layer its own chunk's ((c - 1) mod C) + 1; (): c itself
    windows: tuple = ()

    def prefill_terms(self):
        return (self.cmp0 if self.pre0 is None else self.pre0), (self.cmp1 if self.pre1 is None else self.pre1)


PREFILL_ROWS = 2048  # the chunk the prefill terms are read at (vLLM's serve default max_num_batched_tokens)


def decode_line(spec, gpu, weights, kv, batch: int, enforce_eager: bool = False, tp: int = 1,
                probe: int = 1 << 16, sglang: bool = False, prefill_rows: int = 0) -> DecodeLine:
    """The step at this batch as fixed + W(batch) + slope * c, read off two scalar evaluations of
    throughput.decode_speed (exact: the step is affine in c at a fixed batch, without enforce_eager), and the
    prefill terms of the same model. `sglang`: the prefill terms as SGLang's prefill runs (the lm_head on one row a
    request, its fused MoE's blocks and activation kernels: throughput.forward_kernels logit_rows, sglang_moe).
    `prefill_rows`: the chunk the prefill terms are read at, when more than PREFILL_ROWS (the GEMMs' row-fill rate
    only grows with the rows, so terms read at the largest chunk stay below every smaller chunk's time)."""
    from .throughput import decode_speed, decode_windows, effective_context, forward_kernels

    a = decode_speed(spec, gpu, "vllm", weights, kv, batch, 0, enforce_eager, tp)
    b = decode_speed(spec, gpu, "vllm", weights, kv, batch, probe, enforce_eager, tp)
    windows = decode_windows(spec, kv, 2, tp)  # the slope per token every layer reads (decode_speed's unit)
    read = effective_context(windows, probe)
    n = max(PREFILL_ROWS, int(prefill_rows))
    kernels = forward_kernels(spec, gpu, weights, kv, n, 0.0, n * n, tp, prefill=True,
                              logit_rows=1 if sglang else None, sglang_moe=sglang)
    # a prefill token's GEMMs, and its share of the TP all-reduce (bytes linear in the tokens, kvcalc/allreduce.py)
    gemm = sum(k.compute_s for k in kernels if k.name in ("linear", "experts")) / n \
        + sum(k.time_s for k in kernels if k.name == "moe_act") / n \
        + sum(k.time_s for k in kernels if k.name == "allreduce") / n
    attention = next(k.compute_s for k in kernels if k.name == "attention") / (n * n)
    wread = sum(k.memory_s for k in kernels if k.name in ("linear", "experts"))
    return DecodeLine(a.fixed_s, a.step_s - a.fixed_s, (b.step_s - a.step_s) / read, 0.0, 0.0, gemm, attention,
                      wread, windows=windows)


def weight_time_table(spec, gpu, weights, kv, tp: int, bmax: int):
    """W(b) / W(1) for b = 0..bmax (index 0 = 1.0): the decode step's batch-dependent part (weight GEMMs, experts,
    sampler) at batch b over batch 1. Exact for dense models: the GEMMs cost what the batch rounded up to 16 rows
    costs (16-row MMA tiles pad to it) and the sampler and the TP all-reduce's bytes, linear in the rows, are taken
    back to b. MoE: every batch up
    to 64 is evaluated; above it the experts touched are those of the rounded-up batch (at most 15 tokens more).
    Attention is not in it, so the table does not depend on the KV format."""
    np = _np()
    from .throughput import forward_kernels, gpu_rates

    rates = gpu_rates(gpu)

    def linear(ks):  # the parts linear in the rows: the sampler and the TP all-reduce's bytes (kvcalc/allreduce.py)
        return sum(k.time_s for k in ks if k.name in ("sampler", "allreduce"))

    def parts(b):
        ks = forward_kernels(spec, gpu, weights, kv, b, 0.0, 0.0, tp, rates=rates)
        return sum(k.time_s for k in ks), linear(ks)

    top = max(bmax, 1)
    table = np.empty(top + 1)
    exact = min(top, 64) if spec.moe is not None else 0  # MoE: the experts touched change with every token
    ups = list(range(16 * (exact // 16 + 1), -(-top // 16) * 16 + 1, 16))
    batches = list(range(1, exact + 1)) + ups
    if weights.name.startswith("nf4"):  # bitsandbytes picks its kernel by the row count: one batch at a time
        evaluated = {b: parts(b) for b in batches}
    else:  # the same forward_kernels, evaluated over every batch at once (elementwise, the same arithmetic)
        ks = forward_kernels(spec, gpu, weights, kv, np.array(batches, dtype=np.int64), 0.0, 0.0, tp, rates=rates)
        totals = sum(k.time_s for k in ks)
        samplers = linear(ks)
        evaluated = {b: (float(t), float(s)) for b, t, s in zip(batches, totals, samplers)}
    for b in range(1, exact + 1):
        table[b] = evaluated[b][0]
    for up in ups:
        total, sampler = evaluated[up]
        per_row = sampler / up
        for b in range(up - 15, min(up, top) + 1):
            table[b] = total - (up - b) * per_row
    table[0] = table[1]
    return table / table[1]


def _np():
    import numpy as np

    return np


def mean_step_s(fixed, mem0, mem1, cmp0, cmp1, c_lo, c_hi):
    """Exact mean over integer contexts c = c_lo..c_hi (inclusive) of fixed + max(mem0 + mem1 c, cmp0 + cmp1 c).
    Works elementwise on arrays. Where c_hi < c_lo (no decode step) the result is 0."""
    np = _np()
    fixed, mem0, mem1, cmp0, cmp1, c_lo, c_hi = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (
        fixed, mem0, mem1, cmp0, cmp1, c_lo, c_hi)))
    n = c_hi - c_lo + 1
    # shift so j = c - c_lo runs 0..n-1; d(j) = memory - compute = d0 + d1 j
    d0 = (mem0 - cmp0) + (mem1 - cmp1) * c_lo
    d1 = mem1 - cmp1
    cmp_at = cmp0 + cmp1 * c_lo
    sum_cmp = n * cmp_at + cmp1 * n * (n - 1) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.where(d1 != 0, -d0 / np.where(d1 != 0, d1, 1), 0.0)
        # d1 > 0: d >= 0 for j >= ceil(root); d1 < 0: for j <= floor(root); d1 == 0: everywhere or nowhere
        lo = np.clip(np.ceil(root), 0, n)
        hi = np.clip(np.floor(root) + 1, 0, n)
        cnt_pos = np.where(d1 > 0, n - lo, np.where(d1 < 0, hi, np.where(d0 >= 0, n, 0)))
        first = np.where(d1 > 0, lo, 0)
        sum_j = cnt_pos * (2 * first + cnt_pos - 1) / 2
        sum_pos = cnt_pos * d0 + d1 * sum_j
        mean = fixed + (sum_cmp + sum_pos) / np.where(n > 0, n, 1)
    out = np.where(n > 0, mean, 0.0)
    return out if out.ndim else float(out)


def tpot_s(line: DecodeLine, input_len, output_len, batch_scale=1.0, mem0=None):
    """Time per output token after the first: the mean decode step while the context grows over the output.
    `line` is the decode line at batch 1; `batch_scale` (b) scales the per-request terms to batch b (both the KV read
    and the FLOPs are per request of the batch); `mem0` overrides the weight read at batch b (MoE: more experts
    touched as b grows). Arrays broadcast."""
    np = _np()
    b = np.asarray(batch_scale, dtype=np.float64)
    m0 = line.mem0 if mem0 is None else mem0
    c_lo = np.asarray(input_len, dtype=np.float64) + 1
    c_hi = np.asarray(input_len, dtype=np.float64) + np.asarray(output_len, dtype=np.float64) - 1
    if not line.windows:
        return mean_step_s(line.fixed, m0, line.mem1 * b, line.cmp0 * b, line.cmp1 * b, c_lo, c_hi)
    # sliding windows and chunks (DecodeLine.windows): between two window edges and two chunk boundaries the read
    # effective_context(c) = q c + p is affine in c (a chunked layer's c - C floor((c - 1) / C) has slope 1 inside a
    # chunk), so the mean is the segments' exact means weighted by their lengths
    edges = {w for w, _ in line.windows if w > 0}
    chunks = [(-w, s) for w, s in line.windows if w < 0]
    if chunks:  # every chunk boundary k C the decode's contexts cross (k C ends a segment: c = k C + 1 starts one)
        lo_all, hi_all = float(np.min(c_lo)), float(np.max(c_hi))
        for size, _ in chunks:
            first = max(int((max(lo_all, 1) - 1) // size), 0)
            edges.update(size * k for k in range(first, int(hi_all // size) + 1))
    edges = sorted(edges)
    n = c_hi - c_lo + 1
    total = 0.0
    prev = -np.inf
    for edge in edges + [np.inf]:
        past = [(w, s) for w, s in line.windows if 0 < w <= prev]  # windows every c of this segment reads past
        q = 1.0 - sum(s for _, s in past)
        # every c of this segment is in chunk floor((c - 1) / C) = floor(prev / C) of each chunked layer
        p = sum(s * w for w, s in past) - sum(s * size * (max(prev, 0.0) // size) for size, s in chunks)
        lo, hi = np.maximum(c_lo, prev + 1), np.minimum(c_hi, edge)
        seg = np.maximum(hi - lo + 1, 0)
        mean = mean_step_s(line.fixed, m0 + line.mem1 * b * p, line.mem1 * b * q, line.cmp0 * b + line.cmp1 * b * p,
                           line.cmp1 * b * q, lo, np.where(seg > 0, hi, lo - 1))
        total = total + seg * mean
        prev = edge
    out = np.where(n > 0, total / np.where(n > 0, n, 1), 0.0)
    return out if np.ndim(out) else float(out)


def ttft_s(line: DecodeLine, input_len, chunk_tokens, mem0_chunk=None):
    """Time to first token: the prompt's prefill in chunks of max_num_batched_tokens. A chunk of n tokens starting at
    position a costs fixed + pfixed + max(weights read once, cmp0 * n + cmp1 * (causal pairs in the chunk)), where
    cmp0 and cmp1 are the decode line's per-token FLOP terms (2 x active params, attention per attended position) at
    batch 1, and at least line.pfloor (a prefill step's CPU floor: step_cost.StepCost.prefill_floor_s, SGLang's piecewise
    CUDA graphs; max(pfloor, fixed + pfixed + max(m0, x)) = fixed + pfixed + max(max(m0, pfloor - fixed - pfixed), x)).
    `mem0_chunk` is the weight read of a chunk (MoE: every expert; default the batch-1 read)."""
    np = _np()
    i = np.asarray(input_len, dtype=np.float64)
    chunk = np.asarray(chunk_tokens, dtype=np.float64)
    m0 = line.mem0 if mem0_chunk is None else mem0_chunk
    fixed = line.fixed + (0.0 if line.pfixed is None else line.pfixed)
    if line.pfloor is not None:
        m0 = np.maximum(m0, np.asarray(line.pfloor, dtype=np.float64) - fixed)
    c0, c1 = line.prefill_terms()
    full = np.floor(i / chunk)
    rest = i - full * chunk

    def pairs(a, n):  # sum over positions t = a..a+n-1 of (t + 1) attended positions
        return n * (2 * a + n + 1) / 2

    # full chunks k = 0..full-1 start at k*chunk: sum of their pairs in closed form
    pairs_full = chunk * (chunk + 1) / 2 * full + chunk * chunk * full * (full - 1) / 2
    t_full_compute = c0 * chunk + c1 * (pairs_full / np.where(full > 0, full, 1))
    # every full chunk has the same token count; their attention grows, so take each one's max separately only
    # when the weights read could bind: compute time of chunk k is linear in k, so count chunks below the floor
    k_compute0 = c0 * chunk + c1 * chunk * (chunk + 1) / 2  # first chunk's compute
    k_step = c1 * chunk * chunk  # each later chunk attends `chunk` more positions per token
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.where(k_step > 0, np.clip(np.ceil((m0 - k_compute0) / np.where(k_step > 0, k_step, 1)), 0, full),
                         np.where(k_compute0 < m0, full, 0))
    # chunks 0..below-1 cost the weights read; the others their compute
    compute_above = full * t_full_compute - (below * k_compute0 + k_step * below * (below - 1) / 2)
    total = full * fixed + below * m0 + compute_above
    last = np.where(rest > 0, fixed + np.maximum(m0, c0 * rest + c1 * pairs(full * chunk, rest)),
                    0.0)
    out = total + last
    return out if np.ndim(out) else float(out)
