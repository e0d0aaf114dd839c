#!/usr/bin/env python3
"""Compile, here (CUDA 13 nvcc, no GPU), the SGLang JIT kernels that the offline H200 host would otherwise build on
first use (~20-40 s per module with its nvcc, every fresh host), and SGLang 0.5.14 runs RoPE, SiLU-and-mul, KV stores, RMSNorm and MoE alignment
through sglang/jit_kernel (tvm-ffi modules compiled at first call; rope.py's apply_rope_with_cos_sin_cache_inplace
has no fallback). jit_kernel/utils.py load_jit loads `TVM_FFI_CACHE_DIR/<module>__arch_9.0__tvmffi_<ver>/<module>.so`
without compiling when it exists: the module name holds the template arguments and a hash of the sources, so calling
SGLang's own builder functions under override_jit_cuda_arch(9, 0) produces exactly the files the host looks up.

The argument sets cover the cases in scripts/gpu_v5/sglang_cases_a.json (Llama-3.1-8B, Qwen3-30B-A3B,
DeepSeek-V2-Lite, Gemma 3; bf16 activations) with margin; a module missing on the host makes SGLang compile it there with
nvcc at first use (the image has nvcc 13.0, KINDS.md), or fail where it finds none (guarded call sites fall back,
RoPE does not).
Usage: CUDA_HOME=/usr/local/cuda-13.0 TVM_FFI_CACHE_DIR=OUT PYTHONPATH=SITE python3 sglang_prebuild_jit.py [-j N]
"""
import argparse
import concurrent.futures as cf
import os
import sys
import time


def jobs():
    bf16, i32, i64 = "bfloat16", "int32", "int64"
    out = []
    for neox in (True, False):
        for rope_dim in (64, 128, 256):
            out.append(("rope", "_jit_fused_rope_module", (neox, rope_dim, bf16)))
    out.append(("rope", "_jit_rotary_embedding_module", ()))
    out += [("activation", "_jit_activation_module", (d,)) for d in (bf16, "float16")]
    out += [("moe_align", "_jit_moe_align_module", (d,)) for d in (i32, i64)]
    out += [("clamp_position", "_jit_clamp_position_module", (d,)) for d in (i32, i64)]
    out += [("kvcache", "_jit_kvcache_module", (rb,)) for rb in (256, 512, 1024, 2048, 4096, 8192)]
    out += [("norm", "_jit_qknorm_module", (hd, bf16)) for hd in (64, 128, 256)]
    # hidden sizes: Llama-3.1-8B 4096, Qwen3-30B-A3B / DeepSeek-V2-Lite 2048, Gemma 3 4B/12B/27B 2560/3840/5376,
    # DeepSeek-V2-Lite's kv_a_layernorm 512 and q_a 1536, head dims 128/256
    out += [("norm", "_jit_rmsnorm_module", (h, bf16)) for h in (128, 256, 512, 1536, 2048, 2560, 3840, 4096, 5376)]
    out += [("norm", "_jit_fused_add_rmsnorm_module", (bf16, c)) for c in (False, True)]
    out.append(("norm", "_jit_qknorm_across_heads_module", (bf16,)))
    out += [("fused_qknorm_rope", "_jit_fused_qknorm_rope_module", (hd, neox, yarn))
            for hd in (128, 256) for neox in (True, False) for yarn in (False, True)]
    out += [("concat_mla", "_jit_concat_mla_k_module", ()), ("concat_mla", "_jit_concat_mla_absorb_q_module", ())]
    return out


def build(job):
    import importlib

    import torch

    from sglang.jit_kernel import utils as U
    mod, fn, args = job
    args = tuple(getattr(torch, a) if isinstance(a, str) else a for a in args)
    t = time.time()
    with U.override_jit_cuda_arch(9, 0):
        getattr(importlib.import_module(f"sglang.jit_kernel.{mod}"), fn)(*args)
    return f"{mod}.{fn}{args}: {time.time() - t:.0f} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=2)
    a = ap.parse_args()
    assert os.environ.get("TVM_FFI_CACHE_DIR"), "set TVM_FFI_CACHE_DIR"
    bad = 0
    # one process per module: cache_once and the arch override are process-global
    with cf.ProcessPoolExecutor(a.j, max_tasks_per_child=1) as ex:
        for job, fut in [(j, ex.submit(build, j)) for j in jobs()]:
            try:
                print(fut.result(), flush=True)
            except Exception as e:  # keep going: one bad variant must not stop the rest
                bad += 1
                print(f"FAILED {job}: {type(e).__name__}: {str(e)[-300:]}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
