"""`validate --from-log` takes plan's settings (tp, pp, weights/quantization, max_model_len, entry point, version),
reads them from the log's non-default args and engine-config lines where present, maps vLLM's names for formats, and
says where each setting came from. Real public logs (tests/fixtures/vllm_logs/public/, sources in index.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc.errors import UsageError
from kvcalc.validate.predict import settings_with_sources
from kvcalc.validate.vllm_log import parse_vllm_log, read_log

PUBLIC = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"
TP2 = PUBLIC / "llmd-h100x2-llama31-8b-tp2-8k.log"  # vllm serve, 0.19.0, TP 2, H100
FP8DYN = PUBLIC / "llmd-h100x2-llama33-70b-fp8dyn-tp2-8k.log"  # quantization=compressed-tensors in the log


def _json(path, model, *extra):
    code, out, err = invoke(["validate", "--from-log", str(path), "--model", model, "--gpu", "h100-sxm", "--json",
                             *extra])
    assert code == 0, err
    return json.loads(out)


def test_settings_are_read_from_the_log_and_say_so():
    assumed = _json(TP2, "llama-3.1-8b")["assumed"]
    assert assumed["tensor_parallel_size"] == {"value": 2, "from": "log"}
    assert assumed["version"] == {"value": "0.19.0", "from": "log"}
    assert assumed["entrypoint"] == {"value": "serve", "from": "log"}  # 'vLLM API server version' / model_tag
    assert assumed["max_model_len"]["from"] == "log" and assumed["max_model_len"]["value"] == 8192


def test_plan_flags_override_the_log():
    assumed = _json(TP2, "llama-3.1-8b", "-tp", "1", "--max-model-len", "4K", "--kv-cache-dtype", "fp8",
                    "--entrypoint", "offline", "--max-num-seqs", "64", "--enforce-eager")["assumed"]
    assert assumed["tensor_parallel_size"] == {"value": 1, "from": "override"}
    assert assumed["max_model_len"] == {"value": 4096, "from": "override"}  # vLLM's rule, as plan's: 4K = 4,096
    assert _json(TP2, "llama-3.1-8b", "--max-model-len", "4k")["assumed"]["max_model_len"]["value"] == 4000
    assert assumed["kv_cache_dtype"] == {"value": "fp8", "from": "override"}
    assert assumed["entrypoint"] == {"value": "llm", "from": "override"}
    assert assumed["max_num_seqs"] == {"value": 64, "from": "override"}
    assert assumed["enforce_eager"] == {"value": True, "from": "override"}


@pytest.mark.parametrize("vllm_name,kvcalc_name", [("awq_marlin", "awq"), ("gptq_marlin", "gptq"), ("fp8", "fp8"),
                                                   ("bitsandbytes", "nf4"), ("fbgemm_fp8", "fp8")])
def test_vllm_quantization_names_map_to_kvcalc_formats(vllm_name, kvcalc_name):
    parsed = {"settings": {"quantization": vllm_name}}
    settings, sources = settings_with_sources(parsed, {})
    assert settings.weights.name == kvcalc_name and sources["weights"] == f"log (quantization {vllm_name})"
    assert settings_with_sources({}, {"weights": vllm_name})[0].weights.name == kvcalc_name  # --quantization NAME


@pytest.mark.parametrize("vllm_name,kvcalc_name", [("bfloat16", "auto"), ("float16", "auto"), ("fp8_e4m3", "fp8"),
                                                   ("fp8_e5m2", "fp8-e5m2"), ("auto", "auto")])
def test_vllm_kv_cache_dtype_names_map(vllm_name, kvcalc_name):
    assert settings_with_sources({"settings": {"kv_cache_dtype": vllm_name}}, {})[0].kv.name == kvcalc_name


def test_unquantized_weights_follow_the_logged_dtype():
    settings, sources = settings_with_sources({"settings": {"dtype": "float16"}}, {})
    assert settings.weights.name == "fp16" and sources["weights"] == "log (dtype float16)"


def test_a_scheme_name_that_does_not_fix_the_bytes_asks_for_weights():
    """compressed-tensors holds several schemes: the model id of an llm-compressor checkpoint names it (this log's
    RedHatAI/...-fp8-dynamic is fp8); a local path that says nothing asks for --weights in one line."""
    parsed = parse_vllm_log(read_log(FP8DYN))
    assert parsed["settings"]["quantization"] == "compressed-tensors"
    assumed = _json(FP8DYN, "llama-3.1-70b")["assumed"]
    assert assumed["weights"] == {"value": "fp8", "from": "log (quantization compressed-tensors; the model id names fp8)"}
    text = read_log(FP8DYN).replace("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", "/models/llama70")
    local = FP8DYN.parent / "_local_model.log"
    try:
        local.write_text(text)
        code, out, err = invoke(["validate", "--from-log", str(local), "--model", "llama-3.1-70b", "--gpu", "h100-sxm"])
    finally:
        local.unlink()
    assert code == 2 and "give --weights" in err and len(err.strip().splitlines()) == 1
    assumed = _json(FP8DYN, "llama-3.1-70b", "--weights", "fp8")["assumed"]
    assert assumed["weights"] == {"value": "fp8", "from": "override"}


@pytest.mark.parametrize("model,fmt", [("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "w8a8"),
                                       ("RedHatAI/Qwen2.5-7B-Instruct-quantized.w4a16", "w4a16"),
                                       ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "fp8"),
                                       ("/models/my-checkpoint", None)])
def test_compressed_tensors_scheme_from_the_model_id(model, fmt):
    parsed = {"settings": {"model": model, "quantization": "compressed-tensors"}}
    if fmt is None:
        with pytest.raises(UsageError, match="give --weights"):
            settings_with_sources(parsed, {})
        return
    settings, sources = settings_with_sources(parsed, {})
    assert settings.weights.name == fmt and "the model id names" in sources["weights"]


@pytest.mark.parametrize("flag,value", [("--max-model-len", "4x"), ("--tp", "0"), ("--util", "1.5"),
                                        ("--weights", "int3"), ("--kv", "fp4")])
def test_bad_settings_are_one_line_exit_2(flag, value):
    code, out, err = invoke(["validate", "--from-log", str(TP2), "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                             flag, value])
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_the_model_defaults_to_the_logs_when_the_catalog_has_it():
    code, out, err = invoke(["validate", "--from-log", str(TP2), "--gpu", "h100-sxm"])
    assert code == 0 and "note: model llama-3.1-8b (the log served meta-llama/Llama-3.1-8B-Instruct)" in err
    code, out, err = invoke(["validate", "--from-log", str(PUBLIC / "dennislee-a100-qwen2-7b-u050.log"),
                             "--gpu", "a100-80gb"])
    assert code == 2 and "needs --model" in err and "not in kvcalc's catalog" in err


def test_entry_point_offline_from_an_args_line_without_the_api_server_else_serve():
    offline = Path(__file__).parent / "fixtures" / "vllm_logs" / "real_v0.26.0_v-3b-auto-eager-u90.log"  # LLM()
    assert parse_vllm_log(read_log(offline))["settings"]["entrypoint"] == "llm"
    settings, sources = settings_with_sources({"settings": {}}, {})
    assert settings.entrypoint == "serve" and sources["entrypoint"] == "default"


def test_a_quantized_checkpoint_sets_the_weights_whatever_the_method_name():
    """vLLM loaded the checkpoint the model names: an MXFP4 catalog entry keeps its own bytes under the log's
    `quantization=mxfp4` (a name kvcalc cannot size alone), and under --weights mxfp4."""
    from kvcalc.catalog import load_model
    from kvcalc.checkpoint import baseline_weights

    ckpt = baseline_weights(load_model("gpt-oss-20b"))
    settings, sources = settings_with_sources({"settings": {"quantization": "mxfp4"}}, {}, checkpoint=ckpt)
    assert settings.weights is ckpt and sources["weights"].startswith("checkpoint (MXFP4")
    settings, sources = settings_with_sources({"settings": {}}, {"weights": "mxfp4"}, checkpoint=ckpt)
    assert settings.weights is ckpt and sources["weights"].startswith("override (mxfp4")
    # --weights with a format kvcalc sizes itself still wins over the checkpoint
    assert settings_with_sources({"settings": {}}, {"weights": "bf16"}, checkpoint=ckpt)[0].weights.name == "bf16"
