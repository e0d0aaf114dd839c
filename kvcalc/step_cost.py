"""The time of one vLLM engine step of any mix of prefill chunks and decodes, from the speed model of throughput.py.

A V1 step runs every scheduled token through the model at once (vllm/v1/core/sched/scheduler.py:425 `schedule`:
"There's no decoding phase nor prefill phase"): the weight GEMMs see all of the step's tokens as one batch, attention
reads each decoding request's cache and runs each prefill chunk's causal block, and the sampler runs once per request
that samples a token. So a step costs

    fixed + weights(tokens) + attention_decode(sum of decode contexts) + sum over chunks of attention_prefill(chunk)
          + sampler(requests sampled)

with every term a kernel class of throughput.forward_kernels (read off it, never re-derived here):
- weights(tokens): the step's kernels other than attention and the sampler (dense GEMMs, MoE experts, TP all-reduce)
  at that many tokens, memoized (a step with a prefill chunk above 64 tokens interpolated between multiples of 64);
- attention_decode: linear in the summed context (bytes, FLOPs and conversion ops all scale with it, and a kernel's
  time is homogeneous in its three parts), read off one evaluation;
- attention_prefill: the chunk's cached-prefix bytes and its causal pairs, each part scaled from one evaluation, then
  combined by throughput.Kernel.time_s as the speed model combines them;
- sampler: linear in its rows;
- the CPU's launch of a step without CUDA graphs (`launch_s`): vLLM replays a graph only for steps of at most
  max_cudagraph_capture_size tokens (vllm/v1/cudagraph_dispatcher.py:274-281, v0.26.0: more tokens dispatch
  CUDAGraphMode.NONE), so a bigger step launches its whole forward from Python while the GPU runs behind it, and
  takes the longer of the two (serve_sim applies it to those steps). The launch time is compiled_launch_s
  (engines.vllm eager_fixed_step_s + compiled_per_layer_s and its per-format extras x layers, fitted on lone served
  prefills: scripts/serve_load_report.py fit_compiled_launch, + eager_per_moe_layer_s x MoE layers, fitted on one lone
  MoE prefill: fit_moe_launch), the dense part times `cpu_scale`: how
  much slower the host's CPU runs launch-bound work than the host those constants were fitted on (1 for kvcalc's own
  figures; scripts/serve_load_report.py measures the serve runs' host).

By construction a decode-only step equals throughput.decode_speed(batch, mean context).step_s and a prefill-only
chunk equals the chunk of throughput.prefill_s (tests/test_serve_sim.py holds both).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace  # replace: the unit kernel in _build

from .constants import load

from .throughput import (MMA_ROWS, Kernel, decode_speed, decode_windows, effective_context_sum, forward_kernels,
                         gpu_rates, moe_layer_count)
from .engines.vllm_specs import vllm_bytes_per_token

_PROBE = 1 << 20  # tokens of context a unit kernel is read at (large: exact in float arithmetic)
_NOT_WEIGHTS = ("attention", "sampler")


@dataclass
class StepCost:
    """Seconds of one engine step of one deployment (see the module doc)."""

    spec: object
    gpu: object
    weights: object
    kv: object
    tp: int
    kv_per_token: float
    fixed_s: float
    eager_floor_s: float  # enforce_eager: the CPU's kernel launches per step (0 with CUDA graphs)
    decode_attention_per_token_s: float
    sampler_per_row_s: float
    prefill_attention: Kernel  # parts per cached-prefix token (memory, ALU) and per causal pair (compute)
    launch_s: float = 0.0  # the CPU's launch of one forward without CUDA graphs (see the module doc)
    # an engine's own kernels on top of the shared model's (SGLang's eager norm chains: sglang_step_extra), per step
    # and per token of the step
    extra_step_s: float = 0.0
    extra_per_token_s: float = 0.0
    fused_decode_max: int = 0  # decode-only steps of at most this many requests skip the extra (inductor fused it)
    # the engine's lm_head multiplies only the rows that sample, one per request of a step with a prefill chunk
    # (SGLang's LogitsProcessor: srt/layers/logits_processor.py:449-469 in 0.5.14, last_index = cumsum(extend_seq_lens)
    # - 1; throughput.forward_kernels logit_rows); False: every row, as the shared vLLM-fitted model counts it
    logits_at_samples: bool = False
    # the CPU's time to run one step with a prefill chunk through piecewise CUDA graphs (sglang_prefill_floor_s): the
    # step takes at least that long, its GPU work queued behind the CPU's (0: the engine replays one graph a step)
    prefill_floor_s: float = 0.0
    # MoE layers as SGLang's Triton fused MoE runs them (throughput.forward_kernels sglang_moe)
    sglang_moe: bool = False
    # kernels only a prefill step of at most prefill_extra_max_tokens tokens runs (per step, per token: SGLang's
    # piecewise graphs run Gemma 3's rotary embedding unfused, sglang_prefill_extra)
    prefill_extra_step_s: float = 0.0
    prefill_extra_per_token_s: float = 0.0
    prefill_extra_max_tokens: int = 0
    # an MLA model's prefill step of more than mha_prefill_above tokens with no cached prefix runs its attention
    # decompressed (SGLang's MHA_ONE_SHOT outside its prefill graphs: sglang_mha_prefill_above); its causal FLOPs are
    # mha_prefill_ratio (throughput.mha_attention_flops_per_token over attention_flops_per_token) of the absorbed
    # kernel's. -1: never
    mha_prefill_above: int = -1
    mha_prefill_ratio: float = 1.0
    # the sliding windows decode attention reads (throughput.decode_windows): a decoding request of context c costs
    # decode_attention_per_token_s x effective_context(c), not x c (empty: x c)
    windows: tuple = ()
    _weights: dict = field(default_factory=dict, repr=False)

    def decode_context(self, contexts, steps: int = 0):
        """The decode_context step_s takes for decoding requests of these contexts (tokens cached, the new one
        included): their sum, each request's read capped at its sliding layers' windows (throughput.
        effective_context_sum); steps = k: an array over the next k steps, each request a token longer each step."""
        if not self.windows:
            import numpy as np  # only the simulation asks for contexts over steps; plan's path stays numpy-free

            total = float(np.sum(contexts))
            return total + len(contexts) * np.arange(steps) if steps else total
        return effective_context_sum(self.windows, contexts, steps)

    def _weights_at(self, tokens: int, prefill: bool, rows: int | None = None) -> float:
        key = (tokens, prefill, rows)
        hit = self._weights.get(key)
        if hit is None:
            ks = forward_kernels(self.spec, self.gpu, self.weights, self.kv, tokens, 0.0, 0.0, self.tp,
                                 prefill=prefill, logit_rows=rows, sglang_moe=self.sglang_moe)
            hit = self._weights[key] = sum(k.time_s for k in ks if k.name not in _NOT_WEIGHTS)
        return hit

    def weights_s(self, tokens: int, prefill: bool, rows: int | None = None) -> float:
        """The non-attention kernels of a forward of `tokens` tokens (prefill: a step with a prefill chunk in it).
        Decode-only steps are read at their exact batch; a step with a prefill chunk of more than 64 tokens between
        the two multiples of 64 around it, linearly (the GEMMs' time is flat, then affine in the 16-row tiles: exact
        away from the bend; the MoE experts touched bend gently)."""
        if tokens <= 0:
            return 0.0
        # `rows`: the rows that sample (logits_at_samples), in whole 16-row MMA tiles (one memo per tile count)
        rows = MMA_ROWS * -(-int(rows) // MMA_ROWS) if (prefill and rows is not None and self.logits_at_samples) \
            else None
        if not prefill or tokens <= 64:
            return self._weights_at(tokens, prefill, rows)
        lo = (tokens // 64) * 64
        if lo == tokens:
            return self._weights_at(tokens, True, rows)
        a, b = self._weights_at(lo, True, rows), self._weights_at(lo + 64, True, rows)
        return a + (b - a) * (tokens - lo) / 64

    def extra_s(self, tokens: int, prefill: bool) -> float:
        """The engine's own kernels in a step of `tokens` tokens (0 in a decode-only step the compiled graphs fuse)."""
        if not prefill and tokens <= self.fused_decode_max:
            return 0.0
        t = self.extra_step_s + self.extra_per_token_s * tokens
        if prefill and tokens <= self.prefill_extra_max_tokens:
            t += self.prefill_extra_step_s + self.prefill_extra_per_token_s * tokens
        return t

    def prefill_attention_s(self, start: int, n: int, compute_scale: float = 1.0) -> float:
        """Causal attention of a chunk of n prompt tokens after `start` cached ones (`compute_scale`: its FLOPs
        over the absorbed kernel's, an MLA model's decompressed prefill)."""
        if n <= 0:
            return 0.0
        u = self.prefill_attention
        pairs = n * start + n * (n + 1) / 2
        return Kernel(u.name, u.bytes, u.flops, u.conversion_ops, u.memory_s * start,
                      u.compute_s * pairs * compute_scale, u.alu_s * start, u.overlap).time_s

    def step_s(self, decodes: int, decode_context: float, chunks: tuple = (), sampled: int | None = None) -> float:
        """One step: `decodes` requests decoding with `decode_context` cached tokens between them (decode_context():
        each capped at its model's sliding windows), prefill chunks as
        (start, n) pairs; `sampled` requests sample a token (default: the decodes plus the chunks)."""
        prefill_tokens = sum(n for _, n in chunks)
        tokens = decodes + prefill_tokens
        if tokens <= 0:
            return 0.0
        rows = decodes + len(chunks) if sampled is None else sampled
        t = (self.fixed_s + self.extra_s(tokens, prefill_tokens > 0) + self.weights_s(tokens, prefill_tokens > 0, rows)
             + self.decode_attention_per_token_s * decode_context + self.sampler_per_row_s * rows)
        scale = self.mha_prefill_ratio if (0 <= self.mha_prefill_above < prefill_tokens
                                           and all(start == 0 for start, _ in chunks)) else 1.0
        for start, n in chunks:
            t += self.prefill_attention_s(start, n, scale)
        if prefill_tokens > 0 and self.prefill_floor_s > t:
            t = self.prefill_floor_s
        return max(t, self.eager_floor_s)


