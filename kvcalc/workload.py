"""A workload in `vllm bench serve` terms and what each plan row serves it at: TTFT, TPOT, ITL, end-to-end latency
(mean, median and the asked percentiles), request and output throughput.

The quantities follow vllm/benchmarks/serve.py: TTFT is the time to a request's first streamed token, TPOT the mean
time per output token after the first ((e2e - ttft) / (output_len - 1)), ITL the gap between streamed tokens, e2e the
request's latency, and the throughputs completed requests and generated tokens over the run's duration.

vLLM rows come from kvcalc/serve_sim.py: a discrete-event simulation of vLLM's V1 scheduler serving the bench run
(token budget, max_num_seqs, chunked prefill after the running decodes, KV blocks and preemption, prefix-cache hits),
each step timed by kvcalc/step_cost.py from the speed model of throughput.py, plus the OpenAI server's per-request
front-end cost (kvcalc/data/serve.yaml). transformers rows keep the lock-step batch of `generate` (hf_bench).
"""

from __future__ import annotations

import math
from typing import Any
from dataclasses import asdict, dataclass, field, replace

from .constants import load
from .engines.hf import hf_cache_bytes
from .errors import UsageError
from .formats import KvFormat, WeightFormat
from .hardware import GpuProfile
from .model import ModelSpec
from .throughput import decode_speed, hf_decode_speed, hf_prefill_s, prefill_s

ASSUMPTIONS = (
    "vLLM: a step-by-step simulation of vLLM's V1 scheduler serving the vllm bench serve run (token budget "
    "max_num_batched_tokens, max_num_seqs, chunked prefill after the running decodes, KV blocks and preemption, "
    "prefix-cache hits, async scheduling), each step timed by the speed model from its prefill tokens, decodes and "
    "their contexts; a step above vLLM's largest CUDA graph (max_cudagraph_capture_size) takes at least the CPU's "
    "launch of the forward",
    "the OpenAI server's front-end cost per request (HTTP, tokenization) is in TTFT and e2e, and its one asyncio loop "
    "serves every request's input and every streamed token first come first served at the CPU cost per engine step, "
    "token and SSE chunk measured on H200 hosts (their median host; vllm serve only)",
    "arrivals as vllm bench makes them: --max-concurrency clients in a closed loop, or gamma gaps at --request-rate "
    "with --burstiness (Poisson at 1), random-dataset lengths (--random-range-ratio, --prefix-len) drawn with --seed, "
    "one client loop sending one request after another (vllm serve only)",
)
DEFAULT_PERCENTILES = (50.0, 99.0)  # vllm bench --metric-percentiles' default is 99; the median is always printed
MAX_PROMPTS = 100_000


