"""Numeric formats for weights and for the KV cache, as the libraries lay them out in memory.

Every size is an exact integer number of bytes, computed from the storage layout of the library that uses the format
(bitsandbytes, AutoAWQ/GPTQ kernels, hqq, optimum-quanto, vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError, shown
from .layouts import Layout


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightFormat:
    name: str
    label: str
    description: str
    bits: int  # stored bits per quantized weight element
    quantizes_linears: bool  # False: everything stays in the compute dtype
    needs_unpack: bool  # packed sub-byte values are unpacked on every read (a per-byte cost on any GPU)
    native_min_compute_capability: float | None  # below it, the format is emulated (upcast on every read)
    quality_risk: str  # none | low | moderate | high, for models of 4B parameters and more
    engines: tuple[str, ...]
    quality_risk_small: str | None = None  # the same for models under 4B parameters, where it differs
    quality_note: str = ""
    layout: Layout | None = None  # how one Linear weight is stored (its bytes); None: a format without a formula

    def risk_for(self, params: int) -> str:
        return self.quality_risk_small if (self.quality_risk_small and params < 4_000_000_000) else self.quality_risk

    def linear_bytes(self, in_features: int, out_features: int, dtype_bytes: int = 2) -> int:
        """Bytes of one Linear weight in this format (bias excluded; biases stay in the compute dtype): its layout's
        formula (kvcalc/layouts.py, the one byte table of a Linear)."""
        if self.layout is None:
            raise AssertionError(f"no layout for weight format {self.name}")  # every registered format has one
        return self.layout.linear_bytes(in_features, out_features, dtype_bytes)


_NF4_NOTE = ("4-bit weights on ~3B models can fall into repetition loops; 7B+ models degrade less "
             "(see docs/quality.md for measured evidence)")

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat(name="bf16", label="BF16", description="bfloat16, as released", bits=16, quantizes_linears=False,
                     needs_unpack=False, native_min_compute_capability=8.0, quality_risk="none",
                     engines=("hf", "vllm"),
                     layout=Layout("dense", 16)),
        WeightFormat(name="fp16", label="FP16", description="float16", bits=16, quantizes_linears=False,
                     needs_unpack=False, native_min_compute_capability=None, quality_risk="none",
                     engines=("hf", "vllm"),
                     layout=Layout("dense", 16)),
        WeightFormat(name="fp32", label="FP32", description="float32", bits=32, quantizes_linears=False,
                     needs_unpack=False, native_min_compute_capability=None, quality_risk="none", engines=("hf",),
                     layout=Layout("dense", 32)),
        WeightFormat(name="fp8", label="FP8 W8",
                     description="fp8 e4m3 weights, per-tensor scale (vLLM quantization=fp8)", bits=8,
                     quantizes_linears=True, needs_unpack=False, native_min_compute_capability=8.9, quality_risk="low",
                     engines=("vllm",),
                     layout=Layout("fp8", 8, strategy="tensor", scale_bytes=4)),
        WeightFormat(name="int8", label="INT8", description="bitsandbytes LLM.int8 (8-bit weights, fp32 row scales)",
                     bits=8, quantizes_linears=True, needs_unpack=True, native_min_compute_capability=None,
                     quality_risk="low", engines=("hf",),
                     layout=Layout("bnb8", 8)),
        WeightFormat(name="nf4", label="NF4", description="bitsandbytes NF4, block 64, fp32 absmax (0.5625 B/param)",
                     bits=4, quantizes_linears=True, needs_unpack=True, native_min_compute_capability=None,
                     quality_risk="moderate", engines=("hf", "vllm"), quality_risk_small="high",
                     quality_note=_NF4_NOTE,
                     layout=Layout("nf4", 4)),
        WeightFormat(name="nf4-dq", label="NF4+DQ",
                     description="bitsandbytes NF4 with double quantization (~0.516 B/param)", bits=4,
                     quantizes_linears=True, needs_unpack=True, native_min_compute_capability=None,
                     quality_risk="moderate", engines=("hf",), quality_risk_small="high", quality_note=_NF4_NOTE,
                     layout=Layout("nf4-dq", 4)),
        WeightFormat(name="awq", label="AWQ int4", description="AWQ int4, group 128, fp16 scales and packed zeros",
                     bits=4, quantizes_linears=True, needs_unpack=True, native_min_compute_capability=7.5,
                     quality_risk="low", engines=("hf", "vllm"), quality_risk_small="moderate",
                     quality_note="calibrated on data: usually better than NF4 at the same size",
                     layout=Layout("awq", 4, group_size=128, zero_points=True)),
        WeightFormat(name="gptq", label="GPTQ int4",
                     description="GPTQ int4, group 128, fp16 scales, packed zeros, g_idx", bits=4,
                     quantizes_linears=True, needs_unpack=True, native_min_compute_capability=7.5, quality_risk="low",
                     engines=("hf", "vllm"), quality_risk_small="moderate", quality_note="calibrated on data",
                     layout=Layout("gptq", 4, group_size=128, zero_points=True)),
        WeightFormat(name="w4a16", label="W4A16 int4",
                     description="compressed-tensors W4A16: int4 packed in int32, group 128, 16-bit scales "
                     "(llm-compressor's '.w4a16' checkpoints)", bits=4, quantizes_linears=True, needs_unpack=True,
                     native_min_compute_capability=8.0, quality_risk="low", engines=("vllm",),
                     quality_risk_small="moderate", quality_note="calibrated on data (GPTQ)",
                     layout=Layout("wna16", 4, group_size=128, scale_bytes=0)),
        WeightFormat(name="w8a8", label="W8A8 int8",
                     description="compressed-tensors W8A8 int8: per-channel fp32 weight scales, dynamic per-token "
                     "int8 activations (llm-compressor's '.w8a8' checkpoints)", bits=8, quantizes_linears=True,
                     needs_unpack=False, native_min_compute_capability=7.5, quality_risk="low", engines=("vllm",),
                     layout=Layout("int8", 8, strategy="channel", scale_bytes=4)),
        WeightFormat(name="hqq4", label="HQQ 4-bit",
                     description="hqq 4-bit weights, group 64, scale+zero in the compute dtype", bits=4,
                     quantizes_linears=True, needs_unpack=True, native_min_compute_capability=None,
                     quality_risk="moderate", engines=("hf",), quality_risk_small="high",
                     quality_note="calibration-free",
                     layout=Layout("hqq", 4, group_size=64, scale_bytes=0, flat_groups=True)),
    )
}


_WEIGHT_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "auto": "bf16",
                   "awq-int4": "awq", "gptq-int4": "gptq", "bnb-nf4": "nf4", "nf4dq": "nf4-dq", "hqq": "hqq4",
                   "bnb-int8": "int8", "w8": "fp8",
                   "w4a16-int4": "w4a16", "int8-w8a8": "w8a8", "w8a8-int8": "w8a8",
                   # vLLM's `quantization` names for the same bytes run by another kernel (fuzz review §3)
                   "awq-marlin": "awq", "gptq-marlin": "gptq"}


def _lookup(registry: dict, aliases: dict[str, str], name: str, what: str):
    """A format by name or alias (case and '_' vs '-' do not matter); a one-line UsageError listing the known ones."""
    key = name.strip().lower().replace("_", "-")
    key = aliases.get(key, key)
    if key not in registry:
        raise UsageError(f"unknown {what} {shown(name)}; known: {', '.join(registry)}")
    return registry[key]


def weight_format(name: str) -> WeightFormat:
    return _lookup(WEIGHT_FORMATS, _WEIGHT_ALIASES, name, "weight format")


# --------------------------------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvFormat:
    name: str
    label: str
    description: str
    bits: int  # stored bits per cached element (not counting scales)
    group_size: int  # elements sharing one scale (+ zero); 0 when there are none
    scale_tensors: int  # per group: 2 (scale and zero/shift) for hqq/quanto, 0 for plain dtypes
    residual_length: int  # newest tokens kept in the compute dtype before re-quantizing (HF quantized cache)
    backend: str | None  # transformers cache_config backend, or None
    vllm_name: str | None  # vLLM kv_cache_dtype, or None when vLLM has no such cache
    native_min_compute_capability: float | None
    needs_unpack: bool
    quality_risk: str
    # How vLLM lays one token of one KV head out in a page (v1/kv_cache_interface.py AttentionSpec.page_size_bytes /
    # real_page_size_bytes): "plain" (bits/8 per element), "per_token_head" (bits/8 per element + one fp32 scale per
    # token, head and side), "nvfp4" (two fp4 values per byte + one fp8 scale per 16 elements). See vllm_side_bytes.
    vllm_layout: str = "plain"
    vllm_since: str | None = None  # first vLLM release whose --kv-cache-dtype accepts vllm_name (None: all of them)
    # NVIDIA compute-capability majors where vLLM has an attention backend for this cache (None: every GPU that runs
    # the element type); elsewhere vLLM refuses at start-up ("kv_cache_dtype not supported")
    vllm_cc_majors: tuple[int, ...] | None = None
    vllm_backends: str = ""  # the attention backends that read this cache, as vLLM's source lists them
    source: str = ""  # where the layout is read from

    @property
    def hf_quantized(self) -> bool:
        return self.backend is not None

    def vllm_side_bytes(self, head_dim: int, compute_dtype_bytes: int) -> int:
        """Bytes vLLM stores for one token of one KV head on one side (K or V), scales included: page_size_bytes /
        (block_size x num_kv_heads) summed over K and V is vllm_side_bytes(Dk) + vllm_side_bytes(Dv).

        plain:          D x element bytes (auto: the model dtype; fp8: 1)
        per_token_head: D x bits/8 + 4 (AttentionSpec.page_size_bytes adds 2 x block x heads x fp32 for the
                        per-token-head scales of K and V; int4 packs two values per byte: head_size // 2)
        nvfp4:          D // 2 + D // 16 (utils/torch_utils.py:nvfp4_kv_cache_full_dim: fp4 data + fp8 block scales)
        """
        if self.vllm_layout == "nvfp4":
            return head_dim // 2 + head_dim // 16
        if self.vllm_layout == "per_token_head":
            return head_dim * self.bits // 8 + 4
        return head_dim * self.element_bytes(compute_dtype_bytes)

    def vllm_bytes_per_element(self, compute_dtype_bytes: int, head_dim: int = 128) -> float:
        """Average stored bytes per cached element in vLLM (scales included), for a head of head_dim."""
        return self.vllm_side_bytes(head_dim, compute_dtype_bytes) / head_dim

    def element_bytes(self, compute_dtype_bytes: int) -> int:
        """Bytes per element for plain (byte-aligned) formats; for the quantized ones use quantized_bytes."""
        if self.bits == 0:
            return compute_dtype_bytes
        if self.group_size or self.bits % 8 or self.vllm_layout != "plain":
            raise AssertionError(f"{self.name} has no whole byte count per element (scales or packed values)")
        return self.bits // 8

    def quantized_bytes(self, n_elements: int, compute_dtype_bytes: int) -> int:
        """Bytes of n elements stored in this format, scales and zeros included (the quantized part only)."""
        if not self.group_size:
            return n_elements * self.element_bytes(compute_dtype_bytes)
        groups = _ceil_div(n_elements, self.group_size)
        if self.backend == "quanto":
            # optimum-quanto groups to (groups, group_size) (tensor/grouped.py) and packs 8/bits group rows per
            # uint8 row, padding the row count (tensor/packed.py pack_weights)
            packed = _ceil_div(groups, 8 // self.bits) * self.group_size
        else:  # hqq packs along the group axis (core/bitpack.py): exact
            packed = _ceil_div(n_elements * self.bits, 8)
        return packed + groups * self.scale_tensors * compute_dtype_bytes

    def bits_per_element(self, compute_dtype_bytes: int) -> float:
        """Average stored bits per element: 4-bit with group 64 and 2-byte scale+zero gives 4.5."""
        if not self.group_size:
            return 8.0 * self.element_bytes(compute_dtype_bytes)
        return self.bits + self.scale_tensors * compute_dtype_bytes * 8 / self.group_size


_PTH_SOURCE = ("vllm v1/kv_cache_interface.py AttentionSpec.page_size_bytes: real page + 2 x block_size x "
               "num_kv_heads x 4 B of fp32 per-token-head scales (vllm@001cabc1); accepted by "
               "v1/attention/backends/triton_attn.py only")
_NVFP4_SOURCE = ("vllm utils/torch_utils.py:nvfp4_kv_cache_full_dim = head_size // 2 + head_size // 16 per side "
                 "(uint8), FullAttentionSpec.real_page_size_bytes (vllm@001cabc1); sm_100 only: vllm#43562 / "
                 "vllm#49011 (sm_120 gated out), the Triton software path vllm#44389 closed")


def _quantized(backend: str, bits: int, risk: str) -> KvFormat:
    return KvFormat(name=f"{backend}-{bits}", label=f"{backend.upper() if backend == 'hqq' else backend} {bits}-bit KV",
                    description=f"transformers QuantizedCache, backend {backend}, {bits}-bit, group 64, scale+zero "
                    "per group, 128-token full-precision residual", bits=bits, group_size=64, scale_tensors=2,
                    residual_length=128, backend=backend, vllm_name=None, native_min_compute_capability=None,
                    needs_unpack=True, quality_risk=risk)


KV_FORMATS: dict[str, KvFormat] = {
    f.name: f
    for f in (
        KvFormat(name="auto", label="BF16 KV", description="the model dtype (bf16)", bits=0, group_size=0,
                 scale_tensors=0, residual_length=0, backend=None, vllm_name="auto",
                 native_min_compute_capability=None, needs_unpack=False, quality_risk="none"),
        KvFormat(name="fp8", label="FP8 KV", description="fp8 e4m3, per-layer scale (vLLM kv_cache_dtype=fp8)",
                 bits=8, group_size=0, scale_tensors=0, residual_length=0, backend=None, vllm_name="fp8",
                 native_min_compute_capability=8.9, needs_unpack=False, quality_risk="low"),
        KvFormat(name="fp8-e5m2", label="FP8 e5m2 KV", description="fp8 e5m2 (vLLM kv_cache_dtype=fp8_e5m2)",
                 bits=8, group_size=0, scale_tensors=0, residual_length=0, backend=None, vllm_name="fp8_e5m2",
                 native_min_compute_capability=8.9, needs_unpack=False, quality_risk="low"),
        # vLLM's sub-16-bit caches beyond fp8 (config/cache.py CacheDType; layouts: v1/kv_cache_interface.py)
        KvFormat(name="int8-per-token-head", label="INT8 KV (per token-head)",
                 description="int8 with one fp32 scale per token and KV head, K and V each (vLLM "
                 "kv_cache_dtype=int8_per_token_head, dynamic: no calibration); TRITON_ATTN only", bits=8,
                 group_size=0, scale_tensors=0, residual_length=0, backend=None, vllm_name="int8_per_token_head",
                 native_min_compute_capability=None, needs_unpack=False, quality_risk="low",
                 vllm_layout="per_token_head", vllm_since="0.24.0", vllm_backends="TRITON_ATTN",
                 source=_PTH_SOURCE),
        KvFormat(name="fp8-per-token-head", label="FP8 KV (per token-head)",
                 description="fp8 e4m3 with one fp32 scale per token and KV head (vLLM "
                 "kv_cache_dtype=fp8_per_token_head); TRITON_ATTN only, sm_89+ (Triton's fp8 type)", bits=8,
                 group_size=0, scale_tensors=0, residual_length=0, backend=None, vllm_name="fp8_per_token_head",
                 native_min_compute_capability=8.9, needs_unpack=False, quality_risk="low",
                 vllm_layout="per_token_head", vllm_since="0.24.0", vllm_backends="TRITON_ATTN",
                 source=_PTH_SOURCE),
        KvFormat(name="int4-per-token-head", label="INT4 KV (per token-head)",
                 description="int4, two values per byte, one fp32 scale per token and KV head (vLLM "
                 "kv_cache_dtype=int4_per_token_head); TRITON_ATTN only", bits=4, group_size=0, scale_tensors=0,
                 residual_length=0, backend=None, vllm_name="int4_per_token_head",
                 native_min_compute_capability=None, needs_unpack=True, quality_risk="moderate",
                 vllm_layout="per_token_head", vllm_since="0.28.0", vllm_backends="TRITON_ATTN",
                 source=_PTH_SOURCE + "; int4: head_size // 2 bytes per side (real_page_size_bytes, "
                 "KVQuantMode.INT4_PER_TOKEN_HEAD); first seen shipped in 0.28.0 (approximate release)"),
        KvFormat(name="nvfp4", label="NVFP4 KV",
                 description="NVFP4: e2m1 values, two per byte, one fp8 e4m3 scale per 16 (vLLM "
                 "kv_cache_dtype=nvfp4, vllm#40177); FlashInfer trtllm-gen kernels, sm_100 only", bits=4,
                 group_size=0, scale_tensors=0, residual_length=0, backend=None, vllm_name="nvfp4",
                 native_min_compute_capability=10.0, needs_unpack=True, quality_risk="moderate",
                 vllm_layout="nvfp4", vllm_since="0.21.0", vllm_cc_majors=(10,),
                 vllm_backends="FLASHINFER (trtllm-gen FMHA)", source=_NVFP4_SOURCE),
        KvFormat(name="nvfp4-4over6", label="NVFP4 KV (4-over-6 scales)",
                 description="the NVFP4 layout, each 16-value scale chosen between max/6 and max/4 by squared "
                 "error (vLLM kv_cache_dtype=nvfp4_4over6, config/cache.py)", bits=4, group_size=0,
                 scale_tensors=0, residual_length=0, backend=None, vllm_name="nvfp4_4over6",
                 native_min_compute_capability=10.0, needs_unpack=True, quality_risk="moderate",
                 vllm_layout="nvfp4", vllm_since="0.28.0", vllm_cc_majors=(10,),
                 vllm_backends="FLASHINFER (trtllm-gen FMHA)",
                 source=_NVFP4_SOURCE + "; get_kv_quant_mode: every name starting 'nvfp4' but nvfp4_ds_mla is "
                 "KVQuantMode.NVFP4. First release approximate: absent from CacheDType at vllm@001cabc1 (a pre-0.28 "
                 "commit, no int4_per_token_head yet), present at vllm@002f10e0"),
        _quantized("hqq", 8, "none"),
        _quantized("hqq", 4, "low"),
        _quantized("hqq", 2, "moderate"),
        _quantized("quanto", 4, "low"),
        _quantized("quanto", 2, "high"),
    )
}


_KV_ALIASES = {"bf16": "auto", "fp16": "auto", "default": "auto",
               # vLLM's kv_cache_dtype 'bfloat16'/'float16' on a 16-bit model is its 'auto' (fuzz review §3)
               "bfloat16": "auto", "float16": "auto", "half": "auto", "fp8-e4m3": "fp8", "e4m3": "fp8",
               "e5m2": "fp8-e5m2", "hqq4": "hqq-4", "hqq2": "hqq-2", "quanto4": "quanto-4", "quanto2": "quanto-2",
               "int4": "hqq-4", "4bit": "hqq-4", "2bit": "hqq-2",
               "int8": "hqq-8", "hqq8": "hqq-8", "8bit": "hqq-8",
               # vLLM spellings of the same bytes: fp8_inc is Intel Gaudi's fp8 (1 byte, per-tensor scale);
               # fp8_ds_mla is the fp8 sparse-MLA record DeepSeek V3.2 / GLM-5 use when fp8 is asked (656 B/token,
               # engines/vllm_specs.py)
               "fp8-inc": "fp8", "fp8-ds-mla": "fp8",
               "int8-pth": "int8-per-token-head", "fp8-pth": "fp8-per-token-head",
               "int4-pth": "int4-per-token-head"}

# vLLM kv_cache_dtype values kvcalc knows but whose layout it does not model: refused with the reason rather than
# sized wrong (UsageError in kv_format)
UNMODELLED_VLLM_KV = {
    "nvfp4-ds-mla": "its sparse-MLA record size differs between the public implementations (368, 400, 432 and a "
                    "584 B envelope per token are all in circulation) and no release source was read",
    "turboquant-k8v4": "TurboQuant slots (quantization/turboquant/config.py slot_size_aligned) keep the first and "
                       "last 2 layers in the model dtype and pad pages; not modelled yet",
    "turboquant-4bit-nc": "see turboquant-k8v4", "turboquant-k3v4-nc": "see turboquant-k8v4",
    "turboquant-3bit-nc": "see turboquant-k8v4",
}


def kv_format(name: str) -> KvFormat:
    key = name.strip().lower().replace("_", "-") if isinstance(name, str) else name
    if key in UNMODELLED_VLLM_KV:
        why = UNMODELLED_VLLM_KV[key]
        if why.startswith("see "):
            why = UNMODELLED_VLLM_KV[why[4:]]
        raise UsageError(f"KV cache format {shown(name)}: vLLM accepts it, but kvcalc does not model it: {why}")
    return _lookup(KV_FORMATS, _KV_ALIASES, name, "KV cache format")