_CACHE: dict = {}  # recent step models, by their inputs (the objects are kept with them, so ids stay theirs)


def step_cost(spec, gpu, weights, kv, tp: int = 1, kv_bytes_per_token: float | None = None,
              enforce_eager: bool = False, dtype_bytes: int = 2, cpu_scale: float = 1.0,
              extra: tuple[float, float] = (0.0, 0.0), fused_decode_max: int = 0,
              logits_at_samples: bool = False, prefill_floor_s: float = 0.0, sglang_moe: bool = False,
              prefill_extra: tuple[float, float, int] = (0.0, 0.0, 0), mha_prefill_above: int = -1) -> StepCost:
    """The step model of one deployment (the same inputs give the same object: its memo of weight times is shared
    by the search's rows and a plan's configurations). `extra`: (seconds per step, seconds per token) an engine's
    implementation adds to the shared model's kernels (sglang_step_extra); `fused_decode_max`: decode-only steps
    of at most that many requests run without it (SGLang --enable-torch-compile's inductor graphs);
    `logits_at_samples`: the lm_head runs only on the rows that sample in a step with a prefill chunk (SGLang);
    `prefill_floor_s`: a step with a prefill chunk takes at least this long (sglang_prefill_floor_s); `sglang_moe`:
    MoE layers as SGLang's fused MoE runs them (throughput.forward_kernels); `prefill_extra`: (seconds per step,
    per token, up to how many tokens) that prefill steps alone add (sglang_prefill_extra); `mha_prefill_above`: an
    MLA model's prefill steps of more tokens than this, with no cached prefix, run decompressed attention
    (sglang_mha_prefill_above; -1 never)."""
    from . import throughput

    override = getattr(throughput, "_CLASS_OVERRIDE", None)  # class constants under evaluation change every rate
    key = (id(spec), id(gpu), id(weights), id(kv), tp, kv_bytes_per_token, enforce_eager, dtype_bytes, id(override),
           cpu_scale, tuple(extra), fused_decode_max, logits_at_samples, prefill_floor_s,
           sglang_moe, tuple(prefill_extra), mha_prefill_above)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is spec and hit[1] is gpu and hit[5] is override:
        return hit[2]
    cost = _build(spec, gpu, weights, kv, tp, kv_bytes_per_token, enforce_eager, dtype_bytes, cpu_scale)
    if any(extra):
        cost = replace(cost, extra_step_s=float(extra[0]), extra_per_token_s=float(extra[1]),
                       fused_decode_max=int(fused_decode_max))
    if logits_at_samples or prefill_floor_s or sglang_moe or any(prefill_extra):
        cost = replace(cost, logits_at_samples=bool(logits_at_samples), prefill_floor_s=float(prefill_floor_s),
                       sglang_moe=bool(sglang_moe), prefill_extra_step_s=float(prefill_extra[0]),
                       prefill_extra_per_token_s=float(prefill_extra[1]),
                       prefill_extra_max_tokens=int(prefill_extra[2]), _weights={})
    if mha_prefill_above >= 0:
        ratio = throughput.mha_attention_flops_per_token(spec) / max(throughput.attention_flops_per_token(spec), 1e-30)
        if ratio != 1.0:
            cost = replace(cost, mha_prefill_above=int(mha_prefill_above), mha_prefill_ratio=float(ratio))
    if len(_CACHE) >= 64:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (spec, gpu, cost, weights, kv, override)
    return cost


