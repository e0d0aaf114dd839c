"""vLLM's profile-run torch peak, by mechanism (vLLM 0.26).

vLLM sizes the KV cache after one dummy forward over max_num_batched_tokens (M) and, on the last pipeline stage, one
dummy sampler step over min(max_num_seqs, M) rows (R) of logits (v1/worker/gpu_model_runner.py profile_run). The torch
peak of that call, less what was allocated before it, is `peak_activation_memory`, which comes out of the KV budget.

Every term below is a tensor the CUDA allocator's own history showed live at the peak on the H200 host, with the
source line that allocated it (docs/validation/data/v3: 25 engines, dense, MoE, MLA, Mamba2, Gated DeltaNet, the
allocator's peak equal to vLLM's figure within 2 MiB). Sizes follow from the model's shapes and the settings; the
only hardware facts are the cuBLAS workspace size and the SM count. Nothing here is fitted, except the V2 runner's
sampler per logit (constants.yaml, its tensors were not traced).

The peak is the largest of these phases (each a set of tensors alive at once):
- attention: a standard attention layer's qkv and output beside three M x H tensors (with the MoE workspace held in
  MoE models: Mixtral's peak).
- MLP: a decoder layer's MLP over M tokens: the residual and two projection outputs (3 x M x H) and the gate/up
  output and the activation (3 x M x I / tp), activation dtype.
- MoE layers: the fused-MoE workspace, allocated once by the workspace manager (v1/worker/workspace.py) and kept for
  the rest of the run (modular_kernel.py _allocate_buffers; experts/triton_moe.py workspace_shapes): M x top_k x
  max(I, H) (shared with the output M x H) and M x top_k x max(2I, H).
- MLA: DeepSeek's prefill up-projection workspace, which the profile allocates at its worst size
  (mla_attention.py forward_impl: chunked_prefill_workspace_size x heads x (qk_nope + v)), with q, the output, the
  latent projections and their norms.
- Mamba2: in_proj's output, the SSM output, and two fp32 copies of the gated RMSNorm's input (mamba_mixer2.py).
- sampler (V1 runner): the lm_head's logits, the fp32 logits, the probabilities and the exponential noise (or
  FlashInfer's masked logits and probabilities: the same count) and, without FlashInfer, the Triton top-k/top-p
  buffer of min(SMs, next power of two of R) x vocab fp32 (v1/sample/ops/topk_topp_triton.py), while the forward's
  output and the MoE workspace are still held.
- compile (V2 runner with torch.compile, compiled inside this run): Inductor holds a vocab x hidden copy of the
  embedding table (compilation/compiler_interface.py) and two M x H buffers. vLLM compiles at the first call of the
  model (compilation/decorators.py __call__: aot_compile, then the compiled function runs the dummy batch), which is
  the profile run's dummy forward, inside gpu_worker.py's memory_profiling window. With the AOT artifact stored
  (a restart with the same cache directory: "Directly load AOT compilation from path", decorators.py:313 at 0.30.0)
  that call loads the compiled function instead (torch.compiler.load_compiled_function: no Dynamo, no Inductor), and
  this phase does not happen (`compiled` False: VllmSettings.compile_cache "warm"). The public RTX 5060 Ti pair
  (tests/fixtures/vllm_logs/public/prp-wp24-*) shows the difference as this module predicts it: cold minus warm
  peak 1.09 - 0.53 = 0.56 GiB logged, 0.744 - 0.172 = 0.57 GiB here.
Plus torch's BLAS workspace, allocated at the first matmul of the run (CublasHandlePool.cpp: cuBLAS 32 MiB from
sm90, 4096 KiB x 2 + 16 KiB x 8 before; on AMD Instinct hipBLASLt's 76 MiB, blas_workspace).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..hardware import GpuProfile
from ..layers import MultiLatentAttention, flatten
from ..layer_kinds import mamba2_dims, mamba2_inner
from ..memo import per_object
from ..model import ModelSpec

OWN_GEMM_FORMATS = {"awq", "gptq", "fp8", "mxfp4", "w4a16", "w8a8"}
MLA_WORKSPACE_CAP = 64 * 1024  # mla_attention.py determine_chunked_prefill_workspace_size: "limiting it to 64k tokens"


@dataclass(frozen=True)
class ProfilePeak:
    """The profile run's torch peak: the phase that sets it and what it holds, each part in bytes."""

    phase: str
    parts: tuple[tuple[str, int], ...]
    others: tuple[tuple[str, int], ...] = ()  # the other phases' totals, for explain

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.parts)

    def describe(self) -> str:
        from ..units import GiB

        inner = ", ".join(f"{name} {b / GiB:.3f}" for name, b in self.parts if b)
        rest = "; ".join(f"{name} {b / GiB:.2f}" for name, b in self.others)
        return (f"profile peak {self.bytes / GiB:.3f} GiB in the {self.phase} phase ({inner} GiB)"
                + (f"; other phases: {rest} GiB" if rest else ""))


