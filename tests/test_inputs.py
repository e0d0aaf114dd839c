"""Hard edges where files enter: every reproduction of the fuzz review (docs: ../shared/reviews/fuzz-2026-11.md, T3-T14,
H5-H8, §1d) for config.json and GPU profile YAML, rebuilt in tmp_path, must end in one line and exit code 2, fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from cli_helper import invoke
from kvcalc.catalog import catalog_entry, catalog_names
from kvcalc.config_schema import MAX_LAYERS, SCHEMAS
from kvcalc.errors import UsageError
from kvcalc.model import SUPPORTED, load_config_file, spec_from_config

ROOT = Path(__file__).parents[1]


def catalog_config(name: str) -> dict:
    return json.loads(json.dumps(catalog_entry(name)["config"]))  # a deep copy


def one_line_error(args: list[str], *needles: str) -> str:
    code, out, err = invoke(args)
    assert code == 2, (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert len(err) < 300, err
    for needle in needles:  # "a|b": either wording passes
        assert any(alternative in err for alternative in needle.split("|")), err
    return err


def plan_config(tmp_path: Path, cfg: object, *needles: str, name: str = "c") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return one_line_error(["plan", "--model", str(path)], *needles)


# ---------------------------------------------------------------------------------------------------------------------
# config.json: fields out of range (T3, T5, T10, T11, H6, §1d)


@pytest.mark.parametrize("model, field, value, needle", [
    ("llama-3.2-3b", "num_hidden_layers", 0, "num_hidden_layers must be >= 1 (got 0)"),  # T3
    ("llama-3.2-3b", "num_hidden_layers", -1, "num_hidden_layers must be >= 1"),
    ("llama-3.2-3b", "head_dim", 0, "head_dim must be >= 1"),  # T5
    ("llama-3.2-3b", "num_hidden_layers", 200_000, f"num_hidden_layers must be <= {MAX_LAYERS:,}"),  # H6
    ("llama-3.2-3b", "num_hidden_layers", 10**20, "num_hidden_layers must be <="),  # T10
    ("llama-3.2-3b", "num_key_value_heads", -8, "num_key_value_heads must be >= 1"),  # §1d
    ("llama-3.2-3b", "num_key_value_heads", 0, "num_key_value_heads must be >= 1"),  # §1d
    ("llama-3.2-3b", "num_key_value_heads", 5, "must be a multiple of num_key_value_heads (5)"),
    ("llama-3.2-3b", "vocab_size", 10**12, "vocab_size must be <= 100,000,000"),
    ("llama-3.2-3b", "hidden_size", "3072", "hidden_size must be a whole number (got '3072')"),
    ("llama-3.2-3b", "hidden_size", 3072.5, "hidden_size must be a whole number"),
    ("llama-3.2-3b", "intermediate_size", None, "intermediate_size must be set"),
    ("llama-3.2-3b", "tie_word_embeddings", "false", "tie_word_embeddings must be true or false"),
    ("llama-3.2-3b", "rope_scaling", "linear", "rope_scaling must be an object"),
    ("llama-3.2-3b", "quantization_config", [4], "quantization_config must be an object"),
    ("mistral-7b-v0.1", "sliding_window", -4096, "sliding_window must be >= 1"),  # §1d
    ("mistral-7b-v0.1", "sliding_window", 0, "sliding_window must be >= 1"),
    ("mixtral-8x7b", "num_local_experts", 0, "num_local_experts must be >= 1"),  # T11
    ("mixtral-8x7b", "num_experts_per_tok", 9, "num_experts_per_tok (9) exceeds num_local_experts (8)"),
    ("deepseek-v3", "qk_nope_head_dim", -4096, "qk_nope_head_dim must be >= 1 (got -4096)"),  # §1d, ranked 2
    ("deepseek-v3", "n_routed_experts", 0, "n_routed_experts must be >= 1"),
    ("jamba-1.5-mini", "attn_layer_offset", 8, "attn_layer_offset (8) must be below attn_layer_period (8)"),
    ("jamba-1.5-mini", "mamba_dt_rank", "big", 'mamba_dt_rank must be "auto" or a whole number'),
    ("qwen3-30b-a3b", "moe_intermediate_size", -1, "moe_intermediate_size must be >= 1"),
])
def test_out_of_range_field_is_named_on_one_line(tmp_path, model, field, value, needle):
    cfg = catalog_config(model)
    cfg[field] = value
    plan_config(tmp_path, cfg, needle, "config of c")


def test_text_and_vision_config_must_be_objects(tmp_path):  # T8, T9
    cfg = catalog_config("llama-3.2-3b")
    cfg.pop("num_hidden_layers")
    plan_config(tmp_path, {**cfg, "text_config": "abc"}, "text_config must be an object (got 'abc')")
    plan_config(tmp_path, {**cfg, "text_config": 5}, "text_config must be an object")
    gemma = catalog_config("gemma-3-4b")
    plan_config(tmp_path, {**gemma, "vision_config": "siglip"}, "vision_config must be an object")
    gemma["vision_config"]["patch_size"] = 0
    plan_config(tmp_path, gemma, "vision_config.patch_size must be >= 1 (got 0)")
    gemma = catalog_config("gemma-3-4b")
    gemma["text_config"]["num_hidden_layers"] = -3
    plan_config(tmp_path, gemma, "text_config.num_hidden_layers must be >= 1")
    gemma["text_config"]["num_hidden_layers"] = 34
    gemma["text_config"]["sliding_window"] = None
    plan_config(tmp_path, gemma, "text_config.sliding_window must be set")


def test_a_config_that_is_not_an_object(tmp_path):
    plan_config(tmp_path, [1, 2], "is not a JSON object")


def test_every_error_of_a_bad_config_is_counted_but_one_is_printed(tmp_path):
    cfg = catalog_config("llama-3.2-3b")
    cfg.update(num_hidden_layers=0, hidden_size=-1, vocab_size="x")
    err = plan_config(tmp_path, cfg, "(and 2 more)")
    assert err.count("must") == 1


# ---------------------------------------------------------------------------------------------------------------------
# config.json: the file itself (T4, T6, T7, H7, T13, T14)


@pytest.mark.parametrize("text, needle", [
    ('{"hidden_size": ' + "9" * 5000 + "}", "an integer of 5,000 digits"),  # T7
    ("[" * 200_000 + "]" * 200_000, "deeper than 64 levels"),  # T7
    ('{"a": ' + "[" * 65 + "]" * 65 + "}", "deeper than 64 levels"),
    ("{not json", "is not valid JSON: Expecting property name"),
    ("", "is not valid JSON"),
])
def test_json_that_is_not_plain_data(tmp_path, text, needle):
    path = tmp_path / "c.json"
    path.write_text(text)
    one_line_error(["plan", "--model", str(path)], needle)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_are_refused_in_the_fields_kvcalc_reads(tmp_path, literal):  # T4
    text = json.dumps(catalog_config("llama-3.2-3b"))
    for field in ("hidden_size", "max_position_embeddings", "partial_rotary_factor"):
        path = tmp_path / "c.json"
        path.write_text(text[:-1] + f', "{field}": {literal}}}')
        err = one_line_error(["plan", "--model", str(path)], f"{field} must be a")
        assert "number" in err


def test_non_finite_numbers_elsewhere_are_read_as_transformers_reads_them(tmp_path):
    """Real Mamba2 configs say "time_step_limit": [0.0, Infinity] (tests/fixtures/configs/nvidia--Nemotron-H-...)."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(catalog_config("llama-3.2-3b"))[:-1] + ', "time_step_limit": [0.0, Infinity]}')
    code, out, err = invoke(["plan", "--model", str(path)])
    assert code == 0, err


