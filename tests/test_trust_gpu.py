"""Per-GPU ranges (issue 18 item 3): a GPU's own held-out public results set or widen the range its speed figures
carry (scripts/speed_corpus_report.py gpu_band -> speed.yaml intervals.by_gpu.<gpu>.bands -> kvcalc/trust.py), the
per-GPU coverage that the report publishes, and SGLang's ranges from its own held-out errors."""

from __future__ import annotations

import json
import math

import pytest

from kvcalc import trust
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.trust import LABELS, sglang_speed_trust, speed_trust
from tests.cli_helper import invoke
from tests.script_loader import load_script

report = load_script("speed_corpus_report")
BF16, AUTO = weight_format("bf16"), kv_format("auto")


def result(ratio: float, c: str = "TPOT", gpu: str = "x", source: str = "s1", i: int = 0) -> dict:
    """A held-out result whose measured / kvcalc is `ratio` (kvcalc predicted 1, measured `ratio`)."""
    return {"id": f"synthetic-{gpu}-{source}-{c}-{i}", "gpu": gpu, "source": source, "class": c, "measured": ratio,
            "predicted": 1.0, "error": 1 / ratio - 1}


# -- the arithmetic, by hand ---------------------------------------------------------------------------------------


def test_order_bounds_by_hand():
    # n = 9: k = floor(10 x 0.1) = 1, the extremes; n = 19: k = 2; n = 29: k = 3
    assert report.order_bounds(list(range(9))) == (0, 8)
    assert report.order_bounds(list(range(19))) == (1, 17)
    assert report.order_bounds(list(range(29))[::-1]) == (2, 26)
    # the guarantee: (n + 1 - 2k) / (n + 1) >= 0.8 for every n, which a 10th/90th percentile does not give
    for n in range(10, 200):
        k = max(1, math.floor((n + 1) * 0.1))
        assert (n + 1 - 2 * k) / (n + 1) >= 0.8


def test_own_band_is_the_order_bounds_of_its_results():
    # ten TPOT results measured at 0.7 .. 1.5 x kvcalc: k = 1, the band is their extremes: -30% / +50%
    ratios = [0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5]
    mine = [("TPOT", result(r, i=i)) for i, r in enumerate(ratios)]
    band = report.gpu_band(mine, "TPOT", {"low": -0.1, "high": 0.1})
    assert band == {"low": -0.3, "high": 0.5, "n": 10, "basis": "own"}  # the class band is replaced, not widened
    # nine of them: too few of the class; fewer than 10 over all its results too: the class band widened to hold each
    band = report.gpu_band(mine[:9], "TPOT", {"low": -0.1, "high": 0.1})
    assert band["basis"] == "few" and band["low"] == -0.3 and band["high"] == 0.3


def test_family_band_turns_a_rate_residual_into_a_time_one():
    """Ten throughput results where kvcalc is 2x too fast (it predicts twice the measured tok/s): a TPOT figure on
    this GPU (no TPOT result of its own) is then too short by 2x: measured TPOT up to figure x 2 (+100%); a throughput
    figure's own range is measured = figure x 0.5 (-50%)."""
    mine = [("throughput", result(0.5, "throughput", i=i)) for i in range(10)]
    tpot = report.gpu_band(mine, "TPOT", {"low": -0.1, "high": 0.2})
    assert tpot == {"low": -0.1, "high": 1.0, "n": 10, "basis": "family"}  # the class's low kept, its high widened
    thr = report.gpu_band(mine, "throughput", {"low": -0.2, "high": 0.1})
    assert thr == {"low": -0.5, "high": 0.0, "n": 10, "basis": "own"}
    # TTFT is another family (prefill): ten decode results are pooled over all metrics for it
    ttft = report.gpu_band(mine, "TTFT", {"low": -0.3, "high": 0.4})
    assert ttft == {"low": -0.3, "high": 1.0, "n": 10, "basis": "pooled"}
    assert report.gpu_band([], "TPOT", {"low": -0.1, "high": 0.1}) is None


