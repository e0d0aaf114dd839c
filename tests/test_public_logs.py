"""kvcalc's vLLM log parser on real start-up logs that people posted publicly (tests/fixtures/vllm_logs/public/).

index.json records, for every log, what the post states: settings and the observed figures (GiB as printed). These
tests read each log with kvcalc.validate.vllm_log.parse_vllm_log and check that the parser returns exactly the figures a
person reads off the same lines. V0-engine logs ("# GPU blocks: N, # CPU blocks: M", the old profiling wordings) are
read too (0.4-0.5 "Loading model weights took", 0.6.3-0.6.4 one-line and 0.6.5 multi-line "Memory profiling results",
0.7-0.8 three-line profiling message, "# GPU blocks"). Terminal-wrapped lines (a ~140-column capture) are joined. Figures the parser is known to miss on a real log (wrapped
lines, newest wordings) are listed per log in index.json "known_parser_gaps" and run as strict xfails, so the test flips
the day the parser learns them.
"""

import functools
import json
from pathlib import Path

import pytest

from kvcalc.validate.vllm_log import gib_to_bytes, parse_vllm_log

PUBLIC = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"
INDEX = json.loads((PUBLIC / "index.json").read_text())["logs"]
BY_ID = {e["id"]: e for e in INDEX}

# index "observed" key -> (parser "values" key, converter from the index's printed number)
PARSED_AS = {
    "kv_cache_tokens": ("kv_cache_tokens", int),
    "num_gpu_blocks": ("num_gpu_blocks", int),
    "max_concurrency": ("max_concurrency", float),
    "concurrency_max_model_len": ("concurrency_max_model_len", int),
    "weights_gib": ("weights_bytes", gib_to_bytes),
    "available_kv_gib": ("available_kv_bytes", gib_to_bytes),
    "activation_gib": ("activation_bytes", gib_to_bytes),
    "non_torch_gib": ("non_torch_bytes", gib_to_bytes),
    "cuda_graph_gib": ("graph_capture_bytes", gib_to_bytes),
    "total_gpu_memory_gib": ("total_memory_bytes", gib_to_bytes),
    "requested_memory_gib": ("requested_memory_bytes", gib_to_bytes),
}


def _parsed(entry):
    return _parse_file(entry["file"])


@functools.lru_cache(maxsize=None)
def _parse_file(name):
    return parse_vllm_log((PUBLIC / name).read_text(encoding="utf-8"))


def _cases(known_gap: bool):
    for e in INDEX:
        for key, value in e["observed"].items():
            if value is None or key not in PARSED_AS or (key in e["known_parser_gaps"]) != known_gap:
                continue
            if key in e["observed_outside_excerpt"]:  # quoted in the post's prose, not in the kept lines
                continue
            marks = []
            if known_gap:
                marks.append(pytest.mark.xfail(strict=True, reason=e["known_parser_gaps"][key]))
            yield pytest.param(e["id"], key, id=f"{e['id']}:{key}", marks=marks)


def test_corpus_is_indexed_and_cited():
    files = {p.name for p in PUBLIC.glob("*.log")}
    assert files == {e["file"] for e in INDEX}, "every log has exactly one index entry"
    assert len(INDEX) >= 25
    assert len({e["id"] for e in INDEX}) == len(INDEX)
    for e in INDEX:
        # GitHub (issue, PR, or a file at a fixed commit), or a blog post the entry marks as such
        assert e["source_url"].startswith("https://github.com/") or (
            e["source_url"].startswith("https://") and e.get("source_kind") == "blog"), e["id"]
        assert e["notes"], e["id"]
        assert any(v is not None for v in e["observed"].values()), f"{e['id']}: a log must state at least one figure"
        for key in e["known_parser_gaps"]:
            assert e["observed"][key] is not None, f"{e['id']}: gap {key} names a figure the log does not state"


def test_corpus_spans_versions_gpus_and_kinds():
    families = {e["version_family"] for e in INDEX}
    assert {"v0", "v1-early", "v1"} <= families
    gpus = {e["gpu"] for e in INDEX if e["gpu"]}
    assert len(gpus) >= 6, gpus
    kinds = " ".join(str(e["model_kind"]) for e in INDEX)
    assert "moe" in kinds and "dense" in kinds
    quants = " ".join(str(e["quantization"]) for e in INDEX)
    for q in ("awq", "fp8", "bitsandbytes"):
        assert q in quants
    assert any((e["tp"] or 1) > 1 for e in INDEX) and any((e["pp"] or 1) > 1 for e in INDEX)


@pytest.mark.parametrize("log_id,key", list(_cases(known_gap=False)))
def test_parser_reads_the_posted_figure(log_id, key):
    entry = BY_ID[log_id]
    parsed_key, convert = PARSED_AS[key]
    values = _parsed(entry)["values"]
    assert values.get(parsed_key) == convert(entry["observed"][key])


@pytest.mark.parametrize("log_id,key", list(_cases(known_gap=True)))
def test_known_parser_gaps_are_still_gaps(log_id, key):
    """Strict xfail: passes (and so fails the suite) once the parser reads the figure; then drop the gap entry."""
    entry = BY_ID[log_id]
    parsed_key, convert = PARSED_AS[key]
    assert _parsed(entry)["values"].get(parsed_key) == convert(entry["observed"][key])


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["id"]) for e in INDEX])
def test_parser_reads_the_version_the_log_prints(entry):
    expected = entry["vllm_version"] if entry["version_source"] == "log" else None
    assert _parsed(entry)["version"] == expected
