#!/usr/bin/env python3
"""Check, on a CPU machine, that the unpacked SGLang bundle imports on top of the host's packages (test-only; no GPU).

Run with a python 3.12 whose site holds only torch 2.11.0 (+cu130) and what the H200 host is known to have
(KINDS.md), the bundle's site first on PYTHONPATH, and a stub libcuda.so.1 on LD_LIBRARY_PATH (this box has no driver:
the stub exports the cu* symbols the kernels import and fails every call; build it as SGLANG_BUNDLE.md says).
torch is made to report one sm_90 GPU so that SGLang's `if _is_cuda:` module-level imports run. sgl_kernel's
libraries are loaded for real (symbols resolve against this torch), and so is every prebuilt JIT module.
Prints OK/FAIL per entry point and the first SGLang frames of each failure; exits 1 if any failed.
Usage: LD_LIBRARY_PATH=STUBDIR PYTHONPATH=/tmp/kvsg/site TVM_FFI_CACHE_DIR=/tmp/kvsg/jit python3 sglang_cpu_import_check.py
"""
import glob
import importlib
import os
import sys
import traceback

import torch

torch.cuda.is_available = lambda: True
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
torch.cuda.device_count = lambda: 1
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"


class _Props:
    major, minor, name, total_memory = 9, 0, "NVIDIA H200", 143771 * 2**20
    multi_processor_count, gcnArchName, L2_cache_size = 132, "", 60 * 2**20


torch.cuda.get_device_properties = lambda *a, **k: _Props()

MODULES = [
    "sgl_kernel", "sgl_kernel.flash_attn",
    "sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
    "sglang.srt.managers.tokenizer_manager", "sglang.srt.model_executor.model_runner",
    "sglang.srt.layers.attention.flashattention_backend", "sglang.srt.layers.rotary_embedding",
    "sglang.srt.layers.activation", "sglang.srt.layers.layernorm", "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.layers.moe.fused_moe_triton.layer",
    "sglang.srt.models.llama", "sglang.srt.models.qwen3_moe", "sglang.srt.models.deepseek_v2",
    "sglang.srt.models.gemma3_causal",
    "sglang.bench_serving",
]


def main():
    bad = 0
    for mod in MODULES:
        try:
            importlib.import_module(mod)
            print("OK", mod)
        except BaseException as e:  # report every entry point, not only the first failure
            bad += 1
            tb = traceback.extract_tb(e.__traceback__)
            where = [f"{f.filename.split('site/')[-1]}:{f.lineno}" for f in tb if "sglang" in f.filename][-3:]
            print("FAIL", mod, type(e).__name__, str(e)[:300], where)
    from tvm_ffi import load_module

    jit = sorted(glob.glob(os.path.join(os.environ.get("TVM_FFI_CACHE_DIR", "/tmp/kvsg/jit"), "*", "*.so")))
    failed = []
    for so in jit:
        try:
            load_module(so)
        except BaseException as e:
            failed.append(f"{os.path.basename(so)}: {str(e)[:200]}")
    print(f"{'OK' if jit and not failed else 'FAIL'} JIT modules loaded: {len(jit) - len(failed)} of {len(jit)}")
    for f in failed:
        print("  FAIL", f)
    import transformers, tokenizers  # noqa: E401  (the bundle's pins must shadow the host's)
    print("versions: torch", torch.__version__, "transformers", transformers.__version__, "tokenizers",
          tokenizers.__version__, "sglang", importlib.import_module("sglang").__version__)
    sys.exit(1 if bad or failed or not jit else 0)


if __name__ == "__main__":
    main()
