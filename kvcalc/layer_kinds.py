"""Which kind of mixer each decoder layer has, and what it caches, read from the fields a config.json carries.

Families share layouts under different names, so the reader keys on the fields present, not on model_type:

- ``layer_types`` (a list, one entry per layer): full_attention / attention, sliding_attention, chunked_attention,
  linear_attention (Gated DeltaNet), conv (LFM2 short conv), mamba (Granite 4). Any other entry is refused by name.
- ``hybrid_override_pattern`` (Nemotron-H): one character per layer, M Mamba2, * attention, - MLP, E MoE.
- ``full_attn_idxs`` (LFM2's launch config): those layers attend, the others are short convs.
- ``full_attention_interval`` with ``linear_num_value_heads`` (Qwen3-Next without layer_types): every k-th layer full,
  the others Gated DeltaNet.
- ``attention_chunk_size`` (Llama 4): RoPE layers attend within chunks, NoPE layers (``no_rope_layers`` 0, by default
  every ``no_rope_layer_interval``-th = 4th) attend fully (vLLM models/llama4.py: use_chunked_local_attn = not nope).
- ``mamba_d_ssm`` (Falcon-H1): every layer runs attention and a Mamba2 mixer in parallel (ParallelHybrid).
- otherwise the older sliding-window conventions (model.py:_attention_kinds): sliding_window_pattern, gemma2's
  alternation, Qwen's max_window_layers, Mistral's one window.

Then ``num_kv_shared_layers`` (Gemma 3n) turns the last N layers into readers of an earlier layer's cache (NoCache),
and ``kv_lora_rank`` makes attention layers MLA (with DeepSeek V3.2's indexer key when ``index_head_dim`` is set).

State shapes follow vLLM's model_executor/layers/mamba/mamba_utils.py (MambaStateShapeCalculator), element counts at
TP 1: mamba2_state_shape conv (K-1) x (I + 2 G N), temporal H x P x N; gated_delta_net_state_shape conv
(K-1) x (2 Hk Dk + Hv Dv), temporal Hv x Dk x Dv; short_conv_state_shape conv (L-1) x conv_dim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import UnsupportedModelError, UsageError, shown
from .layers import (
    ChunkedLocal, FullAttention, LayerCache, MambaState, MultiLatentAttention, NoCache, ParallelHybrid, SlidingWindow,
)

# config layer_types entries -> kvcalc mixer kinds
LAYER_TYPE_NAMES = {
    "full_attention": "full", "attention": "full", "global_attention": "full",
    "sliding_attention": "sliding", "local_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "conv": "conv",
    "mamba": "mamba",
}
PATTERN_CHARS = {"M": "mamba", "*": "full", "-": "mlp", "E": "moe"}  # Nemotron-H hybrid_override_pattern
_DTYPE_BYTES = {"float32": 4, "float": 4, "fp32": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp16": 2, "bf16": 2}


def _int(cfg: dict[str, Any], *names: str, default: Any = None) -> int:
    for name in names:
        if cfg.get(name) is not None:
            return int(cfg[name])
    if default is None:
        raise KeyError(names[0])
    return int(default)


def kinds_from_layer_types(cfg: dict[str, Any], n_layers: int,
                           names: dict[str, str] = LAYER_TYPE_NAMES) -> list[str]:
    """config.json's `layer_types`, one kind per layer through `names`; a name outside it is refused, never guessed."""
    types = cfg["layer_types"]
    if len(types) != n_layers:
        raise UsageError(f"layer_types has {len(types)} entries for {n_layers} layers")
    out = []
    for t in types:
        kind = names.get(str(t))
        if kind is None:
            raise UnsupportedModelError(f"layer type {shown(t, 40)} is not supported yet; kvcalc refuses rather "
                                        f"than guess (known: {', '.join(sorted(names))})")
        out.append(kind)
    return out


