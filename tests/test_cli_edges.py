"""The CLI's hard edges: every reproduction of ../shared/reviews/fuzz-2026-11.md (§1a-1d) that enters through the
plan/explain/plot options answers with exactly one line `error: ...` and exit code 2, or with a real answer."""

from __future__ import annotations

import json

import pytest

from kvcalc.engines.vllm_versions import NEWEST_RELEASE_KNOWN
from cli_helper import invoke

from kvcalc.catalog import load_model
from kvcalc.cli_errors import MAX_MESSAGE, one_line
from kvcalc.errors import UsageError, shown
from kvcalc.hardware import get_gpu
from kvcalc.limits import MAX_BATCH, MAX_CONTEXT, MAX_PARALLEL
from kvcalc.plan import PlanRequest, parallel_refusal, plan, resolve_vllm_version, tp_sweep
from kvcalc.units import parse_bytes, parse_tokens

BIG = "9" * 400


def _one_error_line(args, needle=""):
    code, out, err = invoke(args)
    lines = err.splitlines()
    assert code == 2, (code, out[-300:], err[-500:])
    assert len(lines) == 1 and lines[0].startswith("error: "), err[:2000]
    assert "Traceback" not in err and "Usage:" not in err
    assert len(lines[0]) <= len("error: ") + MAX_MESSAGE
    assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args,needle", [
    # click's own usage errors (§1c: 60% of exit-2 cases were four lines)
    (["plan", "--context", "32q"], "--context '32q' is not a size"),
    (["plan", "--util", "1.7"], "(0, 1]"),
    (["plan", "--util", "nan"], "(0, 1]"),
    (["plan", "--util", "inf"], "(0, 1]"),
    (["plan", "--util", "-0"], "(0, 1]"),
    (["plan", "--foo"], "No such option"),
    (["plan", "--contxt", "3"], "--context"),
    (["plan", "--engine", "x"], "'x' is not one of"),
    (["plan", "--context"], "requires an argument"),
    (["plan", "extra"], "unexpected extra argument"),
    (["nope"], "No such command"),
    (["plot", "capacity"], "--out"),
    (["plot", "pie", "--out", "x.png"], "is not one of"),
    (["plan", "--batch", "1x"], "not a whole number"),
    (["plan", "--batch", "0"], "at least 1"),
])
def test_usage_errors_are_one_line(args, needle):
    _one_error_line(args, needle)


@pytest.mark.parametrize("args,needle", [
    # T1: sizes with hundreds of digits overflowed float -> OverflowError
    (["plan", "--context", BIG], "too large"),
    (["plan", "--max-model-len", BIG], "too large"),
    (["plan", "--max-num-batched-tokens", BIG], "too large"),
    # T2: huge counts reached the float arithmetic
    (["plan", "--batch", "1" + "0" * 400], "too large"),
    (["plan", "--tp", "1" + "0" * 400], "too large"),
    (["plan", "--max-num-batched-tokens", "99999999999"], f"at most {2**24:,}"),
    (["plan", "--batch", str(MAX_BATCH + 1)], f"at most {MAX_BATCH:,}"),
    (["plan", "--max-num-seqs", str(MAX_BATCH + 1)], f"at most {MAX_BATCH:,}"),
    (["plan", "--context", str(MAX_CONTEXT + 1)], f"at most {MAX_CONTEXT:,}"),
    (["plan", "--max-model-len", "1e30"], "not a whole number"),
    (["plan", "--context", "1e300"], "not a size"),
    (["plan", "--context", "1e400"], "not a size"),
    (["plan", "--context", "nan"], "not a size"),
    (["plan", "--context", "inf"], "not a size"),
    # unicode digits: fullwidth and Arabic-Indic
    (["plan", "--context", "\uff13\uff12k"], "not a size"),
    (["plan", "--context", "\u0663\u0662k"], "not a size"),
    (["plan", "--batch", "\uff13"], "not a whole number"),
    # H1: --pp 10^9 looped a billion stages; --tp 10^9 / 1024 answered
    (["plan", "--pp", "1000000000"], f"at most {MAX_PARALLEL}"),
    (["plan", "--tp", "1000000000"], f"at most {MAX_PARALLEL}"),
    (["plan", "--tp", "1024"], f"at most {MAX_PARALLEL}"),
    # T14: NUL and newlines in names (argv cannot carry NUL; in-process it can)
    (["plan", "--model", "a\x00b.json"], "control character"),
    (["plan", "--gpu", "h1\n00"], "control character"),
    (["plan", "--gpu", "a" * 5000], "too long"),
])
def test_bad_numbers_and_names_are_refused(args, needle):
    _one_error_line(args, needle)


