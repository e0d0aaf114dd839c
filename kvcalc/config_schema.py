"""The rules a config.json must satisfy before model.py builds a ModelSpec from it: every field a builder reads, with
its type and range, one pydantic model per family. A violation is one UsageError line naming the field.

Why: without them, ``num_hidden_layers: 0`` divided by zero, ``num_key_value_heads: -8`` gave negative KV bytes and
"fits: yes", and ``Infinity`` or ``10**30`` layers overflowed or ran out of memory (fuzz review 2026-11, T3-T11, H6,
§1d). Integers must be JSON integers (no floats, strings or booleans), flags JSON booleans, numbers finite.

Upper bounds are far above any released model, and low enough that no arithmetic or per-layer loop misbehaves:

==========================  =============  =====================================================================
field                       bound          largest released value we know (2026)
==========================  =============  =====================================================================
num_hidden_layers           <= 2,048       126 (Llama 3.1 405B); the engines loop per layer, per bisection step
hidden_size                 <= 1,000,000   18,432 (DeepSeek V3 MLP width; hidden 16,384 for 405B)
intermediate_size           <= 10,000,000  53,248 (Llama 3.1 405B)
vocab_size                  <= 100,000,000 262,208 (Gemma 3)
heads, kv heads             <= 65,536      128
head dims, MLA ranks        <= 65,536      576 (MLA latent 512 + rope 64)
experts                     <= 65,536      512 (Qwen3-Next)
max_position_embeddings,    <= 2**31       10,485,760 (Llama 4 Scout)
sliding_window
==========================  =============  =====================================================================

Adding a family (issue 9): subclass the nearest schema with the fields its builder reads, register it in SCHEMAS
under its model_type (tests/test_model.py checks every supported type has one). ``quantization_config`` is an open
object on every family until the quantization readers give it per-method schemas.

Imported lazily by model.spec_from_config for configs a user supplies (a file, a folder, the hub). Catalog configs
skip it at run time, to keep `kvcalc plan` from building pydantic models at start-up; tests/test_catalog.py holds
every one of them to these rules.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from .errors import UsageError, shown
from .schema_errors import summarize

MAX_LAYERS = 2_048
MAX_HIDDEN = 1_000_000
MAX_INTERMEDIATE = 10_000_000
MAX_VOCAB = 100_000_000
MAX_HEADS = 65_536
MAX_HEAD_DIM = 65_536
MAX_EXPERTS = 65_536
MAX_TOKENS = 2**31


def _count(high: int, low: int = 1) -> Any:
    """A JSON integer in [low, high] (strict: 4096.0, "4096" and true are refused)."""
    return Annotated[int, Field(strict=True, ge=low, le=high)]


Layers = _count(MAX_LAYERS)
LayerIndex = _count(MAX_LAYERS, 0)
Hidden = _count(MAX_HIDDEN)
Intermediate = _count(MAX_INTERMEDIATE)
Vocab = _count(MAX_VOCAB)
Heads = _count(MAX_HEADS)
HeadDim = _count(MAX_HEAD_DIM)
Experts = _count(MAX_EXPERTS)
Tokens = _count(MAX_TOKENS)
Flag = Annotated[bool, Field(strict=True)]
Name = Annotated[str, Field(strict=True, max_length=100)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class DecoderConfig(BaseModel):
    """Fields every builder reads: the decoder's size, vocabulary, positions, dtype and rotary fraction."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, populate_by_name=True)

    model_type: Name
    hidden_size: Hidden
    num_hidden_layers: Layers
    num_attention_heads: Heads
    vocab_size: Vocab
    max_position_embeddings: Tokens | None = None
    tie_word_embeddings: Flag | None = None
    torch_dtype: Name | None = None
    dtype: Name | None = None
    attention_bias: Flag | None = None
    partial_rotary_factor: Fraction | None = None
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None
    quantization_config: dict[str, Any] | None = None  # an object when present; its methods are read by issue 9

    @model_validator(mode="after")
    def _rope_fraction(self) -> DecoderConfig:
        for key in ("rope_parameters", "rope_scaling"):
            rope = getattr(self, key) or {}
            if "partial_rotary_factor" in rope:
                value = rope["partial_rotary_factor"]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                    raise ValueError(f"{key}.partial_rotary_factor must be a number in (0, 1] (got {shown(value, 30)})")
        # every family derives the head width as hidden_size // heads when head_dim is absent (model.py _head_dim)
        if getattr(self, "head_dim", None) is None and self.hidden_size < self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is smaller than num_attention_heads "
                             f"({self.num_attention_heads}) and no head_dim is given: the head width hidden_size // "
                             "heads would be 0")
        return self