@dataclass(frozen=True)
class Workload:
    """A `vllm bench serve` run of the random dataset, in its options' words."""

    input_len: int  # --random-input-len (the shared prefix comes on top, as vllm bench adds it)
    output_len: int  # --random-output-len
    concurrency: int | None = None  # --max-concurrency
    request_rate: float | None = None  # --request-rate; None: inf (every prompt at once, --max-concurrency holds them)
    burst: bool = False  # every request arrives at once and none follows (num_prompts <= max concurrency)
    num_prompts: int | None = None  # --num-prompts; None: default_prompts()
    random_range_ratio: float = 0.0  # --random-range-ratio
    prefix_len: int = 0  # --random-prefix-len
    burstiness: float = 1.0  # --burstiness
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES  # --metric-percentiles
    seed: int = 0  # --seed
    # --dataset-name: "random", or "sharegpt" (input_len / output_len the run's means, the lengths spread as
    # serve_sim.sharegpt_lengths draws them)
    dataset: str = "random"
    # the run is the server's first: vllm bench 0.26 skips its ready check by default (benchmarks/serve.py
    # --ready-check-timeout-sec, default 0), so the first timed request is the server's first and pays its one-time
    # cost (kvcalc/data/serve.yaml first_request_s). False: a server that has served before (the steady state)
    fresh_server: bool = False

    @property
    def context(self) -> int:
        """The longest request: prompt (with the prefix) plus output at the top of the ranged lengths."""
        if self.dataset == "sharegpt":  # vllm bench's ShareGPT filter: prompt plus output at most 2,048 tokens
            from .serve_sim import SHAREGPT_MAX_TOTAL

            return self.prefix_len + SHAREGPT_MAX_TOTAL
        r = self.random_range_ratio
        return self.prefix_len + math.ceil(self.input_len * (1 + r)) + max(math.ceil(self.output_len * (1 + r)), 1)

    def prompts(self) -> int:
        """--num-prompts, else a run long enough to reach the steady state and short enough for `plan`: 4 rounds of
        the concurrency (closed loop; at least 16), 25 s of arrivals (a rate; at least 50), at most 400 (vllm
        bench's own default is 1,000); a burst is one round."""
        if self.num_prompts:
            return self.num_prompts
        if self.burst:
            return self.concurrency or 1
        if self.request_rate is not None:
            return int(min(400, max(50, math.ceil(self.request_rate * 25))))
        return int(min(400, max(16, 4 * (self.concurrency or 1))))

    def check(self, max_model_len: int | None = None) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise UsageError("--input-len and --output-len must be at least 1")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.request_rate is not None and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise UsageError(f"--request-rate must be a positive number of requests/s, got {self.request_rate}")
        if self.num_prompts is not None and not 1 <= self.num_prompts <= MAX_PROMPTS:
            raise UsageError(f"--num-prompts must be 1 to {MAX_PROMPTS:,}, got {self.num_prompts}")
        if not (0 <= self.random_range_ratio < 1):
            raise UsageError(f"--random-range-ratio must be in [0, 1) as vllm bench takes it, got "
                             f"{self.random_range_ratio}")
        if self.prefix_len < 0:
            raise UsageError(f"--prefix-len must be 0 or more, got {self.prefix_len}")
        if not (self.burstiness > 0):
            raise UsageError(f"--burstiness must be positive (1: Poisson), got {self.burstiness}")
        if not self.percentiles or any(not (0 < p <= 100) for p in self.percentiles):
            raise UsageError("--percentiles are numbers in (0, 100], e.g. 50,90,99")
        if max_model_len is not None and self.context > max_model_len:
            raise UsageError(f"the longest request ({self.context:,} tokens: --prefix-len + --input-len + "
                             f"--output-len, ranged by --random-range-ratio) exceeds --max-model-len "
                             f"{max_model_len:,}: vLLM rejects a request whose prompt plus output is longer than "
                             "max_model_len")


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    """--percentiles / vllm bench --metric-percentiles: '50,90,99' -> (50.0, 90.0, 99.0); None: the default."""
    if text is None:
        return DEFAULT_PERCENTILES
    try:
        out = tuple(float(p) for p in str(text).split(",") if p.strip())
    except ValueError:
        raise UsageError(f"--percentiles {str(text)[:40]!r} is not a list of numbers like 50,90,99") from None
    if not out or any(not (0 < p <= 100) or not math.isfinite(p) for p in out):
        raise UsageError("--percentiles are numbers in (0, 100], e.g. 50,90,99")
    return out


@dataclass
class BenchEstimate:
    concurrency: float  # requests in flight the numbers are for (mean over the run for the simulation)
    ttft_s: float  # means, as vllm bench's mean_*_ms
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float  # all requests
    output_tokens_per_s_per_user: float  # one request's output over its e2e latency
    request_throughput: float  # requests/s
    notes: list[str] = field(default_factory=list)
    itl_s: float | None = None
    # vllm bench's median and percentiles in its own keys: median_ttft_ms, p99_ttft_ms, ... (ttft, tpot, itl, e2el)
    percentiles: dict[str, float] = field(default_factory=dict)
    num_prompts: int | None = None
    duration_s: float | None = None
    preemptions: int | None = None
    prefix_hit_tokens: int | None = None
    saturated: bool = False  # a request rate above what the deployment serves: the queue grew over the run
    # vllm serve: the mean TTFT, TPOT and output tok/s at the fastest and slowest host the API loop was measured on
    # (serve.yaml api_loop machine_range; kvcalc's figures are at their median), {} where not computed
    host_cpu_range: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def _finish(wl: Workload, n: float, ttft: float, tpot: float, notes: list[str]) -> BenchEstimate:
    e2e = ttft + (wl.output_len - 1) * tpot
    return BenchEstimate(concurrency=n, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
                         output_tokens_per_s=n * wl.output_len / e2e, output_tokens_per_s_per_user=wl.output_len / e2e,
                         request_throughput=n / e2e, notes=notes)