def sglang_step_extra(spec, gpu) -> tuple[float, float]:
    """(seconds per step, seconds per token) SGLang's model implementation adds to the shared step model: the eager
    norm chains of engines.sglang.eager_norm_kernels (Gemma 3), each kernel `graph_kernel_s` of GPU time inside a
    CUDA graph (throughput.yaml engines.sglang, fitted on one run: scripts/sglang_speed_report.py fit_graph_kernel)
    plus its bytes at the GPU's bandwidth. (0, 0) for architectures SGLang runs fused."""
    from .engines.sglang import eager_norm_kernels

    kernels, nbytes = eager_norm_kernels(spec)
    if not kernels:
        return 0.0, 0.0
    per_kernel = load("throughput")["engines"]["sglang"]["graph_kernel_s"]
    return kernels * per_kernel, nbytes / gpu_rates(gpu).bandwidth


def sglang_prefill_extra(spec, gpu, max_tokens: int) -> tuple[float, float, int]:
    """(seconds per step, per token, up to how many tokens) SGLang's piecewise prefill graphs add to a prefill step:
    the unfused rotary embedding of engines.sglang.prefill_eager_rope_kernels (Gemma 3), each kernel graph_kernel_s
    (as sglang_step_extra's) plus its bytes at the GPU's bandwidth, in steps the graphs replay (at most max_tokens,
    the largest captured size; a larger prefill runs eager, where the inner torch.compile fuses it)."""
    from .engines.sglang import prefill_eager_rope_kernels

    kernels, nbytes = prefill_eager_rope_kernels(spec)
    if not kernels or max_tokens <= 0:
        return 0.0, 0.0, 0
    per_kernel = load("throughput")["engines"]["sglang"]["graph_kernel_s"]
    return kernels * per_kernel, nbytes / gpu_rates(gpu).bandwidth, int(max_tokens)


