"""How vLLM 0.26 lays a model's KV cache out in blocks: block size, KV-cache groups, bytes per block, concurrency.

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

from dataclasses import dataclass, field
from typing import NamedTuple

from ..formats import KvFormat
from ..kvcache import vllm_element_bytes, vllm_kv_heads_per_rank
from ..layers import FullAttention, LayerCache, MambaState, MultiLatentAttention, NoCache, SlidingWindow

DEFAULT_BLOCK_SIZE = 16  # config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
SMALLEST_KERNEL_BLOCK = 16  # FLASH_ATTN / TRITON_ATTN MultipleOf(16), FLASHINFER [16, 32, 64]
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # LLM class on GPUs < 70 GiB (engine/arg_utils.py:get_batch_defaults)
DEFAULT_MAX_CONCURRENT_BATCHES = 2  # async scheduling on, pp=1 (config/vllm.py:max_concurrent_batches)
_UNSUPPORTED_MLA_MODELS = ("deepseek_v32", "deepseek_v4", "glm_moe_dsa")  # sparse MLA / fp8_ds_mla layouts


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KvGroup(NamedTuple):
    """One KV-cache group: its kind, the real layers in it (padding excluded) and its page_size_bytes as vLLM's group
    spec reports it (for a uniform-type group of unequal layers, the sum of their pages)."""

    kind: str  # "full", "sliding", "mla", "mamba"
    n_layers: int
    page_bytes: int


@dataclass(frozen=True)
class GroupRule:
    """How many blocks one request holds in a group."""

    kind: str
    block_size: int  # tokens per block in this group (a Mamba group: its mamba_block_size, i.e. max_model_len)
    window: int = 0  # sliding groups
    cap_blocks: int | None = None  # sliding: max_admission_blocks_per_request
    fixed_blocks: int | None = None  # mamba: state blocks per request

    def max_blocks(self, max_model_len: int) -> int:
        """max_memory_usage_bytes // page_size_bytes (kv_cache_interface.py)."""
        if self.fixed_blocks is not None:
            return self.fixed_blocks
        if self.cap_blocks is not None:
            return self.cap_blocks
        return _cdiv(max_model_len, self.block_size)

    def blocks_for(self, context: int) -> int:
        """Blocks the admission gate reserves for a request of `context` tokens (apply_admission_cap=True)."""
        if self.fixed_blocks is not None:
            return self.fixed_blocks
        blocks = _cdiv(max(context, 0), self.block_size)
        if self.cap_blocks is not None:
            blocks = min(blocks, self.cap_blocks)
        return blocks


@dataclass
class KvLayout:
    block_size: int  # tokens per block of the full-attention (or MLA) group; the sliding block when all are sliding
    groups: list[KvGroup]
    group_size: int  # layers per group (number of shared pools); L for a uniform model
    bytes_per_block: int  # what get_num_blocks divides the KV budget by
    max_model_len: int
    layout: str  # "uniform", "uniform_type" or "hybrid"
    rules: list[GroupRule] = field(default_factory=list)  # one per group, same order
    hybrid_allocator: bool = True
    in_flight_tokens: int = 0
    cache_block_size: int = 0  # cache_config.block_size after the backend / Mamba adjustments
    mamba_page_padded: int | None = None  # mamba_page_size_padded, when the state page was padded
    notes: list[str] = field(default_factory=list)

    @property
    def max_blocks_per_request(self) -> int:
        """num_block_per_request of get_max_concurrency_for_kv_cache_config."""
        return sum(rule.max_blocks(self.max_model_len) for rule in self.rules)

    def num_blocks(self, available_bytes: int) -> int:
        """get_num_blocks / get_kv_cache_config_from_groups: floor(available / bytes per block), at least 0."""
        if available_bytes <= 0:
            return 0
        return available_bytes // self.bytes_per_block

    def max_concurrency(self, num_blocks: int) -> float:
        """get_max_concurrency_for_kv_cache_config: num_blocks / blocks a max_model_len request needs."""
        return num_blocks / self.max_blocks_per_request

    def logged_tokens(self, num_blocks: int) -> int:
        """'GPU KV cache size: N tokens' in 0.24+ (get_kv_cache_capacity): int(concurrency * max_model_len)."""
        return int(self.max_concurrency(num_blocks) * self.max_model_len)

    @property
    def min_kv_bytes(self) -> int:
        """KV budget below which vLLM refuses to start: one max_model_len request
        (kv_cache_utils.py:_check_enough_kv_cache_memory, _max_memory_usage_bytes_from_groups)."""
        return self.bytes_per_block * self.max_blocks_per_request

    def blocks_per_request(self, context: int) -> int:
        """Blocks the scheduler must find free to admit a request of `context` tokens (all groups)."""
        return sum(rule.blocks_for(context) for rule in self.rules)

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


