"""vLLM memory accounting, version-aware (V0 from 0.4, V1, the V2 model runner): what changes between releases is
data in engines/vllm_versions.py (VERSION_RULES); this file applies a version's row.

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
from dataclasses import dataclass, field, replace

from ..constants import engine_constants
from ..errors import UnsupportedModelError, UsageError
from ..formats import KvFormat, WeightFormat
from ..hardware import GpuProfile
from ..model import ModelSpec
from ..units import GiB, MiB, ceil_div
from . import vllm_draft
from .vllm_graphs import GraphCapture, graph_placement
from .vllm_groups import KvLayout, vllm_kv_layout
from .vllm_specs import vllm_kv_refusal
from .vllm_profile import ProfilePeak, inductor_embedding_copy, pinned_compile_segment, profile_peak
from .vllm_support import ServeGate, unserved_gate, unserved_reason
from .vllm_versions import (NEWEST_RELEASE_KNOWN, VersionRules, batch_defaults_for, chunked_prefill_on, evidence_note,
                            release_of, rules_for, rules_with_engine, version_key)
from .vllm_encoders import encoder_notes, encoder_profile_bytes, encoder_rank_bytes
from .weights import vllm_text_weight_bytes, weight_bytes

DEFAULT_VERSION = NEWEST_RELEASE_KNOWN  # --vllm-version defaults to the newest release kvcalc has rules for
VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE

# The extensible KV cache (vLLM 0.34.0+, v1/worker/extensible_kv_cache.py at v0.34.0): after warmup and CUDA-graph
# capture, measure_kv_cache_bytes (:592-618) gives the cache
#     min(requested - non_kv_used, free + committed - margin) - max(transient peak, torch reserve growth),
# non_kv_used = init_free - free - committed (everything this instance holds but the KV cache: weights, non-torch,
# the graphs, the sampler state), margin = max(KV_CACHE_MARGIN_FLOOR_BYTES, KV_CACHE_MARGIN_FRACTION x transient peak)
EXTENSIBLE_MARGIN_FLOOR = 1 << 30  # :64 KV_CACHE_MARGIN_FLOOR_BYTES on CUDA
EXTENSIBLE_MARGIN_FLOOR_ROCM = 3 << 30  # :64 on ROCm ("ROCr also maps kernel scratch outside the allocator")
EXTENSIBLE_MARGIN_FRACTION = 0.75  # :65 KV_CACHE_MARGIN_FRACTION
# Device memory already in use when the worker takes its first snapshot (init_free = total - this - other
# processes): the CUDA context and the cuBLAS/cuBLASLt handles gpu_worker.py creates before it. Read, not fitted:
# 139.80 - 139.29 GiB on every H200 start of this project (tests/fixtures/vllm_logs/real_v0.26.0_*.log, 'Free
# memory on device (139.29/139.8 GiB)') and 79.19 - 78.68 on the public 1 x H100 llm-d logs; with TP/PP NCCL's
# communicators come first too: 79.19 - 77.66 on the llm-d 2 x H100 TP 2 logs (1.53 GiB; 1.55 at TP 4, 1.43 at PP 2,
# 0.96 on 4 x RTX PRO 6000 without NVLink: kubesimplify-4xrtxpro6000-qwen3-235b-fp8-tp4-v0.27)
INIT_USED_BYTES = int(0.51 * (1 << 30))
INIT_USED_BYTES_MULTI = int(1.53 * (1 << 30))


def extensible_kv_cache_on(s: "VllmSettings", gpu: GpuProfile) -> bool:
    """Whether this start sizes an extensible KV cache (0.34+): the release default on CUDA and ROCm, off with
    --kv-cache-memory-bytes (config/vllm.py:3180-3254 _resolve_extensible_kv_cache at v0.34.0)."""
    return bool(s.rules.extensible_kv_cache and not s.kv_cache_memory_bytes and gpu.vendor in ("nvidia", "amd"))


def extensible_free_bytes(s: "VllmSettings", gpu: GpuProfile) -> int | None:
    """The first snapshot's free memory on the fullest GPU when the start sizes an extensible KV cache (0.34+):
    total less what the CUDA context (and NCCL, for several ranks) and other processes hold; None otherwise."""
    if not extensible_kv_cache_on(s, gpu):
        return None
    world = s.tensor_parallel * s.pipeline_parallel
    return gpu.memory_total_bytes - (INIT_USED_BYTES_MULTI if world > 1 else INIT_USED_BYTES) - s.other_processes_bytes


def extensible_margin(gpu: GpuProfile, transient_peak: int) -> int:
    """measure_kv_cache_bytes's margin (extensible_kv_cache.py:615 at v0.34.0)."""
    floor = EXTENSIBLE_MARGIN_FLOOR_ROCM if gpu.vendor == "amd" else EXTENSIBLE_MARGIN_FLOOR
    return max(floor, int(transient_peak * EXTENSIBLE_MARGIN_FRACTION))


def parse_version(text: str) -> tuple[int, int, int]:
    """The release as (major, minor, micro), read with packaging (rc, post, dev and local parts ignored).
    Versions kvcalc has no rules for (before 0.4.0) are refused."""
    release = release_of(text)
    rules_for(release)  # refuses < 0.4.0
    nums = list(version_key(release)[:3])
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


