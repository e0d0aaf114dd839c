"""The scheduler simulation (kvcalc/serve_sim.py) and its step model (kvcalc/step_cost.py): the step model equals the
speed model on decode-only and prefill-only steps; the scheduler's rules on a toy step cost worked by hand; vllm
bench's arrivals and lengths; the run is fast."""

from __future__ import annotations

import math
import statistics
import time
import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from kvcalc.catalog import load_model
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.serve_sim import EngineConfig, Load, planned_sends, sample_lengths, simulate
from kvcalc.step_cost import step_cost
from kvcalc.throughput import decode_speed, prefill_s

SPEC, GPU = load_model("llama-3.2-3b"), get_gpu("h200")
BF16, AUTO, FP8 = weight_format("bf16"), kv_format("auto"), kv_format("fp8")
BIG = EngineConfig(8192, 1024, 100_000, 16, 16384, prefix_caching=False)


@pytest.mark.parametrize("model,kv,tp", [("llama-3.2-3b", "auto", 1), ("qwen3-30b-a3b", "fp8", 1),
                                         ("llama-3.1-8b", "auto", 2)])
def test_step_model_equals_the_speed_model(model, kv, tp):
    spec, k = load_model(model), kv_format(kv)
    cost = step_cost(spec, GPU, BF16, k, tp)
    for b, c in ((1, 10), (7, 3000), (64, 900), (200, 5000)):
        want = decode_speed(spec, GPU, "vllm", BF16, k, b, c, tp=tp).step_s
        assert cost.step_s(b, b * c) == pytest.approx(want, rel=1e-12)
    for n, chunk, rel in ((1024, 2048, 1e-9), (6144, 2048, 1e-9), (3000, 8192, 0.01), (5000, 2048, 0.01)):
        chunks, start = [], 0
        while start < n:
            chunks.append(cost.step_s(0, 0, ((start, min(chunk, n - start)),)))
            start += chunk
        # exact at multiples of 64 tokens; between them the weight GEMMs are interpolated
        assert sum(chunks) == pytest.approx(prefill_s(spec, GPU, BF16, k, n, chunk, tp), rel=rel)


def test_a_lone_request_is_its_prefill_then_its_decode_steps():
    """One prompt, nothing cached, no front-end: TTFT is throughput.prefill_s, TPOT the mean decode step over the
    contexts the output passes through (prompt+1 .. prompt+output-1), e2e their sum."""
    cost = step_cost(SPEC, GPU, BF16, AUTO)
    res = simulate(cost, BIG, Load(3072, 17, 1, 1))
    assert res.ttft_s[0] == pytest.approx(prefill_s(SPEC, GPU, BF16, AUTO, 3072, 8192), rel=1e-12)
    steps = [decode_speed(SPEC, GPU, "vllm", BF16, AUTO, 1, c).step_s for c in range(3073, 3089)]
    assert res.tpot_s[0] == pytest.approx(statistics.fmean(steps), rel=1e-12)
    assert sorted(res.itl_s) == pytest.approx(sorted(steps), rel=1e-12)
    m = res.metrics()
    assert m["output_throughput"] == pytest.approx(17 / res.e2e_s[0])
    assert res.steps == 1 + 16


@dataclass
class ToyCost:
    """Hand-checkable steps: 1 ms + 1 us per token scheduled (no attention, no sampler)."""

    fixed_s: float = 1e-3
    per_token_s: float = 1e-6
    eager_floor_s: float = 0.0
    decode_attention_per_token_s: float = 0.0
    sampler_per_row_s: float = 0.0

    def weights_s(self, tokens, prefill):
        return self.per_token_s * tokens

    def step_s(self, decodes, decode_context, chunks=(), sampled=None):
        return self.fixed_s + self.per_token_s * (decodes + sum(n for _, n in chunks))


