"""How vLLM 0.26 lays a model's KV cache out in blocks: block size, KV-cache groups, bytes per block, concurrency.

Steps 1-2 (block size, one PageSpec per layer) live in engines/vllm_specs.py; this file groups the specs (step 3)
and answers capacity and admission (steps 4-5), one function per vLLM step.

Pure Python, no torch or vLLM import. Every rule below mirrors a function of the vLLM 0.26.0 source; the comments
name the file and function (paths relative to the `vllm/` package).

The pipeline, as vLLM runs it at start-up:

1. Block size (`cache_config.block_size`).
   - Not set by the user: `platforms/interface.py:update_block_size_for_backend` takes the attention backend's
     `get_preferred_block_size(16)` (`v1/attention/backend.py`): 16 when the backend's kernel accepts 16, else its
     smallest supported kernel block. Standard attention (FLASH_ATTN, FLASHINFER, TRITON_ATTN) accepts 16.
     MLA picks its backend from `platforms/cuda.py:_get_backend_priorities`: on Hopper FLASH_ATTN_MLA (bf16/fp16 KV
     only, MultipleOf(16) -> 16), then FLASHMLA (fp8 allowed, kernel block [64] -> 64); on Blackwell (sm100)
     FLASHINFER_MLA ([32, 64] -> 32; needs qk_nope_head_dim in {64, 128, 192}), else CUTLASS_MLA ([128]);
     elsewhere TRITON_MLA (MultipleOf(16) -> 16). No MLA backend accepts fp8_e5m2.
   - Hybrid attention + Mamba models (`interface.py:_align_hybrid_block_size`, runs even over a user --block-size):
     align = max(smallest kernel block, block_size); attention block = align * cdiv(mamba_page, align * attn_page_1tok)
     when that is larger; the Mamba page is then padded (`mamba_page_size_padded`) to exactly the attention page.
     attn_page_1tok uses the model-level head size for K and V (FullAttentionSpec(block_size=1)) or the MLA latent.
   - Sliding-window layers choose their own block (`model_executor/layers/attention/attention.py:
     Attention.get_kv_cache_spec` -> `_largest_kernel_block_within`): the backend's smallest kernel block, 16, whatever
     --block-size says; `unify_kv_cache_spec_page_size` later scales it up to the full layers' page.
2. Per-layer specs (`v1/kv_cache_interface.py`): FullAttentionSpec page = bs * kv_heads_per_rank * (Dk + Dv) * bytes;
   SlidingWindowSpec the same with its own block; MLAAttentionSpec page = bs * 1 * (kv_lora_rank + rope) * bytes (one
   latent head at any TP, `mla_attention.py:get_kv_cache_spec`); MambaSpec page = sum(prod(shape) * dtype) (TP divides
   the conv channels and the SSM heads, `mamba/mamba_utils.py:MambaStateShapeCalculator`), padded as above.
   KV-sharing / MLP-only layers (NoCache) get no spec.
3. Grouping (`v1/core/kv_cache_utils.py:get_kv_cache_groups`):
   - hybrid allocator disabled (`--disable-hybrid-kv-cache-manager`; ON by default on CUDA, `config/vllm.py`,
     "Hybrid KV cache manager (HMA) runtime rules"): `unify_hybrid_kv_cache_specs` turns sliding layers into full
     ones when full layers exist (a Mamba hybrid then fails, as in vLLM);
   - all specs equal -> one group of L layers (`_get_kv_cache_groups_uniform_spec`); blocks = avail // page // L;
   - same type, different pages -> one UniformTypeKVCacheSpecs group; blocks = avail // sum(pages);
   - otherwise pages are unified (`unify_kv_cache_spec_page_size`: attention block sizes scaled by the page ratio,
     Mamba pages padded) and `_get_kv_cache_groups_uniform_page_size` splits each type into groups of group_size
     layers (group_size = the smallest type's count, or the largest's when max < 1.5 * min; short groups padded);
     blocks = avail // page // group_size (`get_kv_cache_config_from_groups`, `get_num_blocks`).
4. Capacity (`get_max_concurrency_for_kv_cache_config`, `get_kv_cache_capacity`): concurrency = num_blocks /
   cdiv(sum of the groups' max_memory_usage_bytes, page) per group slot, i.e. num_blocks / sum over groups of
   their per-request blocks: full cdiv(max_model_len, bs); sliding cdiv(min(W - 1 + in_flight, max_model_len), bs) + 1
   with in_flight = max_concurrent_batches * max_num_batched_tokens
   (`SlidingWindowSpec.max_admission_blocks_per_request`, `config/vllm.py:VllmConfig.max_in_flight_tokens`;
   async scheduling, on by default, makes it 2 batches);
   Mamba 1 page (mamba_cache_mode "none", the default while prefix caching is off for hybrids,
   `engine/arg_utils.py:_set_default_chunked_prefill_and_prefix_caching_args`). Logged tokens = int(c * max_model_len).
5. Admission (`v1/core/kv_cache_manager.py:allocate_slots`, `single_type_kv_cache_manager.py:get_num_blocks_to_allocate`
   with apply_admission_cap): a request of n tokens needs cdiv(n, bs) blocks per full group, min(that, the sliding cap)
   per sliding group, 1 per Mamba group; block 0 is the null block (`v1/core/block_pool.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..formats import KvFormat
from ..layers import CompressedSparseAttention, LayerCache, MambaState, MultiLatentAttention, NoCache, flatten
from ..memo import per_object
from ..units import ceil_div
from .vllm_specs import (  # noqa: F401  (re-exported: the page arithmetic's old home)
    DEFAULT_BLOCK_SIZE, SMALLEST_KERNEL_BLOCK, SPARSE_MLA_MAJORS, PageSpec, choose_block_size, layer_specs,
)

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # LLM class on GPUs < 70 GiB (engine/arg_utils.py:get_batch_defaults)
DEFAULT_MAX_CONCURRENT_BATCHES = 2  # async scheduling on, pp=1 (config/vllm.py:max_concurrent_batches)
_UNSUPPORTED_MLA_MODELS: tuple[str, ...] = ()  # compressed sparse-MLA layouts kvcalc does not read


class KvGroup(NamedTuple):
    """One KV-cache group: its kind, the real layers in it (padding excluded) and its page_size_bytes as vLLM's group
    spec reports it (for a uniform-type group of unequal layers, the sum of their pages)."""

    kind: str  # "full", "sliding", "mla", "mamba"
    n_layers: int
    page_bytes: int


@dataclass
class KvLayout:
    block_size: int  # tokens per block of the full-attention (or MLA) group; the sliding block when all are sliding
    groups: list[KvGroup]
    group_size: int  # layers per group (number of shared pools); L for a uniform model
    bytes_per_block: int  # what get_num_blocks divides the KV budget by
    max_model_len: int
    layout: str  # "uniform", "uniform_type" or "hybrid"
    rules: list[PageSpec] = field(default_factory=list)  # each group's spec, same order
    hybrid_allocator: bool = True
    in_flight_tokens: int = 0
    cache_block_size: int = 0  # cache_config.block_size after the backend / Mamba adjustments
    mamba_page_padded: int | None = None  # mamba_page_size_padded, when the state page was padded
    notes: list[str] = field(default_factory=list)
    null_block_first: bool = False  # vLLM 0.28.1+ (PR #47272): the start check plans against memory minus one block

    def to_json(self) -> dict:
        """vllm_breakdown.layout in the plan JSON (kvcalc.plan/1): these keys, in this order."""
        return {
            "block_size": self.block_size,
            "groups": [[g.kind, g.n_layers, g.page_bytes] for g in self.groups],
            "group_size": self.group_size, "bytes_per_block": self.bytes_per_block,
            "max_model_len": self.max_model_len, "layout": self.layout,
            "rules": [self._rule_json(spec) for spec in self.rules],
            "hybrid_allocator": self.hybrid_allocator, "in_flight_tokens": self.in_flight_tokens,
            "cache_block_size": self.cache_block_size, "mamba_page_padded": self.mamba_page_padded,
            "notes": list(self.notes),
        }

    def _rule_json(self, spec: PageSpec) -> dict:
        """A group's admission rule as kvcalc.plan/1 has written it (it was a GroupRule dataclass)."""
        return {"kind": spec.kind, "block_size": spec.block_size, "window": spec.window,
                "cap_blocks": spec.max_blocks(self.max_model_len, self.in_flight_tokens)
                if spec.kind in ("sliding", "chunked") else None,
                "fixed_blocks": 1 + spec.spec_blocks if spec.kind == "mamba" else None}

    @property
    def max_blocks_per_request(self) -> int:
        """num_block_per_request of get_max_concurrency_for_kv_cache_config."""
        return sum(spec.max_blocks(self.max_model_len, self.in_flight_tokens) for spec in self.rules)

    def num_blocks(self, available_bytes: int) -> int:
        """get_num_blocks / get_kv_cache_config_from_groups: floor(available / bytes per block), at least 0."""
        if available_bytes <= 0:
            return 0
        return available_bytes // self.bytes_per_block

    def max_concurrency(self, num_blocks: int) -> float:
        """get_max_concurrency_for_kv_cache_config: num_blocks / blocks a max_model_len request needs."""
        return num_blocks / self.max_blocks_per_request

    def logged_tokens(self, num_blocks: int) -> int:
        """'GPU KV cache size: N tokens' in 0.21+ (_report_kv_cache_config; get_kv_cache_capacity from 0.24):
        int(concurrency * max_model_len)."""
        return int(self.max_concurrency(num_blocks) * self.max_model_len)

    @property
    def min_kv_bytes(self) -> int:
        """KV budget below which vLLM refuses to start: one max_model_len request
        (kv_cache_utils.py:_check_enough_kv_cache_memory, _max_memory_usage_bytes_from_groups), plus the null block
        from 0.28.1 (PR #47272 reserves it before the check and the auto-fit)."""
        return self.bytes_per_block * (self.max_blocks_per_request + (1 if self.null_block_first else 0))

    def blocks_per_request(self, context: int) -> int:
        """Blocks the scheduler must find free to admit a request of `context` tokens (all groups)."""
        return sum(spec.blocks_for(context, self.max_model_len, self.in_flight_tokens) for spec in self.rules)

    def concurrency_at(self, num_blocks: int, context: int) -> int:
        """Requests of `context` tokens that fit at once: whole blocks each, the null block reserved."""
        need = self.blocks_per_request(context)
        if need <= 0:
            return 0
        return max(num_blocks - 1, 0) // need

    @property
    def kv_bytes_per_token(self) -> float:
        """Average bytes per token of one max_model_len request (fixed Mamba / window blocks amortized over it)."""
        return self.bytes_per_block * self.blocks_per_request(self.max_model_len) / self.max_model_len


