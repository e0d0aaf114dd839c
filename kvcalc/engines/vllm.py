"""vLLM (V1 engine) memory accounting, version-aware.

Sources, vLLM 0.26.0:
- vllm/v1/worker/gpu_worker.py `determine_available_memory`: KV = total*util - (weights + torch activation peak of the
  profile run + non-torch growth) - CUDA-graph estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1).
- vllm/v1/worker/gpu_model_runner.py `profile_run`: a forward over max_num_batched_tokens dummy tokens, then a sampler
  over min(max_num_seqs, mnbt) rows of logits.
- vllm/v1/core/kv_cache_utils.py `get_num_blocks` (available // page_size // num_layers),
  `get_max_concurrency_for_kv_cache_config` (num_blocks / cdiv(max_model_len, block_size)) and
  `get_kv_cache_capacity` (logged tokens = int(concurrency * max_model_len), 0.24+).
- vllm/engine/arg_utils.py `get_batch_defaults`: mnbt 16384 / max_num_seqs 1024 for the LLM class on GPUs with
  >= 70 GiB that are not A100; 8192 / 256 otherwise; `vllm serve` 8192 / 2048.
"""

from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass, field

from ..constants import engine_constants
from ..errors import UnsupportedModelError, UsageError
from ..formats import KvFormat, WeightFormat
from ..hardware import GpuProfile
from ..model import ModelSpec
from ..units import GiB, ceil_div
from .vllm_groups import KvLayout, vllm_kv_layout
from .weights import weight_bytes

DEFAULT_VERSION = "0.26.0"
VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE


def parse_version(text: str) -> tuple[int, int, int]:
    parts = text.strip().lstrip("v").split(".")
    try:
        nums = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts[:3]]
    except ValueError:
        raise UsageError(f"vLLM version {text!r} is not like 0.26.0") from None
    while len(nums) < 3:
        nums.append(0)
    version = (nums[0], nums[1], nums[2])
    if version < (0, 9, 1):
        raise UsageError(f"vLLM {text} predates the V1 engine accounting kvcalc models (0.9.1 and later)")
    return version


@dataclass(frozen=True)
class VllmSettings:
    weights: WeightFormat
    kv: KvFormat
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    max_num_batched_tokens: int | None = None  # None: vLLM's default for this GPU and entrypoint
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    block_size: int | None = None  # None: the attention backend's choice (16; FlashMLA 64)
    version: str = DEFAULT_VERSION
    entrypoint: str = "llm"  # "llm" (offline LLM class) or "serve" (OpenAI server)
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    dtype_bytes: int = 2
    calibration: Any = None  # kvcalc.calibrate.EnvCalibration: the user's own environment (kvcalc calibrate)


@dataclass(frozen=True)
class StageBudget:
    """One pipeline stage's rank (gpu_worker.py:determine_available_memory, then its own KV-cache config)."""

    weights_bytes: int
    activation_bytes: int
    available_kv_bytes: int
    layout: KvLayout
    num_blocks: int
    kv_fits: bool  # the budget holds one max_model_len request (_check_enough_kv_cache_memory)
    kv_bytes_per_token: int