def test_a_burst_shares_one_budget_and_queues_the_rest():
    """8 prompts of 1,000 tokens at once, budget 2,048: two prompts fit a step (the third starts in the first step
    with the 48 tokens left, chunked), so first tokens come step by step, in order."""
    cfg = EngineConfig(2048, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    res = simulate(ToyCost(), cfg, Load(1000, 10, 8))
    ttft = np.sort(res.ttft_s)
    step = 1e-3 + 2048e-6  # a full step
    assert ttft[0] == pytest.approx(step) and ttft[1] == pytest.approx(step)
    assert ttft[-1] > 3 * step  # the last prompt waits for the ones before it
    assert res.metrics()["completed"] == 8


def test_max_num_seqs_holds_the_rest_in_the_queue():
    cfg = EngineConfig(8192, 2, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    res = simulate(ToyCost(), cfg, Load(100, 5, 4))
    first_two, last_two = np.sort(res.ttft_s)[:2], np.sort(res.ttft_s)[2:]
    # the first two run 1 prefill step + 4 decode steps before the next two get seats
    assert first_two == pytest.approx([1e-3 + 200e-6] * 2)
    assert last_two.min() > first_two.max() + 4e-3


def test_the_pool_running_dry_preempts_the_newest_and_every_request_finishes():
    """Blocks for ~2.5 requests at full length, 4 admitted on their prompts: decodes grow past the pool, the newest
    running request is preempted (FCFS) and recomputed later."""
    per = math.ceil((64 + 200) / 16)
    cfg = EngineConfig(8192, 64, int(2.5 * per) + 1, 16, 4096, prefix_caching=False, async_scheduling=False)
    res = simulate(ToyCost(), cfg, Load(64, 200, 4))
    assert res.preemptions >= 1
    assert res.metrics()["completed"] == 4 and (res.output_lens == 200).all()


def test_a_shared_prefix_is_computed_once():
    """--random-prefix-len 1,600: the ready check cached it, so every request's prompt starts with 100 cached
    blocks; only the rest is prefilled."""
    cfg = EngineConfig(8192, 64, 10_000, 16, 8192, async_scheduling=False)
    shared = simulate(ToyCost(), cfg, Load(200, 4, 16, 1, prefix_len=1600))
    alone = simulate(ToyCost(), EngineConfig(8192, 64, 10_000, 16, 8192, prefix_caching=False,
                                             async_scheduling=False), Load(200, 4, 16, 1, prefix_len=1600))
    assert shared.prefix_hit_tokens >= 15 * 1600
    assert shared.ttft_s[1:].mean() == pytest.approx(1e-3 + 200e-6)
    assert alone.ttft_s.mean() == pytest.approx(1e-3 + 1800e-6)


def test_async_scheduling_admits_an_arrival_a_step_later():
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False)
    sync = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    load = Load(100, 50, 2, request_rate=200.0, burstiness=math.inf)  # second prompt 5 ms after the first
    a, s = simulate(ToyCost(), cfg, load), simulate(ToyCost(), sync, load)
    assert a.ttft_s[1] > s.ttft_s[1]


def test_closed_loop_keeps_the_concurrency():
    """--max-concurrency 4 over 40 prompts: the mean in flight (Little's law over the run) is close to 4."""
    res = simulate(ToyCost(), BIG, Load(500, 50, 40, 4))
    assert res.e2e_s.sum() / res.duration_s == pytest.approx(4, rel=0.05)


def test_arrivals_as_vllm_bench_draws_them():
    t = planned_sends(Load(10, 10, 500, None, request_rate=5.0))
    assert t[-1] == pytest.approx(500 / 5.0)  # rescaled so the last send is at num_prompts / rate (serve.py:483)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.15)  # exponential: coefficient of variation 1
    smooth = np.diff(planned_sends(Load(10, 10, 500, None, request_rate=5.0, burstiness=8.0)))
    assert smooth.std() / smooth.mean() == pytest.approx(1 / math.sqrt(8), abs=0.06)  # gamma shape k: CV 1/sqrt(k)
    assert (planned_sends(Load(10, 10, 5)) == 0).all()


def test_lengths_as_the_random_dataset_draws_them():
    ins, outs = sample_lengths(Load(1000, 200, 2000, random_range_ratio=0.5, prefix_len=64))
    assert ins.min() >= 64 + 500 and ins.max() <= 64 + 1500
    assert outs.min() >= 100 and outs.max() <= 300
    assert ins.mean() == pytest.approx(1064, rel=0.03)


def test_metrics_are_vllm_benchs():
    res = simulate(ToyCost(), BIG, Load(300, 20, 30, 8, random_range_ratio=0.3))
    m = res.metrics((50.0, 90.0, 99.0))
    assert m["p90_ttft_ms"] == pytest.approx(np.percentile(res.ttft_s, 90) * 1e3)
    assert m["median_itl_ms"] == pytest.approx(np.median(res.itl_s) * 1e3)
    tpot = (res.e2e_s - res.ttft_s) / (res.output_lens - 1)
    assert m["mean_tpot_ms"] == pytest.approx(tpot.mean() * 1e3)
    assert len(res.itl_s) == int((res.output_lens - 1).sum())  # one gap per streamed token after the first
    assert m["output_throughput"] == pytest.approx(res.output_lens.sum() / res.duration_s)


def test_a_thousand_requests_run_fast():
    cost = step_cost(SPEC, GPU, BF16, FP8)
    start = time.process_time()  # CPU, not wall: the machines these run on are shared
    simulate(cost, BIG, Load(1024, 256, 1000, 64))
    simulate(cost, BIG, Load(1024, 256, 1000, None, request_rate=20.0))
    assert time.process_time() - start < 3.0  # ~0.5 s on an idle core


def test_vllm_replays_graphs_up_to_its_capture_size():
    """max_cudagraph_capture_size's default, min(2 x max_num_seqs, 512) capped by the token budget (vLLM 0.26.0
    config/vllm.py:1792-1798)."""
    from kvcalc.engines.vllm_graphs import max_graph_tokens

    assert max_graph_tokens(1024, 8192) == 512  # vllm serve's defaults on an H200 (the serve logs: largest=512)
    assert max_graph_tokens(8, 8192) == 16
    assert max_graph_tokens(256, 128) == 128
    assert max_graph_tokens(100, 8192, speculative_tokens=1) == 400


def test_the_launch_floor_is_the_compiled_launch_model_times_the_host():
    """launch_s: the compiled forward's launch (2 ms + 0.5533 ms per layer, kvcalc/data/throughput.yaml) x cpu_scale;
    28 layers for Llama-3.2-3B; an fp8 KV cache adds 0.1748 ms a layer."""
    assert step_cost(SPEC, GPU, BF16, AUTO).launch_s == pytest.approx(0.002 + 0.0005533 * 28)
    assert step_cost(SPEC, GPU, BF16, AUTO, cpu_scale=1.5).launch_s == pytest.approx(1.5 * (0.002 + 0.0005533 * 28))
    assert step_cost(SPEC, GPU, BF16, kv_format("fp8")).launch_s == pytest.approx(0.002 + (0.0005533 + 0.0001748) * 28)


def test_a_step_without_a_graph_takes_at_least_the_cpu_s_launch():
    """A lone 1,024-token prompt of a 3B model: the GPU's prefill is ~13 ms; above the 512-token graph limit the step
    runs without graphs, so at a CPU twice as slow as kvcalc's fitting host (launch ~28 ms) the launch sets the TTFT.
    A 500-token prompt (graphed) keeps the GPU's time, and so does every step when no graph limit is given."""
    cost = step_cost(SPEC, GPU, BF16, AUTO, cpu_scale=2.0)
    graphed = EngineConfig(8192, 1024, 100_000, 16, 16384, prefix_caching=False, graph_max_tokens=512)
    gpu = prefill_s(SPEC, GPU, BF16, AUTO, 1024, 8192)
    assert gpu < cost.launch_s
    assert simulate(cost, graphed, Load(1024, 2, 1, 1)).ttft_s[0] == pytest.approx(cost.launch_s, rel=1e-12)
    assert simulate(cost, BIG, Load(1024, 2, 1, 1)).ttft_s[0] == pytest.approx(gpu, rel=1e-12)
    small = simulate(cost, graphed, Load(500, 2, 1, 1)).ttft_s[0]
    # (between multiples of 64 tokens the step interpolates its GEMMs: within 2% of prefill_s)
    assert small == pytest.approx(prefill_s(SPEC, GPU, BF16, AUTO, 500, 8192), rel=0.02) and small < cost.launch_s


def test_decode_batches_above_the_graph_limit_pay_the_launch_too():
    cost = step_cost(SPEC, GPU, BF16, AUTO, cpu_scale=3.0)
    cfg = EngineConfig(8192, 1024, 200_000, 16, 16384, prefix_caching=False, graph_max_tokens=16)
    res = simulate(cost, cfg, Load(64, 40, 32))  # 32 decodes per step > 16: no graph
    assert float(np.median(res.itl_s)) == pytest.approx(cost.launch_s, rel=1e-9)


def test_the_bench_client_sends_one_request_after_another():
    """client_send_s: prompts released at one instant leave c, 2c, 3c, ... after it; a closed loop's next prompt
    leaves c after the completion that frees its slot (vllm bench's one asyncio loop)."""
    c = 0.5e-3
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    burst = simulate(ToyCost(), cfg, Load(100, 5, 4, client_send_s=c))
    assert burst.send_s == pytest.approx([c, 2 * c, 3 * c, 4 * c])
    loop = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c))
    ends = loop.send_s + loop.e2e_s
    assert loop.send_s[1:] == pytest.approx(ends[:-1] + c)
    assert simulate(ToyCost(), cfg, Load(100, 5, 4)).send_s == pytest.approx([0.0] * 4)


