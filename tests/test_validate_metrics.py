"""Issue 22 item 4: `kvcalc validate --metrics URL|FILE` against a server on loopback that serves recorded vLLM 0.26
/metrics pages (tests/fixtures/vllm_metrics/README.md: the cache configuration real vLLM 0.26 reported on the H200,
in vLLM's exposition format)."""

import http.server
import json
import threading
from pathlib import Path

import pytest

from kvcalc.validate.metrics import cache_configs, parse_samples, server_max_model_len

from cli_helper import invoke

HERE = Path(__file__).parent
PAGES = HERE / "fixtures" / "vllm_metrics"
AUTO, FP8 = PAGES / "h200-llama-3.1-8b-auto-u90.txt", PAGES / "h200-llama-3.1-8b-fp8-u90.txt"
REAL_DIR = HERE.parent / "docs" / "validation" / "data" / "v4" / "metrics"
# real `curl /metrics` of vllm serve 0.26.0 on the H200 (issue 25's serve-load runs, docs/validation/data/v4/serve/
# README.md): the capture and the server's own flags (scripts/gpu_v4/serve_cases_{a,c,d}.json)
REAL = [("llama-3.1-8b.a.txt", ["--model", "llama-3.1-8b", "--util", "0.9", "--max-model-len", "36864"]),
        ("llama-3.2-3b-fp8kv.a.txt", ["--model", "llama-3.2-3b", "--util", "0.9", "--kv", "fp8"]),
        ("llama-3.1-8b-awq.c.txt", ["--model", "llama-3.1-8b-awq", "--util", "0.9", "--max-model-len", "16384"]),
        ("qwen3-30b-a3b.d.txt", ["--model", "qwen3-30b-a3b", "--util", "0.9", "--max-model-len", "16384"])]
# the plan of the recorded runs: the offline LLM class (its batch defaults), util 0.9 (H200 rows' settings)
PLAN = ["--model", "llama-3.1-8b", "--gpu", "h200", "--util", "0.9", "--entrypoint", "offline",
        "--vllm-version", "0.26.0"]  # the fixture's server's release (a /metrics page does not state it)


@pytest.fixture()
def server():
    """An HTTP server on 127.0.0.1 serving one page at /metrics (set .page), 404 elsewhere."""

    class Handler(http.server.BaseHTTPRequestHandler):
        page = b""

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.end_headers()
            self.wfile.write(Handler.page)

        def log_message(self, *args):  # keep pytest's output clean
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.handler = Handler
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_parser_reads_the_info_gauge_labels():
    labels = cache_configs(AUTO.read_text())[0]
    assert labels["num_gpu_blocks"] == "55712" and labels["block_size"] == "16" and labels["cache_dtype"] == "auto"
    assert labels["engine"] == "0" and labels["_block_size_resolved"] == "True"
    assert server_max_model_len(labels) == 8192  # 891,392 tokens / 108.8125x


def test_parser_handles_escapes_comments_and_timestamps():
    text = ('# HELP x y\nvllm:cache_config_info{a="q\\"uote",b="back\\\\slash",c="new\\nline",engine="1"} 1.0 1700\n'
            'vllm:cache_config_info{engine="0",a="z"} 1\nnot a sample line\n')
    samples = parse_samples(text)
    assert samples[0][1] == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline", "engine": "1"}
    assert [c["engine"] for c in cache_configs(text)] == ["0", "1"]


def test_running_server_matches_the_plan(server):
    server.handler.page = AUTO.read_bytes()
    code, out, err = invoke(["validate", "--metrics", server.url + "/metrics", *PLAN, "--json", "--strict"])
    assert code == 0, err
    data = json.loads(out)
    by = {r["quantity"]: r for r in data["comparison"]}
    assert by["block size"]["verdict"] == by["cache dtype"]["verdict"] == "PASS"
    assert by["GPU blocks"]["observed"] == 55712 and by["GPU blocks"]["verdict"] == "PASS"
    assert abs(by["GPU blocks"]["error"]) < 0.01  # the project's capacity target
    assert data["plan"]["num_gpu_blocks"] == by["GPU blocks"]["predicted"]
    assert data["verdict"] == {"pass": 6, "miss": 0, "mismatch": 0}


