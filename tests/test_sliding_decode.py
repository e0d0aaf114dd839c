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
