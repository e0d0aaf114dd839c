"""Every one-line reproduction of ../shared/reviews/fuzz-2026-11.md (T1-T21, H1-H9, §1c, §1d, §3), run as the review
wrote it: each must end with a real answer (exit 0), a verdict (validate --strict: exit 1) or exactly one `error:`
line (exit 2), never a traceback. The specific behaviour of each is tested where it was fixed (test_cli_edges,
test_inputs, test_vllm_log_edges, test_engine_fixes, test_validate_verdicts, test_hub_offline,
test_fuzz_regressions); this file is the review's index, so a reproduction cannot silently regress.
H4 (a 50 MiB log) is left to benchmarks/log_parse.py; H9 is tests/test_hub_offline.py (a socket that never answers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helper import invoke

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "vllm_logs" / "real_v0.26.0_v-3b-auto-eager-u90.log"
OTHER = ROOT / "tests" / "fixtures" / "vllm_logs" / "synthetic_v0.10.2_v1_debug_profile.log"


def _config(tmp, model, change):
    cfg = json.loads((ROOT / "kvcalc" / "catalog" / f"{model}.json").read_text())["config"]
    change(cfg)
    path = tmp / "c.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _log(tmp, old, new):
    text = LOG.read_text()
    assert old in text, old
    path = tmp / "l.log"
    path.write_text(text.replace(old, new))
    return str(path)


def _write(tmp, name, data):
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def V(path):
    return ["validate", "--from-log", path, "--model", "llama-3.2-3b", "--gpu", "h200"]


LAUGHS = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else 'x, x, x, x, x, x, x, x, x'}]\n"
                 for p, c in zip([None, "a", "b", "c", "d", "e", "f", "g"], "abcdefgh")) + "id: x\naliases: [*h, *h]\n"

CASES = {
    "T1": lambda t: ["plan", "--context", "9" * 400],
    "T2": lambda t: ["plan", "--batch", "1" + "0" * 400],
    "T3": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.update(num_hidden_layers=0))],
    "T4": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.update(hidden_size=float("inf")))],
    "T5": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.update(head_dim=0))],
    "T6": lambda t: ["plan", "--model", _write(t, "bin.json", b"\x89PNG")],
    "T7": lambda t: ["plan", "--model", _write(t, "deep.json", "[" * 200000 + "]" * 200000)],
    "T7-digits": lambda t: ["plan", "--model", _write(t, "big.json", '{"a": ' + "9" * 5000 + "}")],
    "T8": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b",
                                                lambda c: (c.update(text_config="abc"), c.pop("num_hidden_layers")))],
    "T9": lambda t: ["plan", "--model", _config(t, "gemma-3-4b", lambda c: c.update(vision_config="siglip"))],
    "T9-patch": lambda t: ["plan", "--model", _config(t, "gemma-3-4b",
                                                      lambda c: c["vision_config"].update(patch_size=0))],
    "T10": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.update(num_hidden_layers=10**30))],
    "T11": lambda t: ["plan", "--model", _config(t, "mixtral-8x7b", lambda c: c.update(num_local_experts=0))],
    "T12": lambda t: ["plan", "--gpu", _write(t, "bin.yaml", b"\xff\xfe")],
    "T13": lambda t: ["plan", "--gpu", "a" * 300],
    "T13-model": lambda t: ["plan", "--model", "a" * 300 + ".json"],
    "T14": lambda t: ["plan", "--model", "a\x00b.json"],
    "T15": lambda t: ["validate", "--report", "/bin/ls"],
    "T16": lambda t: V(_log(t, "1,109,408 tokens", ", tokens")),
    "T17": lambda t: V(_log(t, "135.43x", "135..43x")),
    "T18": lambda t: V(_log(t, "118.5 GiB", "9" * 400 + " GiB")),
    "T19": lambda t: V(_log(t, "'max_model_len': 8192", "'max_model_len': 'eight'")),
    "T20": lambda t: V(_log(t, "tensor_parallel_size=1", "tensor_parallel_size=auto")),
    "T21/H5": lambda t: ["plan", "--gpu", _write(t, "laughs.yaml", LAUGHS)],
    "H1": lambda t: ["plan", "--pp", "1000000000"],
    "H2": lambda t: V(_write(t, "r.log", "(EngineCore" + "_a" * 28 + " x\n" + LOG.read_text())),
    "H3": lambda t: V(_write(t, "a.log", "A" * 80000)),
    "H6": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.update(num_hidden_layers=200000))],
    "H7": lambda t: ["plan", "--model", "/dev/zero"],
    "H7-stdin": lambda t: ["plan", "--model", "/dev/stdin"],
    "H8": lambda t: ["plan", "--gpu", _write(t, "huge.yaml", "id: x\nsources:\n" + "  k: v\n" * 200000)],
    "1c-32q": lambda t: ["plan", "--context", "32q"],
    "1c-util": lambda t: ["plan", "--util", "1.7"],
    "1c-abc": lambda t: ["plan", "--vllm-version", "abc"],
    "1c-minus1": lambda t: ["plan", "--vllm-version=-1", "--json"],
    "1c-list-field": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b",
                                                           lambda c: c.update(num_attention_heads=[8]))],
    "1d-context": lambda t: ["plan", "--context", "32k", "--max-model-len", "1k", "--engine", "vllm"],
    "1d-deepseek": lambda t: ["plan", "--model", _config(t, "deepseek-v3", lambda c: c.update(qk_nope_head_dim=-4096)),
                              "--gpu", "a100-80gb", "--engine", "hf", "--context", "1m"],
    "1d-kv-heads": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.update(num_key_value_heads=-8))],
    "1d-mml": lambda t: ["plan", "--max-model-len", "1e30"],
    "1d-window": lambda t: ["plan", "--model", _config(t, "mistral-7b-v0.1", lambda c: c.update(sliding_window=-4096))],
    "1d-old-version": lambda t: ["plan", "--gpu", "l40s", "--context", "2", "--vllm-version", "0.9.1", "--json"],
    "1d-pp64": lambda t: ["plan", "--pp", "64"],
    "1d-explain-pp64": lambda t: ["explain", "--pp", "64"],
    "1d-explain-tp-hf": lambda t: ["explain", "--tp", "2", "--engine", "hf"],
    "1d-explain-int8": lambda t: ["explain", "--engine", "vllm", "--weights", "int8"],
    "1d-tp3": lambda t: ["plan", "--model", "llama-3.1-8b", "--gpu", "l4", "--tp", "3"],
    "1d-notes": lambda t: ["explain", "--gpu", "t4", "--model", "llama-3.1-8b", "--tp", "16"],
    "1d-util1": lambda t: ["plan", "--util", "1.0", "--engine", "vllm", "--gpu", "l4", "--model", "llama-3.1-8b"],
    "1d-no-max-pos": lambda t: ["plan", "--model", _config(t, "llama-3.2-3b", lambda c: c.pop("max_position_embeddings")),
                                "--gpu", "h200", "--engine", "hf"],
    "1d-pp28": lambda t: ["plan", "--pp", "28", "--engine", "vllm", "--json"],
    "1d-context1": lambda t: ["plan", "--context", "1", "--engine", "vllm", "--json"],
    "1d-plot-folder": lambda t: ["plan", "--plot", str(t)],
    "2-fp8-mla": lambda t: ["plan", "--model", "deepseek-v2-lite", "--gpu", "h100-sxm", "--context", "16",
                            "--engine", "vllm"],
    "2-integer-bytes": lambda t: ["plan", "--model", "gemma-3-1b", "--gpu", "t4", "--context", "1000", "--engine", "hf",
                                  "--json"],
    "3-x10": lambda t: V(_log(t, "118.5 GiB", "1185.0 GiB")) + ["--strict"],
    "3-other-model": lambda t: ["validate", "--from-log", str(OTHER), "--model", "llama-3.1-8b", "--gpu", "h200",
                                "--strict"],
    "3-merged": lambda t: V(_write(t, "m.log", LOG.read_text() + OTHER.read_text())) + ["--strict"],
    "3-version": lambda t: V(_log(t, "0.26.0", "x.y.z")),
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_every_reproduction_answers_cleanly(key, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = CASES[key](tmp_path)
    code, out, err = invoke(argv)
    lines = err.splitlines()
    assert "Traceback" not in err and "Usage:" not in err
    if code == 2:
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1 and len(lines) == 1 + sum(line.startswith("warning: ") for line in lines), err
        assert len(errors[0]) <= 420
    elif code == 1:
        assert "--strict" in argv and lines[-1].startswith("error: --strict"), err
    else:
        assert code == 0 and out.strip(), (code, err)
        if "--json" in argv:
            json.loads(out)  # whole JSON, no NaN
            assert "NaN" not in out and "Infinity" not in out
