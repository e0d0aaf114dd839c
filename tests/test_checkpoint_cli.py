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
