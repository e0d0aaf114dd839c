"""Every reproduction of the third fuzz audit (fuzz-2026-12, F1-F11; docs/reviews/replies.md answers each), run as
the audit wrote it on inputs rebuilt here by its generators (tests/fuzz_hostile.py), and on the audit's own input
files when ../shared/reviews/fuzz-3-inputs/ is there. The web's (F1, F10, F11) are tests/test_web_security.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import fuzz_hostile as H
from cli_helper import invoke

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "reviews" / "fuzz-3-inputs"


def _folder(tmp: Path, files: dict[str, bytes]) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    return str(tmp)


def _one_error(args) -> str:
    code, out, err = invoke(args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-500:])
    return lines[0]


def _inputs(tmp: Path) -> dict[str, str]:
    """The audit's six inputs: rebuilt, or the audit's own files when they are reachable."""
    if SHARED.is_dir():
        return {p.name: str(p) for p in SHARED.iterdir()}
    cfg = H.catalog_config("llama-3.1-8b")
    awq = {**cfg, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                          "version": "gemm", "modules_to_not_convert": ["lm_head"] * 100_000}}
    lfm2 = {**H.catalog_config("lfm2-1.2b"), "num_attention_heads": 1000, "hidden_size": 1}
    bench = json.loads((ROOT / "tests" / "fixtures" / "vllm_bench" / sorted(
        p.name for p in (ROOT / "tests" / "fixtures" / "vllm_bench").glob("*.json"))[0]).read_text())
    (tmp / "awq-100k-skip-modules.json").write_text(json.dumps(awq))
    (tmp / "lfm2-heads1000-hidden1.json").write_text(json.dumps(lfm2))
    (tmp / "bench-max-concurrency-string.json").write_text(json.dumps({**bench, "max_concurrency": "8"}))
    return {"ckpt-overlap": _folder(tmp / "ckpt-overlap", H.overlapping_checkpoint()),
            "ckpt-tiny-llama-3.1-8b": _folder(tmp / "ckpt-tiny-llama-3.1-8b", H.tiny_checkpoint()),
            "ckpt-hfquant-list": _folder(tmp / "ckpt-hfquant-list", {
                "config.json": json.dumps(H.catalog_config("llama-3.2-1b")).encode(), "hf_quant_config.json": b"[]"}),
            **{name: str(tmp / name) for name in ("awq-100k-skip-modules.json", "lfm2-heads1000-hidden1.json",
                                                  "bench-max-concurrency-string.json")}}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return _inputs(tmp_path_factory.mktemp("fuzz3"))


def test_f2_partial_checkpoint_is_one_line(inputs):
    line = _one_error(["plan", "--json", "--engine", "vllm", "--context", "4k", "--model",
                       inputs["ckpt-tiny-llama-3.1-8b"], "--gpu", "a100-80gb"])
    assert "is partial" in line and "2,048 bytes" in line


def test_f2_missing_layers_name_the_first_missing_one(tmp_path):
    cfg = H.small_llama(layers=4)
    folder = _folder(tmp_path / "ck", {"config.json": json.dumps(cfg).encode(),
                                       "model.safetensors": H.safetensors(H.llama_tensors(cfg, range(2)))})
    line = _one_error(["plan", "--model", folder, "--gpu", "l4"])
    assert "2 of the 4 layers" in line and "layer 2 is missing" in line
    whole = _folder(tmp_path / "whole", {"config.json": json.dumps(cfg).encode(),
                                         "model.safetensors": H.safetensors(H.llama_tensors(cfg))})
    assert invoke(["plan", "--model", whole, "--gpu", "l4"])[0] == 0


def test_f3_overlapping_ranges_are_refused_naming_the_tensors(inputs):
    line = _one_error(["plan", "--json", "--engine", "vllm", "--model", inputs["ckpt-overlap"], "--gpu", "l4"])
    assert "overlaps tensor" in line and "model.layers.0.mlp.w" in line


def test_f3_duplicate_names_and_ranges_past_the_file(tmp_path):
    text = '{"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}, ' \
           '"a": {"dtype": "BF16", "shape": [8], "data_offsets": [8, 24]}}'
    path = tmp_path / "d.safetensors"
    path.write_bytes(H.safetensors([], 24, raw_header=text))
    from kvcalc.errors import UsageError
    from kvcalc.safetensors_header import read_header

    with pytest.raises(UsageError, match="names 'a' twice"):
        read_header(str(path))
    past = tmp_path / "p.safetensors"
    past.write_bytes(H.safetensors([("b", "BF16", [8], [0, 16])], 8))
    with pytest.raises(UsageError, match="tensor 'b' ends at byte 16"):
        read_header(str(past))
    lying = tmp_path / "l.safetensors"
    lying.write_bytes(H.safetensors([("c", "F32", [8], [0, 16])], 16))
    with pytest.raises(UsageError, match=r"tensor 'c': data_offsets 0..16 do not hold F32 x \[8\]"):
        read_header(str(lying))
    empty = tmp_path / "e.safetensors"  # empty tensors hold no byte: they overlap nothing
    empty.write_bytes(H.safetensors([("x", "BF16", [4], None), ("z", "BF16", [0], [0, 0])]))
    assert [t.name for t in read_header(str(empty))] == ["x", "z"]


def test_f4_list_valued_hf_quant_config(inputs):
    assert "hf_quant_config.json is not a JSON object" in _one_error(
        ["plan", "--model", inputs["ckpt-hfquant-list"], "--gpu", "l4"])


@pytest.mark.parametrize("value", ['{"image": Infinity}', '{"image": NaN}', '{"image": 1e309}', '{"image": 1.5}',
                                   '{"image": true}', '{"image": {"count": -Infinity}}', "image=inf"])
def test_f5_non_finite_limit_mm_per_prompt(value):
    for command in (["plan"], ["explain"], ["fit", "max-context"]):
        assert "--limit-mm-per-prompt" in _one_error([*command, "--model", "llama-3.1-8b", "--limit-mm-per-prompt",
                                                      value])


def test_f6_float32_decode_follows_the_doubled_weight_bytes():
    def row(*extra):
        code, out, err = invoke(["plan", "--json", "--engine", "vllm", "--model", "mistral-7b-v0.3", "--gpu",
                                 "h100-sxm", *extra])
        assert code == 0, err
        return json.loads(out)["rows"][0]

    fp32, bf16 = row("--dtype", "float32"), row()
    assert fp32["weights_bytes"] > 1.9 * bf16["weights_bytes"]
    # batch 1 reads every weight once per token: no faster than the datasheet bandwidth allows
    roofline = 3.35e12 / fp32["weights_bytes"]
    assert fp32["decode_tokens_per_s"] <= roofline * 1.02 < bf16["decode_tokens_per_s"]


def test_f7_zero_head_width(inputs):
    line = _one_error(["plan", "--model", inputs["lfm2-heads1000-hidden1.json"], "--gpu", "rtx-4090", "--input-len",
                       "1k", "--output-len", "128"])
    assert "hidden_size (1) is smaller than num_attention_heads (1000)" in line


def test_f8_100k_modules_to_not_convert_is_fast(inputs):
    invoke(["explain", "--model", "llama-3.1-8b", "--gpu", "l40s"])  # imports warmed
    start = time.process_time()
    code, _, err = invoke(["explain", "--model", inputs["awq-100k-skip-modules.json"], "--gpu", "l40s"])
    assert code == 0, err
    assert time.process_time() - start < 3.0  # 10-17 s before: a regex alternation of 100,000 entries per module


def test_f8_ignore_lists_match_as_each_method_matches():
    from kvcalc.quant_config import _ignore_matcher

    sub = _ignore_matcher(("lm_head",) * 1000 + ("mlp.down",), "substring")
    assert sub("model.layers.3.mlp.down_proj") and sub("lm_head") and not sub("model.layers.3.mlp.up_proj")
    comp = _ignore_matcher(("down_proj", "layers.3"), "component")
    assert comp("model.layers.9.mlp.down_proj") and comp("model.layers.3.mlp.up_proj")
    assert not comp("model.layers.31.mlp.up_proj") and not comp("model.layers.9.mlp.down_proj_x")
    exact = _ignore_matcher(("model.layers.0", "re:.*gate.*", "model.layers.*.mlp.up_proj"), "exact")
    assert exact("model.layers.0.mlp.up_proj") and not exact("model.layers.01.mlp.x")
    assert exact("model.layers.5.mlp.gate_proj") and exact("model.layers.7.mlp.up_proj")
    assert not exact("model.layers.7.mlp.down_proj")


def test_f9_bench_string_max_concurrency(inputs):
    code, out, err = invoke(["validate", "--bench", inputs["bench-max-concurrency-string.json"], "--model", "qwen2-7b",
                             "--gpu", "h200"])
    assert code in (0, 1) and "Traceback" not in err and "verdict" in out, err[-300:]
    bad = Path(inputs["bench-max-concurrency-string.json"]).parent / "bad-bench.json"
    doc = json.loads(Path(inputs["bench-max-concurrency-string.json"]).read_text())
    for value in ("eight", 1.5, 0, True, [8]):
        bad.write_text(json.dumps({**doc, "max_concurrency": value}))
        assert "max_concurrency" in _one_error(["validate", "--bench", str(bad), "--model", "qwen2-7b", "--gpu",
                                                "h200"])
