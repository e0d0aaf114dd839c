"""Decode and prefill time per engine step, from the physics of each kernel class (speed model v2, issue 11).

vLLM: one step runs, per GPU, a handful of kernel classes: the weight GEMMs (GEMV at small batch) of the dense
Linears, the MoE experts' grouped GEMM, attention over the KV cache, the sampler, and the TP all-reduces. Each costs

    max(bytes / achievable bandwidth, FLOPs / achievable tensor rate, conversion ops / CUDA-core rate)

because a kernel overlaps its memory traffic, its tensor-core math and its ALU work (dequantizing 4-bit weights,
upcasting FP8 where the GPU has no FP8 conversion): whichever is longest sets its time. The step adds a fixed
overhead (launches, sampling bookkeeping, scheduling; CUDA graphs make it about a millisecond) and, for MoE, a
per-layer cost of the routing kernels. That is why the same 4-bit weights speed decode up by nearly their byte ratio
on a bandwidth-poor GPU (the unpack hides under the memory time) and by little on an H200 (the unpack is the roof),
and why emulated FP8 costs a T4 but not an L4.

Constants: kvcalc/data/speed.yaml (fitted per GPU architecture where measured, else derived from the datasheet in
kvcalc/hardware_profiles/). transformers keeps its own step model (eager PyTorch is bound by per-layer Python and
launch time, kvcalc/data/throughput.yaml's `hf` section).
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from dataclasses import dataclass, field

from .allreduce import link_for
from .constants import load
from .engines.hf import hf_bytes_per_token
from .engines.vllm_specs import vllm_bytes_per_token
from .engines.weights import vllm_text_weight_bytes, weight_bytes, weight_bytes_read_per_token
from .formats import KvFormat, WeightFormat, kv_format
from .hardware import GpuProfile
from .layers import ChunkedLocal, CompressedSparseAttention, FullAttention, MultiLatentAttention, SlidingWindow, flatten
from .memo import per_object
from .model import ModelSpec
from .units import ceil_div


@dataclass(frozen=True)
class Kernel:
    """One kernel class of a step, per GPU: what it moves and computes, and the time each resource needs."""

    name: str
    bytes: float
    flops: float
    conversion_ops: float
    memory_s: float
    compute_s: float
    alu_s: float

    overlap: float = float("inf")  # the norm that combines the three times (inf: their max)

    @property
    def time_s(self) -> float:
        """The three resources overlap: the kernel takes the longest of them (overlap = inf) or, where the GPU
        cannot overlap them perfectly, their p-norm with p = overlap (fitted; a kernel near its ridge point is
        slower than either roof alone). Elementwise where the kernel was evaluated over a batch array."""
        parts = (self.memory_s, self.compute_s, self.alu_s)
        if any(_is_array(x) for x in parts):
            return _array_time(parts, self.overlap)
        if self.overlap == float("inf"):
            return max(parts)
        top = max(parts)
        if top <= 0:
            return 0.0
        return top * sum((x / top) ** self.overlap for x in parts) ** (1 / self.overlap)

    @property
    def bound(self) -> str:
        """The resource with the longest time (memory on a tie)."""
        return max((self.memory_s, "memory"), (self.compute_s, "compute"), (self.alu_s, "alu"),
                   key=lambda pair: pair[0])[1]


def _is_array(x) -> bool:
    return hasattr(x, "shape")


def _array_time(parts: tuple, overlap: float):
    """Kernel.time_s over arrays: the same operations, in the same order, elementwise."""
    import numpy as np

    top = np.maximum(np.maximum(parts[0], parts[1]), parts[2])
    if overlap == float("inf"):
        return top
    with np.errstate(divide="ignore", invalid="ignore"):
        total = 0
        for x in parts:
            total = total + _pow(x / top, overlap)
        return np.where(top <= 0, 0.0, top * _pow(total, 1 / overlap))


def _pow(base, exponent):
    """base ** exponent elementwise (either may be an array) with the C library's pow, as Python's float ** computes
    it: numpy's own power may take a SIMD path (AVX-512 builds) that rounds the last bit differently, and an array
    row must equal its scalar twin. NaN stays NaN (the p-norm's 0/0 where a kernel takes no time)."""
    import numpy as np

    b, e = np.broadcast_arrays(np.asarray(base, dtype=float), np.asarray(exponent, dtype=float))
    return np.fromiter((math.pow(x, y) if x == x else x for x, y in zip(b.ravel(), e.ravel())), dtype=float,
                       count=b.size).reshape(b.shape)


def _at_least(x, floor):
    """max(x, floor), elementwise for a batch array."""
    if _is_array(x):
        import numpy as np

        return np.maximum(x, floor)
    return max(x, floor)


def _div_or_zero(a, b):
    """a / b, 0 where a is 0 (a kernel with no FLOPs or conversion ops has no time for them)."""
    if _is_array(a):
        import numpy as np

        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(a != 0, a / b, 0.0)
    return a / b if a else 0.0


@dataclass
class DecodeEstimate:
    tokens_per_s: float
    step_s: float
    fixed_s: float
    memory_s: float
    compute_s: float
    weight_bytes_read: float
    kv_bytes_read: float
    bound: str  # "memory", "compute" or "alu": the resource that sets the longest kernel class
    notes: list[str] = field(default_factory=list)
    kernels: tuple[Kernel, ...] = ()
    # the GPU's step (fixed + kernels) where the engine's rules make the step longer (workload.vllm_decode_step: the
    # piecewise graphs' CPU floor, V0's eager forward and host work); None: step_s is the GPU's step
    gpu_step_s: float | None = None


@dataclass(frozen=True)
class GpuRates:
    """What one GPU achieves, per resource. `measured`: fitted on runs of this GPU; else derived from its datasheet."""

    bandwidth: float  # bytes/s a decode kernel reaches
    tensor: float  # FLOP/s of dense GEMMs in the compute dtype
    tensor_fp8: float | None  # FLOP/s of FP8 GEMMs (None: no FP8 tensor cores)
    attention_tensor: float  # FLOP/s of flash attention (prefill)
    gemm_half_rows: float  # rows per GEMM (tokens per expert for MoE) at which it reaches half its tensor rate
    alu: float  # CUDA-core operations/s (the datasheet FP32 rate)
    step_overhead_s: float
    moe_layer_overhead_s: float
    overlap: float  # p of the p-norm combining a kernel's memory, tensor and ALU times
    measured: bool
    source: str
    tp_comm_per_layer_s: float | None = None  # the user's calibration (kvcalc calibrate --bench); None: throughput.yaml
    # bytes/s of the all-reduce's data path at TP > 1, from the user's calibration; None: not a term of its own (on
    # NVLink the per-layer constant holds it; across PCIe or pods the bytes of a large batch dominate)
    link_bandwidth: float | None = None
    # the GPU whose interconnect model prices its TP all-reduces (kvcalc/allreduce.py): every GPU without its own fit
    # or calibration of the all-reduce; None: the per-layer constant above (or throughput.yaml's, the H200's fit)
    link_gpu: GpuProfile | None = None


# --- class constants: what transfers from the GPUs the public corpus measured to a GPU of the same kind ----------------
# A GPU without its own fit takes its rates from the datasheet times factors shared by every GPU of its class (fitted on
# the public speed corpus by scripts/speed_corpus_report.py --write-classes, held-out errors in docs/validation):
#   bandwidth[memory_type]  achieved fraction of the datasheet bandwidth in decode kernels (HBM2e, GDDR6X, ...): the
#                           memory technology (and the power limit that comes with the board class) sets it;
#   bandwidth["all"]        the fraction pooled over every memory technology the corpus measured, for a technology
#                           without a class of its own (the corpus fitted the same 0.831 on GDDR6, GDDR6X and HBM2e,
#                           each from one GPU type: a technology's own class was that GPU's fit and transferred to
#                           no other, so held out its GPU fell back to the profile's assumed 0.85-0.9)
#   tensor[architecture]    multiplier on the H200-derived tensor-core efficiency (Ampere/Ada/Hopper/Blackwell/CDNA3:
#                           the kernels vLLM runs on each generation differ: FA2 vs FA3, Marlin vs Machete, hipBLASLt)
#   step[stack]             multiplier on the fixed step overhead (CUDA graphs on CUDA, HIP graphs on ROCm)
#   comm[link]              no longer fitted: the TP all-reduce is the interconnect's model (kvcalc/allreduce.py,
#                           constants from published NCCL/RCCL numbers in kvcalc/data/interconnect.yaml)
# (the serve front end's share of TTFT is workload.frontend_s, measured on the H200 host: CPU work, not a GPU class)
CLASS_BOUNDS = {"bandwidth": (0.4, 0.95), "tensor": (0.2, 2.0), "step": (0.25, 6.0), "comm": (0.5, 40.0)}
_CLASS_OVERRIDE: dict | None = None


def default_classes() -> dict:
    return {kind: {} for kind in CLASS_BOUNDS}


def class_keys(gpu: GpuProfile) -> dict[str, str]:
    """The classes a GPU belongs to, one per kind of class constant."""
    form = (gpu.form_factor or "").lower()
    if gpu.vendor == "amd":
        link = "xgmi"  # Infinity Fabric between OAM modules
    elif "sxm" in form:
        link = "nvlink"
    elif "consumer" in form:
        link = "pcie-consumer"  # GeForce cards: no peer-to-peer over PCIe, NCCL stages all-reduces through the host
    else:
        link = "pcie"  # datacenter/workstation PCIe cards: P2P over PCIe (an NVLink bridge pairs two at most)
    # board class: a module (SXM/OAM) sustains its tensor clocks at full power; a PCIe board of the same chip runs at
    # a lower power limit and throttles under sustained tensor load
    board = "module" if ("sxm" in form or "oam" in form) else "pcie"
    stack = "rocm" if gpu.vendor == "amd" else "cuda"
    return {"bandwidth": gpu.memory_type or "unknown", "tensor": f"{gpu.architecture or 'unknown'}-{board}",
            "step": stack, "comm": link}


def shipped_classes() -> dict:
    """speed.yaml's fitted class constants (empty where none was fitted)."""
    data = load("speed").get("classes") or {}
    return {kind: dict(data.get(kind) or {}) for kind in CLASS_BOUNDS}


def active_classes() -> dict:
    return _CLASS_OVERRIDE if _CLASS_OVERRIDE is not None else shipped_classes()


@contextlib.contextmanager
def class_override(classes: dict | None):
    """Evaluate with other class constants (the corpus fit and its held-out refits); None: speed.yaml's; {}: none."""
    global _CLASS_OVERRIDE
    before = _CLASS_OVERRIDE
    _CLASS_OVERRIDE = None if classes is None else {k: dict((classes or {}).get(k) or {}) for k in CLASS_BOUNDS}
    try:
        yield
    finally:
        _CLASS_OVERRIDE = before


POOLED = "all"  # the key of a kind's class pooled over every class of that kind (bandwidth only)


def class_factors(gpu: GpuProfile) -> dict[str, float | None]:
    """The class constants that apply to `gpu` (None: no fit for its class; the H200-derived default stands). A
    memory technology without its own bandwidth class takes the pooled one (POOLED), where the corpus has one."""
    classes = active_classes()
    out = {kind: classes.get(kind, {}).get(key) for kind, key in class_keys(gpu).items()}
    if out.get("bandwidth") is None:
        out["bandwidth"] = classes.get("bandwidth", {}).get(POOLED)
    return out


def class_labels(gpu: GpuProfile) -> dict[str, str]:
    """The class each of class_factors' values came from, as the evidence lines name it (a memory technology without
    its own bandwidth class reads 'all (pooled)')."""
    classes = active_classes()
    return {kind: key if key in classes.get(kind, {}) or kind != "bandwidth" else f"{POOLED} (pooled)"
            for kind, key in class_keys(gpu).items()}


def write_classes(classes: dict, intervals: dict | None, held_out: dict | None,
                  classes_source: str | None = None) -> None:
    """Write the corpus fit into kvcalc/data/speed.yaml (`classes`, `intervals`), keeping the rest of the file;
    classes_source: the classes' source line where they are kept from an earlier fit (--write-intervals)."""
    from importlib import resources

    import yaml

    path = resources.files("kvcalc") / "data" / "speed.yaml"
    text = str(path.read_text()).split("\n# --- public-corpus classes")[0].rstrip() + "\n"
    block = {"classes": {k: {kk: float(vv) for kk, vv in sorted(v.items())} for k, v in classes.items() if v},
             "intervals": json.loads(json.dumps(intervals or {}))}  # copies: equal bands must not dump as YAML aliases
    block["classes"]["source"] = classes_source or (
        "fitted by scripts/speed_corpus_report.py --write-classes on docs/validation/data/speed-corpus/corpus.jsonl "
        "(public vLLM results, each row quoted); held-out errors (leave-one-GPU-out, leave-one-source-out) in "
        "docs/validation/speed-gpus.md")
    if intervals:
        block["intervals"]["source"] = (
            "10th-90th percentile of the held-out errors per metric class (leave-one-GPU-out and leave-one-source-out "
            "pooled); by_gpu.<gpu>.bands: the GPU's own leave-one-GPU-out errors, bounded by order statistics that "
            "hold >= 80% of new results (basis own: >= 10 rows of the figure's class; family: >= 10 of its decode or "
            "prefill rows, the class band widened to their speed residuals; pooled: the same over all its rows; few: "
            "the class band widened to hold each of them); by_gpu.<gpu>.coverage: the share of its held-out results "
            "inside (class: class bands alone; loo_row: each left out of its GPU's band; loo_source: each source "
            "left out) (scripts/speed_corpus_report.py gpu_band, gpu_coverage); a figure's low/high is "
            "figure x (1 + low/high)")
    # leaf maps in flow style ({low: .., high: .., n: ..}): one line per band, the per-GPU bands included
    Path(str(path)).write_text(text + "\n# --- public-corpus classes (scripts/speed_corpus_report.py --write-classes; "
                               "do not edit by hand)\n" + yaml.safe_dump(block, sort_keys=False, width=120,
                                                                         default_flow_style=None))
    load.cache_clear()


def gemm_ratio(gpu: GpuProfile) -> float:
    """How much closer to (or further from) its datasheet peak the GPU's GEMMs run than the reference GPU's: the
    measured BF16 torch.mm rate over the datasheet's dense peak, the GPU's over the H200's (both in their profiles,
    one public benchmark script on every card: hardware_profiles/*.yaml sources). The datasheet peak is the rated
    boost clock's; a GeForce card runs above it (RTX 4090 1.00, RTX 5090 1.14 of its datasheet), a power-limited PCIe
    board below (H100 PCIe 0.66, L4 0.59), the H200 at 0.80. A GPU without native BF16 (T4, V100) computes in FP16:
    its FP16 torch.mm rate over its FP16 tensor peak (measured_fp16_matmul_flops, the same benchmark's FP16 column).
    1.0 where either figure is missing."""
    from .hardware import get_gpu

    ref = get_gpu(load("speed")["derived"]["reference_gpu"])
    if gpu.native_bf16:
        peak, measured = gpu.flops_for("bf16") or gpu.flops_for("fp16"), gpu.measured_bf16_matmul_flops
    else:
        peak = gpu.flops_for("fp16")
        measured = getattr(gpu, "measured_fp16_matmul_flops", None) or gpu.measured_bf16_matmul_flops
    ref_peak = ref.flops_for("bf16")
    if not (measured and peak and ref.measured_bf16_matmul_flops and ref_peak):
        return 1.0
    return (measured / peak) / (ref.measured_bf16_matmul_flops / ref_peak)


def _reference_peak(data: dict) -> float:
    """The dense tensor peak of the GPU the derived ratios come from (its rows to fill the GPU scale with it)."""
    from .hardware import get_gpu

    ref = get_gpu(data["derived"]["reference_gpu"])
    return ref.flops_for("bf16") or 1.0


def gpu_rates(gpu: GpuProfile, calibrated: bool = True) -> GpuRates:
    """The GPU's rates: speed.yaml's fit for its architecture, else its datasheet x the reference GPU's fractions.
    A profile carrying the user's speed calibration (kvcalc calibrate --bench: kvcalc/calibrate.py CalibratedGpu)
    replaces the constants it fitted (decode bandwidth, step overhead, tensor efficiency, TP all-reduce time;
    attention's efficiency moves with the tensor one); calibrated=False ignores it (transformers rows: the
    calibration measured vLLM's kernels)."""
    # a pure function of the profile (its calibration included) and the class constants: one search asks for it
    # thousands of times; under class_override (the corpus fit's refits) it is computed afresh
    if _CLASS_OVERRIDE is not None:
        return _gpu_rates(gpu, calibrated)
    return per_object("gpu_rates", (gpu,), (calibrated,), lambda: _gpu_rates(gpu, calibrated))


def _gpu_rates(gpu: GpuProfile, calibrated: bool) -> GpuRates:
    data = load("speed")
    fit = data["measured"].get(gpu.id)
    c = fit or data["derived"]
    factors = class_factors(gpu) if not fit else {}
    bandwidth_fraction = factors.get("bandwidth") or gpu.achievable_bandwidth_fraction
    bandwidth = fit["bandwidth_bytes_per_s"] if fit else gpu.memory_bandwidth_bytes_per_s * bandwidth_fraction
    step, tensor_fraction, source = c["step_overhead_s"], c["tensor_fraction"], c["source"]
    comm = None
    factors.pop("comm", None)  # the all-reduce is the interconnect model's (link_gpu), not a fitted factor
    gemm = 1.0 if fit else gemm_ratio(gpu)
    if gemm != 1.0:  # the measured GEMM rate in place of the datasheet's (the classes fit what is left over)
        tensor_fraction *= gemm
        source = f"tensor rate x{gemm:.3f} (measured BF16 torch.mm / datasheet, over the H200's); {source}"
    if not fit and any(v is not None for v in factors.values()):
        step *= factors.get("step") or 1.0
        tensor_fraction *= factors.get("tensor") or 1.0
        labels = class_labels(gpu)
        used = ", ".join(f"{kind} {labels[kind]} {v:g}" for kind, v in factors.items() if v is not None)
        source = f"public-corpus class constants ({used}; speed.yaml classes) on the datasheet; the rest: {source}"
    cal = getattr(gpu, "speed_calibration", None) if calibrated else None
    if cal is not None:
        bandwidth = cal.bandwidth_bytes_per_s or bandwidth
        step = cal.step_overhead_s or step
        tensor_fraction = cal.tensor_fraction or tensor_fraction
        source = f"your calibration ({cal.describe()}; {getattr(gpu, 'speed_source', '') or 'kvcalc calibrate'}); " \
                 f"the rest: {source}"
    peak = (gpu.flops_for("bf16") if gpu.native_bf16 else None) or gpu.flops_for("fp16") or \
        gpu.flops_for("fp32") or 1e12
    fp8 = gpu.flops_for("fp8") if gpu.native_fp8 else None
    alu = gpu.flops_for("fp32") or peak / 8
    return GpuRates(
        bandwidth=bandwidth, tensor=peak * tensor_fraction,
        tensor_fp8=fp8 * tensor_fraction if fp8 else None,
        attention_tensor=peak * c["attention_tensor_fraction"] * (
            tensor_fraction / c["tensor_fraction"] if tensor_fraction != c["tensor_fraction"] else 1.0),
        gemm_half_rows=c["gemm_half_rows"] * (1.0 if fit else peak / _reference_peak(data)),
        alu=alu, step_overhead_s=step, moe_layer_overhead_s=c["moe_layer_overhead_s"],
        overlap=float(c["overlap"]), measured=fit is not None or cal is not None, source=source,
        tp_comm_per_layer_s=cal.tp_comm_per_layer_s if cal is not None and cal.tp_comm_per_layer_s else comm,
        link_bandwidth=getattr(cal, "link_bandwidth_bytes_per_s", None) if cal is not None else None,
        # the interconnect model (kvcalc/allreduce.py) for every GPU, the measured ones too: its NVLink latency is the
        # H200 runs' fitted tp_comm_per_layer_s (two calls a layer), and its bytes term is what a TP prefill or a
        # large batch moves (it was left out for measured GPUs, so an 8x H200 step moved its hidden states for free);
        # the user's calibration of the all-reduce replaces it
        link_gpu=None if (cal is not None and (cal.tp_comm_per_layer_s or
                                               getattr(cal, "link_bandwidth_bytes_per_s", None))) else gpu)


def _emulated(min_cc: float | None, gpu: GpuProfile) -> bool:
    """A format whose kernels need NVIDIA compute capability min_cc runs emulated below it. AMD profiles state no CUDA
    compute capability (null); MI300X's CDNA3 matrix cores do FP8 natively, so FP8 (min_cc 8.9 on NVIDIA: Ada and
    Hopper) is the one such format that is native there."""
    return min_cc is not None and (gpu.compute_capability or 0.0) < min_cc and not (
        gpu.vendor == "amd" and min_cc == 8.9)


def fp8_weight_path(gpu: GpuProfile) -> str:
    """Which kernel vLLM runs an FP8 checkpoint's Linears (and MoE experts) through on this GPU:
    - "native": FP8 tensor cores (sm_89+, and CDNA3 on AMD): the activations are quantized per token and the GEMM
      runs in FP8 (CUTLASS / DeepGEMM / hipBLASLt), the H200-fitted fp8_weights count;
    - "marlin": sm_75-sm_86 (T4, A100, A10G, RTX 3090, A6000) have no FP8 tensor cores, so vLLM runs the
      checkpoint as weight-only FP8 through Marlin (model_executor/layers/quantization/utils/marlin_utils_fp8.py
      apply_fp8_marlin_linear, chosen where the GPU lacks capability 89: Fp8LinearMethod use_marlin, Fp8MoEMethod's
      fused_marlin_moe): weights read at 1 byte, dequantized to 16 bits in registers inside the GEMM and multiplied
      on the bf16/fp16 tensor cores. Marlin's FP8 dequant is a few integer ops per element (csrc/quantization/
      gptq_marlin/dequant.h dequant<..., kFE4M3fn>: mask, shift, or per pair, the exponent bias folded into the
      scales), the same pipeline as its 4-bit dequant, so it costs the H200-fitted Marlin count (int4_weights).
      Turing since vllm#29901 (Marlin for sm_75: is_fp8_marlin_supported is capability 75); before it vLLM refused
      FP8 checkpoints below capability 80 (Fp8Config.get_min_capability), so no release upcasts them in software;
    - "emulated-legacy": below sm_75 (Volta): no Marlin kernel upstream; a software upcast (fp8_emulated_extra on top
      of fp8_weights: an assumption, no such GPU measured)."""
    if not _emulated(8.9, gpu):
        return "native"
    return "marlin" if (gpu.compute_capability or 0.0) >= 7.5 else "emulated-legacy"


def weight_conversion_ops(weights: WeightFormat, gpu: GpuProfile) -> float:
    """ALU operations per quantized weight element a decode GEMM spends converting it to the compute dtype."""
    ops = load("speed")["conversion_ops_per_element"]
    if weights.name == "fp8":
        path = fp8_weight_path(gpu) if _emulated(weights.native_min_compute_capability, gpu) else "native"
        if path == "marlin":
            return ops["int4_weights"]
        return ops["fp8_weights"] + (ops["fp8_emulated_extra"] if path == "emulated-legacy" else 0.0)
    if weights.needs_unpack and weights.bits == 4:
        return ops["int4_weights"]
    if weights.needs_unpack:
        return ops["fp8_weights"]  # 8-bit integer weights: a convert and a scale, as native FP8
    return 0.0


def fp8_kv_path(gpu: GpuProfile) -> str:
    """Which FP8-KV attention path vLLM runs on this GPU, for its dequantization cost (speed.yaml
    conversion_ops_per_element):
    - "hopper": FlashAttention 3's FP8 path (sm_90) and its successors: the H200-fitted fp8_kv count;
    - "fused-upcast": an attention kernel that upcasts FP8 in registers (FlashInfer / Triton on sm_80-sm_89, vLLM PR
      #24577): the count of fp8_kv_fused, bounded by A100 measurements (vllm#42058: decode with FP8 KV no slower);
    - "emulated-legacy": below sm_80 (Turing, Volta): no fused FP8 attention kernel; the software upcast of
      fp8_emulated_extra on top (an assumption: no such GPU measured)."""
    cc = gpu.compute_capability or 0.0
    if gpu.vendor == "amd" or cc >= 9.0:
        return "hopper"
    return "fused-upcast" if cc >= 8.0 else "emulated-legacy"


def kv_conversion_ops(kv: KvFormat, gpu: GpuProfile) -> float:
    """ALU operations per cached element attention spends on a vLLM cache below 16 bits (convert, scale), by the
    attention path vLLM runs on the GPU (fp8_kv_path): the H200-fitted fp8_kv on sm_90 (and AMD), fp8_kv_fused where
    the kernel upcasts in registers (sm_80-sm_89), plus the software upcast fp8_emulated_extra below sm_80.

    The formats vLLM added after 0.26 (formats.py, vllm-next): 8-bit caches (fp8, and int8 / fp8 with per-token-head
    scales, whose one fp32 scale per head vector is noise beside the per-element convert) cost the path's 8-bit count;
    4-bit ones (int4_per_token_head, nvfp4) unpack two values per byte first, so they also pay the fitted int4 weight
    unpack (int4_weights). nvfp4 runs only where its conversion is native (sm_100, see formats.KvFormat.vllm_cc_majors).
    An assumption until a 4-bit KV cache is measured."""
    if kv.vllm_name is None or kv.bits not in (4, 8):
        return 0.0
    ops = load("speed")["conversion_ops_per_element"]
    path = fp8_kv_path(gpu)
    if path == "hopper":
        base = ops["fp8_kv"]
    else:
        base = ops.get("fp8_kv_fused", ops["fp8_kv"])
        if path == "emulated-legacy" and kv.bits == 8:
            base += ops["fp8_emulated_extra"]
    unpack = ops["int4_weights"] if kv.bits == 4 else 0.0
    return base + unpack


def decode_windows(spec: ModelSpec, kv: KvFormat, dtype_bytes: int = 2, tp: int = 1) -> tuple[tuple[int, float], ...]:
    """The windows a decode step's attention reads, as (W, share): the share of the per-token KV bytes of all
    attention layers (each counted in full, vllm_specs.vllm_bytes_per_token) that the layers of W hold. W > 0: a
    sliding window of W tokens; W = -C < 0: chunked local layers of chunk C (Llama 4's attention_chunk_size).

    vLLM's decode attention reads only a sliding layer's last W tokens, whatever its pool keeps: the Triton unified
    kernel starts its tile loop at the window's first tile and masks the rest (vllm/v1/attention/ops/
    triton_unified_attention.py, v0.26.0 :399-419; SLIDING_WINDOW = 1 + window_size[0], the query token included),
    and the FlashAttention backend passes window_size = (W - 1, 0) to flash_attn_varlen_func, whose kernel skips the
    key blocks left of the window. A chunked local layer (ChunkedLocal) runs the same kernels over "virtual" requests
    cut at chunk boundaries: make_local_attention_virtual_batches (vllm/v1/attention/backends/utils.py, at 00bd149
    ~:246, tokens_in_last_block = attn_chunk_size + seq_lens % -attn_chunk_size) gives a decode token of context c
    (position c - 1) one virtual request of ((c - 1) mod C) + 1 keys, its own chunk's. So one request of context c
    reads full_bytes * c + sum over W of window_bytes_W * min(c, W) + sum over C of chunk_bytes_C *
    (((c - 1) mod C) + 1) (effective_context). Empty: no sliding or chunked layer."""
    return per_object("decode_windows", (spec, kv), (dtype_bytes, tp),
                      lambda: _decode_windows(spec, kv, dtype_bytes, tp))


def _decode_windows(spec: ModelSpec, kv: KvFormat, dtype_bytes: int, tp: int) -> tuple[tuple[int, float], ...]:
    from .engines.vllm_specs import vllm_page_bytes

    total = float(vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp))
    if total <= 0:
        return ()
    by_window: dict[int, float] = {}
    for layer in flatten(spec.layers):
        if isinstance(layer, SlidingWindow) and layer.window > 0:
            key = -layer.window if isinstance(layer, ChunkedLocal) else layer.window
            by_window[key] = by_window.get(key, 0.0) + vllm_page_bytes(layer, 1, kv, dtype_bytes, tp)
    return tuple((w, b / total) for w, b in sorted(by_window.items()) if b > 0)


