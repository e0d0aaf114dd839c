"""The web API reads no file and touches no network on a caller's behalf, whatever the parameter; every response
carries the security headers; only loopback Host names are answered; request bodies and headers are time-bounded.
These answer findings F1, F10 and F11 of the fuzz audit of 2026-12 (docs/reviews/replies.md); each reproduction of
the audit is a test here."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (python3 -m pip install '.[web]')")
pytest.importorskip("httpx", reason="starlette's TestClient needs httpx (the [dev] extra)")

from starlette.testclient import TestClient  # noqa: E402

from cli_helper import invoke  # noqa: E402
from kvcalc import options as O  # noqa: E402
from kvcalc.web import app as web_app  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECURITY = {"content-security-policy", "x-content-type-options", "referrer-policy", "cache-control"}

# every file the process opens while a probe runs (sys.addaudithook cannot be removed: it records only when armed)
_OPENED: list[str] = []
_ARMED = threading.Event()


def _hook(event, args):
    if _ARMED.is_set() and event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
        _OPENED.append(str(args[0]))


sys.addaudithook(_hook)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """A readable 2-layer checkpoint folder at a known path (the positive control: the CLI reads it), and a path
    beside it that does not exist."""
    base = tmp_path_factory.mktemp("probe")
    folder = base / "ckpt"
    folder.mkdir()
    code, out, _ = invoke(["models", "--json"])
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(cfg))
    code, out, err = invoke(["plan", "--model", str(folder), "--gpu", "l4", "--json"])
    assert code == 0, err  # the CLI reads it: a probe that the web answered without reading proves something
    return folder, base / "nope"  # the same length: an answer that quotes the path is otherwise the same


def _values(folder: Path, absent: Path) -> list[tuple[str, str]]:
    """(value naming the probe, the same value naming a path that does not exist)."""
    pairs = []
    for there, missing in ((folder, absent), (folder / "config.json", absent / "config.json"),
                           (f"{folder}/../{folder.name}", f"{absent}/../{absent.name}")):
        pairs.append((str(there), str(missing)))
    for cmd in ("vllm serve {}", "vllm serve --model {}", "vllm serve --model={}",
                "python -m vllm.entrypoints.openai.api_server --model {}",
                "vllm serve llama-3.2-1b --speculative-config '{{\"method\": \"eagle\", \"model\": \"{}\", "
                "\"num_speculative_tokens\": 2}}'"):
        pairs.append((cmd.format(folder), cmd.format(absent)))
    return pairs


FIXED = ["~", "~/", ".", "..", "../..", "/", "/etc", "/root", "/proc/self/environ", "/etc/passwd", "/dev/zero",
         "someorg/somemodel", "vllm serve /etc/passwd", "vllm serve ~", "vllm serve ..", "vllm serve /root",
         "vllm serve someorg/somemodel", "vllm serve /proc/self/environ",
         '{"method": "eagle", "model": "/etc", "num_speculative_tokens": 2}']


def _outside_package(paths: list[str]) -> list[str]:
    """Opened paths that are not kvcalc's own data or Python's (the probe, /etc, /proc, /root, the cwd...)."""
    allowed = (str(ROOT / "kvcalc"), sys.prefix, sys.base_prefix, "/usr/lib", "/usr/share/zoneinfo")
    return [p for p in paths if not p.startswith(allowed) and not p.endswith(".pyc")]


def _hub_calls(monkeypatch) -> list[str]:
    import kvcalc.checkpoint as checkpoint

    calls: list[str] = []

    def no_hub(key, *a, **kw):
        calls.append(key)
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(checkpoint, "load_hub_checkpoint", no_hub)
    monkeypatch.setattr(checkpoint, "_hub_download", no_hub)
    monkeypatch.setattr(checkpoint, "cached_snapshot", no_hub)
    return calls


def _ask(client, endpoint: str, method: str, params: dict):
    if method == "GET":
        return client.get(endpoint, params=params)
    return client.post(endpoint, json=params)


def _masked(text: str, folder: Path) -> str:
    """The answer with every mention of the probe's parent folder (and what follows it, cut or not) masked: an answer
    that quotes the path, whole or shortened, is otherwise the same for the existing and the missing one."""
    import re

    return re.sub(re.escape(str(folder.parent)) + r"[^'\"]*", "P", text)


BASE = {"plan": {"gpu": "l4"}, "explain": {"gpu": "l4"}, "plots": {"gpu": "l4"}, "deploy": {"gpu": "l4"},
        "search": {"input_len": "1k", "output_len": "64", "concurrency": "4", "gpus": "l4", "tp": "1",
                   "util": "0.9", "max_num_seqs": "8"}}


def test_no_parameter_reads_a_server_file_or_the_hub(probe, monkeypatch):
    """Every parameter of every endpoint, by GET and POST, naming the probe folder, its config.json, ~, .., /proc,
    /etc/passwd, a device or a hub id (the server runs without --allow-hub): no file outside kvcalc's own data is
    opened, the hub is never asked, and the answer for an existing path equals the answer for a missing one."""
    folder, absent = probe
    hub = _hub_calls(monkeypatch)
    monkeypatch.chdir(folder.parent)
    client = TestClient(web_app.create_app(cache_size=0), base_url="http://localhost")
    pairs = _values(folder, absent)
    oracle, opened = [], []
    named = ("model", "vllm_command", "speculative_config", "gpu", "gpus")  # the ones that name things
    for endpoint, table in (("plan", O.web_table("plan")), ("explain", O.web_table("plan")),
                            ("plots", O.web_table("plan")), ("deploy", O.web_table("plan")),
                            ("search", O.web_table("search"))):
        for option in table:
            if endpoint in ("explain", "plots", "deploy") and option.name not in named:
                continue  # explain, plots and deploy parse with plan's parser, probed in full on /api/plan
            methods = ("GET", "POST") if option.name in named and endpoint in ("plan", "search") else ("GET",)
            for method in methods:
                values = pairs + [(v, v) for v in FIXED] if option.name in named else pairs[:2] + pairs[4:5] + [
                    (v, v) for v in ("~", "..", "/proc/self/environ", "someorg/somemodel")]
                for value, missing in values:
                    params = {**BASE[endpoint], option.name: value}
                    _OPENED.clear()
                    _ARMED.set()
                    try:
                        got = _ask(client, f"/api/{endpoint}", method, params)
                    finally:
                        _ARMED.clear()
                    opened += [(endpoint, option.name, value, p) for p in _outside_package(list(_OPENED))]
                    assert got.status_code < 500, (endpoint, option.name, value, got.text)
                    if missing != value:
                        other = _ask(client, f"/api/{endpoint}", method, {**BASE[endpoint], option.name: missing})
                        same = _masked(got.text.replace(folder.name, absent.name), folder) == _masked(other.text, folder)
                        if not same or got.status_code != other.status_code:
                            oracle.append((endpoint, option.name, value, got.status_code, other.status_code,
                                           _masked(got.text, folder)[:300], _masked(other.text, folder)[:300]))
    assert not opened, opened[:5]
    assert not oracle, oracle[:5]
    assert hub == []


def test_audit_reproduction_f1(probe, monkeypatch):
    """F1: `vllm serve /etc/passwd` is not opened and parsed; the probe folder is not planned; no existence
    oracle: /root and a missing path answer the same line."""
    folder, absent = probe
    client = TestClient(web_app.create_app(cache_size=0), base_url="http://localhost")
    r = client.get("/api/plan", params={"vllm_command": "vllm serve /etc/passwd"})
    assert r.status_code == 400 and "JSON" not in r.json()["error"] and "never paths" in r.json()["error"]
    r = client.get("/api/plan", params={"vllm_command": f"vllm serve {folder}"})
    assert r.status_code == 400
    a = client.get("/api/plan", params={"vllm_command": "vllm serve /root"}).json()["error"]
    b = client.get("/api/plan", params={"vllm_command": "vllm serve /no-such-dir"}).json()["error"]
    assert a.replace("/root", "X") == b.replace("/no-such-dir", "X")
    # the draft head's weights do not change the answer: the web never reads the head's folder
    spec = '{"method": "eagle", "model": "%s", "num_speculative_tokens": 2}'
    one = client.get("/api/plan", params={"model": "llama-3.1-8b", "speculative_config": spec % folder}).json()
    two = client.get("/api/plan", params={"model": "llama-3.1-8b", "speculative_config": spec % absent}).json()
    assert one["rows"] == two["rows"]


def test_hub_ids_need_allow_hub_even_inside_vllm_command(monkeypatch):
    hub = _hub_calls(monkeypatch)
    client = TestClient(web_app.create_app(cache_size=0), base_url="http://localhost")
    r = client.get("/api/plan", params={"vllm_command": "vllm serve someorg/somemodel"})
    assert r.status_code == 400 and "--allow-hub" in r.json()["error"] and hub == []
    r = client.get("/api/search", params={**BASE["search"], "vllm_command": "vllm serve someorg/somemodel"})
    assert r.status_code == 400 and "--allow-hub" in r.json()["error"] and hub == []
    # a catalog model's hub id is the catalog's: no hub needed
    r = client.get("/api/plan", params={"gpu": "l4",  # a pasted command needs its GPU named (issue 24)
                                        "vllm_command": "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 1"})
    assert r.status_code == 200 and r.json()["model"] == "llama-3.1-8b"


# -- headers, hosts (F10, F11) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/static/index.html", "/static/app.js", "/static/style.css", "/api/gpus",
                                  "/api/plan/", "/api/nothing", "/nothing", "/static/..%2fapp.py",
                                  "/api/plan?context=32q"])
def test_every_response_carries_the_security_headers(path):
    client = TestClient(web_app.create_app(), base_url="http://localhost")
    for method in ("GET", "POST", "DELETE"):
        r = client.request(method, path, follow_redirects=False)
        assert SECURITY <= set(r.headers), (method, path, r.status_code, dict(r.headers))
        assert r.status_code != 307  # no empty-bodied slash redirect
        if path.startswith("/api/"):
            assert r.headers["content-type"].startswith("application/json"), (method, path)


@pytest.mark.parametrize("host", ["evil.com", "testserver", "localhost.evil.com", "127.0.0.1.nip.io", "127.1",
                                  "0x7f000001", "127.0.0.1:80@evil.com", "localhost:abc"])
def test_foreign_hosts_get_a_json_400_with_the_headers(host):
    client = TestClient(web_app.create_app(), base_url="http://localhost")
    r = client.get("/api/gpus", headers={"host": host})
    assert r.status_code == 400 and SECURITY <= set(r.headers) and "Host" in r.json()["error"]
    for good in ("localhost", "localhost:8000", "127.0.0.1:8765", "[::1]:8000"):
        assert client.get("/api/gpus", headers={"host": good}).status_code == 200, good


def test_testserver_is_not_a_production_host():
    from kvcalc.web.server import LOOPBACK

    assert "testserver" not in web_app.LOCAL_HOSTS and LOOPBACK


# -- time bounds on a real socket ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    """kvcalc's app on uvicorn with kvcalc's protocol, a 1 s read deadline, on a free loopback port."""
    uvicorn = pytest.importorskip("uvicorn")
    from kvcalc.web.server import time_bound_protocol

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    config = uvicorn.Config(web_app.create_app(), host="127.0.0.1", port=port, log_level="error",
                            http=time_bound_protocol(1.0))
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(100):
        if srv.started:
            break
        time.sleep(0.05)
    yield port
    srv.should_exit = True
    thread.join(5)


def _raw(port: int, data: bytes, wait: float = 4.0) -> tuple[bytes, float]:
    """Send `data`, read until the server closes; (what came back, seconds until closed)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            return out, float("inf")
    return out, time.monotonic() - t0


