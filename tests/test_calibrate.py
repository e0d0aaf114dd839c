"""`kvcalc calibrate LOG...` on real start-up logs (llm-d-planner's H100 runs of vLLM 0.19.0 and others in
tests/fixtures/vllm_logs/public/, sources in index.json), with a tmp config directory (KVCALC_CONFIG_DIR): what it fits,
that plan/explain use it only for the same GPU and vLLM version and say so, and that bad input is one line, exit 2,
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc import calibrate
from kvcalc.units import GiB
from kvcalc.validate.vllm_log import parse_vllm_log

PUBLIC = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"
TP1 = [PUBLIC / f"llmd-h100-{n}.log" for n in ("llama31-8b-16k", "qwen3-8b-8k", "llama31-8b-fp8-8k")]
TP2 = PUBLIC / "llmd-h100x2-llama31-8b-tp2-8k.log"
MIXTRAL_TP2 = PUBLIC / "llmd-h100x2-mixtral-8x7b-tp2-8k.log"
A100 = PUBLIC / "dennislee-a100-qwen2-7b-u050.log"  # vLLM 0.10.1.1


@pytest.fixture()
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCALC_CONFIG_DIR", str(tmp_path / "cfg"))
    return tmp_path / "cfg" / "calibration.json"


def _calibrate(*args):
    return invoke(["calibrate", "--gpu", "h100-sxm", *map(str, args)])


def _one_line_exit_2(code, err):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_fit_from_real_logs_keeps_the_logs_own_terms(config):
    code, out, err = _calibrate(*TP1, TP2, "--json")
    assert code == 0, err
    got = json.loads(out)
    env = got["calibration"]
    assert got["written"] == str(config) and config.is_file()
    assert env["gpu"] == "NVIDIA H100 SXM5 80GB" and env["vllm_version"] == "0.19.0"
    # non-torch per rank is the logs' own figure: the mean of the three TP-1 logs, the TP-2 log's alone
    tp1 = [parse_vllm_log(p.read_text())["values"]["non_torch_bytes"] for p in TP1]
    tp2 = parse_vllm_log(TP2.read_text())["values"]["non_torch_bytes"]
    assert env["non_torch_bytes_by_tp"] == {"tp1": int(sum(tp1) / 3), "tp2": tp2}
    assert tp2 > 2 * GiB > 0.5 * GiB > max(tp1)  # NCCL / custom all-reduce buffers with TP (the mechanism)
    assert set(env["activation_scale_by_tp"]) == {"tp1", "tp2"}
    # the fit reproduces the logs' KV capacity (it is fitted on them: this checks the plumbing, not a prediction)
    for row in got["logs"]:
        assert abs(row["after"] - row["observed"]) <= 0.005 * row["observed"], row


def test_plan_and_explain_use_it_for_the_same_gpu_and_version_and_say_so(config):
    assert _calibrate(*TP1, TP2)[0] == 0
    args = ["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--engine", "vllm", "--tp", "2", "--json"]
    code, out, _ = invoke(["plan", *args, "--vllm-version", "0.19.0"])
    plan = json.loads(out)
    assert code == 0
    assert any("calibrated from your logs" in w for w in plan["warnings"])
    breakdown = plan["rows"][0]["vllm_breakdown"]
    saved = json.loads(config.read_text())["environments"][0]
    assert breakdown["non_torch_bytes"] == saved["non_torch_bytes_by_tp"]["tp2"]
    # --no-calibration: kvcalc's own terms
    code, out, _ = invoke(["plan", *args, "--vllm-version", "0.19.0", "--no-calibration"])
    plain = json.loads(out)
    assert not any("calibrat" in w for w in plain["warnings"])
    assert plain["rows"][0]["vllm_breakdown"]["non_torch_bytes"] != breakdown["non_torch_bytes"]
    # another vLLM version: not used, and said why (0.26.0: from 0.27 non_torch_bytes also holds the V2 sampler's
    # state, engines/vllm.py sampler_state_bytes, so the default version would differ for that reason too)
    code, out, _ = invoke(["plan", *args, "--vllm-version", "0.26.0"])
    other = json.loads(out)
    assert any("not used" in w and "--vllm-version 0.19.0" in w for w in other["warnings"])
    assert other["rows"][0]["vllm_breakdown"]["non_torch_bytes"] == plain["rows"][0]["vllm_breakdown"]["non_torch_bytes"]
    # another GPU: nothing said, nothing used
    code, out, _ = invoke(["plan", "--gpu", "a100-80gb", "--model", "llama-3.1-8b", "--engine", "vllm",
                           "--vllm-version", "0.19.0", "--json"])
    assert not any("calibrat" in w for w in json.loads(out)["warnings"])
    code, out, _ = invoke(["explain", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--vllm-version", "0.19.0",
                           "--engine", "vllm"])
    assert code == 0 and "note: calibrated from your logs for NVIDIA H100 SXM5 80GB, vLLM 0.19.0" in out


def test_never_overwritten_silently(config):
    assert _calibrate(*TP1)[0] == 0
    before = config.read_text()
    code, out, err = _calibrate(TP1[0])
    _one_line_exit_2(code, err)
    assert "exists" in err and "--force" in err and config.read_text() == before
    code, out, err = _calibrate(TP1[0], "--force")
    assert code == 0 and "replaced" in out
    assert json.loads(config.read_text())["environments"][0]["logs"] == [TP1[0].name]


def test_dry_run_writes_nothing(config):
    code, out, err = _calibrate(*TP1, "--dry-run")
    assert code == 0 and "nothing written" in out and not config.exists()


def test_contradicting_logs_are_refused_with_the_reason(config):
    # Mixtral's fused-MoE activations vs a dense 8B at TP 2: not one environment term
    code, out, err = _calibrate(TP2, MIXTRAL_TP2)
    _one_line_exit_2(code, err)
    assert "contradicting logs" in err and not config.exists()


def test_logs_of_different_versions_are_refused(config):
    code, out, err = invoke(["calibrate", "--gpu", "a100-80gb", str(A100), str(TP1[0])])
    _one_line_exit_2(code, err)
    assert "different vLLM versions" in err and not config.exists()


def test_logs_from_different_gpus_are_refused(config, tmp_path):
    # the real H100 log with its device total edited to an A100 40GB's (the only change): two GPUs in one fit
    text = TP1[1].read_text().replace("/79.19 GiB) on startup", "/39.39 GiB) on startup")
    other = tmp_path / "edited-total.log"
    other.write_text(text)
    code, out, err = _calibrate(TP1[0], other)
    _one_line_exit_2(code, err)
    assert "different GPUs" in err and not config.exists()
    code, out, err = invoke(["calibrate", "--gpu", "a100-40gb", str(TP1[0])])
    _one_line_exit_2(code, err)
    assert "not this GPU" in err


def test_bad_logs_are_one_line_exit_2_nothing_written(config, tmp_path):
    no_memory = tmp_path / "no-memory.log"
    no_memory.write_text("INFO 04-22 01:47:55 [api_server.py:1] vLLM API server version 0.19.0\nhello\n")
    truncated = tmp_path / "truncated.log"  # the real log cut before its memory lines
    truncated.write_text("".join(TP1[0].read_text().splitlines(keepends=True)[:8]))
    binary = tmp_path / "binary.log"
    binary.write_bytes(b"\x00\x01\x02 GPU KV cache size: 10 tokens")
    unknown = tmp_path / "old.log"  # a version kvcalc has no rules for
    unknown.write_text(TP1[0].read_text().replace("version 0.19.0", "version 0.1.0")
                       .replace("(v0.19.0)", "(v0.1.0)"))
    for path, why in ((no_memory, "no vLLM memory lines"), (truncated, ""), (binary, "binary"),
                      (unknown, "no rules"), (tmp_path / "missing.log", "no such file")):
        code, out, err = _calibrate(path)
        _one_line_exit_2(code, err)
        assert why in err, err
        assert not config.exists()
    code, out, err = invoke(["calibrate", str(TP1[0])])
    _one_line_exit_2(code, err)
    assert "--gpu" in err
    code, out, err = _calibrate()
    _one_line_exit_2(code, err)


def test_insufficient_log_is_refused(config):
    # vLLM 0.10.1.1 on an A100 prints no non-torch or activation line; its graph pool is all it has, and kvcalc's
    # rules for that version decide whether graphs are subtracted at all
    code, out, err = invoke(["calibrate", "--gpu", "a100-80gb", str(PUBLIC / "vllm10517-rtx3090-llama31-8b-20k.log")])
    _one_line_exit_2(code, err)
    assert not config.exists()


def test_a_damaged_profile_is_one_line(config):
    config.parent.mkdir(parents=True)
    config.write_text("{not json")
    code, out, err = invoke(["plan", "--gpu", "h100-sxm", "--engine", "vllm"])
    _one_line_exit_2(code, err)
    assert "calibration profile" in err and "--no-calibration" in err
    code, out, err = invoke(["plan", "--gpu", "h100-sxm", "--engine", "vllm", "--no-calibration"])
    assert code == 0


def test_profile_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("KVCALC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert calibrate.profile_path() == tmp_path / "xdg" / "kvcalc" / "calibration.json"
    monkeypatch.setenv("KVCALC_CONFIG_DIR", str(tmp_path / "mine"))
    assert calibrate.profile_path() == tmp_path / "mine" / "calibration.json"


def test_show_lists_the_profile(config):
    assert _calibrate(*TP1)[0] == 0
    code, out, err = invoke(["calibrate", "--show"])
    assert code == 0 and "NVIDIA H100 SXM5 80GB, vLLM 0.19.0, 3 log(s)" in out and "at TP 1" in out


def test_pipeline_parallel_is_its_own_layout(config):
    """PP 2 has no all-reduce: 0.07 GiB of non-torch memory per rank vs 0.25 at TP 1 and 2.07 at TP 2 (llm-d-planner,
    H100, 0.19.0); keyed by (tp, pp), the three logs are one environment, not a contradiction."""
    pp2 = PUBLIC / "llmd-h100x2-llama31-8b-pp2-8k.log"
    code, out, err = _calibrate(TP1[0], TP2, pp2, "--json")
    assert code == 0, err
    env = json.loads(out)["calibration"]
    assert set(env["non_torch_bytes_by_tp"]) == {"tp1", "tp2", "tp1pp2"}
    assert env["non_torch_bytes_by_tp"]["tp1pp2"] < 0.1 * GiB
    code, out, _ = invoke(["plan", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--engine", "vllm", "--pp", "2",
                           "--vllm-version", "0.19.0", "--json"])
    plan = json.loads(out)
    assert plan["rows"][0]["vllm_breakdown"]["non_torch_bytes"] == env["non_torch_bytes_by_tp"]["tp1pp2"]
    assert any("at TP 1 x PP 2" in w for w in plan["warnings"])


def test_a_log_of_another_model_than_model_is_refused(config):
    code, out, err = _calibrate(TP1[1], "--model", "llama-3.1-8b")  # the log served Qwen/Qwen3-8B
    _one_line_exit_2(code, err)
    assert "Qwen3" in err and "own --model" in err and not config.exists()
