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
from dataclasses import dataclass, field

from ..constants import engine_constants
from ..errors import UnsupportedModelError, UsageError
from ..formats import KvFormat, WeightFormat
from ..hardware import GpuProfile
from ..model import ModelSpec
from ..units import GiB
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
    notes: list[str] = field(default_factory=list)
    layout: KvLayout | None = field(default=None, repr=False)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def concurrency_at(self, context: int) -> int:
        """Requests of `context` tokens that fit at once: whole blocks each (sliding groups capped at their
        window), one null block reserved."""
        if not self.fits or self.layout is None:
            return 0
        return self.layout.concurrency_at(self.num_gpu_blocks, context)


def batch_defaults(gpu: GpuProfile, entrypoint: str, world_size: int = 1) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks when the user sets neither (arg_utils.get_batch_defaults)."""
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
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
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


def activation_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool = True) -> int:
    """Torch peak of the profile run: the larger of the dummy forward over mnbt tokens and the dummy sampler over
    min(max_num_seqs, mnbt) rows of logits. Both factors are fitted (kvcalc/data/constants.yaml)."""
    c = engine_constants("vllm")
    tp = s.tensor_parallel
    qkv = (spec.num_heads * spec.head_dim + 2 * spec.num_kv_heads * spec.head_dim) // tp
    inter = spec.intermediate_size
    if spec.moe is not None and spec.moe.moe_layers and spec.moe.expert_intermediate_size:
        inter = spec.moe.expert_intermediate_size * (spec.moe.experts_per_token + spec.moe.shared_experts)
    forward = c["fwd_factor"] * mnbt * s.dtype_bytes * (2 * spec.hidden_size + 3 * inter // tp + qkv)
    rows = min(seqs, mnbt)
    per_logit = c["sampler_bytes_per_logit"] if v2_runner else c["sampler_bytes_per_logit_v1"]
    sampler = per_logit * rows * _padded_vocab(spec.vocab_size, tp)
    return int(max(forward, sampler))


def estimate(spec: ModelSpec, gpu: GpuProfile, s: VllmSettings) -> VllmEstimate:
    """Predict what vLLM logs at start-up for this model, GPU and settings."""
    version = parse_version(s.version)
    if not 0 < s.gpu_memory_utilization <= 1:
        raise UsageError(f"gpu_memory_utilization must be in (0, 1], got {s.gpu_memory_utilization}")
    if s.kv.vllm_name is None:
        raise UsageError(f"vLLM has no {s.kv.label} cache (kv_cache_dtype is auto, fp8 or fp8_e5m2)")
    if "vllm" not in s.weights.engines:
        raise UsageError(f"vLLM does not load {s.weights.label} weights")
    if s.tensor_parallel < 1 or s.pipeline_parallel < 1:
        raise UsageError("--tp and --pp must be at least 1")
    c = engine_constants("vllm")
    notes: list[str] = []

    max_model_len = s.max_model_len or spec.max_position_embeddings
    mnbt, seqs = resolve_batching(gpu, s, max_model_len)

    pp = s.pipeline_parallel
    layers_per_stage = [spec.num_layers // pp + (1 if i < spec.num_layers % pp else 0) for i in range(pp)]
    total = gpu.memory_total_bytes
    requested = math.ceil(total * s.gpu_memory_utilization)  # v1/worker/utils.py rounds up
    # Every rank gets its own budget; the deployment's blocks are the smallest rank's (kv_cache_utils.py).
    best: VllmEstimate | None = None
    stages: list[VllmEstimate] = []  # every stage's own budget, kept for kvcalc.search_core (not in the JSON)
    for stage, n_layers in enumerate(layers_per_stage):
        first, last = stage == 0, stage == pp - 1
        w = vllm_weight_bytes(spec, s, n_layers, has_embedding=first, has_lm_head=last)
        v2 = uses_v2_model_runner(spec, version)
        act = activation_bytes(spec, s, mnbt, seqs, v2) if last else int(
            c["fwd_factor"] * mnbt * s.dtype_bytes * (2 * spec.hidden_size + 3 * spec.intermediate_size
                                                      // s.tensor_parallel))
        world = s.tensor_parallel * pp
        non_torch = int(c["non_torch_bytes_tp"] if world > 1 else c["non_torch_bytes"])
        cudagraph = 0 if (s.enforce_eager or not subtracts_cudagraph_estimate(spec, version)) \
            else int(c["cudagraph_bytes"])
        available = requested - w - act - non_torch - cudagraph
        stage_layers = spec.layers[sum(layers_per_stage[:stage]): sum(layers_per_stage[: stage + 1])]
        try:
            layout = vllm_kv_layout(stage_layers, s.kv, s.dtype_bytes, s.block_size, s.tensor_parallel,
                                    max_model_len, spec.model_type, max_num_batched_tokens=mnbt,
                                    max_concurrent_batches=2 if pp == 1 else pp,
                                    compute_capability=gpu.compute_capability or 9.0)
        except (NotImplementedError, ValueError) as exc:
            raise UnsupportedModelError(f"vLLM cannot serve {spec.name} this way: {exc}") from None
        blocks = layout.num_blocks(max(available, 0))
        fits = available >= layout.min_kv_bytes
        shortfall = 0 if fits else layout.min_kv_bytes - available
        concurrency = layout.max_concurrency(blocks) if blocks else 0.0
        if version >= (0, 24, 0):
            logged = layout.logged_tokens(blocks) if blocks else 0
        else:
            logged = blocks * layout.block_size
        est = VllmEstimate(
            total_memory=total, requested_memory=requested, weights_bytes=w, activation_bytes=act,
            non_torch_bytes=non_torch, cudagraph_bytes=cudagraph, available_kv_bytes=available,
            block_size=layout.block_size, page_bytes_all_layers=layout.bytes_per_block, num_gpu_blocks=blocks,
            max_model_len=max_model_len, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
            logged_kv_tokens=logged, logged_concurrency=round(concurrency, 2),
            kv_bytes_per_token=int(round(layout.kv_bytes_per_token)), fits=fits, shortfall_bytes=shortfall,
            notes=notes + layout.notes, layout=layout,
        )
        stages.append(est)
        if best is None or est.num_gpu_blocks < best.num_gpu_blocks or (not est.fits and best.fits):
            best = est
    assert best is not None
    best.stage_estimates = stages
    if s.tensor_parallel > spec.num_kv_heads:
        notes.append(f"tp {s.tensor_parallel} > {spec.num_kv_heads} KV heads: each rank holds a replicated KV head")
    cc = gpu.compute_capability or 0.0
    if s.weights.name == "bf16" and gpu.vendor == "nvidia" and cc < 8.0:
        notes.append(f"{gpu.name} has no bf16: vLLM casts the model to fp16 (same bytes)")
    elif s.weights.name == "fp8" and gpu.vendor == "nvidia" and cc < 8.9:
        notes.append(f"FP8 weights on {gpu.name} (compute capability {cc}) run as a weight-only kernel (Marlin)")
    if not s.enforce_eager and uses_v2_model_runner(spec, version):
        notes.append("V2 model runner: CUDA graphs are captured after the KV cache is allocated, using about "
                     f"{c['cudagraph_capture_bytes'] / 2**30:.2f} GiB beyond gpu_memory_utilization (not subtracted "
                     "from KV)")
    notes.append(f"activation, non-torch and CUDA-graph memory: {c['source']}")
    return best
