"""vLLM 0.8-0.10's piecewise CUDA graphs: the CPU's per-layer floor on a step (vllm_versions.piecewise_decode_floor_s,
throughput.yaml engines.vllm piecewise_layer_cpu_s), by release, in the simulation and the closed form, and the shipped
constant as the speed-corpus report's declared fit."""

from __future__ import annotations

import dataclasses

import pytest

from kvcalc.constants import load
from kvcalc.engines.vllm_versions import FULL_DECODE_GRAPHS_SINCE, piecewise_decode_floor_s
from tests.script_loader import load_script


def _per_layer() -> float:
    return load("throughput")["engines"]["vllm"]["piecewise_layer_cpu_s"]


def test_floor_by_release():
    assert FULL_DECODE_GRAPHS_SINCE == "0.11.0"  # vllm#25444: FULL_AND_PIECEWISE by default from v0.11.0
    for version in ("0.8.0", "0.8.5", "0.9.2", "0.10.1.1"):
        assert piecewise_decode_floor_s(version, 28) == pytest.approx(28 * _per_layer())
    for version in ("0.11.0", "0.23.0", None, ""):
        assert piecewise_decode_floor_s(version, 28) == 0.0
    assert piecewise_decode_floor_s("0.6.2", 28) == 0.0  # V0: its own graph rule (v0_graph_max_context)


def test_floor_bounds_a_small_models_step_on_those_releases_only():
    """The fit's row (a 28-layer 1.5B on an H100 PCIe at 1 req/s): read as vLLM 0.8.5 its TPOT stands on the floor,
    in the serve simulation and the closed form alike; read as 0.11.0 (full decode graphs) it is the GPU's, faster;
    an 8B on the same host (GPU-bound: 32 layers x the floor is below its step) does not move."""
    report = load_script("speed_corpus_report")
    by_id = {r["id"]: r for r in report.load_rows()}
    row = by_id[report.PIECEWISE_FIT_ROW]
    assert row["vllm_version"] == "0.8.5" and row["gpu"] == "h100-pcie" and row["kvcalc_model"] == "qwen2.5-1.5b"
    floor_ms = 28 * _per_layer() * 1e3
    old = report.predict(row)
    new = report.predict(dict(row, vllm_version="0.11.0", id=row["id"] + "-as-0.11"))
    assert old >= floor_ms * 0.999 and new < 0.9 * old
    assert report.predict(row, simulate=False) >= floor_ms * 0.999
    big = next(r for r in by_id.values() if r["source"] == row["source"] and r["gpu"] == "h100-pcie"
               and r["kvcalc_model"] == "llama-3.1-8b" and r["metric"] == "tpot_ms")
    assert report.predict(big) == pytest.approx(
        report.predict(dict(big, vllm_version="0.11.0", id=big["id"] + "-as-0.11")), rel=0.02)


def test_shipped_per_layer_cpu_is_the_reports_fit():
    report = load_script("speed_corpus_report")
    fit = report.fit_piecewise_layer_cpu()
    assert fit["shipped"] == _per_layer()
    assert fit["refit"] == pytest.approx(fit["shipped"], rel=0.01)
    assert abs(fit["errors"]["shipped"][report.PIECEWISE_FIT_ROW]) < 0.01
    assert all(e < -0.2 for e in fit["errors"]["without"].values())  # the gap the floor closes


def test_floor_leaves_enforce_eager_and_sglang_alone():
    """enforce_eager has its own launch floor (throughput._eager_cpu_s); the piecewise one is not added to it."""
    from kvcalc.catalog import load_model
    from kvcalc.formats import kv_format, weight_format
    from kvcalc.hardware import get_gpu
    from kvcalc.workload import Workload, vllm_bench

    spec, gpu, w, kv = load_model("qwen2.5-1.5b"), get_gpu("h100-pcie"), weight_format("bf16"), kv_format("auto")
    wl = Workload(input_len=128, output_len=64, concurrency=1, request_rate=None, num_prompts=2)
    eager = [vllm_bench(spec, gpu, w, kv, wl, chunk_tokens=2048, slots=8, enforce_eager=True, vllm_version=v).tpot_s
             for v in ("0.8.5", "0.11.0")]
    assert eager[0] == pytest.approx(eager[1], rel=0.05)
    graphs = vllm_bench(spec, gpu, w, kv, dataclasses.replace(wl), chunk_tokens=2048, slots=8,
                        vllm_version="0.8.5").tpot_s
    assert graphs >= 28 * _per_layer() * 0.999


def _plan_row(model, gpu, context, batch, version, with_request=False):
    from kvcalc.catalog import load_model
    from kvcalc.hardware import get_gpu
    from kvcalc.inverse import row_for
    from kvcalc.plan import PlanRequest

    req = PlanRequest(spec=load_model(model), gpu=get_gpu(gpu), context=context, batch=batch, engines=("vllm",),
                      vllm_version=version)
    return (row_for(req), req) if with_request else row_for(req)


def test_plans_decode_column_stands_on_the_floor_on_those_releases():
    """`kvcalc plan`'s decode tok/s takes the floor as the simulation does (workload.vllm_decode_step): the 1.5B
    (28 layers) at batch 8 and 1,024 tokens on an H100 PCIe is GPU-bound at ~3.2 ms on 0.26.0, so on 0.9.2 its step is
    the CPU's 28 x 0.146 ms = 4.088 ms and its decode 8 / 4.088 ms = 1,957 tok/s, with a note saying why (and
    --explain showing both steps); an 8B's step (~10.9 ms) is above its 32-layer floor (4.67 ms) and does not move."""
    from kvcalc.render import explain_text

    new = _plan_row("qwen2.5-1.5b", "h100-pcie", 1024, 8, "0.26.0")
    old, req = _plan_row("qwen2.5-1.5b", "h100-pcie", 1024, 8, "0.9.2", with_request=True)
    floor = 28 * _per_layer()  # 4.088 ms at the shipped 0.146 ms a layer
    assert new.speed.step_s < floor and new.speed.gpu_step_s is None
    assert old.speed.step_s == pytest.approx(floor, rel=1e-12)
    assert old.decode_tokens_per_s == pytest.approx(8 / floor, rel=1e-12)
    assert old.speed.gpu_step_s == pytest.approx(new.speed.step_s, rel=1e-9)  # the GPU's step is the release's
    assert any("piecewise CUDA graphs only" in n for n in old.notes)
    assert not any("piecewise CUDA graphs only" in n for n in new.notes)
    text = explain_text(req, old)
    gpu_ms = new.speed.step_s * 1e3
    assert f"step {floor * 1e3:.3f} ms: the GPU's {gpu_ms:.3f} ms under vLLM 0.9.2's rules" in text
    assert f"GPU step {gpu_ms:.3f} ms = overhead" in text
    big_new, big_old = (_plan_row("llama-3.1-8b", "h100-pcie", 1024, 8, v) for v in ("0.26.0", "0.9.2"))
    assert big_old.speed.step_s > 32 * _per_layer()
    assert big_old.decode_tokens_per_s == pytest.approx(big_new.decode_tokens_per_s, rel=1e-9)