def sglang_mha_prefill_above(sglang_est, enforce_eager: bool = False) -> int:
    """The prefill steps SGLang runs an MLA model's attention decompressed in: those of more tokens than this
    (-1: none). DeepSeek's attention picks its forward per batch (srt/models/deepseek_common/
    attention_backend_handler.py in 0.5.14): inside a piecewise prefill graph always the absorbed MLA kernel
    (:76-77, `if is_in_tc_piecewise_cuda_graph(): return AttnForwardMethod.MLA`), outside it, for an extend batch with
    no cached prefix, MHA_ONE_SHOT with fa3, flashinfer or flashmla (:78-102; MHA_ONE_SHOT_SUPPORTED_BACKENDS :14, the
    batch under SGLANG_MAX_KV_CHUNK_CAPACITY, 128k tokens, environ.py:566), which up-projects the latent with
    kv_b_proj and runs per-head attention of qk_nope + qk_rope keys and v_head values
    (attention_forward_methods/forward_mha.py:117-240 forward_normal_prepare, :384-400). The graphs hold steps of up
    to the estimate's prefill_graph_max_tokens (2,048 for MLA models); with CUDA graphs off, every step. Batches with
    a cached prefix (MHA_CHUNKED_KV above the prefix threshold, absorbed MLA below it) keep the absorbed price."""
    if sglang_est is None or getattr(sglang_est, "layout", "") != "mla":
        return -1
    if enforce_eager or getattr(sglang_est, "prefill_graph_max_tokens", 0) <= 0:
        return 0
    return int(sglang_est.prefill_graph_max_tokens)


def sglang_prefill_floor_s(spec) -> float:
    """The CPU's time to run one SGLang prefill (extend) step through its piecewise CUDA graphs (SGLang 0.5.14):
    RadixAttention's op is a split point of the compiled forward (srt/layers/radix_attention.py:156-158,
    `@register_split_op()` on unified_attention_with_output; srt/compilation/backend.py:429-432 split_graph at
    compile_config.split_ops), so the forward is one CUDA graph per stretch between two attention layers, each replayed
    from Python (srt/compilation/cuda_piecewise_backend.py:112-224: the runtime-shape lookup, then
    entry.cudagraph.replay()), with the attention backend's forward_extend run eagerly between them, once per layer.
    The decode graph ("backend=full") replays a whole step at once and has no such per-layer work. A prefill step's GPU
    work cannot run ahead of the CPU that launches it, so a small prefill (a cached prompt's last token, a short
    prompt) takes this long however little the GPU does; a large one hides it behind its kernels. Layers x
    throughput.yaml engines.sglang piecewise_layer_cpu_s, fitted on one run (scripts/sglang_speed_report.py
    fit_piecewise_layer_cpu: the 8B's uncached 16-token prompts; the other models' small prefills are held out)."""
    per_layer = load("throughput")["engines"]["sglang"].get("piecewise_layer_cpu_s", 0.0)
    return per_layer * spec.num_layers


def step_under_rules(gpu_s, tokens, seqs, prefill: bool = False, longest=0, *, floor_s=0.0, launch_s=0.0,
                     graph_max_tokens=None, host_per_seq_s=0.0, graph_max_context=None, eager_s=0.0):
    """One vLLM engine step from its GPU work `gpu_s` (StepCost.step_s: the kernels and the fixed overhead) under
    the engine's rules: at least `floor_s` (StepCost.eager_floor_s: enforce_eager's launches or, on vLLM 0.8-0.10,
    the piecewise graphs' per-layer CPU, vllm_versions.piecewise_decode_floor_s); at least the CPU's launch of the
    forward (`launch_s`, StepCost.launch_s) when the step's `tokens` exceed the largest CUDA graph
    (graph_max_tokens); at least V0's eager forward (eager_s) when the V0 engine runs it eager (a prefill in it, or a
    decode whose `longest` context passes graph_max_context); plus V0's serial host work for each of its `seqs`
    sequences (host_per_seq_s). The rules are EngineConfig's fields of the same names. `gpu_s` and `longest` may be
    arrays over the steps of one batch (a decode stretch). Every vLLM step of the simulation is timed here, and
    `kvcalc plan`'s decode figures are this function's for a pure decode step of the row's batch
    (workload.vllm_decode_step)."""
    floor = floor_s
    if graph_max_tokens is not None and tokens > graph_max_tokens:  # no CUDA graph: the CPU launches the forward
        floor = max(floor, launch_s)
    stretch = getattr(gpu_s, "ndim", 0) or getattr(longest, "ndim", 0)  # arrays over a decode stretch's steps
    if stretch:
        import numpy as np  # the simulation's stretches only: plan's scalar path stays numpy-free
    if graph_max_context is not None:  # V0: a prefill, or a context past max_seq_len_to_capture, runs eager
        if prefill:
            floor = max(floor, eager_s)
        elif getattr(longest, "ndim", 0):
            floor = np.where(longest > graph_max_context, max(floor, eager_s), floor)
        elif longest > graph_max_context:
            floor = max(floor, eager_s)
    if stretch:
        return np.maximum(gpu_s, floor) + host_per_seq_s * seqs
    return max(gpu_s, floor) + host_per_seq_s * seqs


