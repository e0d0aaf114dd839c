"""The web API (`kvcalc serve`): its payloads are the CLI's, its input checks are the CLI's, and nothing but a JSON
message ever comes back for bad input. Runs in-process through starlette's TestClient (needs starlette + httpx)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (python3 -m pip install '.[web]')")
pytest.importorskip("httpx", reason="starlette's TestClient needs httpx (the [dev] extra)")

from starlette.testclient import TestClient  # noqa: E402

from cli_helper import invoke  # noqa: E402
from kvcalc.web import app as web_app  # noqa: E402
from kvcalc.web import inputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "kvcalc" / "web" / "static"
CONFIGS = ROOT / "tests" / "fixtures" / "configs"


@pytest.fixture(scope="module")
def client():
    return TestClient(web_app.create_app(), base_url="http://localhost")


def cli_json(*args) -> dict:
    code, out, err = invoke(list(args))
    assert code == 0, err
    return json.loads(out)


CASES = [
    {"gpu": "t4", "context": "32k"},
    {"gpu": "l4", "model": "llama-3.1-8b", "context": "16k", "batch": "8", "engine": "vllm"},
    {"gpu": "h100-sxm", "model": "qwen3-8b", "weights": "awq", "kv": "fp8", "context": "32k"},
    {"gpu": "a100-80gb", "model": "gemma-3-12b", "context": "8k", "batch": "4", "util": "0.8", "max_num_seqs": "64",
     "enforce_eager": "1"},
    {"gpu": "t4", "model": "llama-3.1-70b", "context": "8k", "engine": "vllm"},  # misses on one GPU: TP sweep shown
    {"gpu": "h200", "model": "qwen3-30b-a3b", "context": "64k", "tp": "2", "kv": "fp8", "tp_sweep": "1"},
]


def as_argv(params: dict) -> list[str]:
    argv = []
    for key, value in params.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value == "1" and key in ("enforce_eager", "tp_sweep") else [flag, value]
    return argv


@pytest.mark.parametrize("params", CASES, ids=lambda p: "-".join(p.values()))
def test_plan_is_the_cli_json(client, params):
    r = client.get("/api/plan", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == cli_json("plan", *as_argv(params), "--json")


def test_post_takes_the_same_options(client):
    params = CASES[1]
    r = client.post("/api/plan", json=params)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json("plan", *as_argv(params), "--json")


@pytest.mark.parametrize("params", CASES[:3], ids=lambda p: "-".join(p.values()))
def test_csv_is_the_cli_csv(client, params):
    r = client.get("/api/plan", params={**params, "format": "csv"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    code, out, err = invoke(["plan", *as_argv(params), "--csv"])
    assert code == 0, err
    assert r.text == out


def test_gpus_and_models_are_the_cli_lists(client):
    assert client.get("/api/gpus").json() == cli_json("gpus", "--json")
    assert client.get("/api/models").json() == cli_json("models", "--json")


def test_explain_is_the_cli_explain(client):
    """`kvcalc explain` prints the baseline's breakdown for each engine; the page's explain of each row is one of them."""
    code, out, err = invoke(["explain", "--gpu", "l4", "--model", "qwen3-8b", "--context", "16k"])
    assert code == 0, err
    for engine in ("vllm", "hf"):
        r = client.get("/api/explain", params={"gpu": "l4", "model": "qwen3-8b", "context": "16k", "row": "baseline",
                                               "row_engine": engine})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["schema"] == "kvcalc.explain/1" and body["engine"] == engine
        assert body["text"] in out
        assert body["text"].startswith(f"== baseline (BF16 weights, BF16 KV) on {engine} ==")


def test_explain_any_row_matches_its_plan_row(client):
    params = {"gpu": "t4", "context": "32k"}
    plan = client.get("/api/plan", params=params).json()
    for row in plan["rows"]:
        r = client.get("/api/explain", params={**params, "row": row["config"], "row_engine": row["engine"]})
        assert r.status_code == 200, r.text
        assert r.json()["row"] == row
    r = client.get("/api/explain", params={**params, "row": "no-such", "row_engine": "vllm"})
    assert r.status_code == 400 and "no row 'no-such'" in r.json()["error"]


def test_plots_agree_with_the_plan(client):
    """Not the same code path: the capacity curve re-estimates vLLM with max_model_len = context at each grid point,
    so where the grid passes through --context its value must equal the plan's max concurrency; a fitting vLLM
    memory bar sums to the GPU total; the speed at --batch is the plan's decode speed."""
    params = {"gpu": "l4", "model": "llama-3.1-8b", "context": "16k", "batch": "4"}
    plan = client.get("/api/plan", params=params).json()
    plots = client.get("/api/plots", params=params).json()
    assert plots["schema"] == "kvcalc.plots/1"
    vllm_rows = {r["config"]: r for r in plan["rows"] if r["engine"] == "vllm"}
    assert {s["config"] for s in plots["capacity"]["series"]} == set(vllm_rows)
    for series in plots["capacity"]["series"]:
        at = dict((c, n) for c, n in series["points"])
        assert at[16384] == vllm_rows[series["config"]]["max_concurrency"]
    for bar in plots["memory"]["bars"]:
        if bar["engine"] == "vllm" and bar["fits"]:
            assert bar["total"] == plan["gpu_memory_total_bytes"]
    speed = {s["kv"]: {p["batch"]: p for p in s["points"]} for s in plots["speed"]["series"]}
    for kv, config in (("auto", "baseline"), ("fp8", "fp8-kv")):  # the table's speed is at the batch vLLM holds
        row = vllm_rows[config]
        assert speed[kv][row["decode_batch"]]["tokens_per_s"] == pytest.approx(row["decode_tokens_per_s"])
    by_config = {s["config"]: s for s in plots["speed"]["by_config"]}  # every vLLM row, as the PNG draws them
    assert set(by_config) == set(vllm_rows)
    for config, row in vllm_rows.items():
        assert by_config[config]["capacity"] == row["max_concurrency"]
        at = {p["batch"]: p for p in by_config[config]["points"]}
        assert at[row["decode_batch"]]["tokens_per_s"] == pytest.approx(row["decode_tokens_per_s"])


