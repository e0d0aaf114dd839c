"""Time per request in `vllm bench` terms (TTFT, TPOT), from the decode model of throughput.py. Stop-gap for search.

Issue 11 (speed model v2) replaces this module: keep its two public formulas, `ttft_s` and `tpot_s`, and their
arguments, and swap what is inside. Both work on Python floats and on numpy arrays alike, so `kvcalc search` and the
scalar checks in the tests evaluate the very same expressions.

Assumptions, stated in every search's output:
- TPOT. vLLM decodes the batch in lock-step; request i's context grows from input+1 to input+output-1 over its
  output. throughput.decode_speed is affine in context on each side of its roofline ridge: one step costs
  fixed + max(m0 + m1*c, k0 + k1*c) at per-request context c (memory: weights + KV read; compute: 2*active params +
  attention FLOPs, both per request of the batch). TPOT is the exact mean of that step over the output's decode steps
  (no queueing, no prefill interleaved with decode).
- TTFT. Prefill is compute-bound: 2*active params FLOPs per prompt token plus the causal attention FLOPs
  (sum of the positions attended), at throughput.yaml's achievable fraction of the GPU's dense bf16 rate x TP, chunked
  at max_num_batched_tokens; each chunk costs at least one full read of the weights and the fixed step time. No
  queueing behind other requests' prefills.
"""

from __future__ import annotations

from dataclasses import dataclass

ASSUMPTIONS = (
    "TTFT = prefill FLOPs (2 x active params per token + causal attention) / (achievable bf16 rate x TP), chunked at "
    "max_num_batched_tokens, each chunk at least one read of the weights plus the fixed step; no queueing",
    "TPOT = mean decode step of throughput.decode_speed at the per-replica concurrency while the context grows from "
    "input+1 to input+output-1 (lock-step batch, no prefill interleaved)",
    "pipeline parallelism: stages run one after another, so a step costs what TP alone costs (no pipeline speed-up, "
    "no inter-stage transfer modelled)",
    "both are stand-ins until the speed model v2 (issue 11) replaces kvcalc/latency.py",
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


def decode_line(spec, gpu, weights, kv, batch: int, enforce_eager: bool = False, tp: int = 1,
                probe: int = 1 << 16) -> DecodeLine:
    """Read the affine pieces of throughput.decode_speed at this batch off two scalar evaluations of it."""
    from .throughput import decode_speed

    a = decode_speed(spec, gpu, "vllm", weights, kv, batch, 0, enforce_eager, tp)
    b = decode_speed(spec, gpu, "vllm", weights, kv, batch, probe, enforce_eager, tp)
    return DecodeLine(a.fixed_s, a.memory_s, (b.memory_s - a.memory_s) / probe, a.compute_s,
                      (b.compute_s - a.compute_s) / probe)


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
    return mean_step_s(line.fixed, m0, line.mem1 * b, line.cmp0 * b, line.cmp1 * b, c_lo, c_hi)


def ttft_s(line: DecodeLine, input_len, chunk_tokens, mem0_chunk=None):
    """Time to first token: the prompt's prefill in chunks of max_num_batched_tokens. A chunk of n tokens starting at
    position a costs fixed + max(weights read once, cmp0 * n + cmp1 * (causal pairs in the chunk)), where cmp0 and
    cmp1 are the decode line's per-token FLOP terms (2 x active params, attention per attended position) at batch 1.
    `mem0_chunk` is the weight read of a chunk (MoE: every expert; default the batch-1 read)."""
    np = _np()
    i = np.asarray(input_len, dtype=np.float64)
    chunk = np.asarray(chunk_tokens, dtype=np.float64)
    m0 = line.mem0 if mem0_chunk is None else mem0_chunk
    full = np.floor(i / chunk)
    rest = i - full * chunk

    def pairs(a, n):  # sum over positions t = a..a+n-1 of (t + 1) attended positions
        return n * (2 * a + n + 1) / 2

    # full chunks k = 0..full-1 start at k*chunk: sum of their pairs in closed form
    pairs_full = chunk * (chunk + 1) / 2 * full + chunk * chunk * full * (full - 1) / 2
    t_full_compute = line.cmp0 * chunk + line.cmp1 * (pairs_full / np.where(full > 0, full, 1))
    # every full chunk has the same token count; their attention grows, so take each one's max separately only
    # when the weights read could bind: compute time of chunk k is linear in k, so count chunks below the floor
    k_compute0 = line.cmp0 * chunk + line.cmp1 * chunk * (chunk + 1) / 2  # first chunk's compute
    k_step = line.cmp1 * chunk * chunk  # each later chunk attends `chunk` more positions per token
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.where(k_step > 0, np.clip(np.ceil((m0 - k_compute0) / np.where(k_step > 0, k_step, 1)), 0, full),
                         np.where(k_compute0 < m0, full, 0))
    # chunks 0..below-1 cost the weights read; the others their compute
    compute_above = full * t_full_compute - (below * k_compute0 + k_step * below * (below - 1) / 2)
    total = full * line.fixed + below * m0 + compute_above
    last = np.where(rest > 0, line.fixed + np.maximum(m0, line.cmp0 * rest + line.cmp1 * pairs(full * chunk, rest)),
                    0.0)
    out = total + last
    return out if np.ndim(out) else float(out)