def frontend_s(entrypoint: str = "serve", gpu: GpuProfile | None = None) -> float:
    """Seconds between the bench client's send and the engine seeing the request (vllm serve: the OpenAI server's
    HTTP handling and tokenization; the LLM class: none). It is the host's CPU work, not the GPU's: a GPU whose speed
    was measured on the project's own host (speed.yaml `measured`: the H200) takes that host's figure; any other GPU
    (gpu None: the project's host) the public hosts' figure, fitted on the speed corpus's lone served prompts.
    kvcalc/data/serve.yaml says where each figure comes from."""
    if entrypoint != "serve":
        return 0.0
    fe = load("serve")["frontend"]
    if gpu is None or gpu.id in load("speed")["measured"] or fe.get("public_hosts_s") is None:
        return float(fe["per_request_s"])
    return float(fe["public_hosts_s"])


def client_send_s(entrypoint: str = "serve") -> float:
    """The bench client's own time per request before its clock starts (vllm bench serve's single asyncio loop;
    kvcalc/data/serve.yaml says where the figure comes from); the LLM class has no client."""
    return float(load("serve")["client"]["per_send_s"]) if entrypoint == "serve" else 0.0


def api_loop(entrypoint: str = "serve", machine: float | None = None) -> dict:
    """serve_sim.Load's fields for vLLM's OpenAI server loop (serve_sim API PATH: one FIFO server for the requests'
    input paths and the streamed tokens; kvcalc/data/serve.yaml api_loop says where each figure comes from), at the
    median measured machine (or `machine`: a multiple of the reference machine's costs); {} for the LLM class, which
    has no server."""
    if entrypoint != "serve":
        return {}
    lp = load("serve")["api_loop"]
    ref, factor = lp["at_reference"], float(lp["machine_factor"] if machine is None else machine)
    return {"api_step_s": ref["step_s"] * factor, "api_out_s": ref["out_s"] * factor,
            "api_chunk_s": ref["chunk_s"] * factor, "api_cpu_s": float(lp["input_s"]) * factor,
            "api_fifo": True, "api_in_parts": int(lp["input_turns"]), "api_part": int(lp["part"])}


def first_request_s(entrypoint: str = "serve") -> float:
    """A fresh OpenAI server's one-time cost on its first request (kvcalc/data/serve.yaml first_request_s); the LLM
    class has no server."""
    return float(load("serve")["frontend"].get("first_request_s", 0.0)) if entrypoint == "serve" else 0.0


def bench_load(wl: Workload, entrypoint: str = "serve", with_api_loop: bool = True, api_servers: int = 1,
               machine: float | None = None):
    """The serve_sim.Load of a workload: with vLLM's OpenAI server loop where `entrypoint` is "serve" and
    `with_api_loop` (False: SGLang, whose tokenizer manager is not measured), over `api_servers` processes
    (--api-server-count)."""
    from .serve_sim import Load

    n = wl.prompts()
    conc = wl.concurrency if (wl.concurrency or wl.request_rate is None) else None
    if wl.burst:
        conc = None
    return Load(wl.input_len, wl.output_len, n, max_concurrency=conc,
                request_rate=wl.request_rate if wl.request_rate is not None else math.inf,
                burstiness=wl.burstiness, random_range_ratio=wl.random_range_ratio, prefix_len=wl.prefix_len,
                seed=wl.seed, client_send_s=client_send_s(entrypoint), dataset=wl.dataset,
                first_request_s=first_request_s(entrypoint) if wl.fresh_server else 0.0,
                api_servers=max(int(api_servers), 1), **(api_loop(entrypoint, machine) if with_api_loop else {}))