def test_the_api_servers_loop_holds_a_burst_until_its_busy_period_ends():
    """api_cpu_s: 4 prompts sent 0.5 ms apart reach a loop that needs 10 ms each. The first finds the loop idle and
    goes through alone after the front-end cost (20 ms), its prefill a step of its own. The other three land in the
    busy period it opened and each lengthens it, so they reach the engine together at 0.5 + 4 x 10 ms of loop time,
    plus the rest of the front-end cost (20 - 10 ms), and their first tokens share one step. A lone request (closed
    loop of 1) finds the loop idle every time and takes the front-end cost alone, as without it."""
    c, a, fe = 0.5e-3, 10e-3, 20e-3
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    burst = simulate(ToyCost(), cfg, Load(100, 5, 4, client_send_s=c, api_cpu_s=a), frontend_s=fe)
    first = burst.send_s + burst.ttft_s
    assert first[0] == pytest.approx(c + fe + 1e-3 + 100e-6)  # alone: one prompt's prefill step
    assert first[1:] == pytest.approx([c + 4 * a + (fe - a) + 1e-3 + 300e-6] * 3)  # three prompts in one step
    lone = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c, api_cpu_s=a), frontend_s=fe)
    plain = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c), frontend_s=fe)
    assert lone.ttft_s == pytest.approx(plain.ttft_s) and lone.ttft_s[0] == pytest.approx(fe + 1e-3 + 100e-6)