def effective_context(windows: tuple[tuple[int, float], ...], context):
    """The tokens of context a decoding request's attention reads, in units of a token read by every attention layer
    (decode_windows): c - sum over windows W of share_W * max(c - W, 0) - sum over chunks C of share_C * C *
    floor((c - 1) / C) (a chunked layer reads ((c - 1) mod C) + 1, its own chunk). Exact at integer contexts (the
    context of one decode step); floats and numpy arrays alike; `context` itself where there is no window. Where a
    mean over a decode's positions is wanted, take mean_effective_context, not this at the mean context."""
    out = context
    for w, share in windows:
        if w < 0:  # chunked local layers of chunk -w
            before = context - 1
            out = out - share * (-w) * ((before * (before > 0)) // (-w))
            continue
        over = context - w
        out = out - share * (over * (over > 0))
    return out


def mean_effective_context(windows: tuple[tuple[int, float], ...], c_lo: int, c_hi: int) -> float:
    """The mean of effective_context over the integer contexts c_lo..c_hi (a decode's positions, as a closed form
    that charges one mean context takes them); c_lo itself where c_hi < c_lo."""
    import numpy as np

    if c_hi < c_lo or not windows:
        return float(c_lo + c_hi) / 2 if c_hi >= c_lo else float(c_lo)
    c = np.arange(int(c_lo), int(c_hi) + 1, dtype=np.float64)
    return float(np.mean(effective_context(windows, c)))


def effective_context_sum(windows: tuple[tuple[int, float], ...], contexts, steps: int = 0):
    """sum_i effective_context(c_i + j) over a batch of contexts `contexts`; steps = 0: that sum (a float); steps = k:
    an array over j = 0..k-1 (each request gains a token a step: serve_sim's decode stretch), in
    O((n + k) log n) by sorting the distances to each window (and each request's place in its chunk)."""
    import numpy as np

    c = np.asarray(contexts, dtype=np.float64)
    j = np.arange(max(steps, 1), dtype=np.float64)
    out = c.sum() + len(c) * j
    for w, share in windows:
        if w < 0:  # chunked: request i at step j reads c_i + j - C * floor((c_i + j - 1) / C)
            size = -w
            before = np.maximum(c - 1, 0)
            q, r = np.floor(before / size), np.sort(np.mod(before, size))
            # floor((before_i + j) / C) = q_i + #{m >= 1: r_i + j >= m C}; counted per m over the sorted r
            crossed = np.zeros_like(j)
            for m in range(1, int((j[-1] + size - 1) // size) + 2):
                crossed = crossed + (len(r) - np.searchsorted(r, m * size - j, side="left"))
            out = out - share * size * (q.sum() + crossed)
            continue
        d = np.sort(c - w)  # request i reads past the window from step j > -d_i on
        suffix = np.concatenate((np.cumsum(d[::-1])[::-1], [0.0]))  # sum of d[k:] for k = 0..n
        first = np.searchsorted(d, -j, side="right")  # the first request with d + j > 0
        out = out - share * (suffix[first] + (len(d) - first) * j)
    return out if steps else float(out[0])


def attention_flops_per_token(spec: ModelSpec) -> float:
    """Tensor FLOPs one query token spends per cached token it attends to, over all layers (QK^T and PV)."""
    return per_object("attention_flops", (spec,), (), lambda: _attention_flops_per_token(spec))


def _attention_flops_per_token(spec: ModelSpec) -> float:
    flops = 0
    for layer in spec.layers:
        if isinstance(layer, MultiLatentAttention):
            flops += 4 * layer.num_heads * (layer.kv_lora_rank + layer.qk_rope_head_dim)
        elif isinstance(layer, FullAttention):
            flops += 4 * spec.num_heads * layer.head_dim
        elif isinstance(layer, CompressedSparseAttention) and layer.compress_ratio > 1:
            # DeepSeek V4: a query reads one compressed entry per compress_ratio cached tokens (its sliding window
            # is a constant, not a per-cached-token cost; the CSA top-k bound is not modelled)
            flops += 4 * spec.num_heads * layer.head_dim / layer.compress_ratio
    return flops


def mha_attention_flops_per_token(spec: ModelSpec) -> float:
    """attention_flops_per_token with every MLA layer decompressed, as an MHA prefill runs it (the latent
    up-projected to per-head keys of qk_nope + qk_rope and values of v_head: QK^T 2 x heads x (nope + rope), PV
    2 x heads x v per attended pair; SGLang's forward_normal, DeepSeek-V2-Lite 10,240 FLOPs a layer where the absorbed
    kernel's 4 x heads x (kv_lora + rope) is 36,864); the other layers as attention_flops_per_token counts them."""
    absorbed = attention_flops_per_token(spec)
    for layer in spec.layers:
        if isinstance(layer, MultiLatentAttention):
            absorbed += (2 * layer.num_heads * (layer.qk_nope_head_dim + layer.qk_rope_head_dim + layer.v_head_dim)
                         - 4 * layer.num_heads * (layer.kv_lora_rank + layer.qk_rope_head_dim))
    return absorbed


def expected_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts `tokens` tokens route to, in expectation, with uniform independent routing:
    E * (1 - (1 - k/E)^tokens)."""
    if num_experts <= 0:
        return 0.0
    base = 1 - top_k / num_experts
    return num_experts * (1 - (_pow(base, tokens) if _is_array(tokens) else base ** tokens))


@dataclass(frozen=True)
class WeightSplit:
    """The weights of one forward, split into the dense part (read whole every step) and the routed experts."""

    dense_bytes: float  # everything a step reads but the routed experts (embedding table excluded)
    dense_params: float  # parameters a token multiplies with outside the routed experts (lm_head included)
    expert_bytes: float  # one routed expert, all MoE layers
    expert_params: float
    quantized_fraction: float  # share of the dense params stored in the quantized format
    num_experts: int
    top_k: int
    moe_layers: int


def weight_split(spec: ModelSpec, weights: WeightFormat, dtype_bytes: int = 2) -> WeightSplit:
    return per_object("weight_split", (spec, weights), (dtype_bytes,), lambda: _weight_split(spec, weights, dtype_bytes))


def _weight_split(spec: ModelSpec, weights: WeightFormat, dtype_bytes: int = 2) -> WeightSplit:
    total = vllm_text_weight_bytes(spec, weights, dtype_bytes)  # as vLLM loads them; a step runs no encoder
    embed = spec.params.embedding * dtype_bytes if not spec.tie_word_embeddings else 0
    ratio = total / max(spec.params.total, 1)
    active = spec.params.active - (spec.params.embedding if not spec.tie_word_embeddings else 0)
    quantized = spec.linear_params / max(spec.params.total, 1) if weights.quantizes_linears else 0.0
    if spec.moe is None or spec.params.active_mlp is None or spec.moe.num_experts <= spec.moe.experts_per_token:
        # a checkpoint's exact total below its embedding table cannot be read as negative bytes (a fractional
        # power of them is complex); checkpoint.py refuses partial checkpoints, this keeps the formula total
        return WeightSplit(max(total - embed, 0), active, 0.0, 0.0, quantized, 0, 0, 0)
    e, k = spec.moe.num_experts, spec.moe.experts_per_token
    per_expert = (spec.params.mlp - spec.params.active_mlp) / (e - k)
    expert_bytes = per_expert * ratio
    # an average bytes-per-parameter ratio over-counts experts when only they are quantized (a checkpoint's own
    # format, e.g. gpt-oss MXFP4 experts with bf16 attention): never let the dense part go below nothing
    dense_bytes = max(total - embed - e * expert_bytes, 0.0)
    return WeightSplit(dense_bytes, active - k * per_expert, expert_bytes, per_expert, quantized, e, k,
                       spec.moe.moe_layers or spec.num_layers)


def replicated_linear(spec: ModelSpec, weights: WeightFormat, tp: int, dtype_bytes: int = 2) -> tuple[float, float, float]:
    """What each TP rank's dense GEMMs hold beyond a 1/tp share, as (projection params, router params, bytes): the
    same parts the capacity model loads on every rank (engines/vllm.py replicated_parts: K/V heads when tp exceeds
    them, MLA's q_a/kv_a down projections, DeepSeekV2FusedQkvAProjLinear with disable_tp=True, models/deepseek_v2.py
    :953-967, and the MoE router, a ReplicatedLinear). A decode step reads them whole on every rank and a prefill
    multiplies them whole: DeepSeek-R1 at TP 8 reads 0.87 GB more a step per rank than 1/8 of its dense weights."""
    return per_object("replicated_linear", (spec, weights), (tp, dtype_bytes),
                      lambda: _replicated_linear(spec, weights, tp, dtype_bytes))


def _replicated_linear(spec: ModelSpec, weights: WeightFormat, tp: int, dtype_bytes: int) -> tuple[float, float, float]:
    from .engines.vllm import replicated_parts

    kv, mla, router = replicated_parts(spec, tp)
    if not (kv or mla or router):
        return 0.0, 0.0, 0.0
    total = vllm_text_weight_bytes(spec, weights, dtype_bytes)
    embed, head = spec.params.embedding * dtype_bytes, spec.params.lm_head * dtype_bytes
    body_params = max(spec.params.total - spec.params.embedding - spec.params.lm_head, 1)
    per_param = (total - embed - head) / body_params  # the checkpoint's mean bytes a body parameter, as vllm.py
    proj = float(kv + mla)
    return proj, float(router), proj * per_param + router * dtype_bytes  # the router stays in the model dtype


MMA_ROWS = 16  # rows of one Hopper/Ampere/Ada tensor-core MMA tile (PTX mma.m16n8k16)


def _padded(rows: float) -> float:
    if _is_array(rows):
        import numpy as np

        return np.where(rows > 0, np.ceil(rows / MMA_ROWS) * MMA_ROWS, 0.0)
    return math.ceil(rows / MMA_ROWS) * MMA_ROWS if rows > 0 else 0.0


def gemm_rate(peak: float, rows: float, half_rows: float) -> float:
    """A GEMM of `rows` rows fills its tiles and waves only partly: its achieved rate is peak x rows / (rows +
    half_rows), the shape of tile under-fill (an MoE expert's rows are the tokens routed to it)."""
    if _is_array(rows):
        import numpy as np

        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(rows > 0, peak * rows / (rows + half_rows), peak)
    return peak * rows / (rows + half_rows) if rows > 0 else peak


def _kernel(name: str, nbytes: float, flops: float, ops: float, bandwidth: float, tensor: float,
            alu: float, overlap: float) -> Kernel:
    return Kernel(name, nbytes, flops, ops, nbytes / bandwidth, _div_or_zero(flops, tensor),
                  _div_or_zero(ops, alu), overlap)


def sglang_moe_block_m(gpu, num_experts: int, expert_width: float, weights, tokens: float) -> int:
    """BLOCK_SIZE_M of SGLang's fused MoE for a batch of `tokens` tokens: the tuned config's (throughput.yaml
    engines.sglang tuned_moe_block_m: the grid key closest to the tokens, the first on a tie) where SGLang has a file
    for this GPU, expert count, expert width per rank and 16-bit weights; else the default config's, 16 for batches of
    at most num_experts tokens and 64 above (fused_moe_triton_config.py:229-243 get_default_config in 0.5.14)."""
    if weights is not None and getattr(weights, "name", "") in ("bf16", "fp16"):
        for entry in load("throughput")["engines"]["sglang"].get("tuned_moe_block_m", ()):
            if (entry["gpu"] == getattr(gpu, "id", None) and entry["experts"] == num_experts
                    and entry["expert_width"] == expert_width):
                grid = {int(k): int(v) for k, v in entry["block_m"].items()}
                return grid[min(grid, key=lambda m: abs(m - tokens))]
    return 16 if tokens <= num_experts else 64


def _sglang_block_rows(rows: float, tokens: float, num_experts: int, block: int | None = None) -> float:
    """An expert's rows as SGLang's fused MoE multiplies them: moe_align_block_size pads each expert's tokens to a
    multiple of the config's BLOCK_SIZE_M (srt/layers/moe/moe_runner/triton_utils/fused_moe.py:406-408 in 0.5.14),
    so a block holds BLOCK_SIZE_M rows whether or not they are filled (`block`: sglang_moe_block_m; None: the default
    config's). An expert of fewer rows than a block pays the block; one of more pays half a block more on average
    (its count's last block is a uniform fraction full)."""
    if block is None:
        block = 16 if tokens <= num_experts else 64
    if rows <= block:
        return float(block)
    return rows + block / 2


def forward_kernels(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, tokens: int,
                    kv_read_bytes: float, attention_pairs: float, tp: int = 1, dtype_bytes: int = 2,
                    rates: GpuRates | None = None, prefill: bool = False,
                    logit_rows: float | None = None, sglang_moe: bool = False) -> list[Kernel]:
    """The kernel classes of one forward of `tokens` tokens on one of `tp` GPUs.

    kv_read_bytes: KV bytes attention reads (all GPUs together); attention_pairs: (query token, cached token) pairs
    attended, summed over the tokens (decode: batch x context; prefill: the causal triangle). logit_rows: the rows
    the lm_head multiplies when the engine computes logits only where a token is sampled (SGLang's LogitsProcessor
    prunes an extend batch to each request's last token: srt/layers/logits_processor.py:449-469 in 0.5.14); None:
    the lm_head is counted on every row, as the shared (vLLM-fitted) model has it. sglang_moe: the MoE layers as
    SGLang's Triton fused MoE runs them (_sglang_block_rows, and its silu_and_mul and moe_sum_reduce kernels)."""
    r = rates or gpu_rates(gpu)
    split = weight_split(spec, weights, dtype_bytes)
    w_ops = weight_conversion_ops(weights, gpu)
    fp8_gemm = weights.name == "fp8" and r.tensor_fp8 is not None
    tensor = r.tensor_fp8 if fp8_gemm else r.tensor
    # Decode: Marlin-style kernels dequantize each weight once per 64 rows of the batch (vLLM marlin: up to 4
    # m-blocks of 16 rows per thread block; more rows run as parallel problems that dequantize again). Prefill
    # chunks are tensor-bound and the dequantization overlaps the MMA pipeline, so it is counted once.
    tiles = 1 if prefill else ceil_div(_at_least(tokens, 1), 64)
    dense_elements = split.dense_params * split.quantized_fraction
    # Tensor cores multiply tiles of MMA_ROWS rows: a GEMM of fewer rows (decode at small batch, an MoE expert
    # that few tokens route to) pays for the whole tile (mma.m16n8k16), and small GEMMs fill the GPU's waves only
    # partly (gemm_rate).
    rows = _padded(tokens)
    dense_bytes = split.dense_bytes
    if weights.name.startswith("nf4"):
        # bitsandbytes matmul_4bit (bitsandbytes/autograd/_functions.py, the path vLLM's BitsAndBytesLinearMethod and
        # transformers' Linear4bit take): one input row runs the fused gemv_4bit kernel (NF4 code lookup and absmax
        # scale per weight, ALU-bound on a fast-memory GPU); more rows dequantize the whole weight to 16 bits
        # (dequantize_4bit writes it, the cuBLAS GEMM reads it back): 2 x dtype_bytes more per weight each forward
        ops = load("speed")["conversion_ops_per_element"]
        if tokens <= 1 and not prefill:
            w_ops, tiles = ops["nf4_gemv"], 1
        else:
            w_ops, tiles = ops["nf4_dequant"], 1
            dense_bytes += 2 * dtype_bytes * dense_elements
    # what TP replicates on every rank (replicated_linear): read and multiplied whole, not 1/tp of it
    rep_proj, rep_router, rep_bytes = replicated_linear(spec, weights, tp, dtype_bytes) if tp > 1 else (0.0, 0.0, 0.0)
    rep_params = rep_proj + rep_router
    rep_ops = rep_proj * (w_ops if split.quantized_fraction else 0.0) * tiles  # the router is never quantized
    if logit_rows is None or _is_array(rows) or _padded(logit_rows) >= rows:
        out = [_kernel("linear", dense_bytes / tp + rep_bytes, 2 * rows * (split.dense_params / tp + rep_params),
                       dense_elements * w_ops * tiles / tp + rep_ops, r.bandwidth,
                       gemm_rate(tensor, rows, r.gemm_half_rows), r.alu, r.overlap)]
    else:  # the lm_head multiplies only the rows that sample (logit_rows), each GEMM at its own row-fill rate
        head = min(float(spec.vocab_size) * spec.hidden_size, split.dense_params)
        lm_rows = _padded(logit_rows)
        body, lm = 2 * rows * ((split.dense_params - head) / tp + rep_params), 2 * lm_rows * head / tp
        compute = (_div_or_zero(body, gemm_rate(tensor, rows, r.gemm_half_rows))
                   + _div_or_zero(lm, gemm_rate(tensor, lm_rows, r.gemm_half_rows)))
        ops = dense_elements * w_ops * tiles / tp + rep_ops
        dense_bytes = dense_bytes + rep_bytes * tp  # /tp below: the replicated bytes whole
        out = [Kernel("linear", dense_bytes / tp, body + lm, ops, dense_bytes / tp / r.bandwidth, compute,
                      _div_or_zero(ops, r.alu), r.overlap)]
    if split.num_experts:
        touched = expected_experts(split.num_experts, split.top_k, tokens)
        per_expert = _padded(tokens * split.top_k / _at_least(touched, 1e-9))
        if sglang_moe and not _is_array(per_expert):
            width = spec.moe.expert_intermediate_size / tp if spec.moe is not None else 0
            per_expert = _sglang_block_rows(per_expert, tokens, split.num_experts,
                                            sglang_moe_block_m(gpu, split.num_experts, width, weights, tokens))
        expert_tensor = gemm_rate(tensor, per_expert, r.gemm_half_rows)
        out.append(_kernel("experts", touched * split.expert_bytes / tp,
                           2 * touched * per_expert * split.expert_params / tp,
                           touched * split.expert_params * w_ops * tiles / tp if weights.quantizes_linears else 0.0,
                           r.bandwidth, expert_tensor, r.alu, r.overlap))
        if sglang_moe and spec.moe is not None and spec.moe.expert_intermediate_size:
            # the fused MoE's own memory-bound kernels between its two grouped GEMMs (srt/layers/moe/moe_runner/
            # triton_utils/fused_moe.py in 0.5.14: silu_and_mul reads intermediate_cache1 [tokens x top_k, 2I] and
            # writes intermediate_cache2 [tokens x top_k, I], :543-632; moe_sum_reduce reads intermediate_cache3
            # [tokens, top_k, hidden] (:680) and writes the output [tokens, hidden], :760-800), bf16, every MoE layer
            inter, k = spec.moe.expert_intermediate_size, split.top_k
            act = split.moe_layers * tokens * dtype_bytes * (k * 3 * inter + (k + 1) * spec.hidden_size) / tp
            out.append(_kernel("moe_act", act, 0.0, 0.0, r.bandwidth, r.tensor, r.alu, r.overlap))
    kv_elem_bytes = kv.vllm_bytes_per_element(dtype_bytes) if kv.vllm_name and kv.bits in (4, 8) else dtype_bytes
    attn_flops = attention_flops_per_token(spec) * attention_pairs
    out.append(_kernel("attention", kv_read_bytes / tp, attn_flops / tp,
                       kv_read_bytes / kv_elem_bytes * kv_conversion_ops(kv, gpu) / tp, r.bandwidth,
                       r.attention_tensor if prefill else r.tensor, r.alu, r.overlap))
    link = link_for(r.link_gpu, tp) if r.link_gpu is not None and tp > 1 and not r.link_bandwidth else None
    link_bw = r.link_bandwidth or (link.bus_bytes_per_s if link is not None else None)
    if tp > 1 and link_bw:
        # two all-reduces per layer (after attention, after the MLP) of the tokens' hidden states; a ring moves
        # 2 (tp - 1) / tp of the buffer through each GPU's link (the per-call latency is in _overhead). On NVLink the
        # call is vLLM's custom all-reduce, whose time per call by size and group size is its own measured table
        # (kvcalc/allreduce.py Link.call_s): the kernel's time over the latency _overhead books
        moved = 2 * spec.num_layers * tokens * spec.hidden_size * dtype_bytes * 2 * (tp - 1) / tp
        if link is not None and link.table_s:
            per_call = tokens * spec.hidden_size * dtype_bytes
            t = 2 * spec.num_layers * (link.call_s(tp, per_call) - link.latency_s(tp))
        else:
            t = moved / link_bw
        out.append(Kernel("allreduce", moved, 0.0, 0.0, t, 0.0, 0.0, r.overlap))
    rows = 1 if prefill else tokens
    out.append(_kernel("sampler", rows * spec.vocab_size * 4 * 3, 0.0, rows * spec.vocab_size * 8, r.bandwidth,
                       r.tensor, r.alu, r.overlap))  # fp32 logits: written, read for the softmax, read for the sample
    return out


def _overhead(spec: ModelSpec, engine_consts: dict, rates: GpuRates, layers: float, tp: int, enforce_eager: bool,
              moe: bool) -> float:
    fixed = rates.step_overhead_s
    if tp > 1:
        if rates.tp_comm_per_layer_s is not None:
            comm = rates.tp_comm_per_layer_s
        elif rates.link_gpu is not None:
            comm = 2 * link_for(rates.link_gpu, tp).latency_s(tp)  # the interconnect's per-call latency, twice
        else:
            comm = engine_consts["tp_comm_per_layer_s"]
        fixed += comm * layers  # an all-reduce after attention and after the MLP
    if moe:
        fixed += rates.moe_layer_overhead_s * layers  # routing: top-k, token sort/align, the scatter of outputs
    return fixed


def _eager_cpu_s(engine_consts: dict, layers: float, moe_layers: float = 0.0) -> float:
    """Without CUDA graphs the CPU launches every kernel of a step from Python; the GPU runs behind it, so the step
    takes the longer of the two (the launch time is fitted on eager runs). An MoE layer's experts add their own
    launch path (vLLM's fused_moe: routing, top-k, block alignment and two Triton GEMMs launched from Python each
    layer), `eager_per_moe_layer_s` more per MoE layer."""
    return (engine_consts["eager_fixed_step_s"] + engine_consts["eager_per_layer_s"] * layers
            + engine_consts.get("eager_per_moe_layer_s", 0.0) * moe_layers)


def moe_layer_count(spec: ModelSpec) -> int:
    """Layers with an MoE MLP."""
    return spec.moe.moe_layers if spec.moe is not None else 0


def decode_speed(spec: ModelSpec, gpu: GpuProfile, engine: str, weights: WeightFormat, kv: KvFormat, batch: int,
                 context: int, enforce_eager: bool = False, tp: int = 1, dtype_bytes: int = 2,
                 pp: int = 1, kv_bytes_per_token: float | None = None,
                 positions: tuple[int, int] | None = None) -> DecodeEstimate:
    """Decode tokens/s of `batch` requests at `context` tokens each.

    positions: (first, last) contexts of a decode whose mean step is wanted at the mean `context` (a closed form's
    TPOT): a model with sliding or chunked layers then reads the mean of effective_context over them
    (mean_effective_context; a chunked layer's read is a sawtooth, its value at the mean context is not its mean).
    None: the step at `context`.

    kv_bytes_per_token: the deployment's KV bytes per token of context, as the plan row shows it (vLLM: the
    VllmEstimate's deployment_kv_bytes_per_token, so Mamba state and capped sliding windows count as they are
    stored). None: every attention layer counted in full per token (vllm_specs.vllm_bytes_per_token x tp). A model
    with sliding-window layers reads each layer's bytes per token over the tokens it attends to instead
    (decode_windows, effective_context: a layer of window W reads min(context, W)), whatever its pool keeps.

    Pipeline parallel (pp > 1): vLLM keeps pp batches in flight (config/vllm.py:max_concurrent_batches), so the batch
    runs as m = min(pp, batch) micro-batches; each stage holds 1/pp of the layers and a token passes the pp stages in
    turn. A round in which every request gains one token takes pp stage steps of one micro-batch, each reading the
    stage's weights and its micro-batch's KV: weights are re-read per micro-batch, so PP spreads the KV reads but not
    the weight reads (decode of one request is no faster than on one GPU). Each stage pays the fixed step cost (an
    assumption until measured: every stage is its own process launching its own graphs)."""
    if engine != "vllm":
        return hf_decode_speed(spec, gpu, weights, kv, batch, context, dtype_bytes)
    e = load("throughput")["engines"]["vllm"]
    rates = gpu_rates(gpu)
    notes: list[str] = []
    kv_per_token = kv_bytes_per_token if kv_bytes_per_token is not None \
        else vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp) * tp
    windows = decode_windows(spec, kv, dtype_bytes, tp)
    read = context
    if windows:  # a sliding layer reads its window, not what its pool keeps (decode_windows): every layer's bytes per
        # token at its full rate, over the tokens each layer reads
        kv_per_token = vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp) * tp
        read = effective_context(windows, context) if positions is None \
            else mean_effective_context(windows, *positions)
    micro_batches = min(pp, batch)
    micro = ceil_div(batch, micro_batches)  # requests per micro-batch (pp = 1: the whole batch)
    kv_bytes = kv_per_token * read * (batch / micro_batches)
    kernels = forward_kernels(spec, gpu, weights, kv, micro, kv_bytes, micro * read, tp, dtype_bytes, rates)
    layers = spec.num_layers / pp  # per stage
    fixed = _overhead(spec, e, rates, layers, tp, enforce_eager, spec.moe is not None) * pp
    gpu_s = sum(k.time_s for k in kernels)  # pp stage steps per round, each 1/pp of the work
    step = fixed + gpu_s
    if enforce_eager:
        step = max(step, _eager_cpu_s(e, layers, moe_layer_count(spec) / pp) * pp)
        notes.append("eager mode: the step is the longer of the CPU's kernel launches and the GPU's work")
    if kv.bits == 8 and kv.vllm_name is not None and fp8_kv_path(gpu) == "emulated-legacy":
        notes.append(f"FP8 KV on {gpu.name} (compute capability {gpu.compute_capability}): no fused FP8 attention "
                     "kernel below sm_80, a software upcast of every cached element on the CUDA cores "
                     "(assumption: fp8_emulated_extra is unmeasured)")
    elif kv.bits == 8 and kv.vllm_name is not None and _emulated(kv.native_min_compute_capability, gpu):
        notes.append(f"FP8 KV on {gpu.name} (compute capability {gpu.compute_capability}): upcast in registers by "
                     "the attention kernel (FlashInfer/Triton), hidden under the cache read (vllm#42058, A100)")
    if weights.name == "fp8" and _emulated(weights.native_min_compute_capability, gpu):
        if fp8_weight_path(gpu) == "marlin":
            notes.append(f"FP8 weights are emulated on {gpu.name} (no FP8 tensor cores below sm_89): weight-only FP8 "
                         "through Marlin, 1 byte a weight read and dequantized to 16 bits inside the GEMM")
        else:
            notes.append(f"FP8 weights are emulated on {gpu.name}: weight-only FP8, upcast on the CUDA cores")
    if not rates.measured:
        frac = rates.bandwidth / gpu.memory_bandwidth_bytes_per_s if gpu.memory_bandwidth_bytes_per_s else 0.0
        classed = "public-corpus class constants" in rates.source
        notes.append(f"{gpu.name}: not measured by kvcalc; rates derived from its datasheet (bandwidth x {frac:.3g}, "
                     "tensor and FP32 rates x the H200's fitted fractions"
                     + (" x its classes' factors fitted on public results of other GPUs)" if classed else ")"))
    if tp > 1 and rates.link_gpu is not None:
        notes.append(f"TP all-reduce: {link_for(gpu, tp).describe(tp)}, twice per layer (kvcalc/data/interconnect.yaml)")
    if pp > 1:
        notes.append(f"pipeline parallel: {micro_batches} micro-batch(es) in flight over {pp} stages; a round of "
                     f"one token per request takes {pp} stage steps (weights re-read per micro-batch)")
    longest = max(kernels, key=lambda k: k.time_s)
    weight_read = sum(k.bytes for k in kernels if k.name in ("linear", "experts")) * tp
    return DecodeEstimate(
        tokens_per_s=batch / step, step_s=step, fixed_s=fixed,
        memory_s=sum(k.memory_s for k in kernels), compute_s=sum(k.compute_s for k in kernels),
        weight_bytes_read=weight_read, kv_bytes_read=kv_bytes, bound=longest.bound,
        notes=notes + [f"speed constants: {rates.source}"], kernels=tuple(kernels))


def prefill_s(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, input_len: int,
              chunk_tokens: int, tp: int = 1, dtype_bytes: int = 2, kv_bytes_per_token: float | None = None,
              enforce_eager: bool = False) -> float:
    """vLLM's prefill of one prompt of `input_len` tokens, alone, chunked at max_num_batched_tokens: each chunk is
    one step that reads the weights (all experts a chunk of that many tokens touches), multiplies every token with
    them, attends causally over the prompt so far, and pays the step overhead."""
    e = load("throughput")["engines"]["vllm"]
    rates = gpu_rates(gpu)
    kv_per_token = kv_bytes_per_token if kv_bytes_per_token is not None \
        else vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp) * tp
    total, start = 0.0, 0
    chunk = max(1, chunk_tokens)
    overhead = _overhead(spec, e, rates, spec.num_layers, tp, enforce_eager, spec.moe is not None)
    while start < input_len:
        n = min(chunk, input_len - start)
        pairs = n * start + n * (n + 1) / 2  # causal: token t attends to t + 1 positions
        kernels = forward_kernels(spec, gpu, weights, kv, n, kv_per_token * start, pairs, tp, dtype_bytes, rates,
                                  prefill=True)
        step = overhead + sum(k.time_s for k in kernels)
        if enforce_eager:
            step = max(step, _eager_cpu_s(e, spec.num_layers, moe_layer_count(spec)))
        total += step
        start += n
    return total


def hf_layer_launch_s(spec: ModelSpec) -> float:
    """Host time eager PyTorch spends launching one decoder layer's kernels at kvcalc's reference host: the
    Llama-fitted per_layer_s (~46 kernels: 2 RMSNorms, q/k/v/o, rotary, cache cat, SDPA, the MLP, residual adds;
    transformers 5.17 modeling_llama.py LlamaDecoderLayer.forward), plus the launches of the extra RMSNorms an
    architecture puts in a layer: each an eager chain of rmsnorm_kernels (cast, pow, mean, add, rsqrt, mul, cast,
    mul weight; *RMSNorm.forward) at the layer's cost per kernel, not fitted. Llama/Mistral/Qwen2 have 2 norms per
    layer (Qwen2's q/k/v biases ride in addmm: no launch more); Qwen3 adds q/k norms (4); Gemma 2 sandwiches the MLP
    and attention (4); Gemma 3 does both (6)."""
    e = load("throughput")["engines"]["hf"]
    norms = e.get("norms_per_layer", {}).get(spec.model_type, 2)
    per_kernel = e["per_layer_s"] / e["layer_kernels"]
    return e["per_layer_s"] + (norms - 2) * e["rmsnorm_kernels"] * per_kernel


def hf_layer_kernels(spec: ModelSpec, kv: KvFormat) -> float:
    """GPU kernels one decoder layer launches in a decode step (torch.profiler counts, v4 runs): the Llama layer's,
    the extra norms', and the quantized cache's dequantize-and-cat chain (cache_utils.py QuantizedLayer.update)."""
    e = load("throughput")["engines"]["hf"]
    norms = e.get("norms_per_layer", {}).get(spec.model_type, 2)
    n = e["layer_kernels"] + (norms - 2) * e["rmsnorm_kernels"]
    return n + (e["kv_kernels_per_layer"] if kv.hf_quantized else 0)


def hf_host_scale(launch_us: float | None) -> float:
    """A host's speed against kvcalc's reference host, from scripts/gpu_v5/hf_decode_interleaved.py's probe (us per
    tiny eager kernel launch): the decode step's host time scales with it (docs/validation/README.md, transformers
    decode). None: the reference host."""
    if launch_us is None:
        return 1.0
    return launch_us / load("throughput")["engines"]["hf"]["reference_launch_us"]


def _hf_fixed_s(spec: ModelSpec, weights: WeightFormat, kv: KvFormat, host_scale: float = 1.0) -> float:
    """The host's time per forward: generate()'s per-step work and the layers' launches (each layer's own, the
    quantized cache's dequantize/cat chain, bitsandbytes' dequantize kernels), at the reference host x host_scale."""
    e = load("throughput")["engines"]["hf"]
    fixed = e["step_host_layers"] * e["per_layer_s"] + hf_layer_launch_s(spec) * spec.num_layers
    if kv.hf_quantized:
        fixed += e["kv_per_layer_s"][kv.backend] * spec.num_layers  # dequantize + cat bookkeeping, per layer
    if weights.name.startswith("nf4"):
        fixed += e["nf4_per_layer_s"] * spec.num_layers  # bitsandbytes dequantize kernels per Linear
    return fixed * host_scale


def _pnorm(a: float, b: float, p: float) -> float:
    top = max(a, b)
    return top * ((a / top) ** p + (b / top) ** p) ** (1 / p) if top > 0 else 0.0


def hf_prefill_s(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, input_len: int,
                 batch: int = 1, dtype_bytes: int = 2, host_scale: float = 1.0) -> float:
    """transformers' prefill: one forward over batch x input_len tokens (no chunking), eager: the per-layer launch
    time overlapping the kernels (GEMMs over every prompt token, causal SDPA)."""
    tokens = batch * input_len
    pairs = batch * input_len * (input_len + 1) / 2
    kernels = forward_kernels(spec, gpu, weights, kv, tokens, 0.0, pairs, 1, dtype_bytes,
                              rates=gpu_rates(gpu, calibrated=False), prefill=True)
    quantize = 0.0
    if kv.hf_quantized:  # QuantizedLayer quantizes the whole prompt at prefill, layer by layer (cache_utils.py)
        quantize = load("throughput")["engines"]["hf"]["kv_prefill_per_layer_s"][kv.backend] * spec.num_layers
    # eager PyTorch: the CPU launches the layers while the GPU runs the queued kernels, so the two overlap as a
    # kernel's resources do (the same p-norm); the prompt's quantization runs after the forward
    cpu, gpu_s = _hf_fixed_s(spec, weights, kv, host_scale), sum(k.time_s for k in kernels if k.name != "sampler")
    return _pnorm(cpu, gpu_s, gpu_rates(gpu, calibrated=False).overlap) + quantize


_PLAIN_KV = kv_format("auto")  # the compute-dtype cache a quantized one dequantizes to


def hf_decode_speed(spec: ModelSpec, gpu: GpuProfile, weights: WeightFormat, kv: KvFormat, batch: int,
                    context: float, dtype_bytes: int = 2, kv_read_bytes: float | None = None,
                    host_scale: float = 1.0) -> DecodeEstimate:
    """transformers (eager PyTorch) decode step: the host's launches (generate()'s per-step work + per layer, by
    architecture and cache: _hf_fixed_s) and the GPU's work (bytes / bandwidth, each eager kernel's floor, the
    cache's copy passes) run concurrently: the CPU queues kernels while the GPU runs the ones before, and generate()
    synchronizes once a step (its stopping check), so the step is their p-norm (the prefill's and a kernel's
    overlap), not their sum. Fitted on H200 runs (kvcalc/data/throughput.yaml `hf`); host_scale: the host's speed
    against the reference host (hf_host_scale). kv_read_bytes: the cache bytes a step reads (default: a long
    context's bytes per token x context x batch)."""
    data = load("throughput")
    costs = data["conversion_cost_per_byte"]
    notes: list[str] = []
    e = data["engines"]["hf"]
    layers = spec.num_layers
    fixed = _hf_fixed_s(spec, weights, kv, host_scale)
    kv_per_token = hf_bytes_per_token(spec.layers, kv, dtype_bytes)
    w_bytes = weight_bytes_read_per_token(spec, weights, batch, dtype_bytes)
    kv_bytes = kv_per_token * context * batch if kv_read_bytes is None else kv_read_bytes
    w_cost = 1.0
    if weights.needs_unpack and not weights.name.startswith("nf4"):
        w_cost += costs.get(weights.name.split("-")[0], 1.5)
    kv_cost = 1.0
    if _emulated(kv.native_min_compute_capability, gpu):
        kv_cost += costs["emulated_fp8"]
    fitted = data.get("fitted_bandwidth", {}).get(gpu.id)
    bandwidth = fitted["decode_bytes_per_s"] if fitted else gpu.memory_bandwidth_bytes_per_s * \
        gpu.achievable_bandwidth_fraction
    if not fitted:
        notes.append(f"{gpu.name}: decode bandwidth = datasheet x {gpu.achievable_bandwidth_fraction} "
                     "(assumption until measured)")
    # the cache's own copies, in passes over the context at the compute dtype (transformers 5.17 cache_utils.py):
    # DynamicLayer.update's torch.cat rewrites the whole cache each step (line 146: a read and a write, 2 passes);
    # QuantizedLayer.update dequantizes the whole quantized past every step (lines 755-758: HQQ's 4-bit unpack 3
    # passes, the zero and the scale 2 each, the cat with the residual 2) and SDPA reads the result at bf16 (1):
    # elementwise and strided-copy kernels, at kv_copy_efficiency of the decode bandwidth
    full = hf_bytes_per_token(spec.layers, _PLAIN_KV, dtype_bytes) * context * batch
    passes = e["kv_dequant_passes"] if kv.hf_quantized else e["kv_cat_passes"]
    memory_s = (w_bytes * w_cost + kv_bytes * kv_cost) / bandwidth \
        + passes * full / (bandwidth * e["kv_copy_efficiency"])
    flops = batch * (2 * spec.params.active + attention_flops_per_token(spec) * context)
    peak = gpu.flops_for("bf16") or gpu.flops_for("fp16") or gpu.flops_for("fp32") or 1e12
    compute_s = flops / (peak * data["compute"]["achievable_flops_fraction"])
    kernels = e["step_kernels"] + hf_layer_kernels(spec, kv) * layers
    gpu_s = max(memory_s, compute_s) + kernels * e["gpu_kernel_s"]
    step = _pnorm(fixed, gpu_s, gpu_rates(gpu, calibrated=False).overlap)
    return DecodeEstimate(
        tokens_per_s=batch / step, step_s=step, fixed_s=fixed, memory_s=memory_s, compute_s=compute_s,
        weight_bytes_read=w_bytes, kv_bytes_read=kv_bytes, bound="memory" if memory_s >= compute_s else "compute",
        notes=notes + [f"speed constants: {e['source']}"])