@dataclass
class VllmEstimate:
    total_memory: int
    requested_memory: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    block_size: int
    page_bytes_all_layers: int  # one block across every attention layer of a rank
    num_gpu_blocks: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    logged_kv_tokens: int
    logged_concurrency: float
    kv_bytes_per_token: int
    fits: bool
    shortfall_bytes: int  # how much more memory the configuration needs to start (0 when it fits)
    deployment_weights_bytes: int = 0  # all tp x pp ranks: the stages' weights summed (not the smallest x pp)
    deployment_kv_bytes_per_token: int = 0  # all tp x pp ranks: each stage stores its own layers' KV
    cudagraph_overflow_bytes: int = 0  # V2 runner: graph capture after the KV cache needs this beyond the GPU
    notes: list[str] = field(default_factory=list)
    layout: KvLayout | None = field(default=None, repr=False)
    # every pipeline stage's own budget (this estimate is the smallest one's); not in the plan JSON
    stages: tuple[StageBudget, ...] = field(default=(), repr=False)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def to_json(self) -> dict:
        """The plan JSON's vllm_breakdown (kvcalc.plan/1): these keys, in this order, whatever the fields are named."""
        return {
            "total_memory": self.total_memory, "requested_memory": self.requested_memory,
            "weights_bytes": self.weights_bytes, "activation_bytes": self.activation_bytes,
            "non_torch_bytes": self.non_torch_bytes, "cudagraph_bytes": self.cudagraph_bytes,
            "available_kv_bytes": self.available_kv_bytes, "block_size": self.block_size,
            "page_bytes_all_layers": self.page_bytes_all_layers, "num_gpu_blocks": self.num_gpu_blocks,
            "max_model_len": self.max_model_len, "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs, "logged_kv_tokens": self.logged_kv_tokens,
            "logged_concurrency": self.logged_concurrency, "kv_bytes_per_token": self.kv_bytes_per_token,
            "fits": self.fits, "shortfall_bytes": self.shortfall_bytes,
            "deployment_weights_bytes": self.deployment_weights_bytes,
            "deployment_kv_bytes_per_token": self.deployment_kv_bytes_per_token,
            "cudagraph_overflow_bytes": self.cudagraph_overflow_bytes,
            "notes": list(self.notes),
            "layout": self.layout.to_json() if self.layout is not None else None,
        }

    def concurrency_at(self, context: int) -> int:
        """Requests of `context` tokens that fit at once: whole blocks each (sliding groups capped at their
        window), one null block reserved."""
        if not self.fits or self.layout is None:
            return 0
        return self.layout.concurrency_at(self.num_gpu_blocks, context)


