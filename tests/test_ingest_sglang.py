"""scripts/gpu_v5/ingest_sglang.py: a result tarball laid out as sglang_serve.py writes it on the host becomes
runs.jsonl rows and a comparison. No H200 run exists yet, so the tarball is built from a public SGLang 0.4 start-up
log (tests/fixtures/sglang_logs/public, Llama-3.1-8B on an 80 GB GPU) and bench lines in bench_serving's
--output-file layout; what is checked is the plumbing: which rows are kept, what the log parse gives them, and that
the comparison reads the log through validate/sglang_log.py."""
import io
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu_v5"))

import ingest_sglang  # noqa: E402

LOG = ROOT / "tests/fixtures/sglang_logs/public/sglang-docs-20250123-80gb-llama31-8b.log"


def _bench(completed: int) -> bytes:
    line = {"backend": "sglang", "dataset_name": "random-ids", "max_concurrency": 1, "completed": completed,
            "mean_ttft_ms": 50.0, "p99_ttft_ms": 60.0, "mean_tpot_ms": 5.0, "output_throughput": 190.0,
            "server_info": {"max_total_num_tokens": 1}, "ttfts": [0.05] * completed, "generated_texts": ["x"]}
    return (json.dumps(line) + "\n").encode()


def _pack(out: Path, folder: str, members: dict[str, bytes]) -> Path:
    """A result tarball as sglang_serve.py packs it: every member under the command's result folder."""
    with tarfile.open(out, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _tarball(tmp_path: Path) -> Path:
    status = {"run": "t", "environment": {"nvidia_smi": "NVIDIA H200, 143771 MiB", "sglang": "0.5.14"}, "cases": [
        {"case": "llama8b-default", "catalog": "llama-3.1-8b", "started": True, "start_s": 50.0,
         "serve_command": "python -m sglang.launch_server ...",
         "workloads": [{"id": "c1", "ok": True, "bench_command": "python -m sglang.bench_serving --num-prompts 4"},
                       {"id": "c16", "ok": True, "bench_command": "python -m sglang.bench_serving --num-prompts 32"}]},
        {"case": "qwen3moe-default", "catalog": "qwen3-30b-a3b", "started": False, "workloads": []},
        {"case": "dsv2lite-default", "skipped": "deadline 470 s reached"}]}
    return _pack(tmp_path / "sglang-t.tar.gz", "sg_t", {
        "status.json": json.dumps(status).encode(),
        "llama8b-default.server.log": LOG.read_bytes(),
        "llama8b-default.c1.jsonl": _bench(4),
        "llama8b-default.c16.jsonl": _bench(30),  # 2 of 32 requests lost: not a row
        "qwen3moe-default.server.log": b"RuntimeError: CUDA out of memory\n"})


def test_rows_keep_complete_workloads_with_the_logs_figures(tmp_path):
    docs, files = ingest_sglang.read_results([str(_tarball(tmp_path))])
    rows, raw, cases = ingest_sglang.ingest(docs, files)
    assert [(r["case"], r["workload"]) for r in rows] == [("llama8b-default", "c1")]
    r = rows[0]
    assert "ttfts" not in r and "server_info" not in r and r["mean_tpot_ms"] == 5.0
    # the public log's own line: "max_total_num_tokens=N" (parse_sglang_log, not a number typed here)
    assert r["startup"]["max_total_num_tokens"] == int(
        LOG.read_text().split("max_total_num_tokens=")[1].split(",")[0])
    assert sorted(raw["t"]) == ["llama8b-default.c1.jsonl", "llama8b-default.c16.jsonl",
                                "llama8b-default.server.log", "qwen3moe-default.server.log", "status-t.json"]
    assert "generated_texts" not in json.loads(raw["t"]["llama8b-default.c1.jsonl"])
    text = ingest_sglang.compare(cases, files, rows, {"commits": {"predictions.json": "abc1234"}, "cases": [
        {"run": "t", "case": "llama8b-default", "memory": {"mem_fraction_static": 0.9, "max_total_num_tokens": 400000},
         "workloads": [{"id": "c1", "mean_ttft_ms": 55.0, "p99_ttft_ms": 66.0, "mean_tpot_ms": 5.5,
                        "output_throughput": 171.0}]}]})
    assert "| t | llama8b-default | c1 | 55.0 / 50.0 / +10.0%" in text and "predictions.json at kvcalc abc1234" in text
    assert "logged KV cache tokens:" in text  # check_sglang_log's rows for the log that has memory lines
    assert "t qwen3moe-default: no SGLang memory lines" in text and "dsv2lite-default" in text


def test_a_later_ingest_adds_its_cases_and_keeps_the_committed_ones(tmp_path, monkeypatch):
    """A run served over several commands: the second ingest brings one case; the first ingest's case stays, with
    its raw files, and both commands' status files are kept under their own names."""
    monkeypatch.setattr(ingest_sglang, "DATA", tmp_path / "data")
    first = _tarball(tmp_path)
    docs, files = ingest_sglang.read_results([str(first)])
    rows, raw, cases, files = ingest_sglang.merge(*ingest_sglang.ingest(docs, files), files)
    ingest_sglang.write(rows, raw, "x")
    status = {"run": "t", "environment": {}, "cases": [
        {"case": "gemma3-1b-default", "catalog": "gemma-3-1b", "started": True,
         "workloads": [{"id": "c1", "ok": True, "bench_command": "python -m sglang.bench_serving --num-prompts 4"}]}]}
    second = _pack(tmp_path / "sglang-t2.tar.gz", "sg_t2", {"status.json": json.dumps(status).encode(),
                                                          "gemma3-1b-default.c1.jsonl": _bench(4)})
    docs, files = ingest_sglang.read_results([str(second)])
    rows, raw, cases, files = ingest_sglang.merge(*ingest_sglang.ingest(docs, files), files)
    assert [(r["case"], r["workload"]) for r in rows] == [("llama8b-default", "c1"), ("gemma3-1b-default", "c1")]
    assert {"llama8b-default.server.log", "gemma3-1b-default.c1.jsonl", "status-t.json", "status-t.2.json"} <= set(raw["t"])
    assert [c["case"] for c in cases][:1] == ["llama8b-default"] and "gemma3-1b-default" in [c["case"] for c in cases]
    ingest_sglang.write(rows, raw, "x")
    # the same command ingested again adds nothing
    docs, files = ingest_sglang.read_results([str(second)])
    rows2, raw2, _, _ = ingest_sglang.merge(*ingest_sglang.ingest(docs, files), files)
    assert sorted(json.dumps(r) for r in rows2) == sorted(json.dumps(r) for r in rows)
    assert sorted(raw2["t"]) == sorted(raw["t"])


def test_a_case_of_the_same_name_in_another_run_is_a_case_of_its_own(tmp_path, monkeypatch):
    """A rerun under its own run name (sglang-v5-warm serves servers named as sglang-v5-a's) adds rows beside the
    first run's, never in their place, and each run's files stay apart."""
    monkeypatch.setattr(ingest_sglang, "DATA", tmp_path / "data")
    docs, files = ingest_sglang.read_results([str(_tarball(tmp_path))])
    rows, raw, cases, files = ingest_sglang.merge(*ingest_sglang.ingest(docs, files), files)
    ingest_sglang.write(rows, raw, "x")
    status = {"run": "w", "environment": {}, "cases": [
        {"case": "llama8b-default", "catalog": "llama-3.1-8b", "started": True,
         "workloads": [{"id": "c1", "ok": True, "bench_command": "python -m sglang.bench_serving --num-prompts 2"}]}]}
    rerun = _pack(tmp_path / "sglang-w.tar.gz", "sg_w", {"status.json": json.dumps(status).encode(),
                                                        "llama8b-default.c1.jsonl": _bench(2),
                                                        "llama8b-default.server.log": b"no memory lines\n"})
    docs, files = ingest_sglang.read_results([str(rerun)])
    rows, raw, cases, files = ingest_sglang.merge(*ingest_sglang.ingest(docs, files), files)
    assert sorted((r["run"], r["case"], r["completed"]) for r in rows) == [("t", "llama8b-default", 4),
                                                                          ("w", "llama8b-default", 2)]
    assert raw["t"]["llama8b-default.server.log"] == LOG.read_bytes()
    assert raw["w"]["llama8b-default.server.log"] == b"no memory lines\n"
    text = ingest_sglang.compare(cases, files, rows, {"cases": []})
    assert "- t llama8b-default: " in text and "- t llama8b-default: no SGLang" not in text and "- w llama8b-default: no SGLang memory" in text
