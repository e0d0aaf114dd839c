"""Which linear kernel vLLM runs for an int4 checkpoint, given the --quantization flag it was started with.

vLLM reads a pre-quantized checkpoint's method from its config.json (quantization_config.quant_method) and, with no
--quantization flag, picks the Marlin kernel where the GPU and the checkpoint's group size allow it. What an explicit
flag does depends on the release:
- 0.5.3 (vllm#6612, awq_marlin.py) to before 0.26.0: AWQMarlinConfig.override_quantization_method converts an AWQ
  checkpoint to awq_marlin only when the user passed no flag, `marlin` or `awq_marlin`; with `--quantization awq` it
  logs "Detected that the model can run with awq_marlin, however you specified quantization=awq explicitly, so
  forcing awq. Use quantization=awq_marlin for faster inference" (awq_marlin.py:120 in the 0.9 log of vllm#20112)
  and runs AWQ's own GEMM kernel (awq.py: ops.awq_gemm below 256 tokens, dequantize + matmul above). GPTQ likewise
  (gptq_marlin.py: "...so forcing gptq. Use quantization=gptq_marlin for faster inference").
- 0.26.0 (checked in its wheel): `awq`, `awq_marlin`, `auto_awq` and `marlin` all select AutoAWQConfig
  (quantization/__init__.py:142-144; auto_awq.py:260-284), which runs Marlin on CUDA whenever check_marlin_supported
  holds (auto_awq.py:308-334; marlin_utils.py:64: compute capability 7.5 and up); `gptq`/`gptq_marlin` select
  AutoGPTQConfig (auto_gptq.py:219-238), whose kernel chooser picks Marlin likewise. The release between in which
  the forcing ended is not pinned here: releases before 0.26.0 are read as forcing (the older rule).

So the `vllm serve` line kvcalc writes for a pre-quantized checkpoint carries no --quantization (every release then
picks Marlin), and a pasted command that forces the slow kernel is said in a warning: kvcalc's speed model prices
Marlin-style kernels only.
"""

from __future__ import annotations

from .vllm_versions import version_key

MARLIN_AUTO_SINCE = "0.26.0"  # first release checked in which --quantization awq / gptq still selects Marlin
FORCING = {"awq": "awq_marlin", "gptq": "gptq_marlin"}  # the flag that forces the slow kernel -> the fast one


MARLIN_MIN_CC_BEFORE = 8.0  # awq_marlin.py / gptq_marlin.py get_min_capability 80 and marlin_utils.py's < 80 -> []
AWQ_MIN_CC = 7.5  # AWQ's own GEMM kernel needs sm_75 (gemm_kernels.cu asserts below 750); vLLM refuses AWQ below
MARLIN_MIN_CC_SINCE = 7.5  # 0.26.0 marlin_utils.py:64 (device_capability < 75 -> no Marlin types)


def no_marlin_on_gpu(version: str, compute_capability: float | None) -> str | None:
    """Why int4 checkpoints run without Marlin on this GPU in this release (below its minimum compute capability:
    8.0 before 0.26, 7.5 from 0.26), or None."""
    floor = MARLIN_MIN_CC_SINCE if version_key(version) >= version_key(MARLIN_AUTO_SINCE) else MARLIN_MIN_CC_BEFORE
    if compute_capability is None or compute_capability >= floor:
        return None
    if compute_capability < AWQ_MIN_CC:
        return (f"AWQ rows: vLLM does not load AWQ checkpoints below compute capability {AWQ_MIN_CC:g} (this GPU: "
                f"{compute_capability:g}; awq.py / auto_awq.py get_min_capability 75: the start-up fails); GPTQ rows "
                "run GPTQ's own kernels there, slower than the Marlin speed shown")
    return (f"AWQ/GPTQ rows: vLLM {version} has no Marlin kernel below compute capability {floor:g} (this GPU: "
            f"{compute_capability:g}), so int4 checkpoints run AWQ's/GPTQ's own GEMM kernels; kvcalc's speed is "
            "Marlin's, so their real decode is slower than shown")


def forced_slow_kernel(quantization: str | None, version: str) -> str | None:
    """Why `--quantization NAME` runs a slower kernel than the checkpoint allows in this release, or None."""
    key = str(quantization or "").strip().lower().replace("-", "_")
    if key not in FORCING or version_key(version) >= version_key(MARLIN_AUTO_SINCE):
        return None
    return (f"--quantization {key} on vLLM {version} forces {key.upper()}'s own GEMM kernel ('... you specified "
            f"quantization={key} explicitly, so forcing {key}'), not Marlin: drop the flag (vLLM reads the "
            f"checkpoint's method and picks Marlin) or pass {FORCING[key]}; kvcalc's speed is Marlin's, so the real "
            "decode is slower than shown")