def test_a_gpu_far_off_gets_a_wider_band_than_its_class():
    """The property the per-GPU ranges exist for: a GPU whose held-out results are far off (kvcalc 2-3x too fast, as
    the T4's public throughput rows) gets a range wider than its class's, which would not hold them."""
    cls = {"low": -0.35, "high": 0.093}
    mine = [("throughput", result(r, "throughput", i=i)) for i, r in enumerate(
        [0.34, 0.36, 0.4, 0.43, 0.45, 0.5, 0.56, 0.6, 0.34, 0.37, 0.45])]
    band = report.gpu_band(mine, "throughput", cls)  # 11 of its own class: k = 1, its extremes
    assert band == {"low": -0.66, "high": 0.0, "n": 11, "basis": "own"}
    assert band["high"] - band["low"] > cls["high"] - cls["low"]
    inside_class = sum(cls["low"] <= r["measured"] - 1 <= cls["high"] for _, r in mine)
    assert inside_class == 0  # the class range holds none of them; the GPU's own holds all
    assert all(band["low"] <= r["measured"] - 1 <= band["high"] for _, r in mine)
    # with too few of its own class (a TPOT figure on it: the decode family), the class band is widened, not replaced
    tpot = report.gpu_band(mine, "TPOT", {"low": -0.08, "high": 0.87})
    assert tpot["basis"] == "family" and tpot["low"] == -0.08 and tpot["high"] == pytest.approx(1 / 0.34 - 1, abs=2e-3)


def test_coverage_by_hand():
    """Eleven TPOT results of one GPU and one source, measured at 0.95 .. 1.65 x kvcalc, against a class band of
    -10%/+10%: the class holds 3 (0.95, 1.0, 1.05); the GPU's own band from all 11 (k = 1: -5%/+65%) holds all 11 (in
    sample); with each row left out the extremes fall out (9 of 11); with its source left out nothing is left, so the
    class band stands (3 of 11)."""
    ratios = [0.95, 1.0, 1.05, 1.3, 1.35, 1.4, 1.45, 1.5, 1.55, 1.6, 1.65]
    results = [result(r, i=i) for i, r in enumerate(ratios)]
    cov = report.gpu_coverage(results, {"TPOT": {"low": -0.1, "high": 0.1}})
    x = cov["x"]
    assert (x["n"], x["sources"]) == (11, 1)
    assert x["class"] == round(3 / 11, 3) and x["in_sample"] == 1.0
    assert x["loo_row"] == round(9 / 11, 3) and x["loo_source"] == round(3 / 11, 3)
    # a second source: each source's rows are scored against the other's band
    other = [result(r, source="s2", i=i) for i, r in enumerate([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9])]
    cov = report.gpu_coverage(results + other, {"TPOT": {"low": -0.1, "high": 0.1}})
    # s1's rows against s2's band (10 rows, k = 1: +0%/+90%): all but 0.95 inside, 10 of 11;
    # s2's rows against s1's band (11 rows, k = 1: -5%/+65%): 1.0 .. 1.6 inside, 7 of 10
    assert cov["x"]["loo_source"] == round((10 + 7) / 21, 3)
    assert cov["all"]["n"] == 21


# -- what kvcalc/trust.py does with them ---------------------------------------------------------------------------


def _intervals(bands: dict) -> dict:
    return {"held_out": {"TPOT": {"low": -0.2, "high": 0.3, "n": 100}, "TTFT": {"low": -0.3, "high": 0.5, "n": 50}},
            "datasheet": {"TPOT": {"low": -0.1, "high": 0.2, "n": 100}},
            "measured": {"TPOT": {"low": -0.05, "high": 0.05, "n": 60}},
            "by_gpu": {"t4": {"n": 22, "sources": 1, "median_abs": 0.67, "mean_signed": 0.3, "bands": bands}}}