def test_long_input_is_clipped_in_the_message():
    line = _one_error_line(["plan", "--context", "x" * 10_000], "(10,000 characters)")
    assert len(line) < 200
    _one_error_line(["plan", "--engine", "y" * 10_000])  # click's message, clipped centrally
    _one_error_line(["plan", "--kv", "z" * 3000], "unknown KV cache format")
    _one_error_line(["plan", "--context", "3\n2k"], "not a size")  # one line even with a newline in the input


@pytest.mark.parametrize("version", ["abc", "-1", "32k", "[1]", "0.26.x", "..", "v"])
def test_vllm_version_garbage_is_refused(version):
    _one_error_line(["plan", f"--vllm-version={version}"], f"is not a version number like {NEWEST_RELEASE_KNOWN}")


def test_vllm_versions_are_read_with_packaging():
    assert resolve_vllm_version(None) == resolve_vllm_version("") == resolve_vllm_version(" ") == NEWEST_RELEASE_KNOWN
    assert resolve_vllm_version("v0.24.0") == "0.24.0"
    assert resolve_vllm_version("0.26.0rc1") == "0.26.0"  # a release candidate follows its release's rules
    assert resolve_vllm_version("0.24") == "0.24"
    from kvcalc.engines.vllm_versions import rules_for
    assert rules_for("0.26").since == "0.26.0"  # '0.26' is 0.26.0, not below it (was the 0.24 row)
    with pytest.raises(UsageError, match="predates"):
        resolve_vllm_version("0.3.3")
    code, out, err = invoke(["plan", "--vllm-version", "", "--json"])
    assert code == 0 and json.loads(out)["settings"]["vllm_version"] == NEWEST_RELEASE_KNOWN
    code, out, err = invoke(["plan", "--vllm-version", "2.0.0", "--engine", "vllm"])
    assert code == 0 and f"newer than the newest release kvcalc has rules for ({NEWEST_RELEASE_KNOWN})" in err


def test_pp_beyond_the_layers_is_refused_saying_how_many():
    # §1d: an empty table with exit 0 (plan) and no output at all (explain)
    _one_error_line(["plan", "--pp", "64"], "llama-3.2-3b's 28 layers")
    _one_error_line(["explain", "--pp", "64"], "28 layers")
    code, _, _ = invoke(["plan", "--pp", "28", "--engine", "vllm"])
    assert code == 0


def test_tp_must_divide_the_attention_heads_as_vllm_checks():
    # §1d: TP 3 on 32 heads counted 6 of 8 KV heads and said fits
    _one_error_line(["plan", "--model", "llama-3.1-8b", "--gpu", "l4", "--tp", "3"],
                    "32 attention heads, and vLLM requires it; TP sizes that do: 1, 2, 4, 8, 16, 32")
    # SGLang shards the heads the same way; the message names the engine asked for
    _one_error_line(["plan", "--model", "llama-3.1-8b", "--gpu", "l4", "--tp", "3", "--engine", "sglang"],
                    "32 attention heads, and SGLang requires it")
    _one_error_line(["plan", "--model", "llama-3.1-8b", "--gpu", "l4", "--tp", "3", "--engine", "servers"],
                    "32 attention heads, and vLLM and SGLang require")
    spec = load_model("qwen2.5-7b")  # 28 heads, 4 KV heads: 7 divides the heads but not the KV heads
    assert "KV heads" in parallel_refusal(spec, 7)
    assert parallel_refusal(spec, 4) is None and parallel_refusal(spec, 1) is None
    assert parallel_refusal(load_model("llama-3.1-8b"), 16) is None  # 8 KV heads, each replicated on 2 ranks


