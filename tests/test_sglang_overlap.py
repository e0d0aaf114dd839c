"""SGLang's overlap scheduler off (--disable-overlap-schedule, or a configuration SGLang switches it off for): the
flag in kvcalc's spelling and inside --sglang-command, the rules of engines/sglang.overlap_off, and the normal loop
in the serve simulation (serve_sim NORMAL LOOP: no result lag, arrivals received before the next step is built)."""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import kvcalc
from kvcalc.catalog import load_model
from kvcalc.engines import sglang as S
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.serve_sim import EngineConfig, Load, simulate
from kvcalc.sglang_command import parse_sglang_command

from cli_helper import invoke as run_cli

sys.path.insert(0, str(Path(__file__).parent))
from test_serve_sim import FloorCost, ToyCost  # noqa: E402  (the hand-checkable step costs)

PLAN = dict(model="llama-3.1-8b", gpu="h200", engine="sglang", context="2k", input_len=1024, output_len=128,
            concurrency=16, weights="bf16", kv="auto")
# SGLang's overlap loop (workload.vllm_bench for an SGLang row) and its normal loop
OVERLAP = EngineConfig(8192, 64, 10_000, 16, 4096, prefix_caching=False, async_scheduling=True, prefill_first=True,
                       result_lag=True)
NORMAL = dataclasses.replace(OVERLAP, async_scheduling=False, result_lag=False)


def settings(**kw):
    return S.SglangSettings(weights=weight_format("bf16"), kv=kv_format("auto"), context_length=4096, **kw)


def baseline(result, engine="sglang"):
    return next(r for r in result.to_json()["rows"] if r["engine"] == engine and r["config"] == "baseline")


# ------------------------------------------------------------------------------------------ the flag


def test_the_flag_parses_in_kvcalcs_spelling_and_reaches_the_row():
    on, off = kvcalc.plan(**PLAN), kvcalc.plan(**PLAN, disable_overlap_schedule=True)
    assert not on.request.disable_overlap_schedule and off.request.disable_overlap_schedule
    row_on, row_off = baseline(on), baseline(off)
    assert row_on["sglang_breakdown"]["overlap_schedule"] is True
    assert row_off["sglang_breakdown"]["overlap_schedule"] is False
    assert off.to_json()["settings"]["disable_overlap_schedule"] is True
    assert on.to_json()["settings"]["disable_overlap_schedule"] is False
    assert any(n.startswith("overlap scheduler off (--disable-overlap-schedule)") for n in row_off["notes"])
    assert not any("overlap scheduler off" in n for n in row_on["notes"])
    # the simulation runs the normal loop: 16 clients' waves of 1k prompts lose the result lag (first tokens leave
    # at their prefill's end), so the mean TTFT drops; the decode steps are the same steps
    assert row_off["bench"]["ttft_s"] < row_on["bench"]["ttft_s"]
    assert row_off["bench"]["tpot_s"] >= row_on["bench"]["tpot_s"]


def test_the_flag_parses_inside_sglang_command():
    values, warnings = parse_sglang_command("python -m sglang.launch_server --model-path m --disable-overlap-schedule "
                                            "--tp 2")
    assert values["disable_overlap_schedule"] is True and values["tp"] == 2 and not warnings
    assert "disable_overlap_schedule" not in parse_sglang_command("sglang serve --model-path m")[0]
    pasted = kvcalc.plan(sglang_command="python -m sglang.launch_server --model-path llama-3.1-8b "
                                        "--disable-overlap-schedule", gpu="h200", context="2k")
    assert pasted.request.disable_overlap_schedule
    assert all(r["sglang_breakdown"]["overlap_schedule"] is False for r in pasted.to_json()["rows"])