# AMD Instinct targets on which torch's BLAS backend defaults to hipBLASLt (aten/src/ATen/Context.cpp
# blasPreferredBackend: "AMD Instinct targets prefer hipblaslt", gfx90a and gfx942, gfx950 from ROCm 6.5; vLLM's ROCm
# images of 0.27+ ship ROCm 7)
HIPBLASLT_PREFERRED_GFX = ("gfx90a", "gfx942", "gfx950")


def blas_workspace(gpu: GpuProfile | None) -> tuple[str, int]:
    """(name, bytes) of the BLAS workspace torch allocates from its caching allocator at the first matmul, which
    falls in the profile run (aten/src/ATen/cuda/CublasHandlePool.cpp). NVIDIA: cuBLAS's parseChosenWorkspaceSize,
    ':4096:8' (32 MiB) from sm90 on, ':4096:2:16:8' before. AMD: where hipBLASLt is the preferred backend (the
    Instinct targets above) bf16/fp16 GEMMs take the Lt path and its workspace, parseCUDABlasLtWorkspaceSize's ROCm
    default 'Use 76 MB for hipBLASLt' (76 x 1024 KiB); elsewhere hipBLAS's, 128 MiB on gfx94x/gfx95x and 32 MiB
    otherwise (parseChosenWorkspaceSize, USE_ROCM)."""
    if gpu is not None and gpu.vendor == "amd":
        gfx = (gpu.gfx or "").lower()
        if gfx in HIPBLASLT_PREFERRED_GFX:
            return "hipBLASLt workspace", 76 * 1024 * 1024
        return "hipBLAS workspace", (128 if gfx.startswith(("gfx94", "gfx95")) else 32) * 1024 * 1024
    cc = (gpu.compute_capability or 0.0) if gpu is not None else 9.0
    return "cuBLAS workspace", 4096 * 8 * 1024 if cc >= 9.0 else 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspace_bytes(gpu: GpuProfile | None) -> int:
    """The BLAS workspace's bytes (blas_workspace): cuBLAS on NVIDIA, hipBLASLt / hipBLAS on AMD."""
    return blas_workspace(gpu)[1]


def flashinfer_sampler_default(gpu: GpuProfile | None) -> bool:
    """VLLM_USE_FLASHINFER_SAMPLER defaults on (envs.py) and flashinfer-python is a dependency of vLLM's CUDA wheels;
    it is used where FlashInfer supports the GPU (NVIDIA, compute capability 7.5 and later)."""
    if gpu is None:
        return True
    return gpu.vendor == "nvidia" and (gpu.compute_capability or 0.0) >= 7.5


def moe_workspace(spec: ModelSpec, tp: int, m: int, dtype_bytes: int, weights: str) -> int:
    """The fused-MoE workspace the manager keeps (Triton experts' shapes: workspace13 = M x top_k x max(I, H),
    shared with the output M x H; workspace2 = M x top_k x max(2I, H); I per TP rank). Marlin's experts (AWQ/GPTQ,
    experts/marlin_moe.py workspace_shapes) take the same two sizes, swapped. gpt-oss's MXFP4 experts run
    OpenAI's Triton kernels, which allocate only their M x H output (experts/gpt_oss_triton_kernels_moe.py): no
    workspace is kept."""
    moe = spec.moe
    if moe is None or not moe.moe_layers or not moe.expert_intermediate_size:
        return 0
    h = spec.hidden_size
    if weights == "mxfp4":
        return 0  # the kernels' M x H output is the forward output the sampler phase already holds
    inter, k = moe.expert_intermediate_size // tp, moe.experts_per_token
    return (max(m * k * max(inter, h), m * h) + m * k * max(2 * inter, h)) * dtype_bytes


def _mla_phase(spec: ModelSpec, tp: int, m: int, d: int, max_model_len: int, seqs: int, block: int) -> list:
    mla = per_object("first_mla", (spec,), (), lambda: next(
        (x for x in flatten(spec.layers) if isinstance(x, MultiLatentAttention)), None))
    if mla is None:
        return []
    heads = max(mla.num_heads // tp, 1)
    work = min(max(8 * max_model_len, 4 * seqs * block), MLA_WORKSPACE_CAP)
    topk = spec.config.get("index_topk")
    if mla.index_head_dim and topk:  # sparse_mla_attention.py: also at most max_num_seqs x index_topk
        work = min(work, seqs * int(topk))
    work = max(work, seqs * block)
    q_lora = int(spec.config.get("q_lora_rank") or 0)
    lat = mla.kv_lora_rank
    return [("MLA prefill workspace", work * heads * (mla.qk_nope_head_dim + mla.v_head_dim) * d),
            ("MLA q", m * heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) * d),
            ("MLA output", m * heads * mla.v_head_dim * d),
            ("MLA latents and norms", m * (2 * q_lora + 2 * lat + mla.qk_rope_head_dim) * d),
            ("hidden states", 2 * m * spec.hidden_size * d)]


