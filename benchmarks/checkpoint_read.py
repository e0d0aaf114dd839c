"""Time `kvcalc plan --model FOLDER` on a checkpoint folder the size of DeepSeek-V3's: 163 shards whose headers list
the real tensor count (~92,000: 61 layers x 256 experts x 3 projections x weight + scale, plus attention), written
here as sparse files (only the headers take disk). Reports the header read and the whole plan, from a fresh process.

    python benchmarks/checkpoint_read.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_folder(folder: Path) -> int:
    entry = json.loads((ROOT / "kvcalc" / "catalog" / "deepseek-v3.json").read_text())
    (folder / "config.json").write_text(json.dumps(entry["config"]))
    names = []
    for i in range(61):
        p = f"model.layers.{i}."
        for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            names += [(p + f"self_attn.{proj}.weight", "F8_E4M3", [1024, 1024]),
                      (p + f"self_attn.{proj}.weight_scale_inv", "F32", [8, 8])]
        for e in range(256 if i >= 3 else 0):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                names += [(p + f"mlp.experts.{e}.{proj}.weight", "F8_E4M3", [2048, 7168]),
                          (p + f"mlp.experts.{e}.{proj}.weight_scale_inv", "F32", [16, 56])]
    size = {"F8_E4M3": 1, "F32": 4}
    shards = 163
    per = -(-len(names) // shards)
    for s in range(shards):
        header, offset = {}, 0
        for name, dtype, shape in names[s * per:(s + 1) * per]:
            n = size[dtype] * shape[0] * shape[1]
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        raw = json.dumps(header).encode()
        with open(folder / f"model-{s + 1:05d}-of-{shards:05d}.safetensors", "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            fh.truncate(8 + len(raw) + offset)
    return len(names)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "deepseek-v3-like"
        folder.mkdir()
        n = write_folder(folder)
        sys.path.insert(0, str(ROOT))
        from kvcalc.checkpoint import load_checkpoint

        t0 = time.perf_counter()
        _, _, ck = load_checkpoint(str(folder))
        read_s = time.perf_counter() - t0
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "kvcalc.cli", "plan", "--gpu", "h200", "--model", str(folder),
                            "--engine", "vllm", "--tp", "8", "--json"], env=env, check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        print(f"{n:,} tensors in {ck.header_files} shards: headers read in {read_s:.3f} s (in process); "
              f"`kvcalc plan` median {statistics.median(times):.3f} s, min {min(times):.3f} s over {args.runs} runs")


if __name__ == "__main__":
    main()
