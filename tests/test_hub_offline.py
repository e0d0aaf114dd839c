"""Hub ids outside the catalog (fuzz review H9, §4): with huggingface_hub installed and no network, `kvcalc plan
--model org/name` answered after 24 s of retries (DNS failure) or 398 s (an endpoint that accepts and never answers).
Now: the local hub cache first, HF_HUB_OFFLINE honoured without touching the network, and one bounded attempt.
No test here reaches the internet: the "hub" is a socket on 127.0.0.1 or nothing at all."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from cli_helper import invoke

hub = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants  # noqa: E402

CONFIG = json.loads((Path(__file__).parent.parent / "kvcalc" / "catalog" / "llama-3.2-3b.json").read_text())["config"]


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # huggingface_hub's own cache lookups
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # kvcalc.checkpoint.cached_snapshot
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return tmp_path / "hub"


def _one_error_line(args, needle):
    code, out, err = invoke(args)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[:1000])
    assert needle in lines[0], lines[0]
    return lines[0]


def test_an_endpoint_that_never_answers_is_given_up_after_the_timeout(empty_cache, monkeypatch):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts connections into the backlog and never answers: the 398 s case
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("KVCALC_HUB_TIMEOUT", "1")
    try:
        line = _one_error_line(["plan", "--model", "kvcalc-test/never-answers"], "no answer from the hub")
    finally:
        silent.close()
    assert "within 1 s" in line and "Retry" not in line


def test_a_refused_connection_is_one_line_without_retry_chatter(empty_cache, monkeypatch):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connection refused, which huggingface_hub retries with back-off
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("KVCALC_HUB_TIMEOUT", "1")
    code, out, err = invoke(["plan", "--model", "kvcalc-test/refused"])
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "Retrying" not in err


def test_hf_hub_offline_is_honoured_without_opening_a_socket(empty_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set after huggingface_hub was imported: still honoured
    connects = []

    def hook(event, args):
        if event in ("socket.connect", "socket.getaddrinfo"):
            connects.append(args)

    sys.addaudithook(hook)  # (audit hooks cannot be removed; this one only records while the list is read)
    line = _one_error_line(["plan", "--model", "kvcalc-test/offline"], "HF_HUB_OFFLINE")
    seen = list(connects)
    assert seen == [], seen
    assert "local hub cache" in line


def test_a_config_in_the_local_hub_cache_is_read_offline(empty_cache, monkeypatch):
    snapshot = empty_cache / "models--kvcalc-test--cached" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(CONFIG))
    (empty_cache / "models--kvcalc-test--cached" / "refs").mkdir()
    (empty_cache / "models--kvcalc-test--cached" / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = invoke(["plan", "--model", "kvcalc-test/cached", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"] == "kvcalc-test/cached" and doc["rows"]


def test_the_extras_after_config_json_share_the_bound(empty_cache, monkeypatch):
    """config.json came, then hf_quant_config.json and the safetensors header metadata never answer: the plan is made
    from the other sources once the bound is spent, not after huggingface_hub's retries."""
    import threading

    from kvcalc.checkpoint import load_checkpoint

    snapshot = empty_cache / "cfg"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(CONFIG))
    never = threading.Event()

    def download(repo_id, filename, **_):
        if filename == "config.json":
            return str(snapshot / "config.json")
        never.wait()  # the endpoint that accepts and never answers

    monkeypatch.setattr(hub, "hf_hub_download", download)
    monkeypatch.setattr(hub, "get_safetensors_metadata", lambda repo_id, **_: never.wait())
    monkeypatch.setenv("KVCALC_HUB_TIMEOUT", "1")
    try:
        cfg, name, ck = load_checkpoint("kvcalc-test/slow-extras")
    finally:
        never.set()
    assert name == "kvcalc-test/slow-extras" and cfg["num_hidden_layers"] == CONFIG["num_hidden_layers"]
    assert ck.tensors is None  # the header metadata did not come: the closed form is used


def test_a_bad_timeout_setting_falls_back_to_the_default(monkeypatch):
    from kvcalc.checkpoint import HUB_TIMEOUT_S, _hub_timeout

    for value in ("abc", "nan", "-1", "0", "1e9"):
        monkeypatch.setenv("KVCALC_HUB_TIMEOUT", value)
        assert _hub_timeout() == HUB_TIMEOUT_S
    monkeypatch.setenv("KVCALC_HUB_TIMEOUT", "2.5")
    assert _hub_timeout() == 2.5


def _cached(empty_cache, name: str, commit: str, refs: dict[str, str]) -> None:
    repo = empty_cache / f"models--kvcalc-test--{name}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(CONFIG))
    (repo / "refs").mkdir(exist_ok=True)
    for ref, target in refs.items():
        (repo / "refs" / ref).write_text(target)


def test_model_at_a_revision_reads_that_snapshot_and_records_the_commit(empty_cache, monkeypatch):
    """--model org/name@revision: the branch or tag resolves through the cache's refs/ to its commit, a commit names
    its snapshot directly; the plan JSON records the commit the files came from."""
    _cached(empty_cache, "pinned", "aaaa1111", {"main": "aaaa1111"})
    _cached(empty_cache, "pinned", "bbbb2222", {"v2": "bbbb2222"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for asked, commit in (("v2", "bbbb2222"), ("aaaa1111", "aaaa1111"), (None, "aaaa1111")):
        model = "kvcalc-test/pinned" + (f"@{asked}" if asked else "")
        code, out, err = invoke(["plan", "--model", model, "--json"])
        assert code == 0, err
        doc = json.loads(out)
        assert doc["model"] == model and doc["model_revision"] == commit


def test_an_unknown_or_malformed_revision_is_one_line(empty_cache, monkeypatch):
    _cached(empty_cache, "pinned2", "cccc3333", {"main": "cccc3333"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _one_error_line(["plan", "--model", "kvcalc-test/pinned2@no-such-tag"], "HF_HUB_OFFLINE")
    _one_error_line(["plan", "--model", "kvcalc-test/pinned2@bad rev"], "revision")


def test_a_catalog_hub_id_with_a_revision_goes_to_the_hub(empty_cache, monkeypatch):
    """The catalog pins one copy of a config; asking for a revision means that revision, not the catalog's copy."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _one_error_line(["plan", "--model", "meta-llama/Llama-3.2-3B-Instruct@main"], "local hub cache")
