"""Issue 22 item 2: kvcalc as a pre-flight gate. Exit 0 yes, 1 gate failed (one `gate failed:` line, the output still
printed), 2 usage error (kvcalc/gate.py)."""

import json

from cli_helper import invoke

EIGHT_B = ["--model", "llama-3.1-8b"]


def _last(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_require_fit_passes_when_the_asked_rows_fit():
    code, out, err = invoke(["plan", "--gpu", "h200", *EIGHT_B, "--require-fit", "--json"])
    assert code == 0, err
    assert all(r["fits"] for r in json.loads(out)["rows"] if r["config"] == "baseline")


def test_require_fit_fails_with_one_line_per_engine():
    code, out, err = invoke(["plan", "--gpu", "t4", *EIGHT_B, "--context", "32k", "--require-fit"])
    assert code == 1
    assert "baseline" in out  # the table is printed before the verdict
    line = _last(err)
    assert line.startswith("gate failed: vllm baseline does not fit on 1 x t4 at context 32,768 x batch 1: ")
    assert "; hf baseline does not fit" in line and len(line) <= 420
    assert sum(l.startswith("gate failed:") for l in err.splitlines()) == 1


def test_require_fit_gates_the_asked_configuration_not_the_table():
    """FP8 KV fits where the baseline does not: --kv fp8 passes, the baseline alone fails."""
    # batch 3 (was 4): from 0.29 the V2 runner's CUDA graphs come out of the KV budget (fp8 KV holds 3 of 16k)
    base = ["plan", "--gpu", "l4", *EIGHT_B, "--engine", "vllm", "--context", "16k", "--batch", "3"]
    code_base, _, _ = invoke(base + ["--require-fit"])
    code_fp8, _, err = invoke(base + ["--kv", "fp8", "--require-fit"])
    assert code_base == 1 and code_fp8 == 0, err


def test_require_fit_counts_the_batch():
    """vLLM starts but holds fewer requests of --context than --batch: the line says so."""
    # 16k (was 32k): from 0.29 (graphs in the budget) one 32k request no longer fits, so vLLM would not start at all
    code, _, err = invoke(["plan", "--gpu", "l4", *EIGHT_B, "--engine", "vllm", "--context", "16k", "--batch", "64",
                           "--require-fit"])
    assert code == 1 and "fewer than the batch asked" in _last(err)


def test_fit_without_an_answer_is_a_failed_gate():
    code, out, err = invoke(["fit", "max-context", "--gpu", "t4", "--model", "llama-3.1-70b", "--json"])
    assert code == 1 and json.loads(out)["value"] is None
    assert _last(err).startswith("gate failed: fit max-context: nothing in range fits")
    code, _, _ = invoke(["fit", "max-context", "--gpu", "l4", *EIGHT_B])
    assert code == 0


def test_usage_errors_stay_exit_2():
    code, _, err = invoke(["plan", "--gpu", "no-such-gpu", "--require-fit"])
    assert code == 2 and err.startswith("error: ")