def cli_error(args) -> str:
    code, out, err = invoke(args)
    assert code == 2 and out == ""
    return err.strip()


@pytest.mark.parametrize("params, argv", [
    ({"context": "32q"}, ["--context", "32q"]),
    ({"util": "1.7"}, ["--util", "1.7"]),
    ({"gpu": "h10"}, ["--gpu", "h10"]),
    ({"batch": "0"}, ["--batch", "0"]),
    ({"weights": "int3"}, ["--weights", "int3"]),
    ({"engine": "tgi"}, ["--engine", "tgi"]),
    ({"vllm_version": "abc"}, ["--vllm-version", "abc"]),
])
def test_bad_input_is_the_cli_line_as_json(client, params, argv):
    r = client.get("/api/plan", params=params)
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/json")
    message = r.json()["error"]
    assert message and "\n" not in message and "Traceback" not in message
    assert message in cli_error(["plan", *argv])


@pytest.mark.parametrize("params, fragment", [
    ({"gpu": "/etc/kvcalc.yaml"}, "built-in GPU ids only"),
    ({"gpu": "my.yml"}, "built-in GPU ids only"),
    ({"model": "/etc/passwd"}, "unknown model"),
    ({"model": "../kvcalc/catalog/qwen3-8b.json"}, "unknown model"),
    ({"model": "meta-llama/Llama-4-Scout"}, "--allow-hub"),
    ({"cotext": "8k"}, "unknown parameter 'cotext'"),
    ({"context": "8k\n"}, "control character"),
    ({"context": "1" * 300}, "too long"),
    ({"format": "xml"}, "format"),
])
def test_web_refuses_files_hub_and_unknown_names(client, params, fragment):
    r = client.get("/api/plan", params=params)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]


def test_repeated_parameter_and_long_query_are_refused(client):
    r = client.get("/api/plan?context=8k&context=16k")
    assert r.status_code == 400 and "twice" in r.json()["error"]
    r = client.get("/api/plan?model=" + "x" * 9000)
    assert r.status_code == 400 and "query string" in r.json()["error"]


def test_catalog_hub_id_works_without_hub_access(client):
    r = client.get("/api/plan", params={"model": "Qwen/Qwen3-8B", "gpu": "l4"})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "qwen3-8b"