class AttentionConfig(DecoderConfig):
    """Standard attention (q/k/v/o, GQA/MQA) with a gated MLP, full or sliding-window layers."""

    num_key_value_heads: Heads | None = None
    head_dim: HeadDim | None = None
    intermediate_size: Intermediate
    mlp_bias: Flag | None = None
    sliding_window: Tokens | None = None
    layer_types: list[Name] | None = None
    use_sliding_window: Flag | None = None
    max_window_layers: _count(MAX_TOKENS, 0) | None = None
    sliding_window_pattern: Layers | None = None
    sliding_window_pattern_: Layers | None = Field(default=None, alias="_sliding_window_pattern")

    @model_validator(mode="after")
    def _heads(self) -> AttentionConfig:
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        if kv is not None and heads % kv:
            raise ValueError(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv})")
        if self.head_dim is None and self.hidden_size < heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is smaller than num_attention_heads ({heads}) and "
                             "no head_dim is given: the head width hidden_size // heads would be 0")
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_hidden_layers:
                raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                                 f"num_hidden_layers {self.num_hidden_layers}")
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError("layer_types has sliding_attention layers but sliding_window is not set")
        return self


class SlidingPatternConfig(AttentionConfig):
    """Gemma 2 / Gemma 3: a fixed pattern of sliding and full layers, so the window is required."""

    sliding_window: Tokens


class MixtralConfig(AttentionConfig):
    num_local_experts: Experts
    num_experts_per_tok: Experts

    @model_validator(mode="after")
    def _top_k(self) -> MixtralConfig:
        _check_top_k(self.num_experts_per_tok, self.num_local_experts, "num_local_experts")
        return self


class Qwen3MoeConfig(AttentionConfig):
    num_experts: Experts
    num_experts_per_tok: Experts
    moe_intermediate_size: Intermediate
    decoder_sparse_step: Layers | None = None
    mlp_only_layers: list[LayerIndex] | None = None

    @model_validator(mode="after")
    def _experts(self) -> Qwen3MoeConfig:
        _check_top_k(self.num_experts_per_tok, self.num_experts, "num_experts")
        return self


class DeepseekConfig(DecoderConfig):
    """Multi-head latent attention + MoE with shared experts (modeling_deepseek_v2.py / _v3.py)."""

    kv_lora_rank: HeadDim
    qk_rope_head_dim: HeadDim
    qk_nope_head_dim: HeadDim
    v_head_dim: HeadDim
    q_lora_rank: Hidden | None = None
    intermediate_size: Intermediate
    moe_intermediate_size: Intermediate
    n_routed_experts: Experts
    num_experts_per_tok: Experts
    n_shared_experts: _count(MAX_EXPERTS, 0) | None = None
    first_k_dense_replace: LayerIndex | None = None
    moe_layer_freq: Layers | None = None

    @model_validator(mode="after")
    def _experts(self) -> DeepseekConfig:
        _check_top_k(self.num_experts_per_tok, self.n_routed_experts, "n_routed_experts")
        return self


def _dt_rank(value: object) -> object:
    """mamba_dt_rank is "auto" (= ceil(hidden / 16)) or a JSON integer; checked here to keep the message plain."""
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_HIDDEN:
        raise ValueError(f'must be "auto" or a whole number in [1, {MAX_HIDDEN:,}]')
    return value


class JambaConfig(AttentionConfig):
    """Mamba-1 mixers with periodic attention and MoE layers (modeling_jamba.py)."""

    num_experts: Experts
    num_experts_per_tok: Experts
    expert_layer_period: Layers
    expert_layer_offset: LayerIndex
    attn_layer_period: Layers
    attn_layer_offset: LayerIndex
    mamba_expand: _count(64)
    mamba_dt_rank: Annotated[Any, BeforeValidator(_dt_rank)]
    mamba_d_state: HeadDim
    mamba_d_conv: _count(1024)
    mamba_proj_bias: Flag | None = None
    mamba_conv_bias: Flag | None = None

    @model_validator(mode="after")
    def _periods(self) -> JambaConfig:
        _check_top_k(self.num_experts_per_tok, self.num_experts, "num_experts")
        for what in ("attn", "expert"):
            period, offset = getattr(self, f"{what}_layer_period"), getattr(self, f"{what}_layer_offset")
            if offset >= period:
                raise ValueError(f"{what}_layer_offset ({offset}) must be below {what}_layer_period ({period})")
        return self