def compiled_launch_s(spec, weights, kv, cpu_scale: float = 1.0) -> float:
    """The CPU's launch of one forward without CUDA graphs under vLLM's default compiled mode (throughput.yaml
    compiled_per_layer_s and its per-format extras), at a host `cpu_scale` times slower than kvcalc's reference,
    plus the MoE layers' own cost. That part is not the host CPU's: Qwen3-30B-A3B's lone prefill moved
    109 -> 99 -> 94 ms over three serve hosts whose launch speed moved 1.67 -> 1.06 -> 0.80x."""
    consts = load("throughput")["engines"]["vllm"]
    extra = consts.get("compiled_per_layer_extra_s", {})
    per_layer = (consts["compiled_per_layer_s"] + extra.get("weights", {}).get(weights.name, 0.0)
                 + extra.get("kv", {}).get(kv.name, 0.0))
    return ((consts["eager_fixed_step_s"] + per_layer * spec.num_layers) * cpu_scale
            + consts.get("eager_per_moe_layer_s", 0.0) * moe_layer_count(spec))


def _build(spec, gpu, weights, kv, tp, kv_bytes_per_token, enforce_eager, dtype_bytes, cpu_scale=1.0) -> StepCost:
    """The step model from a few evaluations of the speed model."""
    kv_pt = kv_bytes_per_token if kv_bytes_per_token is not None \
        else vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp) * tp
    windows = decode_windows(spec, kv, dtype_bytes, tp)
    # decode reads every layer at its full rate per token over what it attends to (decode_windows): with sliding
    # layers the unit kernel is a token every layer reads, a request of context c counts effective_context(c) of them
    kv_read = vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp) * tp if windows else kv_pt
    rates = gpu_rates(gpu)
    one = decode_speed(spec, gpu, "vllm", weights, kv, 1, 0, False, tp, dtype_bytes, kv_bytes_per_token=kv_pt)
    eager = 0.0
    if enforce_eager:  # decode_speed takes the longer of the GPU's work and the CPU's launches: read the floor off it
        e = decode_speed(spec, gpu, "vllm", weights, kv, 1, 0, True, tp, dtype_bytes, kv_bytes_per_token=kv_pt)
        eager = e.step_s if e.step_s > one.step_s else 0.0
    dec = next(k for k in forward_kernels(spec, gpu, weights, kv, 1, kv_read * _PROBE, _PROBE, tp, dtype_bytes, rates)
               if k.name == "attention")
    sampler = next(k for k in one.kernels if k.name == "sampler")
    mem = next(k for k in forward_kernels(spec, gpu, weights, kv, 1, kv_pt * _PROBE, 0.0, tp, dtype_bytes, rates,
                                          prefill=True) if k.name == "attention")
    cmp = next(k for k in forward_kernels(spec, gpu, weights, kv, 1, 0.0, _PROBE, tp, dtype_bytes, rates,
                                          prefill=True) if k.name == "attention")
    unit = replace(mem, memory_s=mem.memory_s / _PROBE, alu_s=mem.alu_s / _PROBE, compute_s=cmp.compute_s / _PROBE)
    # The MoE layers' part is not the host CPU's: Qwen3-30B-A3B's lone prefill moved 109 -> 99 -> 94 ms over three
    # serve hosts whose launch speed moved 1.67 -> 1.06 -> 0.80x (scripts/serve_load_report.py fit_moe_launch).
    launch = compiled_launch_s(spec, weights, kv, cpu_scale)
    return StepCost(spec, gpu, weights, kv, tp, kv_pt, one.fixed_s, eager, dec.time_s / _PROBE,
                    sampler.time_s, unit, launch, windows=windows)
