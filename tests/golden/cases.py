"""The golden invocations: a fixed, seeded sample of plan/explain command lines, then workload (vllm bench options),
fit and search command lines.

`python tests/golden/cases.py --write` records what the CLI prints for each into outputs.json.gz; the test
(tests/test_golden.py) re-runs them and requires identical output. A refactor must leave them unchanged; a behaviour
change re-records them in its own commit and says which cases moved and why.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUTS = HERE / "outputs.json.gz"

MODELS = ["llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-30b-a3b", "gemma-3-1b", "gemma-3-27b",
          "gemma-2-9b", "mixtral-8x7b", "deepseek-v2-lite", "deepseek-v3", "jamba-1.5-mini", "phi-3-mini",
          "mistral-7b-v0.1", "qwen2.5-7b", "smollm2-135m"]
GPUS = ["t4", "l4", "a10", "a100-80gb", "h100-sxm", "h200", "rtx-4090", "v100-16gb", "mi300x", "l40s"]
CONTEXTS = ["2k", "8k", "32k", "128k"]
WEIGHTS = [None, "bf16", "fp8", "int8", "nf4", "awq", "gptq", "hqq4"]
KVS = [None, "auto", "fp8", "hqq-4", "quanto-2", "hqq-8"]


def cases(n: int = 300, seed: int = 20261130) -> list[list[str]]:
    rng = random.Random(seed)
    out: list[list[str]] = []
    for i in range(n):
        cmd = "explain" if i % 4 == 3 else "plan"
        args = [cmd, "--model", rng.choice(MODELS), "--gpu", rng.choice(GPUS), "--context", rng.choice(CONTEXTS)]
        if rng.random() < 0.3:
            args += ["--batch", str(rng.choice([2, 8, 32]))]
        if rng.random() < 0.3:
            args += ["--engine", rng.choice(["hf", "vllm"])]
        w, kv = rng.choice(WEIGHTS), rng.choice(KVS)
        if w and (cmd == "explain" or rng.random() < 0.3):
            args += ["--weights", w]
        if kv and (cmd == "explain" or rng.random() < 0.3):
            args += ["--kv", kv]
        if rng.random() < 0.15:
            args += ["--util", str(rng.choice([0.5, 0.8, 0.95, 1.0]))]
        if rng.random() < 0.15:
            args += ["--tp", str(rng.choice([2, 4, 8]))]
        if rng.random() < 0.08:
            args += ["--pp", "2"]
        if rng.random() < 0.1:
            args += ["--max-num-seqs", "64", "--max-num-batched-tokens", "4096"]
        if rng.random() < 0.1:
            args += ["--enforce-eager"]
        if rng.random() < 0.1:
            args += ["--vllm-version", rng.choice(["0.9.1", "0.20.0", "0.24.0"])]
        if cmd == "plan" and rng.random() < 0.35:
            args += ["--json"]
        out.append(args)
    return out + workload_cases() + fit_cases() + search_cases() + range_cases()


def range_cases() -> list[list[str]]:
    """A cold torch.compile start on vLLM 0.27-0.30 (its capacity as a range: engines/vllm.py pinned_range), beside
    the same question on 0.31 (none) and with a warm compile cache (none)."""
    base = ["--model", "qwen2.5-3b", "--gpu", "rtx-4090", "--context", "8k"]
    return [["plan", *base, "--vllm-version", "0.29.0"], ["plan", *base, "--vllm-version", "0.28.0", "--json"],
            ["explain", *base, "--vllm-version", "0.30.0", "--weights", "awq", "--kv", "auto"],
            ["plan", *base, "--vllm-version", "0.31.0"], ["plan", *base, "--vllm-version", "0.29.0",
                                                          "--compile-cache", "warm"]]


def workload_cases(n: int = 30, seed: int = 20261201) -> list[list[str]]:
    """plan/explain with a `vllm bench` workload: --input-len, --output-len, --concurrency or --request-rate."""
    rng = random.Random(seed)
    out: list[list[str]] = []
    for i in range(n):
        cmd = "explain" if i % 5 == 4 else "plan"
        args = [cmd, "--model", rng.choice(MODELS[:10]), "--gpu", rng.choice(GPUS),
                "--input-len", rng.choice(["128", "1k", "2k", "8k"])]
        if rng.random() < 0.7:
            args += ["--output-len", rng.choice(["16", "128", "512"])]
        if rng.random() < 0.3:
            args += ["--request-rate", rng.choice(["0.5", "4", "20"])]
        elif rng.random() < 0.8:
            args += ["--concurrency", str(rng.choice([1, 8, 32, 128]))]
        if rng.random() < 0.3:
            args += ["--engine", "vllm"]
        if rng.random() < 0.3:
            args += ["--weights", rng.choice(["fp8", "awq"])]
        if rng.random() < 0.3:
            args += ["--kv", "fp8"]
        if rng.random() < 0.15:
            args += ["--tp", "2"]
        if cmd == "plan" and rng.random() < 0.4:
            args += ["--json"]
        out.append(args)
    return out


FIT_QUESTIONS = ["max-context", "max-concurrency", "min-util", "min-gpus", "auto"]


def fit_cases(n: int = 20, seed: int = 20261202) -> list[list[str]]:
    """`kvcalc fit` for every question, text and --json."""
    rng = random.Random(seed)
    out: list[list[str]] = []
    for i in range(n):
        args = ["fit", FIT_QUESTIONS[i % len(FIT_QUESTIONS)], "--model", rng.choice(MODELS[:10]),
                "--gpu", rng.choice(GPUS), "--context", rng.choice(CONTEXTS[:3])]
        if rng.random() < 0.5:
            args += ["--batch", str(rng.choice([2, 16, 64]))]
        if rng.random() < 0.3:
            args += ["--weights", rng.choice(["fp8", "awq"])]
        if rng.random() < 0.3:
            args += ["--kv", "fp8"]
        if rng.random() < 0.2:
            args += ["--vllm-version", rng.choice(["0.9.1", "0.20.0"])]
        if rng.random() < 0.5:
            args += ["--json"]
        out.append(args)
    return out


def search_cases() -> list[list[str]]:
    """`kvcalc search` on small spaces (two GPUs, TP 1-2), with and without targets."""
    base = ["search", "--input-len", "2k", "--output-len", "256", "--gpus", "l4,h100-sxm", "--tp", "1,2"]
    return [
        base + ["--model", "llama-3.1-8b", "--concurrency", "32"],
        base + ["--model", "llama-3.1-8b", "--concurrency", "32", "--max-tpot-ms", "30", "--json"],
        base + ["--model", "qwen3-8b", "--request-rate", "4", "--max-ttft-ms", "500", "--top", "5"],
        base + ["--model", "gemma-3-27b", "--concurrency", "8", "--weights", "fp8,awq", "--kv", "auto,fp8",
                "--json"],
        base + ["--model", "qwen3-30b-a3b", "--concurrency", "64", "--min-context", "16k",
                "--max-quality-risk", "low", "--utils", "0.85,0.9"],
        base + ["--model", "llama-3.2-3b", "--concurrency", "16", "--vllm-version", "0.20.0",
                "--max-num-seqs", "8,16,32", "--json"],
    ]


def run_all() -> dict[str, dict]:
    os.environ["COLUMNS"] = "200"
    sys.path.insert(0, str(HERE.parent))
    from cli_helper import invoke

    results = {}
    for args in cases():
        code, out, err = invoke(args)
        results[" ".join(args)] = {"code": code, "stdout": out, "stderr": err}
    return results


def load() -> dict[str, dict]:
    with gzip.open(OUTPUTS, "rt", encoding="utf-8") as fh:
        return json.load(fh)


if __name__ == "__main__":
    if "--write" in sys.argv:
        data = run_all()
        with gzip.GzipFile(OUTPUTS, "wb", mtime=0) as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=True).encode())
        print(f"wrote {len(data)} cases to {OUTPUTS}")
    elif "--diff" in sys.argv:
        old, new = load(), run_all()
        moved = [k for k in old if old[k] != new.get(k)]
        for k in moved:
            print("changed:", k)
        print(f"{len(moved)} of {len(old)} cases changed")