# ------------------------------------------------------------------------------------------------ grouping


def _uniform_type(specs: list[PageSpec]) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type: one block size and one spec type."""
    return len({s.block_size for s in specs}) == 1 and len({s.type_key for s in specs}) == 1


def unify_hybrid_specs(specs: list[PageSpec], notes: list[str]) -> list[PageSpec]:
    """kv_cache_utils.py:unify_hybrid_kv_cache_specs (hybrid allocator disabled): sliding layers become full ones
    when full layers exist; anything still not one type is refused, as vLLM does."""
    if len(set(specs)) == 1 or _uniform_type(specs):
        return specs
    has_full = any(s.kind in ("full", "mla") for s in specs)
    if has_full and any(s.kind in ("sliding", "chunked") for s in specs):
        if len({(s.kind, s.window) for s in specs if s.kind in ("sliding", "chunked")}) > 1:
            # FullAttentionSpec.merge_window_sizes
            raise ValueError("hybrid KV cache manager disabled: all attention layers in the same KV cache group "
                             "must have the same window size (vLLM refuses this configuration)")
        specs = [PageSpec("full", s.block_size, s.page_bytes, shape=s.shape) if s.kind in ("sliding", "chunked")
                 else s for s in specs]
        notes.append("hybrid KV cache manager disabled: sliding-window / chunked-local layers keep every token "
                     "(as full attention)")
    if len(set(specs)) != 1 and not _uniform_type(specs):
        raise ValueError("Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
                         "unified type (vLLM refuses this configuration)")
    return specs


class _Grouping(NamedTuple):
    groups: list[KvGroup]
    rules: list[PageSpec]
    group_size: int
    bytes_per_block: int
    layout: str


def group_uniform(specs: list[PageSpec]) -> _Grouping:
    """_get_kv_cache_groups_uniform_spec: all specs equal -> one group of L layers; blocks = avail // page // L."""
    spec = specs[0]
    return _Grouping([KvGroup(spec.kind, len(specs), spec.page_bytes)], [spec], len(specs),
                     spec.page_bytes * len(specs), "uniform")


