"""Decode attention of sliding-window layers reads the window, not the whole context (issue 18 part 2).

vLLM's decode kernels skip the key tiles left of a sliding layer's window (Triton unified attention's tile loop,
FlashAttention's window_size = (W - 1, 0)), so a step reads full_bytes x c + window_bytes x min(c, W) per request.
The figures below are computed by hand from Gemma 3 1B's config.json (26 layers, every sixth global: 4 full and
22 sliding layers of window 512; 1 KV head of 256 dims: 2 x 1 x 256 x 2 B = 1,024 B per token and layer in bf16)."""

from __future__ import annotations

import numpy as np
import pytest

from kvcalc import latency
from kvcalc.catalog import load_model
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.step_cost import step_cost
from kvcalc.throughput import decode_speed, decode_windows, effective_context

PER_LAYER = 2 * 1 * 256 * 2  # K and V, one KV head of 256 dims, bf16


@pytest.fixture(scope="module")
def gemma():
    return load_model("gemma-3-1b"), get_gpu("h200"), weight_format("bf16"), kv_format("auto")


def test_windows_are_gemma3_1bs_22_of_26_layers(gemma):
    spec, _, _, kv = gemma
    ((w, share),) = decode_windows(spec, kv)
    assert w == 512 and share == pytest.approx(22 / 26, rel=1e-12)


@pytest.mark.parametrize("context,expected", [
    (300, 26 * PER_LAYER * 300),  # inside the window: every layer reads every token
    (2000, 4 * PER_LAYER * 2000 + 22 * PER_LAYER * 512),  # past it: the sliding layers read 512
    (32768, 4 * PER_LAYER * 32768 + 22 * PER_LAYER * 512),
])
def test_decode_reads_the_window(gemma, context, expected):
    spec, gpu, w, kv = gemma
    for batch in (1, 8):
        d = decode_speed(spec, gpu, "vllm", w, kv, batch, context)
        assert d.kv_bytes_read == pytest.approx(batch * expected, rel=1e-12)
    # the deployment's stored bytes per token (a pool that keeps every token) does not change what is read
    d = decode_speed(spec, gpu, "vllm", w, kv, 1, context, kv_bytes_per_token=26 * PER_LAYER * 0.5)
    assert d.kv_bytes_read == pytest.approx(expected, rel=1e-12)


def test_a_model_without_windows_reads_its_whole_context():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    assert decode_windows(spec, kv_format("auto")) == ()
    d = decode_speed(spec, gpu, "vllm", weight_format("bf16"), kv_format("auto"), 4, 5000)
    assert d.kv_bytes_read == pytest.approx(4 * 5000 * 32 * 2 * 8 * 128 * 2, rel=1e-12)


def test_step_cost_charges_each_request_its_window(gemma):
    """serve_sim's step: the summed decode context is each request's effective context; a decode-only step of
    requests at one context equals decode_speed's step there, on both sides of the window."""
    spec, gpu, w, kv = gemma
    cost = step_cost(spec, gpu, w, kv)
    assert cost.decode_context(np.array([300, 2000])) == pytest.approx(300 + 2000 - 22 / 26 * (2000 - 512))
    stretch = cost.decode_context(np.array([300, 2000]), 400)  # 400 steps, each request a token longer a step
    assert stretch[0] == pytest.approx(300 + 2000 - 22 / 26 * 1488)
    assert stretch[399] == pytest.approx(699 + 2399 - 22 / 26 * (699 - 512 + 2399 - 512))
    for context in (300, 2000):
        one = decode_speed(spec, gpu, "vllm", w, kv, 4, context)
        assert cost.step_s(4, cost.decode_context(np.full(4, context))) == pytest.approx(one.step_s, rel=1e-9)


def test_search_tpot_is_the_mean_over_the_window_edge(gemma):
    """latency.tpot_s (search's screen): the exact mean of decode_speed's step while the context grows from 400
    past the window to 700."""
    spec, gpu, w, kv = gemma
    line = latency.decode_line(spec, gpu, w, kv, 1)
    assert line.windows == decode_windows(spec, kv)
    for batch in (1, 16):
        brute = np.mean([decode_speed(spec, gpu, "vllm", w, kv, batch, c).step_s for c in range(401, 700)])
        scale = latency.weight_time_table(spec, gpu, w, kv, 1, batch)[batch]
        got = latency.tpot_s(line, 400, 300, batch_scale=batch, mem0=line.mem0 * scale)
        assert got == pytest.approx(brute, rel=1e-9)
    assert effective_context(line.windows, 700) == pytest.approx(700 - 22 / 26 * 188)