def test_explain_says_why_overlap_is_off():
    code, out, err = run_cli(["explain", "--gpu", "h200", "--model", "llama-3.1-8b", "--context", "2k", "--engine",
                              "sglang", "--disable-overlap-schedule"])
    assert code == 0, err
    assert "note: overlap scheduler off (--disable-overlap-schedule): SGLang runs its normal loop" in out
    code, out, err = run_cli(["explain", "--gpu", "h200", "--model", "llama-3.1-8b", "--context", "2k", "--engine",
                              "sglang"])
    assert code == 0 and "overlap scheduler off" not in out


def test_the_flag_on_a_vllm_only_plan_is_warned_about():
    res = kvcalc.plan(model="llama-3.1-8b", gpu="h200", context="2k", disable_overlap_schedule=True)
    assert any(w.startswith("--disable-overlap-schedule: SGLang's setting") for w in res.warnings)


def test_the_web_api_takes_the_flag_as_the_cli_does():
    pytest.importorskip("starlette", reason="the web extra is not installed")
    pytest.importorskip("httpx", reason="starlette's TestClient needs httpx")
    from starlette.testclient import TestClient

    from kvcalc.web import app as web_app

    params = {"gpu": "h200", "model": "llama-3.1-8b", "context": "2k", "engine": "sglang", "input_len": "1024",
              "output_len": "128", "concurrency": "16", "disable_overlap_schedule": "1"}
    r = TestClient(web_app.create_app(), base_url="http://localhost").get("/api/plan", params=params)
    assert r.status_code == 200, r.text
    code, out, err = run_cli(["plan", "--gpu", "h200", "--model", "llama-3.1-8b", "--context", "2k", "--engine",
                              "sglang", "--input-len", "1024", "--output-len", "128", "--concurrency", "16",
                              "--disable-overlap-schedule", "--json"])
    assert code == 0, err
    assert r.json() == json.loads(out) and r.json()["settings"]["disable_overlap_schedule"] is True


def test_search_carries_the_flag_into_every_candidate_and_its_launch_line():
    code, out, err = run_cli(["search", "--model", "llama-3.1-8b", "--input-len", "1k", "--output-len", "128",
                              "--concurrency", "16", "--gpus", "h200", "--weights", "bf16", "--kv", "auto", "--tp",
                              "1", "--server", "sglang", "--disable-overlap-schedule", "--json", "--top", "3"])
    assert code == 0, err
    data = json.JSONDecoder().raw_decode(out)[0]
    assert data["sglang_settings"] == {"disable_overlap_schedule": True}
    assert data["results"] and "--disable-overlap-schedule" in data["results"][0]["command"]
    assert parse_sglang_command(data["winner_command"])[0]["disable_overlap_schedule"]
    assert any("--disable-overlap-schedule runs SGLang's normal loop" in w for w in data["warnings"])


def test_a_pasted_sglang_command_gives_search_the_flag():
    code, out, err = run_cli(["search", "--sglang-command", "python -m sglang.launch_server --model-path llama-3.1-8b "
                              "--disable-overlap-schedule", "--input-len", "1k", "--output-len", "128", "--concurrency",
                              "16", "--gpus", "h200", "--json", "--top", "2"])
    assert code == 0, err
    data = json.JSONDecoder().raw_decode(out)[0]
    assert data["engine"] == "sglang" and data["sglang_settings"] == {"disable_overlap_schedule": True}
    assert data["winner_command"].endswith("--disable-overlap-schedule")


def test_a_vllm_search_refuses_the_sglang_flag():
    code, _, err = run_cli(["search", "--model", "llama-3.1-8b", "--input-len", "1k", "--output-len", "128",
                            "--concurrency", "16", "--gpus", "h200", "--disable-overlap-schedule"])
    assert code != 0 and "--disable-overlap-schedule is an SGLang setting" in err


# ------------------------------------------------------------------------------------------ SGLang's own switch-offs


