"""`kvcalc validate --bench`: a real `vllm bench serve` result (format from vLLM's serve.py) against kvcalc's
workload prediction, and one-line refusals (another model, missing lengths, not a bench file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.cli import main
from kvcalc.validate.bench import read_bench, same_model, workload_of

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_bench" / "dennislee-a100-qwen2-7b-u050-n10-1024-1024.json"
CONFIG = Path(__file__).parent / "fixtures" / "configs" / "Qwen2-7B-Instruct.json"
ARGS = ["validate", "--bench", str(FIXTURE), "--model", str(CONFIG), "--gpu", "a100-80gb", "--util", "0.5",
        "--max-model-len", "16384", "--vllm-version", "0.10.1"]


def test_reads_the_serve_result_and_its_workload():
    data = read_bench(str(FIXTURE))
    assert data["kind"] == "serve" and data["model_id"] == "Qwen2-7B-Instruct"
    wl = workload_of(data, None, None)
    # 10239 / 10 input tokens, 10240 / 10 output tokens; rate inf with no max concurrency: all 10 at once
    assert (wl.input_len, wl.output_len, wl.concurrency, wl.request_rate, wl.burst) == (1024, 1024, 10, None, True)


def test_model_names_match_loosely():
    assert same_model("Qwen/Qwen2-7B-Instruct", "qwen2-7b", None)
    assert same_model("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct")
    assert not same_model("Qwen2-7B-Instruct", "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct")


def test_compares_ttft_tpot_and_throughput(capsys):
    main([*ARGS, "--json"])
    out = json.loads(capsys.readouterr().out)
    got = {r["quantity"]: r for r in out["comparison"]}
    assert set(got) == {"ttft", "p99_ttft", "tpot", "output_tokens_per_s"}  # the file has no mean_e2el_ms
    assert got["ttft"]["measured"] == 488.52 and got["tpot"]["measured"] == 13.47
    for r in got.values():
        assert r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1)


def _fails(args, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    return err


def test_a_bench_of_another_model_is_refused(capsys):
    err = _fails(["validate", "--bench", str(FIXTURE), "--model", "llama-3.1-8b", "--gpu", "a100-80gb"], capsys)
    assert "not of --model llama-3.1-8b" in err


def test_throughput_result_needs_lengths_and_bad_files_are_one_line(tmp_path, capsys):
    tp = tmp_path / "tp.json"
    tp.write_text(json.dumps({"elapsed_time": 10.0, "num_requests": 100, "total_num_tokens": 204800,
                              "requests_per_second": 10.0, "tokens_per_second": 20480.0}))
    assert "--input-len" in _fails(["validate", "--bench", str(tp), "--model", "llama-3.2-3b", "--gpu", "h200"], capsys)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not JSON" in _fails(["validate", "--bench", str(bad), "--model", "llama-3.2-3b", "--gpu", "h200"], capsys)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    assert "neither" in _fails(["validate", "--bench", str(other), "--model", "llama-3.2-3b", "--gpu", "h200"], capsys)


def test_throughput_result_compares_tokens_per_s(tmp_path, capsys):
    tp = tmp_path / "tp.json"
    tp.write_text(json.dumps({"elapsed_time": 10.0, "num_requests": 100, "total_num_tokens": 204800,
                              "requests_per_second": 10.0, "tokens_per_second": 20480.0}))
    main(["validate", "--bench", str(tp), "--model", "llama-3.2-3b", "--gpu", "h200", "--input-len", "1024",
          "--output-len", "1024", "--json"])
    rows = json.loads(capsys.readouterr().out)["comparison"]
    assert [r["quantity"] for r in rows] == ["tokens_per_s"]


def test_reads_a_verbatim_benchmark_serving_file_with_its_writers_metadata():
    """nerdalert/vllm-bench-automation's results.json (line 1, verbatim): benchmark_serving.py of May 2025 with
    `--metadata` keys at the top level and the `request_goodput:` key that version wrote."""
    data = read_bench(str(FIXTURE.parent / "nerdalert-4xl40s-llama32-3b-10qps.json"))
    assert data["kind"] == "serve" and data["gpu"] == "4xNVIDIA_L40S" and "request_goodput:" in data
    wl = workload_of(data, None, None)
    # 299,700 / 300 input tokens; 80,945 / 300 = 269.8 output tokens (ignore_eos off: outputs end early)
    assert (wl.input_len, wl.output_len, wl.request_rate, wl.concurrency, wl.burst) == (999, 270, 10.0, None, False)
