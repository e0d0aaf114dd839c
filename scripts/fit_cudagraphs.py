"""Fit the per-graph bytes of kvcalc/engines/vllm_graphs.py graph_pool on the project's own H200 captures of vLLM
0.26.0, read the HIP piece graph's bytes off one MI300X start outside the 0.27+ log table, and print every capture's
leave-one-out error.

    python3 scripts/fit_cudagraphs.py           # the fit and its errors; --write updates kvcalc/data/constants.yaml

What the structure is (capture sizes from max_num_seqs and max_num_batched_tokens, num_layers + 1 PIECEWISE graphs a
size, one FULL decode graph per size within max_num_seqs, the FULL graphs' own pool before 0.29) is read from vLLM's
source (vllm_graphs.py). Two numbers are not in any source and are fitted here on the H200 (CUDA 0.26.0 V2 runner,
'Graph capturing finished in X secs, took Y GiB'): the bytes of one PIECEWISE graph, and the bytes per hidden unit
per captured token that a FULL graph keeps in its own pool on 0.26-0.28. The capture stream's BLAS workspace is not
fitted (engines/vllm_profile.py blas_workspace). The public 0.27+ start-up logs are never fitted on.

ROCm has no H200 data: the HIP piece graph's bytes come from ROCM_START, the Gemma 4 E2B start on one MI300X of
xbill9/gemma4-dev (vLLM 0.31.1rc1, the same host and release as the table's two MI300X starts, which stay held out).
"""

from __future__ import annotations

import re
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "validation" / "data"
sys.path.insert(0, str(ROOT))

from kvcalc.catalog import load_model  # noqa: E402
from kvcalc.engines.vllm_graphs import graph_pool  # noqa: E402
from kvcalc.engines.vllm_profile import blas_workspace  # noqa: E402
from kvcalc.hardware.registry import get_gpu  # noqa: E402

MiB = 1 << 20
GIB = 1 << 30
# (tarball under docs/validation/data, member, catalog model, max_num_seqs, max_num_batched_tokens): every single-GPU
# H200 start of vLLM 0.26.0 with CUDA graphs, each with its own settings. The v-* and serve starts leave max_num_seqs
# to vLLM's H200 default (1024; the LLM class batches 16384 tokens, vllm serve 8192, both logged); the s-, t-, u- and
# c4- starts log theirs. Replicates of one configuration (s- and s4- ...-big) are separate starts and kept.
CAPTURES = [
    ("logs-single.tar.gz", "kvcalc-results/vllm-logs/v-3b-auto-graphs-u90.log", "llama-3.2-3b", 1024, 16384),
    ("logs-single.tar.gz", "kvcalc-results/vllm-logs/v-8b-auto-graphs-u90.log", "llama-3.1-8b", 1024, 16384),
    ("logs-holdout.tar.gz", "kvcalc-holdout/vllm-logs/v-3b-fp8-graphs-u90.log", "llama-3.2-3b", 1024, 16384),
    ("logs-holdout.tar.gz", "kvcalc-holdout/vllm-logs/v-8b-fp8-graphs-u90.log", "llama-3.1-8b", 1024, 16384),
    ("logs-holdout.tar.gz", "kvcalc-holdout/vllm-logs/v-gemma3-1b-auto-graphs-32k.log", "gemma-3-1b", 1024, 16384),
    ("quick/logs.tar.gz", "vllm-logs/vllm-llama-3.2-3b-auto-graphs-u90.log", "llama-3.2-3b", 1024, 16384),
    ("v2/logs-c1-c3.tar.gz", "logs/s-3b-auto.log", "llama-3.2-3b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-3b-fp8.log", "llama-3.2-3b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-8b-auto.log", "llama-3.1-8b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-8b-awq.log", "llama-3.1-8b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-8b-fp8.log", "llama-3.1-8b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-8b-fp8w.log", "llama-3.1-8b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-mixtral-8x7b.log", "mixtral-8x7b", 256, 2048),
    ("v2/logs-c1-c3.tar.gz", "logs/s-qwen3-30b-a3b.log", "qwen3-30b-a3b", 256, 2048),
    ("v2/logs-c4-c5.tar.gz", "logs/c4-3b-graphs-seqs1024.log", "llama-3.2-3b", 1024, 2048),
    ("v2/logs-c4-c5.tar.gz", "logs/c4-3b-graphs-seqs16.log", "llama-3.2-3b", 16, 2048),
    ("v2/logs-c4-c5.tar.gz", "logs/s4-3b-auto-big.log", "llama-3.2-3b", 256, 2048),
    ("v2/logs-c4-c5.tar.gz", "logs/s4-3b-fp8-big.log", "llama-3.2-3b", 256, 2048),
    ("v2/logs-c4-c5.tar.gz", "logs/s4-8b-auto-big.log", "llama-3.1-8b", 256, 2048),
    ("v2/logs-c4-c5.tar.gz", "logs/s4-8b-fp8-big.log", "llama-3.1-8b", 256, 2048),
    ("v3/logs-v3a.tar.gz", "logs/t-3b-graphs-2k.log", "llama-3.2-3b", 256, 2048),
    ("v3/logs-v3b.tar.gz", "logs/t-qwen3-30b-a3b-graphs-2k.log", "qwen3-30b-a3b", 256, 2048),
    ("v3/logs-v3d.tar.gz", "logs/u-8b-graphs-2k.log", "llama-3.1-8b", 256, 2048),
    ("v4/serve/raw.tar.gz", "raw/llama-3.1-8b.a.server.log", "llama-3.1-8b", 1024, 8192),
    ("v4/serve/raw.tar.gz", "raw/llama-3.1-8b-awq.c.server.log", "llama-3.1-8b", 1024, 8192),
    ("v4/serve/raw.tar.gz", "raw/llama-3.2-3b-fp8kv.a.server.log", "llama-3.2-3b", 1024, 8192),
    ("v4/serve/raw.tar.gz", "raw/qwen3-30b-a3b.d.server.log", "qwen3-30b-a3b", 1024, 8192),
]
TOOK = re.compile(r"Graph capturing finished in \d+ secs?, took ([0-9.]+) GiB")
SEQS = re.compile(r"max_num_seqs\W{1,4}(\d+)")
MNBT = re.compile(r"max_num_batched_tokens\W{1,4}(\d+)")
SIZES = re.compile(r"'cudagraph_capture_sizes': \[([0-9, ]*)\]")
H200 = get_gpu("h200")
RELEASE_026 = (0, 26, 0)

