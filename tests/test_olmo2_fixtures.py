"""OLMo 2 (issue 9.3): the published config.json of the 7B, 13B and 32B read by kvcalc, with per-token KV bytes
computed by hand (tests/fixtures/configs/allenai--OLMo-2-*.json; SOURCES.md says where each copy comes from).

The checkpoints say torch_dtype float32; vLLM's dtype "auto" serves a float32 checkpoint in 16 bits
(config/model.py _get_and_verify_dtype) and transformers' plans here load bf16, so the cache is 2 bytes per element.
OLMo 2 is plain full attention (post-norm blocks, a full-width RMSNorm on q and k that caches nothing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc.engines.vllm_specs import vllm_bytes_per_token
from kvcalc.formats import kv_format
from kvcalc.model import spec_from_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "configs"

# (fixture, layers, KV heads, bytes per token by hand: layers x KV heads x head_dim 128 x 2 (K, V) x 2 B, size of
# the hub file in bytes as its page states)
CASES = [
    ("allenai--OLMo-2-1124-7B.json", 32, 32, 32 * 32 * 128 * 2 * 2, 629),  # 524,288 B: MHA, no GQA
    ("allenai--OLMo-2-1124-13B.json", 40, 40, 40 * 40 * 128 * 2 * 2, 623),  # 819,200 B
    ("allenai--OLMo-2-0325-32B.json", 64, 8, 64 * 8 * 128 * 2 * 2, 649),  # 262,144 B: the 32B has GQA (8 KV heads)
]


@pytest.mark.parametrize("name, layers, kv_heads, per_token, size", CASES, ids=[c[0] for c in CASES])
def test_olmo2_cache_bytes_by_hand(name, layers, kv_heads, per_token, size):
    path = FIXTURES / name
    assert len(path.read_bytes()) == size  # the copy has the byte size the hub page shows
    spec = spec_from_config(json.loads(path.read_text()), name)
    assert spec.model_type == "olmo2" and spec.layer_kinds == {"full"}
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (layers, kv_heads, 128)
    assert vllm_bytes_per_token(spec.layers, kv_format("auto"), 2) == per_token


def test_the_plan_serves_float32_checkpoints_in_16_bits():
    code, out, _ = invoke(["plan", "--model", str(FIXTURES / "allenai--OLMo-2-1124-7B.json"), "--gpu", "h200",
                           "--context", "4096", "--json"])
    assert code == 0
    rows = {(r["engine"], r["config"]): r for r in json.loads(out)["rows"]}
    assert rows["vllm", "baseline"]["kv_bytes_per_token"] == rows["hf", "baseline"]["kv_bytes_per_token"] == 524_288
    assert rows["vllm", "fp8-kv"]["kv_bytes_per_token"] == 262_144
