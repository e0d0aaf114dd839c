"""Issue 18 item 1, the corpus's sources added for the thin GPUs (T4, L4, A100, A10G, H20, B200, MI300X): for one row of
each source, the figure read back from the row's own quoted line (by its label, or its table column) is the row's
value, and the lengths the row states are the quoted totals over the quoted prompt count; and the server flags a row
states reach the plan request (the KV pool vLLM logged for the source's --gpu-memory-utilization)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"
NUM = r"(\d[\d,]*\.?\d*)"


def _rows() -> dict[str, dict]:
    return {r["id"]: r for r in (json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip())}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _labelled(quote: str, label: str) -> float:
    """The number printed after `label:` ('Mean TTFT (ms): 21147.20', '"tokens_per_second": 476.49...')."""
    m = re.search(re.escape(label) + r"\"?:\s*" + NUM, quote)
    assert m, (label, quote)
    return _number(m.group(1))


def _cell(quote: str, column: str, first: str | None = None) -> float:
    """The number in `column` of the quote's data row (the one whose first cell is `first`, else the last): a
    markdown table quoted as its header row followed by its data row(s), '| a | b | | x | y |'."""
    body = quote[quote.index("|"):quote.rindex("|") + 1]
    table = [[c.strip() for c in seg.strip().strip("|").split("|")] for seg in re.split(r"\|\s+\|", body)]
    header, data = table[0], [r for r in table[1:] if first is None or r[0] == first]
    assert column in header and data, (column, quote)
    return _number(re.match(NUM, data[-1][header.index(column)]).group(1))


# (row id, how its value reads from its quote, the scale from the quote's unit to the row's)
CASES = [
    ("gpustack-gptoss20b-a100-random4k-tpot", lambda q: _labelled(q, "Mean TPOT (ms)"), 1),
    ("gpustack-gptoss120b-a100-sharegpt-c4-output", lambda q: _labelled(q, "Output token throughput (tok/s)"), 1),
    ("gpustack-qwen3-32b-a100-fp8-sharegpt1000-ttft", lambda q: _labelled(q, "Mean TTFT (ms)"), 1),
    ("gpustack-qwen3-235b-a100-fp8tp4-random2k-output", lambda q: _labelled(q, "Output token throughput (tok/s)"), 1),
    ("dstack405b-mi300x-in2048-out2048-n32", lambda q: _labelled(q, "tokens_per_second"), 1),
    ("dstack405b-h100-sxm-in128-out2048-n64", lambda q: _labelled(q, "tokens_per_second"), 1),
    ("recipes-dsv32-h20-rate10-ttft", lambda q: _labelled(q, "Mean TTFT (ms)"), 1),
    ("llm-price-compass-a10g-tp2-output", lambda q: _labelled(q, "Output token throughput (tok/s)"), 1),
    ("vllm43232-b200-qwen3-235b-c64-output", lambda q: _labelled(q, "Output token throughput (tok/s)"), 1),
    ("dennislee22-qwen2-7b-a100-test5-in1024-out1024-n200-tpot", lambda q: _labelled(q, "Mean TPOT (ms)"), 1),
    ("fxassist-t4-awq-tp1-c16-long-output", lambda q: _cell(q, "Throughput (tokens/s)", "awq, c=16, long"), 1),
    ("fxassist-t4-fp16-tp2-c1-long-ttft", lambda q: _cell(q, "TTFT p50 (s)", "TP=2, c=1, long"), 1000),
    ("bpt-l4-qwen3-1.7b-int8-decode-c16-output", lambda q: _cell(q, "INT8 W8A8", "16"), 1),
    ("bpt-l4-qwen3-0.6b-gptq-long8k-ttft", lambda q: _cell(q, "TTFT 8k (ms)"), 1),
    ("bpt-l4-qwen3-1.7b-fp8-decode-c1-tpot", lambda q: _cell(q, "Measured TPOT (ms)"), 1),
    ("bpt-l4-qwen3-1.7b-fp8kv-long32k-tpot", lambda q: _cell(q, "TPOT at 32k (ms)"), 1),
    ("tt340-a100-qwen3-30b-a3b-2048-128-c1-ttft", lambda q: _cell(q, "TTFT (ms)"), 1),
]


@pytest.mark.parametrize("row_id,read,scale", CASES, ids=[c[0] for c in CASES])
def test_row_value_is_its_quoted_figure(row_id, read, scale):
    row = _rows()[row_id]
    assert read(row["quote"]) * scale == pytest.approx(row["value"], rel=1e-9, abs=1e-9), row_id


def test_every_new_source_has_a_checked_row():
    sources = {_rows()[c[0]]["source"] for c in CASES}
    assert sources == {"gpustack-gptoss20b-a100", "gpustack-gptoss120b-a100", "gpustack-qwen3-32b-a100",
                       "gpustack-qwen3-235b-a100", "dstack-405b-h100-mi300x", "vllm-recipes-dsv32-h20",
                       "llm-price-compass-a10g", "vllm-43232-b200", "dennislee22-vllm-benchmarking", "fxassist-t4",
                       "bytes-per-token-l4", "tenstorrent-gpu-ref-qwen3-a100"}


@pytest.mark.parametrize("row_id", ["gpustack-qwen3-235b-a100-random4k-tpot", "recipes-dsv32-h20-rate10-output",
                                    "dennislee22-qwen2-7b-a100-test4-in1024-out1024-n50-output",
                                    "vllm43232-b200-qwen3-235b-c64-ttft", "llm-price-compass-a10g-tp2-output"])
def test_stated_lengths_are_the_quoted_totals_over_the_prompts(row_id):
    row = _rows()[row_id]
    q = row["quote"]
    n = _labelled(q, "Successful requests")
    assert n == row["num_prompts"]
    assert _labelled(q, "Total input tokens") / n == pytest.approx(row["input_len"], abs=0.01)
    assert _labelled(q, "Total generated tokens") / n == pytest.approx(row["output_len"], abs=0.01)


def test_dstack_totals_are_the_stated_lengths():
    """benchmark_throughput's total_num_tokens is num_requests x (input + output): the row's fixed lengths."""
    for r in _rows().values():
        if r["source"] == "dstack-405b-h100-mi300x":
            n = _labelled(r["quote"], "num_requests")
            assert n == r["num_prompts"] == r["concurrency"]
            assert _labelled(r["quote"], "total_num_tokens") == n * (r["input_len"] + r["output_len"])


def test_stated_server_flags_reach_the_plan():
    """A row's --gpu-memory-utilization / --max-num-seqs / --enforce-eager reach the vLLM estimate the report
    predicts with: the KV pool kvcalc sizes at the source's 0.25 and 0.5 is the one vLLM logged for them (the
    source's startup logs: 'GPU KV cache size: 93,872 tokens' / '464,848 tokens'), not the default 0.9's."""
    report = load_script("speed_corpus_report")
    rows = _rows()
    low = report.setup(rows["dennislee22-qwen2-7b-a100-test4-in1024-out1024-n100-tpot"])[6]
    high = report.setup(rows["dennislee22-qwen2-7b-a100-test5-in1024-out1024-n100-tpot"])[6]
    assert low.kv_capacity_tokens == pytest.approx(93_872, rel=0.10)
    assert high.kv_capacity_tokens == pytest.approx(464_848, rel=0.10)
    t4 = report.setup(rows["fxassist-t4-fp16-tp1-c16-long-output"])
    assert t4[6].max_num_seqs == 32
    assert report.setup(rows["dstack405b-mi300x-in128-out2048-n16"])[5]["enforce_eager"] is True
    assert report.setup(rows["dstack405b-h100-sxm-in128-out2048-n16"])[5]["enforce_eager"] is False