def _mamba2_phase(spec: ModelSpec, tp: int, m: int, d: int) -> list:
    cfg: dict[str, Any] = spec.config
    if "mamba" not in spec.layer_kinds or not (cfg.get("mamba_num_heads") or cfg.get("mamba_n_heads")):
        return []  # Mamba1 (Jamba) and layouts without Mamba2 fields: the generic MLP phase covers them
    heads, _, state, groups, _ = mamba2_dims(cfg)
    inner = mamba2_inner(cfg)
    in_proj = (2 * inner + 2 * groups * state + heads) // tp
    return [("Mamba2 in_proj output", m * in_proj * d), ("Mamba2 SSM output", m * inner // tp * d),
            ("Mamba2 gated-norm fp32 copies", 2 * m * inner // tp * 4),
            ("hidden states", 2 * m * spec.hidden_size * d)]


def _attention_phase(spec: ModelSpec, tp: int, m: int, d: int) -> list:
    if not spec.layer_kinds & {"full", "sliding", "chunked"}:
        return []
    q, kv = spec.num_heads * spec.head_dim // tp, max(spec.num_kv_heads // tp, 1) * spec.head_dim
    return [("hidden states", 3 * m * spec.hidden_size * d), ("attention qkv", m * (q + 2 * kv) * d),
            ("attention output", m * q * d)]


def _mlp_phase(spec: ModelSpec, tp: int, m: int, d: int) -> list:
    h = spec.hidden_size
    inter = spec.intermediate_size
    parts = [("hidden states", 3 * m * h * d), ("MLP gate/up and activation", 3 * m * inter // tp * d)]
    cfg = spec.config
    if any(float(x or 0) > 0 for x in (cfg.get("activation_sparsity_pattern") or [])):
        # Gemma 3n: the Gaussian top-k sparsity keeps two more M x I tensors (activation.py _gaussian_topk)
        parts.append(("Gaussian top-k", 2 * m * inter // tp * d))
    if cfg.get("altup_num_inputs"):
        # Gemma 3n AltUp: the embedded streams and their predictions (gemma3n.py altup_embed, predict)
        parts.append(("AltUp streams", 2 * m * int(cfg["altup_num_inputs"]) * h * d))
    return parts


def inductor_embedding_copy(spec: ModelSpec, tp: int, dtype_bytes: int, padded_vocab: int) -> int:
    """Bytes of the compile phase's largest buffer: Inductor's copy of the (padded) embedding rows on a rank."""
    return padded_vocab // tp * spec.hidden_size * dtype_bytes


def pinned_compile_segment(copy_bytes: int) -> tuple[int, int]:
    """(segment, pinned) bytes of a cold compile's freed embedding copy on vLLM 0.27-0.30, per rank.

    The copy (inductor_embedding_copy) is a request of 10 MiB or more, so torch's caching allocator gives it a
    segment of its size rounded up to 2 MiB (c10/cuda/CUDACachingAllocator.cpp get_allocation_size, kRoundLarge:
    torch_allocator.segment_size). Freed after the compile, the block serves later requests by best fit and is
    split without limit (0.27-0.30 leave max_split_size unset during the profile: gpu_worker.py:553-557 at v0.29.0,
    :568 at v0.30.0, where only the weight load is capped, :493 / :505); empty_cache() releases only unsplit
    segments (release_cached_blocks), so one persistent allocation carved out of it keeps the whole segment, and
    from 0.27 vLLM counts it as consumed (utils/mem_utils.py:317-319 at v0.29.0: before_create.free -
    after_profile.free). The persistent 1-10 MiB request that a warm start serves from a fresh 20 MiB segment
    (kLargeBuffer) lands in the copy instead, so the KV cache loses the segment less 20 MiB: the two public pinned
    pairs, RTX 5060 Ti Qwen3-4B 742 - 20 MiB = 0.705 GiB (logged 0.70 +- 0.01) and RTX 4090 Qwen2.5-0.5B 260 - 20
    MiB = 0.234 GiB (logged 0.24 +- 0.01); the bare segments are outside both (tests/test_public_logs_0_27.py).
    Whether a start pins is the allocator's state, not a setting (docs/validation/README.md, 'The pinned compile
    segment: what decides it'), so kvcalc gives it as the low end of a range. pinned 0: no segment to pin."""
    from .torch_allocator import LARGE_BUFFER, MIN_LARGE_ALLOC, segment_size

    if copy_bytes < MIN_LARGE_ALLOC:  # a small-segment request: nothing multi-MiB to carve from
        return 0, 0
    segment = segment_size(copy_bytes)
    return segment, max(segment - LARGE_BUFFER, 0)


def profile_peak(spec: ModelSpec, gpu: GpuProfile | None, **settings) -> ProfilePeak:
    """_profile_peak, once per model and settings: a search asks for it per GPU x format x TP x max_num_seqs, and
    the GPU enters only through its compute capability, vendor and SM count (cuBLAS workspace, FlashInfer sampler,
    Triton top-k rows), which key the memo with the settings. The result is read-only."""
    seen = None if gpu is None else (gpu.compute_capability, gpu.vendor, gpu.gfx, gpu.sm_count)
    return per_object("profile_peak", (spec,), (seen, *sorted(settings.items())),
                      lambda: _profile_peak(spec, gpu, **settings))


def _profile_peak(spec: ModelSpec, gpu: GpuProfile | None, *, tp: int, m: int, seqs: int, dtype_bytes: int,
                  weights: str, max_model_len: int, block_size: int, v2_runner: bool, compiled: bool,
                  last_stage: bool, padded_vocab: int, v2_sampler_bytes_per_logit: float,
                  flashinfer_sampler: bool | None = None) -> ProfilePeak:
    """The largest phase of vLLM 0.26's profile run on one rank (see the module docstring)."""
    d = dtype_bytes
    h = spec.hidden_size
    rows = min(seqs, m)
    cublas = blas_workspace(gpu)
    # the forward reaches cuBLAS through unquantized Linears (and MoE routers, never quantized); AWQ/GPTQ/FP8/MXFP4
    # Linears run their own kernels (Machete/Marlin, CUTLASS): a dense model in those formats meets cuBLAS only at
    # the lm_head, in the sampler phase (H200 h-8b-awq-eager-16k: no workspace in the forward's peak)
    fwd_cublas = [cublas] if (weights not in OWN_GEMM_FORMATS or spec.moe is not None) else []
    ws = moe_workspace(spec, tp, m, d, weights)
    held = [("MoE workspace", ws)] if ws else []
    phases: dict[str, list] = {}
    dense_mlp = _mlp_phase(spec, tp, m, d)
    if spec.moe is None or spec.moe.moe_layers < spec.num_layers:
        phases["MLP"] = dense_mlp + fwd_cublas
    if spec.moe is not None and spec.moe.moe_layers:
        phases["MoE"] = held + [("hidden states", 3 * m * h * d)] + fwd_cublas
    attention = _attention_phase(spec, tp, m, d)
    if attention:
        # a layer after the first MoE layer runs its attention with the MoE workspace held (H200 h-mixtral-8x7b-16k)
        phases["attention"] = held + attention + fwd_cublas
    mla = _mla_phase(spec, tp, m, d, max_model_len, seqs, block_size)
    if mla:
        phases["MLA"] = held + mla + fwd_cublas
    mamba = _mamba2_phase(spec, tp, m, d)
    if mamba:
        phases["Mamba2"] = held + mamba + fwd_cublas
    if last_stage:
        if v2_runner:
            phases["sampler"] = [("sampler", int(v2_sampler_bytes_per_logit * rows * padded_vocab)), cublas]
        else:
            use_fi = flashinfer_sampler_default(gpu) if flashinfer_sampler is None else flashinfer_sampler
            sampler = [("logits (lm_head output)", rows * padded_vocab * d),
                       ("fp32 logits, probabilities, noise", 3 * rows * spec.vocab_size * 4)]
            if not use_fi:
                sms = (gpu.sm_count if gpu is not None and gpu.sm_count else 132)
                programs = min(1 << max(rows - 1, 0).bit_length(), sms)
                sampler.append(("top-k/top-p Triton buffer", programs * spec.vocab_size * 4))
            phases["sampler"] = held + sampler + [("forward output", m * h * d + 2 * rows * h * d), cublas]
    if v2_runner and compiled:  # compiled: torch.compile compiles inside this run (not loaded from its cache)
        phases["compile"] = [("Inductor embedding copy", inductor_embedding_copy(spec, tp, d, padded_vocab)), ("hidden states", 2 * m * h * d)]
    totals = {name: sum(b for _, b in parts) for name, parts in phases.items()}
    top = max(totals, key=lambda k: totals[k])
    return ProfilePeak(phase=top, parts=tuple(phases[top]),
                       others=tuple((k, v) for k, v in totals.items() if k != top))