# ------------------------------------------------------------------------------------------------ specs


@dataclass(frozen=True)
class _Spec:
    """A layer's KVCacheSpec reduced to what grouping compares (equal specs share a group)."""

    kind: str  # full, sliding, mla, mamba
    block_size: int
    page_bytes: int
    window: int = 0
    shape: tuple = ()

    @property
    def type_key(self) -> tuple:
        """UniformTypeKVCacheSpecs.is_uniform_type: FullAttentionSpec (incl. MLA) / SlidingWindowSpec of one window /
        MambaSpec are each one type (kv_cache_spec_registry.py uniform_type_base_spec)."""
        if self.kind in ("full", "mla"):
            return ("full",)
        if self.kind == "sliding":
            return ("sliding", self.window)
        return ("mamba",)


def _mla_backend_block(compute_capability: float, fp8: bool, qk_nope_head_dim: int) -> tuple[str, int]:
    """(backend, default block size) for MLA when --block-size is not given (platforms/cuda.py priorities)."""
    major = int(compute_capability)
    if major == 10:
        if qk_nope_head_dim in (64, 128, 192):
            return "FLASHINFER_MLA", 32  # flashinfer_mla.py: kernel blocks [32, 64]
        return "CUTLASS_MLA", 128  # cutlass_mla.py: [128]
    if major == 9:
        if not fp8:
            return "FLASH_ATTN_MLA", 16  # flashattn_mla.py: MultipleOf(16), kv dtypes auto/fp16/bf16
        return "FLASHMLA", 64  # flashmla.py: [64], kv dtypes incl. fp8
    return "TRITON_MLA", 16  # triton_mla.py: MultipleOf(16)