def group_uniform_type(specs: list[PageSpec], in_flight: int, max_model_len: int) -> _Grouping:
    """UniformTypeKVCacheSpecs: one group, each layer sized by its own page; blocks = avail // sum(pages)."""
    total = sum(s.page_bytes for s in specs)
    kind = "full" if specs[0].type_key == ("full",) else specs[0].kind
    # max_memory_usage_bytes: max over layers of their page counts (equal within one type and block size).
    rule = max(specs, key=lambda s: s.max_blocks(max_model_len, in_flight))
    return _Grouping([KvGroup(kind, len(specs), total)], [rule], len(specs), total, "uniform_type")


def group_uniform_page_size(specs: list[PageSpec], notes: list[str]) -> _Grouping:
    """_get_kv_cache_groups_uniform_page_size, after unify_kv_cache_spec_page_size: each type is split into groups of
    group_size layers (the smallest type's count, or the largest's when max < 1.5 * min; short groups padded);
    blocks = avail // page // group_size."""
    specs = _unify_page_size(specs)
    page = specs[0].page_bytes
    by_spec: dict[PageSpec, int] = {}
    for s in specs:
        by_spec[s] = by_spec.get(s, 0) + 1
    counts = list(by_spec.values())
    group_size = min(counts)
    if max(counts) < min(counts) * 1.5:
        group_size = max(counts)
    groups, rules = [], []
    for s, n in by_spec.items():
        n_groups = ceil_div(n, group_size)
        for i in range(n_groups):
            groups.append(KvGroup(s.kind, len(range(i, n, n_groups)), page))
            rules.append(s)
        if n % group_size:
            notes.append(f"{group_size - n % group_size} padding layer(s) added to the {s.kind} groups "
                         "(_get_kv_cache_groups_uniform_page_size)")
    return _Grouping(groups, rules, group_size, page * group_size, "hybrid")