# The MI300X start the HIP piece graph is read from: Gemma 4 E2B bf16, vLLM 0.31.1rc1.dev23 (V2 runner, TRITON_ATTN,
# max_num_seqs 1024 and 16384 batched tokens by the >= 160 GiB tier, 51 capture sizes as its config prints), and the
# one line that sizes its estimate (gpu_worker.py:697-712 at v0.31.0: equivalent util = util - estimate / total).
ROCM_START = {
    "url": "https://github.com/xbill9/gemma4-dev/blob/91da4ff980152595a9e2c9b1164f6ade46fd8f5f/gpu-vllm-mi300x-2b/"
           "article/evidence/boot-highlights.2b.txt",
    "line": "The current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8795 without "
            "CUDA graph memory profiling.",
    # not a catalog model: its decoder's 35 layers (config.json text_config.num_hidden_layers, the layout of
    # tests/test_public_logs_0_27.py test_gemma4_e2b_mi300x_0_29_logged_tokens_from_its_kv_memory) and hidden size 1536
    "model": (35, 1536), "gpu": "mi300x", "max_num_seqs": 1024, "max_num_batched_tokens": 16384,
    "release": (0, 31, 1),
}


def structure(model: str, seqs: int, mnbt: int, release=RELEASE_026, mode="capture", gpu=H200):
    """(PIECEWISE graphs, hidden x FULL tokens, FULL graphs, workspace bytes) of one start."""
    layers, hidden = model if isinstance(model, tuple) else (load_model(model).num_layers, load_model(model).hidden_size)
    unit = graph_pool(layers, hidden, seqs, mnbt, piece_graph_bytes=1.0,
                      full_token_bytes_per_hidden=1.0, workspace_bytes=blas_workspace(gpu)[1], mode=mode,
                      compute_capability=gpu.compute_capability, release=release)
    return unit.piece_graphs, unit.full_bytes, unit.full_graphs, unit.workspace_bytes