def _mamba_page(layer: MambaState, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
    # MambaStateShapeCalculator divides the conv channels and the SSM heads by tp (extra n_groups replicas for
    # Mamba2 when n_groups % tp != 0 are not modelled: MambaState carries element counts, not shapes).
    return (layer.conv_state_elements // tp) * conv_bytes + (layer.ssm_state_elements // tp) * ssm_bytes


def vllm_kv_layout(
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
) -> KvLayout:
    """The KV-cache layout vLLM 0.26 builds for these layers on one rank (TP `tp`).

    block_size: the user's --block-size, or None for vLLM's choice. max_num_batched_tokens and
    max_concurrent_batches set the in-flight tokens a sliding-window request may hold (pass the resolved scheduler
    values; None means 8192). mamba_*_dtype_bytes default to the model dtype, and the SSM state to fp32 for
    Nemotron-H (model_executor/models/config.py:NemotronHForCausalLMConfig).
    """
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
    elem = vllm_element_bytes(kv, dtype_bytes)
    fp8 = kv.vllm_name is not None and kv.vllm_name.startswith("fp8")
    notes: list[str] = []

    cached = [layer for layer in layers if not isinstance(layer, NoCache)]
    if not cached:
        raise ValueError("no layer keeps a KV cache or state; vLLM treats the model as attention-free")
    mla_layers = [layer for layer in cached if isinstance(layer, MultiLatentAttention)]
    attn_layers = [layer for layer in cached if isinstance(layer, (FullAttention, MultiLatentAttention))]
    mamba_layers = [layer for layer in cached if isinstance(layer, MambaState)]
    is_hybrid_mamba = bool(mamba_layers) and bool(attn_layers)

    if mla_layers:
        if model_type in _UNSUPPORTED_MLA_MODELS:
            raise NotImplementedError(f"{model_type}: sparse-MLA cache layouts (fp8_ds_mla, indexer) are not modelled")
        if kv.vllm_name == "fp8_e5m2":
            raise ValueError("no vLLM MLA backend accepts kv_cache_dtype=fp8_e5m2 (supported: auto, fp8/fp8_e4m3)")

    # 1. cache_config.block_size -----------------------------------------------------------------------------
    kernel_min = SMALLEST_KERNEL_BLOCK
    if mla_layers:
        backend, preferred = _mla_backend_block(compute_capability, fp8, mla_layers[0].qk_nope_head_dim)
        kernel_min = preferred  # the chosen backend's smallest kernel block (fixed-size kernels: that size)
        if block_size is None:
            notes.append(f"MLA on sm{int(compute_capability * 10)}: {backend} backend, block size {preferred} "
                         "(platforms/cuda.py:_get_backend_priorities, get_preferred_block_size)")
    else:
        preferred = DEFAULT_BLOCK_SIZE
    bs = block_size if block_size is not None else preferred

    conv_bytes = mamba_conv_dtype_bytes or dtype_bytes  # mamba_cache_dtype 'auto' -> model dtype, not the KV dtype
    if mamba_ssm_dtype_bytes:
        ssm_bytes = mamba_ssm_dtype_bytes
    elif model_type.startswith("nemotron_h"):
        ssm_bytes = 4  # NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE = float32
    else:
        ssm_bytes = conv_bytes  # MambaStateDtypeCalculator: ssm 'auto' follows the conv dtype

    mamba_padded: int | None = None
    if is_hybrid_mamba:
        # interface.py:_align_hybrid_block_size (model-level attention page for one token; K and V of head_size).
        first = attn_layers[0]
        if isinstance(first, MultiLatentAttention):
            attn_1tok = first.latent_elements_per_token() * elem
        else:
            attn_1tok = vllm_kv_heads_per_rank(first.num_kv_heads, tp) * 2 * first.head_dim * elem
        mamba_page = _mamba_page(mamba_layers[0], tp, conv_bytes, ssm_bytes)
        if mamba_page > 0:
            align = max(kernel_min, bs)
            attn_block = align * _cdiv(mamba_page, align * attn_1tok)
            if bs < attn_block:
                notes.append(f"block size raised {bs} -> {attn_block} so the attention page ({attn_1tok} B/token) "
                             f"covers the Mamba state page ({mamba_page} B) (interface.py:_align_hybrid_block_size)")
                bs = attn_block
            attn_page = bs * attn_1tok
            if attn_page > mamba_page:
                mamba_padded = attn_page
                notes.append(f"Mamba page padded {mamba_page} -> {attn_page} B "
                             f"(+{100 * (attn_page - mamba_page) / mamba_page:.2f}%)")

    # 2. per-layer specs --------------------------------------------------------------------------------------
    specs: list[_Spec] = []
    for layer in cached:
        if isinstance(layer, MultiLatentAttention):
            n = layer.latent_elements_per_token()
            specs.append(_Spec("mla", bs, bs * n * elem, shape=(1, n, elem)))
        elif isinstance(layer, SlidingWindow):
            heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
            per_tok = heads * (layer.head_dim + layer.v_head_dim) * elem
            sw_bs = SMALLEST_KERNEL_BLOCK  # attention.py:_largest_kernel_block_within(page_budget=None)
            specs.append(_Spec("sliding", sw_bs, sw_bs * per_tok, window=layer.window,
                               shape=(heads, layer.head_dim, layer.v_head_dim, elem)))
        elif isinstance(layer, FullAttention):
            heads = vllm_kv_heads_per_rank(layer.num_kv_heads, tp)
            per_tok = heads * (layer.head_dim + layer.v_head_dim) * elem
            specs.append(_Spec("full", bs, bs * per_tok, shape=(heads, layer.head_dim, layer.v_head_dim, elem)))
        elif isinstance(layer, MambaState):
            page = _mamba_page(layer, tp, conv_bytes, ssm_bytes)
            if mamba_padded is not None:
                page = max(page, mamba_padded)
            # MambaModelConfig: without prefix caching mamba_block_size = max_model_len.
            specs.append(_Spec("mamba", max_model_len, page,
                               shape=(layer.conv_state_elements, layer.ssm_state_elements)))
        else:  # pragma: no cover - LayerCache is closed
            raise TypeError(f"unknown layer cache {layer!r}")

    # 3. grouping ---------------------------------------------------------------------------------------------
    uniform = len(set(specs)) == 1
    if not hybrid_allocator and not uniform and not _uniform_type(specs):
        # kv_cache_utils.py:unify_hybrid_kv_cache_specs
        has_full = any(s.kind in ("full", "mla") for s in specs)
        if has_full and any(s.kind == "sliding" for s in specs):
            if len({s.window for s in specs if s.kind == "sliding"}) > 1:
                # FullAttentionSpec.merge_window_sizes
                raise ValueError("hybrid KV cache manager disabled: all attention layers in the same KV cache group "
                                 "must have the same window size (vLLM refuses this configuration)")
            specs = [_Spec("full", s.block_size, s.page_bytes, shape=s.shape) if s.kind == "sliding" else s
                     for s in specs]
            notes.append("hybrid KV cache manager disabled: sliding-window layers keep every token (as full attention)")
        uniform = len(set(specs)) == 1
        if not uniform and not _uniform_type(specs):
            raise ValueError("Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
                             "unified type (vLLM refuses this configuration)")

    if max_num_batched_tokens is None and any(s.kind == "sliding" for s in specs):
        notes.append(f"max_num_batched_tokens not given: assumed {DEFAULT_MAX_NUM_BATCHED_TOKENS} for the "
                     "sliding-window reservation")
    max_num_batched_tokens = max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    in_flight = max_concurrent_batches * max_num_batched_tokens

    def rule_for(spec: _Spec) -> GroupRule:
        if spec.kind == "mamba":
            return GroupRule("mamba", spec.block_size, fixed_blocks=1)  # MambaSpec: page * (1 + spec blocks)
        if spec.kind == "sliding":
            tokens = min(spec.window - 1 + in_flight, max_model_len)
            cap = _cdiv(tokens, spec.block_size) + 1  # SlidingWindowSpec.max_admission_blocks_per_request
            return GroupRule("sliding", spec.block_size, window=spec.window, cap_blocks=cap)
        return GroupRule(spec.kind, spec.block_size)

    if uniform:
        spec = specs[0]
        groups = [KvGroup(spec.kind, len(specs), spec.page_bytes)]
        rules = [rule_for(spec)]
        group_size = len(specs)
        bytes_per_block = spec.page_bytes * len(specs)
        layout = "uniform"
    elif _uniform_type(specs):
        # UniformTypeKVCacheSpecs: one group, each layer sized by its own page; blocks = avail // sum(pages).
        total = sum(s.page_bytes for s in specs)
        kind = "full" if specs[0].type_key == ("full",) else specs[0].kind
        groups = [KvGroup(kind, len(specs), total)]
        # max_memory_usage_bytes: max over layers of their page counts (equal within one type and block size).
        rules = [max((rule_for(s) for s in specs), key=lambda r: r.max_blocks(max_model_len))]
        group_size = len(specs)
        bytes_per_block = total
        layout = "uniform_type"
    else:
        specs = _unify_page_size(specs)
        page = specs[0].page_bytes
        by_spec: dict[_Spec, int] = {}
        for s in specs:
            by_spec[s] = by_spec.get(s, 0) + 1
        counts = list(by_spec.values())
        group_size = min(counts)
        if max(counts) < min(counts) * 1.5:
            group_size = max(counts)
        groups, rules = [], []
        for s, n in by_spec.items():
            n_groups = _cdiv(n, group_size)
            for i in range(n_groups):
                groups.append(KvGroup(s.kind, len(range(i, n, n_groups)), page))
                rules.append(rule_for(s))
            if n % group_size:
                notes.append(f"{group_size - n % group_size} padding layer(s) added to the {s.kind} groups "
                             "(_get_kv_cache_groups_uniform_page_size)")
        bytes_per_block = page * group_size
        layout = "hybrid"

    # The block size users see: the full-attention one; with only sliding layers, theirs.
    shown = next((r.block_size for r in rules if r.kind in ("full", "mla")),
                 next((r.block_size for r in rules if r.kind == "sliding"), bs))
    if any(r.kind == "sliding" for r in rules):
        notes.append(f"sliding-window groups reserve min(W-1+{in_flight}, max_model_len) tokens + 1 block per request "
                     f"({max_concurrent_batches} in-flight batches x {max_num_batched_tokens} batched tokens)")
    return KvLayout(block_size=shown, groups=groups, group_size=group_size, bytes_per_block=bytes_per_block,
                    max_model_len=max_model_len, layout=layout, rules=rules, hybrid_allocator=hybrid_allocator,
                    in_flight_tokens=in_flight, cache_block_size=bs, mamba_page_padded=mamba_padded, notes=notes)


def _uniform_type(specs: list[_Spec]) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type: one block size and one spec type."""
    return len({s.block_size for s in specs}) == 1 and len({s.type_key for s in specs}) == 1


def _unify_page_size(specs: list[_Spec]) -> list[_Spec]:
    """kv_cache_utils.py:unify_kv_cache_spec_page_size: scale attention blocks up to the largest page; pad Mamba."""
    max_page = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == max_page:
            out.append(s)
        elif s.kind == "mamba":
            out.append(_Spec(s.kind, s.block_size, max_page, s.window, s.shape))
        elif max_page % s.page_bytes == 0:
            ratio = max_page // s.page_bytes
            out.append(_Spec(s.kind, s.block_size * ratio, max_page, s.window, s.shape))
        else:
            raise NotImplementedError(
                f"a {s.kind} layer's page ({s.page_bytes} B) does not divide the largest page ({max_page} B); "
                "vLLM pads it only for backends that index KV by block stride, which kvcalc does not model"
            )
    return out