def batch_defaults(gpu: GpuProfile, entrypoint: str, world_size: int = 1) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks when the user sets neither (arg_utils.get_batch_defaults).

    world_size is accepted for the call's shape but unused: the defaults depend on the GPU's memory and name and on
    the entrypoint, not on the number of ranks (the same table applies to every rank)."""
    large = gpu.memory_total_bytes >= 70 * GiB and "a100" not in gpu.name.lower()
    if large:
        return (16384 if entrypoint == "llm" else 8192), 1024
    return (8192 if entrypoint == "llm" else 2048), 256


def resolve_batching(gpu: GpuProfile, s: VllmSettings, max_model_len: int) -> tuple[int, int]:
    default_mnbt, default_seqs = batch_defaults(gpu, s.entrypoint, s.tensor_parallel * s.pipeline_parallel)
    seqs = s.max_num_seqs or default_seqs
    if s.max_num_batched_tokens:
        mnbt = s.max_num_batched_tokens
    else:
        mnbt = min(default_mnbt, seqs * max_model_len)  # chunked prefill on: no max(max_model_len, ...)
    if not s.max_num_seqs:
        seqs = min(seqs, mnbt)
    return mnbt, seqs


def _padded_vocab(vocab: int, tp: int) -> int:
    padded = ceil_div(vocab, VOCAB_PADDING) * VOCAB_PADDING
    return padded // tp if tp > 1 else padded


def vllm_weight_bytes(spec: ModelSpec, s: VllmSettings, rank_layers: int | None = None,
                      has_embedding: bool = True, has_lm_head: bool = True) -> int:
    """Weights one rank loads: its share of the model (TP shards projections and the vocabulary, norms replicate),
    the vocabulary padded to a multiple of 64, and the rotary cos/sin cache (max_position x rotary_dim)."""
    tp = s.tensor_parallel
    total = weight_bytes(spec, s.weights, s.dtype_bytes)
    embed_bytes = spec.params.embedding * s.dtype_bytes
    head_bytes = spec.params.lm_head * s.dtype_bytes
    body = total - embed_bytes - head_bytes
    layers = rank_layers if rank_layers is not None else spec.num_layers
    body = body * layers // spec.num_layers
    norms_replicated = spec.params.norms * s.dtype_bytes * layers // spec.num_layers
    per_rank = (body - norms_replicated) // tp + norms_replicated
    pad_rows = _padded_vocab(spec.vocab_size, tp) - (spec.vocab_size // tp if tp > 1 else spec.vocab_size)
    vocab_bytes = (spec.vocab_size // tp + pad_rows) * spec.hidden_size * s.dtype_bytes
    if has_embedding:
        per_rank += vocab_bytes
    if has_lm_head and not spec.tie_word_embeddings:
        per_rank += vocab_bytes
    elif has_lm_head and not has_embedding:  # tied, but the last stage needs its own copy
        per_rank += vocab_bytes
    ropes = 2 if spec.config.get("rope_local_base_freq") else 1  # Gemma 3: a local and a global rotary cache
    rotary = ropes * spec.max_position_embeddings * spec.rotary_dim * s.dtype_bytes
    return per_rank + rotary


def uses_v2_model_runner(spec: ModelSpec, version: tuple[int, int, int]) -> bool:
    """0.26 runs dense, non-hybrid decoders on the V2 model runner (config/vllm.py: use_v2_model_runner,
    _is_default_v2_model_runner_model); MoE and hybrid (Mamba) models stay on the V1 runner."""
    hybrid = "mamba" in spec.layer_kinds
    return version >= (0, 26, 0) and spec.moe is None and not hybrid


def subtracts_cudagraph_estimate(spec: ModelSpec, version: tuple[int, int, int]) -> bool:
    """0.20+ subtracts a profiled CUDA-graph estimate from the KV budget (gpu_worker.py, with
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), but the V2 runner's profile_cudagraph_memory returns 0
    (v1/worker/gpu/model_runner.py): there, graphs are captured after the KV cache, on top of the budget."""
    return version >= (0, 20, 0) and not uses_v2_model_runner(spec, version)


def forward_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int) -> int:
    """Torch peak of the profile run's dummy forward over mnbt tokens (fitted factor, kvcalc/data/constants.yaml).
    Every pipeline stage runs it: hidden states in and out, the MLP (MoE: the routed and shared experts' width) and
    the attention projections of its rank."""
    c = engine_constants("vllm")
    tp = s.tensor_parallel
    qkv = (spec.num_heads * spec.head_dim + 2 * spec.num_kv_heads * spec.head_dim) // tp
    inter = spec.intermediate_size
    if spec.moe is not None and spec.moe.moe_layers and spec.moe.expert_intermediate_size:
        inter = spec.moe.expert_intermediate_size * (spec.moe.experts_per_token + spec.moe.shared_experts)
    return int(c["fwd_factor"] * mnbt * s.dtype_bytes * (2 * spec.hidden_size + 3 * inter // tp + qkv))


def sampler_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool = True) -> int:
    """Torch peak of the dummy sampler over min(max_num_seqs, mnbt) rows of logits; only the last pipeline stage
    holds the lm_head and samples (gpu_model_runner.py profile_run: `if get_pp_group().is_last_rank`)."""
    c = engine_constants("vllm")
    rows = min(seqs, mnbt)
    per_logit = c["sampler_bytes_per_logit"] if v2_runner else c["sampler_bytes_per_logit_v1"]
    return int(per_logit * rows * _padded_vocab(spec.vocab_size, s.tensor_parallel))


def activation_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool = True,
                     last_stage: bool = True) -> int:
    """Torch peak of the profile run: the larger of the dummy forward over mnbt tokens and, on the last pipeline
    stage, the dummy sampler over min(max_num_seqs, mnbt) rows of logits. Both factors are fitted
    (kvcalc/data/constants.yaml)."""
    forward = forward_bytes(spec, s, mnbt)
    if not last_stage:
        return forward
    return max(forward, sampler_bytes(spec, s, mnbt, seqs, v2_runner))


def pp_layer_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage (vllm/distributed/utils.py:get_pp_indices, VLLM_PP_LAYER_PARTITION unset): an even
    split, the remainder added one each to the stages before the last, from the second-to-last backwards."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def estimate(spec: ModelSpec, gpu: GpuProfile, s: VllmSettings) -> VllmEstimate:
    """Predict what vLLM logs at start-up for this model, GPU and settings.

    Each pipeline stage (one rank of each TP group) gets its own budget; the deployment's blocks are the smallest
    stage's (kv_cache_utils.py:get_kv_cache_configs, "change the num_blocks of each rank to the smallest"). The
    returned estimate is that stage's, with the deployment's totals beside it."""
    version = parse_version(s.version)
    if not 0 < s.gpu_memory_utilization <= 1:
        raise UsageError(f"gpu_memory_utilization must be in (0, 1], got {s.gpu_memory_utilization}")
    if s.kv.vllm_name is None:
        raise UsageError(f"vLLM has no {s.kv.label} cache (kv_cache_dtype is auto, fp8 or fp8_e5m2)")
    if "vllm" not in s.weights.engines:
        raise UsageError(f"vLLM does not load {s.weights.label} weights")
    if s.tensor_parallel < 1 or s.pipeline_parallel < 1:
        raise UsageError("--tp and --pp must be at least 1")
    pp = s.pipeline_parallel
    if pp > spec.num_layers:
        raise UsageError(f"--pp {pp} exceeds the {spec.num_layers} layers of {spec.name}: every pipeline stage "
                         "needs at least one layer")
    c = engine_constants("vllm")
    cc = gpu.compute_capability or 0.0
    v2 = uses_v2_model_runner(spec, version)

    max_model_len = s.max_model_len or spec.max_position_embeddings
    mnbt, seqs = resolve_batching(gpu, s, max_model_len)
    total = gpu.memory_total_bytes
    requested = math.ceil(total * s.gpu_memory_utilization)  # v1/worker/utils.py rounds up
    world = s.tensor_parallel * pp
    non_torch = int(c["non_torch_bytes_tp"] if world > 1 else c["non_torch_bytes"])
    cudagraph = 0 if (s.enforce_eager or not subtracts_cudagraph_estimate(spec, version)) else int(c["cudagraph_bytes"])
    if s.calibration is not None:  # measured in the user's environment (kvcalc/calibrate.py)
        non_torch, cudagraph = (s.calibration.non_torch(s.tensor_parallel, pp, non_torch),
                                s.calibration.cudagraph(s.tensor_parallel, pp, cudagraph))
    # V2 runner: graphs are captured after the KV cache is allocated, on top of gpu_memory_utilization.
    capture = int(c["cudagraph_capture_bytes"]) if (v2 and not s.enforce_eager) else 0
    graph_overflow = max(requested + capture - total, 0)

    notes: list[str] = []
    if s.tensor_parallel > spec.num_kv_heads:
        notes.append(f"tp {s.tensor_parallel} > {spec.num_kv_heads} KV heads: each rank holds a replicated KV head")
    if s.weights.name == "bf16" and gpu.vendor == "nvidia" and cc < 8.0:
        notes.append(f"{gpu.name} has no bf16: vLLM casts the model to fp16 (same bytes)")
    elif s.weights.name == "fp8" and gpu.vendor == "nvidia" and cc < 8.9:
        notes.append(f"FP8 weights on {gpu.name} (compute capability {cc}) run as a weight-only kernel (Marlin)")
    if capture:
        notes.append("V2 model runner: CUDA graphs are captured after the KV cache is allocated, using about "
                     f"{capture / GiB:.2f} GiB beyond gpu_memory_utilization (not subtracted from KV)")
    if graph_overflow:
        highest = math.floor(100 * (total - capture) / total) / 100
        notes.append(f"util {s.gpu_memory_utilization} leaves {(total - requested) / GiB:.2f} GiB outside vLLM's "
                     f"budget, less than the ~{capture / GiB:.2f} GiB the CUDA graphs take after the KV cache: "
                     f"capture would run out of memory (use --util {highest} or lower, or --enforce-eager)")
    if pp > 1:
        notes.append(f"pipeline stages of {pp_layer_partition(spec.num_layers, pp)} layers "
                     "(vllm/distributed/utils.py:get_pp_indices); each stage has its own budget, the smallest "
                     "stage's blocks serve the deployment")
    notes.append(f"activation, non-torch and CUDA-graph memory: {c['source']}")
    if s.calibration is not None:
        notes.append(s.calibration.describe(s.tensor_parallel, pp))

    stages = stage_budgets(spec, gpu, s, requested - non_torch - cudagraph, max_model_len, mnbt, seqs, v2)
    # kv_cache_utils.py:get_kv_cache_configs: "change the num_blocks of each rank to the smallest among all ranks"
    low = stages[0]
    for stage in stages[1:]:
        if stage.num_blocks < low.num_blocks or (not stage.kv_fits and low.kv_fits):
            low = stage
    layout, blocks, available = low.layout, low.num_blocks, low.available_kv_bytes
    concurrency = layout.max_concurrency(blocks) if blocks else 0.0
    if version >= (0, 24, 0):
        logged = layout.logged_tokens(blocks) if blocks else 0
    else:
        logged = blocks * layout.block_size
    shortfall = (0 if low.kv_fits else layout.min_kv_bytes - available) + graph_overflow
    return VllmEstimate(
        total_memory=total, requested_memory=requested, weights_bytes=low.weights_bytes,
        activation_bytes=low.activation_bytes, non_torch_bytes=non_torch, cudagraph_bytes=cudagraph,
        available_kv_bytes=available, block_size=layout.block_size, page_bytes_all_layers=layout.bytes_per_block,
        num_gpu_blocks=blocks, max_model_len=max_model_len, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
        logged_kv_tokens=logged, logged_concurrency=round(concurrency, 2),
        kv_bytes_per_token=low.kv_bytes_per_token, fits=low.kv_fits and not graph_overflow, shortfall_bytes=shortfall,
        deployment_weights_bytes=sum(b.weights_bytes for b in stages) * s.tensor_parallel,
        deployment_kv_bytes_per_token=sum(b.kv_bytes_per_token for b in stages) * s.tensor_parallel,
        cudagraph_overflow_bytes=graph_overflow, notes=layout.notes + notes, layout=layout, stages=tuple(stages),
    )


def stage_budgets(spec: ModelSpec, gpu: GpuProfile, s: VllmSettings, budget: int, max_model_len: int, mnbt: int,
                  seqs: int, v2: bool) -> list[StageBudget]:
    """Each stage's KV budget: `budget` (requested less the stage-invariant non-torch and CUDA-graph terms) less its
    own weights and activation peak, laid out over its own layers."""
    pp = s.pipeline_parallel
    out = []
    start = 0
    for stage, n_layers in enumerate(pp_layer_partition(spec.num_layers, pp)):
        first, last = stage == 0, stage == pp - 1
        w = vllm_weight_bytes(spec, s, n_layers, has_embedding=first, has_lm_head=last)
        act = activation_bytes(spec, s, mnbt, seqs, v2, last_stage=last)
        if s.calibration is not None:
            act = s.calibration.activation(s.tensor_parallel, pp, act)
        available = budget - w - act
        try:
            layout = vllm_kv_layout(spec.layers[start: start + n_layers], s.kv, s.dtype_bytes, s.block_size,
                                    s.tensor_parallel, max_model_len, spec.model_type, max_num_batched_tokens=mnbt,
                                    max_concurrent_batches=2 if pp == 1 else pp,
                                    compute_capability=gpu.compute_capability or 9.0)
        except (NotImplementedError, ValueError) as exc:
            raise UnsupportedModelError(f"vLLM cannot serve {spec.name} this way: {exc}") from None
        start += n_layers
        out.append(StageBudget(w, act, available, layout, layout.num_blocks(max(available, 0)),
                               available >= layout.min_kv_bytes, int(round(layout.kv_bytes_per_token))))
    return out
