"""scripts/serve_steps_report.py: the H200 runs e-g step by step, logged against simulated."""
from __future__ import annotations

import pytest
from script_loader import load_script

steps_report = load_script("serve_steps_report")


@pytest.fixture(scope="module")
def runs():
    return steps_report.run_steps(steps_report.load_report.runs())


def test_every_pre_registered_run_finds_its_steps(runs):
    """The client's clock places each bench run in its server's log: 26 runs, and a run's logged prompt tokens are
    its prompts' (less the prefix-cache hits), so no step of a neighbouring run leaks in."""
    assert len(runs) == 26
    for cid, (case, steps, walls) in runs.items():
        assert len(walls) == len(steps) - 1
        prompts = case["bench"]["total_input_tokens"]
        logged = sum(s.context_tokens for s in steps)
        assert logged <= prompts, cid
    # with prefix caching off every prompt token is scheduled, exactly once
    case, steps, _ = runs["llama-3.1-8b-nopc.c128_1k_256"]
    assert sum(s.context_tokens for s in steps) == case["bench"]["total_input_tokens"] == 384 * 1024


def test_classes_and_waves_by_hand():
    assert steps_report.classify(0, 1) == "decode 1"
    assert steps_report.classify(0, 128) == "decode 65-128"
    assert steps_report.classify(400, 100) == "prompt 1-512 (graph)"
    assert steps_report.classify(1024, 0) == "prompt 513-4096 (eager)"
    assert steps_report.classify(8064, 128) == "prompt 8192-budget (eager)"
    # two bursts of prompt steps: 1 prompt alone, then 3 steps admitting 9 + 9 + 2
    rows = [(1, 1024, 0), (0, 0, 1), (0, 0, 1), (9, 8190, 1), (9, 8180, 10), (2, 1500, 19), (0, 0, 21)]
    c = steps_report.composition(rows)
    assert (c["steps"], c["prompt_steps"], c["mixed_steps"], c["bursts"], c["waves"]) == (7, 4, 3, 2, 1)
    assert c["wave_prompts"] == [20] and c["wave_steps"] == [3]
    assert c["prompts_per_prompt_step"] == pytest.approx(21 / 4)


def test_the_step_report_finds_the_moe_compile_stalls_and_the_dense_costs():
    """The MoE servers stall on first-use Triton compiles (jit_monitor's warning); the dense servers never stall, and
    their decode steps of 65-128 requests and full-budget prompt steps land within 15% of the simulation's."""
    rep = steps_report.report()
    by = {r["id"]: r for r in rep["runs"]}
    assert by["qwen3-30b-a3b-iter.c128_1k_256"]["measured"]["stall_s"] > 2
    for cid in ("llama-3.2-3b-fp8kv-iter.c128_1k_256", "llama-3.1-8b-nopc.c128_1k_256", "llama-3.1-8b-fp8w.c128_1k_256"):
        m, s = by[cid]["measured"], by[cid]["simulated"]
        assert m["stalls"] == 0
        for key, i in (("decode 65-128", 1), ("prompt 8192-budget (eager)", 2)):
            assert abs(s["classes"][key][i] / m["classes"][key][i] - 1) < 0.15, (cid, key)
