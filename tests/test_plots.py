"""Plots: the data behind each picture (tested without drawing), the PNGs, and the CLI's plot options."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helper import invoke

from kvcalc import plots, sweeps
from kvcalc.catalog import load_model
from kvcalc.errors import UsageError
from kvcalc.hardware import get_gpu
from kvcalc.plan import PlanRequest, plan

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _req(gpu="t4", model="llama-3.2-3b", context=32768, batch=1, **kw) -> PlanRequest:
    return PlanRequest(spec=load_model(model), gpu=get_gpu(gpu), context=context, batch=batch, **kw)


def _assert_png(path, min_bytes=10_000, max_bytes=400_000):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert min_bytes < len(data) < max_bytes, len(data)


# -- data (no matplotlib needed) -------------------------------------------------------------------------------------


def test_context_grid_spans_1k_to_the_model_max_or_128k():
    grid = sweeps.context_grid(_req(model="llama-3.1-8b"))  # 128k max positions
    assert grid[0] == 1024 and grid[-1] == 128 * 1024
    assert grid == sorted(set(grid))
    assert sweeps.context_grid(_req(model="llama-3.2-3b"))[-1] == 128 * 1024


@pytest.mark.parametrize("gpu,model", [("l4", "llama-3.1-8b"), ("t4", "llama-3.2-3b"), ("h200", "llama-3.1-8b")])
def test_capacity_is_non_increasing_in_context(gpu, model):
    series = sweeps.capacity_series(_req(gpu=gpu, model=model, context=16384))
    assert set(series) == {"baseline", "fp8-kv", "nf4", "nf4+fp8-kv", "awq", "awq+fp8-kv", "fp8"}
    for key, points in series.items():
        contexts = [c for c, _ in points]
        counts = [n for _, n in points]
        assert contexts == sorted(contexts)
        assert all(a >= b for a, b in zip(counts, counts[1:])), (key, points)
        assert counts[0] > 0, key


def test_capacity_matches_the_plan_at_the_asked_context():
    """Re-running vLLM with max_model_len = context is what the plan does at --context."""
    req = _req(gpu="l4", model="llama-3.1-8b", context=16384)
    series = sweeps.capacity_series(req)
    rows = {r.config: r for r in plan(req) if r.engine == "vllm"}
    for key, points in series.items():
        assert dict(points)[16384] == rows[key].max_concurrency, key


def test_fp8_kv_holds_about_twice_the_requests():
    series = sweeps.capacity_series(_req(gpu="h200", model="llama-3.1-8b", context=8192))
    base, fp8 = dict(series["baseline"]), dict(series["fp8-kv"])
    assert 1.8 < fp8[8192] / base[8192] < 2.2


def test_hf_longest_context_markers_come_from_the_plan():
    req = _req()
    longest = sweeps.hf_longest_contexts(req)
    rows = {r.config: r for r in plan(req) if r.engine == "hf"}
    assert set(longest) == set(rows)
    assert all(longest[k] == rows[k].kv_capacity_tokens for k in longest)


def test_speed_rises_with_batch_and_flattens():
    series = sweeps.speed_series(_req(gpu="h200", model="llama-3.1-8b", context=8192))
    assert set(series) == {"auto", "fp8"}
    for kv, points in series.items():
        assert [p.batch for p in points][0] == 1 and points[-1].batch == 256
        speeds = [p.tokens_per_s for p in points]
        assert all(b > a for a, b in zip(speeds, speeds[1:])), kv
        # per-request speed falls as the batch grows: the roofline bends
        assert points[-1].tokens_per_s / 256 < points[0].tokens_per_s
        fits = [p.fits for p in points]
        assert fits[0] and fits == sorted(fits, reverse=True)  # fits up to some batch, then not
    # FP8 KV reads half the KV bytes: faster at large batch
    assert series["fp8"][-1].tokens_per_s > series["auto"][-1].tokens_per_s


def test_measured_points_h200_only_with_cuda_graphs():
    if not sweeps.validation_data_dir().is_dir():
        pytest.skip("docs/validation/data is not next to the package (installed wheel)")
    points = sweeps.measured_speed_points("llama-3.1-8b", "h200")
    assert {(p.kv, p.batch) for p in points} >= {("auto", 1), ("auto", 32), ("fp8", 1), ("fp8", 32)}
    assert all(p.tokens_per_s > 0 and p.context > 0 for p in points)
    by = {(p.kv, p.batch): p.tokens_per_s for p in points}
    assert by[("auto", 1)] == pytest.approx(208.41)
    # every point is from a CUDA-graph run: eager runs are much slower at batch 1 (about 64 tok/s for the 3B)
    assert all(p.tokens_per_s > 150 for p in sweeps.measured_speed_points("llama-3.2-3b", "h200") if p.batch == 1)
    assert sweeps.measured_speed_points("llama-3.1-8b", "l4") == []
    assert sweeps.measured_speed_points("llama-3.1-8b", "h200", tp=2)  # the TP 2 run
    assert sweeps.measured_speed_points("no-such-model", "h200") == []


def test_measured_points_skip_quietly_without_data(tmp_path):
    assert sweeps.measured_speed_points("llama-3.1-8b", "h200", data_dir=tmp_path / "absent") == []
    (tmp_path / "vllm-x.jsonl").write_text("not json\n" + json.dumps({"status": "ok", "settings": {
        "model": "llama-3.1-8b", "kv": "auto", "enforce_eager": False}, "observed": {"speed": {
            "b4": {"batch": 4, "prompt_len": 100, "max_tokens": 20, "decode_tokens_per_s": 500.0}}}}) + "\n")
    (point,) = sweeps.measured_speed_points("llama-3.1-8b", "h200", data_dir=tmp_path)
    assert (point.batch, point.tokens_per_s, point.context) == (4, 500.0, 110)


@pytest.mark.parametrize("gpu,model,context", [("t4", "llama-3.2-3b", 32768), ("h200", "llama-3.1-8b", 8192),
                                               ("l4", "llama-3.1-8b", 16384)])
def test_memory_segments_of_a_fitting_row_sum_to_the_gpu_total(gpu, model, context):
    req = _req(gpu=gpu, model=model, context=context)
    rows = plan(req)
    bars = sweeps.memory_segments(req, rows)
    assert len(bars) == len(rows)
    total = req.gpu.memory_total_bytes
    for bar, row in zip(bars, rows):
        names = [n for n, _ in bar.segments]
        assert names == list(sweeps.VLLM_SEGMENTS if bar.engine == "vllm" else sweeps.HF_SEGMENTS)
        assert all(size >= 0 for _, size in bar.segments), bar
        if row.fits:
            assert bar.total == total, bar.label
        if bar.engine == "vllm":
            assert dict(bar.segments)["KV cache"] == row.vllm.available_kv_bytes
            assert bar.kv_tokens == row.kv_capacity_tokens
        else:
            assert dict(bar.segments)["KV cache"] == row.hf.cache_bytes
            assert bar.total - dict(bar.segments)["free"] == row.hf_memory_bytes


def test_memory_segments_of_a_row_that_does_not_fit_overflow_the_gpu():
    req = _req(gpu="t4", model="llama-3.1-8b", context=8192)
    bars = {(b.engine, b.config): b for b in sweeps.memory_segments(req, plan(req))}
    base = bars[("hf", "baseline")]
    assert not base.fits and base.total > req.gpu.memory_total_bytes
    assert dict(base.segments)["free"] == 0


# -- drawing ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpl():
    return pytest.importorskip("matplotlib")


def test_each_plot_writes_a_png(mpl, tmp_path):
    req = _req(gpu="t4", context=32768)
    rows = plan(req)
    _assert_png(plots.plot_capacity_vs_context(req, tmp_path / "c.png"))
    _assert_png(plots.plot_memory_breakdown(req, rows, tmp_path / "m.png"))
    speed_req = _req(gpu="h200", model="llama-3.1-8b", context=8192)
    _assert_png(plots.plot_decode_vs_batch(speed_req, tmp_path / "s.png"))
    _assert_png(plots.plot_all(req, rows, tmp_path / "all.png"), min_bytes=30_000)


def test_plots_of_one_engine_and_of_a_config_that_does_not_fit(mpl, tmp_path):
    req = _req(gpu="t4", model="llama-3.1-8b", context=8192, engines=("hf",), weights="nf4")
    rows = plan(req)
    _assert_png(plots.plot_all(req, rows, tmp_path / "hf.png"), min_bytes=30_000)


def test_bad_output_path_is_a_usage_error(mpl, tmp_path):
    with pytest.raises(UsageError, match="png"):
        plots.check_output(tmp_path / "plot.txt")
    with pytest.raises(UsageError, match="no folder"):
        plots.check_output(tmp_path / "missing" / "plot.png")
    assert plots.check_output(tmp_path / "plot.png") == tmp_path / "plot.png"
    (tmp_path / "folder.png").mkdir()
    with pytest.raises(UsageError, match="it is a folder"):  # refused before any work (fuzz review, 1d)
        plots.check_output(tmp_path / "folder.png")


def test_missing_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(UsageError, match=r"python3 -m pip install matplotlib"):
        plots.check_output(tmp_path / "x.png")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(UsageError, match=r"plots need matplotlib"):
        plots.plot_decode_vs_batch(_req(), tmp_path / "x.png")


# -- CLI -------------------------------------------------------------------------------------------------------------




def test_plan_plot_writes_the_combined_png(mpl, tmp_path):
    out = tmp_path / "plan.png"
    code, stdout, err = invoke(["plan", "--gpu", "t4", "--context", "32k", "--plot", str(out)])
    assert code == 0, err
    assert "baseline" in stdout  # the table still prints
    _assert_png(out, min_bytes=30_000)
    assert str(out) in err


def test_plan_plot_with_json_keeps_stdout_json(mpl, tmp_path):
    out = tmp_path / "plan.png"
    code, stdout, err = invoke(["plan", "--gpu", "l4", "--model", "llama-3.1-8b", "--json", "--plot", str(out)])
    assert code == 0, err
    assert json.loads(stdout)["schema"] == "kvcalc.plan/1"
    _assert_png(out, min_bytes=30_000)


@pytest.mark.parametrize("kind", ["capacity", "speed", "memory"])
def test_plot_command_writes_one_png(mpl, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    code, _, err = invoke(["plot", kind, "--gpu", "h200", "--model", "llama-3.1-8b", "--context", "8k",
                            "--out", str(out)])
    assert code == 0, err
    _assert_png(out)


@pytest.mark.parametrize("args,needle", [
    (["plot", "nonsense", "--out", "x.png"], "nonsense"),
    (["plot", "speed"], "--out"),
    (["plot", "speed", "--out", "x.txt"], ".png"),
    (["plot", "memory", "--gpu", "h10", "--out", "x.png"], "h100"),
    (["plan", "--plot", "/no/such/folder/x.png"], "no folder"),
])
def test_bad_plot_input_is_exit_2(args, needle):
    code, out, err = invoke(args)
    assert code == 2, (out, err)
    assert needle in err
    assert "Traceback" not in err


def test_plan_without_plot_does_not_import_matplotlib():
    code = ("import sys, contextlib, io\nfrom kvcalc.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['plan', '--gpu', 't4', '--context', '32k'])\n"
            "print('matplotlib' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr
