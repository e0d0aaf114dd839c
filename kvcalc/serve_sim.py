"""A discrete-event simulation of vLLM's V1 engine serving a `vllm bench serve` run, step by step.

Engine rules (vLLM 0.26.0, vllm/v1/core/sched/scheduler.py unless named):
- `schedule` (:425) fills a token budget of max_num_batched_tokens (:445). RUNNING requests first, in order (:471):
  each asks num_tokens - num_computed_tokens (:502), one for a decode, the rest of its prompt for a prefill, capped by
  what is left of the budget (:509). Then, only when nothing was preempted (:666), WAITING requests in arrival order
  while budget is left and fewer than max_num_seqs run (:669-673); each gets min(rest of its prompt, budget) (:841,
  :875): chunked prefill after the running decodes.
- KV blocks (v1/core/kv_cache_manager.py `allocate_slots`): a request holds the blocks of its computed tokens plus the
  ones scheduled. A waiting request is admitted only if the blocks of its whole prompt are free
  (`scheduler_reserve_full_isl`, config/scheduler.py:140, default True; kv_cache_manager.py:413-426), else
  admission stops (:946). Releases before vllm#37307 admit it when the blocks of the chunk it is scheduled are free
  (0.8.5: scheduler.py:362-369, kv_cache_manager.py:220-233): EngineConfig.reserve_full_prompt False. A running request that finds no block preempts the last running request (FCFS:
  `self.running.pop()`, :601), itself last; a preempted request loses its computed tokens (:1225) and goes back to
  the waiting queue's front, to recompute prompt and output so far.
- Prefix caching (on by default): a prompt's leading full blocks that another request computed are hits
  (`get_computed_blocks`, at most num_tokens - 1 tokens); blocks are cached as they are scheduled, so a request
  scheduled after the first one in the same step already hits. The shared prefix (--random-prefix-len) is computed
  by the first request that carries it. With --ready-check-timeout-sec > 0 (default 0, skipped:
  benchmarks/serve.py:1821-1826) vllm bench sends its first prompt once before the run (:824-862), so that prompt and
  the prefix are cached when the run starts.
- Async scheduling (default on, config/vllm.py:1059-1107): step k+1 is scheduled while step k runs, so a request that
  reaches the engine during step k is scheduled into step k+2 at the earliest, and the blocks a request frees at the
  end of step k are free for step k+2.
- One token per decode per step, streamed in its own chunk (stream_interval 1, config/scheduler.py:163;
  EngineConfig.stream_interval groups them as SGLang's --stream-interval does).

Client rules (vllm/benchmarks/serve.py, lib/endpoint_request_func.py):
- arrivals (get_request, :393-504): --request-rate inf sends every prompt at once; else gamma gaps of shape
  --burstiness and scale 1/(rate x burstiness) (Poisson at burstiness 1), their cumulative sum rescaled so the last
  is at num_prompts / rate (:470-487). --max-concurrency holds at most that many requests in flight (a semaphore,
  :962-970); a request's clock starts when it gets a slot (endpoint_request_func.py:197). The client is one asyncio
  loop: each request costs it `client_send_s` before its clock starts, so prompts released at one instant go out one
  after another and a closed loop's next prompt follows a completion by that much.
- TTFT is the first streamed chunk's time; ITL each later chunk's gap; e2e the last chunk's time; TPOT = (e2e - TTFT)
  / (output - 1) per request (serve.py:607-611); duration from the first send to the last request's end; request and
  output throughput over it (:762-770). Percentiles with numpy.percentile (linear).

Lengths as the random dataset draws them (benchmarks/datasets/utils.py get_sampling_params): integers uniform in
[floor(L (1 - r)), ceil(L (1 + r))] for --random-range-ratio r, the shared prefix prepended to every prompt.

Step time: kvcalc/step_cost.py (the speed model of throughput.py); a step of more tokens than `graph_max_tokens`
runs without CUDA graphs (vllm/v1/cudagraph_dispatcher.py:274-281) and takes at least the CPU's launch of the
forward (StepCost.launch_s). Front-end: `frontend_s` per request between the
client's send and the engine (HTTP, tokenization), from workload.frontend_s; `Load.api_cpu_s` of it is the API
server's own asyncio loop, which round-robins the requests it holds (each await hands the loop to the next), so the
requests that come while it is busy leave together at the end of its busy period: a burst of N reaches the engine
N x api_cpu_s after it was sent, except its first request, which finds the loop idle and reaches the engine alone
after frontend_s (as the real server lets it through, ~0.2 s ahead of the rest at 128 clients).

API LOOP (Load.api_out_s / api_chunk_s > 0 without api_fifo; tried on issue 25's H200 runs and not kept, nothing
uses it: docs/validation/README.md "Under load"): vLLM 0.26's OpenAI server runs one asyncio loop for the arriving
requests and the streamed outputs alike (v1/engine/async_llm.py:656-707 `output_handler`: OutputProcessor.process_outputs
over each engine step's outputs, in chunks of VLLM_V1_OUTPUT_PROC_CHUNK_SIZE with `await asyncio.sleep(0)` between;
each request's stream generator, entrypoints/openai/completion/serving.py:282-470, writes one SSE chunk per
RequestOutput it gets; v1/engine/output_processor.py:45-86 RequestOutputCollector merges the deltas that come while
its consumer has not taken the last one). Here it is one first-come-first-served server: a request's input job
(api_cpu_s; the lead of a burst leaves when it ends, the requests that come during an input busy period leave
together at its end, as above), each step's output job (api_out_s per request in the step, at the step's end) and
the SSE chunks it wakes (api_chunk_s each; a request with a chunk still queued gets no new one: its token rides in
it). The client's TTFT, ITL and e2e are the chunks' times; a closed loop's next prompt follows the last chunk. The
front end's other part (frontend_s less the loop's shares) is a latency before the engine, so a lone request's TTFT
is as without the loop.

API PATH (Load.api_fifo with the API LOOP's costs; vLLM's `vllm serve` rows take it from workload.api_loop, the
costs kvcalc/data/serve.yaml api_loop measured on the H200 hosts: docs/validation/README.md "Runs l-q"; a first trial
with costs fitted on TTFTs, 2026-12-03, was not kept): the same loop with vLLM 0.26's own order of work. A
request's input job (api_cpu_s, in api_in_parts pieces, each queued behind what the loop holds when it resumes: the
awaits of its path, each a wait for the loop's backlog) ends with its prompt leaving for the engine, each prompt on
its own (no busy period). Each step output the loop takes in costs api_step_s once. The engine's step outputs reach the
loop's reader (v1/engine/core_client.py:1005-1059, an asyncio task that decodes each ZMQ frame into an asyncio.Queue)
and output_handler (v1/engine/async_llm.py:656-707) takes every output queued by its turn one after another without
yielding (asyncio.Queue.get returns at once while items are queued), each in parts of VLLM_V1_OUTPUT_PROC_CHUNK_SIZE
(128, envs.py:1357) with `await asyncio.sleep(0)` between parts, so the stream generators a part woke write their
chunks before the next part: a request's tokens merge only while the handler runs through several outputs of one
part size without yielding (a step of at most 128 requests). `api_servers` (--api-server-count) runs one such loop per
process, requests spread over them in turn; a lone request's TTFT is as without the loop.

SGLANG (EngineConfig.prefill_first; sglang 0.5.7, python/sglang/srt/managers/): `get_next_batch_to_run`
(scheduler.py:1778-1859) builds a prefill batch first (`get_new_batch_prefill`, :1861) and runs it when it forms ("Run
prefill first if possible", :1833-1835); the running requests decode only in a step where no prefill batch forms
(:1836-1841). Prefill and decode share a step only with --enable-mixed-chunk (:2049-2065, off by default). A prefill
batch (schedule_policy.py PrefillAdder, :316-668) continues the chunked request first (`add_chunked_req`, :450), then
takes waiting requests first come, first served while fewer than max_running_requests run (scheduler.py:1953-1956):
a prompt that fits what is left of chunked_prefill_size goes whole, the first one that does not is cut to it and
becomes the chunked request (:620-660), and a request stops the batch once the batch's input reaches
max_prefill_tokens (:598, :617). The overlap scheduler (`event_loop_overlap`, scheduler.py:1099-1150, on by default)
schedules step k+1 while step k runs and processes step k's result after launching k+1: async_scheduling's timing.

RESULT LAG (EngineConfig.result_lag, SGLang only; sglang 0.5.14 managers/scheduler.py:1546-1592 `event_loop_overlap`:
recv_requests, get_next_batch_to_run, run_batch (the launch), then pop_and_process of the batch before; consecutive
prefills overlap too, SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP being False by default, environ.py:315 and
:1594-1612). Two timings follow, each from the loop's order, nothing fitted:
- a step's outputs are processed after the next step's launch: its first tokens leave at the later of its end and
  the end of that launch (its start + its CPU time + the next step's CPU time), and the second token's gap is counted
  from there. Later tokens' times are left as they are (a decode step's successor replays a graph: no CPU time to
  wait for);
- requests that finish at step k are only known to have finished when step k's result is processed, after step k+1
  was built: when the last running requests finish at a decode step, the GPU runs one more decode step of them (its
  tokens dropped) before anything that arrived meanwhile, and the requests that reach the engine during that step are
  received after it was launched. Where some requests keep running the finished ones ride in the next decode batch;
  that larger batch is not priced.

NORMAL LOOP (SGLang with the overlap scheduler off: --disable-overlap-schedule, or a configuration SGLang switches it
off for, engines/sglang.overlap_off; EngineConfig.result_lag and async_scheduling both False). sglang 0.5.14
managers/scheduler.py:1505-1532 `event_loop_normal`: recv_requests, get_next_batch_to_run, run_batch, then
process_batch_result of that same batch, whose token copy waits for the GPU, before the loop comes round again. So a
step's tokens leave at its end (no result lag), requests that finish at step k are out of step k+1 (no extra decode
step), the KV they free is free for step k+1, and a request that reaches the engine during step k is received before
step k+1 is built. Each step's CPU work (its launch: the piecewise prefill floor, an eager forward's launch) starts
once the step before has ended, serial with the GPU's: that is how every step is timed here in either loop (a step
takes the longer of its GPU time and its launch from the end of the step before, and the per-step overhead fixed_s
is in every step), so the normal loop's steps take what the overlap loop's take. kvcalc has no figure for the
scheduler's own CPU time between steps (recv_requests, get_next_batch_to_run, process_batch_result), which the
normal loop adds to every step and the overlap loop hides: it is not in these times, so a graph-replayed decode's TPOT
is the overlap loop's.

Pure decode stretches (nothing to admit, nothing prefilling) are advanced in one vector operation up to the next
completion, arrival or block shortage, so 1,000 requests take a fraction of a second.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .step_cost import step_under_rules
from .units import ceil_div

DEFAULT_PERCENTILES = (50.0, 99.0)
_IN1, _IN2, _OUT, _CHUNKS, _FLUSH = 0, 1, 2, 3, 4  # the API loop's jobs (API LOOP in the module doc)


@dataclass(frozen=True)
class EngineConfig:
    max_num_batched_tokens: int
    max_num_seqs: int
    num_blocks: int  # num_gpu_blocks; the null block is held back
    block_size: int
    max_model_len: int
    blocks_per_request: object = None  # callable(tokens) -> blocks of all KV groups (None: ceil(tokens / block))
    prefix_caching: bool = True
    async_scheduling: bool = True
    long_prefill_token_threshold: int = 0
    graph_max_tokens: int | None = None  # the largest step a CUDA graph replays (None: every step, or none: eager)
    # SGLang's scheduler (see SGLANG below): a step is a prefill batch whenever one can form, decodes wait for it
    prefill_first: bool = False
    max_prefill_tokens: int | None = None  # SGLang --max-prefill-tokens: a prefill batch's input budget (None: none)
    # --stream-interval: tokens per streamed chunk after the first (SGLang scheduler_output_processor_mixin.py:894-903
    # in 0.5.7: with an interval s > 1 a request's output goes out at its 1st, (1+s)-th, (1+2s)-th ... token and at its
    # last); it spaces the chunks (ITL), not the tokens (TTFT, TPOT, e2e)
    stream_interval: int = 1
    # SGLang's overlap loop (RESULT LAG in the module doc): step k+1 is built before step k's results are processed;
    # its normal loop (NORMAL LOOP) sets this and async_scheduling False
    result_lag: bool = False
    # admission of a waiting request: the blocks of its whole prompt must be free (vLLM's scheduler_reserve_full_isl,
    # default from the release in vllm_versions.reserve_full_prompt_default) or only those of the chunk it is
    # scheduled (the earlier releases: v1/core/sched/scheduler.py allocate_slots(request, num_new_tokens ...) in 0.8.5)
    reserve_full_prompt: bool = True
    # the host's serial work per scheduled request per step (vllm_versions.serial_host_per_seq_s: the V0 engine's
    # scheduling, input preparation, sampler bookkeeping and output processing run between steps, per sequence,
    # while the GPU waits; 0 for V1, whose per-request work overlaps or is not modelled)
    host_per_seq_s: float = 0.0
    # the V0 engine's graph rule (vllm_versions.V0_MAX_SEQ_LEN_TO_CAPTURE): a step replays a CUDA graph only when it
    # is decode-only and every request's context is at most graph_max_context; any other step runs eager and takes
    # at least eager_s (the CPU's launches of one eager forward). None: V1's rule alone (graph_max_tokens)
    graph_max_context: int | None = None
    eager_s: float = 0.0


@dataclass(frozen=True)
class Load:
    """A `vllm bench serve` run of the random dataset, in its options' terms."""

    input_len: int
    output_len: int
    num_prompts: int
    max_concurrency: int | None = None  # --max-concurrency (None: unlimited)
    request_rate: float = math.inf  # --request-rate
    burstiness: float = 1.0  # --burstiness
    random_range_ratio: float = 0.0  # --random-range-ratio
    prefix_len: int = 0  # --random-prefix-len
    seed: int = 0  # --seed
    ready_check: bool = False  # --ready-check-timeout-sec > 0: the first prompt is sent once before the run
    # a fresh server's first request: its one-time cost before the engine sees it (0: a warm server, or the ready
    # check's prompt took it); the run's first request pays it, in its TTFT
    first_request_s: float = 0.0
    client_send_s: float = 0.0  # the bench client's own time to get one request out (one asyncio loop)
    api_cpu_s: float = 0.0  # the API server's loop time per request, shared among the requests it holds at once
    # the API server's loop as one FIFO server shared by arriving requests and streamed outputs (API LOOP in the module
    # doc; both 0: the busy-period rule above): its time per request output of an engine step (OutputProcessor) and
    # per SSE chunk it writes (the request's stream generator); with either set, api_cpu_s is a request's input job
    api_out_s: float = 0.0
    api_chunk_s: float = 0.0
    api_step_s: float = 0.0  # the loop's fixed time per engine step it takes in (the frame's decode, the stat loggers)
    # FIFO (API PATH in the module doc): each prompt leaves for the engine when its own input job ends (no busy
    # period), output_handler takes the step outputs queued by its turn in parts of api_part (VLLM_V1_OUTPUT_PROC_
    # CHUNK_SIZE, envs.py), and --api-server-count processes each run their own loop over their share of the requests
    api_fifo: bool = False
    api_servers: int = 1
    api_part: int = 128
    api_in_parts: int = 1  # FIFO: the input job's pieces, each queued behind what the loop holds when it resumes
    # "sharegpt": the lengths spread as a chat dataset's do (sharegpt_lengths) around input_len / output_len, the
    # run's means; "random": the random dataset's draw (random_range_ratio)
    dataset: str = "random"


