"""Quality evidence: the committed measurement (kvcalc/data/quality.json), its reader (kvcalc.quality), and a CI-sized
re-measurement on the real SmolLM2-135M weights that can fail if a quantized cache breaks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from kvcalc import quality
from kvcalc.validate import quality_runner as runner

SMOLLM2_KV = ("auto", "fp8", "fp8-unit-scale", "hqq-4", "hqq-2", "quanto-4", "quanto-2")


@pytest.fixture(scope="module")
def data():
    return json.loads(quality.DATA_PATH.read_text())


# ---------------------------------------------------------------------------------------------------------------------
# (a) the committed data
# ---------------------------------------------------------------------------------------------------------------------


def test_committed_data_has_every_smollm2_config(data):
    got = {(r["weights"], r["kv"]) for r in data["rows"] if r["model"] == "smollm2-135m"}
    assert {("fp32", kv) for kv in SMOLLM2_KV} | {("nf4", "auto")} <= got


def test_every_row_has_versions_command_and_date(data):
    assert data["rows"]
    for r in data["rows"]:
        for pkg in ("torch", "transformers", "hqq", "optimum-quanto", "gguf", "bitsandbytes"):
            assert r["versions"].get(pkg), (r["model"], r["kv"], pkg)
        assert r["command"].startswith("python -m kvcalc.validate.quality_runner")
        assert r["date"][:2] == "20"
        for key in ("ppl", "ppl_ratio", "kl", "top1_agreement", "greedy_agreement", "repeated_ngram_share", "loop"):
            assert key in r["metrics"]
    # the script holds the command that made the data
    script = (quality.DATA_PATH.parents[2] / "scripts" / "measure_quality.sh").read_text()
    assert "kvcalc.validate.quality_runner" in script and "--out kvcalc/data/quality.json" in script
    assert data["command"].split("--out")[0].split() == data["rows"][0]["command"].split("--out")[0].split()


def test_committed_data_is_self_consistent(data):
    for r in data["rows"]:
        m = r["metrics"]
        if r["weights"] == "fp32" and r["kv"] == "auto":
            assert m["ppl_ratio"] == 1.0 and m["kl"] == 0.0 and m["top1_agreement"] == 1.0
            assert m["greedy_agreement"] == 1.0 and m["first_divergence"] is None
        assert 0.0 <= m["top1_agreement"] <= 1.0 and m["kl"] >= 0.0
        assert m["loop"] == (m["repeated_ngram_share"] > runner.LOOP_THRESHOLD)
        # the cache that ran is the one asked for
        for where in ("token_by_token", "generate"):
            check = r["cache_check"][where]
            if r["kv"] == "auto":
                assert check["quantized_layers"] == 0
            else:
                assert check["quantized_layers"] == check["quantized_layers_filled"] > 0
    smol = [r for r in data["rows"] if r["model"] == "smollm2-135m" and r["kv"] not in ("auto",)]
    assert all(sum(r["cache_check"]["generate"]["layers"].values()) == 30 for r in smol)
    assert all(r["cache_check"]["generate"]["quantized_layers"] == 30 for r in smol)
    # QuantizedCache is what generate built for the backends transformers has
    assert all(r["cache_check"]["generate"]["class"] == "QuantizedCache" for r in smol if r["kv"] != "fp8-unit-scale")


# ---------------------------------------------------------------------------------------------------------------------
# (b) the reader
# ---------------------------------------------------------------------------------------------------------------------


def test_evidence_for_measured_configs():
    ev = quality.evidence_for("bf16", "hqq-4")
    assert ev and {e.model for e in ev} >= {"SmolLM2-135M"}
    e = next(e for e in ev if e.model_key == "smollm2-135m")
    assert e.kv == "hqq-4" and e.weights == "fp32" and not e.is_baseline
    assert e.perplexity_ratio > 0 and 0 <= e.top1_agreement <= 1
    s = e.summary()
    assert s.startswith("SmolLM2-135M: ppl x") and "top-1 agree" in s and ("loops" in s)
    assert quality.evidence_for("nf4", "auto") and all(e.weights == "nf4" for e in quality.evidence_for("nf4", "auto"))
    # aliases and both fp8 variants
    assert [e.kv for e in quality.evidence_for("fp16", "HQQ4")] == [e.kv for e in ev]
    assert {"fp8", "fp8-unit-scale"} <= {e.kv for e in quality.evidence_for("bf16", "fp8")}
    base = quality.evidence_for("bf16", "auto")
    assert base and all(e.is_baseline and "baseline" in e.summary() for e in base)
    assert quality.quality_cell("bf16", "hqq-2").startswith("measured, small models: SmolLM2-135M")


@pytest.mark.parametrize("weights,kv", [("awq", "auto"), ("gptq", "hqq-4"), ("nf4", "hqq-4"), ("int8", "auto"),
                                        ("bf16", "fp8-e5m2"), ("hqq4", "auto"), ("nonsense", "auto")])
def test_evidence_for_unmeasured_is_empty(weights, kv):
    assert quality.evidence_for(weights, kv) == []
    assert quality.quality_cell(weights, kv) == ""


def test_docs_page_shows_the_committed_data():
    page = (quality.DATA_PATH.parents[2] / "docs" / "quality.md").read_text()
    assert quality.markdown_table() in page, "docs/quality.md drifted from the data: paste `python -m kvcalc.quality`"
    assert quality.CAVEAT in page
    assert "bash scripts/measure_quality.sh" in page


def test_caveat_says_what_small_models_cannot():
    c = quality.CAVEAT
    for phrase in ("MORE sensitive", "3B or 70B", "head_dim", "GQA", "outlier", "not task accuracy"):
        assert phrase in c


def test_reader_and_runner_import_without_torch():
    code = ("import sys, kvcalc.quality, kvcalc.validate.quality_runner; kvcalc.quality.evidence_for('nf4', 'auto'); "
            "bad = [m for m in ('torch', 'transformers', 'hqq', 'optimum') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_repetition_metrics():
    assert runner.repeated_ngram_share(list(range(100))) == 0.0
    loop = [1, 2, 3, 4, 5] * 20
    assert runner.repeated_ngram_share(loop) > 0.9
    assert runner.tail_loop(list(range(50)) + [7, 8, 9] * 10) == (3, 30)
    assert runner.tail_loop(list(range(50))) == (0, 0)
    assert runner.greedy_agreement([1, 2, 3, 4], [1, 2, 0, 4], 4) == (0.75, 2)
    assert runner.greedy_agreement([1, 2], [1, 2], 256) == (1.0, None)


# ---------------------------------------------------------------------------------------------------------------------
# (c) a CI-sized real measurement: SmolLM2-135M, the cache filled token by token
# ---------------------------------------------------------------------------------------------------------------------

N_TOKENS = 160  # 32 predictions past the 128-token full-precision residual, each with 128 quantized tokens behind it


@pytest.fixture(scope="module")
def token_by_token(smollm2):
    pytest.importorskip("hqq", reason="hqq is not installed")
    import torch

    model, tok, _ = smollm2
    ids = runner.text_ids(tok, N_TOKENS)
    assert ids.shape[1] == N_TOKENS
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one-token steps of a 135M model: a second thread costs more than it gives on 2 cores
    try:
        for kv in ("auto", "hqq-4", "hqq-2"):
            cache = runner.build_cache(model, kv)
            res = runner.token_by_token(model, ids, cache, keep_logprobs=True)
            res["check"] = runner.check_cache(res.pop("cache"), model, kv)
            out[kv] = res
    finally:
        torch.set_num_threads(threads)
    return out


def _compare(tbt, kv, split):
    base = tbt["auto"]
    return runner.compare_positions(base, base["logprobs"], tbt[kv], tbt[kv]["logprobs"], split=split)


@pytest.mark.cpu_engine
def test_hqq4_cache_is_close_to_the_default_cache(token_by_token):
    assert token_by_token["hqq-4"]["check"]["class"] == "QuantizedCache"
    assert token_by_token["hqq-4"]["check"]["layers"] == {"HQQQuantizedLayer": 30}
    base_ppl = math.exp(sum(token_by_token["auto"]["nll"]) / (N_TOKENS - 1))
    m = _compare(token_by_token, "hqq-4", split=128)
    print(f"hqq-4 over {N_TOKENS} tokens: {m}, baseline ppl {base_ppl:.3f}")
    assert 0.9 < m["ppl"] / base_ppl < 1.5
    assert m["top1_agreement"] > 0.7
    assert m["kl"] < 0.5


@pytest.mark.cpu_engine
def test_2bit_cache_is_worse_than_4bit(token_by_token):
    m4 = _compare(token_by_token, "hqq-4", split=128)
    m2 = _compare(token_by_token, "hqq-2", split=128)
    print(f"hqq-2: {m2}")
    # past the residual, where the cache really is quantized, 2 bits must cost more than 4
    assert m2["ppl_after_128"] > m4["ppl_after_128"]
    assert m2["kl_after_128"] > m4["kl_after_128"]
    assert m2["ppl"] > m4["ppl"]


def test_the_core_copy_of_the_loop_threshold_is_the_runners():
    # review §1.2.9: quality.py may not import kvcalc/validate/ (house rule), so it keeps a copy; this holds it equal
    from kvcalc import quality
    from kvcalc.validate import quality_runner

    assert quality.LOOP_THRESHOLD == quality_runner.LOOP_THRESHOLD
