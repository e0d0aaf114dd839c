"""The parser and `kvcalc validate --from-log` on real vLLM 0.26.0 start-up logs from the H200 runs
(docs/validation/data/), with kvcalc's prediction for the same settings within the 1% capacity target."""

import json
from pathlib import Path

import pytest

from kvcalc.validate.vllm_log import compare_log, parse_vllm_log

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_logs"
DATA = Path(__file__).resolve().parent.parent / "docs" / "validation" / "data"
MODELS = {"3b": "llama-3.2-3b", "8b": "llama-3.1-8b", "gemma3-1b": "gemma-3-1b"}


def observed_rows():
    rows = {}
    for name in ("vllm-gpu0.jsonl", "vllm-gpu1.jsonl"):
        for line in (DATA / name).read_text().splitlines():
            r = json.loads(line)
            rows[r["case_id"]] = r
    return rows


REAL = sorted(FIXTURES.glob("real_v0.26.0_*.log"))


def test_real_logs_are_committed():
    assert len(REAL) >= 4


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_parser_reads_what_the_engine_held(path):
    case = path.stem.removeprefix("real_v0.26.0_")
    internals = observed_rows()[case]["observed"]["internals"]
    parsed = parse_vllm_log(path.read_text())
    values = parsed["values"]
    assert parsed["version"] == "0.26.0"
    assert values["kv_cache_tokens"] == internals["kv_cache_size_tokens"]
    assert values["max_num_batched_tokens"] == internals["max_num_batched_tokens"]
    # "Available KV cache memory: 118.5 GiB" is printed with 2 significant decimals at most
    assert abs(values["available_kv_bytes"] - internals["available_kv_cache_memory_bytes"]) < 0.01 * 2**30


@pytest.mark.parametrize("path", [p for p in REAL if p.stem.split("_v-")[1].split("-")[0] in MODELS],
                         ids=lambda p: p.stem)
def test_prediction_within_one_percent_of_logged_capacity(path):
    model = MODELS[path.stem.split("_v-")[1].split("-")[0]]
    rows = compare_log(parse_vllm_log(path.read_text()), model, "h200")
    by_name = {r["quantity"]: r for r in rows}
    tokens = by_name["logged KV cache tokens"]
    assert tokens["error"] is not None and abs(tokens["error"]) < 0.01