def mixer_kinds(cfg: dict[str, Any], n_layers: int, fallback: Callable[[], list[str]]) -> list[str]:
    """One mixer kind per layer: full, sliding, chunked, linear, conv, mamba, or mlp / moe (Nemotron-H layers that
    hold only an MLP). `fallback` is the older sliding-window reading, used when none of the fields above is set."""
    if cfg.get("layer_types"):
        return kinds_from_layer_types(cfg, n_layers)
    pattern = cfg.get("hybrid_override_pattern")
    if pattern:
        if len(pattern) != n_layers:
            raise UsageError(f"hybrid_override_pattern has {len(pattern)} characters for {n_layers} layers")
        unknown = sorted(set(pattern) - set(PATTERN_CHARS))
        if unknown:
            raise UnsupportedModelError(f"hybrid_override_pattern layer kind {shown(unknown[0], 10)} is not "
                                        "supported yet; kvcalc refuses rather than guess (known: M * - E)")
        return [PATTERN_CHARS[c] for c in pattern]
    if cfg.get("full_attn_idxs") is not None:
        idxs = {int(i) for i in cfg["full_attn_idxs"]}
        return ["full" if i in idxs else "conv" for i in range(n_layers)]
    if cfg.get("full_attention_interval") and cfg.get("linear_num_value_heads"):
        k = int(cfg["full_attention_interval"])
        return ["full" if (i + 1) % k == 0 else "linear" for i in range(n_layers)]
    if cfg.get("mamba_d_ssm") is not None:  # Falcon-H1: attention and a Mamba2 mixer side by side in every layer
        return ["parallel"] * n_layers
    if cfg.get("attention_chunk_size"):
        nope = cfg.get("no_rope_layers")
        if not nope:  # Llama4TextConfig default: every no_rope_layer_interval-th layer has no RoPE
            interval = _int(cfg, "no_rope_layer_interval", default=4)
            nope = [int((i + 1) % interval != 0) for i in range(n_layers)]
        if len(nope) != n_layers:
            raise UsageError(f"no_rope_layers has {len(nope)} entries for {n_layers} layers")
        return ["chunked" if use_rope else "full" for use_rope in nope]
    return fallback()


def dtype_bytes_of(name: Any) -> int | None:
    if name is None or name == "auto":
        return None
    key = str(name).replace("torch.", "")
    if key not in _DTYPE_BYTES:
        raise UsageError(f"mamba state dtype {shown(name, 30)} is not one kvcalc knows (float32, bfloat16, float16)")
    return _DTYPE_BYTES[key]


def mamba2_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(heads, head_dim, state, groups, conv kernel) of a Mamba2 mixer under each family's names."""
    heads = _int(cfg, "mamba_num_heads", "mamba_n_heads")
    head_dim = _int(cfg, "mamba_head_dim", "mamba_d_head")
    state = _int(cfg, "ssm_state_size", "mamba_d_state")
    groups = _int(cfg, "n_groups", "mamba_n_groups", default=1)
    kernel = _int(cfg, "conv_kernel", "mamba_d_conv", default=4)
    return heads, head_dim, state, groups, kernel


def mamba2_inner(cfg: dict[str, Any]) -> int:
    """The Mamba2 inner width: Falcon-H1's mamba_d_ssm when given, else heads x head_dim."""
    if cfg.get("mamba_d_ssm"):
        return int(cfg["mamba_d_ssm"])
    heads, head_dim, _, _, _ = mamba2_dims(cfg)
    return heads * head_dim