def vllm_step_rules(spec: ModelSpec, *, pp: int = 1, enforce_eager: bool = False, vllm_version: str | None = None,
                    est=None, max_model_len: int | None = None) -> tuple[dict, float]:
    """The release's rules on a vLLM step of this deployment, for the simulation (vllm_bench, through
    vllm_step_model) and `plan`'s decode figures (vllm_decode_step) alike: (serve_sim.EngineConfig's fields, the
    piecewise floor in seconds).
    - the piecewise floor: on a V1 release before 0.11 the CPU's per-layer launches of its piecewise CUDA graphs
      (vllm_versions.piecewise_decode_floor_s; 0 with enforce_eager, whose own launch floor the step model holds);
    - graph_max_tokens: the largest step a CUDA graph replays (vllm_graphs.max_graph_tokens of the VllmEstimate
      `est`'s max_num_seqs and max_num_batched_tokens; None without CUDA graphs or without `est`);
    - host_per_seq_s: the V0 engine's serial host work per scheduled sequence per step
      (vllm_versions.serial_host_per_seq_s; 0 for V1);
    - graph_max_context, eager_s: V0's graph rule (vllm_versions.v0_graph_max_context, capped at `max_model_len`)
      and the CPU's launches of the eager forward it runs otherwise (throughput._eager_cpu_s per stage x pp)."""
    from .engines.vllm_graphs import max_graph_tokens
    from .engines.vllm_versions import piecewise_decode_floor_s, serial_host_per_seq_s, v0_graph_max_context

    # a V1 release before 0.11 replays piecewise graphs only: each step's per-layer launches from Python bound it
    piecewise = 0.0 if enforce_eager else piecewise_decode_floor_s(vllm_version, spec.num_layers)
    rules: dict[str, Any] = {"host_per_seq_s": serial_host_per_seq_s(vllm_version)}
    if est is not None and not enforce_eager:
        rules["graph_max_tokens"] = max_graph_tokens(est.max_num_seqs, est.max_num_batched_tokens)
    v0_graphs = None if enforce_eager else v0_graph_max_context(vllm_version)
    if v0_graphs is not None:  # V0: prefill steps and long contexts run eager (vllm_versions.V0_MAX_SEQ_LEN_TO_CAPTURE)
        from .throughput import _eager_cpu_s, moe_layer_count

        e = load("throughput")["engines"]["vllm"]
        rules["graph_max_context"] = min(v0_graphs, max_model_len) if max_model_len else v0_graphs
        rules["eager_s"] = _eager_cpu_s(e, spec.num_layers / pp, moe_layer_count(spec) / pp) * pp
    return rules, piecewise


def vllm_step_model(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, *, tp: int = 1,
                    pp: int = 1, kv_bytes_per_token: float | None = None, enforce_eager: bool = False,
                    dtype_bytes: int = 2, vllm_version: str | None = None, est=None, max_model_len: int | None = None,
                    cost=None):
    """(the step model, its rules, the piecewise floor) the simulation times vLLM's steps with: step_cost.StepCost
    (`cost` to reuse one) with its floor raised to the release's piecewise floor, and vllm_step_rules."""
    from .step_cost import step_cost

    rules, piecewise = vllm_step_rules(spec, pp=pp, enforce_eager=enforce_eager, vllm_version=vllm_version, est=est,
                                       max_model_len=max_model_len)
    cost = cost or step_cost(spec, gpu, weights, kv, tp, kv_bytes_per_token, enforce_eager, dtype_bytes)
    if piecewise > cost.eager_floor_s:
        cost = replace(cost, eager_floor_s=piecewise)
    return cost, rules, piecewise


def vllm_step_notes(vllm_version: str | None, host_per_seq_s: float, piecewise_s: float, step_s: float) -> list[str]:
    """What the release adds to a step, in words: the V0 engine's host work (whenever it is there), the piecewise
    graphs' floor (where the step, `step_s`, stands on it)."""
    notes = []
    if host_per_seq_s:
        notes.append(f"vLLM {vllm_version} runs the V0 engine: its host schedules, prepares inputs and processes "
                     f"outputs per sequence between steps, {host_per_seq_s * 1e3:.2f} ms a sequence in every step "
                     "(vllm#6801; throughput.yaml v0_host_per_seq_s)")
    if piecewise_s > 0 and step_s <= piecewise_s * 1.05:  # the floor is what the step is
        notes.append(f"vLLM {vllm_version} replays piecewise CUDA graphs only (full decode graphs are the default "
                     f"from 0.11.0, vllm#25444): each step waits for the CPU's per-layer launches, at least "
                     f"{piecewise_s * 1e3:.1f} ms here (throughput.yaml piecewise_layer_cpu_s, one public H100 PCIe "
                     "host; a slower host's CPU takes longer)")
    return notes