def test_trust_widens_or_replaces_the_class_band(monkeypatch):
    monkeypatch.setattr(trust, "_intervals", lambda: _intervals(
        {"TPOT": {"low": -0.1, "high": 2.0, "n": 22, "basis": "family"},
         "TTFT": {"low": -0.05, "high": 0.05, "n": 12, "basis": "own"}}))
    t4 = get_gpu("t4")
    # decode tok/s (the inverse of TPOT): the class's (1/1.3 - 1, 1/0.8 - 1) = (-23.1%, +25%) widened to the GPU's
    # (1/3 - 1, 1/0.9 - 1) = (-66.7%, +11.1%): (-66.7%, +25%)
    t = speed_trust(t4, "vllm", BF16, AUTO, "TPOT", inverse=True)
    assert t.label == LABELS[1]
    assert (t.low, t.high) == (pytest.approx(-0.667, abs=1e-3), pytest.approx(0.25, abs=1e-3))
    assert "widened to t4's own 22" in t.range_basis
    # an 'own' band replaces the class's: TTFT -5%/+5% (not the class's -30%/+50%)
    t = speed_trust(t4, "vllm", BF16, AUTO, "TTFT")
    assert (t.low, t.high) == (-0.05, 0.05) and "t4's own 12 held-out public TTFT results" in t.range_basis
    # a GPU without a band keeps its class's, and says so
    t = speed_trust(get_gpu("l4"), "vllm", BF16, AUTO, "TPOT")
    assert (t.low, t.high) == (-0.1, 0.2) or (t.low, t.high) == (-0.2, 0.3)
    assert "class" in t.range_basis and "own" not in t.range_basis
    # transformers' figures keep their class (the corpus is vLLM's)
    assert "t4's own" not in speed_trust(t4, "hf", BF16, kv_format("auto"), "TPOT").range_basis


def test_shipped_bands_hold_the_class_band_unless_own():
    """In the shipped speed.yaml, every per-GPU band that is not 'own' contains its class band (it widens it), and a
    GPU whose held-out results are off by more than 20% on average (with at least 10 of them) gets a decode range
    wider than its class's: checked on the data the report wrote."""
    from kvcalc.constants import load

    iv = load("speed")["intervals"]
    held = iv["held_out"]
    checked = 0
    for g, stats in iv["by_gpu"].items():
        for c, b in (stats.get("bands") or {}).items():
            cls = report.table_band(held, c)
            if b["basis"] != "own" and cls:
                assert b["low"] <= cls["low"] + 1e-9 and b["high"] >= cls["high"] - 1e-9, (g, c)
                checked += 1
        if abs(stats["mean_signed"]) > 0.2 and stats["n"] >= 10:
            t = speed_trust(get_gpu(g), "vllm", BF16, AUTO, "TPOT", tp=1)
            cls_low, cls_high = trust._band("measured" if g in load("speed")["measured"] else "held_out", "TPOT")
            if g not in load("speed")["measured"]:  # a measured GPU's TP-1 range is its own runs'
                assert t.high - t.low > cls_high - cls_low, g
    assert checked > 0


def test_shipped_coverage_per_gpu():
    """The per-GPU coverage the report wrote: each GPU with at least 10 held-out results holds at least 80% of them
    with each row left out of its own range (the target)."""
    from kvcalc.constants import load

    rows = 0
    for g, stats in load("speed")["intervals"]["by_gpu"].items():
        cov = stats.get("coverage")
        assert cov, g
        if cov["n"] >= 10:
            rows += cov["n"]
            assert cov["loo_row"] >= 0.8, (g, cov)
    assert rows > 300


def test_gpus_say_their_range_and_coverage():
    from kvcalc.render import gpus_payload

    by_id = {p["id"]: p["speed_evidence"] for p in gpus_payload()}
    t4 = by_id["t4"]
    assert {"label", "backing", "decode_low", "decode_high", "range_basis", "coverage"} <= set(t4)
    assert t4["coverage"]["loo_row"] >= 0.8 and "t4's own" in t4["range_basis"]
    assert by_id["l40s"]["coverage"] is None  # no public result: its class's range, no coverage of its own