class SiglipVisionConfig(BaseModel):
    """Gemma 3's vision tower (modeling_siglip.py); defaults are SiglipVisionConfig's."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    hidden_size: Hidden = 768
    intermediate_size: Intermediate = 3072
    num_hidden_layers: Layers = 12
    patch_size: _count(65_536) = 16
    image_size: _count(65_536) = 224
    num_channels: _count(64) = 3
    vision_use_head: Flag | None = None

    @model_validator(mode="after")
    def _patches(self) -> SiglipVisionConfig:
        if self.patch_size > self.image_size:
            raise ValueError(f"patch_size ({self.patch_size}) is larger than image_size ({self.image_size})")
        return self


def _check_top_k(k: int, n: int, field: str) -> None:
    if k > n:
        raise ValueError(f"num_experts_per_tok ({k}) exceeds {field} ({n})")


class LayeredConfig(DecoderConfig):
    """The 2026 families model.py reads layer by layer (layer_kinds.py): the fields the layer reader and the
    family tables read, each typed and bounded; which of them a family needs is checked by the builder (a missing
    one is named in one line)."""

    num_key_value_heads: Heads | None = None
    head_dim: HeadDim | None = None
    attention_head_dim: HeadDim | None = None
    global_head_dim: HeadDim | None = None
    num_global_key_value_heads: Heads | None = None
    intermediate_size: Intermediate | list[Intermediate] | None = None
    intermediate_size_mlp: Intermediate | None = None
    moe_intermediate_size: Intermediate | None = None
    shared_intermediate_size: _count(MAX_INTERMEDIATE, 0) | None = None
    shared_expert_intermediate_size: _count(MAX_INTERMEDIATE, 0) | None = None
    moe_shared_expert_intermediate_size: _count(MAX_INTERMEDIATE, 0) | None = None
    sliding_window: Tokens | None = None
    attention_chunk_size: Tokens | None = None
    layer_types: list[Name] | None = None
    hybrid_override_pattern: Annotated[str, Field(strict=True, max_length=MAX_LAYERS)] | None = None
    full_attn_idxs: list[LayerIndex] | None = None
    full_attention_interval: Layers | None = None
    no_rope_layers: list[_count(1, 0)] | None = None
    num_kv_shared_layers: _count(MAX_LAYERS, 0) | None = None
    num_experts: _count(MAX_EXPERTS, 0) | None = None
    num_local_experts: _count(MAX_EXPERTS, 0) | None = None
    n_routed_experts: Experts | None = None
    n_shared_experts: _count(MAX_EXPERTS, 0) | None = None
    num_experts_per_tok: Experts | None = None
    top_k_experts: Experts | None = None
    first_k_dense_replace: LayerIndex | None = None
    interleave_moe_layer_step: Layers | None = None
    decoder_sparse_step: Layers | None = None
    mlp_only_layers: list[LayerIndex] | None = None
    linear_num_key_heads: Heads | None = None
    linear_num_value_heads: Heads | None = None
    linear_key_head_dim: HeadDim | None = None
    linear_value_head_dim: HeadDim | None = None
    linear_conv_kernel_dim: _count(1024) | None = None
    mamba_num_heads: Heads | None = None
    mamba_n_heads: Heads | None = None
    mamba_head_dim: HeadDim | None = None
    mamba_d_head: HeadDim | None = None
    ssm_state_size: HeadDim | None = None
    mamba_d_state: HeadDim | None = None
    n_groups: Heads | None = None
    mamba_n_groups: Heads | None = None
    conv_kernel: _count(1024) | None = None
    mamba_d_conv: _count(1024) | None = None
    mamba_d_ssm: Intermediate | None = None
    conv_L_cache: _count(1024) | None = None
    conv_dim: Hidden | None = None
    block_ff_dim: Intermediate | None = None
    block_multiple_of: Intermediate | None = None


SCHEMAS: dict[str, type[DecoderConfig]] = {
    **{t: AttentionConfig for t in ("llama", "mistral", "qwen2", "qwen3", "phi3", "granite", "olmo2", "gemma")},
    "gemma2": SlidingPatternConfig,
    "gemma3_text": SlidingPatternConfig,
    "mixtral": MixtralConfig,
    "qwen3_moe": Qwen3MoeConfig,
    "deepseek_v2": DeepseekConfig,
    "deepseek_v3": DeepseekConfig,
    "jamba": JambaConfig,
    "deepseek_v32": DeepseekConfig,
    "kimi_k2": DeepseekConfig,
    "glm_moe_dsa": DeepseekConfig,
    **{t: AttentionConfig for t in ("smollm3", "ministral", "qwen3_vl_text")},
    "qwen3_vl_moe_text": Qwen3MoeConfig,
    **{t: LayeredConfig for t in ("gpt_oss", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "llama4_text",
                                  "glm4_moe", "minimax_m2", "nemotron_h", "granitemoehybrid", "lfm2", "gemma3n_text",
                                  "gemma4_text", "falcon_h1", "deepseek_v4", "minimax_m3")},
}
VISION_SCHEMAS: dict[str, type[BaseModel]] = {"gemma3": SiglipVisionConfig}

_NOTE = "kvcalc's bound, far above any released model; see kvcalc/config_schema.py"
_BOUNDS = {bound: _NOTE for bound in (MAX_LAYERS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_VOCAB, MAX_HEADS, MAX_HEAD_DIM,
                                      MAX_EXPERTS, MAX_TOKENS)}


def check_config(cfg: dict[str, Any], model_type: str, name: str, prefix: str = "") -> None:
    """Raise a one-line UsageError naming the first field of cfg that breaks its family's rules."""
    schema = SCHEMAS.get(model_type)
    if schema is None:
        return
    try:
        schema.model_validate(cfg)
    except ValidationError as exc:
        raise UsageError(f"config of {name} ({model_type}): {summarize(exc, prefix, _BOUNDS)}") from None


def check_vision_config(vc: dict[str, Any], wrapper_type: str, name: str) -> None:
    schema = VISION_SCHEMAS.get(wrapper_type)
    if schema is None:
        return
    try:
        schema.model_validate(vc)
    except ValidationError as exc:
        raise UsageError(f"config of {name} ({wrapper_type}): {summarize(exc, 'vision_config.', _BOUNDS)}") from None