def test_the_shared_api_loop_makes_a_bursts_lead_wait_for_the_others_input():
    """API LOOP (api_chunk_s set): the same burst as above. The inputs reach the engine as the busy-period rule has
    them (the lead alone after its 10 ms, the other three together when the loop has done 4 x 10 ms of input work),
    less the loop's own output share of the front end (the lone request's total is unchanged). But the lead's first
    token now waits on the same loop: its step ends at ~21 ms, and the loop writes its chunk only after the other
    three's input work, at 40.5 ms + one chunk (vLLM 0.26's asyncio loop runs one task at a time: a run's first request
    takes 96-140 ms to its first token in the H200 bursts, where its engine step ends ~45 ms after the send)."""
    c, a, fe, s = 0.5e-3, 10e-3, 20e-3, 50e-6
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    burst = simulate(ToyCost(), cfg, Load(100, 5, 4, client_send_s=c, api_cpu_s=a, api_chunk_s=s), frontend_s=fe)
    first = burst.send_s + burst.ttft_s
    assert first[0] == pytest.approx(c + 4 * a + s)  # the lead's chunk, after the loop's input work
    three = c + 4 * a + (fe - a - s) + 1e-3 + 300e-6  # their step's end
    assert first[1:] == pytest.approx([three + s * k for k in (1, 2, 3)])  # one chunk each, in turn
    lone = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c, api_cpu_s=a, api_chunk_s=s),
                    frontend_s=fe)
    plain = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c), frontend_s=fe)
    assert lone.ttft_s == pytest.approx(plain.ttft_s) and lone.e2e_s == pytest.approx(plain.e2e_s)


