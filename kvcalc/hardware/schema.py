"""The pydantic schema of a GPU profile: every rule a profile must satisfy.

Used for users' own profile files and by the tests on every shipped file. Imports only profile.py; registry.py
imports it lazily, so `kvcalc plan` on a shipped GPU never builds these pydantic models (they cost more start-up
time than the whole plan), and the shipped files are validated by the test suite instead.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import UsageError, shown
from ..schema_errors import summarize
from ..units import GiB
from .profile import FLOPS_KEYS, ID_PATTERN, GpuProfile, canonical_dtype, normalize_name

# Bounds that catch unit mix-ups and garbage, far outside any real accelerator (2026: 288 GB, 8 TB/s, ~10 PFLOP/s fp4).
MIN_MEMORY, MAX_MEMORY = 1 * GiB, 2**50  # 1 GiB .. 1 PiB
MIN_BANDWIDTH, MAX_BANDWIDTH = 10**9, 10**15  # 1 GB/s .. 1 PB/s
MAX_FLOPS = 10**19
MAX_ALIASES, MAX_SOURCES = 32, 64


class GpuProfileSchema(BaseModel):
    """One GPU, as the planner needs it. Field meanings: profile.GpuProfile and each YAML file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: str = Field(max_length=64, description="lowercase identifier; the shipped file is <id>.yaml")
    name: str = Field(min_length=1, max_length=200, description="full marketing name")
    vendor: Literal["nvidia", "amd"]
    architecture: str = Field(min_length=1, max_length=100,
                              description="Volta, Turing, Ampere, Ada, Hopper, Blackwell, CDNA3, ...")
    compute_capability: float | None = Field(default=None, ge=1, le=99,
                                             description="CUDA compute capability; null for AMD")
    gfx: str | None = Field(default=None, max_length=32, description="AMD gfx target, e.g. gfx942; null for NVIDIA")
    aliases: tuple[str, ...] = Field(default=(), max_length=MAX_ALIASES)
    memory_marketing_bytes: int = Field(ge=MIN_MEMORY, le=MAX_MEMORY, description="advertised memory size, exact bytes")
    memory_total_bytes: int = Field(ge=MIN_MEMORY, le=MAX_MEMORY,
                                    description="total memory the driver reports (cudaMemGetInfo), bytes")
    memory_bandwidth_bytes_per_s: int = Field(ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH,
                                              description="datasheet peak DRAM bandwidth, bytes/s")
    memory_type: str = Field(min_length=1, max_length=100)
    flops: dict[str, float | None] = Field(default_factory=dict, max_length=len(FLOPS_KEYS) * 4,
                                           description="dense FLOP/s (OP/s) per datatype")
    native_bf16: bool = Field(strict=True)
    native_fp8: bool = Field(strict=True)
    tdp_watts: int | None = Field(default=None, gt=0, le=100_000)
    form_factor: str | None = Field(default=None, max_length=100)
    sm_count: int | None = Field(default=None, gt=0, le=10_000,
                                 description="streaming multiprocessors (NVIDIA) or compute units (AMD)")
    achievable_bandwidth_fraction: float = Field(
        gt=0, le=1, description="share of datasheet bandwidth a large device-to-device copy reaches"
    )
    measured_bf16_matmul_flops: float | None = Field(
        default=None, gt=0, le=MAX_FLOPS,
        description="BF16 FLOP/s a large dense torch.mm reaches on this GPU (public measurement, sources names it)")
    measured_fp16_matmul_flops: float | None = Field(
        default=None, gt=0, le=MAX_FLOPS,
        description="FP16 FLOP/s a large dense torch.mm reaches, for a GPU without native BF16 (it computes in FP16)")
    sources: dict[str, str] = Field(default_factory=dict, max_length=MAX_SOURCES,
                                    description="field -> where the number came from")

    # -- field checks ---------------------------------------------------------------------------------------------

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not ID_PATTERN.match(value):
            raise ValueError(f"id {shown(value, 40)} must be lowercase letters, digits, '.' and '-' (e.g. h100-sxm)")
        return value

    @field_validator("memory_marketing_bytes", "memory_total_bytes", "memory_bandwidth_bytes_per_s", mode="before")
    @classmethod
    def _whole_numbers(cls, value: object) -> object:
        # YAML 1.1 reads 320e9 (no exponent sign) as a string; accept it, and whole floats, as exact integers
        if isinstance(value, str):
            try:
                value = float(value.replace("_", ""))
            except ValueError:
                return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @field_validator("aliases", mode="before")
    @classmethod
    def _normalize_aliases(cls, value: object) -> object:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_ALIASES:
                raise ValueError(f"has {len(value):,} entries; at most {MAX_ALIASES}")
            for v in value:
                if not isinstance(v, (str, int, float)) or isinstance(v, bool) or len(str(v)) > 64:
                    raise ValueError(f"entries must be names of at most 64 characters (got {shown(v, 30)})")
            return tuple(normalize_name(str(v)) for v in value)
        return value

    @field_validator("sources")
    @classmethod
    def _check_sources(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if len(key) > 100 or len(text) > 2000:
                raise ValueError(f"sources.{shown(key, 30, quote=False)}: keys are field names and texts at most "
                                 "2,000 characters")
        return value

    @field_validator("flops")
    @classmethod
    def _check_flops(cls, value: dict[str, float | None]) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key, number in value.items():
            canonical = canonical_dtype(key)
            if canonical not in FLOPS_KEYS:
                raise ValueError(f"unknown datatype {shown(key, 30)} in flops; use one of {', '.join(FLOPS_KEYS)}")
            if number is not None and not 0 < number <= MAX_FLOPS:
                raise ValueError(f"flops.{shown(key, 20, quote=False)} must be positive (FLOP/s) and at most "
                                 f"{MAX_FLOPS:.0e}, or null where the GPU has no native support")
            out[canonical] = number
        return out

    @model_validator(mode="after")
    def _check_consistency(self) -> GpuProfileSchema:
        if self.memory_total_bytes > self.memory_marketing_bytes * 1.1:
            raise ValueError(
                f"memory_total_bytes ({self.memory_total_bytes}) exceeds memory_marketing_bytes "
                f"({self.memory_marketing_bytes}) by more than 10%: are GiB and GB mixed up?"
            )
        if self.vendor == "nvidia":
            if self.compute_capability is None:
                raise ValueError("an NVIDIA GPU needs compute_capability (e.g. 8.9)")
            fp8_expected = self.compute_capability >= 8.9
            if self.native_fp8 != fp8_expected:
                raise ValueError(
                    f"native_fp8 is {self.native_fp8} but compute capability {self.compute_capability} "
                    f"{'has' if fp8_expected else 'lacks'} FP8 tensor cores (native from 8.9)"
                )
            bf16_expected = self.compute_capability >= 8.0
            if self.native_bf16 != bf16_expected:
                raise ValueError(
                    f"native_bf16 is {self.native_bf16} but compute capability {self.compute_capability} "
                    f"{'has' if bf16_expected else 'lacks'} BF16 tensor cores (native from 8.0)"
                )
        elif self.compute_capability is not None:
            raise ValueError("compute_capability is an NVIDIA notion; leave it null for AMD and set gfx instead")
        if not self.native_fp8 and self.flops.get("fp8") is not None:
            raise ValueError("flops.fp8 is given but native_fp8 is false")
        if not self.native_bf16 and self.flops.get("bf16") is not None:
            raise ValueError("flops.bf16 is given but native_bf16 is false")
        if self.id in self.aliases:
            raise ValueError(f"alias {self.id!r} repeats the id")
        return self


_NOTES = {MIN_MEMORY: "1 GiB", MAX_MEMORY: "1 PiB", MIN_BANDWIDTH: "1 GB/s", MAX_BANDWIDTH: "1 PB/s"}


def validate_profile(data: dict, origin: str) -> GpuProfile:
    """Check a profile mapping against every rule; a one-line UsageError names the first field that is wrong."""
    try:
        checked = GpuProfileSchema.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"invalid GPU profile {origin}: {summarize(exc, bounds_note=_NOTES, mapping='mapping')}"
                         ) from None
    return GpuProfile(**checked.model_dump())
