"""One test per root cause the fuzz suite (tests/fuzz_cases.py, benchmarks/fuzz.py) found after phase 1 of issue 14,
each reproducing the fuzzed one-liner."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helper import invoke

LOG = str(Path(__file__).parent / "fixtures" / "vllm_logs" / "real_v0.26.0_v-3b-auto-eager-u90.log")
VALIDATE = ["validate", "--from-log", LOG, "--model", "llama-3.2-3b", "--gpu", "h200"]


def _one_error_line(args, needle):
    code, out, err = invoke(args)
    assert code == 2, (code, err[-500:])
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err[:600]
    assert len(lines[0]) < 400


def test_validate_vllm_version_past_the_integer_digit_limit_is_one_line():
    # packaging's Version() raised ValueError (not InvalidVersion) from int() on a 5,000-digit part; since the options
    # layer (kvcalc/options.py) a text that long is refused as too long before it is read as a version
    _one_error_line(VALIDATE + ["--vllm-version", "9" * 5000], "--vllm-version")
    code, out, err = invoke(VALIDATE + ["--vllm-version", "9" * 5000])
    assert "is too long" in err or "is not a version number" in err


def test_a_huge_vllm_version_is_not_echoed_in_full():
    # plan accepted a 4,000-digit version as "newer than kvcalc's rules" and echoed all 4,000 digits in the warning
    code, out, err = invoke(["plan", "--vllm-version", "9" * 4000, "--json"])
    assert code == 0
    assert all(len(line) < 200 for line in json.loads(out)["warnings"])


def _log_with(tmp_path, old, new):
    text = Path(LOG).read_text()
    assert old in text
    path = tmp_path / "v.log"
    path.write_text(text.replace(old, new))
    return str(path)


def test_a_negative_size_or_time_in_a_log_is_refused_naming_the_line(tmp_path):
    # the parser's float pattern took a sign: "Loading weights took -6.04 GiB" became negative weights in the JSON
    path = _log_with(tmp_path, "Model loading took 6.04 GiB", "Model loading took -6.04 GiB")
    _one_error_line(["validate", "--from-log", path, "--model", "llama-3.2-3b", "--gpu", "h200"], "is negative")


def test_a_negative_available_kv_memory_is_read_as_vllm_prints_it(tmp_path):
    # vLLM prints the KV budget negative when it is overdrawn (then refuses to start): that reading is kept, signed
    path = _log_with(tmp_path, "Available KV cache memory: 118.5 GiB", "Available KV cache memory: -1.5 GiB")
    code, out, err = invoke(["validate", "--from-log", path, "--model", "llama-3.2-3b", "--gpu", "h200", "--json"])
    assert code == 0, err
    assert json.loads(out)["parsed"]["values"]["available_kv_bytes"] == -int(1.5 * 2**30)


def test_hf_kv_bytes_per_token_is_a_whole_number_in_json():
    # fuzz review item 12 / §2: every HF row's kv_bytes_per_token was a JSON float (15607.808)
    code, out, err = invoke(["plan", "--model", "gemma-3-1b", "--gpu", "t4", "--context", "1000", "--engine", "hf",
                             "--json"])
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and all(isinstance(r["kv_bytes_per_token"], int) for r in rows)
    # gemma-3-1b: sliding layers keep min(512, 1000) tokens; the mean over 1,000 tokens is not whole, so it is rounded
    assert rows[0]["kv_bytes_per_token"] == 15608


def test_validate_overrides_are_bounded_as_on_plan():
    # `--max-num-batched-tokens -1` reached the prediction and came back as a negative setting in the JSON
    _one_error_line(VALIDATE + ["--max-num-batched-tokens", "-1"], "--max-num-batched-tokens")
    _one_error_line(VALIDATE + ["--util", "nan"], "--util must be in (0, 1]")  # click's FloatRange lets NaN by
    for util in ("0", "1.5", "-0.5"):
        _one_error_line(VALIDATE + ["--util", util], "--util")


def test_validate_log_path_with_a_nul_byte_is_one_line():
    _one_error_line(["validate", "--from-log", "a\x00b", "--model", "llama-3.2-3b", "--gpu", "h200"], "no such file")


def test_a_config_whose_architectures_is_not_a_list_is_compared_without_a_traceback(tmp_path):
    # a user's config.json is any JSON the schema does not read: "architectures": 7 broke the model-mismatch check
    config = json.loads((Path(__file__).parent.parent / "kvcalc" / "catalog" / "llama-3.2-3b.json").read_text())
    config = config["config"] | {"architectures": 7}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = invoke(["validate", "--from-log", LOG, "--model", str(path), "--gpu", "h200", "--json"])
    assert code == 0, err
    assert json.loads(out)["comparison"]


SEARCH = ["search", "--model", "llama-3.2-3b", "--input-len", "2k", "--output-len", "512", "--concurrency", "8"]


def test_search_utils_grid_is_bounded_before_it_is_built():
    # `--utils 0.1:0.99:1e-9` built a list of ~9 x 10^8 utilizations before checking "at most 1000 values"
    _one_error_line(SEARCH + ["--utils", "0.1:0.99:1e-9"], "at most 1000")


def test_search_price_files_are_read_as_data(tmp_path):
    # a binary --prices file raised UnicodeDecodeError; a 300-character name raised OSError ENAMETOOLONG
    binary = tmp_path / "p.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x00")
    _one_error_line(SEARCH + ["--prices", str(binary)], "not UTF-8")
    _one_error_line(SEARCH + ["--prices", "9" * 300], "no such file")
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text("a: &a [1, 1]\nb: [*a, *a]\n")
    _one_error_line(SEARCH + ["--prices", str(laughs)], "anchor or alias")


def test_hf_capacity_without_max_position_embeddings_is_searched_to_kvcalcs_bound(tmp_path):
    # fuzz review 1d / item 14: the bisection's upper bound was max(max_position_embeddings, 2), so a config.json
    # without the field showed "2 (model max)" while the same run said 8k fits
    from kvcalc.limits import MAX_CONTEXT

    config = json.loads((Path(__file__).parent.parent / "kvcalc" / "catalog" / "llama-3.2-3b.json").read_text())
    config = config["config"]
    config.pop("max_position_embeddings")
    path = tmp_path / "nomax.json"
    path.write_text(json.dumps(config))
    code, out, err = invoke(["plan", "--model", str(path), "--gpu", "h200", "--engine", "hf", "--json"])
    assert code == 0, err
    rows = json.loads(out)["rows"]
    # 8k fits, so the longest context is well past it (and below kvcalc's bound: 140 GiB hold ~1.2M tokens)
    assert all(8192 < r["kv_capacity_tokens"] < MAX_CONTEXT for r in rows), [r["kv_capacity_tokens"] for r in rows]
    code, table, err = invoke(["plan", "--model", str(path), "--gpu", "h200", "--engine", "hf"])
    assert "(model max)" not in table and "(max ctx)" in table


def test_vllm_names_for_the_same_formats_are_read(tmp_path):
    # fuzz review §3: valid vLLM settings were refused as unknown formats
    from kvcalc.formats import kv_format, weight_format

    assert kv_format("bfloat16").name == kv_format("float16").name == "auto"
    assert weight_format("awq_marlin").name == "awq" and weight_format("gptq_marlin").name == "gptq"
    path = _log_with(tmp_path, "'max_model_len': 8192", "'max_model_len': 8192, 'kv_cache_dtype': 'bfloat16'")
    code, out, err = invoke(["validate", "--from-log", path, "--model", "llama-3.2-3b", "--gpu", "h200", "--json"])
    assert code == 0, err
    assert json.loads(out)["assumed"]["kv_cache_dtype"]["value"] in ("auto", "bfloat16")


def test_search_table_prints_at_most_table_rows():
    # `kvcalc search ... --top 10000` spent ~7 s (28 s on a loaded machine) laying out a 10,000-row rich table
    from kvcalc.search_render import TABLE_ROWS

    code, out, err = invoke(["search", "--model", "gemma-3-270m", "--input-len", "2k", "--output-len", "1k",
                             "--request-rate", "1", "--max-replicas", "64", "--top", "10000"])
    assert code == 0, err
    ranks = [line for line in out.splitlines() if line.startswith("│") and line.split("│")[1].strip().isdigit()]
    assert TABLE_ROWS < len(ranks) <= TABLE_ROWS + 12  # the ranked table, then the Pareto front's 12 at most
    assert f"more (--json lists all --top" in out


def test_a_deeply_nested_calibration_profile_is_one_line(tmp_path, monkeypatch):
    # the user's calibration profile was read with json.loads: a 200,000-deep array raised RecursionError on every plan
    (tmp_path / "calibration.json").write_text("[" * 200000 + "]" * 200000)
    monkeypatch.setenv("KVCALC_CONFIG_DIR", str(tmp_path))
    _one_error_line(["plan", "--gpu", "h200"], "deeper than 64 levels")
    (tmp_path / "calibration.json").write_bytes(b"\xff\xfe{}")
    _one_error_line(["plan", "--gpu", "h200"], "not UTF-8")


def test_a_calibration_profile_whose_environment_is_not_an_object_is_one_line(tmp_path, monkeypatch):
    # {"environments": ["x"]} raised AttributeError ('str' object has no attribute 'get') on every plan
    (tmp_path / "calibration.json").write_text(json.dumps({"schema": "kvcalc.calibration/1", "environments": ["x"]}))
    monkeypatch.setenv("KVCALC_CONFIG_DIR", str(tmp_path))
    _one_error_line(["explain", "--gpu", "h100-sxm"], "environments is not a list of objects")


def test_a_calibration_profile_with_a_null_layout_entry_is_one_line(tmp_path, monkeypatch):
    # {"non_torch_bytes_by_tp": {"tp1pp2": null}} loaded as (layout, None): every plan at that layout then divided
    # None by GiB (TypeError traceback) in the warning line (found by the calibrate --bench fuzz cases)
    doc = json.loads((Path(__file__).parent / "fixtures" / "calibration_h200.json").read_text())
    doc["environments"][0]["non_torch_bytes_by_tp"]["tp1pp2"] = None
    (tmp_path / "calibration.json").write_text(json.dumps(doc))
    monkeypatch.setenv("KVCALC_CONFIG_DIR", str(tmp_path))
    _one_error_line(["fit", "max-context", "--gpu", "h200", "--model", "mistral-7b-v0.1", "--context", "1k", "--pp",
                     "2", "--vllm-version", "0.26.0"], "a per-layout entry is null")