def test_a_lagging_loop_merges_tokens_into_fewer_chunks():
    """API LOOP: 4 requests decode in ~1 ms steps while the loop needs 0.5 ms per chunk (2 ms a round). Each
    stream generator takes what its collector holds (RequestOutputCollector merges deltas while its consumer lags),
    so chunks carry ~2 tokens and the last token reaches the client within two loop rounds of the engine's last step
    (the round under way, then the one that writes it), not at 4 x 50 x 0.5 ms = 100 ms; the ITLs count chunks, as
    vllm bench's do."""
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    engine = simulate(ToyCost(), cfg, Load(100, 50, 4))
    res = simulate(ToyCost(), cfg, Load(100, 50, 4, api_chunk_s=0.5e-3))
    assert res.merged_tokens > 50
    assert len(res.itl_s) + 4 == 4 * 50 - res.merged_tokens  # one ITL per chunk after the first
    assert (res.e2e_s >= engine.e2e_s - 1e-12).all()
    assert res.duration_s <= engine.duration_s + 2 * 4 * 0.5e-3 + 1e-9


def test_the_api_path_releases_each_prompt_as_its_input_job_ends():
    """API PATH (api_fifo): the burst of four one-token requests above. Each input job (10 ms) runs in turn on the
    loop and its prompt leaves for the engine when it ends, plus the front end's rest (20 - 10 - 0.05 ms): the k-th
    reaches the engine at 0.5 + (k + 1) x 10 ms + 9.95 ms, not together at the end of a busy period. Their first
    tokens wait on the same loop: the first two behind the other input jobs (written at 40.5 ms, one chunk each in
    turn), the last two as their own steps end."""
    c, a, fe, s = 0.5e-3, 10e-3, 20e-3, 50e-6
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    res = simulate(ToyCost(), cfg, Load(100, 1, 4, client_send_s=c, api_cpu_s=a, api_chunk_s=s, api_fifo=True),
                   frontend_s=fe)
    lat = fe - a - s
    assert res.arrive_s == pytest.approx([c + k * a + lat for k in (1, 2, 3, 4)])
    step = 1e-3 + 100e-6
    first = res.send_s + res.ttft_s
    assert first == pytest.approx([c + 4 * a + s, c + 4 * a + 2 * s, c + 3 * a + lat + step + s,
                                   c + 4 * a + lat + step + s])
    busy = simulate(ToyCost(), cfg, Load(100, 1, 4, client_send_s=c, api_cpu_s=a, api_chunk_s=s), frontend_s=fe)
    assert busy.arrive_s[1:] == pytest.approx([c + 4 * a + lat] * 3)  # the busy-period rule: together at its end


def test_api_servers_split_the_input_work():
    """--api-server-count 2: requests alternate between two loops, so the same burst's input jobs run two at a time
    (server 0: the 1st and 3rd, server 1: the 2nd and 4th); a lone request is as with one server."""
    c, a, fe, s = 0.5e-3, 10e-3, 20e-3, 50e-6
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    two = simulate(ToyCost(), cfg, Load(100, 1, 4, client_send_s=c, api_cpu_s=a, api_chunk_s=s, api_fifo=True,
                                        api_servers=2), frontend_s=fe)
    lat = fe - a - s
    assert two.arrive_s == pytest.approx([c + a + lat, 2 * c + a + lat, c + 2 * a + lat, 2 * c + 2 * a + lat])
    lone = [simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c, api_cpu_s=a, api_chunk_s=s,
                                          api_fifo=True, api_servers=k), frontend_s=fe) for k in (1, 2)]
    plain = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, client_send_s=c), frontend_s=fe)
    for r in lone:
        assert r.ttft_s == pytest.approx(plain.ttft_s) and r.e2e_s == pytest.approx(plain.e2e_s)


def test_output_parts_let_the_chunks_out_before_the_next_step():
    """API PATH: output_handler yields between parts of api_part outputs (asyncio.sleep(0)), so the chunks a part
    woke are written before the handler comes back; a lagging loop merges tokens only within a part. With one output
    a part no token ever merges; with every output in one part (a step of <= 128 requests, vLLM's default) they
    merge as the loop falls behind (vLLM 0.26 H200: the 3B at 128 clients 15,568 of 98,304 tokens merged, at Poisson
    64/s with ~300 requests a step 4,178 of 131,072)."""
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    runs = {k: simulate(ToyCost(), cfg, Load(100, 50, 4, api_chunk_s=0.5e-3, api_fifo=True, api_part=k))
            for k in (1, 128)}
    assert runs[1].merged_tokens == 0 and runs[128].merged_tokens > 50
    for r in runs.values():
        assert len(r.itl_s) + 4 == 4 * 50 - r.merged_tokens  # one ITL per chunk after the first