def gdn_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(key heads, value heads, key head dim, value head dim, conv kernel) of a Gated DeltaNet layer."""
    return (_int(cfg, "linear_num_key_heads"), _int(cfg, "linear_num_value_heads"), _int(cfg, "linear_key_head_dim"),
            _int(cfg, "linear_value_head_dim"), _int(cfg, "linear_conv_kernel_dim", default=4))


def short_conv_dims(cfg: dict[str, Any]) -> tuple[int, int]:
    """(conv channels, kernel length L) of an LFM2 short conv (conv_dim defaults to hidden_size in later configs)."""
    return _int(cfg, "conv_dim", "hidden_size"), _int(cfg, "conv_L_cache")


def state_cache(kind: str, cfg: dict[str, Any]) -> MambaState:
    ssm_dtype = dtype_bytes_of(cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype"))
    if kind == "mamba":
        heads, head_dim, state, groups, kernel = mamba2_dims(cfg)
        conv_dim = mamba2_inner(cfg) + 2 * groups * state
        return MambaState((kernel - 1) * conv_dim, heads * head_dim * state, "mamba2", ssm_dtype,
                          conv_channels=conv_dim, n_groups=groups, d_state=state)
    if kind == "linear":
        nk, nv, dk, dv, kernel = gdn_dims(cfg)
        conv_dim = 2 * nk * dk + nv * dv
        return MambaState((kernel - 1) * conv_dim, nv * dk * dv, "gdn", ssm_dtype, conv_channels=conv_dim)
    if kind == "conv":
        channels, length = short_conv_dims(cfg)
        return MambaState((length - 1) * channels, 0, "short_conv", ssm_dtype, conv_channels=channels)
    raise UnsupportedModelError(f"layer kind {kind!r} has no state reader; kvcalc refuses rather than guess")


def attention_cache(kind: str, cfg: dict[str, Any], n_kv: int, head_dim: int) -> LayerCache:
    """The cache of one attention layer of this kind."""
    if cfg.get("kv_lora_rank") is not None:  # DeepSeek MLA (V2/V3/R1/V3.2, Kimi K2, GLM-5...)
        return MultiLatentAttention(int(cfg["num_attention_heads"]), _int(cfg, "kv_lora_rank"),
                                    _int(cfg, "qk_rope_head_dim"), _int(cfg, "qk_nope_head_dim"),
                                    _int(cfg, "v_head_dim"), index_head_dim=_int(cfg, "index_head_dim", default=0))
    if kind == "full" and cfg.get("global_head_dim"):  # Gemma 4: global layers have their own heads and width
        n_kv = _int(cfg, "num_global_key_value_heads", default=n_kv)
        head_dim = _int(cfg, "global_head_dim")
    if kind == "sliding":
        return SlidingWindow(n_kv, head_dim, head_dim, window=_int(cfg, "sliding_window"))
    if kind == "chunked":
        return ChunkedLocal(n_kv, head_dim, head_dim, window=_int(cfg, "attention_chunk_size"))
    return FullAttention(n_kv, head_dim, head_dim)


def layer_caches(cfg: dict[str, Any], kinds: list[str], n_kv: int, head_dim: int) -> list[LayerCache]:
    """One cache spec per layer, with Gemma 3n's cross-layer KV sharing applied."""
    out: list[LayerCache] = []
    for kind in kinds:
        if kind in ("full", "sliding", "chunked"):
            out.append(attention_cache(kind, cfg, n_kv, head_dim))
        elif kind == "parallel":  # Falcon-H1: attention beside a Mamba2 mixer in every layer
            attention = attention_cache("full", cfg, n_kv, head_dim)
            assert isinstance(attention, FullAttention)
            out.append(ParallelHybrid(attention, state_cache("mamba", cfg)))
        elif kind in ("mlp", "moe"):
            out.append(NoCache())
        else:
            out.append(state_cache(kind, cfg))
    shared = int(cfg.get("num_kv_shared_layers") or 0)
    if shared:
        # modeling_gemma3n.py: the last num_kv_shared_layers layers reuse the KV of the last non-shared layer of
        # the same attention type; vLLM gives them no KV-cache spec (kv_sharing_target_layer_name).
        first = len(kinds) - shared
        if first < 1:
            raise UsageError(f"num_kv_shared_layers ({shared}) leaves no layer with its own cache")
        for i in range(first, len(kinds)):
            target = max(j for j in range(first) if kinds[j] == kinds[i]) if kinds[i] in kinds[:first] else None
            if target is None:
                raise UsageError(f"layer {i} shares its KV, but no earlier layer has its type ({kinds[i]})")
            out[i] = NoCache(shares_with=target)
    return out