def vllm_decode_step(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, batch: int, context: int,
                     gpu_step_s: float, *, tp: int = 1, pp: int = 1, kv_bytes_per_token: float | None = None,
                     enforce_eager: bool = False, dtype_bytes: int = 2, vllm_version: str | None = None,
                     est=None) -> tuple[float, list[str]]:
    """(seconds, notes) of one pure decode step of `batch` requests at `context` tokens each on this release, as the
    simulation times it (step_cost.step_under_rules with vllm_step_rules' rules: the piecewise floor, CUDA
    graphs up to the largest captured size, V0's graph rule and its host work per sequence), from the GPU's step
    `gpu_step_s` (throughput.decode_speed's step_s: for pp = 1 the step model's step_s at that batch and context,
    tests/test_serve_sim.py). `kvcalc plan`'s decode tok/s is batch over it; `est`: the row's VllmEstimate."""
    from .step_cost import compiled_launch_s, step_under_rules

    rules, piecewise = vllm_step_rules(spec, pp=pp, enforce_eager=enforce_eager, vllm_version=vllm_version,
                                       est=est if (est is not None and est.layout is not None) else None,
                                       max_model_len=est.max_model_len if est is not None else None)
    # the step model's floors (step_cost._build): enforce_eager's launches are in gpu_step_s already (decode_speed
    # takes the longer of the GPU's work and the CPU's launches), so the floor is the piecewise one
    step = float(step_under_rules(gpu_step_s, batch, batch, False, context, floor_s=piecewise,
                                  launch_s=compiled_launch_s(spec, weights, kv), **rules))
    return step, vllm_step_notes(vllm_version, rules["host_per_seq_s"], piecewise, step)


