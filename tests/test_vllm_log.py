"""The vLLM start-up log parser, on fixtures.

Fixtures named synthetic_* are hand-written from vLLM's format strings (0.26.0 source lines cited in
kvcalc/validate/vllm_log.py; older wordings from 0.7-0.10 releases): they test the parser only and are never
validation evidence. Real logs from the GPU runs go next to them (any other name) and are picked up by the generic
tests below: every real 0.26 log must yield the core figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc.errors import UsageError
from kvcalc.validate.vllm_log import GiB, clean_log, compare_log, gib_to_bytes, parse_vllm_log

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_logs"
ALL_LOGS = sorted(FIXTURES.glob("*.log"))
REAL_LOGS = [p for p in ALL_LOGS if not p.name.startswith("synthetic_")]


def parse(name: str) -> dict:
    return parse_vllm_log((FIXTURES / name).read_text())


def test_fixtures_exist_and_synthetic_ones_say_so():
    assert ALL_LOGS
    for path in ALL_LOGS:
        if path.name.startswith("synthetic_"):
            assert "SYNTHETIC" in path.read_text().splitlines()[0]


def test_clean_log_strips_colours_and_prefixes():
    raw = ("\x1b[1;36m(EngineCore_DP0 pid=4242)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 12:00:06 "
           "[gpu_model_runner.py:5348] Model loading took 6.02 GiB memory and 1.5 seconds\n"
           "(VllmWorker rank=1 pid=77) WARNING 11-29 12:00:07 [utils.py:1] x\n"
           "INFO 03-14 09:13:07 worker.py:267] model weights take 14.99GiB;")
    assert clean_log(raw).splitlines() == ["Model loading took 6.02 GiB memory and 1.5 seconds", "x",
                                           "model weights take 14.99GiB;"]


def test_gib_values_become_bytes():
    assert gib_to_bytes("110.03") == round(110.03 * 2**30)
    assert gib_to_bytes(0) == 0


def test_v026_eager_fp8_every_memory_line():
    p = parse("synthetic_v0.26.0_llama-3.2-3b_fp8_eager_u085.log")
    v, s = p["values"], p["settings"]
    assert p["version"] == "0.26.0"
    assert s["kv_cache_dtype"] == "fp8" and s["enforce_eager"] is True and s["max_model_len"] == 8192
    assert s["gpu_memory_utilization"] == 0.85  # from "non-default args"
    assert s["tensor_parallel_size"] == 1 and s["attention_backend"] == "FLASH_ATTN"
    assert v["weights_bytes"] == gib_to_bytes(6.02) and v["load_seconds"] == pytest.approx(1.532198)
    assert v["available_kv_bytes"] == gib_to_bytes(110.03)
    assert v["kv_cache_tokens"] == 2_060_080
    assert v["max_concurrency"] == 251.48 and v["concurrency_max_model_len"] == 8192
    assert v["max_num_batched_tokens"] == 16384
    # the "Free memory on device ... Actual usage is ..." summary
    assert v["total_memory_bytes"] == gib_to_bytes(139.8) and v["initial_free_bytes"] == gib_to_bytes(139.24)
    assert v["requested_memory_bytes"] == gib_to_bytes(118.83)
    assert v["activation_bytes"] == gib_to_bytes(2.53) and v["non_torch_bytes"] == gib_to_bytes(0.25)
    assert v["graph_capture_bytes"] == 0  # eager: "0.0 GiB for CUDAGraph memory"
    assert v["kv_cache_memory_to_requested_bytes"] == 118009257984
    assert v["kv_cache_memory_to_gpu_bytes"] == 139244752896
    assert v["kv_cache_in_use_bytes"] == gib_to_bytes(110.03)
    assert v["init_engine_seconds"] == 4.87
    assert "Available KV cache memory: 110.03 GiB" in p["raw"]["available_kv_bytes"]
    assert p["errors"] == []


def test_v026_cuda_graph_lines():
    p = parse("synthetic_v0.26.0_llama-3.1-8b_auto_graphs_u090.log")
    v, s = p["values"], p["settings"]
    assert s["enforce_eager"] is False and s["kv_cache_dtype"] == "auto"
    assert s["gpu_memory_utilization"] == 0.9  # not in non-default args: from the summary / cudagraph advice line
    assert v["cudagraph_estimate_bytes"] == gib_to_bytes(0.61)
    assert v["graph_capture_seconds"] == 9 and v["graph_capture_bytes"] == gib_to_bytes(0.58)
    assert v["cudagraph_pool_actual_bytes"] == gib_to_bytes(0.58)
    assert v["cudagraph_pool_estimated_bytes"] == gib_to_bytes(0.61)
    assert v["equivalent_util_without_cudagraph_profiling"] == 0.8956
    assert s["cudagraph_groups"].startswith("PIECEWISE=67")


def test_v07_multiline_profile_and_v0_blocks():
    p = parse("synthetic_v0.7.3_v0engine_multiline_profile.log")
    v, s = p["values"], p["settings"]
    assert p["version"] == "0.7.3"
    assert s["gpu_memory_utilization"] == 0.9 and s["max_model_len"] == 32768
    assert v["total_memory_bytes"] == gib_to_bytes(79.11)
    assert v["requested_memory_bytes"] == gib_to_bytes(71.20)
    assert v["weights_profiled_bytes"] == gib_to_bytes(14.99)
    assert v["weights_bytes"] == gib_to_bytes(14.9888)  # "Loading model weights took 14.9888 GB" (bytes / 2**30)
    assert v["non_torch_bytes"] == gib_to_bytes(0.35)
    assert v["activation_bytes"] == gib_to_bytes(1.24)
    assert v["available_kv_bytes"] == gib_to_bytes(54.62)
    assert v["num_gpu_blocks"] == 27965
    assert v["max_concurrency"] == 13.65 and v["concurrency_max_model_len"] == 32768


def test_v010_debug_profile_and_summary_in_bytes():
    p = parse("synthetic_v0.10.2_v1_debug_profile.log")
    v, s = p["values"], p["settings"]
    assert p["version"] == "0.10.2"
    assert v["weights_bytes"] == gib_to_bytes(8.8011)  # "Model loading took 8.8011 GiB and ... seconds"
    assert v["non_kv_bytes"] == gib_to_bytes(10.22)
    assert v["activation_bytes"] == gib_to_bytes(1.40)
    assert v["non_torch_bytes"] == gib_to_bytes(0.02)
    assert v["initial_free_bytes"] == gib_to_bytes(23.08)
    assert v["requested_memory_bytes"] == gib_to_bytes(18.82) and s["gpu_memory_utilization"] == 0.8
    assert v["free_after_profiling_bytes"] == gib_to_bytes(14.23)
    assert v["kv_cache_tokens"] == 62_608 and v["max_concurrency"] == 61.14
    assert v["kv_cache_in_use_bytes"] == 9232221491  # "... in use is 9232221491 bytes."
    assert v["kv_cache_memory_to_requested_bytes"] == 8347223347
    assert v["kv_cache_memory_to_gpu_bytes"] == 12923195904


def test_startup_failure_is_recorded():
    p = parse("synthetic_v0.26.0_kv_too_small_error.log")
    assert len(p["errors"]) == 1 and "KV cache is needed" in p["errors"][0]
    assert p["values"]["estimated_max_model_len"] == 26288
    assert p["settings"]["max_model_len"] == 131072


def test_empty_or_foreign_text():
    p = parse_vllm_log("hello\nworld\n")
    assert p["values"] == {} and p["version"] is None and p["errors"] == []


def test_tp_logs_keep_the_first_rank_and_count_repeats():
    line = "(VllmWorker rank={r} pid=1{r}) INFO 11-29 12:00:06 [gpu_model_runner.py:5348] Model loading took {g} GiB memory and 1.0 seconds\n"
    p = parse_vllm_log(line.format(r=0, g="3.01") + line.format(r=1, g="3.02"))
    assert p["values"]["weights_bytes"] == gib_to_bytes(3.01)
    assert p["repeats"]["weights_bytes"] == 2


# ------------------------------------------------------------------------------------------------ comparison


def _rows_by_quantity(rows):
    return {r["quantity"]: r for r in rows}


def test_compare_log_uses_the_logs_total_and_settings():
    p = parse("synthetic_v0.26.0_llama-3.2-3b_fp8_eager_u085.log")
    rows = _rows_by_quantity(compare_log(p, "llama-3.2-3b", "h200"))
    # kvcalc's requested memory = the log's total (139.8 GiB, replacing the profile's) x the log's 0.85
    req = rows["requested memory (total x util)"]
    assert abs(req["predicted"] - gib_to_bytes(139.8) * 0.85) <= 1  # vLLM 0.26 takes the ceil (worker/utils.py:430)
    assert abs(req["error"]) < 1e-4
    assert rows["weights"]["unit"] == "bytes" and abs(rows["weights"]["error"]) < 0.01
    for name in ("available KV memory", "logged KV cache tokens", "max concurrency", "activation peak",
                 "non-torch memory", "max_num_batched_tokens"):
        assert name in rows
        r = rows[name]
        assert r["error"] == pytest.approx((r["predicted"] - r["observed"]) / r["observed"])
    assert "CUDA-graph estimate" not in rows  # eager log states none


def test_compare_log_overrides_win():
    p = parse("synthetic_v0.26.0_llama-3.2-3b_fp8_eager_u085.log")
    fp8 = _rows_by_quantity(compare_log(p, "llama-3.2-3b", "h200"))
    auto = _rows_by_quantity(compare_log(p, "llama-3.2-3b", "h200", kv="auto"))
    # bf16 pages are twice fp8's: about half the tokens for the same KV memory
    ratio = auto["logged KV cache tokens"]["predicted"] / fp8["logged KV cache tokens"]["predicted"]
    assert ratio == pytest.approx(0.5, rel=0.01)


def test_compare_log_graphs_log_has_cudagraph_row():
    p = parse("synthetic_v0.26.0_llama-3.1-8b_auto_graphs_u090.log")
    rows = _rows_by_quantity(compare_log(p, "llama-3.1-8b", "h200"))
    assert rows["CUDA-graph estimate"]["observed"] == gib_to_bytes(0.61)
    assert abs(rows["requested memory (total x util)"]["predicted"] - gib_to_bytes(139.8) * 0.9) <= 1


def test_compare_log_runs_v0_versions_on_v0_rules():
    # issue 10: V0 releases (0.4 - 0.7) have rules now (engines/vllm_versions.py); the V0 log's '# GPU blocks' is
    # compared block for block.
    p = parse("synthetic_v0.7.3_v0engine_multiline_profile.log")
    rows = _rows_by_quantity(compare_log(p, "llama-3.1-8b", "a100-80gb"))
    assert rows["GPU blocks"]["observed"] == 27965 and rows["GPU blocks"]["predicted"] > 0
    with pytest.raises(UsageError, match="0.3.3"):
        compare_log(p, "llama-3.1-8b", "a100-80gb", version="0.3.3")


@pytest.mark.parametrize("path", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_real_logs_yield_the_core_figures(path):  # pragma: no cover - runs once real logs are committed
    p = parse_vllm_log(path.read_text(errors="replace"))
    assert p["version"]
    if p["errors"]:
        return
    for key in ("weights_bytes", "available_kv_bytes", "kv_cache_tokens", "max_concurrency"):
        assert key in p["values"], key
    assert 0 < p["values"]["available_kv_bytes"] < 4096 * GiB


# ------------------------------------------------------------------------------------------------ runner bookkeeping


def _cases():
    return [dict(model="llama-3.2-3b", kv="auto", enforce_eager=True, id="a"),
            dict(model="llama-3.2-3b", kv="fp8", enforce_eager=True, id="b")]


def test_runner_records_one_row_per_case_when_the_worker_dies(tmp_path):
    """A worker that dies at once (here: /bin/false as the interpreter): every case still gets exactly one row."""
    import shutil

    from kvcalc.validate.results import read_jsonl
    from kvcalc.validate.vllm_runner import run_vllm_cases

    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` executable")
    rows = run_vllm_cases(_cases(), tmp_path / "v.jsonl", tmp_path / "logs", per_process=0, python=false)
    assert [r["case_id"] for r in rows] == ["a", "b"]
    assert all(r["status"] == "error" and "worker exit 1" in r["message"] for r in rows)
    assert len(read_jsonl(tmp_path / "v.jsonl")) == 2


def test_runner_skips_cases_past_the_deadline(tmp_path):
    import time

    from kvcalc.validate.vllm_runner import run_vllm_cases

    rows = run_vllm_cases(_cases(), tmp_path / "v.jsonl", tmp_path / "logs", deadline=time.time() + 1)
    assert [(r["case_id"], r["status"]) for r in rows] == [("a", "skipped"), ("b", "skipped")]


def test_merged_kv_capacity_line_of_0_28():
    """vLLM 0.28 prints the capacity and the concurrency on one line (v1/core/kv_cache_utils.py); both are read, as
    are the 0.27+ CUDA-graph lines around them."""
    text = ("(EngineCore pid=7) INFO 09-07 00:14:19 [core.py:123] Initializing a V1 LLM engine (v0.28.1) with config: "
            "model='m', max_seq_len=4096, tensor_parallel_size=1\n"
            "(EngineCore pid=7) INFO 09-07 00:14:25 [gpu_worker.py:586] Available KV cache memory: 17.36 GiB\n"
            "(EngineCore pid=7) INFO 09-07 00:14:25 [kv_cache_utils.py:1879] GPU KV cache size: 650,208 tokens, "
            "Maximum concurrency for 4,096 tokens per request: 158.74x\n")
    values = parse_vllm_log(text)["values"]
    assert values["kv_cache_tokens"] == 650_208
    assert values["max_concurrency"] == 158.74 and values["concurrency_max_model_len"] == 4096