def test_server_with_another_cache_dtype_is_a_mismatch(server):
    """Planned BF16 KV, the server runs FP8: MISMATCH on cache dtype, and twice the blocks."""
    server.handler.page = FP8.read_bytes()
    code, out, err = invoke(["validate", "--metrics", server.url + "/metrics", *PLAN, "--strict"])
    assert code == 1
    assert "MISMATCH cache dtype: the server runs fp8, the plan has auto" in out
    assert err.strip() == "error: --strict: 3 MISS, 1 MISMATCH"
    code, out, _ = invoke(["validate", "--metrics", server.url + "/metrics", *PLAN, "--kv", "fp8", "--json"])
    data = json.loads(out)
    assert code == 0 and data["verdict"]["mismatch"] == 0 and data["verdict"]["miss"] == 0


def test_block_size_is_compared(server):
    server.handler.page = AUTO.read_bytes()
    code, out, _ = invoke(["validate", "--metrics", server.url + "/metrics", *PLAN, "--block-size", "32"])
    assert code == 0 and "MISMATCH block size: the server runs 16, the plan has 32" in out


def test_a_saved_file_reads_as_the_url_does(server):
    server.handler.page = AUTO.read_bytes()
    by_url = json.loads(invoke(["validate", "--metrics", server.url + "/metrics", *PLAN, "--json"])[1])
    by_file = json.loads(invoke(["validate", "--metrics", str(AUTO), *PLAN, "--json"])[1])
    by_url.pop("source"), by_file.pop("source")
    assert by_url == by_file


@pytest.mark.parametrize("path, page, message", [
    ("/nothing", b"", "cannot read it"),
    ("/metrics", b"# HELP vllm:num_requests_running x\nvllm:num_requests_running 0\n", "no vllm:cache_config_info"),
    ("/metrics", b'vllm:cache_config_info{num_gpu_blocks="None",engine="0"} 1.0\n', "not finished starting"),
])
def test_bad_pages_are_one_line_usage_errors(server, path, page, message):
    server.handler.page = page
    code, _, err = invoke(["validate", "--metrics", server.url + path, *PLAN])
    assert code == 2 and err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_nothing_listening_is_a_usage_error():
    code, _, err = invoke(["validate", "--metrics", "http://127.0.0.1:9/metrics", *PLAN])
    assert code == 2 and "cannot read it" in err


@pytest.fixture(scope="module")
def real_pages():
    if not REAL_DIR.is_dir():
        pytest.skip("no real /metrics capture (docs/validation/data/v4/metrics)")
    return REAL_DIR


@pytest.mark.parametrize("name, argv", REAL, ids=[n for n, _ in REAL])
def test_real_vllm_serve_capture_matches_the_plan(real_pages, server, name, argv):
    """A real vLLM 0.26.0 server's /metrics, served on loopback: kvcalc's plan for the server's own flags matches its
    blocks within the 1% target (measured: Llama-3.1-8B bf16 +0.01%, Llama-3.2-3B fp8 KV +0.02%, Llama-3.1-8B AWQ
    +0.10%, Qwen3-30B-A3B MoE -0.10%)."""
    server.handler.page = (real_pages / name).read_bytes()
    # the server's release (the /metrics page does not say it): 0.29+ rules differ (V2 graphs in the budget)
    code, out, err = invoke(["validate", "--metrics", server.url + "/metrics", "--gpu", "h200", *argv, "--json",
                             "--strict", "--vllm-version", "0.26.0"])
    assert code == 0, out + err
    data = json.loads(out)
    by = {r["quantity"]: r for r in data["comparison"]}
    assert {"block size", "cache dtype", "gpu_memory_utilization", "GPU blocks", "logged KV cache tokens",
            "max concurrency"} <= set(by)
    assert abs(by["GPU blocks"]["error"]) < 0.003  # measured at most 0.10%; a regression past 0.3% shows here
    assert data["server"]["_block_size_resolved"] == "True"  # the whole label set was read


def test_real_capture_gives_max_model_len(real_pages):
    labels = cache_configs((real_pages / "llama-3.2-3b-fp8kv.a.txt").read_text())[0]
    assert server_max_model_len(labels) == 36864  # the server's --max-model-len (serve_cases_a.json)