def test_the_loops_cost_per_step_delays_every_chunk_of_a_lone_request_by_it():
    """API PATH with api_step_s (the loop's fixed work per engine step it takes in: the frame's decode, the stat
    loggers): on an idle loop each step's chunk is written api_step_s later, so a lone request's TTFT and e2e move by
    exactly that and its ITLs not at all; with a front end to take it from (frontend_s is measured with the loop in
    it), the step's cost comes out of the front end's latency and the lone request is as before."""
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    base = dict(client_send_s=0.5e-3, api_cpu_s=1e-3, api_out_s=10e-6, api_chunk_s=50e-6, api_fifo=True)
    for fe, moves in ((0.0, 0.7e-3), (5e-3, 0.0)):
        runs = [simulate(ToyCost(), cfg, Load(100, 6, 3, max_concurrency=1, api_step_s=x, **base), frontend_s=fe)
                for x in (0.0, 0.7e-3)]
        assert runs[1].ttft_s - runs[0].ttft_s == pytest.approx([moves] * 3, abs=1e-12)
        assert runs[1].e2e_s - runs[0].e2e_s == pytest.approx([moves] * 3, abs=1e-12)
        assert runs[1].itl_s == pytest.approx(runs[0].itl_s)


def test_a_thousand_requests_run_fast_through_the_api_path():
    cost = step_cost(SPEC, GPU, BF16, FP8)
    start = time.process_time()
    for load in (Load(1024, 256, 1000, 64), Load(1024, 256, 1000, None, request_rate=20.0)):
        simulate(cost, BIG, dataclasses.replace(load, api_cpu_s=2e-3, api_out_s=20e-6, api_chunk_s=35e-6,
                                                api_fifo=True), frontend_s=7e-3)
    assert time.process_time() - start < 3.0


def test_a_fresh_servers_first_request_pays_its_one_time_cost_alone():
    """first_request_s: in a closed loop of one, the run's first request reaches the engine that much later and
    every later one is as on a warm server; a ready check's prompt (sent before the run) takes the cost instead."""
    x, fe = 23e-3, 7e-3
    cfg = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    warm = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1), frontend_s=fe)
    fresh = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, first_request_s=x), frontend_s=fe)
    assert fresh.ttft_s[0] == pytest.approx(warm.ttft_s[0] + x)
    assert fresh.ttft_s[1:] == pytest.approx(warm.ttft_s[1:]) and fresh.itl_s == pytest.approx(warm.itl_s)
    checked = simulate(ToyCost(), cfg, Load(100, 5, 3, max_concurrency=1, first_request_s=x, ready_check=True),
                       frontend_s=fe)
    assert checked.ttft_s == pytest.approx(warm.ttft_s)


def test_workload_fresh_server_reaches_the_simulation():
    from kvcalc.workload import Workload, bench_load, first_request_s

    assert first_request_s("serve") > 0 and first_request_s("llm") == 0.0
    assert bench_load(Workload(1024, 256, concurrency=1, fresh_server=True)).first_request_s == first_request_s()
    assert bench_load(Workload(1024, 256, concurrency=1)).first_request_s == 0.0


def test_sglang_runs_a_prefill_batch_before_the_decodes():
    """SGLang (prefill_first): request A (100-token prompt, 5 outputs) decodes alone; B is sent 5 ms in. vLLM
    schedules B's prompt beside A's decode; SGLang runs B's prefill batch alone (A waits a step), then both decode:
    A's TPOT grows by that step (1 ms + 100 us), B's TTFT is that step."""
    load = Load(100, 5, 2, request_rate=400.0, burstiness=math.inf)  # sends at 2.5 ms and 5 ms
    vllm = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    sgl = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False,
                       prefill_first=True)
    v, s = simulate(ToyCost(), vllm, load), simulate(ToyCost(), sgl, load)
    assert s.ttft_s[0] == v.ttft_s[0] == pytest.approx(1e-3 + 100e-6)
    # every step is a prefill batch or a decode batch: B's prefill step holds no decode of A
    assert s.ttft_s[1] == pytest.approx(1e-3 + 100e-6, abs=1.01e-3)  # it may wait for A's step in flight
    assert s.e2e_s[0] > v.e2e_s[0]  # A sat out B's prefill step
    assert s.metrics()["completed"] == v.metrics()["completed"] == 2