def test_hub_ids_only_with_allow_hub(monkeypatch):
    """--allow-hub passes a hub id to the catalog's hub reader (faked here: tests never touch the network)."""
    import kvcalc.catalog as catalog

    asked = []

    real = catalog._from_checkpoint

    def fake_hub(hub_id):  # the hub id stands for a local copy of its config.json
        asked.append(hub_id)
        return dataclasses.replace(real(str(CONFIGS / "Qwen--Qwen3-32B.json")), name=hub_id)

    monkeypatch.setattr(catalog, "_from_hub", fake_hub)
    closed = TestClient(web_app.create_app(allow_hub=False), base_url="http://localhost")
    assert closed.get("/api/plan", params={"model": "Qwen/Qwen3-32B-New"}).status_code == 400
    assert asked == []
    opened = TestClient(web_app.create_app(allow_hub=True), base_url="http://localhost")
    r = opened.get("/api/plan", params={"model": "Qwen/Qwen3-32B-New", "gpu": "h100-sxm"})
    assert r.status_code == 200, r.text
    assert asked == ["Qwen/Qwen3-32B-New"] and r.json()["model"] == "Qwen/Qwen3-32B-New"
    assert opened.get("/api/info").json()["allow_hub"] is True


def test_pasted_config_gives_the_cli_rows_for_that_file(client):
    path = CONFIGS / "Qwen--Qwen3-32B.json"
    r = client.post("/api/plan", json={"config": path.read_text(), "config_name": "qwen3-32b-pasted", "gpu": "h100-sxm",
                                       "context": "16k"})
    assert r.status_code == 200, r.text
    mine = r.json()
    theirs = cli_json("plan", "--model", str(path), "--gpu", "h100-sxm", "--context", "16k", "--json")
    assert mine["model"] == "qwen3-32b-pasted"
    assert mine["rows"] == theirs["rows"] and mine["settings"] == theirs["settings"]


@pytest.mark.parametrize("config, fragment", [
    ("{not json", "not valid JSON"),
    ('{"model_type": "llama", "hidden_size": NaN}', "hidden_size"),
    ("[1, 2]", "JSON object"),
    ('{"model_type": "gpt2"}', "not supported"),
    ("[" * 100_000 + "]" * 100_000, "deeper than"),
])
def test_bad_pasted_config_is_one_line(client, config, fragment):
    r = client.post("/api/plan", json={"config": config})
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"] and "\n" not in r.json()["error"]


