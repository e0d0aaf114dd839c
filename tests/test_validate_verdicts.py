"""`kvcalc validate --from-log` judges each row against stated tolerances, flags a log of another model, version or
run, and --strict exits 1 on a MISS or MISMATCH; `--report` refuses unreadable results with one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc.units import GiB
from kvcalc.validate.compare import TOLERANCES, Tolerance, row, with_verdict
from kvcalc.validate.results import ResultsError, read_results

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_logs"
REAL = FIXTURES / "real_v0.26.0_v-3b-auto-eager-u90.log"
QWEN = FIXTURES / "synthetic_v0.10.2_v1_debug_profile.log"
DATA = Path(__file__).resolve().parent.parent / "docs" / "validation" / "data"


def _validate(path, model="llama-3.2-3b", *extra):
    return invoke(["validate", "--from-log", str(path), "--model", model, "--gpu", "h200", *extra])


def test_tolerance_arithmetic():
    tol = Tolerance(0.01, 0.01 * GiB)
    assert tol.allows(101, 100) and not tol.allows(102 * GiB, 100 * GiB)
    assert tol.allows(0.005 * GiB, 0)  # below the absolute floor
    assert Tolerance(0.0).text("tokens") == "exact" and Tolerance(0.02, 0.01 * GiB).text("bytes") == "+-2% or 0.01 GiB"
    judged = with_verdict(row("logged KV cache tokens", 1_010, 1_000, unit="tokens"))
    assert judged["verdict"] == "PASS" and judged["tolerance"] == "+-1%"
    assert with_verdict(row("logged KV cache tokens", 1_011, 1_000, unit="tokens"))["verdict"] == "MISS"
    assert with_verdict(row("something new", 1, 1))["verdict"] == "-"
    assert TOLERANCES["weights"].rel == 0.02 and TOLERANCES["available KV memory"].rel == 0.01


def test_real_log_passes_strict():
    code, out, err = _validate(REAL, "llama-3.2-3b", "--strict")
    assert code == 0, err
    assert "verdict: 8 PASS, 0 MISS" in out and "MISMATCH" not in out
    assert "max_model_len 8192 (log)" in out and "weights bf16 (log (dtype " in out


def test_a_number_ten_times_off_is_a_miss_and_strict_exits_1(tmp_path):
    path = tmp_path / "x10.log"
    path.write_text(REAL.read_text().replace("Available KV cache memory: 118.5 GiB", "Available KV cache memory: 1185.0 GiB"))
    code, out, _ = _validate(path)
    assert code == 0 and "1 MISS (available KV memory)" in out
    code, out, err = _validate(path, "llama-3.2-3b", "--strict")
    assert code == 1 and "--strict: 1 MISS" in err


def test_log_of_another_model_is_a_mismatch():
    code, out, err = _validate(QWEN, "llama-3.1-8b", "--strict")
    assert code == 1
    assert "MISMATCH model: the log served 'Qwen/Qwen2.5-7B-Instruct'" in out


def test_architecture_mismatch(tmp_path):
    path = tmp_path / "arch.log"
    path.write_text(REAL.read_text().replace("Resolved architecture: LlamaForCausalLM",
                                             "Resolved architecture: Qwen2ForCausalLM"))
    code, out, _ = _validate(path)
    assert code == 0 and "MISMATCH model: the log's engine resolved Qwen2ForCausalLM" in out


def test_version_mismatch_and_newer_version_note(tmp_path):
    code, out, _ = _validate(REAL, "llama-3.2-3b", "--vllm-version", "0.11.0", "--json")
    doc = json.loads(out)
    assert doc["mismatches"] == ["vLLM version: the log is 0.26.0; asked for 0.11.0 (kvcalc used its rules)"]
    assert doc["assumed"]["version"] == {"value": "0.11.0", "from": "override"}
    code, _, err = _validate(REAL, "llama-3.2-3b", "--vllm-version", "abc")
    assert code == 2 and "'abc' is not a version number" in err
    code, out, _ = _validate(REAL, "llama-3.2-3b", "--vllm-version", "0.26", "--json")
    assert json.loads(out)["mismatches"] == []  # packaging: 0.26 == 0.26.0
    path = tmp_path / "new.log"
    path.write_text(REAL.read_text().replace("(v0.26.0)", "(v99.0.0)"))
    doc = json.loads(_validate(path, "llama-3.2-3b", "--json")[1])
    assert any("newer than kvcalc's newest rules" in n for n in doc["notes"])
    path.write_text(REAL.read_text().replace("(v0.26.0)", "(vx.y.z)"))
    code, out, err = _validate(path, "llama-3.2-3b", "--json")
    assert code == 0, err
    assert any("'x.y.z' is not a version number" in n for n in json.loads(out)["notes"])


def test_merged_runs_are_flagged_unless_one_is_picked(tmp_path):
    path = tmp_path / "merged.log"
    path.write_text(QWEN.read_text() + REAL.read_text())
    code, out, err = _validate(path, "llama-3.2-3b", "--strict")
    assert code == 1 and "MISMATCH run: the log holds 2 engine starts" in out and "warning:" in err
    code, out, err = _validate(path, "llama-3.2-3b", "--strict", "--run", "1")
    assert code == 0, out + err
    code, _, err = _validate(path, "llama-3.2-3b", "--run", "7")
    assert code == 2 and "run 7 does not exist" in err


def test_dropped_lines_and_substituted_total_are_said(tmp_path):
    text = "\n".join(line for line in REAL.read_text().splitlines()
                     if "Free memory on device" not in line and "GPU KV cache size" not in line)
    path = tmp_path / "less.log"
    path.write_text(text)
    doc = json.loads(_validate(path, "llama-3.2-3b", "--json")[1])
    notes = " | ".join(doc["notes"])
    assert "no total GPU memory" in notes and "'GPU KV cache size' line" in notes
    assert all(r["quantity"] != "logged KV cache tokens" for r in doc["comparison"])


# ---------------------------------------------------------------------------------------------------- --report


@pytest.mark.parametrize("content,message", [
    (bytes(range(256)), "binary data"),
    ("caf\xe9".encode("latin-1") + b"\n", "not UTF-8"),
    (b'{"a": 1}\n{"a":\n{"b": 2}\n', "line 2 is not JSON"),
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"comparison": [{"quantity": "x", "predicted": "a"}]}\n', "not a finite number"),
    (b'{"comparison": [{"quantity": "x", "error": NaN}]}\n', "not a finite number"),
    (b'{"comparison": {"quantity": "x"}}\n', "'comparison' is not a list"),
    (b"", "no result rows"),
    (b"[" * 100000 + b"\n{}\n", "line 1 is not JSON"),
])
def test_report_refuses_bad_files_with_one_line(tmp_path, content, message):
    path = tmp_path / "r.jsonl"
    path.write_bytes(content)
    code, out, err = invoke(["validate", "--report", str(path)])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_report_tolerates_a_truncated_last_line(tmp_path):
    good = (DATA / "vllm-gpu0.jsonl").read_text().splitlines()
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(good[:3]) + "\n" + good[3][: len(good[3]) // 2])
    rows, warnings = read_results(path)
    assert len(rows) == 3 and "truncated last row" in warnings[0]
    code, out, err = invoke(["validate", "--report", str(path)])
    assert code == 0 and "truncated" in err and "cases: ok 3" in out
    with pytest.raises(ResultsError):
        read_results(tmp_path / "missing.jsonl")