FIXTURES = sorted(p for p in (ROOT / "tests" / "fixtures" / "configs").glob("*.json")
                  if p.name != "param_totals.json" and not p.name.endswith(".hf_quant_config.json"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_real_configs_are_planned_or_refused_as_unsupported_never_as_malformed(path):
    """No false alarms: every real config.json of the fixture corpus passes the reader and, where its family is
    supported, the schema; the others are refused as unsupported families (issue 9 adds them)."""
    from kvcalc.catalog import load_model
    from kvcalc.errors import UnsupportedModelError

    try:
        load_model(str(path))
    except UnsupportedModelError:
        pass


@pytest.mark.parametrize("raw, needle", [
    (b"\x89PNG\r\n\x1a\n", "is not UTF-8 text (byte 0 is 0x89)"),  # T6
    (json.dumps({"model_type": "llama"}).encode("utf-16"), "is not UTF-8 text"),  # T6
])
def test_binary_and_utf16_configs(tmp_path, raw, needle):
    path = tmp_path / "c.json"
    path.write_bytes(raw)
    one_line_error(["plan", "--model", str(path)], needle)


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "c.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(catalog_config("llama-3.2-3b")).encode())
    assert load_config_file(path)["model_type"] == "llama"


def test_oversized_config_is_refused_before_it_is_read(tmp_path):  # the fuzz review's 50 MiB file
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(50 * 2**20)  # sparse: nothing is written, the size is what is refused
    one_line_error(["plan", "--model", str(path)], "larger than 8 MiB")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_devices_fifos_and_folders_are_refused_without_blocking(tmp_path):  # H7
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # nobody writes: a blocking open would hang here
    one_line_error(["plan", "--model", str(fifo)], "is not a regular file")
    if os.path.exists("/dev/zero"):
        one_line_error(["plan", "--model", "/dev/zero"], "is not a regular file")
    one_line_error(["plan", "--model", str(tmp_path)], "config.json", "not found")  # a folder without config.json


@pytest.mark.skipif(not os.path.exists("/dev/stdin"), reason="needs /dev/stdin")
def test_dev_stdin_with_an_idle_writer_does_not_block():  # H7: `sleep 30 | kvcalc plan --model /dev/stdin`
    proc = subprocess.Popen([sys.executable, "-m", "kvcalc.cli", "plan", "--model", "/dev/stdin"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=60)  # stdin stays open and silent until the process ends
    finally:
        proc.kill()
    assert proc.returncode == 2 and "is not a regular file" in err and err.count("\n") == 1, err


def test_long_and_nul_paths(tmp_path):  # T13, T14
    one_line_error(["plan", "--model", "a" * 300 + ".json"], "(305 characters)")
    one_line_error(["plan", "--model", str(tmp_path / ("b" * 300)) + "/config.json"], "characters)")
    one_line_error(["plan", "--model", "x\0y.json"])  # the CLI may refuse it first; either way one line
    with pytest.raises(UsageError, match="NUL byte"):
        load_config_file("x\0y.json")
    one_line_error(["plan", "--model", "m" * 10_000], "(10,000 characters)")
    from kvcalc.catalog import load_model

    with pytest.raises(UsageError, match=r"unknown model .*\(10,000 characters\)") as info:
        load_model("m" * 10_000)
    assert len(str(info.value)) < 200


def test_a_local_path_typo_is_not_sent_to_the_hub(tmp_path, monkeypatch):  # fuzz review §4
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    one_line_error(["plan", "--model", "models/llama3"], "no such file or folder", "local folder")


# ---------------------------------------------------------------------------------------------------------------------
# the schema itself


def test_every_supported_model_type_has_a_schema():
    assert set(SCHEMAS) == SUPPORTED


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_config_passes_the_schema_and_gives_the_same_spec(name):
    """Catalog configs skip the schema at run time (start-up); here they are held to it."""
    entry = catalog_entry(name)
    checked = spec_from_config(entry["config"], name=name, source="x")
    trusted = spec_from_config(entry["config"], name=name, source="x", trusted=True)
    assert checked == trusted


def test_builder_failures_the_schema_misses_are_still_one_line():
    """trusted configs skip the schema; a builder's TypeError or OverflowError still becomes a UsageError."""
    cfg = {**catalog_config("llama-3.2-3b"), "hidden_size": float("inf")}
    with pytest.raises(UsageError, match=r"has a field kvcalc cannot use \(OverflowError"):
        spec_from_config(cfg, name="x", trusted=True)
    with pytest.raises(UsageError, match="is missing the field 'hidden_size'"):
        spec_from_config({k: v for k, v in catalog_config("llama-3.2-3b").items() if k != "hidden_size"},
                         name="x", trusted=True)


def test_plan_on_a_catalog_model_never_imports_the_config_schema():
    code = ("import sys\nfrom kvcalc.cli import main\n"
            "try:\n    main(['plan', '--model', 'gemma-3-4b', '--context', '8k', '--json'])\nexcept SystemExit:\n"
            "    pass\nprint('kvcalc.config_schema' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stderr.split()[-2:] == ["False", "False"]


# ---------------------------------------------------------------------------------------------------------------------
# GPU profile YAML (T12, T13, T14, H5, H8, §1d smaller items)


def gpu_profile_text(**overrides) -> str:
    import yaml

    data = yaml.safe_load((resources.files("kvcalc") / "hardware_profiles" / "l4.yaml").read_text())
    data["id"] = "my-l4"
    data.update(overrides)
    return yaml.safe_dump(data)


def plan_gpu(tmp_path: Path, text: str | bytes, *needles: str) -> str:
    path = tmp_path / "g.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return one_line_error(["plan", "--gpu", str(path)], *needles)


def test_a_user_profile_still_loads(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(gpu_profile_text())
    code, out, err = invoke(["plan", "--gpu", str(path)])
    assert code == 0, err


LAUGHS = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("text, needle", [
    (LAUGHS, "uses a YAML anchor or alias (line 1)"),  # H5: billion laughs at the top
    (gpu_profile_text(aliases=None).replace("aliases: null\n", "")
     + "aliases: &x [a, b]\nform_factor: *x\n", "uses a YAML anchor or alias"),  # H5: inside a field
    (gpu_profile_text() + "gfx: !!python/object/apply:os.system ['echo hi']\n", "uses the YAML tag"),
    (gpu_profile_text().replace("name:", "name: !custom", 1), "uses the YAML tag '!custom'"),
    # PyYAML >= 6.0.4 stops at its own depth limit first ("exceeded maximum nesting depth"): one line either way
    ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "nesting depth|deeper than 64 levels"),
    (gpu_profile_text().replace("memory_total_bytes: 23661969408", "memory_total_bytes: " + "9" * 5000),
     "holds an integer of 5,000 characters"),
    ("id:\tx\n\tname: y\n", "is not valid YAML: found a tab character"),
    ("id: [unclosed\n", "is not valid YAML"),
    ("", "must be a YAML mapping"),
    ("42\n", "must be a YAML mapping"),
    ("- 1\n- 2\n", "must be a YAML mapping"),
])
def test_yaml_that_is_not_plain_data(tmp_path, text, needle):
    plan_gpu(tmp_path, text, needle)


@pytest.mark.parametrize("overrides, needle", [
    ({"compute_capability": float("-inf")}, "compute_capability must be a finite number (got -inf)"),  # §1d
    ({"compute_capability": float("nan")}, "compute_capability must be a finite number"),
    ({"memory_total_bytes": 1, "memory_marketing_bytes": 1}, "must be >= 1,073,741,824 (1 GiB) (got 1) (and 1 more)"),
    ({"memory_bandwidth_bytes_per_s": 1}, "memory_bandwidth_bytes_per_s must be >= 1,000,000,000 (1 GB/s)"),
    ({"flops": {"fp16": float("inf")}}, "flops"),
    ({"native_bf16": "true"}, "native_bf16 must be true or false (got 'true')"),
    ({"name": "n" * 5000}, "name is too long (at most 200 characters)"),
    ({"aliases": [f"a{i}" for i in range(100)]}, "aliases has 100 entries; at most 32"),
    ({"sources": {f"k{i}": "v" for i in range(1000)}}, "sources is too long (at most 64 items)"),
    ({"vendor": "intel", "memory_total_bytes": -1, "native_fp8": "yes"}, "vendor must be 'nvidia' or 'amd' (got 'intel') (and 2 more)"),
    ({"extra_field": 1}, "extra_field is not a known field (a typo?)"),
])
def test_profile_fields_out_of_range(tmp_path, overrides, needle):
    plan_gpu(tmp_path, gpu_profile_text(**overrides), needle)


@pytest.mark.parametrize("raw, needle", [
    (b"\xff\xfe\x00\x01binary", "is not UTF-8 text (byte 0 is 0xff)"),  # T12
    (gpu_profile_text().encode("utf-16"), "is not UTF-8 text"),  # T12
])
def test_binary_and_utf16_profiles(tmp_path, raw, needle):
    plan_gpu(tmp_path, raw, needle)


def test_oversized_profile_is_refused_before_it_is_read(tmp_path):  # H8: 20 MB, 2M sources entries
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.truncate(20 * 10**6)
    one_line_error(["plan", "--gpu", str(path)], "larger than 1 MiB")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_profile_devices_fifos_and_folders(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    one_line_error(["plan", "--gpu", str(fifo)], "is not a regular file")
    (tmp_path / "dir.yaml").mkdir()
    one_line_error(["plan", "--gpu", str(tmp_path / "dir.yaml")], "is a folder")
    if os.path.exists("/dev/zero"):
        one_line_error(["plan", "--gpu", "/dev/zero"], "is not a regular file")


def test_long_and_nul_gpu_names():  # T13, T14
    from kvcalc.hardware import get_gpu

    one_line_error(["plan", "--gpu", "a" * 300], "(300 characters)")
    with pytest.raises(UsageError, match="unknown GPU"):
        get_gpu("a" * 300)
    one_line_error(["plan", "--gpu", "a" * 300 + ".yaml"], "(305 characters)")
    one_line_error(["plan", "--gpu", "h100\x00sxm"])  # the CLI may refuse it first; either way one line
    one_line_error(["plan", "--gpu", "x\0y.yaml"])
    with pytest.raises(UsageError, match="unknown GPU"):
        get_gpu("h100\x00sxm")
    with pytest.raises(UsageError, match="NUL byte"):
        get_gpu("x\0y.yaml")
    one_line_error(["plan", "--gpu", "zz\nqq"])
    with pytest.raises(UsageError, match=r"unknown GPU 'zz\\nqq'"):  # echoed as a repr: still one line
        get_gpu("zz\nqq")


def test_shown_keeps_echoes_short_and_on_one_line():
    from kvcalc.errors import shown

    assert shown("h100") == "'h100'"
    assert shown("a\nb") == "'a\\nb'"
    long = shown("x" * 10_000 + ".json")
    assert long.endswith(".json' (10,005 characters)") and len(long) < 100