@dataclass(frozen=True)
class VllmSettings:
    weights: WeightFormat
    kv: KvFormat
    gpu_memory_utilization: float | None = None  # None: the version's default (0.9; 0.92 from 0.21; 1.0 from 0.34)
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
    enable_lora: bool = False  # --enable-lora: max_loras adapter slots of max_lora_rank preallocated
    max_loras: int = 1  # config/lora.py LoRAConfig defaults
    max_lora_rank: int = 16
    speculative_method: str | None = None  # ngram, eagle, eagle3, mtp (--speculative-config {"method": ...})
    num_speculative_tokens: int = 0
    # the EAGLE head's own config.json (speculative_config.model, when kvcalc could read it); None: the target's shape
    draft_config: Any = field(default=None, compare=False)
    # False: the head was started with load_format=dummy (nothing loaded: vLLM shares the target's lm_head with it)
    draft_weights_loaded: bool = True
    enable_chunked_prefill: bool | None = None  # None: the version's default (V1 always on)
    engine: str | None = None  # None/"auto": the version's default engine; "v0"/"v1": VLLM_USE_V1=0/1
    other_processes_bytes: int = 0  # memory other processes hold on the fullest GPU (a desktop, another engine)
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes: the KV budget per GPU, util ignored
    nccl_nvls: bool | None = None  # None: NCCL's own choice (on for TP on SXM Hopper/Blackwell with NVSwitch)
    calibration: Any = None  # kvcalc.calibrate.EnvCalibration: the user's own environment (kvcalc calibrate)
    # VLLM_USE_FLASHINFER_SAMPLER: None = vLLM's default (on where FlashInfer supports the GPU); False as on the
    # project's H200 host, whose offline bundle has no FlashInfer
    flashinfer_sampler: bool | None = None
    # --limit-mm-per-prompt with every modality 0 (or --language-model-only): no encoders from 0.10.1 (vllm_encoders.py)
    language_model_only: bool = False
    skip_mm_profiling: bool = False  # --skip-mm-profiling: no encoder profile (V1 runner, from 0.10.2)
    # torch.compile's cache at start: "cold" compiles inside the profile run (a first start, a new cache directory);
    # "warm" loads the stored AOT artifact (compilation/decorators.py: torch.compiler.load_compiled_function, no
    # Dynamo or Inductor run), so the Inductor compile's allocations are not in the profile peak (vllm_profile.py)
    compile_cache: str = "cold"

    @property
    def rules(self) -> VersionRules:
        return rules_with_engine(self.version, self.engine)

    @property
    def util(self) -> float:
        """gpu_memory_utilization as vLLM runs it: the user's, else the version's default."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return self.rules.default_util_for(bool(self.kv_cache_memory_bytes))


COMPILE_CACHE_STATES = ("cold", "warm")


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
    sampler_state_bytes: int = 0  # the V2 sampler's penalty state, counted as consumed from 0.27 (last stage)
    extensible_free_bound: bool = False  # 0.34+ extensible KV cache: free memory less the margin binds, not util


@dataclass(frozen=True)
class PinnedRange:
    """The low end of a capacity range: a cold torch.compile start on vLLM 0.27-0.30 whose freed Inductor embedding
    copy stays pinned in its allocator segment (vllm_profile.pinned_compile_segment), so vLLM counts the segment
    less 20 MiB as consumed and takes it from the KV cache. The estimate's own figures are the high end (not
    pinned); which one a start gets is the allocator's state, not known before it runs."""

    copy_bytes: int  # Inductor's vocab x hidden copy on a rank
    segment_bytes: int  # its allocator segment (rounded up to 2 MiB)
    pinned_bytes: int  # taken from each rank's KV budget when it pins: the segment less 20 MiB
    available_kv_bytes: int  # the smallest stage's KV budget when pinned
    num_gpu_blocks: int
    logged_kv_tokens: int
    logged_concurrency: float
    kv_fits: bool  # the pinned budget still holds one max_model_len request
    reason: str  # in words, for the JSON and the notes


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
    # the release gate this version misses (vllm_support.py): the model is not served at all; not in the plan JSON,
    # whose fits (false), verdicts and first note say it
    serve_gate: ServeGate | None = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)
    layout: KvLayout | None = field(default=None, repr=False)
    # every pipeline stage's own budget (this estimate is the smallest one's); not in the plan JSON
    stages: tuple[StageBudget, ...] = field(default=(), repr=False)
    # where the CUDA graphs live and the room their capture finds (engines/vllm_graphs.py); not in the plan JSON,
    # whose cudagraph_overflow_bytes, fits and verdicts say it
    graph_capture: GraphCapture | None = field(default=None, repr=False)
    # the part of non_torch_bytes that is the V2 sampler's penalty state (sampler_state_bytes; 0.27+); not in the
    # plan JSON (non_torch_bytes holds it, as vLLM's consumed memory does)
    sampler_state_bytes: int = field(default=0, repr=False)
    # a cold 0.27-0.30 compile: the capacity if the freed embedding copy's segment stays pinned (the low end of the
    # range whose high end is this estimate); None where no such range applies. Not in vllm_breakdown (its shape is
    # fixed, tests/test_to_json.py): the plan JSON carries it in the row's trust.capacity_range
    pinned: PinnedRange | None = field(default=None, repr=False)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def concurrency_low_at(self, context: int) -> int | None:
        """concurrency_at(context) with the pinned segment taken (the range's low end); None without a range."""
        if self.pinned is None:
            return None
        if not self.fits or not self.pinned.kv_fits or self.layout is None:
            return 0
        return self.layout.concurrency_at(self.pinned.num_gpu_blocks, context)

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


def logged_kv_tokens(layout, blocks: int, mode: str) -> int:
    """'GPU KV cache size: N tokens' as the release logs it (plan's and search's kv_capacity_tokens, one rule):
    0.21+ ("concurrency", kv_cache_utils.py _report_kv_cache_config, vllm#40694; get_kv_cache_capacity from 0.24):
    int(concurrency x max_model_len) over the groups; 0.8-0.20 ("per_group", kv_cache_utils.py): num_blocks //
    len(kv_cache_groups) x the smallest block; before ("blocks"): num_blocks x block_size."""
    if mode == "concurrency":
        return layout.logged_tokens(blocks) if blocks else 0
    if mode == "per_group":
        return blocks // max(len(layout.groups), 1) * min(r.block_size for r in layout.rules) if layout.rules \
            else blocks * layout.block_size
    return blocks * layout.block_size


