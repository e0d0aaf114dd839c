"""Issue 22 item 1: the Python API (kvcalc/api.py, docs/api.md). The same JSON as the CLI for the same options, the
same errors, typed results, and `import kvcalc` as light as the CLI."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvcalc

from cli_helper import invoke

ROOT = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"
METRICS = Path(__file__).parent / "fixtures" / "vllm_metrics" / "h200-llama-3.1-8b-auto-u90.txt"

# (API keywords, the same options on the command line)
PLANS = [
    (dict(gpu="l4", model="llama-3.1-8b", context="16k"), ["--gpu", "l4", "--model", "llama-3.1-8b", "--context", "16k"]),
    (dict(gpu="h100-sxm", model="llama-3.1-70b", tp=4, kv="fp8", batch=8, engine="vllm"),
     ["--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--tp", "4", "--kv", "fp8", "--batch", "8", "--engine", "vllm"]),
    (dict(gpu="t4", model="llama-3.1-8b", context=32768), ["--gpu", "t4", "--model", "llama-3.1-8b", "--context", "32k"]),
    (dict(gpu="a10", input_len="2k", output_len=256, concurrency=4, enforce_eager=True, vllm_version="0.20.0"),
     ["--gpu", "a10", "--input-len", "2k", "--output-len", "256", "--concurrency", "4", "--enforce-eager",
      "--vllm-version", "0.20.0"]),
    (dict(gpu="h200", vllm_command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k "
          "--gpu-memory-utilization 0.85", speculative_config={"method": "ngram", "num_speculative_tokens": 4}),
     ["--gpu", "h200", "--vllm-command", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k "
      "--gpu-memory-utilization 0.85", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}']),
    (dict(gpu="l4", model="qwen3-8b", enable_chunked_prefill=False, vllm_version="0.6.4", max_model_len="8K"),
     ["--gpu", "l4", "--model", "qwen3-8b", "--no-enable-chunked-prefill", "--vllm-version", "0.6.4",
      "--max-model-len", "8K"]),
]


def _cli_json(argv):
    code, out, err = invoke(argv)
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("kwargs, argv", PLANS, ids=[str(i) for i in range(len(PLANS))])
def test_plan_json_is_the_clis(kwargs, argv):
    assert kvcalc.plan(**kwargs).to_json() == _cli_json(["plan", *argv, "--json"])


def test_plan_tp_sweep_and_gate_as_the_cli():
    argv = ["--gpu", "l4", "--model", "llama-3.1-70b"]
    assert kvcalc.plan(gpu="l4", model="llama-3.1-70b", tp_sweep=True).to_json() == \
        _cli_json(["plan", *argv, "--tp-sweep", "--json"])
    result = kvcalc.plan(gpu="l4", model="llama-3.1-70b")
    code, _, err = invoke(["plan", *argv, "--require-fit", "--json"])
    assert code == 1 and not result.fits
    assert err.strip().splitlines()[-1] == f"gate failed: {result.failure}"
    with pytest.raises(kvcalc.GateFailed, match="does not fit"):
        kvcalc.plan(gpu="l4", model="llama-3.1-70b", require_fit=True)


def test_fit_and_search_json_are_the_clis():
    fit = kvcalc.fit("max-context", gpu="l4", model="llama-3.1-8b", batch=16)
    assert fit.to_json() == _cli_json(["fit", "max-context", "--gpu", "l4", "--model", "llama-3.1-8b", "--batch",
                                       "16", "--json"])
    assert fit.value == fit.to_json()["value"] and fit.failure is None
    found = kvcalc.search(model="llama-3.1-8b", input_len="2k", output_len=256, concurrency=16,
                          gpus=["l4", "a100-80gb"], max_tpot_ms=80)
    assert found.to_json() == _cli_json(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len",
                                         "256", "--concurrency", "16", "--gpus", "l4,a100-80gb", "--max-tpot-ms", "80",
                                         "--json"])
    assert found.winner.rank == 1 and found.deployment("serve").startswith("vllm serve")


def test_explain_text_is_the_clis():
    code, out, _ = invoke(["explain", "--gpu", "l4", "--kv", "fp8"])
    assert code == 0 and kvcalc.explain(gpu="l4", kv="fp8").text + "\n" == out


def test_validate_log_json_is_the_clis():
    log = LOGS / "llmd-h100-llama31-8b-16k.log"
    code, out, err = invoke(["validate", "--from-log", str(log), "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                             "--json"])
    assert code == 0, err
    got = kvcalc.validate_log(str(log), model="llama-3.1-8b", gpu="h100-sxm")
    assert got.to_json() == json.loads(out)
    by_text = kvcalc.validate_log(text=log.read_text(), model="llama-3.1-8b", gpu="h100-sxm")
    assert by_text.to_json() == got.to_json() and got.ok == (not got.verdict["miss"] and not got.verdict["mismatch"])
    code, out, _ = invoke(["validate", "--from-log", str(log), "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                           "--util", "0.9", "--json"])
    assert kvcalc.validate_log(str(log), model="llama-3.1-8b", gpu="h100-sxm", util=0.9).to_json() == json.loads(out)


def test_validate_metrics_json_is_the_clis():
    # the capture's server ran vLLM 0.26.0 (the /metrics page does not say it; 0.27+ rules count more memory)
    argv = ["--model", "llama-3.1-8b", "--gpu", "h200", "--util", "0.9", "--entrypoint", "offline",
            "--vllm-version", "0.26.0"]
    code, out, _ = invoke(["validate", "--metrics", str(METRICS), *argv, "--json"])
    got = kvcalc.validate_metrics(str(METRICS), model="llama-3.1-8b", gpu="h200", util=0.9, entrypoint="offline",
                                  vllm_version="0.26.0")
    assert code == 0 and got.to_json() == json.loads(out) and got.ok


def test_deployment_files_are_the_clis():
    code, out, _ = invoke(["plan", "--gpu", "l4", "--model", "llama-3.1-8b", "--emit", "kubernetes"])
    assert code == 0 and kvcalc.plan(gpu="l4", model="llama-3.1-8b").deployment("kubernetes") == out
    d = kvcalc.plan(gpu="l4", model="llama-3.1-8b").deployment()
    assert d.gpus_per_replica == 1 and d.to_json()["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize("call, message", [
    (lambda: kvcalc.plan(gpu="l4", contxt="8k"), "no option 'contxt'"),
    (lambda: kvcalc.plan(gpu="l4", context="lots"), "--context"),
    (lambda: kvcalc.plan(gpu="l4", util=1.5), "--util must be in (0, 1]"),
    (lambda: kvcalc.plan(gpu="l4", enforce_eager="yes"), "enforce_eager is a switch"),
    (lambda: kvcalc.fit("max-ctx", gpu="l4"), "question 'max-ctx'"),
    (lambda: kvcalc.search(model="llama-3.1-8b", input_len="2k", output_len=64), "exactly one of --concurrency"),
    (lambda: kvcalc.validate_log(model="llama-3.1-8b", gpu="l4"), "a log file path or its text"),
    (lambda: kvcalc.validate_metrics(str(METRICS), model="llama-3.1-8b", gpu="h200", utilization=0.9),
     "no option 'utilization'"),
])
def test_bad_input_raises_the_clis_usage_error(call, message):
    with pytest.raises(kvcalc.UsageError) as exc:
        call()
    assert message in str(exc.value)


def test_same_message_as_the_cli():
    code, _, err = invoke(["plan", "--gpu", "l4", "--context", "lots"])
    with pytest.raises(kvcalc.UsageError) as exc:
        kvcalc.plan(gpu="l4", context="lots")
    assert code == 2 and err.strip() == f"error: {exc.value}"


def test_kvcalc_plan_is_still_the_module():
    """kvcalc/plan.py and kvcalc/search.py stay importable modules; calling them is the API."""
    import kvcalc.plan as plan_module
    import kvcalc.search as search_module

    assert plan_module.PlanRequest.__name__ == "PlanRequest" and search_module.SCHEMA == "kvcalc.search/1"
    assert kvcalc.plan is plan_module and callable(kvcalc.plan) and callable(kvcalc.search)


def test_import_is_light_and_plan_loads_nothing_heavy():
    """`import kvcalc` loads no other module of kvcalc or numpy; kvcalc.plan() loads no torch/transformers/vllm and
    costs about what `kvcalc plan` does."""
    code = ("import sys, time\nt = time.process_time()\nimport kvcalc\nimported = time.process_time() - t\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('kvcalc.', 'numpy', 'click', 'pydantic')))\n"
            "t = time.process_time()\nkvcalc.plan(gpu='l4', model='llama-3.1-8b').to_json()\n"
            "planned = time.process_time() - t\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'vllm', 'matplotlib')]\n"
            "print(repr((imported, loaded, planned, heavy)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    imported, loaded, planned, heavy = eval(result.stdout)  # noqa: S307 - our own repr
    assert loaded == [] and heavy == []
    assert imported < 0.05
    assert planned < 3.0  # CPU seconds on a shared CI core; the CLI's own budget is "well under 0.5 s" warm


def test_capacity_range_through_the_api_is_plans():
    """vLLM 0.29, a cold compile start of a tied-embedding model on an RTX 4090: the API's plan row carries
    trust.capacity_range, and its search winner carries the range of plan's row of the same deployment (one function:
    plan.capacity_range), as both commands' JSON do."""
    row = kvcalc.plan(gpu="rtx-4090", model="llama-3.2-3b", context="16k", vllm_version="0.29",
                      engine="vllm").chosen("vllm")
    span = row.trust["capacity_range"]
    assert span and span["kv_capacity_tokens_low"] < span["kv_capacity_tokens_high"] == row.kv_capacity_tokens
    found = kvcalc.search(model="llama-3.2-3b", input_len="2k", output_len=256, concurrency=8, gpus=["rtx-4090"],
                          vllm_version="0.29", top=1)
    d = found.winner
    assert found.to_json()["results"][0]["capacity_range"] == d.capacity_range
    same = kvcalc.plan(gpu="rtx-4090", model="llama-3.2-3b", context=d.max_model_len, batch=d.concurrency_per_replica,
                       vllm_version="0.29", engine="vllm", weights=d.weights_format, kv=d.kv_format, util=d.util,
                       max_num_seqs=d.max_num_seqs, max_num_batched_tokens=d.max_num_batched_tokens).chosen("vllm")
    assert d.capacity_range == same.trust["capacity_range"] is not None
    assert d.kv_capacity_tokens == same.kv_capacity_tokens