@pytest.mark.parametrize("version, kw, off", [
    ("0.5.14", {}, ""),
    ("0.5.14", dict(disable_overlap_schedule=True), "--disable-overlap-schedule"),
    ("0.5.14", dict(speculative_algorithm="EAGLE3"), ""),  # spec v2 overlaps (speculative/spec_registry.py:96)
    ("0.5.13", dict(speculative_algorithm="NGRAM"), ""),
    ("0.5.12", dict(speculative_algorithm="NGRAM"), "NGRAM"),  # 0.5.12 server_args.py:3858
    ("0.5.12", dict(speculative_algorithm="EAGLE", speculative_eagle_topk=4), "topk 4"),  # :3749-3755
    ("0.5.11", dict(speculative_algorithm="EAGLE", speculative_eagle_topk=1), ""),  # SGLANG_ENABLE_SPEC_V2 on
    ("0.5.10", dict(speculative_algorithm="EAGLE"), "EAGLE"),  # :3014-3015, SGLANG_ENABLE_SPEC_V2 off
    ("0.4.4", dict(speculative_algorithm="EAGLE"), "EAGLE"),  # :280-284
])
def test_overlap_off_follows_each_releases_server_args(version, kw, off):
    reason = S.overlap_off(settings(version=version, **kw))
    assert (reason == "") == (off == "") and off in reason


def test_a_switch_off_sglang_makes_itself_is_said_and_simulated():
    """SGLang 0.5.10 runs EAGLE without the overlap scheduler (server_args.py:3014-3015): the row says why and its
    simulation runs the normal loop as --disable-overlap-schedule's does."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    est = S.estimate(spec, gpu, settings(version="0.5.10", speculative_algorithm="EAGLE"))
    assert est.overlap_schedule is False and est.to_json()["overlap_schedule"] is False
    assert any(n.startswith("overlap scheduler off (speculative decoding (EAGLE; SGLang 0.5.10") for n in est.notes)
    assert S.estimate(spec, gpu, settings(version="0.5.14", speculative_algorithm="EAGLE")).overlap_schedule


# ------------------------------------------------------------------------------------------ the normal loop, by hand


def test_a_lone_request_times_the_same_in_both_loops():
    """Closed loop of one client, 100-token prompts, 5 tokens out, SGLang's 5 ms prefill floor (FloorCost), the
    front end 0.2 ms. Each request: TTFT 0.2 + 5 ms, TPOT 1 ms + 1 us (a graph-replayed decode step: the only CPU
    figure it has is the per-step overhead in its 1 ms, serial with the GPU in either loop). What differs: in the
    overlap loop request 1 finishes at step k while step k+1, one more decode of it (1.001 ms), was already built, so
    request 2, reaching the engine 0.2 ms after request 1's end, is prefilled after that step: TTFT 1.001 + 5 ms.
    The normal loop processes step k's result before it builds step k+1: no such step, TTFT 5.2 ms again."""
    load = Load(100, 5, 3, max_concurrency=1)
    on, off = (simulate(FloorCost(), cfg, load, frontend_s=0.2e-3) for cfg in (OVERLAP, NORMAL))
    assert off.ttft_s == pytest.approx([5.2e-3] * 3)
    assert on.ttft_s == pytest.approx([5.2e-3, 6.001e-3, 6.001e-3])
    assert on.tpot_s == pytest.approx([1.001e-3] * 3) and off.tpot_s == pytest.approx([1.001e-3] * 3)
    assert on.steps == off.steps + 2  # the two decode steps built for finished requests (the last one's has no
    # request behind it: the simulation stops at the last completion)


def test_without_overlap_a_prefills_first_token_leaves_at_its_end():
    """Two 100-token prompts at once, max_prefill_tokens 100 (a batch of one prompt), the 5 ms prefill floor, 3
    tokens out. Steps: A's prefill [0, 5 ms], B's prefill [5, 10 ms], two decodes of both [10, 11.002, 12.004 ms].
    Overlap loop: A's result is processed after B's prefill was launched and had its 5 ms of CPU, so A's first token
    leaves at 10 ms and its TPOT is (12.004 - 10) / 2 = 1.002 ms. Normal loop: A's result is processed at 5 ms, before
    B's prefill is built: TTFT 5 ms, TPOT (12.004 - 5) / 2 = 3.502 ms, the same tokens at the same times after it."""
    load = Load(100, 3, 2)
    on, off = (simulate(FloorCost(), dataclasses.replace(cfg, max_prefill_tokens=100), load)
               for cfg in (OVERLAP, NORMAL))
    assert on.ttft_s == pytest.approx([10e-3, 10e-3]) and off.ttft_s == pytest.approx([5e-3, 10e-3])
    assert on.tpot_s == pytest.approx([1.002e-3, 1.002e-3]) and off.tpot_s == pytest.approx([3.502e-3, 1.002e-3])
    assert off.e2e_s == pytest.approx([12.004e-3, 12.004e-3]) and on.e2e_s == pytest.approx(off.e2e_s)