def read_captures():
    rows = []
    for tarball, member, model, seqs, mnbt in CAPTURES:
        with tarfile.open(DATA / tarball) as tar:
            text = tar.extractfile(member).read().decode("utf-8", "replace")
        took = [float(x) for x in TOOK.findall(text)]
        assert took, f"{member}: no 'Graph capturing finished' line"
        logged_mnbt = MNBT.findall(text)
        assert not logged_mnbt or int(logged_mnbt[0]) == mnbt, f"{member}: max_num_batched_tokens {logged_mnbt[0]}"
        logged_seqs = SEQS.findall(text)
        assert not logged_seqs or int(logged_seqs[0]) == seqs, f"{member}: max_num_seqs {logged_seqs[0]}"
        pieces, full_tokens, full_graphs, workspace = structure(model, seqs, mnbt)
        logged_sizes = SIZES.findall(text)
        if logged_sizes:  # the structure's capture sizes are the ones the log's config prints
            n = len([s for s in logged_sizes[0].split(",") if s.strip()])
            assert n * (load_model(model).num_layers + 1) == pieces, f"{member}: {n} capture sizes logged"
        rows.append({"member": member, "model": model, "seqs": seqs, "mnbt": mnbt, "took": took[-1] * GIB,
                     "pieces": pieces, "full_tokens": full_tokens, "full_graphs": full_graphs,
                     "workspace": workspace})
    return rows


def fit(rows):
    x = np.array([[r["pieces"], r["full_tokens"]] for r in rows], dtype=float)
    y = np.array([r["took"] - r["workspace"] for r in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    loo = []
    for i in range(len(rows)):
        keep = np.arange(len(rows)) != i
        c, *_ = np.linalg.lstsq(x[keep], y[keep], rcond=None)
        loo.append(float(x[i] @ c - y[i]))
    return coef, loo


def rocm_piece_bytes(cuda_piece: float) -> float:
    """The HIP piece graph's bytes from ROCM_START's logged estimate (the 0.29+ estimate: workspace + pieces x
    bytes + (FULL graphs - 1) x 1 MiB)."""
    m = re.search(r"utilization=([0-9.]+) is equivalent to --gpu-memory-utilization=([0-9.]+)", ROCM_START["line"])
    gpu = get_gpu(ROCM_START["gpu"])
    estimate = (float(m.group(1)) - float(m.group(2))) * gpu.memory_total_bytes
    pieces, full_floor, _, workspace = structure(ROCM_START["model"], ROCM_START["max_num_seqs"],
                                                 ROCM_START["max_num_batched_tokens"], ROCM_START["release"],
                                                 "estimate", gpu)
    return (estimate - workspace - full_floor) / pieces, estimate


def main() -> None:
    rows = read_captures()
    coef, loo = fit(rows)
    piece, full_token = float(coef[0]), float(coef[1])
    print(f"CUDA PIECEWISE graph: {piece:,.0f} B; 0.26-0.28 FULL graphs: {full_token:.3f} B per hidden unit per "
          f"captured token (fitted on {len(rows)} H200 captures of vLLM 0.26.0)")
    print("| H200 capture (vLLM 0.26.0) | model | max_num_seqs | batched tokens | PIECEWISE graphs | FULL graphs | "
          "logged GiB | fitted GiB | left-out error GiB | 0.80 GiB constant's error |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r, e in zip(rows, loo):
        fitted = (r["workspace"] + piece * r["pieces"] + full_token * r["full_tokens"]) / GIB
        print(f"| {Path(r['member']).name} | {r['model']} | {r['seqs']} | {r['mnbt']} | {r['pieces']:,} | "
              f"{r['full_graphs']} | {r['took'] / GIB:.2f} | {fitted:.2f} | {e / GIB:+.3f} | "
              f"{0.80 - r['took'] / GIB:+.2f} |")
    abs_loo = np.abs(loo) / GIB
    const = [abs(0.80 - r["took"] / GIB) for r in rows]
    print(f"median |left-out error| {np.median(abs_loo):.3f} GiB, worst {abs_loo.max():.3f}; the 0.80 GiB constant "
          f"{np.median(const):.3f} / {max(const):.3f}")
    rocm, estimate = rocm_piece_bytes(piece)
    print(f"HIP PIECEWISE graph: {rocm / MiB:.3f} MiB ({rocm / piece:.1f}x the CUDA graph), from {ROCM_START['url']} "
          f"(estimate {estimate / GIB:.2f} GiB)")
    if "--write" in sys.argv:
        path = ROOT / "kvcalc" / "data" / "constants.yaml"
        text = path.read_text()
        for key, value in (("cudagraph_piece_graph_bytes", int(round(piece))),
                           ("cudagraph_piece_graph_bytes_rocm", int(round(rocm))),
                           ("cudagraph_full_token_bytes_per_hidden", round(full_token, 3))):
            pattern = re.compile(rf"^  {key}: .*$", re.M)
            line = f"  {key}: {value}"
            text = pattern.sub(line, text) if pattern.search(text) else text.replace(
                "  cudagraph_capture_bytes:", f"{line}\n  cudagraph_capture_bytes:", 1)
        path.write_text(text)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
