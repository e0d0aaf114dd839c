"""`--model` with a checkpoint: bad inputs are one line and exit code 2; good ones plan what the checkpoint loads."""

import json
import struct

from cli_helper import invoke
from test_checkpoint import QWEN_05B, write_safetensors


def _one_line_exit_2(args, *words):
    code, out, err = invoke(args)
    assert code == 2, (code, out, err)
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_folder_without_config_json(tmp_path):
    (tmp_path / "weights").mkdir()
    _one_line_exit_2(["plan", "--model", str(tmp_path / "weights")], "no config.json")


def test_unknown_quant_method(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**QWEN_05B, "quantization_config": {"quant_method": "squeezellm"}}))
    _one_line_exit_2(["plan", "--model", str(folder)], "unknown quantization method 'squeezellm'")
    _one_line_exit_2(["explain", "--model", str(folder / "config.json")], "squeezellm")


def test_bad_safetensors_header(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN_05B))
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2**50) + b"{}")
    _one_line_exit_2(["plan", "--model", str(folder)], "model.safetensors", "100 MiB")


def test_unreachable_hub_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _one_line_exit_2(["plan", "--model", "acme/no-such-model"], "acme/no-such-model")


def test_truncated_shard_is_refused(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN_05B))
    f = folder / "model.safetensors"
    write_safetensors(f, {"model.embed_tokens.weight": ("BF16", (151936, 896))})
    with open(f, "r+b") as fh:
        fh.truncate(1000)
    _one_line_exit_2(["plan", "--model", str(folder)], "truncated")


def test_modelopt_fp8_kv_checkpoint_runs_its_kv_in_fp8_on_vllm():
    """nvidia/Llama-3.1-70B-Instruct-FP8's hf_quant_config.json says kv_cache_quant_algo FP8: vLLM resolves
    --kv-cache-dtype auto to fp8 for it (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string), so the baseline's
    KV bytes per token are 80 layers x 8 KV heads x (128 + 128) x 1 byte."""
    code, out, err = invoke(["plan", "--model", "llama-3.1-70b-fp8", "--gpu", "h200", "--context", "8k",
                             "--engine", "vllm", "--json"])
    assert code == 0, err
    rows = {r["config"]: r for r in json.loads(out)["rows"]}
    assert rows["baseline"]["kv_format"] == "fp8"
    assert rows["baseline"]["kv_bytes_per_token"] == 80 * 8 * 256 * 1
    assert rows["bf16"]["kv_format"] == "auto" and rows["bf16"]["kv_bytes_per_token"] == 80 * 8 * 256 * 2


def test_hub_id_with_the_hub_unreachable_is_one_line_without_waiting(tmp_path, monkeypatch):
    """No HF_HUB_OFFLINE, but nothing answers at the endpoint (port 9 on this machine): the hub gets a bounded time
    (KVCALC_HUB_TIMEOUT), huggingface_hub's retry warnings stay off stderr, and the answer is the one-line error."""
    constants = __import__("pytest").importorskip("huggingface_hub.constants")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("KVCALC_HUB_TIMEOUT", "2")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    line = _one_line_exit_2(["plan", "--model", "acme/no-such-model"], "acme/no-such-model")
    assert "local checkpoint folder" in line