# Llama 4's chunked local layers (attention_chunk_size 8,192): a decode token of context c (position c - 1) reads its
# own chunk, ((c - 1) mod 8192) + 1 keys (vLLM's make_local_attention_virtual_batches: tokens_in_last_block =
# chunk + seq_len % -chunk). Hand figures from Llama 4 Scout's config.json: 48 layers, every 4th NoPE layer full
# (12), the other 36 chunked; 8 KV heads of 128 dims: 2 x 8 x 128 x 2 B = 4,096 B per token and layer in bf16.
SCOUT_LAYER = 2 * 8 * 128 * 2


@pytest.fixture(scope="module")
def scout():
    return load_model("llama-4-scout"), get_gpu("h200"), weight_format("fp8"), kv_format("auto")


def test_chunks_are_scouts_36_of_48_layers(scout):
    spec, _, _, kv = scout
    assert decode_windows(spec, kv) == ((-8192, 36 / 48),)  # W < 0: a chunk, not a sliding window


@pytest.mark.parametrize("context,chunk_read", [
    (5000, 5000),  # in the first chunk: every layer reads every token
    (8192, 8192),  # the first chunk's last token
    (8193, 1),  # the second chunk's first token reads itself only
    (20000, 3616),  # 19,999 mod 8,192 + 1
])
def test_decode_reads_its_own_chunk(scout, context, chunk_read):
    spec, gpu, w, kv = scout
    expected = 12 * SCOUT_LAYER * context + 36 * SCOUT_LAYER * chunk_read
    for batch in (1, 8):
        d = decode_speed(spec, gpu, "vllm", w, kv, batch, context)
        assert d.kv_bytes_read == pytest.approx(batch * expected, rel=1e-12)


def test_serve_sim_step_charges_each_request_its_chunk(scout):
    """step_cost.decode_context (serve_sim's step): 8,193 and 20,000 tokens read 0.25 x c + 0.75 x their chunk's
    tokens: 2,048.25 + 0.75 x 1 and 5,000 + 0.75 x 3,616, 9,761 in all; over the next steps each request's chunk
    read grows by one a step and drops to 1 past a boundary."""
    spec, gpu, w, kv = scout
    cost = step_cost(spec, gpu, w, kv)
    assert cost.decode_context(np.array([8193, 20000])) == pytest.approx(9761)
    stretch = cost.decode_context(np.array([8190, 20000]), 5)  # 8190 crosses 8192 -> 8193 at step 3
    chunk = [8190, 8191, 8192, 1, 2]
    for j in range(5):
        want = 0.25 * (8190 + j) + 0.75 * chunk[j] + 0.25 * (20000 + j) + 0.75 * (3616 + j)
        assert stretch[j] == pytest.approx(want)
    one = decode_speed(spec, gpu, "vllm", w, kv, 4, 20000)
    assert cost.step_s(4, cost.decode_context(np.full(4, 20000))) == pytest.approx(one.step_s, rel=1e-9)


def test_search_tpot_is_the_mean_over_the_chunk_boundary(scout):
    """latency.tpot_s (search's screen): the exact mean of decode_speed's step over the decode's positions, 8,001 to
    8,399 (a chunk boundary at 8,192), and over 20,000 tokens of output (two boundaries). By hand, the mean read of
    the first: 0.25 x 8,200 + 0.75 x (8,001 + ... + 8,192 + 1 + ... + 207) / 399 = 2,050 + 0.75 x 1,576,056 / 399."""
    spec, gpu, w, kv = scout
    line = latency.decode_line(spec, gpu, w, kv, 1)
    assert line.windows == decode_windows(spec, kv)
    mean_read = np.mean([effective_context(line.windows, c) for c in range(8001, 8400)])
    assert mean_read == pytest.approx(2050 + 0.75 * 1_576_056 / 399, rel=1e-12)
    for batch in (1, 16):
        scale = latency.weight_time_table(spec, gpu, w, kv, 1, batch)[batch]
        for i, o in ((8000, 400), (16000, 20000)):
            brute = np.mean([decode_speed(spec, gpu, "vllm", w, kv, batch, c).step_s for c in range(i + 1, i + o)])
            got = latency.tpot_s(line, i, o, batch_scale=batch, mem0=line.mem0 * scale)
            assert got == pytest.approx(brute, rel=1e-9)
