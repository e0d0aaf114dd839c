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
  (quantization/__init__.py:142-144; auto_awq.py:260-283), which runs Marlin on CUDA whenever check_marlin_supported
  holds (auto_awq.py:310-330; marlin_utils.py:64: compute capability 7.5 and up); `gptq`/`gptq_marlin` select
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


def forced_slow_kernel(quantization: str | None, version: str) -> str | None:
    """Why `--quantization NAME` runs a slower kernel than the checkpoint allows in this release, or None."""
    key = str(quantization or "").strip().lower().replace("-", "_")
    if key not in FORCING or version_key(version) >= version_key(MARLIN_AUTO_SINCE):
        return None
    return (f"--quantization {key} on vLLM {version} forces {key.upper()}'s own GEMM kernel ('... you specified "
            f"quantization={key} explicitly, so forcing {key}'), not Marlin: drop the flag (vLLM reads the "
            f"checkpoint's method and picks Marlin) or pass {FORCING[key]}; kvcalc's speed is Marlin's, so the real "
            "decode is slower than shown")
