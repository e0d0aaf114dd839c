"""Decode speed from bytes moved per step (the roofline), with a fixed per-step cost and a compute roof.

t_step = t_fixed + max(bytes_read * (1 + conversion) / achievable_bandwidth, flops / achievable_flops)
tokens/s = batch / t_step. One efficiency factor cannot fit a 1B and a 70B model at once; the fixed term and the
bandwidth term can. Constants live in kvcalc/data/throughput.yaml with their source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .constants import load
from .formats import KvFormat, WeightFormat
from .hardware import GpuProfile
from .engines.hf import hf_bytes_per_token
from .engines.vllm_specs import vllm_bytes_per_token
from .layers import FullAttention, MultiLatentAttention
from .model import ModelSpec
from .units import ceil_div
from .engines.weights import weight_bytes_read_per_token


@dataclass
class DecodeEstimate:
    tokens_per_s: float
    step_s: float
    fixed_s: float
    memory_s: float
    compute_s: float
    weight_bytes_read: float
    kv_bytes_read: float
    bound: str  # "memory" or "compute"
    notes: list[str] = field(default_factory=list)


def _emulated(min_cc: float | None, gpu: GpuProfile) -> bool:
    """A format whose kernels need NVIDIA compute capability min_cc runs emulated below it. AMD profiles state no CUDA
    compute capability (null); MI300X's CDNA3 matrix cores do FP8 natively, so FP8 (min_cc 8.9 on NVIDIA: Ada and
    Hopper) is the one such format that is native there."""
    return min_cc is not None and (gpu.compute_capability or 0.0) < min_cc and not (
        gpu.vendor == "amd" and min_cc == 8.9)


def decode_speed(spec: ModelSpec, gpu: GpuProfile, engine: str, weights: WeightFormat, kv: KvFormat, batch: int,
                 context: int, enforce_eager: bool = False, tp: int = 1, dtype_bytes: int = 2,
                 pp: int = 1, kv_bytes_per_token: float | None = None) -> DecodeEstimate:
    """Decode tokens/s of `batch` requests at `context` tokens.

    kv_bytes_per_token: the deployment's KV bytes per token of context, as the plan row shows it (vLLM: the
    VllmEstimate's deployment_kv_bytes_per_token, so Mamba state and capped sliding windows count as they are
    stored). None: every attention layer counted in full per token (vllm_specs.vllm_bytes_per_token x tp).

    Pipeline parallel (pp > 1): vLLM keeps pp batches in flight (config/vllm.py:max_concurrent_batches), so the batch
    runs as m = min(pp, batch) micro-batches; each stage holds 1/pp of the layers and a token passes the pp stages in
    turn. A round in which every request gains one token takes pp stage steps of one micro-batch, each reading the
    stage's weights and its micro-batch's KV: weights are re-read per micro-batch, so PP spreads the KV reads but not
    the weight reads (decode of one request is no faster than on one GPU). Each stage pays the fixed step cost (an
    assumption until measured: every stage is its own process launching its own graphs)."""
    data = load("throughput")
    costs = data["conversion_cost_per_byte"]
    notes: list[str] = []
    e = data["engines"][engine]
    layers = spec.num_layers / pp  # per stage
    if engine == "vllm":
        fixed = (e["eager_fixed_step_s"] + e["eager_per_layer_s"] * layers) if enforce_eager \
            else e["fixed_step_s"]
        if tp > 1:
            fixed += e["tp_comm_per_layer_s"] * layers  # an all-reduce after attention and after the MLP
        kv_per_token = kv_bytes_per_token if kv_bytes_per_token is not None \
            else vllm_bytes_per_token(spec.layers, kv, dtype_bytes, tp) * tp
    else:
        fixed = e["fixed_step_s"] + e["per_layer_s"] * layers
        if kv.hf_quantized:
            fixed += e["kv_per_layer_s"][kv.backend] * layers  # dequantize + re-quantize bookkeeping
        if weights.name.startswith("nf4"):
            fixed += e["nf4_per_layer_s"] * layers  # bitsandbytes dequantize kernels per Linear
        kv_per_token = hf_bytes_per_token(spec.layers, kv, dtype_bytes)

    micro_batches = min(pp, batch)
    micro = batch / micro_batches  # requests per micro-batch (pp = 1: the whole batch)
    w_bytes = weight_bytes_read_per_token(spec, weights, ceil_div(batch, micro_batches), dtype_bytes)
    kv_bytes = kv_per_token * context * micro
    w_cost = 1.0
    if weights.needs_unpack and not (engine == "hf" and weights.name.startswith("nf4")):
        w_cost += costs.get(weights.name.split("-")[0], 1.5)
    if _emulated(weights.native_min_compute_capability, gpu) and weights.name == "fp8":
        w_cost += costs["emulated_fp8"]
        notes.append(f"FP8 weights are emulated on {gpu.name}")
    kv_cost = 1.0
    if _emulated(kv.native_min_compute_capability, gpu):
        kv_cost += costs["emulated_fp8"]
        notes.append(f"FP8 KV is emulated on {gpu.name} (compute capability {gpu.compute_capability}): "
                     "upcast on every read")
    fitted = data.get("fitted_bandwidth", {}).get(gpu.id)
    per_gpu = fitted["decode_bytes_per_s"] if fitted else gpu.memory_bandwidth_bytes_per_s * \
        gpu.achievable_bandwidth_fraction
    if not fitted:
        notes.append(f"{gpu.name}: decode bandwidth = datasheet x {gpu.achievable_bandwidth_fraction} "
                     "(assumption until measured)")
    bandwidth = per_gpu * tp
    # pp stage steps per round, each reading 1/pp of the bytes: pp * (bytes / pp) / bandwidth
    memory_s = (w_bytes * w_cost + kv_bytes * kv_cost) / bandwidth

    attn_flops = 0
    for layer in spec.layers:
        if isinstance(layer, MultiLatentAttention):
            attn_flops += 4 * layer.num_heads * (layer.kv_lora_rank + layer.qk_rope_head_dim)
        elif isinstance(layer, FullAttention):
            attn_flops += 4 * spec.num_heads * layer.head_dim
    flops = micro * (2 * spec.params.active + attn_flops * context)
    peak = gpu.flops_for("bf16") or gpu.flops_for("fp16") or gpu.flops_for("fp32") or 1e12
    compute_s = flops / (peak * data["compute"]["achievable_flops_fraction"] * tp)
    fixed *= pp
    step = fixed + max(memory_s, compute_s)  # one round: every request gains a token
    if pp > 1:
        notes.append(f"pipeline parallel: {micro_batches} micro-batch(es) in flight over {pp} stages; a round of "
                     f"one token per request takes {pp} stage steps (weights re-read per micro-batch)")
    return DecodeEstimate(
        tokens_per_s=batch / step, step_s=step, fixed_s=fixed, memory_s=memory_s, compute_s=compute_s,
        weight_bytes_read=w_bytes, kv_bytes_read=kv_bytes, bound="memory" if memory_s >= compute_s else "compute",
        notes=notes + [f"speed constants: {e['source']}"],
    )
