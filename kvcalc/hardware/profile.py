"""GpuProfile: what a GPU offers to an inference engine, and the name and datatype spellings used to look it up.

Every number of a profile carries its origin in the profile's ``sources`` mapping (datasheet, observed, estimate or
assumption). Two memory sizes are kept apart on purpose:

* ``memory_marketing_bytes``: the advertised size ("80 GB"), as exact bytes of the DRAM the datasheet means.
* ``memory_total_bytes``: the total the driver reports to a process (``cudaMemGetInfo`` / ``torch.cuda.mem_get_info``),
  which is what vLLM multiplies by ``gpu_memory_utilization``. It is always a little less than the marketing size.

This module is the leaf of the hardware package: schema.py (rules for users' files) and registry.py (the shipped
files and name lookup) import it, never the other way round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..units import GiB

# Datatypes a profile may quote dense tensor-core (or matrix-core) throughput for, in FLOP/s (OP/s for integers).
FLOPS_KEYS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4", "int4")

# Spellings users and libraries use for those datatypes.
DTYPE_ALIASES = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32",
    "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8-e4m3": "fp8", "fp8-e5m2": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "e4m3": "fp8", "e5m2": "fp8",
    "nvfp4": "fp4", "mxfp4": "fp4",
}

# A profile id: the shipped file is hardware_profiles/<id>.yaml.
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


def canonical_dtype(dtype: str) -> str:
    """'bfloat16' -> 'bf16', 'float8_e4m3fn' -> 'fp8'; unknown spellings come back lowercased."""
    key = str(dtype).strip().lower().replace(" ", "")
    return DTYPE_ALIASES.get(key, key)


def normalize_name(name: str) -> str:
    """'NVIDIA H100_SXM ' -> 'nvidia-h100-sxm'."""
    text = str(name).strip().lower()
    text = re.sub(r"[\s_/]+", "-", text)
    text = re.sub(r"-+", "-", text).strip("-")
    return text


@dataclass(frozen=True)
class GpuProfile:
    """One GPU, as the planner needs it. Rules a profile must satisfy live in schema.py (pydantic)."""

    id: str
    name: str
    vendor: str  # nvidia | amd
    architecture: str
    memory_marketing_bytes: int  # advertised size, exact bytes
    memory_total_bytes: int  # what the driver reports (cudaMemGetInfo): what vLLM multiplies by its utilization
    memory_bandwidth_bytes_per_s: int  # datasheet peak
    memory_type: str
    native_bf16: bool
    native_fp8: bool
    achievable_bandwidth_fraction: float  # share of the datasheet bandwidth a large device copy reaches
    compute_capability: float | None = None
    gfx: str | None = None
    aliases: tuple[str, ...] = ()
    flops: dict[str, float | None] = field(default_factory=dict)  # dense FLOP/s per datatype
    tdp_watts: int | None = None
    form_factor: str | None = None
    sm_count: int | None = None  # streaming multiprocessors (CUs on AMD): sizes per-SM kernel buffers
    # BF16 FLOP/s a large square torch.mm reaches (a public measurement, named in sources): the datasheet's dense peak
    # is the rated boost clock's; GeForce cards run above it, power-limited PCIe boards below it
    measured_bf16_matmul_flops: float | None = None
    # the same measurement in FP16, for a GPU without native BF16 (Turing, Volta: vLLM computes in FP16 there)
    measured_fp16_matmul_flops: float | None = None
    sources: dict[str, str] = field(default_factory=dict)

    # -- handy views ----------------------------------------------------------------------------------------------

    @property
    def memory_total_gib(self) -> float:
        """Driver-reported total, in GiB (2**30 bytes)."""
        return self.memory_total_bytes / GiB

    @property
    def memory_marketing_gib(self) -> float:
        return self.memory_marketing_bytes / GiB

    @property
    def achievable_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth a large device-to-device copy reaches: datasheet peak x achievable_bandwidth_fraction."""
        return self.memory_bandwidth_bytes_per_s * self.achievable_bandwidth_fraction

    @property
    def laptop(self) -> bool:
        """A laptop part (form_factor 'laptop GPU ...'): one GPU per machine, so no tensor or pipeline parallelism
        over several of it (plan's TP sweep, search's TP x PP splits and min-gpus stop at one)."""
        return (self.form_factor or "").lower().startswith("laptop")

    def flops_for(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a datatype ('bf16', 'float16', 'fp8', ...); None where the GPU has no native math."""
        return self.flops.get(canonical_dtype(dtype))

    def supports_native(self, fmt: str) -> bool:
        """True when the GPU computes in this format directly (no upcast on every read).

        bf16 and fp8 follow the native_* flags; other formats are native when the profile quotes a throughput for
        them. Weight-only formats (nf4, awq, gptq, hqq ...) are never native: kernels dequantize them.
        """
        key = canonical_dtype(fmt)
        if key == "bf16":
            return self.native_bf16
        if key == "fp8":
            return self.native_fp8
        return self.flops.get(key) is not None