def test_a_body_shorter_than_its_content_length_does_not_hold_the_connection(server):
    head = (b"POST /api/plan HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")
    out, took = _raw(server, head + b'{"gpu": "t4"}    ')  # 17 bytes of 100
    assert took < 3.5, "the connection was held"
    for method in (b"GET", b"DELETE"):
        out, took = _raw(server, head.replace(b"POST", method) + b"x" * 17)
        assert took < 3.5


def test_slow_headers_do_not_hold_the_connection(server):
    out, took = _raw(server, b"GET /api/gpus HTTP/1.1\r\nHost: local")
    assert took < 3.5 and out == b""


def test_a_malformed_content_length_answers_json(server):
    """-1, 1e3 or fullwidth digits: h11 refuses them, kvcalc's protocol answers JSON with the headers ("17, 17",
    which HTTP allows, is a lying length: the read deadline closes it, as above)."""
    out, took = _raw(server, b"POST /api/plan HTTP/1.1\r\nHost: localhost\r\nContent-Length: 17, 17\r\n\r\n{}")
    assert took < 3.5
    for length in (b"-1", b"1e3", b"\xef\xbc\x91", b"99999999999999999999x"):
        out, _ = _raw(server, b"POST /api/plan HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + length +
                      b"\r\n\r\n{}")
        head, _, body = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), out[:200]
        assert b"content-security-policy" in head.lower() and "error" in json.loads(body)


def test_a_whole_request_still_works(server):
    body = b'{"gpu": "t4", "context": "8k"}'
    out, _ = _raw(server, b"POST /api/plan HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 200") and b'"schema":"kvcalc.plan/1"' in out