def test_size_caps(client):
    big = " " * (inputs.MAX_CONFIG_BYTES + 1) + "{}"
    r = client.post("/api/plan", json={"config": big})
    assert r.status_code == 400 and "bytes" in r.json()["error"]
    r = client.post("/api/plan", content=b"{" + b" " * (web_app.MAX_BODY_BYTES + 10) + b"}",
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and "larger than" in r.json()["error"]
    r = client.post("/api/plan", content=b"\xff\xfe", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON object" in r.json()["error"]


def test_unexpected_failure_is_a_json_line_not_a_traceback(client, monkeypatch):
    from kvcalc.web import views

    def broken(web):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(views, "plan_payload", broken)
    r = client.get("/api/plan", params={"gpu": "t4", "context": "3k"})
    assert r.status_code == 500
    assert r.json() == {"error": "internal error (RuntimeError); the server log has the details"}


def test_foreign_host_header_is_refused(client):
    """A loopback server answers only loopback Host names: a web page elsewhere cannot read it via DNS rebinding."""
    assert client.get("/api/gpus", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/api/gpus", headers={"host": "127.0.0.1:8000"}).status_code == 200


def test_page_ships_in_the_package_and_loads_nothing_from_outside(client):
    r = client.get("/")
    assert r.status_code == 200 and "<title>kvcalc" in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    for name in ("app.js", "plots.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200
    for path in STATIC.iterdir():
        text = path.read_text()
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, f"{path.name} refers to {urls}: the page must work offline"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"web/static/*"' in pyproject  # package-data: the page is in the wheel


def test_unknown_api_path_is_json(client):
    r = client.get("/api/nothing")
    assert r.status_code == 404 and r.json() == {"error": "Not Found"}


def test_cache_gives_the_same_answer_and_keys_on_every_input():
    app = web_app.create_app(cache_size=4)
    c = TestClient(app, base_url="http://localhost")
    a = c.get("/api/plan", params={"gpu": "t4", "context": "8k"}).content
    assert c.get("/api/plan", params={"gpu": "t4", "context": "8192"}).content == a  # same request, other spelling
    b = c.get("/api/plan", params={"gpu": "t4", "context": "8k", "batch": "2"}).content
    assert a != b
    assert len({v for v in app.state.cache._items.values()}) == 2  # two answers, each under its raw and canonical key
    assert len(app.state.cache._items) == 4


def test_plan_imports_no_web_stack():
    code = ("import sys\nfrom kvcalc.cli import main\n"
            "try:\n    main(['plan', '--gpu', 't4', '--context', '32k', '--json'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'anyio', 'httpx') "
            "or m.startswith('kvcalc.web')), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stderr.strip() == "[]"


def test_serve_without_the_extra_says_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert cli_error(["serve"]) == "error: the web page needs starlette and uvicorn: python3 -m pip install starlette uvicorn"


def test_search_is_the_cli_search(client):
    params = {"model": "qwen3-8b", "input_len": "2k", "output_len": "512", "concurrency": "16", "gpus": "l4,h100-sxm",
              "top": "5"}
    r = client.get("/api/search", params=params)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json("search", *as_argv(params), "--json")
    for bad, fragment in (({"prices_file": "/etc/passwd"}, "unknown search parameter"),
                          ({"gpus": "t4,/tmp/x.yaml"}, "built-in GPU ids only"),
                          ({"concurrency": None}, "exactly one of")):
        r = client.get("/api/search", params={k: v for k, v in {**params, **bad}.items() if v is not None})
        assert r.status_code == 400 and fragment in r.json()["error"], r.text


def test_capacity_range_comes_back_from_plan_and_search(client):
    """vLLM 0.29, a cold compile start of a tied-embedding model on an RTX 4090: the plan API's vLLM rows carry the
    CLI's trust.capacity_range, and the search API's rows carry the range of plan's row of the same deployment."""
    params = {"gpu": "rtx-4090", "model": "qwen2.5-1.5b", "context": "32k", "vllm_version": "0.29", "engine": "vllm"}
    r = client.get("/api/plan", params=params)
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan == cli_json("plan", *as_argv(params), "--json")
    spans = [row["trust"]["capacity_range"] for row in plan["rows"]]
    assert spans and all(s and s["kv_capacity_tokens_low"] < s["kv_capacity_tokens_high"] for s in spans)
    search = {"model": "qwen2.5-1.5b", "input_len": "2k", "output_len": "256", "concurrency": "16",
              "gpus": "rtx-4090", "vllm_version": "0.29", "top": "2"}
    r = client.get("/api/search", params=search)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got == cli_json("search", *as_argv(search), "--json")
    for d in got["results"]:
        span = d["capacity_range"]
        assert span["kv_capacity_tokens_high"] == d["kv_capacity_tokens"]
        assert span["max_concurrency_high"] == d["max_concurrency"]
        plan_row = cli_json("plan", "--model", "qwen2.5-1.5b", "--gpu", "rtx-4090", "--context",
                            str(d["max_model_len"]), "--batch", str(d["concurrency_per_replica"]), "--vllm-version",
                            "0.29", "--weights", d["weights_format"], "--kv", d["kv_format"], "--util", str(d["util"]),
                            "--max-num-seqs", str(d["max_num_seqs"]), "--max-num-batched-tokens",
                            str(d["max_num_batched_tokens"]), "--engine", "vllm", "--json")
        chosen = [row for row in plan_row["rows"] if row["weights_format"] == d["weights_format"]
                  and row["kv_format"] == d["kv_format"]]
        assert chosen and chosen[0]["trust"]["capacity_range"] == span


def test_serve_binds_loopback_unless_told():
    from kvcalc.cli import cli

    serve = cli.get_command(None, "serve")
    defaults = {p.name: p.default for p in serve.params}
    assert defaults["host"] == "127.0.0.1" and defaults["port"] == 8000
    assert all(p.is_flag for p in serve.params if p.name in ("allow_hub", "open_browser"))  # off unless given


def test_hub_like_local_path_is_never_read(monkeypatch):
    """With --allow-hub, 'owner/name' is a hub id only: a folder of that name on the server is not read, and the
    answer is the one a name with no folder gets (huggingface_hub is stubbed out: no network)."""
    import kvcalc.checkpoint as checkpoint

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(checkpoint, "cached_snapshot", lambda hub_id, revision="main": None)
    monkeypatch.setitem(__import__("sys").modules, "huggingface_hub", None)
    opened = TestClient(web_app.create_app(allow_hub=True, cache_size=0), base_url="http://localhost")
    there = opened.get("/api/plan", params={"model": "tests/fixtures"})
    absent = opened.get("/api/plan", params={"model": "tests/no-such-folder"})
    assert there.status_code == absent.status_code == 400
    assert there.json()["error"] == absent.json()["error"].replace("no-such-folder", "fixtures")