@dataclass
class SimResult:
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    itl_s: np.ndarray
    output_lens: np.ndarray
    input_lens: np.ndarray
    duration_s: float
    steps: int
    preemptions: int
    prefix_hit_tokens: int
    notes: list[str] = field(default_factory=list)
    send_s: np.ndarray | None = None  # when each request got its client slot (the client's clock starts)
    merged_tokens: int = 0  # API LOOP: tokens that rode in another token's SSE chunk (a consumer lagged)
    arrive_s: np.ndarray | None = None  # when each request reached the engine (its front end and API wait behind it)

    @property
    def tpot_s(self) -> np.ndarray:
        many = self.output_lens > 1
        return (self.e2e_s[many] - self.ttft_s[many]) / (self.output_lens[many] - 1)

    def metrics(self, percentiles=DEFAULT_PERCENTILES) -> dict:
        """vllm bench serve's figures: mean/median/std and percentiles (ms) of ttft, tpot, itl, e2el, throughputs."""
        out = {"completed": int(len(self.e2e_s)), "duration_s": self.duration_s,
               "request_throughput": len(self.e2e_s) / self.duration_s,
               "output_throughput": float(self.output_lens.sum()) / self.duration_s,
               "total_input_tokens": int(self.input_lens.sum()), "total_output_tokens": int(self.output_lens.sum())}
        for name, xs in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("itl", self.itl_s), ("e2el", self.e2e_s)):
            xs = xs if len(xs) else np.zeros(1)
            out[f"mean_{name}_ms"] = float(np.mean(xs)) * 1e3
            out[f"median_{name}_ms"] = float(np.median(xs)) * 1e3
            out[f"std_{name}_ms"] = float(np.std(xs)) * 1e3
            for p in percentiles:
                out[f"p{p:g}_{name}_ms"] = float(np.percentile(xs, p)) * 1e3
        return out


SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL, SHAREGPT_MIN = 1024, 2048, 4


def sharegpt_lengths(load: Load) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of a ShareGPT run whose means are load.input_len / output_len. vllm bench takes each
    conversation's first turn and its answer's token count as the output length (benchmarks/benchmark_dataset.py
    ShareGPTDataset.sample in 0.8.5, with is_valid_sequence: at least 4 tokens each, a prompt of at most 1,024, prompt
    plus output at most 2,048). The conversations themselves are not in kvcalc, so the shape is an assumption: the
    answers exponential (the maximum-entropy spread of a positive length with a given mean), truncated by that filter
    and rescaled to the run's stated mean; the prompts at their mean (io.net's Qwen2.5-7B at 1 request/s has a TTFT
    spread of std 3.0 ms, p99 26.9 ms, which the mean prompt gives: 3.2 / 27.5 ms, exponential prompts 4.2 / 34.6 ms).
    What it changes is the run's tail: the longest of a few hundred answers is ~6x the mean, and a run's duration
    (its throughput's denominator) ends with it."""
    rng = np.random.default_rng(load.seed)
    prompt = min(max(SHAREGPT_MIN, load.input_len), SHAREGPT_MAX_PROMPT)
    top = max(SHAREGPT_MIN, SHAREGPT_MAX_TOTAL - prompt)
    outs: list[int] = []
    while len(outs) < load.num_prompts:
        o = max(SHAREGPT_MIN, int(round(rng.exponential(load.output_len))))
        if o <= top:
            outs.append(o)
    out = np.clip(np.round(np.array(outs) * load.output_len / np.mean(outs)), SHAREGPT_MIN, top)
    return np.full(load.num_prompts, prompt + load.prefix_len, dtype=np.int64), out.astype(np.int64)


def sample_lengths(load: Load) -> tuple[np.ndarray, np.ndarray]:
    """Prompt (prefix included) and output lengths as the random dataset draws them (ShareGPT: sharegpt_lengths)."""
    if load.dataset == "sharegpt":
        return sharegpt_lengths(load)
    rng = np.random.default_rng(load.seed)
    r = load.random_range_ratio
    lo, hi = math.floor(load.input_len * (1 - r)), math.ceil(load.input_len * (1 + r))
    olo, ohi = max(math.floor(load.output_len * (1 - r)), 1), max(math.ceil(load.output_len * (1 + r)), 1)
    ins = rng.integers(lo, hi + 1, size=load.num_prompts)
    outs = rng.integers(olo, ohi + 1, size=load.num_prompts)
    return np.maximum(ins + load.prefix_len, 1).astype(np.int64), outs.astype(np.int64)


def planned_sends(load: Load) -> np.ndarray:
    """When get_request releases each prompt (before --max-concurrency holds it back)."""
    n = load.num_prompts
    if not math.isfinite(load.request_rate):
        return np.zeros(n)
    if math.isinf(load.burstiness):
        gaps = np.full(n, 1.0 / load.request_rate)
    else:  # numpy's global generator, seeded with --seed (serve.py:1890), one gamma draw per request in order
        rng = np.random.RandomState(load.seed)
        gaps = rng.gamma(shape=load.burstiness, scale=1.0 / (load.request_rate * load.burstiness), size=n)
    t = np.cumsum(gaps)
    return t * (n / load.request_rate / t[-1]) if t[-1] > 0 else t


def simulate(cost, cfg: EngineConfig, load: Load, frontend_s: float = 0.0, trace: list | None = None) -> SimResult:
    """Run the bench against the engine. `cost`: a step_cost.StepCost (anything with its step_s, weights_s and
    per-token/row attributes). `trace`: a list to append every step to, as vLLM's iteration log counts it
    (start s, seconds, context requests, context tokens, generation requests; a context request is one without an
    output token yet, vllm/v1/utils.py:797)."""
    prompt, out = sample_lengths(load)
    if int((prompt + out).max()) > cfg.max_model_len:  # per request: ShareGPT's longest prompt is not its longest answer
        raise ValueError("a request is longer than max_model_len")
    n = load.num_prompts
    bs = cfg.block_size
    blocks_of = cfg.blocks_per_request or (lambda tokens: ceil_div(tokens, bs))
    kmax = ceil_div(int(prompt.max() + out.max()), bs) + 1  # the longest request's blocks: no table beyond it
    if cfg.blocks_per_request is None:
        table = np.arange(kmax + 1, dtype=np.int64)
    else:  # the layout's admission rule per whole block of tokens (sliding groups cap at their window)
        table = np.array([int(blocks_of(k * bs)) if k else 0 for k in range(kmax + 1)], dtype=np.int64)

    def need(tokens) -> np.ndarray:
        """Blocks of requests holding `tokens` tokens each."""
        return table[np.minimum(-(-np.asarray(tokens, dtype=np.int64) // bs), kmax)]

    table_list = table.tolist()

    def need1(tokens) -> int:
        """need() of one request, without numpy's per-call cost."""
        return table_list[min(-(-int(tokens) // bs), kmax)]

    usable = cfg.num_blocks - 1
    prefix_full = (load.prefix_len // bs) * bs if cfg.prefix_caching else 0
    prefix_blocks = int(need(np.array([prefix_full]))[0]) if prefix_full else 0
    # per request state
    send = planned_sends(load)
    planned = send.copy()
    arrive = np.full(n, np.inf)
    computed = np.zeros(n, dtype=np.int64)
    tokens = prompt.copy()  # prompt + outputs so far
    generated = np.zeros(n, dtype=np.int64)
    held = np.zeros(n, dtype=np.int64)  # blocks held beyond the shared prefix
    first = np.full(n, np.nan)
    last_tok = np.full(n, np.nan)
    si = max(int(cfg.stream_interval), 1)
    last_emit = np.full(n, np.nan)  # stream_interval > 1: when the request's last chunk went out
    shares = np.zeros(n, dtype=bool)  # holds the shared prefix blocks (a hit)
    itls: list[np.ndarray] = []
    limit = load.max_concurrency or n
    next_send = 0  # the next prompt to get a client slot
    in_flight = 0

    client_free = 0.0  # when the client's loop is free to send the next request
    loop_mode = load.api_out_s > 0 or load.api_chunk_s > 0
    if loop_mode and si != 1:
        raise ValueError("the API loop streams vLLM's one token a chunk (stream_interval 1)")
    fifo = loop_mode and load.api_fifo  # each prompt leaves for the engine as its input job ends (no busy period)
    ns = max(int(load.api_servers), 1) if fifo else 1
    srv = np.arange(n) % ns  # the API server process each request's connection lands on (kernel accept spread)
    part_n = max(int(load.api_part), 1)
    heap: list = []  # API LOOP: (enqueued s, order, kind, server, payload)
    loop = {"seq": 0, "merged": 0, "chunks": 0}
    lfree = [0.0] * ns  # when each server's loop is free
    outq = [deque() for _ in range(ns)]  # FIFO: step outputs (step end, requests) output_handler has not taken
    cur: list = [None] * ns  # FIFO: the rest of the step output_handler is part-way through
    woke = [False] * ns  # FIFO: output_handler's next turn is queued on the loop
    yielded = [0.0] * ns  # FIFO: when output_handler last gave the loop up
    chunk_due = np.zeros(n, dtype=bool)  # a chunk of the request is queued on the loop, not yet written
    undelivered = np.zeros(n, dtype=np.int64)  # tokens the loop has taken from the engine, not yet written
    delivered = np.zeros(n, dtype=np.int64)
    c_first = np.full(n, np.nan)  # the client's first and last token times (API LOOP)
    lag = cfg.result_lag and not loop_mode  # RESULT LAG (module doc)
    lag_new = None  # RESULT LAG: the last step's new first tokens, its end, and when its launch ended
    phantom = None  # RESULT LAG: (requests, context) of the decode step the GPU runs for requests that just finished

    def _cpu_of(prefill: bool, tokens_in_step: int) -> float:
        if prefill and getattr(cost, "prefill_floor_s", 0.0):
            return float(cost.prefill_floor_s)
        if cfg.graph_max_tokens is not None and tokens_in_step > cfg.graph_max_tokens:
            return float(getattr(cost, "launch_s", 0.0))
        return 0.0

    def _lag_emit(cpu_next: float) -> None:  # the last step's first tokens leave after the next step's launch
        nonlocal lag_new
        if lag_new is not None:
            ids_new, t_end, launch_end = lag_new
            first[ids_new] = max(t_end, launch_end + cpu_next)
            last_tok[ids_new] = first[ids_new]  # the client's clock: the next token's gap starts here
            if si != 1:
                last_emit[ids_new] = first[ids_new]
            lag_new = None
    c_last = np.full(n, np.nan)
    c_itls: list[np.ndarray] = []
    # the part of the front end that is not the loop's (HTTP transfer, ZMQ hop, the engine core's input thread)
    lat = max(frontend_s - load.api_cpu_s - load.api_step_s - load.api_out_s - load.api_chunk_s, 0.0) if loop_mode \
        else 0.0

    def _push(enq: float, kind: int, s: int, payload) -> None:
        loop["seq"] += 1
        heapq.heappush(heap, (enq, loop["seq"], kind, s, payload))

    deferred: list[int] = []  # requests held by the input busy period
    loop["in_end"] = -math.inf  # when the last request's input work ended

    def _leave(i: int, now: float) -> None:
        arrive[i] = now + lat + (load.first_request_s if i == 0 and not load.ready_check else 0.0)
        _insert(pending, i, arrive)

    def _wake(s: int) -> None:
        """output_handler's next turn on loop s: after the chunks it woke (it yielded to them), for the step it is
        part-way through or the next step output the loop's reader takes in."""
        head = lfree[s] if cur[s] is not None else outq[s][0][0]
        woke[s] = True
        _push(max(head, yielded[s]), _OUT, s, None)

    def _handler(s: int, start: float) -> None:
        """FIFO: output_handler's turn (v1/engine/async_llm.py:656-707). It takes every step output the reader has
        queued by its start, one after another without yielding (asyncio.Queue.get returns at once while items are
        queued), processing each in parts of VLLM_V1_OUTPUT_PROC_CHUNK_SIZE with `await asyncio.sleep(0)` between
        them (the chunks the part woke run first). A request whose collector still holds a token gets no new chunk:
        the new token rides in it (RequestOutputCollector.put merges)."""
        woke[s] = False
        f = start
        new_all = []
        while True:
            if cur[s] is None or not len(cur[s]):
                if outq[s] and outq[s][0][0] <= start:
                    cur[s] = outq[s].popleft()[1]
                    f += load.api_step_s
                else:
                    cur[s] = None
                    break
            x, cur[s] = cur[s][:part_n], cur[s][part_n:]
            f += load.api_out_s * len(x)
            undelivered[x] += 1
            new = x[~chunk_due[x]]
            loop["merged"] += len(x) - len(new)
            if len(new):
                chunk_due[new] = True
                new_all.append(new)
            if len(cur[s]):  # asyncio.sleep(0) before the next part
                break
        lfree[s] = yielded[s] = f
        if new_all:
            _push(f, _CHUNKS, s, np.concatenate(new_all) if len(new_all) > 1 else new_all[0])
        if cur[s] is not None or outq[s]:
            _wake(s)

    def _outputs(te: float, x: np.ndarray) -> None:
        """A step's sampled tokens reach the API servers at the step's end (each server gets its own requests')."""
        if not fifo:
            _push(te, _OUT, 0, x)
            return
        for s in range(ns):
            xs = x if ns == 1 else x[srv[x] == s]
            if len(xs):
                outq[s].append((te, xs))
                if not woke[s]:
                    _wake(s)

    def _run_job() -> None:
        """The loop's next job, first come first served (asyncio's ready queue)."""
        nonlocal in_flight
        enq, _, kind, s, x = heapq.heappop(heap)
        start = max(lfree[s], enq)
        if kind == _IN1 and fifo:  # a request's input work in api_in_parts pieces, each awaited: back of the queue
            i, left = (x, max(int(load.api_in_parts), 1)) if isinstance(x, int) else x
            lfree[s] = start + load.api_cpu_s / max(int(load.api_in_parts), 1)
            if left > 1:
                _push(lfree[s], _IN1, s, (i, left - 1))
            else:  # it leaves for the engine as its input work ends
                _leave(i, lfree[s])
        elif kind == _IN1:  # a request's input work (HTTP body, request model, tokenization, add_request)
            lead = not deferred and loop["in_end"] <= enq  # it finds no other request's input on the loop
            lfree[s] = loop["in_end"] = start + load.api_cpu_s
            if lead:  # it goes through alone, its input done in one go
                _leave(x, lfree[s])
            else:  # it waits for the end of the input busy period (round robin: each await hands the loop on)
                deferred.append(x)
                _push(lfree[s], _FLUSH, s, lfree[s])
        elif kind == _FLUSH:
            lfree[s] = start
            if x == loop["in_end"]:  # no request's input came since: the busy period ends, all it held leave
                for j in deferred:
                    _leave(j, start)
                deferred.clear()
        elif kind == _IN2:  # AsyncLLM.add_request: the request leaves for the engine core
            lfree[s] = start
            _leave(x, start)
        elif kind == _OUT and fifo:
            _handler(s, start)
        elif kind == _OUT:  # output_handler: OutputProcessor.process_outputs over the step's requests
            lfree[s] = start + load.api_step_s + load.api_out_s * len(x)
            undelivered[x] += 1
            new = x[~chunk_due[x]]  # a request whose consumer has not run yet: RequestOutputCollector merges
            loop["merged"] += len(x) - len(new)
            if len(new):
                chunk_due[new] = True
                _push(lfree[s], _CHUNKS, s, new)
        else:  # each woken stream generator writes one SSE chunk with what its collector holds
            times = start + load.api_chunk_s * np.arange(1, len(x) + 1)
            lfree[s] = float(times[-1])
            loop["chunks"] += len(x)
            had = delivered[x] > 0
            c_first[x[~had]] = times[~had]
            if had.any():
                c_itls.append(times[had] - c_last[x[had]])
            c_last[x] = times
            delivered[x] += undelivered[x]
            undelivered[x] = 0
            chunk_due[x] = False
            ends = np.nonzero(delivered[x] >= out[x])[0]
            for k in ends.tolist():  # the client has the request's last token: its slot frees
                in_flight -= 1
                release(float(times[k]))

    def _advance(until: float) -> None:
        """Run every loop job enqueued by `until` (the engine's clock: every step output before it is queued)."""
        while heap and heap[0][0] <= until:
            _run_job()

    def _ranks(r: np.ndarray) -> np.ndarray:
        """Seconds from a step's end to each request's chunk on an idle loop (its own server's share: the outputs of
        its part and the parts before, the chunks before its own)."""
        if not fifo:
            return load.api_step_s + load.api_out_s * len(r) + load.api_chunk_s * np.arange(1, len(r) + 1)
        rank = np.empty(len(r))
        for s in range(ns):
            idx = np.nonzero(srv[r] == s)[0] if ns > 1 else np.arange(len(r))
            pos = np.arange(len(idx))
            part_start = (pos // part_n) * part_n
            part_len = np.minimum(part_start + part_n, len(idx)) - part_start
            rank[idx] = (load.api_step_s + (load.api_out_s + load.api_chunk_s) * part_start
                         + load.api_out_s * part_len + load.api_chunk_s * (pos - part_start + 1))
        return rank

    def _stream_stretch(r: np.ndarray, ends: np.ndarray) -> None:
        """A decode stretch's outputs on the loop: one output per step, or, when the loop is idle and keeps up
        (nothing else queued before the stretch's end, a step's outputs written before the next step ends), the
        same chunk times at once."""
        nonlocal in_flight
        _advance(float(ends[0]))  # the loop's jobs due by the stretch's first output run first (FIFO)
        rank = _ranks(r)
        work = float(rank.max())
        quiet = not heap or heap[0][0] > ends[-1] + work
        if fifo:
            quiet = quiet and not any(woke) and not any(outq) and all(c is None for c in cur)
        if not (quiet and max(lfree) <= ends[0] and (len(ends) < 2 or work <= float(np.min(np.diff(ends))))
                and not chunk_due[r].any() and (delivered[r] > 0).all()):
            for e in ends.tolist():
                _outputs(e, r)
            return
        times = ends[None, :] + rank[:, None]  # request x step
        c_itls.append(times[:, 0] - c_last[r])
        if times.shape[1] > 1:
            c_itls.append(np.diff(times, axis=1).ravel())
        c_last[r] = times[:, -1]
        delivered[r] += len(ends)
        loop["chunks"] += times.size
        for s in range(ns):
            mine = srv[r] == s
            if mine.any():
                lfree[s] = yielded[s] = float(times[mine, -1].max())
        done_r = np.nonzero(delivered[r] >= out[r])[0]
        for k in done_r[np.argsort(times[done_r, -1])].tolist():
            in_flight -= 1
            release(float(times[k, -1]))

    def _arrival_bound() -> float:
        """The earliest a request not yet at the engine can reach it (a decode stretch stops before it)."""
        b = math.inf
        # an output can end a request at the client, whose slot sends the next prompt: only one whose last token the
        # engine has made and the client not yet had (the stretch itself stops at the engine's next completion)
        ending = next_send < n and bool(np.any((generated >= out) & (delivered < out)))
        for enq, _, kind, _s, _x in heap:
            if kind == _IN1:
                b = min(b, enq + load.api_cpu_s + lat)
            elif kind in (_IN2, _FLUSH):
                b = min(b, enq + lat)
            elif ending:
                b = min(b, enq + load.client_send_s + load.api_cpu_s + lat)
        return b
    api_end = -math.inf  # the end of the API server loop's busy period
    period: list[int] = []  # the requests the API server holds in it

    def release(now: float) -> None:  # client slots: each finished request lets the next prompt go
        nonlocal next_send, in_flight, client_free, api_end, period
        while next_send < n and in_flight < limit:
            i = next_send
            send[i] = client_free = max(planned[i], now, client_free) + load.client_send_s
            if loop_mode:  # the request's input job on the API server's loop (API LOOP)
                _push(float(send[i]), _IN1, int(srv[i]), i)
                next_send += 1
                in_flight += 1
                continue
            # the API server's loop round-robins the requests it holds (each await hands it to the next): a request
            # that comes while it is busy lengthens the busy period by api_cpu_s, and all it holds leave at its end
            if send[i] > api_end:  # an idle loop takes the request through at once: it leads the busy period alone
                period, api_end = [], send[i] + load.api_cpu_s
                arrive[i] = send[i] + frontend_s
                if i == 0 and not load.ready_check:
                    arrive[i] += load.first_request_s
            else:
                period = [j for j in period if arrive[j] > now]
                api_end += load.api_cpu_s
                period.append(i)
                for j in period:
                    arrive[j] = api_end + frontend_s - load.api_cpu_s
            next_send += 1
            in_flight += 1

    release(0.0)
    ready = cfg.prefix_caching and load.ready_check
    first_cached = int(((int(prompt[0]) - 1) // bs) * bs) if ready else 0  # the ready check's prompt
    prefix_ready = prefix_full if ready else 0  # shared-prefix tokens in the cache
    pending = deque() if loop_mode else deque(sorted(range(next_send), key=lambda i: arrive[i]))  # sent, not yet
    # in the engine's queue
    waiting: deque = deque()
    running: list[int] = []
    t = s_prev = 0.0
    freed_later = 0  # async scheduling: blocks freed at the end of the last step, free from the step after next
    free = usable
    shared_users = 0
    steps = preemptions = hit_tokens = 0
    done = 0

    def _admission(i: int) -> tuple[int, bool, int, int]:
        """A waiting request's prefix hit, whether it shares the prefix blocks, the blocks that sharing saves, and
        the blocks its admission needs free (its whole prompt's)."""
        hit = 0
        if cfg.prefix_caching:
            if i == 0:
                hit = min(first_cached, int(tokens[i]) - 1)
            elif prefix_ready:
                hit = min(prefix_ready, ((int(tokens[i]) - 1) // bs) * bs)
        share = prefix_full > 0 and hit >= prefix_full and i != 0
        cut = prefix_blocks if share else 0
        extra_prefix = prefix_blocks if (share and shared_users == 0) else 0
        return hit, share, cut, need1(tokens[i]) - cut + extra_prefix

    while done < n:
        if loop_mode:
            _advance(t)
        if phantom is not None:  # RESULT LAG: the decode step already built for requests that have finished
            dt_ph = cost.step_s(phantom[0], phantom[1], ())
            _lag_emit(0.0)
            s_prev, t = t, t + dt_ph
            steps += 1
            if trace is not None:
                trace.append((s_prev, dt_ph, 0, 0, phantom[0]))
            phantom = None
            cutoff = s_prev
        else:
            cutoff = s_prev if (cfg.async_scheduling and running) else t
        while pending and arrive[pending[0]] <= cutoff:
            waiting.append(pending.popleft())
        if not running and not waiting:
            if loop_mode and not pending:  # the loop's work decides when the next request reaches the engine
                while heap and not pending:
                    _run_job()
            _lag_emit(0.0)  # RESULT LAG: no next step to wait for
            t = s_prev = max(t, float(arrive[pending[0]]))  # idle until the next request reaches the engine
            continue
        budget = cfg.max_num_batched_tokens
        ids: list[int] = []
        ks: list[int] = []
        preempted = False
        prefill_step = False  # SGLang: this step is a prefill batch (the running decodes wait)
        if cfg.prefill_first:
            r0 = np.array(running, dtype=np.int64)
            prefilling = bool(len(r0)) and bool((~((generated[r0] > 0)
                                                   & (tokens[r0] - computed[r0] == 1))).any())
            prefill_step = prefilling or bool(
                waiting and len(running) < cfg.max_num_seqs and _admission(waiting[0])[3] <= free)
            if not prefill_step:
                budget = max(budget, len(running))  # a decode batch: every running request
        if running:
            r = np.array(running, dtype=np.int64)
            want = tokens[r] - computed[r]
            if prefill_step:  # only the chunked request continues; the decodes wait for the prefill batch
                want = np.where((generated[r] > 0) & (want == 1), 0, want)
            if cfg.long_prefill_token_threshold:
                want = np.minimum(want, cfg.long_prefill_token_threshold)
            if len(running) <= budget and int(want.max()) <= 1:  # decodes only: each gets its token
                k = want
            else:
                before = np.concatenate(([0], np.cumsum(want)[:-1]))
                k = np.minimum(want, np.maximum(budget - before, 0))
            extra = np.maximum(need(computed[r] + k) - prefix_blocks * shares[r] - held[r], 0)
            go = k > 0
            if int(extra[go].sum()) <= free:  # the common case: every running request gets its blocks
                free -= int(extra[go].sum())
                held[r[go]] += extra[go]
                ids, ks = r[go].tolist(), k[go].tolist()
                budget -= int(k.sum())
            else:  # the pool runs dry: vLLM's loop, request by request, preempting from the tail
                for idx in range(len(running)):
                    if budget <= 0 or idx >= len(running):
                        break
                    i = running[idx]
                    if prefill_step and generated[i] > 0 and tokens[i] - computed[i] == 1:
                        continue  # SGLang: a decode waits for the prefill batch
                    want_i = min(int(tokens[i] - computed[i]), cfg.long_prefill_token_threshold or 1 << 62)
                    k_i = min(want_i, budget)
                    extra_i = max(need1(computed[i] + k_i) - prefix_blocks * int(shares[i]) - int(held[i]), 0)
                    while extra_i > free:
                        victim = running.pop()
                        preempted = True
                        preemptions += 1
                        free += int(held[victim])
                        held[victim] = 0
                        computed[victim] = 0
                        if shares[victim]:
                            shares[victim] = False
                            shared_users -= 1
                            if shared_users == 0:
                                free += prefix_blocks
                        waiting.appendleft(victim)
                        if victim == i:
                            break
                    if i not in running:
                        break
                    free -= extra_i
                    held[i] += extra_i
                    ids.append(i)
                    ks.append(k_i)
                    budget -= k_i
        # SGLang: waiting requests join a prefill batch only; its input budget is max_prefill_tokens too
        rem_input = cfg.max_prefill_tokens if prefill_step and cfg.max_prefill_tokens else 1 << 62
        rem_input -= sum(ks)
        if not preempted and (prefill_step or not cfg.prefill_first):  # waiting requests, in order
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                i = waiting[0]
                hit, share, cut, blocks_needed = _admission(i)
                extra_prefix = prefix_blocks if (share and shared_users == 0) else 0
                k_i = min(int(tokens[i]) - hit, budget, cfg.long_prefill_token_threshold or 1 << 62)
                blocks_now = need1(hit + k_i) - cut
                if not cfg.reserve_full_prompt:  # only the scheduled chunk's blocks must be free
                    blocks_needed = blocks_now + extra_prefix
                if blocks_needed > free:  # the whole prompt's (or the chunk's) blocks must be free
                    break
                if ids and int(tokens[i]) - hit >= rem_input:  # schedule_policy.py:598/617: the batch is full
                    break
                waiting.popleft()
                computed[i] = hit
                hit_tokens += hit
                free -= blocks_now + extra_prefix
                held[i] = blocks_now
                if share:
                    shares[i] = True
                    shared_users += 1
                if prefix_full and prefix_ready < prefix_full:  # its blocks are cached as they are scheduled
                    prefix_ready = max(prefix_ready, min(prefix_full, ((hit + k_i) // bs) * bs))
                running.append(i)
                ids.append(i)
                ks.append(k_i)
                budget -= k_i
                rem_input -= k_i
                if cfg.prefill_first and k_i < int(tokens[i]) - hit:  # cut to the chunk: the chunked request
                    break
        if not ids:
            if freed_later:  # the blocks the last step freed: an idle engine schedules again once they are free
                free += freed_later
                freed_later = 0
                continue
            if loop_mode and not pending:
                while heap and not pending:
                    _run_job()
            if pending:  # nothing fits until the next arrival (or a finished request) changes the state
                t = s_prev = max(t, float(arrive[pending[0]]))
                continue
            raise ValueError("the KV cache cannot hold one request of this workload")
        r = np.array(ids, dtype=np.int64)
        kk = np.array(ks, dtype=np.int64)
        is_dec = (tokens[r] - computed[r] == 1) & (generated[r] > 0)
        stretch = 1
        if is_dec.all() and len(r) == len(running) and (
                not waiting or len(running) >= cfg.max_num_seqs
                or need1(tokens[waiting[0]] if cfg.reserve_full_prompt else min(
                    int(tokens[waiting[0]]), cfg.max_num_batched_tokens - len(running))) - prefix_blocks > free):
            stretch, dts = _decode_stretch(cost, r, computed, generated, out, held, shares, prefix_blocks, need, free,
                                           t, float(arrive[pending[0]]) if pending else (
                                               _arrival_bound() if loop_mode else math.inf),
                                           cfg.async_scheduling, cfg.graph_max_tokens, cfg.host_per_seq_s,
                                           cfg.graph_max_context, cfg.eager_s)
        if stretch > 1:  # a pure decode stretch in one vector step: each request gains `stretch` tokens
            if lag:
                _lag_emit(_cpu_of(False, len(r)))
            starts = t + np.concatenate(([0.0], np.cumsum(dts)[:-1]))
            ends = starts + dts
            grown = need(computed[r] + stretch) - prefix_blocks * shares[r]
            free -= int((grown - held[r]).sum())
            held[r] = grown
            if si == 1:
                itls.append(ends[0] - last_tok[r])
                itls.append(np.tile(dts[1:], len(r)))
            else:  # chunks at the tokens (g % si == 1) and at each request's last
                g = generated[r][:, None] + 1 + np.arange(stretch)[None, :]
                rows, cols = np.nonzero((g % si == 1) | (g >= out[r][:, None]))
                if len(rows):
                    times = ends[cols]
                    prev = np.empty_like(times)
                    prev[1:] = times[:-1]
                    starts_row = np.ones(len(rows), dtype=bool)
                    starts_row[1:] = rows[1:] != rows[:-1]
                    prev[starts_row] = last_emit[r[rows[starts_row]]]
                    itls.append(times - prev)
                    ends_row = np.ones(len(rows), dtype=bool)
                    ends_row[:-1] = rows[:-1] != rows[1:]
                    last_emit[r[rows[ends_row]]] = times[ends_row]
            computed[r] += stretch
            tokens[r] += stretch
            generated[r] += stretch
            last_tok[r] = ends[-1]
            s_prev, t = float(starts[-1]), float(ends[-1])
            steps += stretch
            if trace is not None:
                trace.extend((float(a), float(d), 0, 0, len(r)) for a, d in zip(starts, dts))
            if loop_mode:
                _stream_stretch(r, ends)
        else:  # one step
            chunk = ~is_dec
            ctx = cost.decode_context(computed[r[is_dec]] + 1) if hasattr(cost, "decode_context") \
                else float((computed[r[is_dec]] + 1).sum())
            chunks = tuple(zip(computed[r[chunk]].tolist(), kk[chunk].tolist()))
            dt = engine_step_s(cost, cfg, cost.step_s(int(is_dec.sum()), ctx, chunks), int(kk.sum()), len(r),
                               prefill=bool(chunk.any()),
                               longest=int(computed[r[is_dec]].max()) + 1 if is_dec.any() else 0)
            if lag:  # RESULT LAG: the step before's first tokens leave once this step is launched
                cpu_now = _cpu_of(bool(chunk.any()), int(kk.sum()))
                _lag_emit(cpu_now)
            s_prev, t = t, t + dt
            steps += 1
            if trace is not None:
                new_req = generated[r] == 0
                trace.append((s_prev, dt, int(new_req.sum()), int(kk[new_req].sum()), int((~new_req).sum())))
            computed[r] += kk
            caught = r[computed[r] >= tokens[r]]  # caught up with its tokens: one is sampled
            generated[caught] += 1
            tokens[caught] += 1
            new = caught[generated[caught] == 1]
            old = caught[generated[caught] > 1]
            first[new] = t
            if lag:
                if len(new):
                    lag_new = (new, t, s_prev + cpu_now)
            if si == 1:
                if len(old):
                    itls.append(t - last_tok[old])
            else:
                last_emit[new] = t
                emit = old[(generated[old] % si == 1) | (generated[old] >= out[old])]
                if len(emit):
                    itls.append(t - last_emit[emit])
                    last_emit[emit] = t
            last_tok[caught] = t
            if loop_mode and len(caught):
                _outputs(t, caught)
        free += freed_later  # blocks freed at the end of the step before the last one
        freed_later = 0
        fin = r[generated[r] >= out[r]]
        for i in fin.tolist():
            running.remove(i)
        if lag and len(fin) and not running and bool(is_dec.all()):  # RESULT LAG: step k+1 was built with them
            phantom = (len(fin), float((computed[fin] + 1).sum()))
        done += len(fin)
        if not loop_mode:  # API LOOP: the client's slot frees when the last token reaches it (a CHUNKS job)
            in_flight -= len(fin)
        freed = int(held[fin].sum())
        held[fin] = 0
        users = int(shares[fin].sum())
        shares[fin] = False
        if users:
            shared_users -= users
            freed += prefix_blocks if shared_users == 0 else 0
        if cfg.async_scheduling:
            freed_later = freed
        else:
            free += freed
        if not loop_mode:
            sent = next_send
            release(t)
            for j in range(sent, next_send):
                _insert(pending, j, arrive)
    if loop_mode:
        _advance(math.inf)
        ttft, e2e = c_first - send, c_last - send
        itl = np.concatenate(c_itls) if c_itls else np.zeros(0)
        res = SimResult(ttft, e2e, itl, out, prompt, float(np.max(c_last)), steps, preemptions, hit_tokens,
                        send_s=send, arrive_s=np.asarray(arrive, dtype=float))
        res.notes.append(f"api loop: {loop['chunks']} chunks, {loop['merged']} tokens merged")
        res.merged_tokens = loop["merged"]
        return res
    if lag:
        _lag_emit(0.0)
    ttft = first - send
    e2e = last_tok - send
    itl = np.concatenate(itls) if itls else np.zeros(0)
    return SimResult(ttft, e2e, itl, out, prompt, float(np.max(last_tok)), steps, preemptions, hit_tokens,
                     send_s=send, arrive_s=np.asarray(arrive, dtype=float))


def engine_step_s(cost, cfg: EngineConfig, gpu_s, tokens: int, seqs: int, prefill: bool = False, longest=0):
    """One vLLM engine step as the simulation times it: step_under_rules with the step model's floors (StepCost
    eager_floor_s, launch_s) and `cfg`'s rules."""
    return step_under_rules(gpu_s, tokens, seqs, prefill, longest, floor_s=getattr(cost, "eager_floor_s", 0.0),
                            launch_s=getattr(cost, "launch_s", 0.0), graph_max_tokens=cfg.graph_max_tokens,
                            host_per_seq_s=cfg.host_per_seq_s, graph_max_context=cfg.graph_max_context,
                            eager_s=cfg.eager_s)


def _decode_stretch(cost, r, computed, generated, out, held, shares, prefix_blocks, need, free, t, arrival,
                    async_scheduling=True, graph_max_tokens=None, host_per_seq_s=0.0, graph_max_context=None,
                    eager_s=0.0):
    """How many pure decode steps the batch `r` runs before something changes (a request finishes, the next arrival
    reaches the schedule, or the pool cannot give every request its next block), and their step times. The step is
    affine in the summed context, which grows by the batch each step."""
    kmax = int((out[r] - generated[r]).min())
    if kmax <= 1:
        return 1, None
    b = len(r)
    # the summed context of each step of the stretch, each request's read capped at the sliding windows
    ctxs = cost.decode_context(computed[r] + 1, kmax) if hasattr(cost, "decode_context") \
        else float((computed[r] + 1).sum()) + b * np.arange(kmax)
    base = (cost.fixed_s + cost.weights_s(b, False) + cost.sampler_per_row_s * b
            + (cost.extra_s(b, False) if hasattr(cost, "extra_s") else 0.0))
    # each step's longest context (V0's graph rule reads it), then the engine's floors and host work on the GPU's step
    longest = int(computed[r].max()) + 1 + np.arange(kmax) if graph_max_context is not None else 0
    dts = step_under_rules(base + cost.decode_attention_per_token_s * ctxs, b, b, False, longest,
                           floor_s=cost.eager_floor_s, launch_s=getattr(cost, "launch_s", 0.0),
                           graph_max_tokens=graph_max_tokens,
                           host_per_seq_s=host_per_seq_s, graph_max_context=graph_max_context, eager_s=eager_s)
    k = kmax
    if math.isfinite(arrival):  # stop before the step whose schedule sees the next arrival: step j is scheduled when
        # step j-1 starts (async scheduling), else when it ends
        starts = t + np.concatenate(([0.0], np.cumsum(dts)[:-1]))
        if async_scheduling:
            k = min(k, 1 + int(np.searchsorted(starts[:-1], arrival, side="left")))
        else:
            k = min(k, max(1, int(np.searchsorted(starts, arrival, side="left"))))
    held_now, shared = int(held[r].sum()), prefix_blocks * shares[r]
    lo, hi = 1, k
    while lo < hi:  # the longest stretch whose block growth the free pool covers
        mid = (lo + hi + 1) // 2
        if int((need(computed[r] + mid) - shared).sum()) - held_now <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo, dts[:lo]


def _insert(pending: deque, j: int, arrive: np.ndarray) -> None:
    """Keep the engine's arrival queue in arrival order (sends from slots come in time order, so this appends)."""
    if not pending or arrive[pending[-1]] <= arrive[j]:
        pending.append(j)
        return
    items = sorted([*pending, j], key=lambda i: arrive[i])
    pending.clear()
    pending.extend(items)
