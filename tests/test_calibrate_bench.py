"""`kvcalc calibrate LOG --bench FILE...`: the speed model's per-GPU constants fitted on real `vllm bench` results.

Data (tests/fixtures/vllm_bench/README.md has the sources): dennislee22/vLLM-benchmarking's Qwen2-7B-Instruct runs on
one A100 80GB with vLLM 0.10.1.1 (printed results transcribed into serve.py's keys; the servers' start-up logs are
tests/fixtures/vllm_logs/public/dennislee-a100-qwen2-7b-u050.log and -u025.log) and nerdalert/vllm-bench-automation's
results.json (a verbatim `benchmark_serving.py --save-result` file of Llama-3.2-3B-Instruct on L40S GPUs). The u050
server's runs fit; the u025 server's runs (same GPU, model and vLLM build, another util) are held out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc import calibrate
from kvcalc.validate import calibration_fit, speed_fit

HERE = Path(__file__).parent
BENCH = HERE / "fixtures" / "vllm_bench"
PUBLIC = HERE / "fixtures" / "vllm_logs" / "public"
U050, U025 = PUBLIC / "dennislee-a100-qwen2-7b-u050.log", PUBLIC / "dennislee-a100-qwen2-7b-u025.log"
QWEN2 = HERE / "fixtures" / "configs" / "Qwen2-7B-Instruct.json"
H200_3B = HERE / "fixtures" / "vllm_logs" / "real_v0.26.0_v-3b-auto-eager-u90.log"  # Llama-3.2-3B, kvcalc's own run
L40S = BENCH / "nerdalert-4xl40s-llama32-3b-10qps.json"
FIT_N = (1, 10, 20, 30, 50, 100, 200)


def bench(util: str, n: int) -> Path:
    return BENCH / f"dennislee-a100-qwen2-7b-{util}-n{n}-1024-1024.json"


@pytest.fixture()
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCALC_CONFIG_DIR", str(tmp_path / "cfg"))
    return tmp_path / "cfg" / "calibration.json"


def _calibrate(*args, gpu="a100-80gb", model=QWEN2):
    return invoke(["calibrate", "--gpu", gpu, "--model", str(model), *map(str, args)])


def _benches(util="u050", ns=FIT_N) -> list[str]:
    return [x for n in ns for x in ("--bench", str(bench(util, n)))]


def _refused(code, out, err, config) -> str:
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not config.exists()
    return err


def _figures(log: Path):
    name, parsed, version = calibration_fit._read(str(log), None)
    return calibration_fit._log_figures(name, parsed, version, "a100-80gb", str(QWEN2), settings_only=True)


def test_fits_bandwidth_and_tensor_efficiency_from_a100_tpots(config):
    code, out, err = _calibrate(U050, *_benches(), "--json")
    assert code == 0, err
    got = json.loads(out)
    speed = got["calibration"]["speed"]
    # the datasheet says 2,039 GB/s and kvcalc assumed 88% of it; the TPOTs say the decode kernels reach ~64%
    assert 1.15e12 < speed["bandwidth_bytes_per_s"] < 1.45e12
    assert 0.4 < speed["tensor_fraction"] < 0.8
    # all seven runs are at 1,024 + 1,024 tokens: the bytes a step reads grow with the batch only as the compute
    # does, so the step overhead is not told apart from the bandwidth: kept, and the reason stored
    assert speed["step_overhead_s"] is None and any("step overhead" in w for w in speed["not_fitted"])
    assert speed["tp_comm_per_layer_s"] is None  # no tensor-parallel server among them
    rows = got["benches"]
    assert len(rows) == len(FIT_N) and {r["quantity"] for r in rows} == {"tpot"}
    # kvcalc's A100 before the calibration (datasheet x the public-corpus class constants) is 1-20% off per TPOT;
    # the calibration brings every TPOT within 5% and the mean error down
    before = [abs(r["before"] / r["measured"] - 1) for r in rows]
    after = [abs(r["after"] / r["measured"] - 1) for r in rows]
    assert max(before) > 0.05 and sum(after) < sum(before)
    for r, err in zip(rows, after):
        assert err < 0.05, r
    # the TTFTs are not fitted, and the output says why (warm-up request in the prefix cache; bursts)
    notes = " ".join(got["bench_notes"])
    assert "prefix cache" in notes and "all 10 prompts at once" in notes
    assert config.is_file()


def test_held_out_server_of_the_same_environment_gets_closer():
    """The u025 server (util 0.25: 45 requests of 2,048 tokens fit) ran the same runs: with the u050 calibration,
    its TPOTs at a concurrency within what it holds are predicted within 5%, closer than kvcalc's own constants
    (22-26% low before the public-corpus class constants of issue 18, ~18% low with them)."""
    notes: list[str] = []
    fit_rows = [r for n in FIT_N for r in speed_fit.rows_for(str(bench("u050", n)), _figures(U050), None, None, notes)]
    fig = _figures(U025)
    cal, _ = speed_fit.fit_speed(fit_rows, fig["profile"], notes)
    calibrated = calibrate.with_speed(fig["profile"], cal)
    for n in (1, 10, 20, 30):
        (row,) = speed_fit.rows_for(str(bench("u025", n)), fig, None, None, [])
        assert row.quantity == "tpot"
        before = row.predict(fig["profile"]) / row.measured - 1
        after = row.predict(calibrated) / row.measured - 1
        assert abs(after) < 0.05 and abs(after) < abs(before), (n, before, after)


def test_plan_and_explain_use_the_speed_calibration_and_say_so(config):
    assert _calibrate(U050, *_benches())[0] == 0
    args = ["--gpu", "a100-80gb", "--model", str(QWEN2), "--engine", "vllm", "--vllm-version", "0.10.1.1",
            "--util", "0.5", "--max-model-len", "16384", "--input-len", "1024", "--output-len", "1024",
            "--concurrency", "1", "--json"]
    code, out, err = invoke(["plan", *args])
    plain = invoke(["plan", *args, "--no-calibration"])
    assert code == 0 == plain[0], err
    cal, ref = json.loads(out), json.loads(plain[1])
    assert any("bench files" in w and "decode bandwidth 1." in w for w in cal["warnings"])
    tpot, tpot_ref = cal["rows"][0]["bench"]["tpot_s"], ref["rows"][0]["bench"]["tpot_s"]
    assert abs(tpot * 1e3 / 11.75 - 1) < 0.05 < abs(tpot_ref * 1e3 / 11.75 - 1)  # the n=1 run's 11.75 ms
    assert cal["rows"][0]["kv_capacity_tokens"] == ref["rows"][0]["kv_capacity_tokens"]  # no memory term fitted
    code, out, err = invoke(["explain", *args[:-1]])
    assert code == 0 and "speed constants: your calibration" in out + err


def test_transformers_rows_keep_kvcalcs_constants(config):
    assert _calibrate(U050, *_benches())[0] == 0
    args = ["--gpu", "a100-80gb", "--model", str(QWEN2), "--engine", "hf", "--context", "4k", "--json"]
    calibrated, plain = invoke(["plan", *args])[1], invoke(["plan", *args, "--no-calibration"])[1]
    assert json.loads(calibrated)["rows"] == json.loads(plain)["rows"]


def test_one_tpot_fixes_the_bandwidth_and_says_what_is_missing(config):
    code, out, err = _calibrate(U050, *_benches(ns=(1,)), "--dry-run")
    assert code == 0, err
    assert "decode bandwidth" in out and "one decode figure" in out and "cannot fix both" in out
    assert "no TTFT of a lone prompt" in out and not config.exists()


def test_a_fit_recovers_the_constants_that_made_the_figures():
    """Round trip on the real workloads: figures computed by kvcalc's own model with known constants are fitted back
    to those constants (the fit and its identifiability rule, free of measurement noise)."""
    fig = _figures(U050)
    rows = [r for n in FIT_N for r in speed_fit.rows_for(str(bench("u050", n)), fig, None, None, [])]
    truth = calibrate.SpeedCalibration(bandwidth_bytes_per_s=1.5e12, tensor_fraction=0.5)
    gpu = calibrate.with_speed(fig["profile"], truth)
    for r in rows:
        r.measured = r.predict(gpu)
    cal, report = speed_fit.fit_speed(rows, fig["profile"], [])
    assert cal.bandwidth_bytes_per_s == pytest.approx(1.5e12, rel=0.01)
    assert cal.tensor_fraction == pytest.approx(0.5, rel=0.02)
    assert all(abs(r["after"] / r["measured"] - 1) < 0.005 for r in report)


# ---------------------------------------------------------------------------------------------- refusals


def test_a_bench_from_another_gpu_is_refused(config):
    # nerdalert's file says gpu=4xNVIDIA_L40S; the log is kvcalc's own H200 run of the same model
    err = _refused(*_calibrate(H200_3B, "--bench", L40S, gpu="h200", model="llama-3.2-3b"), config)
    assert "4xNVIDIA_L40S" in err and "H200" in err


def test_a_bench_of_another_model_is_refused(config):
    err = _refused(*_calibrate(H200_3B, "--bench", bench("u050", 10), gpu="h200", model="llama-3.2-3b"), config)
    assert "Qwen2-7B-Instruct" in err and "llama-3.2-3b" in err


def test_contradicting_benches_are_refused(config):
    # the same 200 x 1,024 + 1,024 workload, one run against each server, both said to be the u050 server's
    err = _refused(*_calibrate(U050, "--bench", bench("u050", 200), "--bench", bench("u025", 200)), config)
    assert "contradicting benches" in err and "40.34" in err and "29.87" in err


def test_benches_need_a_log_when_the_logs_ran_different_servers(config):
    err = _refused(*_calibrate(U050, U025, "--bench", bench("u050", 10)), config)
    assert "=LOG" in err
    code, out, err = _calibrate(U050, U025, "--dry-run", *[
        x for n in FIT_N for x in ("--bench", f"{bench('u050', n)}={U050.name}")])
    assert code == 0, err


def test_insufficient_bench_data_says_what_is_missing(tmp_path, config):
    # the real n=10 result without its TPOT figures (as a file of a run whose output was one token would be): its
    # only figure is a burst's TTFT, which fixes nothing
    data = json.loads(bench("u050", 10).read_text())
    for key in [k for k in data if "tpot" in k]:
        del data[key]
    f = tmp_path / "ttft-only.json"
    f.write_text(json.dumps(data))
    err = _refused(*_calibrate(U050, "--bench", f), config)
    assert "insufficient" in err and "all 10 prompts at once" in err


def test_a_bench_faster_than_the_gpu_is_refused(tmp_path, config):
    # the real n=1 and n=200 results with every time divided by 3: a 7B model's weights would stream at ~3.9 TB/s,
    # above the A100's 2.04 TB/s datasheet bandwidth
    args = []
    for n in (1, 200):
        data = json.loads(bench("u050", n).read_text())
        for key in [k for k in data if k.endswith("_ms")]:
            data[key] /= 3
        f = tmp_path / f"fast-{n}.json"
        f.write_text(json.dumps(data))
        args += ["--bench", f]
    err = _refused(*_calibrate(U050, *args), config)
    assert "datasheet" in err and "did not run on this GPU" in err


def test_a_speed_calibration_is_not_overwritten_silently(config):
    assert _calibrate(U050, *_benches(ns=(1, 200)))[0] == 0
    before = config.read_text()
    code, out, err = _calibrate(U050, *_benches())
    assert code == 2 and "--force replaces it" in err and config.read_text() == before
    assert _calibrate(U050, *_benches(), "--force")[0] == 0 and config.read_text() != before


def test_the_profile_round_trips_the_speed_terms(config):
    assert _calibrate(U050, *_benches())[0] == 0
    (env,) = calibrate.load_profile()
    assert env.speed is not None and env.speed.bandwidth_bytes_per_s and env.speed.step_overhead_s is None
    assert calibrate.EnvCalibration.from_json(env.to_json()).speed == env.speed
    bad = env.to_json()
    bad["speed"]["tensor_fraction"] = 7.0
    config.write_text(json.dumps({"schema": calibrate.SCHEMA, "environments": [bad]}))
    code, out, err = invoke(["plan", "--gpu", "a100-80gb", "--vllm-version", "0.10.1.1"])
    assert code == 2 and "calibration profile" in err and len(err.strip().splitlines()) == 1


def test_a_lone_prompts_ttft_fixes_the_tensor_efficiency(tmp_path):
    """Round trip with TTFTs: runs at --max-concurrency 1 (made from the real files' shape; their figures computed by
    kvcalc's model with known constants) give the prefill's tensor efficiency; the bursts' TTFTs are not used."""
    fig = _figures(U050)
    truth = calibrate.SpeedCalibration(bandwidth_bytes_per_s=1.4e12, tensor_fraction=0.45)
    gpu = calibrate.with_speed(fig["profile"], truth)
    rows, notes = [], []
    for n, prompt in ((1, 4096), (1, 8192), (50, 1024)):
        data = json.loads(bench("u050", 1 if n == 1 else 50).read_text())
        data.update(num_prompts=20 if n == 1 else 50, completed=20 if n == 1 else 50,
                    max_concurrency=1 if n == 1 else None, total_input_tokens=prompt * (20 if n == 1 else 50),
                    total_output_tokens=256 * (20 if n == 1 else 50))
        f = tmp_path / f"b{n}-{prompt}.json"
        f.write_text(json.dumps(data))
        rows += speed_fit.rows_for(str(f), fig, None, None, notes)
    assert sorted(r.quantity for r in rows) == ["tpot", "tpot", "tpot", "ttft", "ttft"]
    assert any("all 50 prompts at once" in n for n in notes)
    for r in rows:
        r.measured = r.predict(gpu)
    cal, _ = speed_fit.fit_speed(rows, fig["profile"], [])
    assert cal.tensor_fraction == pytest.approx(0.45, rel=0.02)
    assert cal.bandwidth_bytes_per_s == pytest.approx(1.4e12, rel=0.02)


def test_throughput_results_need_their_lengths(tmp_path, config):
    # the keys vllm/benchmarks/throughput.py writes (--output-json); figures of 100 requests of 1,024 + 1,024 tokens
    f = tmp_path / "throughput.json"
    f.write_text(json.dumps({"elapsed_time": 60.0, "num_requests": 100, "total_num_tokens": 204800,
                             "requests_per_second": 100 / 60.0, "tokens_per_second": 204800 / 60.0}))
    err = _refused(*_calibrate(U050, "--bench", f), config)
    assert "--input-len" in err
    code, out, err = _calibrate(U050, "--bench", f, "--input-len", "1024", "--output-len", "1024", "--json",
                                "--dry-run")
    assert code == 0, err
    (row,) = json.loads(out)["benches"]
    assert row["quantity"] == "tokens_per_s" and row["measured"] == pytest.approx(204800 / 60.0)
    err = _refused(*_calibrate(U050, "--bench", f"{f}=other.log", "--input-len", "1024", "--output-len", "1024"),
                   config)
    assert "not one of the logs given" in err


def test_gpu_names_in_bench_metadata_match_on_whole_words():
    from kvcalc.hardware import get_gpu

    assert speed_fit._names_gpu("4xNVIDIA_L40S", get_gpu("l40s"))
    assert speed_fit._names_gpu("NVIDIA A100-SXM4-80GB", get_gpu("a100-80gb"))
    assert not speed_fit._names_gpu("4xNVIDIA_L40S", get_gpu("h200"))
    assert not speed_fit._names_gpu("A10", get_gpu("a100-80gb"))  # not a prefix match
    assert not speed_fit._names_gpu("T4", get_gpu("l4"))


# ---------------------------------------------------------------------------------------------- tensor parallel

TP2_LOG = PUBLIC / "dennislee-a100x2-qwen2-7b-tp2-u025.log"  # two pods of one node, Ray, util 0.25


def _tp_args() -> list[str]:
    args = [str(U050), str(TP2_LOG)]
    for n in FIT_N:
        args += ["--bench", f"{bench('u050', n)}={U050.name}"]
    for f in sorted(BENCH.glob("dennislee-a100x2-qwen2-7b-tp2-u025-*.json")):
        args += ["--bench", f"{f}={TP2_LOG.name}"]
    return args


def test_tp_benches_fit_the_all_reduce_of_their_interconnect(config):
    """The TP-2 server's 12 runs (1 to 200 requests; 1,024/1,024, 4,096/4,096 and 1,024/7,168 tokens) are 37-61%
    slower than kvcalc's H200-NVLink all-reduce constant predicts: two pods that pass the all-reduce through the host.
    With the TP-1 runs they fix an all-reduce time per layer and a data rate that a large batch's bytes pay."""
    code, out, err = _calibrate(*_tp_args(), "--json")
    assert code == 0, err
    got = json.loads(out)
    speed = got["calibration"]["speed"]
    assert 5e-5 < speed["tp_comm_per_layer_s"] < 5e-4  # kvcalc's NVLink figure: 1.59e-05
    assert 1e9 < speed["link_bandwidth_bytes_per_s"] < 2e10  # host-staged, not NVLink's hundreds of GB/s
    assert 1.15e12 < speed["bandwidth_bytes_per_s"] < 1.45e12  # the GPU's own figure stays where TP 1 put it
    for r in got["benches"]:
        before, after = r["before"] / r["measured"] - 1, r["after"] / r["measured"] - 1
        # closer than kvcalc's own constants, or already within 2% of the bench (the public-corpus class constants
        # put some TP-1 TPOTs there before any calibration)
        assert abs(after) < max(abs(before), 0.02) and abs(after) < (0.2 if "tp2" in r["bench"] else 0.05), r


def test_held_out_qwen25_32b_on_the_same_a100s():
    """Another model on the same GPUs, build and pods (dennislee's Qwen2.5-32B runs: TP 1 with 9.70 GiB of KV cache,
    TP 2 with 8.22 GiB per GPU, as the README's headings state; no start-up log was published, so the KV budget is
    given as --kv-cache-memory-bytes and max_model_len 16,384 is assumed: it only bounds the requests at once, which
    these runs stay within). The 7B calibration moves every TPOT closer, to within 25% (kvcalc's constants: 18-44%
    low; the TP-2 single request stays 20% high, as the 7B's does)."""
    from kvcalc.catalog import load_model
    from kvcalc.engines import vllm as vllm_engine
    from kvcalc.formats import kv_format, weight_format
    from kvcalc.units import GiB
    from kvcalc.validate.bench import read_bench, workload_of
    from kvcalc.workload import vllm_bench

    notes: list[str] = []
    figs = {U050.name: _figures(U050), TP2_LOG.name: _figures(TP2_LOG)}
    rows = [r for a in _tp_args()[3::2] for r in speed_fit.rows_for(a.split("=")[0], figs[a.split("=")[1]],
                                                                        None, None, notes)]
    cal, _ = speed_fit.fit_speed(rows, figs[U050.name]["profile"], notes)
    a100 = figs[U050.name]["profile"]
    spec = load_model("qwen2.5-32b")
    cases = [(1, 9.70, 10), (2, 8.22, 1), (2, 8.22, 10), (2, 8.22, 15), (2, 8.22, 20)]
    for tp, kv_gib, n in cases:
        s = vllm_engine.VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=16384,
                                     version="0.10.1.1", tensor_parallel=tp, kv_cache_memory_bytes=int(kv_gib * GiB))
        est = vllm_engine.estimate(spec, a100, s)
        name = f"dennislee-a100-qwen25-32b-n{n}" if tp == 1 else f"dennislee-a100x2-qwen25-32b-tp2-n{n}"
        data = read_bench(str(BENCH / f"{name}-1024-1024.json"))
        wl = workload_of(data, None, None)
        slots = min(est.max_num_seqs, est.concurrency_at(wl.context))
        assert slots >= n

        def tpot(gpu):
            return vllm_bench(spec, gpu, s.weights, s.kv, wl, chunk_tokens=est.max_num_batched_tokens, slots=slots,
                              kv_bytes_per_token=est.deployment_kv_bytes_per_token, tp=tp).tpot_s * 1e3

        before = tpot(a100) / data["mean_tpot_ms"] - 1
        after = tpot(calibrate.with_speed(a100, cal)) / data["mean_tpot_ms"] - 1
        if (tp, n) == (2, 1):  # the TP-2 single request: the 7B's calibration leaves it ~20% high, as the 7B's own
            # TP-2 single request; since issue 18's class constants kvcalc alone is as close (-19%), so only the bound
            assert abs(after) < 0.25, (name, before, after)
        else:
            assert abs(after) < min(abs(before), 0.25), (name, before, after)