# -- SGLang ----------------------------------------------------------------------------------------------------------


def test_sglang_band_arithmetic():
    sg = load_script("sglang_speed_report")
    # errors kvcalc / measured - 1 of ten rows: measured / kvcalc 0.8 .. 1.25; k = 1 -> -20% / +25%
    errs = [1 / r - 1 for r in (0.8, 0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25)]
    # the 10th/90th percentile of the logs (statistics.quantiles, exclusive: positions 1.1 and 9.9 of 10):
    # low = 0.8^0.9 x 0.9^0.1 - 1 = -19.05%, high = 1.2^0.1 x 1.25^0.9 - 1 = +24.49%
    assert sg.band(errs) == {"low": -0.191, "high": 0.245, "n": 10}
    assert sg.band(errs[:9]) is None  # fewer than 10: no range


def test_sglang_rows_carry_a_range_or_say_why_not():
    h200 = sglang_speed_trust(get_gpu("h200"), "TPOT", inverse=True)
    assert h200.label == LABELS[0] and h200.low is not None and h200.low < 0 < h200.high
    assert "SGLang's own" in h200.range_basis
    l4 = sglang_speed_trust(get_gpu("l4"), "TPOT")
    assert l4.low is None and l4.high is None and l4.range_basis.startswith("no range:")
    # no SGLang result on an L4: SGLang's step there is vLLM's, named as an assumption
    assert l4.label == LABELS[3] and any("taken as vLLM's" in a for a in l4.assumptions)
    # a loaded TTFT counts the public TTFT results (4), not a 'TTFT-load' metric the corpus does not name
    assert "no range: 4 public SGLang TTFT" in sglang_speed_trust(get_gpu("l4"), "TTFT-load").range_basis
    assert l4.bounds(10.0) is None and l4.short() == "no range"
    # at TP 8 the H200's own runs (TP 1) do not bound it: its public SGLang results do, or no range
    tp8 = sglang_speed_trust(get_gpu("h200"), "TPOT", tp=8)
    assert tp8.label != LABELS[0] or tp8.low is None


def test_plan_and_search_rows_carry_ranges_json():
    """plan --engine servers: every row (vLLM's and SGLang's) has trust.speed with the old keys and range_basis;
    search's rows (both engines) have speed_evidence with tpot_low/high (None: no range) and range_basis."""
    code, out, err = invoke(["plan", "--gpu", "t4", "--model", "llama-3.2-3b", "--context", "4k", "--engine", "servers",
                             "--json"])
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert {r["engine"] for r in rows} == {"vllm", "sglang"}
    for r in rows:
        sp = r["trust"]["speed"]
        assert {"label", "backing", "low", "high", "assumptions", "range_basis"} <= set(sp), r["config"]
        assert sp["range_basis"]
        if r["engine"] == "sglang":
            assert sp["low"] is None and sp["range_basis"].startswith("no range")
        else:
            assert sp["low"] < 0 < sp["high"] and "t4's own" in sp["range_basis"]
    code, out, err = invoke(["search", "--model", "llama-3.1-8b", "--gpus", "l4,h200", "--input-len", "1k",
                             "--output-len", "128", "--concurrency", "4", "--server", "both", "--json", "--top", "5"])
    assert code == 0, err
    doc = json.loads(out)
    found = 0
    for key in ("results", "sglang_results", "sglang"):
        for d in doc.get(key) or []:
            if isinstance(d, dict) and "speed_evidence" in d:
                e = d["speed_evidence"]
                assert {"label", "tpot_low", "tpot_high", "ttft_low", "ttft_high", "range_basis"} <= set(e)
                found += 1
    assert found >= 2