def test_without_overlap_a_request_arriving_during_a_step_joins_the_next_one():
    """A (100 tokens, 20 out) decodes alone, 1.001 ms a step (ToyCost: 1 ms + 1 us a token), after its 1.1 ms
    prefill; B reaches the engine during A's decode step j. The overlap loop built step j+1 while step j ran, so B
    is received for step j+2: its prefill starts one decode step (1.001 ms) later than in the normal loop, which
    receives it before it builds step j+1 (SGLang prefills it first, A's decode waiting)."""
    load = Load(100, 20, 2, request_rate=400.0, seed=3)
    on, off = (simulate(ToyCost(), cfg, load) for cfg in (OVERLAP, NORMAL))
    a0, tau = float(off.arrive_s[0]), float(off.arrive_s[1])
    step, prefill = 1.001e-3, 1.1e-3
    into = (tau - a0 - prefill) / step  # decode steps of A done when B arrives
    assert 1 < into < 18 and 0.05 < into % 1 < 0.95  # B comes inside a decode step of A, A not yet done
    end_j = a0 + prefill + np.ceil(into) * step  # the end of the step B arrives in
    assert off.ttft_s[1] == pytest.approx(end_j + prefill - tau, abs=1e-9)
    assert on.ttft_s[1] == pytest.approx(end_j + step + prefill - tau, abs=1e-9)
    assert on.ttft_s[0] == pytest.approx(off.ttft_s[0]) == pytest.approx(prefill)


# ------------------------------------------------------------------------------------------ property


@pytest.mark.parametrize("seed", range(40))
def test_disabling_overlap_never_lowers_tpot_of_a_burst(seed):
    """One burst of prompts into an engine that holds them all (every request admitted as its turn comes, nothing
    arriving later): both loops run the same steps, and the overlap loop only delays a step's first tokens (the
    result lag), never a later token. So with overlap off no request's TPOT is lower, none's TTFT higher, and every
    e2e is the same. (Under arrivals spread in time the two loops schedule differently and neither sign holds
    request by request: kvcalc has no figure for the scheduler's CPU between steps that the normal loop exposes.)"""
    rng = np.random.default_rng(seed)
    floor = float(rng.choice([0.0, 2e-3, 5e-3]))
    cost = FloorCost(prefill_floor_s=floor) if floor else ToyCost()
    n = int(rng.integers(1, 24))
    on = dataclasses.replace(OVERLAP, max_num_batched_tokens=int(rng.choice([64, 256, 2048, 8192])),
                             max_prefill_tokens=int(rng.choice([100, 1000, 16384])), num_blocks=100_000)
    off = dataclasses.replace(on, async_scheduling=False, result_lag=False)
    load = Load(int(rng.integers(8, 600)), int(rng.integers(2, 40)), n, random_range_ratio=float(rng.choice([0, .5])),
                seed=seed)
    a, b = simulate(cost, on, load), simulate(cost, off, load)
    assert np.all(b.tpot_s >= a.tpot_s - 1e-12)
    assert np.all(b.ttft_s <= a.ttft_s + 1e-12)
    assert b.e2e_s == pytest.approx(a.e2e_s, abs=1e-12)
    assert b.metrics()["mean_tpot_ms"] >= a.metrics()["mean_tpot_ms"] - 1e-9
