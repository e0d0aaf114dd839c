"""PyTorch's caching-allocator rounding (kvcalc/engines/torch_allocator.py), by hand, and what it adds to a rank's
weights in SGLang's free-memory accounting."""

from kvcalc.catalog import load_model
from kvcalc.engines import sglang as S
from kvcalc.engines.torch_allocator import reserved_bytes, rounding_bytes
from kvcalc.formats import kv_format, weight_format
from kvcalc.units import MiB


def test_segments_by_hand():
    assert reserved_bytes([17.5 * MiB]) == 18 * MiB  # >= 10 MiB: its own segment, rounded up to 2 MiB
    assert reserved_bytes([10 * MiB]) == 10 * MiB
    assert reserved_bytes([9 * MiB, 8 * MiB]) == 20 * MiB  # 1-10 MiB share a 20 MiB segment
    assert reserved_bytes([9 * MiB, 8 * MiB, 9 * MiB]) == 40 * MiB  # 3 MiB left: the third opens another
    assert reserved_bytes([0.5 * MiB] * 4) == 2 * MiB  # up to 1 MiB: 2 MiB segments
    assert reserved_bytes([0.5 * MiB] * 5) == 4 * MiB
    assert reserved_bytes([100]) == 2 * MiB and rounding_bytes([1024 * MiB]) == 0


def test_qwen25_32b_tp4_rounding_by_hand():
    """Per rank at TP 4 in bf16: qkv 5120 x 1792 = 17.5 MiB -> 18, o_proj 1280 x 5120 = 12.5 -> 14, gate_up
    5120 x 13824 = 135 -> 136, down 6912 x 5120 = 67.5 -> 68: 3.5 MiB per layer x 64; the embedding and the lm_head
    38,016 x 5120 = 371.25 MiB -> 372 each: 225.5 MiB in all (the public 4 x L4 log loads 15.54 GiB against 15.27 GiB
    of parameters)."""
    spec = load_model("qwen2.5-32b")
    s = S.SglangSettings(weights=weight_format("bf16"), kv=kv_format("auto"), tensor_parallel=4)
    assert S.allocator_rounding_bytes(spec, s) == int(225.5 * MiB)
    one = S.SglangSettings(weights=weight_format("bf16"), kv=kv_format("auto"))
    assert S.allocator_rounding_bytes(load_model("llama-3.1-8b"), one) == 0  # every shard a multiple of 2 MiB