def vllm_bench(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, wl: Workload, *,
               chunk_tokens: int, slots: int, kv_bytes_per_token: float | None = None, tp: int = 1, pp: int = 1,
               enforce_eager: bool = False, est=None, entrypoint: str = "serve", prefix_caching: bool = True,
               cost=None, dtype_bytes: int = 2, first_token_s: float | None = None,
               vllm_version: str | None = None, async_scheduling: bool | None = None,
               sglang: Any = None, stream_interval: int = 1, sim_out: list | None = None,
               host_range: bool = False) -> BenchEstimate:
    """The workload on vLLM, simulated (kvcalc/serve_sim.py). `est`: the engine's VllmEstimate (num_gpu_blocks,
    block size, layout, max_num_seqs, max_model_len); without it, a pool that holds `slots` requests of the
    workload's longest context and max_num_seqs = slots. `cost`: a step_cost.StepCost to reuse. `first_token_s`:
    the server's per-request front-end cost when the caller has its own figure (default frontend_s(entrypoint, gpu)).
    `vllm_version`: the release served, whose default decides async scheduling (vllm_versions.async_scheduling_default:
    on from 0.14, not with pipeline parallel); `async_scheduling` overrides it (None: the release's; on when no release
    is named). `sglang`: an engines.sglang.SglangEstimate to simulate SGLang's scheduler instead (serve_sim.py
    SGLANG: prefill batches first, decodes wait for them; its pool, chunk, max_prefill_tokens, max_running_requests
    and cuda_graph_max_bs; the overlap scheduler's timing, or the normal loop's where sglang.overlap_schedule is
    False). `stream_interval`: SGLang's --stream-interval (tokens per streamed chunk: the ITL,
    serve_sim.EngineConfig.stream_interval). `host_range`: also simulate the run at the fastest and slowest host the
    API loop was measured on (BenchEstimate.host_cpu_range; vllm serve only). `sim_out`: a list the simulation's
    SimResult is appended to (its per-request arrays, for the validation reports)."""
    from .engines.vllm_versions import async_scheduling_default, reserve_full_prompt_default
    from .serve_sim import EngineConfig, simulate
    from .step_cost import (sglang_mha_prefill_above, sglang_prefill_extra, sglang_prefill_floor_s, sglang_step_extra,
                            step_cost)

    if async_scheduling is None:
        async_scheduling = async_scheduling_default(vllm_version, pp) if vllm_version else True
    reserve_full = reserve_full_prompt_default(vllm_version) if vllm_version else True
    with_est = sglang is None and est is not None and est.layout is not None
    if sglang is None:
        # the step model and the release's rules (piecewise floor, V0's graphs and host work): vllm_step_rules, which
        # plan's decode figures read too (vllm_decode_step)
        cost, rules, piecewise = vllm_step_model(
            spec, gpu, weights, kv, tp=tp, pp=pp, kv_bytes_per_token=kv_bytes_per_token, enforce_eager=enforce_eager,
            dtype_bytes=dtype_bytes, vllm_version=vllm_version, est=est if with_est else None,
            max_model_len=est.max_model_len if with_est else wl.context, cost=cost)
    else:
        # SGLang's model implementation adds its own kernels where it runs a norm as an eager chain
        # (step_cost.sglang_step_extra: Gemma 3)
        rules, piecewise = {}, 0.0
        cost = cost or step_cost(spec, gpu, weights, kv, tp, kv_bytes_per_token, enforce_eager, dtype_bytes,
                                 extra=sglang_step_extra(spec, gpu),
                                 fused_decode_max=getattr(sglang, "fused_decode_max_bs", 0),
                                 logits_at_samples=True, sglang_moe=True,
                                 prefill_floor_s=sglang_prefill_floor_s(spec) if (
                                     not enforce_eager and sglang.prefill_graph_max_tokens > 0) else 0.0,
                                 prefill_extra=sglang_prefill_extra(spec, gpu, sglang.prefill_graph_max_tokens)
                                 if not enforce_eager else (0.0, 0.0, 0),
                                 mha_prefill_above=sglang_mha_prefill_above(sglang, enforce_eager))
    if sglang is not None:
        # the radix cache matches and holds prefixes in pages of page_size tokens (1 by default: a cached prompt's
        # request prefills its last token only, the H200 logs' "#new-token: 1, #cached-token: 1023";
        # mem_cache/radix_cache.py match_prefix pages by page_size in 0.5.14)
        bs = max(1, int(getattr(sglang, "page_size", 16) or 1))
        # decode batches up to cuda_graph_max_bs replay a CUDA graph; prefill (extend) batches too, up to the
        # release's piecewise graphs (0.5.14: to 8,192 tokens), else they run eager
        graphs = None if enforce_eager else max(sglang.cuda_graph_max_bs, sglang.prefill_graph_max_tokens, 1)
        # the overlap scheduler (event_loop_overlap) builds step k+1 before it processes step k's result: async
        # scheduling's cutoff and the result lag; its normal loop (--disable-overlap-schedule, or a configuration
        # SGLang switches it off for: engines/sglang.overlap_off) neither (serve_sim NORMAL LOOP)
        overlap = bool(getattr(sglang, "overlap_schedule", True))
        cfg = EngineConfig(max(sglang.chunked_prefill_size, 1) if sglang.chunked_prefill_size > 0 else 1 << 30,
                           max(1, sglang.max_running_requests),
                           # a pool short of one request: the row does not fit; simulate one request's worth
                           max(sglang.max_total_num_tokens // bs, -(-wl.context // bs)) + 1, bs,
                           max(wl.context, sglang.context_len), None, prefix_caching, async_scheduling=overlap,
                           graph_max_tokens=graphs, prefill_first=True,
                           max_prefill_tokens=sglang.max_prefill_tokens, stream_interval=stream_interval,
                           result_lag=overlap)
    elif with_est:
        cfg = EngineConfig(est.max_num_batched_tokens, est.max_num_seqs, est.num_gpu_blocks, est.layout.block_size,
                           est.max_model_len, est.layout.blocks_per_request, prefix_caching,
                           async_scheduling=async_scheduling, reserve_full_prompt=reserve_full, **rules)
    else:
        bs = 16
        per = -(-wl.context // bs)
        cfg = EngineConfig(chunk_tokens, max(1, slots), max(1, slots) * per + 1, bs, wl.context, None, prefix_caching,
                           async_scheduling=async_scheduling, reserve_full_prompt=reserve_full, **rules)
    # vLLM's OpenAI server loop (serve.yaml api_loop, measured on it); SGLang's tokenizer manager is unmeasured
    load = bench_load(wl, entrypoint, with_api_loop=sglang is None)
    if sglang is not None:
        # launch_server sends its own warm-up request before it reports ready (the H200 logs: a 6-token prefill, then
        # "The server is fired up and ready to roll!"), so a fresh server's first request pays no one-time cost there.
        # sglang.bench_serving sends its first prompt once before the run (--warmup-requests, default 1; 0.5.14
        # bench_serving.py:1325-1398: test_request = input_requests[0]) and flushes nothing (/flush_cache only with
        # --flush-cache), so the radix cache holds that prompt when the run starts: the run's first request prefills
        # its last token only (the H200 runs' logs: "#new-token: 1, #cached-token: 1023")
        load = replace(load, first_request_s=0.0, ready_check=prefix_caching)
    front = frontend_s(entrypoint, gpu) if first_token_s is None else first_token_s
    res = simulate(cost, cfg, load, front)
    if sim_out is not None:
        sim_out.append(res)
    m = res.metrics(wl.percentiles)
    notes = []
    if sglang is not None and wl.fresh_server and (load.max_concurrency or load.num_prompts) > 1:
        notes.append("a fresh SGLang server: its first wave of concurrent prompts waits for first-use work the "
                     "server's own warm-up does not cover (the first batch of new shapes); on the H200 it took the "
                     "first request 156-613 ms over a warm server's by model (docs/validation/sglang.md, warm rerun). "
                     "Not in these figures: time a warm-up pass first")
    if sglang is None:  # the floor's note where the step is what the floor is
        notes += vllm_step_notes(vllm_version, cfg.host_per_seq_s, piecewise, m["median_tpot_ms"] / 1e3)
    if pp > 1:
        notes.append("pipeline parallel: the simulation times each step as one GPU's (no stage overlap modelled)")
    if res.preemptions:
        notes.append(f"the KV cache ran dry: {res.preemptions} preemptions (each request recomputes its prompt and "
                     "output so far)")
    held = min(cfg.max_num_seqs, (cfg.num_blocks - 1) // max(1, -(-wl.context // cfg.block_size)))
    want = load.max_concurrency or load.num_prompts
    if want > held:
        notes.append(f"{want} requests in flight exceed the {held} vLLM holds at once at this context: the rest "
                     "wait in its queue (their wait is in the TTFT)")
    saturated = False
    if math.isfinite(load.request_rate) and load.num_prompts >= 8:
        # a queue that grows over the run: the last quarter of the requests waits far longer than the second
        q = load.num_prompts // 4
        early, late = float(res.ttft_s[q:2 * q].mean()), float(res.ttft_s[-q:].mean())
        saturated = late > 2 * early + 0.5
        if saturated:
            notes.append(f"request rate {load.request_rate:g}/s is more than this deployment serves: the queue grows "
                         f"over the run (first token after {early:.2f} s in the second quarter, {late:.2f} s in the "
                         "last); the figures grow with --num-prompts")
    host = host_cpu_range(cost, cfg, load, front, m, res, wl.percentiles, entrypoint) \
        if host_range and sglang is None and load.api_fifo else {}
    t, o = host.get("mean_ttft_ms", (0, 0)), host.get("mean_tpot_ms", (0, 0))
    if t[1] > 1.2 * t[0] or o[1] > 1.1 * o[0]:  # the host's Python speed moves the answer: say by how much
        notes.append(f"the API server's loop is busy at this load: with the loop's costs of the fastest and slowest "
                     f"H200 hosts measured, mean TTFT {t[0]:,.0f}-{t[1]:,.0f} ms and TPOT {o[0]:.1f}-{o[1]:.1f} ms "
                     "(these figures are at their median host; a host's Python speed is not known before it runs)")
    e2e = m["mean_e2el_ms"] / 1e3
    in_flight = float((res.e2e_s).sum() / res.duration_s)  # Little's law over the run
    pct = {k: v for k, v in m.items() if k.startswith(("median_", "p", "std_")) and k.endswith("_ms")}
    return BenchEstimate(
        concurrency=round(in_flight, 2), ttft_s=m["mean_ttft_ms"] / 1e3, tpot_s=m["mean_tpot_ms"] / 1e3, e2e_s=e2e,
        output_tokens_per_s=m["output_throughput"], output_tokens_per_s_per_user=float(
            (res.output_lens / res.e2e_s).mean()), request_throughput=m["request_throughput"], notes=notes,
        itl_s=m["mean_itl_ms"] / 1e3, percentiles=pct, num_prompts=load.num_prompts, duration_s=res.duration_s,
        preemptions=res.preemptions, prefix_hit_tokens=res.prefix_hit_tokens, saturated=saturated,
        host_cpu_range=host)


HOST_RANGE_KEYS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput")


def host_cpu_range(cost, cfg, sim_load, front: float, metrics: dict, res, percentiles,
                   entrypoint: str = "serve") -> dict:
    """BenchEstimate.host_cpu_range: the run simulated again with the API loop's costs of the fastest and slowest
    host measured (serve.yaml api_loop machine_range), low and high of each figure. The loop's share of the run (its
    CPU over the run's span) decides whether that is worth two more simulations: below a quarter the loop is idle
    enough that the host's speed moves nothing, and the range is the point."""
    from .serve_sim import simulate

    machines = [float(x) for x in load("serve")["api_loop"]["machine_range"]]
    tokens = int(res.output_lens.sum())
    busy = (res.steps * sim_load.api_step_s + tokens * sim_load.api_out_s
            + (tokens - res.merged_tokens) * sim_load.api_chunk_s) / max(res.duration_s, 1e-9)
    ends = [metrics] if busy < 0.25 else [
        simulate(cost, cfg, replace(sim_load, **api_loop(entrypoint, f)), front).metrics(percentiles) for f in machines]
    return {"machines": machines, "loop_busy": round(busy, 3),
            **{key: [min(e[key] for e in ends), max(e[key] for e in ends)] for key in HOST_RANGE_KEYS}}


def closed_form_bench(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, wl: Workload, *,
                      chunk_tokens: int, slots: int, kv_bytes_per_token: float | None = None, tp: int = 1,
                      pp: int = 1, enforce_eager: bool = False, dtype_bytes: int = 2,
                      vllm_version: str | None = None) -> BenchEstimate:
    """A closed form of the workload, for `kvcalc calibrate --bench`'s fit (which evaluates the model thousands of
    times): exact where the simulation reduces to it (a lone prompt's prefill, decode steps with no prefill in them:
    tests/test_serve_sim.py), coarse under load (TTFT = one prefill, the other requests' prefills spread over TPOT;
    a burst's i-th prompt waits for the i-1 before it; Little's law for a rate). `plan` and every surface show
    vllm_bench, the simulation. `vllm_version`: the release's rules on each decode step (vllm_decode_step, as the
    simulation applies them: the piecewise floor of 0.8-0.10, V0's host work per sequence and its eager forward past
    max_seq_len_to_capture)."""
    notes: list[str] = []
    slots = max(1, slots)
    prefill = prefill_s(spec, gpu, weights, kv, wl.input_len, chunk_tokens, tp, dtype_bytes=dtype_bytes,
                        kv_bytes_per_token=kv_bytes_per_token, enforce_eager=enforce_eager)

    # the mean decode step over the output's positions (a sliding or chunked layer's read averaged over them:
    # throughput.mean_effective_context)
    positions = (wl.input_len + 1, wl.input_len + wl.output_len - 1) if wl.output_len > 1 else None

    def mean_step(n: int) -> float:
        """The mean decode step of n requests: the GPU's at the mean context, under the release's rules as the
        simulation applies them (vllm_decode_step: the piecewise floor, V0's graph rule and host work)."""
        mid = wl.input_len + wl.output_len / 2
        gpu_s = decode_speed(spec, gpu, "vllm", weights, kv, n, mid, enforce_eager, tp, dtype_bytes, pp=pp,
                             kv_bytes_per_token=kv_bytes_per_token, positions=positions).step_s
        return vllm_decode_step(spec, gpu, weights, kv, n, mid, gpu_s, tp=tp, pp=pp,
                                kv_bytes_per_token=kv_bytes_per_token, enforce_eager=enforce_eager,
                                dtype_bytes=dtype_bytes, vllm_version=vllm_version)[0]

    def at(n: int) -> tuple[float, float]:
        step = mean_step(n)
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
            step = mean_step(n)
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
             dtype_bytes: int = 2, host_scale: float = 1.0) -> BenchEstimate:
    """The workload on transformers' generate: one batch of `concurrency` prompts, prefilled together, then decoded
    in lock-step. A quantized cache keeps the newest tokens in a full-precision residual that empties each time it
    fills, so the bytes a step reads depend on where the output stands: TPOT averages the step over the output.
    host_scale: the host's speed against kvcalc's reference host (throughput.hf_host_scale)."""
    n = wl.concurrency or 1
    ttft = hf_prefill_s(spec, gpu, weights, kv, wl.input_len, n, dtype_bytes, host_scale)
    samples = min(wl.output_len - 1, 64)
    total = 0.0
    for i in range(max(samples, 1)):
        k = 1 + (i * max(wl.output_len - 2, 0)) // max(samples - 1, 1) if samples > 1 else 1
        tokens = wl.input_len + k
        read = hf_cache_bytes(spec.layers, n, tokens, wl.input_len, kv, dtype_bytes)
        total += hf_decode_speed(spec, gpu, weights, kv, n, tokens, dtype_bytes, kv_read_bytes=read,
                                 host_scale=host_scale).step_s
    tpot = total / max(samples, 1)
    return _finish(wl, n, ttft, tpot, [])