def test_tp_sweep_offers_only_sizes_vllm_accepts():
    req = PlanRequest(spec=load_model("smollm2-135m"), gpu=get_gpu("t4"), context=131072, batch=8, weights="awq")
    assert [o.tp for o in tp_sweep(req)] == [1, 3]  # 9 heads, 3 KV heads
    req = PlanRequest(spec=load_model("llama-3.1-70b"), gpu=get_gpu("h100-sxm"), context=8192)
    assert [o.tp for o in tp_sweep(req)] == [1, 2, 4, 8]


def test_no_empty_answer_with_exit_0():
    # §1d: explain --tp 2 --engine hf printed nothing; plan showed an empty table
    _one_error_line(["explain", "--tp", "2", "--engine", "hf"], "transformers runs on one GPU")
    _one_error_line(["plan", "--tp", "2", "--engine", "hf"], "transformers runs on one GPU")
    # §1d: explain --engine vllm --weights int8 explained the baseline instead
    _one_error_line(["explain", "--engine", "vllm", "--weights", "int8"], "vllm does not run INT8 weights")
    _one_error_line(["explain", "--engine", "hf", "--kv", "fp8"], "hf has no FP8")


def test_a_dropped_configuration_is_a_warning():
    # §1d: plan --engine vllm --weights int8 returned the baseline row alone, without a word
    code, out, err = invoke(["plan", "--engine", "vllm", "--weights", "int8", "--json"])
    assert code == 0
    doc = json.loads(out)
    assert [r["config"] for r in doc["rows"]] == ["baseline"]
    assert any("vllm does not run INT8 weights" in w for w in doc["warnings"])
    code, out, err = invoke(["plan", "--tp", "2"])
    assert code == 0 and "warning: hf: left out: transformers runs on one GPU" in err


def test_plan_request_checks_its_bounds_for_any_caller():
    spec, gpu = load_model("llama-3.2-3b"), get_gpu("t4")
    for field, value in (("tp", MAX_PARALLEL + 1), ("pp", 0), ("batch", 10**400), ("context", MAX_CONTEXT * 2),
                         ("max_num_batched_tokens", 2**40)):
        kwargs = {"context": 8192, field: value}
        with pytest.raises(UsageError, match="--" + field.replace("_", "-")):
            PlanRequest(spec=spec, gpu=gpu, **kwargs)
    with pytest.raises(UsageError, match="28 layers"):
        plan(PlanRequest(spec=spec, gpu=gpu, context=8192, pp=29))


@pytest.mark.parametrize("text", [BIG, "1" + "0" * 5000, "\uff18k", "nan", "inf", "1e400", "-0", "1.5.5k"])
def test_parse_sizes_refuse_cleanly(text):
    with pytest.raises(UsageError):
        parse_tokens(text)
    with pytest.raises(UsageError):
        parse_bytes(text)


def test_parse_sizes_are_exact():
    assert parse_tokens("1.5k") == 1536 and parse_tokens("0.5k") == 512
    assert parse_tokens("16m") == 16 * 2**20
    assert parse_bytes("1.5KiB") == 1536 and parse_bytes("0.1GB") == 100_000_000


def test_one_line_and_shown():
    assert one_line("a\nb\t c") == "a b c"
    assert one_line("x\x07y") == "x\\x07y"
    long = "start " + "m" * 1000 + " end"
    clipped = one_line(long)
    assert len(clipped) <= MAX_MESSAGE and clipped.startswith("start ") and clipped.endswith(" end")
    assert shown("abc") == "'abc'"
    assert shown("a\nb") == "'a\\nb'"
    assert shown("q" * 1000).endswith("' (1,000 characters)") and len(shown("q" * 1000)) < 90


def test_help_and_version_are_not_errors():
    code, out, err = invoke([])  # a bare `kvcalc` asks for nothing wrong: its help, exit 0
    assert code == 0 and "Commands:" in out and "validate" in out and err == ""
    code, out, _ = invoke(["--version"])
    assert code == 0 and "kvcalc" in out
    code, out, _ = invoke(["plan", "--help"])
    assert code == 0 and f"at most {MAX_CONTEXT:,}" in out
