"""Issue 10 items 1-3: vLLM as people run it. Entry points, vLLM's flag names and number rule, pasted command lines,
version rules from 0.4 on, and the overheads the public start-up logs show (tests/fixtures/vllm_logs/public/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helper import invoke
from kvcalc.catalog import load_model
from kvcalc.engines import vllm
from kvcalc.engines.vllm_versions import VERSION_RULES, rules_for, table_markdown
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.units import GiB, parse_vllm_int
from kvcalc.vllm_command import parse_command

PUBLIC = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"


# ------------------------------------------------------------------------------------------ vLLM's number rule


@pytest.mark.parametrize("text,value", [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), ("8192", 8192),
                                        ("1M", 2**20), ("1m", 10**6), ("20G", 20 * 2**30), ("20g", 20 * 10**9)])
def test_vllm_number_rule(text, value):
    assert parse_vllm_int(text) == value


@pytest.mark.parametrize("text", ["1.5K", "-1", "abc", "0", "1e30", "32 k"])
def test_vllm_number_rule_refuses(text):
    with pytest.raises(UsageError):
        parse_vllm_int(text)


def test_max_model_len_follows_vllm_and_context_follows_kvcalc():
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                             "--max-model-len", "32K", "--context", "32k", "--json"])
    assert code == 0, err
    row = json.loads(out)["rows"][0]["vllm_breakdown"]
    assert row["max_model_len"] == 32_768
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                             "--max-model-len", "32k", "--context", "32k"])
    assert code == 2 and "32,000" in err and "32k = 32,000" in err


def test_max_model_len_auto_is_the_models_maximum():
    code, out, err = invoke(["plan", "--model", "qwen2.5-7b", "--gpu", "h100", "--engine", "vllm",
                             "--max-model-len", "auto", "--json"])
    assert code == 0, err
    assert json.loads(out)["rows"][0]["vllm_breakdown"]["max_model_len"] == load_model("qwen2.5-7b").max_position_embeddings


# ------------------------------------------------------------------------------------------ entry points, defaults


def test_entrypoint_sets_vllm_batch_defaults():
    # arg_utils.get_batch_defaults: an 80 GB H100 gets 8192 tokens under `vllm serve`, 16384 for the LLM class
    def mnbt(*extra):
        code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--json",
                                 *extra])
        assert code == 0, err
        b = json.loads(out)["rows"][0]["vllm_breakdown"]
        return b["max_num_batched_tokens"], b["max_num_seqs"]
    assert mnbt() == (8192, 1024)
    assert mnbt("--entrypoint", "offline") == (16384, 1024)
    assert mnbt("--entrypoint", "serve", "--vllm-version", "0.8.0") == (2048, 256)  # before the memory tiers
    assert mnbt("--vllm-version", "0.6.3") == (8192, 256)  # V0: max(max_model_len 8192, 2048), 256 seqs


def test_a100_joins_the_large_batch_tier_only_before_0_9():
    """engine/arg_utils.py at v0.8.5:1596 gives every >= 70 GiB GPU the large defaults; v0.9.0:1495 adds
    `"a100" not in device_name` (vllm#17885). A100 80GB (79.25 GiB as the driver reports, >= 70): 0.8.5 serve
    8192 tokens / 1024 seqs, LLM 16384 / 1024; 0.9.0 and later 2048 / 256 and 8192 / 256. The H100 keeps the large
    tier in both."""
    a100, h100 = get_gpu("a100-80gb"), get_gpu("h100")
    assert a100.memory_total_bytes >= 70 * 2**30 and "a100" in a100.name.lower()
    assert vllm.batch_defaults(a100, "serve", version="0.8.5") == (8192, 1024)
    assert vllm.batch_defaults(a100, "llm", version="0.8.5") == (16384, 1024)
    for version in ("0.9.0", "0.9.1", "0.33.0"):
        assert vllm.batch_defaults(a100, "serve", version=version) == (2048, 256)
        assert vllm.batch_defaults(a100, "llm", version=version) == (8192, 256)
    for version in ("0.8.5", "0.9.0"):
        assert vllm.batch_defaults(h100, "serve", version=version) == (8192, 1024)
    # the 0.9.0 row changes nothing else
    from dataclasses import asdict
    diff = {k for k, v in asdict(rules_for("0.8.5")).items() if asdict(rules_for("0.9.0"))[k] != v}
    assert diff == {"since", "batch_defaults", "sources"}


def test_default_util_by_version():
    # vllm#38284: 0.9 -> 0.92 with CUDA-graph profiling on by default, from 0.21.0
    assert rules_for("0.20.2").default_util == 0.9 and not rules_for("0.20.2").cudagraph_estimate
    assert rules_for("0.21.0").default_util == 0.92 and rules_for("0.21.0").cudagraph_estimate
    code, out, _ = invoke(["plan", "--model", "llama-3.2-3b", "--engine", "vllm", "--json", "--vllm-version",
                           "0.33.0"])
    assert json.loads(out)["settings"]["util"] == 0.92
    # 0.34.0: 1.0 with the extensible KV cache, the default (config/cache.py:495-501)
    code, out, _ = invoke(["plan", "--model", "llama-3.2-3b", "--engine", "vllm", "--json"])
    assert json.loads(out)["settings"]["util"] == 1.0
    code, out, _ = invoke(["plan", "--model", "llama-3.2-3b", "--engine", "vllm", "--json", "--vllm-version",
                           "0.19.0"])
    assert json.loads(out)["settings"]["util"] == 0.9


@pytest.mark.parametrize("version,since,engine", [
    ("0.4.0", "0.4.0", "v0"), ("0.6.3", "0.5.3", "v0"), ("0.6.5", "0.6.4", "v0"), ("0.7.3", "0.6.4", "v0"),
    ("0.8.5.dev169+gce17db808.d20250423", "0.8.5", "v1"), ("0.9.0", "0.9.0", "v1"), ("0.9.1", "0.9.0", "v1"), ("0.10.1.1", "0.9.2", "v1"),
    ("0.19.0", "0.9.2", "v1"), ("0.26.0rc1", "0.26.0", "v1"), ("0.26", "0.26.0", "v1"), ("0.28.0rc3", "0.28.0", "v1"), ("0.28.1", "0.28.1", "v1"),
    ("0.29.1rc1.dev17+gd2d649e67", "0.29.0", "v1"), ("0.33.0", "0.33.0", "v1"), ("0.34.0", "0.34.0", "v1"), ("1.2.0", "0.34.0", "v1")])
def test_version_rows(version, since, engine):
    r = rules_for(version)
    assert (r.since, r.engine) == (since, engine)


def test_version_table_is_ordered_and_cited():
    keys = [tuple(int(n) for n in r.since.split(".")) for r in VERSION_RULES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(r.sources for r in VERSION_RULES)
    assert table_markdown().count("\n") == len(VERSION_RULES) + 1
    with pytest.raises(UsageError, match="0.4.0"):
        rules_for("0.3.3")


def test_unknown_newer_version_warns_and_uses_the_newest_rules():
    code, out, err = invoke(["plan", "--model", "llama-3.2-3b", "--engine", "vllm", "--vllm-version", "0.35.0rc2"])
    assert code == 0 and "newer than the newest release kvcalc has rules for (0.34.0)" in err
    code, out, err = invoke(["plan", "--model", "llama-3.2-3b", "--engine", "vllm", "--vllm-version", "0.31.0rc2"])
    assert code == 0 and "newer than the newest" not in err


def test_evidence_of_each_release_is_stated():
    """explain says which rules were measured on a GPU (0.26 on the H200) and which come from source and logs."""
    from kvcalc.engines.vllm_versions import evidence_note

    assert rules_for("0.26.0").evidence == "measured"
    assert {rules_for(v).evidence for v in ("0.27.0", "0.28.0", "0.29.0", "0.19.0")} == {"source"}
    assert {rules_for(v).evidence for v in ("0.30.0", "0.31.0", "0.32.0", "0.33.0")} == {"carried"}
    assert "measured on a GPU" in evidence_note("0.26.0")
    assert "0.26.0's, measured on the H200" in evidence_note("0.28.0")
    assert "unverified" in evidence_note("0.33.0")
    code, out, _ = invoke(["explain", "--model", "llama-3.2-3b", "--gpu", "h200", "--engine", "vllm"])
    assert code == 0 and "vLLM 0.34.0 rules (row 0.34.0): read from vLLM's source" in out
    assert rules_for("0.34.0").evidence == "source-only"


def test_160_gib_batching_tier_from_0_28():
    """0.28 arg_utils.py:2582-2591: `vllm serve` on a >= 160 GiB GPU batches 16384 tokens; 8192 before 0.28 and on
    the 70-160 GiB tier (H200 139.8 GiB)."""
    b200, h200 = get_gpu("b200"), get_gpu("h200")
    assert vllm.batch_defaults(b200, "serve", version="0.27.0") == (8192, 1024)
    assert vllm.batch_defaults(b200, "serve", version="0.28.0") == (16384, 1024)
    assert vllm.batch_defaults(h200, "serve", version="0.33.0") == (8192, 1024)
    assert vllm.batch_defaults(get_gpu("l4"), "serve", version="0.33.0") == (2048, 256)


def test_v0_profiles_a_whole_prompt_and_has_no_hybrid_allocator():
    spec, gpu = load_model("gemma-2-9b"), get_gpu("h100")
    s = vllm.VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=4096, version="0.6.3",
                          entrypoint="serve")
    est = vllm.estimate(spec, gpu, s)
    assert est.max_num_batched_tokens == 4096 and est.max_num_seqs == 256
    assert est.layout.layout == "uniform"  # V0: every layer keeps max_model_len of KV
    assert est.logged_kv_tokens == est.num_gpu_blocks * 16


# ------------------------------------------------------------------------------------------ aliases


def test_vllm_flag_names_are_aliases():
    base = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--json"]
    a = invoke(base + ["--tp", "2", "--kv", "fp8", "--util", "0.85", "--weights", "awq"])
    b = invoke(base + ["-tp", "2", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.85",
                       "--quantization", "awq_marlin"])
    c = invoke(base + ["--tensor-parallel-size", "2", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization=0.85",
                       "-q", "awq"])
    assert a[0] == b[0] == c[0] == 0
    assert json.loads(a[1])["rows"] == json.loads(b[1])["rows"] == json.loads(c[1])["rows"]
    code, out, err = invoke(base + ["--quantization", "mxfp4"])
    assert code == 2 and "mxfp4" in err and len(err.strip().splitlines()) == 1


def test_kv_cache_memory_bytes_is_the_budget():
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--json",
                             "--kv-cache-memory-bytes", "20G"])
    assert code == 0, err
    b = json.loads(out)["rows"][0]["vllm_breakdown"]
    assert b["available_kv_bytes"] == 20 * GiB
    # Llama-3.1-8B: 128 KiB per token; 64-token blocks, the 0.34.0 default (config/cache.py:185)
    assert b["num_gpu_blocks"] == 20 * GiB // (64 * 131072)


# ------------------------------------------------------------------------------------------ --vllm-command


def test_vllm_command_is_read_as_vllm_reads_it():
    values, warnings = parse_command(
        "CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k -tp 2 "
        "--gpu-memory-utilization=0.85 --kv-cache-dtype fp8 --port 8000 --enable-prefix-caching --foo bar")
    assert values == {"entrypoint": "serve", "model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 32_000,
                      "tp": 2, "util": 0.85, "kv": "fp8"}
    assert warnings == ["--vllm-command: --max-model-len 32k is 32,000 tokens as vLLM reads it (32K = 32,768)",
                        "--vllm-command: --foo is not modelled by kvcalc; ignored"]
    values, _ = parse_command("python -m vllm.entrypoints.openai.api_server --model qwen2.5-7b --max-model-len -1 "
                              "--enforce-eager --quantization awq")
    assert values == {"entrypoint": "serve", "model": "qwen2.5-7b", "max_model_len": -1, "enforce_eager": True,
                      "quantization": "awq"}


@pytest.mark.parametrize("command,needle", [
    ("python train.py", "no `vllm serve`"), ("vllm serve", "no model"), ("vllm serve m --max-model-len", "needs"),
    ("vllm serve 'unclosed", "shell"), ("vllm serve m --max-model-len 1.5K", "decimals"),
    ("vllm serve m --gpu-memory-utilization 1.5", "(0, 1]")])
def test_vllm_command_bad_input_is_one_line(command, needle):
    code, out, err = invoke(["plan", "--vllm-command", command])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def test_vllm_command_plans_like_the_same_options():
    cmd = invoke(["plan", "--gpu", "l4", "--engine", "vllm", "--json", "--vllm-command",
                  "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16K --max-num-seqs 64"])
    opts = invoke(["plan", "--gpu", "l4", "--engine", "vllm", "--json", "--model", "llama-3.1-8b",
                   "--max-model-len", "16K", "--context", "16k", "--max-num-seqs", "64"])
    assert cmd[0] == opts[0] == 0, cmd[2]
    pasted = json.loads(cmd[1])["rows"]
    assert pasted[0]["verdicts"][0] == "your command"  # the row the pasted line runs is marked, the rest the same
    pasted[0]["verdicts"].remove("your command")
    assert pasted == json.loads(opts[1])["rows"]
    # an option typed on kvcalc's command line wins, with a warning
    code, out, err = invoke(["plan", "--gpu", "l4", "--engine", "vllm", "--json", "--tp", "1", "--vllm-command",
                             "vllm serve llama-3.1-8b --max-model-len 8K -tp 2"])
    assert code == 0 and json.loads(out)["settings"]["tp"] == 1
    assert any("wins" in w for w in json.loads(out)["warnings"])


# ------------------------------------------------------------------------------------------ overheads (public logs)
# (the public logs' error table and its bounds: tests/test_public_logs_report.py)


def test_sampler_holds_the_whole_vocabulary_on_every_tp_rank():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h100")
    s1 = vllm.VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), version="0.19.0")
    s2 = vllm.VllmSettings(weights=weight_format("bf16"), kv=kv_format("auto"), version="0.19.0", tensor_parallel=2)
    # 0.19: 16 B per logit (fp32 logits + sorted copy + int64 indices), 1024 rows x 128,256 (a multiple of 64)
    assert vllm.sampler_bytes(spec, s1, 8192, 1024, False) == vllm.sampler_bytes(spec, s2, 8192, 1024, False) \
        == 16 * 1024 * 128256


def test_nccl_nvls_only_on_sxm_hopper_tensor_parallel():
    spec = load_model("llama-3.1-8b")
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=8192, tensor_parallel=2)
    sxm = vllm.estimate(spec, get_gpu("h100"), vllm.VllmSettings(**base))
    pcie = vllm.estimate(spec, get_gpu("h100-pcie"), vllm.VllmSettings(**base))
    off = vllm.estimate(spec, get_gpu("h100"), vllm.VllmSettings(**base, nccl_nvls=False))
    assert sxm.non_torch_bytes - off.non_torch_bytes == 2152852357 and pcie.non_torch_bytes == off.non_torch_bytes
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--tp", "2",
                             "--nccl-nvls", "off", "--json"])
    assert json.loads(out)["rows"][0]["vllm_breakdown"]["non_torch_bytes"] == off.non_torch_bytes


def test_method_doc_shows_the_version_rules_as_they_are():
    method = (Path(__file__).parent.parent / "docs" / "method.md").read_text()
    assert table_markdown() in method, "docs/method.md: paste kvcalc.engines.vllm_versions.table_markdown()"


# ------------------------------------------------------------------------------------------ H200 v2 starts (0.26.0)

V2 = Path(__file__).parent.parent / "docs" / "validation" / "data" / "v2"


def _v2_rows() -> dict:
    rows = {}
    for f in sorted(V2.glob("vllm-*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if (r.get("observed") or {}).get("internals"):
                rows[r["case_id"]] = r
    return rows


def _v2_estimate(row: dict, model: str):
    import dataclasses

    kw = row["llm_kwargs"]
    spec = load_model(model)
    gpu = dataclasses.replace(get_gpu("h200"), memory_total_bytes=row["observed"]["total_bytes"])
    spec_cfg = kw.get("speculative_config") or {}
    s = vllm.VllmSettings(
        weights=weight_format("bf16"), kv=kv_format(kw.get("kv_cache_dtype", "auto")),
        gpu_memory_utilization=kw["gpu_memory_utilization"], max_model_len=kw["max_model_len"],
        max_num_batched_tokens=kw["max_num_batched_tokens"], max_num_seqs=kw["max_num_seqs"],
        enforce_eager=bool(kw.get("enforce_eager")), version="0.26.0", entrypoint="llm",
        enable_lora=bool(kw.get("enable_lora")), max_loras=kw.get("max_loras", 1),
        max_lora_rank=kw.get("max_lora_rank", 16), speculative_method=spec_cfg.get("method"),
        num_speculative_tokens=spec_cfg.get("num_speculative_tokens", 0),
        flashinfer_sampler=(row["environment"].get("env") or {}).get("VLLM_USE_FLASHINFER_SAMPLER") != "0")
    return vllm.estimate(spec, gpu, s), row["observed"]["internals"]


@pytest.mark.skipif(not V2.is_dir(), reason="v2 observations not committed")
def test_v2_graph_floor_lora_and_ngram_against_h200_starts():
    rows = _v2_rows()
    # V2 runner with CUDA graphs: the compile phase (Inductor's copy of the embedding; engines/vllm_profile.py)
    est, obs = _v2_estimate(rows["s-8b-auto"], "llama-3.1-8b")
    assert abs(est.activation_bytes - obs["peak_activation_memory"]) / obs["peak_activation_memory"] < 0.005
    assert abs(est.num_gpu_blocks - obs["num_gpu_blocks"]) / obs["num_gpu_blocks"] < 0.005
    # LoRA slots (4 x rank 16) from the shapes: the weights grow as vLLM's did, within 1% of the growth
    base, base_obs = _v2_estimate(rows["c-3b-serve-eager"], "llama-3.2-3b")
    lora, lora_obs = _v2_estimate(rows["c-3b-lora4-r16"], "llama-3.2-3b")
    grew = lora_obs["model_memory_usage"] - base_obs["model_memory_usage"]
    assert abs((lora.weights_bytes - base.weights_bytes) - grew) / grew < 0.01
    # n-gram speculative decoding: the V1 profile's rejection pass (vllm_draft.rejection_sampler_bytes; this engine was
    # the 7th of its process, so torch's 32 MiB cuBLAS workspace predates the profile: +2.6%)
    ngram, ngram_obs = _v2_estimate(rows["c-3b-ngram4"], "llama-3.2-3b")
    assert abs(ngram.activation_bytes - ngram_obs["peak_activation_memory"]) / ngram_obs["peak_activation_memory"] < 0.03


def test_drafter_adds_weights_and_kv_layers():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h100")
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=8192)
    plain = vllm.estimate(spec, gpu, vllm.VllmSettings(**base))
    eagle = vllm.estimate(spec, gpu, vllm.VllmSettings(**base, speculative_method="eagle", num_speculative_tokens=3))
    # one Llama-3.1-8B layer's block: 64 tokens (0.34.0's default) x 8 KV heads x (128 + 128) x 2 B
    per_layer_kv = 64 * 8 * 256 * 2
    assert eagle.page_bytes_all_layers - plain.page_bytes_all_layers == per_layer_kv
    assert eagle.weights_bytes > plain.weights_bytes


def test_other_processes_memory_by_version():
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("rtx-4090")
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=8192)
    for version in ("0.6.3", "0.19.0"):
        alone = vllm.estimate(spec, gpu, vllm.VllmSettings(**base, version=version))
        shared = vllm.estimate(spec, gpu, vllm.VllmSettings(**base, version=version, other_processes_bytes=GiB))
        if version == "0.6.3":  # the old profile counted every used byte on the GPU
            assert alone.available_kv_bytes - shared.available_kv_bytes == GiB and shared.fits
        else:  # later: not from the KV cache, but total x util must be free at start
            assert shared.available_kv_bytes == alone.available_kv_bytes and shared.fits
    crowded = vllm.VllmSettings(**base, version="0.19.0", other_processes_bytes=3 * GiB, gpu_memory_utilization=0.95)
    est = vllm.estimate(spec, gpu, crowded)
    assert not est.fits and est.shortfall_bytes >= 3 * GiB - (gpu.memory_total_bytes - est.requested_memory)
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "4090", "--engine", "vllm",
                             "--other-processes-memory", "lots"])
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_forced_engine_within_the_releases_that_had_it():
    from kvcalc.engines.vllm_versions import rules_with_engine

    assert rules_with_engine("0.8.3", "v0").engine == "v0" and rules_with_engine("0.8.3", None).engine == "v1"
    assert rules_with_engine("0.7.3", "v1").logged_tokens == "per_group"
    for version, engine in (("0.19.0", "v0"), ("0.6.3", "v1")):
        with pytest.raises(UsageError):
            rules_with_engine(version, engine)
    code, out, err = invoke(["plan", "--vllm-engine", "v0", "--vllm-version", "0.19"])
    assert code == 2 and "no V0 engine" in err
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "4090", "--engine", "vllm", "--json",
                             "--vllm-engine", "v0", "--vllm-version", "0.8.3", "--context", "4k"])
    assert code == 0 and json.loads(out)["rows"][0]["vllm_breakdown"]["max_num_batched_tokens"] == 4096


def test_validate_takes_the_same_entrypoint_names():
    log = str(Path(__file__).parent / "fixtures" / "vllm_logs" / "real_v0.26.0_v-3b-auto-eager-u90.log")
    # one option vocabulary (kvcalc/options.py): validate takes plan's names, serve and offline, and refuses the
    # old 'llm' spelling as plan does
    for name in ("offline", "serve"):
        code, out, err = invoke(["validate", "--from-log", log, "--model", "llama-3.2-3b", "--gpu", "h200",
                                 "--entrypoint", name, "--json"])
        assert code in (0, 1), err
    for command in (["validate", "--from-log", log, "--model", "llama-3.2-3b", "--gpu", "h200"], ["plan"]):
        code, out, err = invoke(command + ["--entrypoint", "llm"])
        assert code == 2 and "'llm'" in err


def test_v0_chunked_prefill_decides_the_profile_batch():
    # config.py SchedulerConfig (V0): a whole max_model_len prompt without chunked prefill, 2048 tokens with it; on by
    # default only past 32K (0.5.3+)
    base = ["plan", "--model", "qwen2.5-7b", "--gpu", "h100", "--engine", "vllm", "--vllm-version", "0.6.3", "--json"]

    def mnbt(*extra):
        code, out, err = invoke(base + list(extra))
        assert code == 0, err
        return json.loads(out)["rows"][0]["vllm_breakdown"]["max_num_batched_tokens"]
    assert mnbt("--context", "16k") == 16384
    assert mnbt("--context", "16k", "--enable-chunked-prefill") == 2048
    assert mnbt("--context", "32k", "--max-model-len", "32769") == 2048
    assert mnbt("--context", "32k", "--max-model-len", "32769", "--no-enable-chunked-prefill") == 32769
