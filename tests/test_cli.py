"""The CLI as the console script runs it: exit codes, one-line errors, stable JSON."""

import json

import pytest
from cli_helper import invoke



@pytest.mark.parametrize("args,needle", [
    (["plan", "--gpu", "h10"], "h100"),
    (["plan", "--model", "llama-3.2-3bb"], "llama-3.2-3b"),
    (["plan", "--context", "32q"], "32q"),
    (["plan", "--context", "-1k"], "-1k"),
    (["plan", "--context", "0"], "positive"),
    (["plan", "--util", "1.7"], "(0, 1]"),
    (["plan", "--util", "0"], "(0, 1]"),
    (["plan", "--batch", "0"], "at least 1"),
    (["plan", "--model", "/nonexistent/config.json"], "cannot read"),
    (["plan", "--weights", "int3"], "unknown weight format"),
    (["plan", "--kv", "fp4"], "unknown KV cache format"),
    (["plan", "--vllm-version", "0.3.3"], "0.4.0"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    code, out, err = invoke(args)
    assert code == 2, (out, err)
    assert needle in err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("error: ")  # click's usage errors too


def test_context_past_max_positions_is_a_warning(tmp_path):
    code, out, err = invoke(["plan", "--context", "200k", "--gpu", "h200", "--engine", "vllm"])
    assert code == 0
    assert "exceeds" in err and "max_position_embeddings" in err


def test_plan_json_schema():
    code, out, err = invoke(["plan", "--gpu", "t4", "--context", "32k", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "kvcalc.plan/1"
    assert {r["config"] for r in doc["rows"]} >= {"baseline", "fp8-kv", "kv4", "nf4", "nf4+fp8-kv", "awq"}
    for row in doc["rows"]:
        for key in ("config", "engine", "weights_bytes", "kv_bytes_per_token", "kv_capacity_tokens",
                    "max_concurrency", "decode_tokens_per_s", "fits"):
            assert key in row
    baseline = [r for r in doc["rows"] if r["config"] == "baseline" and r["engine"] == "vllm"][0]
    assert baseline["kv_bytes_per_token"] == 114_688


def test_plan_csv_and_table_and_explain():
    code, out, _ = invoke(["plan", "--gpu", "l4", "--context", "16k", "--csv"])
    assert code == 0 and out.splitlines()[0].startswith("config,engine,")
    code, out, _ = invoke(["plan", "--gpu", "l4", "--context", "16k"])
    assert code == 0 and "baseline" in out
    code, out, _ = invoke(["explain", "--gpu", "t4", "--context", "32k", "--kv", "fp8"])
    assert code == 0 and "num_gpu_blocks" in out and "available KV memory" in out


def test_model_larger_than_gpu_says_by_how_much():
    code, out, _ = invoke(["plan", "--gpu", "t4", "--model", "llama-3.1-8b", "--context", "8k", "--json"])
    doc = json.loads(out)
    base = [r for r in doc["rows"] if r["config"] == "baseline" and r["engine"] == "vllm"][0]
    assert base["fits"] is False and base["shortfall_bytes"] > 0


def test_gpus_and_models_list():
    code, out, _ = invoke(["gpus", "--json"])
    assert code == 0 and any(g["id"] == "t4" for g in json.loads(out))
    code, out, _ = invoke(["models", "--json"])
    assert code == 0 and any(m["name"] == "llama-3.2-3b" for m in json.loads(out))


def test_cli_does_not_import_heavy_engines():
    import subprocess
    import sys

    code = ("import sys, kvcalc.cli; from kvcalc.cli import main\n"
            "heavy = [m for m in ('torch', 'transformers', 'vllm', 'matplotlib') if m in sys.modules]\n"
            "print(','.join(heavy))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_json_schema_fields_match_the_readme():
    """The README documents the JSON schema; every documented row field is present."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("**JSON**"):readme.index("**Validation.**")]
    documented = set(re.findall(r"`([a-z_]+)`", section.split("Each row has")[1]))
    code, out, _ = invoke(["plan", "--gpu", "l4", "--context", "8k", "--json"])
    row_keys = set(json.loads(out)["rows"][0])
    missing = documented - row_keys - {"vllm", "hf", "vllm_breakdown", "hf_breakdown"}
    assert not missing, missing


def test_explain_without_formats_explains_the_baseline():
    code, out, _ = invoke(["explain", "--gpu", "h200", "--model", "llama-3.1-8b", "--context", "8k"])
    assert code == 0
    assert "baseline" in out.splitlines()[0] and "AWQ" not in out


def test_tp_sweep_follows_the_asked_configuration():
    # 70B in bf16 does not fit one H100: the sweep appears; in AWQ int4 it fits: no sweep unless asked
    code, out, _ = invoke(["plan", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--context", "8k",
                           "--engine", "vllm", "--json"])
    assert json.loads(out)["tp_sweep"] is not None
    code, out, _ = invoke(["plan", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--context", "8k",
                           "--engine", "vllm", "--weights", "awq", "--json"])
    assert json.loads(out)["tp_sweep"] is None