def _unify_page_size(specs: list[PageSpec]) -> list[PageSpec]:
    """kv_cache_utils.py:unify_kv_cache_spec_page_size: scale attention blocks up to the largest page; pad Mamba."""
    max_page = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == max_page:
            out.append(s)
        elif s.kind == "mamba":
            out.append(replace(s, page_bytes=max_page))
        elif max_page % s.page_bytes == 0:
            out.append(replace(s, block_size=s.block_size * (max_page // s.page_bytes), page_bytes=max_page))
        else:
            raise NotImplementedError(
                f"a {s.kind} layer's page ({s.page_bytes} B) does not divide the largest page ({max_page} B); "
                "vLLM pads it only for backends that index KV by block stride, which kvcalc does not model"
            )
    return out


def _mamba_dtype_bytes(model_type: str, dtype_bytes: int, conv: int | None, ssm: int | None) -> tuple[int, int]:
    conv_bytes = conv or dtype_bytes  # mamba_cache_dtype 'auto' -> model dtype, not the KV dtype
    if ssm:
        return conv_bytes, ssm
    if model_type.startswith("nemotron_h"):
        return conv_bytes, 4  # NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE = float32
    return conv_bytes, conv_bytes  # MambaStateDtypeCalculator: ssm 'auto' follows the conv dtype


def _check(layers: tuple[LayerCache, ...], kv: KvFormat, block_size: int | None, tp: int, max_model_len: int,
           model_type: str, mamba_cache_mode: str, compute_capability: float = 9.0) -> list[LayerCache]:
    if tp < 1:
        raise ValueError("tp must be at least 1")
    if max_model_len < 1:
        raise ValueError("max_model_len must be at least 1")
    if block_size is not None and block_size < 1:
        raise ValueError("block_size must be positive")
    if mamba_cache_mode != "none":
        raise NotImplementedError(
            f"mamba_cache_mode={mamba_cache_mode!r} (prefix caching for Mamba hybrids) is not modelled; "
            "vLLM 0.26 defaults to 'none' because prefix caching is off for hybrid models"
        )
    cached = [layer for layer in flatten(layers) if not isinstance(layer, NoCache)]
    if not cached:
        raise ValueError("no layer keeps a KV cache or state; vLLM treats the model as attention-free")
    if any(isinstance(layer, MultiLatentAttention) for layer in cached):
        if model_type in _UNSUPPORTED_MLA_MODELS:
            raise NotImplementedError(f"{model_type}: its compressed sparse-MLA cache layout is not modelled")
        sparse = any(isinstance(layer, MultiLatentAttention) and layer.index_head_dim for layer in cached)
        if sparse and int(compute_capability) not in SPARSE_MLA_MAJORS:
            raise NotImplementedError(
                "DeepSeek V3.2's sparse MLA runs only on the FLASHMLA_SPARSE backend, i.e. on sm90 / sm100 GPUs "
                f"(this GPU: compute capability {compute_capability}); vLLM has no other sparse-MLA backend")
        if kv.vllm_name == "fp8_e5m2":
            raise ValueError("no vLLM MLA backend accepts kv_cache_dtype=fp8_e5m2 (supported: auto, fp8/fp8_e4m3)")
    return cached


def _dsv4_layout(cached: list[LayerCache], max_model_len: int, hybrid_allocator: bool,
                 max_num_batched_tokens: int | None, max_concurrent_batches: int,
                 compute_capability: float) -> KvLayout:
    """DeepSeek V4 (engines/vllm_dsv4.py): its SWA, compressed, indexer and compressor-state caches in one pool of
    equal pages, grouped as _get_kv_cache_groups_uniform_page_size groups any hybrid."""
    from .vllm_dsv4 import CACHE_BLOCK, pooled_specs

    if not all(isinstance(layer, CompressedSparseAttention) for layer in cached):
        raise NotImplementedError("DeepSeek V4 layers mixed with other cache kinds are not modelled")
    if int(compute_capability) not in SPARSE_MLA_MAJORS:
        raise NotImplementedError(
            "DeepSeek V4's sparse attention runs on the FlashMLA sparse kernels, i.e. on sm90 / sm100 GPUs (this GPU: "
            f"compute capability {compute_capability}); vLLM has no other CUDA backend for it")
    if not hybrid_allocator:
        raise ValueError("DeepSeek V4 needs the hybrid KV cache manager: its sliding and compressed caches cannot be "
                         "unified into one type (vLLM refuses --disable-hybrid-kv-cache-manager here)")
    notes = ["DeepSeek V4: fp8_ds_mla cache whatever --kv-cache-dtype says (584 B entries; deepseek_v4_attention.py); "
             "SWA, compressed, indexer and compressor-state pages padded to one size in one pool (assumed from the "
             "source's shared-tensor comments; no V4 start-up log checked)"]
    if max_num_batched_tokens is None:
        notes.append(f"max_num_batched_tokens not given: assumed {DEFAULT_MAX_NUM_BATCHED_TOKENS} for the "
                     "sliding-window reservation")
    in_flight = max_concurrent_batches * (max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS)
    grouping = group_uniform_page_size(pooled_specs(cached), notes)
    notes.append(f"sliding-window and compressor-state groups reserve min(W-1+{in_flight}, max_model_len) tokens + 1 "
                 "block per request (SlidingWindowMLASpec inherits SlidingWindowSpec.max_admission_blocks_per_request)")
    return KvLayout(block_size=CACHE_BLOCK, groups=grouping.groups, group_size=grouping.group_size,
                    bytes_per_block=grouping.bytes_per_block, max_model_len=max_model_len, layout=grouping.layout,
                    rules=grouping.rules, hybrid_allocator=True, in_flight_tokens=in_flight,
                    cache_block_size=CACHE_BLOCK, notes=notes)


def vllm_kv_layout(layers: tuple[LayerCache, ...], kv: KvFormat, dtype_bytes: int, block_size: int | None, tp: int,
                   max_model_len: int, model_type: str = "", **options) -> KvLayout:
    """_vllm_kv_layout, computed once per (layers, KV format, settings): a pure function of them that a search asks
    for with the same arguments on every GPU (the layout does not depend on the GPU beyond compute_capability).
    Callers treat the layout as read-only."""
    extra = (dtype_bytes, block_size, tp, max_model_len, model_type, *sorted(options.items()))
    return per_object("vllm_kv_layout", (layers, kv), extra, lambda: _vllm_kv_layout(
        layers, kv, dtype_bytes, block_size, tp, max_model_len, model_type, **options))


def _vllm_kv_layout(
    layers: tuple[LayerCache, ...],
    kv: KvFormat,
    dtype_bytes: int,
    block_size: int | None,
    tp: int,
    max_model_len: int,
    model_type: str = "",
    *,
    max_num_batched_tokens: int | None = None,
    max_concurrent_batches: int = DEFAULT_MAX_CONCURRENT_BATCHES,
    hybrid_allocator: bool = True,
    compute_capability: float = 9.0,
    mamba_conv_dtype_bytes: int | None = None,
    mamba_ssm_dtype_bytes: int | None = None,
    mamba_cache_mode: str = "none",
    mamba_speculative_blocks: int = 0,
    null_block_first: bool = False,
    default_block_size: int = DEFAULT_BLOCK_SIZE,
) -> KvLayout:
    """The KV-cache layout vLLM 0.26 builds for these layers on one rank (TP `tp`), step by step as
    kv_cache_utils.py:get_kv_cache_groups dispatches.

    block_size: the user's --block-size, or None for vLLM's choice. max_num_batched_tokens and
    max_concurrent_batches set the in-flight tokens a sliding-window request may hold (pass the resolved scheduler
    values; None means 8192). mamba_*_dtype_bytes default to the model dtype, and the SSM state to fp32 for
    Nemotron-H (model_executor/models/config.py:NemotronHForCausalLMConfig). mamba_speculative_blocks: the extra
    state blocks each Mamba layer keeps per request under speculative decoding (num_speculative_tokens).
    """
    cached = _check(layers, kv, block_size, tp, max_model_len, model_type, mamba_cache_mode, compute_capability)
    if any(isinstance(layer, CompressedSparseAttention) for layer in cached):
        return _dsv4_layout(cached, max_model_len, hybrid_allocator, max_num_batched_tokens, max_concurrent_batches,
                            compute_capability)
    if mamba_ssm_dtype_bytes is None:  # the checkpoint's own mamba_ssm_dtype (Qwen3.5: float32), read by model.py
        mamba_ssm_dtype_bytes = next((layer.ssm_dtype_bytes for layer in cached
                                      if isinstance(layer, MambaState) and layer.ssm_dtype_bytes), None)
    conv_bytes, ssm_bytes = _mamba_dtype_bytes(model_type, dtype_bytes, mamba_conv_dtype_bytes,
                                               mamba_ssm_dtype_bytes)
    choice = choose_block_size(cached, kv, dtype_bytes, block_size, tp, compute_capability, conv_bytes, ssm_bytes,
                               default_block_size)
    notes = list(choice.notes)
    specs = layer_specs(cached, kv, dtype_bytes, tp, choice, max_model_len, conv_bytes, ssm_bytes,
                        mamba_speculative_blocks, model_type=model_type,
                        sliding_follows_block=default_block_size != DEFAULT_BLOCK_SIZE)
    if not hybrid_allocator:
        specs = unify_hybrid_specs(specs, notes)

    if max_num_batched_tokens is None and any(s.kind == "sliding" for s in specs):
        notes.append(f"max_num_batched_tokens not given: assumed {DEFAULT_MAX_NUM_BATCHED_TOKENS} for the "
                     "sliding-window reservation")
    max_num_batched_tokens = max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    in_flight = max_concurrent_batches * max_num_batched_tokens

    if len(set(specs)) == 1:
        grouping = group_uniform(specs)
    elif _uniform_type(specs):
        grouping = group_uniform_type(specs, in_flight, max_model_len)
    else:
        grouping = group_uniform_page_size(specs, notes)
    rules = grouping.rules

    # The block size users see: the full-attention one; with only sliding layers, theirs.
    shown = next((r.block_size for r in rules if r.kind in ("full", "mla")),
                 next((r.block_size for r in rules if r.kind == "sliding"), choice.block_size))
    if any(r.kind == "chunked" for r in rules):
        notes.append(f"chunked-local groups reserve min(chunk+{in_flight}, max_model_len) tokens per request "
                     "(ChunkedLocalAttentionSpec.max_admission_blocks_per_request)")
    if any(r.kind == "sliding" for r in rules):
        notes.append(f"sliding-window groups reserve min(W-1+{in_flight}, max_model_len) tokens + 1 block per request "
                     f"({max_concurrent_batches} in-flight batches x {max_num_batched_tokens} batched tokens)")
    return KvLayout(block_size=shown, groups=grouping.groups, group_size=grouping.group_size,
                    bytes_per_block=grouping.bytes_per_block, max_model_len=max_model_len, layout=grouping.layout,
                    rules=rules, hybrid_allocator=hybrid_allocator, in_flight_tokens=in_flight,
                    cache_block_size=choice.block_size, mamba_page_padded=choice.mamba_page_padded, notes=notes,
                    null_block_first=null_block_first)