def batch_defaults(gpu: GpuProfile, entrypoint: str, world_size: int = 1, version: str = DEFAULT_VERSION,
                   max_model_len: int = 8192) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks when the user sets neither (vllm_versions.BATCH rules:
    V0 SchedulerConfig; V1 arg_utils.get_batch_defaults by usage context and GPU memory).

    world_size is accepted for the call's shape but unused: the defaults depend on the GPU's memory and name and on
    the entrypoint, not on the number of ranks (the same table applies to every rank)."""
    rules = rules_for(version)
    return batch_defaults_for(rules, gpu.memory_total_bytes, gpu.name, entrypoint, max_model_len,
                              gpu.compute_capability)


def release_caveats(s: VllmSettings, gpu: GpuProfile) -> list[str]:
    """What a release after the measured one changed for this configuration that kvcalc does not model or could not
    read (vllm_versions.VERSION_RULES sources)."""
    key, out = version_key(s.version), []
    if s.weights.name.startswith("nf4") and key >= version_key("0.28.0"):
        out.append("bitsandbytes (NF4) weights: vLLM 0.28+ loads them only with the out-of-tree vllm-bnb-plugin "
                   "(vllm#43529); the bytes are the same")
    if (key >= version_key("0.28.0") and gpu.memory_total_bytes >= 160 * GiB and s.entrypoint == "llm"
            and not s.max_num_batched_tokens):
        out.append("vLLM 0.28+ has a >= 160 GiB batching tier (engine/arg_utils.py:2582-2591); its LLM-class "
                   "max_num_batched_tokens was not read, so the 70 GiB tier's 16384 is assumed")
    if key >= version_key("0.29.0") and s.tensor_parallel > 1:
        out.append("vLLM 0.29+ turns FlashInfer all-reduce on for TP groups (vllm#52998): its workspace is not in "
                   "kvcalc's non-torch term")
    return out


def resolve_batching(gpu: GpuProfile, s: VllmSettings, max_model_len: int) -> tuple[int, int]:
    rules = s.rules
    if rules.engine == "v0":
        seqs = s.max_num_seqs or 256
        if s.max_num_batched_tokens:
            return s.max_num_batched_tokens, seqs
        # config.py SchedulerConfig: chunked prefill -> 2048, else max(max_model_len, 2048) (a whole prompt)
        chunked = s.enable_chunked_prefill if s.enable_chunked_prefill is not None \
            else chunked_prefill_on(rules, max_model_len)
        return (2048 if chunked else max(max_model_len, 2048)), seqs
    default_mnbt, default_seqs = batch_defaults_for(rules, gpu.memory_total_bytes, gpu.name, s.entrypoint,
                                                    max_model_len, gpu.compute_capability)
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


def replicated_params(spec: ModelSpec, tp: int) -> tuple[int, int]:
    """Parameters every TP rank holds beyond a 1/tp share of the model: (projection params, router params), the
    extra over the even split (summed over the model's layers). Read in vLLM 0.34.0's layers:
    - K/V heads when tp exceeds them: QKVParallelLinear gives each rank max(1, kv // tp) heads
      (model_executor/layers/linear.py:1114-1119, num_kv_head_replicas = tp // kv), so a rank holds one head's k/v
      projections, not kv / tp of them: extra (head_dim + v_head_dim) x hidden x (tp - kv) / tp per attention layer.
    - MLA's down projections: q_a_proj and kv_a_proj_with_mqa, fused as DeepSeekV2FusedQkvAProjLinear
      (MergedColumnParallelLinear with disable_tp=True, models/deepseek_v2.py:953-967) or ReplicatedLinear
      (:1059-1065): hidden x (q_lora_rank + kv_lora_rank + qk_rope_head_dim) per layer, whole on every rank.
    - The MoE router: GateLinear is a ReplicatedLinear (layers/fused_moe/router/gate_linear.py:26; mixtral.py:111,
      qwen3_moe.py:170, deepseek_v2.py:321): num_experts x hidden per MoE layer on every rank.
    Norms are replicated too and counted apart (vllm_weight_bytes)."""
    kv, mla, router = replicated_parts(spec, tp)
    return kv + mla, router


def replicated_parts(spec: ModelSpec, tp: int) -> tuple[int, int, int]:
    """replicated_params split as (K/V heads, MLA down projections, router): SGLang's engine adds its own MLA and
    router terms (engines/sglang.py replicated_weight_bytes) and takes the K/V heads from here."""
    if tp <= 1:
        return 0, 0, 0
    h, kv, mla = spec.hidden_size, 0, 0
    for layer in spec.layers:
        attn = getattr(layer, "attention", layer)  # ParallelHybrid keeps its attention beside the Mamba mixer
        if type(attn).__name__ in ("FullAttention", "SlidingWindow", "ChunkedLocal") and attn.num_kv_heads < tp:
            kv += (attn.head_dim + attn.v_head_dim) * h * (tp - attn.num_kv_heads) // tp
        elif type(attn).__name__ == "MultiLatentAttention":
            q_lora = int(spec.config.get("q_lora_rank") or 0)
            mla += h * (q_lora + attn.kv_lora_rank + attn.qk_rope_head_dim) * (tp - 1) // tp
    router = 0
    if spec.moe is not None and spec.moe.moe_layers:
        router = spec.moe.num_experts * h * spec.moe.moe_layers * (tp - 1) // tp
    return kv, mla, router


def vllm_weight_bytes(spec: ModelSpec, s: VllmSettings, rank_layers: int | None = None,
                      has_embedding: bool = True, has_lm_head: bool = True, kv_heads_only: bool = False) -> int:
    """Weights one rank loads: its share of the model (TP shards projections and the vocabulary, norms replicate),
    the vocabulary padded to a multiple of 64, the rotary cos/sin cache (max_position x rotary_dim), and the
    multimodal encoders (vllm_encoders.py: every stage, sharded over TP; none with every modality limited to 0)."""
    tp = s.tensor_parallel
    total = vllm_text_weight_bytes(spec, s.weights, s.dtype_bytes)
    embed_bytes = spec.params.embedding * s.dtype_bytes
    head_bytes = spec.params.lm_head * s.dtype_bytes
    body = total - embed_bytes - head_bytes
    layers = rank_layers if rank_layers is not None else spec.num_layers
    body = body * layers // spec.num_layers
    norms_replicated = spec.params.norms * s.dtype_bytes * layers // spec.num_layers
    per_rank = (body - norms_replicated) // tp + norms_replicated
    kv, mla, router = replicated_parts(spec, tp)
    proj = kv if kv_heads_only else kv + mla  # kv_heads_only: SGLang adds its own MLA and router terms
    router = 0 if kv_heads_only else router
    if proj or router:
        # what vLLM replicates beyond the even split (replicated_params): projections at the body's mean bytes per
        # parameter (the checkpoint's format), the router in the model dtype (never quantized); this stage's layers
        body_params = max(spec.params.total - spec.params.embedding - spec.params.lm_head, 1)
        per_param = (total - embed_bytes - head_bytes) / body_params
        per_rank += int((proj * per_param + router * s.dtype_bytes) * layers / spec.num_layers)
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
    return per_rank + rotary + encoder_rank_bytes(spec, s)


def mxfp4_moe_padding_bytes(spec: ModelSpec, s: VllmSettings, gpu: GpuProfile) -> int:
    """Bytes one rank's MXFP4 experts grow by when vLLM pads their shapes for its MoE kernel
    (vllm/model_executor/layers/quantization/mxfp4.py, Mxfp4MoEMethod.create_weights): Marlin, the kernel below sm90,
    pads the per-rank intermediate size to a multiple of 128 and the hidden size to 256; the Triton kernels (sm90)
    the intermediate size to 64; FlashInfer on sm100 both to 256. Each expert holds w13 [2I, H] and w2 [H, I] as uint8
    (two e2m1 per byte), an e8m0 scale per 32 and a bf16 bias per output row. gpt-oss-120b at TP 4 on an A100:
    720 -> 768 and 2880 -> 3072, 1.96 GiB per rank (the public log dennislee-a100x4-gpt-oss-120b-tp4-u080 loads 2.01
    GiB more than the checkpoint's share)."""
    if s.weights.name != "mxfp4" or spec.moe is None or not spec.moe.moe_layers:
        return 0
    cc = gpu.compute_capability or 9.0
    i_align, h_align = (128, 256) if (cc < 9.0 or cc >= 11.0) else ((256, 256) if cc >= 10.0 else (64, 1))
    inter, hidden = spec.moe.expert_intermediate_size // s.tensor_parallel, spec.hidden_size

    def expert(i: int, h: int) -> int:
        return (2 * i * h) // 2 + (2 * i * h) // 32 + 2 * i * 2 + (h * i) // 2 + (h * i) // 32 + h * 2

    padded = expert(ceil_div(inter, i_align) * i_align, ceil_div(hidden, h_align) * h_align)
    return (padded - expert(inter, hidden)) * spec.moe.num_experts * spec.moe.moe_layers


def _rules(version) -> VersionRules:
    return rules_for(".".join(str(n) for n in version) if isinstance(version, tuple) else version)


def uses_v2_model_runner(spec: ModelSpec, version) -> bool:
    """0.26-0.28 run dense, non-hybrid decoders on the V2 model runner (config/vllm.py: use_v2_model_runner,
    _is_default_v2_model_runner_model); MoE and hybrid (Mamba) models stay on the V1 runner. From 0.29 every model
    defaults to V2 (VersionRules.v2_runner_for_all; not modelled: ROCm keeping V1 for DeepSeek V3.2/V4 and GLM DSA)."""
    rules = _rules(version)
    if rules.v2_runner_for_all:
        return rules.v2_runner
    hybrid = "mamba" in spec.layer_kinds
    return rules.v2_runner and spec.moe is None and not hybrid


def uses_v2_runner(spec: ModelSpec, s: VllmSettings) -> bool:
    """The V2 model runner for these settings: 0.26 keeps n-gram speculative decoding on the V1 runner (the H200
    n-gram start ran v1/worker/gpu_model_runner.py) but runs eagle, eagle3 and mtp on V2 for the targets V2 takes
    (config/vllm.py:2154-2180 _get_v2_model_runner_unsupported_features); LoRA starts ran the V2 runner."""
    return uses_v2_model_runner(spec, s.version) and s.speculative_method not in ("ngram",)


SPECULATIVE_METHODS = ("ngram", "eagle", "eagle3", "mtp")


def lora_slot_bytes(spec: ModelSpec, s: VllmSettings) -> int:
    """The LoRA slots vLLM preallocates with --enable-lora (lora/layers/*.py, counted in the model's memory): per
    slot and layer, A [rank, in] and B [out, rank] for the q/k/v, o, gate/up and down projections (column-parallel
    layers keep A whole and shard B over TP, row-parallel ones shard A), plus the embedding ([vocab, rank] +
    [hidden, rank]) and the lm_head ([rank, hidden] + [vocab, rank]); activation dtype. Dense MLPs only: MoE experts'
    LoRA (FusedMoEWithLoRA) is not counted."""
    if not s.enable_lora:
        return 0
    tp, h = s.tensor_parallel, spec.hidden_size
    q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    inter = spec.intermediate_size if spec.moe is None else 0
    column_a = 3 * h + (2 * h if inter else 0)  # q, k, v slices; gate, up slices: A [rank, hidden] each
    column_b = (q + 2 * kv + 2 * inter) // tp
    row_a = (q + inter) // tp  # o_proj A [rank, q], down_proj A [rank, inter]
    row_b = 2 * h if inter else h
    per_layer = (column_a + column_b + row_a + row_b) * s.max_lora_rank
    vocab = _padded_vocab(spec.vocab_size, tp)
    ends = 2 * (vocab + h) * s.max_lora_rank
    return (per_layer * spec.num_layers + ends) * s.max_loras * s.dtype_bytes


def drafter_of(spec: ModelSpec, s: VllmSettings) -> vllm_draft.Drafter | None:
    """The model-based drafter these settings load (engines/vllm_draft.py); None for n-gram or none."""
    return vllm_draft.drafter(spec, s.speculative_method, weights=s.weights, dtype_bytes=s.dtype_bytes,
                              tp=s.tensor_parallel, draft_config=s.draft_config,
                              own_lm_head=None if s.draft_weights_loaded else False, pp=s.pipeline_parallel)


def draft_profile_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool,
                        layer_peak=None, gpu: GpuProfile | None = None) -> int:
    """The drafter's part of the profile run's torch peak, beside the target's: the drafter's dummy forward over mnbt
    tokens (its decoder layer's peak, `layer_peak(layer_spec)`, by default the fitted forward_bytes) and, on the V1
    runner, the dummy rejection-sampler pass (vllm_draft.py)."""
    if not s.speculative_method:
        return 0
    d = drafter_of(spec, s)
    peak = layer_peak or (lambda one: forward_bytes(one, s, mnbt))
    forward = vllm_draft.draft_forward_bytes(d, mnbt, s.dtype_bytes, peak) if d else 0
    rejection = 0 if v2_runner else vllm_draft.rejection_sampler_bytes(
        spec, seqs, mnbt, s.dtype_bytes, gpu, s.flashinfer_sampler)
    return max(forward, rejection)


def drafter_profile_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool,
                          gpu: GpuProfile | None = None, max_model_len: int | None = None, block_size: int = 16) -> int:
    """draft_profile_bytes with the drafter's decoder layer sized as the release profiles the target's: by mechanism
    on 0.26 (profile_peak_of of the one-layer drafter, no sampler), by the fitted forward before."""
    if not s.speculative_method:
        return 0
    if s.rules.profile != "mechanism":
        return draft_profile_bytes(spec, s, mnbt, seqs, v2_runner, gpu=gpu)
    plain = replace(s, speculative_method=None, num_speculative_tokens=0)
    return draft_profile_bytes(spec, s, mnbt, seqs, v2_runner, lambda one: profile_peak_of(
        one, plain, mnbt, seqs, False, False, gpu, max_model_len, block_size).bytes, gpu=gpu)


def drafter_profile_note(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool,
                         gpu: GpuProfile | None, max_model_len: int, block_size: int) -> str:
    """explain's line for the profile peak with a drafter: the target's phases, the drafter's forward, the rejection
    pass; the largest is the peak (with_drafter_profile)."""
    plain = replace(s, speculative_method=None, num_speculative_tokens=0)
    target = profile_peak_of(spec, plain, mnbt, seqs, v2_runner, True, gpu, max_model_len, block_size)
    d = drafter_of(spec, s)
    parts = [f"target {target.bytes / GiB:.3f} GiB ({target.phase} phase)"]
    if d is not None:
        layer = profile_peak_of(d.layer_spec, plain, mnbt, seqs, False, False, gpu, max_model_len, block_size).bytes
        parts.append(f"drafter forward {vllm_draft.draft_forward_bytes(d, mnbt, s.dtype_bytes, lambda one: layer) / GiB:.3f}"
                     f" GiB (its layer {layer / GiB:.3f} + {d.held_hidden_states} x {mnbt:,} x {d.hidden_size} held)")
    if not v2_runner:
        rejection = vllm_draft.rejection_sampler_bytes(spec, seqs, mnbt, s.dtype_bytes, gpu, s.flashinfer_sampler)
        parts.append(f"rejection pass {rejection / GiB:.3f} GiB (2 x {min(seqs, mnbt):,} rows of logits)")
    return "profile peak with a drafter, the largest of: " + "; ".join(parts) + " (engines/vllm_draft.py)"


def with_drafter_profile(spec: ModelSpec, s: VllmSettings, act: int, mnbt: int, seqs: int, v2_runner: bool,
                         last_stage: bool, gpu: GpuProfile | None, max_model_len: int, block_size: int) -> int:
    """activation_bytes (`act`: on releases profiled by mechanism, 0.26, the target's own phases) with a drafter: on
    the last stage, the larger of it and the drafter's terms (drafter_profile_bytes: its decoder layer's phases plus
    what it holds, the V1 rejection pass; before 0.26 the fitted ones)."""
    if not s.speculative_method or not last_stage:
        return act
    return max(act, drafter_profile_bytes(spec, s, mnbt, seqs, v2_runner, gpu, max_model_len, block_size))


def cudagraph_estimate_bytes(s: VllmSettings) -> int:
    """The CUDA-graph memory vLLM's profile estimates ("Estimated CUDA graph memory"), whether or not the release
    subtracts it from the KV budget (subtracts_cudagraph_estimate); 0 under --enforce-eager. Your calibration's
    figure when one is set."""
    if s.enforce_eager:
        return 0
    graphs = int(engine_constants("vllm")["cudagraph_bytes"])
    if s.calibration is not None:
        graphs = s.calibration.cudagraph(s.tensor_parallel, s.pipeline_parallel, graphs)
    return graphs


def v2_graph_pool(spec: ModelSpec, s: VllmSettings, gpu: GpuProfile, mnbt: int, seqs: int,
                  mode: str = "capture"):
    """The V2 model runner's CUDA graphs on one rank (engines/vllm_graphs.py graph_pool): "capture" what the capture
    takes (after the KV cache on 0.26-0.28, before it is sized on 0.34), "estimate" what the 0.29+ profile subtracts.
    The piece graph's bytes are the platform's (CUDA, fitted on the H200's 0.26 captures; HIP, read from one MI300X
    start: scripts/fit_cudagraphs.py); the layers are the largest pipeline stage's."""
    from .vllm_graphs import graph_pool
    from .vllm_profile import cublas_workspace_bytes

    c = engine_constants("vllm")
    piece = c["cudagraph_piece_graph_bytes_rocm" if gpu.vendor == "amd" else "cudagraph_piece_graph_bytes"]
    layers = max(pp_layer_partition(spec.num_layers, s.pipeline_parallel))
    return graph_pool(layers, spec.hidden_size, seqs, mnbt, piece_graph_bytes=float(piece),
                      full_token_bytes_per_hidden=float(c["cudagraph_full_token_bytes_per_hidden"]),
                      workspace_bytes=cublas_workspace_bytes(gpu), mode=mode,
                      decode_query_len=1 + (s.num_speculative_tokens if s.speculative_method else 0),
                      compute_capability=gpu.compute_capability, release=parse_version(s.version))


def v2_graph_bytes(spec: ModelSpec, s: VllmSettings, gpu: GpuProfile, mnbt: int, seqs: int) -> tuple[int, int]:
    """(subtracted from the budget, captured after the KV cache) for the V2 runner's graphs at these settings: the
    0.29+ estimate or 0.34's measured capture in the budget, 0.26-0.28's capture after it; (0, 0) under
    --enforce-eager."""
    if s.enforce_eager:
        return 0, 0
    if extensible_kv_cache_on(s, gpu):
        return v2_graph_pool(spec, s, gpu, mnbt, seqs, "capture").total_bytes, 0
    if s.rules.v2_cudagraph_estimate:
        return v2_graph_pool(spec, s, gpu, mnbt, seqs, "estimate").total_bytes, 0
    return 0, v2_graph_pool(spec, s, gpu, mnbt, seqs, "capture").total_bytes


def sampler_state_bytes(spec: ModelSpec, s: VllmSettings, seqs: int, v2: bool) -> int:
    """The V2 sampler's penalty state, allocated once per last-stage rank when load_model builds the sampler, after the
    weights are measured ("Model loading took" leaves it out): prompt_bin_mask [max_num_seqs, cdiv(vocab, 32)] and
    output_bin_counts [max_num_seqs, vocab], both int32 (v1/worker/gpu/sample/penalties.py:40-50 at v0.31.0, built
    by sample/sampler.py:65 from gpu/model_runner.py:468, after :406; the same at 0.26.0-0.33.0). From 0.27 the
    profile's consumed memory is the free-memory drop since the worker's first snapshot, so it comes out of the KV
    budget (VersionRules.consumed_from_free_memory); 0.26's accounting left it out. Unpadded vocabulary
    (model_config.get_vocab_size)."""
    if not (v2 and s.rules.consumed_from_free_memory):
        return 0
    vocab = spec.vocab_size
    return seqs * vocab * 4 + seqs * ceil_div(vocab, 32) * 4


def subtracts_cudagraph_estimate(spec: ModelSpec, version) -> bool:
    """0.21+ subtracts a profiled CUDA-graph estimate from the KV budget (gpu_worker.py,
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default since 0.21.0, vllm#38284), but the V2 runner's
    profile_cudagraph_memory returns 0 through 0.28 (v1/worker/gpu/model_runner.py:843-845 at v0.28.0): there, graphs
    are captured after the KV cache, on top of the budget. From 0.29.0 the V2 runner profiles them too (a throwaway
    capture, v1/worker/gpu/cudagraph_utils.py:718 at v0.29.0) and the budget subtracts it (gpu_worker.py:606-610)."""
    rules = _rules(version)
    return rules.cudagraph_estimate and (rules.v2_cudagraph_estimate or not uses_v2_model_runner(spec, version))


def uses_nccl_nvls(gpu: GpuProfile, s: VllmSettings) -> bool:
    """NCCL's NVLink SHARP (NVLS) all-reduce, which allocates its own buffers on every rank at start-up: on by
    default (NCCL_NVLS_ENABLE unset) where GPUs sit on a third-generation NVSwitch, i.e. SXM Hopper/Blackwell
    boards; used when tensor parallelism all-reduces. PCIe cards, NVLink-bridge pairs (H100 NVL) and A100 have
    none. s.nccl_nvls overrides (False: NCCL_NVLS_ENABLE=0, as on the project's H200 host)."""
    if s.tensor_parallel < 2:
        return False
    if s.nccl_nvls is not None:
        return s.nccl_nvls
    return (gpu.vendor == "nvidia" and (gpu.compute_capability or 0) >= 9.0
            and (gpu.form_factor or "").upper().startswith("SXM"))


def moe_workspace_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int) -> int:
    """The fused-MoE kernel's intermediate caches for the profile batch (model_executor/layers/fused_moe/
    fused_moe.py:fused_experts_impl: intermediate_cache13 of M x top_k x max(2I, H) and intermediate_cache2 of
    M x top_k x I, activation dtype, I = expert width / tp, M = min(mnbt, VLLM_FUSED_MOE_CHUNK_SIZE 32768)). Before
    0.26 the public 0.19 logs show them on top of the sampler's peak (kept as the modular kernel's workspace)."""
    moe = spec.moe
    if moe is None or not moe.moe_layers or not moe.expert_intermediate_size:
        return 0
    m = min(mnbt, 32768)
    inter = moe.expert_intermediate_size // s.tensor_parallel
    return m * moe.experts_per_token * (max(2 * inter, spec.hidden_size) + inter) * s.dtype_bytes


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
    holds the lm_head and samples (gpu_model_runner.py profile_run: `if get_pp_group().is_last_rank`). The logits
    are gathered across TP ranks before sampling (logits_processor.py: tensor_model_parallel_gather / all_gather),
    so every sampling rank holds the whole padded vocabulary."""
    c = engine_constants("vllm")
    rows = min(seqs, mnbt)
    if v2_runner:
        per_logit = c["sampler_bytes_per_logit"]
    else:
        per_logit = s.rules.sampler_bytes_per_logit or c["sampler_bytes_per_logit_v1"]
    return int(per_logit * rows * _padded_vocab(spec.vocab_size, 1))


def profile_peak_of(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool = True,
                    last_stage: bool = True, gpu: GpuProfile | None = None,
                    max_model_len: int | None = None, block_size: int = 16) -> ProfilePeak:
    """The profile peak by mechanism (engines/vllm_profile.py), for releases whose rules say so (0.26)."""
    return profile_peak(
        spec, gpu, tp=s.tensor_parallel, m=mnbt, seqs=seqs, dtype_bytes=s.dtype_bytes, weights=s.weights.name,
        max_model_len=max_model_len or s.max_model_len or spec.max_position_embeddings, block_size=block_size,
        v2_runner=v2_runner and uses_v2_runner(spec, s),
        compiled=not s.enforce_eager and s.compile_cache != "warm", last_stage=last_stage,
        padded_vocab=_padded_vocab(spec.vocab_size, 1),
        v2_sampler_bytes_per_logit=float(engine_constants("vllm")["sampler_bytes_per_logit"]),
        flashinfer_sampler=s.flashinfer_sampler)


def activation_bytes(spec: ModelSpec, s: VllmSettings, mnbt: int, seqs: int, v2_runner: bool = True,
                     last_stage: bool = True, gpu: GpuProfile | None = None, max_model_len: int | None = None,
                     block_size: int = 16) -> int:
    """Torch peak of the profile run: the larger of the dummy forward over mnbt tokens and, on the last pipeline
    stage, the dummy sampler over min(max_num_seqs, mnbt) rows of logits (before 0.26, plus the fused-MoE
    workspace the forward left allocated). From 0.26 by mechanism (profile_peak_of); before, the forward factor is
    fitted (kvcalc/data/constants.yaml) on logs of those releases."""
    if s.rules.profile == "mechanism":
        # the target's own phases; a drafter's come beside them (with_drafter_profile)
        target = replace(s, speculative_method=None, num_speculative_tokens=0) if s.speculative_method else s
        return profile_peak_of(spec, target, mnbt, seqs, v2_runner, last_stage, gpu, max_model_len, block_size).bytes
    forward = forward_bytes(spec, s, mnbt)
    if not last_stage:
        return forward
    sampler = sampler_bytes(spec, s, mnbt, seqs, v2_runner)
    if s.rules.engine == "v1" and not s.rules.v2_runner:
        sampler += moe_workspace_bytes(spec, s, mnbt)
    if s.speculative_method:
        # with a drafter the profile's dummy run computes fp32 logits at every batched position (rejection sampling
        # reads them all): the H200 n-gram start (k=4, 2048 tokens) peaked at 1.07 GiB against 0.98 GiB of logits
        sampler = max(sampler, mnbt * _padded_vocab(spec.vocab_size, 1) * 4)
    peak = max(forward, sampler)
    return peak


def pp_layer_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage (vllm/distributed/utils.py:get_pp_indices, VLLM_PP_LAYER_PARTITION unset): an even
    split, the remainder added one each to the stages before the last, from the second-to-last backwards."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def estimate(spec: ModelSpec, gpu: GpuProfile, s: VllmSettings) -> VllmEstimate:
    """Predict what vLLM logs at start-up for this model, GPU and settings.

    A release older than the first that serves the model's architecture or one of its layer kinds
    (vllm_support.py) cannot start it at all: the estimate says so (fits False, serve_gate, first note) and its
    figures are those of the first release that serves it, the same settings otherwise."""
    parse_version(s.version)
    gate = unserved_gate(spec, s.version)
    if gate is None:
        return _estimate(spec, gpu, s)
    est = _estimate(spec, gpu, replace(s, version=gate.since, engine=None))
    est.notes.insert(0, f"{unserved_reason(spec, s.version)}; the figures are vLLM {gate.since}'s")
    est.fits, est.serve_gate = False, gate
    return est


def _estimate(spec: ModelSpec, gpu: GpuProfile, s: VllmSettings) -> VllmEstimate:
    """The estimate for a release that serves the model.

    Each pipeline stage (one rank of each TP group) gets its own budget; the deployment's blocks are the smallest
    stage's (kv_cache_utils.py:get_kv_cache_configs, "change the num_blocks of each rank to the smallest"). The
    returned estimate is that stage's, with the deployment's totals beside it."""
    rules = s.rules
    util = s.util
    if not 0 < util <= 1:
        raise UsageError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    if s.compile_cache not in COMPILE_CACHE_STATES:
        raise UsageError(f"compile cache {str(s.compile_cache)[:20]!r}: one of {', '.join(COMPILE_CACHE_STATES)}")
    if s.kv.vllm_name is None:
        raise UsageError(f"vLLM has no {s.kv.label} cache (kv_cache_dtype is auto, fp8, fp8_e5m2, "
                         "int8/fp8/int4_per_token_head or nvfp4)")
    kv_refused = vllm_kv_refusal(s.kv, s.version, gpu.compute_capability, gpu.vendor)
    if kv_refused:
        raise UnsupportedModelError(f"vLLM cannot serve {spec.name} this way: {kv_refused}")
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
    v2 = uses_v2_runner(spec, s)
    if s.speculative_method is not None and s.speculative_method not in SPECULATIVE_METHODS:
        raise UsageError(f"speculative method {s.speculative_method!r}: kvcalc models {', '.join(SPECULATIVE_METHODS)}")

    max_model_len = s.max_model_len or spec.max_position_embeddings
    mnbt, seqs = resolve_batching(gpu, s, max_model_len)
    total = gpu.memory_total_bytes
    requested = math.ceil(total * util)  # v1/worker/utils.py rounds up
    world = s.tensor_parallel * pp
    non_torch = int(c["non_torch_bytes_tp"] if world > 1 else c["non_torch_bytes"])
    nvls = uses_nccl_nvls(gpu, s)
    if nvls:
        non_torch += int(c["nccl_nvls_bytes"])
    # the CUDA-graph estimate subtracted from the budget: V1 runner from 0.21 (one fitted constant); V2 runner from
    # 0.29 (before, its profile_cudagraph_memory returned 0): a throwaway capture of every PIECEWISE graph with the
    # FULL graphs extrapolated from two (v1/worker/gpu/cudagraph_utils.py:854-967 at v0.31.0), sized from the
    # capture's structure (v2_graph_pool, engines/vllm_graphs.py)
    v2_estimate = v2 and rules.v2_cudagraph_estimate
    extensible = extensible_kv_cache_on(s, gpu)
    v2_in_budget, v2_after_kv = v2_graph_bytes(spec, s, gpu, mnbt, seqs) if v2 else (0, 0)
    cudagraph = 0 if (s.enforce_eager or (v2 and not v2_estimate) or not rules.cudagraph_estimate) else \
        (v2_in_budget if v2_estimate else int(c["cudagraph_bytes"]))
    if extensible:
        # 0.34+: no estimate (gpu/model_runner.py:1121-1125); the graphs are captured before the cache is sized and
        # their pool is part of the measured use (gpu_worker.py:1103, extensible_kv_cache.py:613)
        cudagraph = 0 if s.enforce_eager else (v2_in_budget if v2 else int(c["cudagraph_bytes"]))
    if s.calibration is not None:  # measured in the user's environment (kvcalc/calibrate.py)
        non_torch, cudagraph = (s.calibration.non_torch(s.tensor_parallel, pp, non_torch),
                                s.calibration.cudagraph(s.tensor_parallel, pp, cudagraph))
    # graphs captured after the KV cache is allocated, on top of gpu_memory_utilization (engines/vllm_graphs.py)
    placement = graph_placement(s.enforce_eager, v2 and not v2_estimate and not extensible,
                                rules.cudagraph_estimate or extensible)
    # the V2 runner's own capture (0.26-0.28); V1 before 0.21 and V0 keep the fitted constant
    capture = (v2_after_kv if v2 else int(c["cudagraph_capture_bytes"])) if placement == "after_kv" else 0
    others_outside = 0 if rules.others_reduce_kv else s.other_processes_bytes  # else inside `requested` already
    graph_overflow = max(capture - max(total - requested - others_outside, 0), 0)

    notes: list[str] = []
    if s.gpu_memory_utilization is None:
        notes.append(f"gpu_memory_utilization {util}: vLLM {release_of(s.version)}'s default (config/cache.py)")
    notes.append(evidence_note(s.version))
    if v2 and (v2_in_budget or v2_after_kv) and s.calibration is None:
        mode = "estimate" if v2_estimate and not extensible else "capture"
        notes.append(v2_graph_pool(spec, s, gpu, mnbt, seqs, mode).describe()
                     + " (engines/vllm_graphs.py: per-graph bytes fitted on the H200's 0.26 captures"
                     + ("; a HIP graph's read from an MI300X start" if gpu.vendor == "amd" else "") + ")")
    notes += release_caveats(s, gpu)
    if rules.engine == "v0":
        notes.append(f"vLLM {release_of(s.version)} runs the V0 engine: the profile covers {mnbt:,} batched tokens"
                     + ("" if mnbt < max_model_len else " (a whole max_model_len prompt: chunked prefill is off)") + ", every layer keeps max_model_len of KV, and it logs "
                     "'# GPU blocks' (worker/worker.py:determine_num_available_blocks)")
    if nvls:
        notes.append(f"tensor parallel on {gpu.name}: NCCL's NVLink SHARP buffers take "
                     f"~{c['nccl_nvls_bytes'] / GiB:.2f} GiB per rank outside torch (set NCCL_NVLS_ENABLE=0 "
                     "to save it: --nccl-nvls off)")
    if s.enable_lora:
        notes.append(f"LoRA: {s.max_loras} slot(s) of rank {s.max_lora_rank} preallocated, "
                     f"{lora_slot_bytes(spec, s) / GiB:.3f} GiB per rank in the weights (lora/layers/)")
    if s.speculative_method:
        d = drafter_of(spec, s)
        blocks = vllm_draft.mamba_speculative_blocks(spec, s.speculative_method, s.num_speculative_tokens)
        notes.append(f"speculative decoding ({s.speculative_method}, {s.num_speculative_tokens} tokens): "
                     + (f"{d.described}: {d.weight_bytes / GiB:.2f} GiB of weights per rank and {len(d.kv_layers)} "
                        "KV-cache layer(s) (vllm_draft.py)" if d else "no draft model")
                     + (f"; each Mamba layer keeps {blocks} extra state block(s) per request" if blocks else "")
                     + f"; {'V2' if v2 else 'V1'} model runner")
    if s.tensor_parallel > spec.num_kv_heads:
        notes.append(f"tp {s.tensor_parallel} > {spec.num_kv_heads} KV heads: each rank holds a replicated KV head, "
                     "its cache and its k/v projections (QKVParallelLinear, model_executor/layers/linear.py)")
    if s.weights.name == "bf16" and gpu.vendor == "nvidia" and cc < 8.0:
        notes.append(f"{gpu.name} has no bf16: vLLM casts the model to fp16 (same bytes)")
    elif s.weights.name == "fp8" and gpu.vendor == "nvidia" and cc < 8.9:
        notes.append(f"FP8 weights on {gpu.name} (compute capability {cc}) run as a weight-only kernel (Marlin)")
    if capture:
        where = ("V2 model runner" if v2 else
                 f"vLLM {release_of(s.version)} (no CUDA-graph estimate before 0.21; {rules.engine.upper()} engine)")
        left = max(total - requested - others_outside, 0)
        notes.append(f"{where}: CUDA graphs are captured after the KV cache is allocated, using about "
                     f"{capture / GiB:.2f} GiB beyond gpu_memory_utilization (not subtracted from KV)"
                     + ("" if s.kv_cache_memory_bytes else
                        f"; {left / GiB:.2f} GiB outside vLLM's share: margin {(left - capture) / GiB:+.2f} GiB"))
    if graph_overflow and not s.kv_cache_memory_bytes:
        highest = math.floor(100 * (total - capture) / total) / 100
        notes.append(f"util {s.gpu_memory_utilization} leaves {(total - requested) / GiB:.2f} GiB outside vLLM's "
                     f"budget, less than the ~{capture / GiB:.2f} GiB the CUDA graphs take after the KV cache: "
                     f"capture would run out of memory (use --util {highest} or lower, or --enforce-eager)")
    if pp > 1:
        notes.append(f"pipeline stages of {pp_layer_partition(spec.num_layers, pp)} layers "
                     "(vllm/distributed/utils.py:get_pp_indices); each stage has its own budget, the smallest "
                     "stage's blocks serve the deployment")
    notes += encoder_notes(spec, s, mnbt, seqs, max_model_len, v2)
    fitted_terms = ("non-torch and CUDA-graph memory" if rules.profile == "mechanism" and not s.speculative_method
                    else "activation, non-torch and CUDA-graph memory")
    notes.append(f"{fitted_terms}: {c['source']}")
    if s.calibration is not None:
        notes.append(s.calibration.describe(s.tensor_parallel, pp))

    others = s.other_processes_bytes
    if others and rules.others_reduce_kv:
        notes.append(f"{others / GiB:.2f} GiB held by other processes on the fullest GPU come out of its KV budget "
                     "(this release's profile counts all used memory); that GPU sets every rank's blocks")
    elif others:
        notes.append(f"{others / GiB:.2f} GiB held by other processes: not taken from the KV budget, but vLLM needs "
                     f"total x util free at start ({(total - others) / GiB:.2f} of {requested / GiB:.2f} GiB free)")
    free_budget = None
    if extensible:
        # extensible_kv_cache.py:613-617 at v0.34.0: what the device has free at the first snapshot, less what this
        # instance holds beyond its KV cache (the stage's weights, activation and sampler state come off per stage)
        free_budget = extensible_free_bytes(s, gpu) - non_torch - cudagraph
    stages = stage_budgets(spec, gpu, s, requested - non_torch - cudagraph - (others if rules.others_reduce_kv else 0),
                           max_model_len, mnbt, seqs, v2, free_budget=free_budget)
    # kv_cache_utils.py:get_kv_cache_configs: "change the num_blocks of each rank to the smallest among all ranks"
    low = stages[0]
    for stage in stages[1:]:
        if stage.num_blocks < low.num_blocks or (not stage.kv_fits and low.kv_fits):
            low = stage
    layout, blocks, available = low.layout, low.num_blocks, low.available_kv_bytes
    if low.sampler_state_bytes:
        notes.append(f"non-torch memory includes the V2 sampler's penalty state, {low.sampler_state_bytes / GiB:.2f} "
                     f"GiB ({seqs:,} x {spec.vocab_size:,} int32 bin counts and a prompt mask, "
                     "v1/worker/gpu/sample/penalties.py): from 0.27 vLLM counts it as consumed memory "
                     "(utils/mem_utils.py total_consumed)")
    logged = logged_kv_tokens(layout, blocks, rules.logged_tokens)
    pinned = None
    if rules.profile == "mechanism" and not s.speculative_method and not s.kv_cache_memory_bytes:
        peak = profile_peak_of(spec, s, mnbt, seqs, v2, low is stages[-1], gpu, max_model_len, layout.block_size)
        notes.append(peak.describe() + " (engines/vllm_profile.py)")
        if v2 and not s.enforce_eager and s.compile_cache == "warm":  # cold, a first start, is the default
            notes.append("torch.compile cache warm: the stored AOT artifact is loaded, so the profile run holds no "
                         "Inductor compile buffers (compilation/decorators.py)")
        elif v2 and not s.enforce_eager and rules.profile_may_pin_freed_blocks:
            pinned = pinned_range(spec, s, stages, rules.logged_tokens)
            if pinned is not None:
                notes.append(f"capacity range {pinned.logged_kv_tokens:,}-{logged:,} KV tokens: {pinned.reason}")
    if rules.profile == "mechanism" and s.speculative_method and not s.kv_cache_memory_bytes and low is stages[-1]:
        notes.append(drafter_profile_note(spec, s, mnbt, seqs, v2, gpu, max_model_len, layout.block_size))
    concurrency = layout.max_concurrency(blocks) if blocks else 0.0
    shortfall = (0 if low.kv_fits else layout.min_kv_bytes - available) + graph_overflow
    if extensible:
        margin = extensible_margin(gpu, low.activation_bytes)
        bound = "free memory" if low.extensible_free_bound else "gpu_memory_utilization"
        notes.append(f"vLLM {release_of(s.version)} sizes an extensible KV cache after warmup and CUDA-graph capture "
                     f"(v1/worker/extensible_kv_cache.py:592-618): min(util x total - used, free at start - used - "
                     f"margin {margin / GiB:.2f} GiB) - transient peak {low.activation_bytes / GiB:.2f} GiB, "
                     f"the margin max({'3' if gpu.vendor == 'amd' else '1'} GiB, 0.75 x peak); here {bound} binds"
                     + ("" if s.gpu_memory_utilization is not None else " (util 1.0, the default with it)"))
    if others and not rules.others_reduce_kv and requested + others > total and not extensible:
        # v1/worker/gpu_worker.py: "Free memory on device ... is less than desired GPU memory utilization"
        shortfall += requested + others - total
        notes.append(f"vLLM refuses to start: {(total - others) / GiB:.2f} GiB free is less than the "
                     f"{requested / GiB:.2f} GiB gpu_memory_utilization asks for (lower --util to "
                     f"{math.floor(100 * (total - others) / total) / 100} or below)")
    if s.kv_cache_memory_bytes:
        # the fixed KV budget ignores gpu_memory_utilization; weights, activations and KV must still fit the GPU
        used = (low.weights_bytes + low.activation_bytes + non_torch + low.sampler_state_bytes + cudagraph
                + s.kv_cache_memory_bytes)
        notes.append(f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes:,}: the KV budget per GPU as given "
                     "(gpu_memory_utilization ignored, no memory profile; gpu_worker.py)")
        if used > total:
            shortfall += used - total
            notes.append(f"weights + activations + non-torch + KV = {used / GiB:.2f} GiB exceed the GPU's "
                         f"{total / GiB:.2f} GiB by {(used - total) / GiB:.2f} GiB")
        # the fixed budget replaces total x util: what capture finds is what weights, activations and KV leave
        shortfall -= graph_overflow
        graph_overflow = max(capture - max(total - used, 0), 0)
        shortfall += graph_overflow
        if graph_overflow:
            notes.append(f"weights + activations + non-torch + KV leave {max(total - used, 0) / GiB:.2f} GiB, less "
                         f"than the ~{capture / GiB:.2f} GiB the CUDA graphs take after the KV cache: capture would "
                         "run out of memory (lower --kv-cache-memory-bytes, or --enforce-eager)")
    starts = low.kv_fits and shortfall == graph_overflow  # nothing but the capture is short
    return VllmEstimate(
        total_memory=total, requested_memory=requested, weights_bytes=low.weights_bytes,
        # what vLLM 0.27+ logs as consumed beyond the weights: non-torch and the V2 sampler's state (its stage's)
        activation_bytes=low.activation_bytes, non_torch_bytes=non_torch + low.sampler_state_bytes,
        cudagraph_bytes=cudagraph,
        available_kv_bytes=available, block_size=layout.block_size, page_bytes_all_layers=layout.bytes_per_block,
        num_gpu_blocks=blocks, max_model_len=max_model_len, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
        logged_kv_tokens=logged, logged_concurrency=round(concurrency, 2),
        kv_bytes_per_token=low.kv_bytes_per_token, fits=low.kv_fits and not graph_overflow and not shortfall,
        shortfall_bytes=shortfall,
        deployment_weights_bytes=sum(b.weights_bytes for b in stages) * s.tensor_parallel,
        deployment_kv_bytes_per_token=sum(b.kv_bytes_per_token for b in stages) * s.tensor_parallel,
        cudagraph_overflow_bytes=graph_overflow, notes=layout.notes + notes, layout=layout, stages=tuple(stages),
        sampler_state_bytes=low.sampler_state_bytes, pinned=pinned,
        graph_capture=GraphCapture(placement, capture, capture - graph_overflow if graph_overflow else
                                   max(total - (used if s.kv_cache_memory_bytes else requested + others_outside), 0),
                                   starts),
    )


def pinned_range(spec: ModelSpec, s: VllmSettings, stages: list[StageBudget], logged_mode: str) -> PinnedRange | None:
    """The capacity of a cold 0.27-0.30 compile whose freed Inductor embedding copy stays pinned (the caller checks
    the release, the V2 runner's compile phase and the start kind): every rank's KV budget less the copy's segment
    less 20 MiB (vllm_profile.pinned_compile_segment), the smallest stage's blocks serving, as in estimate(). None
    where the copy is too small to pin anything. 0.31.0 runs the profile under max_split_size_mb 20
    (v1/worker/gpu_worker.py:612-626, _scoped_allocator_max_split :368-394, on CUDA and ROCm with torch's native
    allocator): a request below 20 MiB never takes a block of 20 MiB or more, a larger one takes it only whole
    (CUDACachingAllocator.cpp get_free_block / should_split), so the freed copy stays releasable and no range
    applies there."""
    copy = inductor_embedding_copy(spec, s.tensor_parallel, s.dtype_bytes, _padded_vocab(spec.vocab_size, 1))
    segment, pin = pinned_compile_segment(copy)
    if not pin:
        return None
    low = None
    for stage in stages:
        avail = stage.available_kv_bytes - pin
        blocks = stage.layout.num_blocks(max(avail, 0))
        fits = avail >= stage.layout.min_kv_bytes
        if low is None or blocks < low[1] or (not fits and low[2]):
            low = (stage, blocks, fits, avail)
    stage, blocks, fits, avail = low
    tokens = logged_kv_tokens(stage.layout, blocks, logged_mode)
    per_rank = " per rank" if s.tensor_parallel > 1 else ""
    reason = (f"a cold torch.compile start on vLLM {release_of(s.version)} (no stored AOT artifact) can leave the "
              f"freed segment of Inductor's embedding copy ({copy / MiB:,.1f} MiB{per_rank}, a {segment / MiB:,.0f} "
              f"MiB allocator segment) pinned by a later small allocation; vLLM 0.27-0.30 count it as consumed "
              f"(utils/mem_utils.py:317-319 at v0.29.0), so the low end takes the segment less the 20 MiB one a warm "
              f"start opens, {pin / GiB:.2f} GiB{per_rank}, from the KV cache. Whether it pins is the allocator's "
              "best fit at that moment, not a setting: 4 of the 7 public cold 0.27-0.30 starts pinned (the tied-"
              "embedding models), 3 did not (docs/validation/README.md, 'The pinned compile segment'). A warm "
              "compile cache (--compile-cache warm), --enforce-eager or vLLM 0.31+ (profile run capped at "
              "max_split_size_mb 20, gpu_worker.py:612-626) avoids it")
    return PinnedRange(copy_bytes=copy, segment_bytes=segment, pinned_bytes=pin, available_kv_bytes=avail,
                       num_gpu_blocks=blocks, logged_kv_tokens=tokens,
                       logged_concurrency=round(stage.layout.max_concurrency(blocks), 2) if blocks else 0.0,
                       kv_fits=fits, reason=reason)


def stage_budgets(spec: ModelSpec, gpu: GpuProfile, s: VllmSettings, budget: int, max_model_len: int, mnbt: int,
                  seqs: int, v2: bool, free_budget: int | None = None) -> list[StageBudget]:
    """Each stage's KV budget: `budget` (requested less the stage-invariant non-torch and CUDA-graph terms) less its
    own weights and activation peak, laid out over its own layers. free_budget (the extensible KV cache, 0.34+):
    the free memory at the first snapshot less the same terms; the stage's budget is then
    min(budget, free_budget - margin(its peak)) less its own terms (extensible_kv_cache.py:616-617 at v0.34.0)."""
    pp = s.pipeline_parallel
    out = []
    start = 0
    for stage, n_layers in enumerate(pp_layer_partition(spec.num_layers, pp)):
        first, last = stage == 0, stage == pp - 1
        w = vllm_weight_bytes(spec, s, n_layers, has_embedding=first, has_lm_head=last)
        w += lora_slot_bytes(spec, s) * n_layers // spec.num_layers
        w += mxfp4_moe_padding_bytes(spec, s, gpu) * n_layers // spec.num_layers
        layers = spec.layers[start: start + n_layers]
        d = drafter_of(spec, s) if last else None
        if d is not None:
            # the drafter runs on the last stage: its weights and its own attention layers, grouped with the target's
            w += d.weight_bytes
            layers = layers + d.kv_layers
        try:
            layout = vllm_kv_layout(layers, s.kv, s.dtype_bytes, s.block_size,
                                    s.tensor_parallel, max_model_len, spec.model_type, max_num_batched_tokens=mnbt,
                                    max_concurrent_batches=(2 if pp == 1 else pp) if s.rules.engine == "v1" else 1,
                                    hybrid_allocator=s.rules.hybrid_allocator,
                                    compute_capability=gpu.compute_capability or 9.0,
                                    mamba_speculative_blocks=vllm_draft.mamba_speculative_blocks(
                                        spec, s.speculative_method, s.num_speculative_tokens),
                                    null_block_first=s.rules.null_block_first,
                                    default_block_size=s.rules.default_block_size)
        except (NotImplementedError, ValueError) as exc:
            raise UnsupportedModelError(f"vLLM cannot serve {spec.name} this way: {exc}") from None
        act = activation_bytes(spec, s, mnbt, seqs, v2, last_stage=last, gpu=gpu, max_model_len=max_model_len,
                               block_size=layout.block_size)
        act = with_drafter_profile(spec, s, act, mnbt, seqs, v2, last, gpu, max_model_len, layout.block_size)
        if s.calibration is not None:
            act = s.calibration.activation(s.tensor_parallel, pp, act)
        act += encoder_profile_bytes(spec, s, mnbt, act, seqs, max_model_len, v2)  # multimodal: the encoder's dummy items
        held = sampler_state_bytes(spec, s, seqs, v2) if last else 0
        available = budget - w - act - held
        free_bound = False
        if free_budget is not None:
            capped = free_budget - extensible_margin(gpu, act) - w - act - held
            free_bound = capped < available
            available = min(available, capped)
        if s.kv_cache_memory_bytes:
            # gpu_worker.py:determine_available_memory: kv_cache_memory_bytes set -> no profile, that budget as is
            available = s.kv_cache_memory_bytes
        start += n_layers
        out.append(StageBudget(w, act, available, layout, layout.num_blocks(max(available, 0)),
                               available >= layout.min_kv_bytes, int(round(layout.kv_bytes_per_token)), held,
                               free_bound))
    return out
