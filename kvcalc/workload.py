"""A workload in `vllm bench` terms (input length, output length, concurrency or request rate) and what each plan
row serves it at: TTFT, TPOT, end-to-end latency, output tokens/s in total and per user.

The quantities follow vllm/benchmarks/serve.py: TTFT is the time to a request's first token, TPOT the mean time per
output token after the first ((e2e - ttft) / (output_len - 1)), e2e the request's latency, and the output token
throughput the generated tokens of all requests over the run's duration.

Model (stated in every answer, `ASSUMPTIONS`):
- TTFT: the prompt's prefill alone (throughput.prefill_s), chunked at max_num_batched_tokens; no queueing for a
  slot unless the concurrency exceeds what vLLM holds at once (then the wait for a slot is added).
- TPOT: the decode step at the concurrency with each request's context growing from input+1 to input+output-1.
  The step is affine in the context at a fixed batch (every term that depends on it is bytes, FLOPs or operations per
  cached token), so the mean over the output is the step at the mean context input + output/2, exactly. vLLM mixes
  the other requests' prefill chunks into decode steps: over one request's output the other n-1 requests each
  prefill once, which adds (n-1) x their prefill time / (output-1) to the TPOT.
- A burst (every request at once, none after: `vllm bench serve` with num_prompts <= max concurrency): the i-th
  prompt waits for the prefills before it, so the mean TTFT is (n+1)/2 prefills, and each request decodes while the
  ones after it prefill.
- Request rate: Poisson arrivals at rate r hold r x e2e requests in flight (Little's law); the concurrency is the
  fixed point, capped at what vLLM holds at once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .engines.hf import hf_cache_bytes
from .errors import UsageError
from .formats import KvFormat, WeightFormat
from .hardware import GpuProfile
from .model import ModelSpec
from .throughput import decode_speed, hf_decode_speed, hf_prefill_s, prefill_s

ASSUMPTIONS = (
    "TTFT = the prompt's prefill alone, chunked at max_num_batched_tokens (plus the wait for a slot when the "
    "concurrency exceeds what vLLM holds at once)",
    "TPOT = the decode step at the concurrency and the mean context input + output/2, plus the other requests' "
    "prefills spread over the output",
    "request rate: concurrency = rate x e2e latency (Little's law), capped at what vLLM holds at once",
)


@dataclass(frozen=True)
class Workload:
    input_len: int
    output_len: int
    concurrency: int | None = None  # requests in flight (vllm bench --max-concurrency)
    request_rate: float | None = None  # requests/s (vllm bench --request-rate); None: all at once
    burst: bool = False  # every request arrives at once and none follows (num_prompts <= max_concurrency)

    @property
    def context(self) -> int:
        return self.input_len + self.output_len

    def check(self, max_model_len: int | None = None) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise UsageError("--input-len and --output-len must be at least 1")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.request_rate is not None and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise UsageError(f"--request-rate must be a positive number of requests/s, got {self.request_rate}")
        if max_model_len is not None and self.output_len > max_model_len - self.input_len:
            raise UsageError(f"--output-len {self.output_len:,} exceeds --max-model-len {max_model_len:,} - "
                             f"--input-len {self.input_len:,} = {max_model_len - self.input_len:,}: vLLM rejects "
                             "a request whose prompt plus output is longer than max_model_len")


@dataclass
class BenchEstimate:
    concurrency: float  # requests in flight the numbers are for
    ttft_s: float
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float  # all requests
    output_tokens_per_s_per_user: float  # one request's output over its e2e latency
    request_throughput: float  # requests/s
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _finish(wl: Workload, n: float, ttft: float, tpot: float, notes: list[str]) -> BenchEstimate:
    e2e = ttft + (wl.output_len - 1) * tpot
    return BenchEstimate(concurrency=n, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
                         output_tokens_per_s=n * wl.output_len / e2e, output_tokens_per_s_per_user=wl.output_len / e2e,
                         request_throughput=n / e2e, notes=notes)


def vllm_bench(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, wl: Workload, *,
               chunk_tokens: int, slots: int, kv_bytes_per_token: float | None = None, tp: int = 1, pp: int = 1,
               enforce_eager: bool = False, dtype_bytes: int = 2) -> BenchEstimate:
    """The workload on vLLM. `slots`: requests of input+output tokens vLLM holds at once (min of max_num_seqs and the
    KV cache's concurrency at that context)."""
    notes: list[str] = []
    slots = max(1, slots)
    prefill = prefill_s(spec, gpu, weights, kv, wl.input_len, chunk_tokens, tp, dtype_bytes=dtype_bytes,
                        kv_bytes_per_token=kv_bytes_per_token, enforce_eager=enforce_eager)

    def at(n: int) -> tuple[float, float]:
        step = decode_speed(spec, gpu, "vllm", weights, kv, n, wl.input_len + wl.output_len / 2, enforce_eager, tp,
                            dtype_bytes, pp=pp, kv_bytes_per_token=kv_bytes_per_token).step_s
        if wl.burst:
            # n prompts at once: the i-th waits for the i-1 before it (mean (n+1)/2 prefills) and then decodes while
            # the n-i after it prefill (mean (n-1)/2 prefills spread over its output)
            return prefill * (n + 1) / 2, step + (n - 1) / 2 * prefill / max(wl.output_len - 1, 1)
        tpot = step + (n - 1) * prefill / max(wl.output_len - 1, 1)
        return prefill, tpot

    if wl.request_rate is None:
        want = wl.concurrency or 1
        n = min(want, slots)
        ttft, tpot = at(n)
        if want > slots:
            e2e = ttft + (wl.output_len - 1) * tpot
            ttft += (want - slots) / slots * e2e  # the requests past the slots wait for finished ones, in rounds
            notes.append(f"concurrency {want} exceeds the {slots} requests vLLM holds at once at this context: "
                         "the rest wait for a slot (their wait is in the TTFT)")
            out = _finish(wl, n, ttft, tpot, notes)
            # the deployment still finishes `slots` requests per e2e of a served one
            out.request_throughput = slots / e2e
            out.output_tokens_per_s = slots * wl.output_len / e2e
            return out
        out = _finish(wl, n, ttft, tpot, notes)
        if wl.burst:  # the run lasts until the last prompt, prefilled last, has decoded its output
            step = decode_speed(spec, gpu, "vllm", weights, kv, n, wl.input_len + wl.output_len / 2, enforce_eager,
                                tp, dtype_bytes, pp=pp, kv_bytes_per_token=kv_bytes_per_token).step_s
            duration = n * prefill + (wl.output_len - 1) * step
            out.output_tokens_per_s, out.request_throughput = n * wl.output_len / duration, n / duration
        return out
    # Poisson arrivals: find n = rate x e2e(n) (e2e grows with n, so the map is monotone; iterate on integers)
    n = 1
    for _ in range(64):
        ttft, tpot = at(n)
        e2e = ttft + (wl.output_len - 1) * tpot
        nxt = min(slots, max(1, math.ceil(wl.request_rate * e2e)))
        if nxt == n:
            break
        n = nxt
    ttft, tpot = at(n)
    e2e = ttft + (wl.output_len - 1) * tpot
    if wl.request_rate * e2e > slots:
        notes.append(f"request rate {wl.request_rate:g}/s exceeds what {slots} concurrent requests serve "
                     f"({slots / e2e:.2f} requests/s): the queue grows without bound; numbers are for the full "
                     "deployment")
    if wl.concurrency is not None and n > wl.concurrency:
        n = wl.concurrency
        ttft, tpot = at(n)
    return _finish(wl, n, ttft, tpot, notes)


def hf_bench(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, wl: Workload,
             dtype_bytes: int = 2) -> BenchEstimate:
    """The workload on transformers' generate: one batch of `concurrency` prompts, prefilled together, then decoded
    in lock-step. A quantized cache keeps the newest tokens in a full-precision residual that empties each time it
    fills, so the bytes a step reads depend on where the output stands: TPOT averages the step over the output."""
    n = wl.concurrency or 1
    ttft = hf_prefill_s(spec, gpu, weights, kv, wl.input_len, n, dtype_bytes)
    samples = min(wl.output_len - 1, 64)
    total = 0.0
    for i in range(max(samples, 1)):
        k = 1 + (i * max(wl.output_len - 2, 0)) // max(samples - 1, 1) if samples > 1 else 1
        tokens = wl.input_len + k
        read = hf_cache_bytes(spec.layers, n, tokens, wl.input_len, kv, dtype_bytes)
        total += hf_decode_speed(spec, gpu, weights, kv, n, tokens, dtype_bytes, kv_read_bytes=read).step_s
    tpot = total / max(samples, 1)
    return _finish(wl, n, ttft, tpot, [])