def test_sglang_prefill_batches_fill_the_chunk_and_cut_the_last_prompt():
    """A burst of 5 prompts of 1,000 tokens, chunked_prefill_size 2,500, max_prefill_tokens 16,384: batch 1 takes
    two whole prompts and cuts the third at 500 (the chunked request); batch 2 continues it (500) and takes two
    whole prompts; nothing decodes until every prompt is in. First tokens: 2 after step 1, 3 after step 2."""
    cfg = EngineConfig(2500, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False,
                       prefill_first=True, max_prefill_tokens=16384)
    res = simulate(ToyCost(), cfg, Load(1000, 3, 5))
    step = 1e-3 + 2500e-6
    ttft = np.sort(res.ttft_s)
    assert ttft[:2] == pytest.approx([step] * 2) and ttft[2:] == pytest.approx([2 * step] * 3)
    # max_prefill_tokens below the chunk: a batch stops at the prompt that reaches it (no cut)
    tight = EngineConfig(2500, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False,
                         prefill_first=True, max_prefill_tokens=1500)
    one = simulate(ToyCost(), tight, Load(1000, 3, 2))
    assert np.sort(one.ttft_s) == pytest.approx([1e-3 + 1000e-6, 2 * (1e-3 + 1000e-6)])


def test_stream_interval_groups_the_streamed_tokens():
    """--stream-interval 4 (SGLang): a lone request's 10 tokens go out at its 1st, 5th, 9th and last token, so its
    ITLs are 4, 4 and 1 decode steps (1 ms + 1 us each); TTFT, TPOT and e2e are those of interval 1."""
    base = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=False)
    one = simulate(ToyCost(), base, Load(100, 10, 1))
    four = simulate(ToyCost(), dataclasses.replace(base, stream_interval=4), Load(100, 10, 1))
    step = 1e-3 + 1e-6
    assert sorted(four.itl_s) == pytest.approx([step, 4 * step, 4 * step])
    assert len(one.itl_s) == 9
    assert four.ttft_s == pytest.approx(one.ttft_s) and four.tpot_s == pytest.approx(one.tpot_s)
    assert four.e2e_s == pytest.approx(one.e2e_s)
    # a burst under load: each request's chunk gaps add up to its e2e - TTFT, 4 of them (tokens 11, 21, 31, 37)
    res = simulate(ToyCost(), dataclasses.replace(BIG, stream_interval=10), Load(700, 37, 8))
    assert len(res.itl_s) == 8 * 4
    assert res.itl_s.sum() == pytest.approx((res.e2e_s - res.ttft_s).sum(), rel=1e-9)


def test_releases_before_0_19_admit_a_prompt_whose_first_chunk_fits():
    """Two prompts of 4,000 tokens at once, budget 1,024 a step, 300 blocks of 16 (4,800 tokens): the whole second
    prompt (250 blocks) cannot join while the first holds its 250. vLLM 0.19+ (scheduler_reserve_full_isl) keeps it
    waiting: the first prefills in 3 full steps and one of 928 tokens (3 x 2.024 + 1.928 = 8.000 ms). Before 0.19 the
    second's first chunk (96 tokens, 6 blocks) is free, so it joins the fourth step (4 x 2.024 = 8.096 ms) and, when
    the pool runs dry under it, it is preempted and recomputed: the thrash vllm#37307 describes."""
    from kvcalc.engines.vllm_versions import reserve_full_prompt_default

    assert not reserve_full_prompt_default("0.18.0") and reserve_full_prompt_default("0.19.0")
    assert reserve_full_prompt_default("0.26.0") and not reserve_full_prompt_default("0.8.5")
    load = Load(4000, 8, 2)
    full = simulate(ToyCost(), EngineConfig(1024, 64, 301, 16, 8192, prefix_caching=False, async_scheduling=False),
                    load)
    chunk = simulate(ToyCost(), EngineConfig(1024, 64, 301, 16, 8192, prefix_caching=False, async_scheduling=False,
                                             reserve_full_prompt=False), load)
    assert full.ttft_s.min() == pytest.approx(3 * 2.024e-3 + 1.928e-3) and full.preemptions == 0
    assert chunk.ttft_s.min() == pytest.approx(4 * 2.024e-3) and chunk.preemptions >= 1
    assert np.sort(full.ttft_s)[1] > full.e2e_s.min()  # 0.19+: the second starts after the first is done
    assert chunk.metrics()["completed"] == full.metrics()["completed"] == 2


def test_sharegpt_lengths_keep_the_means_the_filter_and_a_tail():
    """A ShareGPT run's lengths (serve_sim.sharegpt_lengths): the run's stated means, vllm bench's filter (4 ..
    1,024 prompt tokens, at most 2,048 with the output), and a tail: the longest answer of 200 is several times the
    mean, which is what ends a run at a request rate (its throughput's duration)."""
    import dataclasses

    load = Load(205, 217, 200, request_rate=16.0, dataset="sharegpt")
    prompt, out = sample_lengths(load)
    assert abs(prompt.mean() - 205) < 2 and abs(out.mean() - 217) < 3
    assert prompt.min() >= 4 and out.min() >= 4 and prompt.max() <= 1024 and (prompt + out).max() <= 2048
    assert out.max() > 4 * 217
    fixed = sample_lengths(dataclasses.replace(load, dataset="random"))
    assert fixed[1].max() == 217  # the random dataset at range ratio 0 keeps every length
    # the same seed draws the same run
    assert (sample_lengths(load)[1] == out).all()


def test_sglang_result_lag_runs_the_decode_step_built_for_finished_requests():
    """SGLang's overlap loop (EngineConfig.result_lag; sglang 0.5.14 scheduler.py:1546-1592): step k+1 is built
    before step k's results are processed, so when a lone request finishes at step k the GPU still runs one decode
    step of it (1 ms + 1 us here). The closed loop's next prompt, reaching the engine 0.2 ms after the finish, starts
    after that step (TTFT 1.001 ms + its prefill); one reaching it 5 ms after finds the step done (no change)."""
    base = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=True, prefill_first=True)
    lagged = dataclasses.replace(base, result_lag=True)
    load = Load(100, 5, 2, max_concurrency=1)
    prefill = 1e-3 + 100e-6
    a, b = simulate(ToyCost(), base, load, frontend_s=0.2e-3), simulate(ToyCost(), lagged, load, frontend_s=0.2e-3)
    assert a.ttft_s[1] == pytest.approx(0.2e-3 + prefill)
    assert b.ttft_s[1] == pytest.approx(1e-3 + 1e-6 + prefill)
    assert b.ttft_s[0] == pytest.approx(a.ttft_s[0]) and b.tpot_s == pytest.approx(a.tpot_s)
    late_a, late_b = (simulate(ToyCost(), c, load, frontend_s=5e-3) for c in (base, lagged))
    assert late_b.ttft_s == pytest.approx(late_a.ttft_s)


@dataclass
class FloorCost(ToyCost):
    """ToyCost with SGLang's piecewise prefill floor: a step with a prefill chunk takes at least 5 ms of CPU."""

    prefill_floor_s: float = 5e-3

    def step_s(self, decodes, decode_context, chunks=(), sampled=None):
        t = super().step_s(decodes, decode_context, chunks, sampled)
        return max(t, self.prefill_floor_s) if chunks else t


def test_sglang_result_lag_sends_a_steps_first_tokens_after_the_next_launch():
    """A step's results are processed after the next step is launched: A's prefill (alone: max_prefill_tokens 100
    stops the batch before B) ends at 5 ms, but its first token leaves when B's prefill step, launched from 5 ms,
    has had its 5 ms of CPU: 10 ms. B's first token is followed by a graph-replayed decode (no CPU to wait for)."""
    base = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=True, prefill_first=True,
                        max_prefill_tokens=100)
    a = simulate(FloorCost(), base, Load(100, 3, 2))
    b = simulate(FloorCost(), dataclasses.replace(base, result_lag=True), Load(100, 3, 2))
    assert a.ttft_s == pytest.approx([5e-3, 10e-3])
    assert b.ttft_s == pytest.approx([10e-3, 10e-3])
    assert b.e2e_s == pytest.approx(a.e2e_s)  # the later tokens keep their times
