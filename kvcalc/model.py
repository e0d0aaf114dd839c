"""ModelSpec: what kvcalc needs to know about a model, read from its Hugging Face config.json.

Parameter counts are split by part (embeddings, attention, MLP, norms, lm_head, other) and equal the published totals
exactly (see kvcalc/catalog and tests/test_catalog.py); every decoder layer gets one cache spec (layers.py) describing
what it stores. The layouts follow transformers' modeling files (src/transformers/models/<arch>/modeling_<arch>.py);
tests/test_model.py cross-checks every supported model type against transformers itself when it is installed.

Supported model types and where their layout comes from:
- llama, mistral, qwen2, qwen3, granite, olmo2, gemma, gemma2, gemma3_text, phi3: dense decoders
  (q/k/v/o projections, gated MLP; Qwen3/Gemma 3 add per-head q/k RMSNorms, OLMo 2 full-width ones, Gemma 2/3 four
  norms per layer, Phi-3 fuses qkv and gate/up into single Linears).
- multimodal wrappers (gemma3, mistral3, llama4, qwen2_5_vl, qwen3_vl, qwen3_5, gemma4, ...): the text decoder under
  text_config (Qwen2.5-VL: at the top level); the encoders (encoders.py) are counted apart in ModelSpec.encoders
  (vision_params is their sum) and the weight ledgers charge them; encoders kvcalc cannot count are named in
  ModelSpec.uncounted.
- mixtral, qwen3_moe: mixture-of-experts MLPs (a router plus num_experts gated experts per MoE layer).
- deepseek_v2, deepseek_v3: multi-head latent attention (MLA) + MoE with shared experts; the first
  first_k_dense_replace layers are dense.
- jamba: Mamba-1 mixers with one attention layer every attn_layer_period layers, MoE every expert_layer_period layers.

Non-uniform models: num_kv_heads and head_dim describe the attention layers (MLA: the decompressed per-head key width
qk_nope_head_dim + qk_rope_head_dim, num_kv_heads = num_attention_heads); intermediate_size is the dense MLP width
where the model has dense MLP layers, else the width of one expert (MoeInfo.expert_intermediate_size always holds the
expert width).
"""

from __future__ import annotations

import math
from functools import cached_property
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .errors import UnsupportedModelError, UsageError, shown
from .input_files import MAX_CONFIG_BYTES, is_dir, load_json
from .encoders import Encoder, audio_encoder, gemma3n_vision_embedder, vision_encoder
from .layer_kinds import (gdn_dims, kinds_from_layer_types, layer_caches, mamba2_dims, mamba2_inner, mixer_kinds,
                          short_conv_dims)
from .layers import (
    CompressedSparseAttention, FullAttention, LayerCache, MambaState, MultiLatentAttention, SlidingWindow, flatten,
)


@dataclass(frozen=True)
class LinearGroup:
    """`count` Linear weights of shape in_features x out_features that weight quantizers replace."""

    name: str
    in_features: int
    out_features: int
    count: int

    @property
    def params(self) -> int:
        return self.in_features * self.out_features * self.count


@dataclass(frozen=True)
class ParamCounts:
    embedding: int
    attention: int  # projections (+ their biases and q/k norms; MLA: also the latent norms)
    mlp: int  # dense MLPs, all experts and routers included
    norms: int
    lm_head: int  # 0 when tied to the embedding
    other: int = 0  # anything else: today the Mamba mixers (JSON key kept)
    active_mlp: int | None = None  # MoE: MLP parameters one token uses; None for dense models

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.lm_head + self.other

    @property
    def active(self) -> int:
        """Parameters read per token (differs from total only for MoE)."""
        mlp = self.mlp if self.active_mlp is None else self.active_mlp
        return self.embedding + self.attention + mlp + self.norms + self.lm_head + self.other


@dataclass(frozen=True)
class MoeInfo:
    num_experts: int
    experts_per_token: int
    shared_experts: int = 0
    expert_intermediate_size: int = 0  # width of one routed expert's MLP
    moe_layers: int = 0  # how many layers have an MoE MLP (the others are dense)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    params: ParamCounts
    layers: tuple[LayerCache, ...]
    linears: tuple[LinearGroup, ...]  # quantizable Linear weights (lm_head and embeddings excluded)
    dtype_bytes: int = 2  # bytes per parameter of the checkpoint's torch_dtype (2 unless it says float32)
    moe: MoeInfo | None = None
    rotary_dim: int = 0  # per-head rotary dimension (for vLLM's cos/sin cache); 0 without RoPE (Jamba)
    source: str = ""
    # the config.json dict the builder read (family defaults filled in); facts the engines need belong in fields above
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # Multimodal checkpoints: the encoders (vision tower + projector) the checkpoint also holds, not part of params
    # (the text decoder). transformers' multimodal classes and vLLM load them (vLLM skips them when every modality
    # is limited to 0); engines/weights.py charges them. vision_params is their parameter sum (Gemma 3n's audio
    # tower included: the name predates it).
    vision_params: int = 0
    encoders: tuple[Encoder, ...] = ()
    # Parameters (already in params) that transformers keeps in float32 whatever the load dtype
    # (_keep_in_fp32_modules_strict: DeepSeek routers and e_score_correction_bias). Recorded, not yet charged at 4 bytes
    # by the weight ledger (0.016% of DeepSeek-V3's parameters).
    fp32_params: int = 0
    # Parts of the checkpoint whose weights are not in params (multimodal encoders of wrappers kvcalc reads as their
    # text decoder); empty when everything is counted.
    uncounted: tuple[str, ...] = ()
    # What kvcalc read from the checkpoint besides the architecture (checkpoint.Checkpoint: its quantization, the
    # safetensors headers or the index's total_size); None for a bare config dict.
    checkpoint: Any = field(default=None, repr=False, compare=False)
    # the multimodal wrapper's model_type (gemma3, llama4, qwen3_5...) when the config nests the decoder under
    # text_config; "" otherwise. vLLM serves the wrapper's architecture (engines/vllm_support.py gates by it).
    wrapper_type: str = ""

    @property
    def linear_params(self) -> int:
        return sum(g.params for g in self.linears)

    @cached_property
    def layer_kinds(self) -> frozenset[str]:
        # cached: the profile and the search ask it ~10^4 times per answer; layers are fixed once the spec is built
        return frozenset(layer.kind for layer in flatten(self.layers))


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


# multimodal wrappers whose vision part kvcalc counts (encoders.py); any other wrapper with a vision tower is refused
# unless TEXT_TYPE_OF_WRAPPER knows its decoder (then the plan names the encoder it does not count)
MULTIMODAL_WRAPPERS = {"gemma3", "mistral3", "qwen2_5_vl", "llama4", "qwen3_vl", "qwen3_vl_moe", "qwen3_5",
                       "qwen3_5_moe", "gemma4", "kimi_k25"}
# wrappers whose decoder keys sit at the top level beside vision_config (older Qwen2.5-VL configs), and the
# decoder layout kvcalc builds for them (modeling_qwen2_5_vl.py's text model is Qwen2's: biased q/k/v)
FLAT_MULTIMODAL = {"qwen2_5_vl": "qwen2"}

# transformers' config defaults for fields real configs leave out: Gemma 3's text_config lists only what differs from
# Gemma3TextConfig (configuration_gemma3.py); MistralConfig's sliding_window is 4096 when the key is absent.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131_072, "sliding_window": 4096, "tie_word_embeddings": True},
    "gemma2": {"head_dim": 256, "sliding_window": 4096, "tie_word_embeddings": True},
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "mistral": {"sliding_window": 4096},
    "jamba": {"num_experts": 16, "num_experts_per_tok": 2, "expert_layer_period": 2, "expert_layer_offset": 1,
              "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4,
              "mamba_expand": 2, "mamba_dt_rank": "auto", "mamba_conv_bias": True, "mamba_proj_bias": False},
    "deepseek_v2": {"first_k_dense_replace": 0, "n_shared_experts": None, "moe_layer_freq": 1, "q_lora_rank": None},
    "deepseek_v3": {"first_k_dense_replace": 3, "n_shared_experts": 1, "moe_layer_freq": 1},
    "deepseek_v32": {"first_k_dense_replace": 3, "n_shared_experts": 1, "moe_layer_freq": 1},
    # GlmMoeDsaConfig (transformers configuration_glm_moe_dsa.py) defaults the released configs also spell out
    "glm_moe_dsa": {"first_k_dense_replace": 3, "n_shared_experts": 1, "moe_layer_freq": 1},
    "kimi_k2": {"first_k_dense_replace": 1, "n_shared_experts": 1, "moe_layer_freq": 1},
    "falcon_h1": {"mamba_rms_norm": False, "mamba_conv_bias": True, "mamba_proj_bias": False},  # FalconH1Config
    # Llama4TextConfig defaults the real configs leave out
    "llama4_text": {"interleave_moe_layer_step": 1, "tie_word_embeddings": False},
    "qwen3_moe": {"decoder_sparse_step": 1, "mlp_only_layers": []},
}
# tie_word_embeddings defaults of the config classes (True where the key may be left out)
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text", "gemma3n_text", "gemma4_text", "lfm2", "smollm3"}

DENSE_LLAMA_LIKE = {"llama", "mistral", "qwen2", "qwen3", "phi3", "granite", "olmo2", "gemma", "gemma2", "gemma3_text",
                    "smollm3", "ministral", "qwen3_vl_text"}
MOE = {"mixtral", "qwen3_moe", "qwen3_vl_moe_text"}
# glm_moe_dsa (GLM-5.x): DeepSeek V3.2's MLA + DSA indexer; vLLM serves it as a DeepseekV2ForCausalLM subclass
# (registry.py "GlmMoeDsaForCausalLM": ("deepseek_v2", "GlmMoeDsaForCausalLM"), deepseek_v2.py GlmMoeDsaForCausalLM)
MLA = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"}
HYBRID = {"jamba"}
# read layer by layer (layer_kinds.py + _layered): hybrids, chunked/sliding attention, their MoE flavours
LAYERED = {"gpt_oss", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "llama4_text", "glm4_moe", "minimax_m2",
           "nemotron_h", "granitemoehybrid", "lfm2", "gemma3n_text", "gemma4_text", "falcon_h1"}
SUPPORTED = DENSE_LLAMA_LIKE | MOE | MLA | HYBRID | LAYERED | {"deepseek_v4", "minimax_m3"}
# multimodal wrappers whose text decoder sits under text_config with its own model_type (filled in when absent)
TEXT_TYPE_OF_WRAPPER = {"gemma3": "gemma3_text", "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
                        "llama4": "llama4_text", "gemma3n": "gemma3n_text", "gemma4": "gemma4_text",
                        "kimi_k25": "kimi_k2", "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text",
                        "mistral3": "mistral", "qwen2_5_vl": "qwen2", "minimax_m3_vl": "minimax_m3"}
# every wrapper kvcalc reads: its decoder is planned, its encoders counted where encoders.py knows them and named
# in ModelSpec.uncounted where it does not (Kimi-K2.5's MoonViT, Gemma 3n's vision and audio towers)
TEXT_ONLY_WRAPPERS = set(TEXT_TYPE_OF_WRAPPER) - MULTIMODAL_WRAPPERS


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs (Gemma 3, Llama 4...) keep the decoder under text_config."""
    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        merged = dict(cfg["text_config"] or {})  # an object or null: spec_from_config checked it
        merged.setdefault("architectures", cfg.get("architectures"))
        for key in ("torch_dtype", "dtype"):
            if cfg.get(key) is not None:
                merged.setdefault(key, cfg[key])
        outer = str(cfg.get("model_type", "")).lower()
        if ("model_type" not in merged or outer in FLAT_MULTIMODAL) and outer in TEXT_TYPE_OF_WRAPPER:
            merged["model_type"] = TEXT_TYPE_OF_WRAPPER[outer]
        return merged
    outer = str(cfg.get("model_type", "")).lower()
    if outer in FLAT_MULTIMODAL:
        return {**cfg, "model_type": FLAT_MULTIMODAL[outer]}
    return cfg


# NemotronHConfig (transformers 5) layers_block_type names -> the hybrid_override_pattern characters they replaced
_BLOCK_TYPE_CHARS = {"mamba": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_h_pattern(cfg: dict[str, Any]) -> dict[str, Any]:
    """Nemotron 3 Ultra's config lists its layers as layers_block_type (and has no num_hidden_layers; the
    config class takes the list's length): rewrite it as the hybrid_override_pattern the older configs carry."""
    types = cfg.get("layers_block_type")
    if not isinstance(types, list) or cfg.get("hybrid_override_pattern"):
        return cfg
    unknown = sorted({str(t) for t in types} - set(_BLOCK_TYPE_CHARS))
    if unknown:
        raise UnsupportedModelError(f"layers_block_type entry {shown(unknown[0], 30)} is not supported yet; kvcalc "
                                    f"refuses rather than guess (known: {', '.join(sorted(_BLOCK_TYPE_CHARS))})")
    n = cfg.get("num_hidden_layers")
    if n is not None and n != len(types):
        raise UsageError(f"layers_block_type has {len(types)} entries for num_hidden_layers {n}")
    return {**cfg, "hybrid_override_pattern": "".join(_BLOCK_TYPE_CHARS[t] for t in types),
            "num_hidden_layers": len(types)}


def spec_from_config(cfg: dict[str, Any], name: str = "model", source: str = "", *, trusted: bool = False) -> ModelSpec:
    """Build a ModelSpec from a config.json dict. Refuses (UnsupportedModelError) what it cannot account for.

    A config from a user (trusted=False) is first held to its family's rules in config_schema.py: every field read
    below, range-checked, the first bad one named in a one-line UsageError. Catalog configs pass trusted=True and skip
    that (start-up time; tests/test_catalog.py checks them against the same rules).
    """
    label = shown(name, 60, quote=False)
    if not isinstance(cfg, dict):
        raise UsageError(f"config of {label} is not a JSON object")
    for key in ("text_config", "vision_config", "quantization_config"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise UsageError(f"config of {label}: {key} must be an object (got {shown(cfg[key], 30)})")
    outer_type = str(cfg.get("model_type", "")).lower()
    wrapped = ("text_config" in cfg and "num_hidden_layers" not in cfg) or outer_type in FLAT_MULTIMODAL
    if (wrapped and cfg.get("vision_config") is not None and outer_type not in MULTIMODAL_WRAPPERS
            and outer_type not in TEXT_ONLY_WRAPPERS):
        raise UnsupportedModelError(
            f"{label} is a multimodal model ({shown(outer_type or 'unknown type', 40, quote=False)}) whose vision "
            "tower kvcalc cannot count yet; kvcalc refuses rather than guess (multimodal wrappers supported: "
            f"{', '.join(sorted(MULTIMODAL_WRAPPERS))})"
        )
    text = _text_config(cfg)
    model_type = str(text.get("model_type", "")).lower()
    if model_type not in SUPPORTED:
        raise UnsupportedModelError(
            f"model type {shown(model_type, 40) if model_type else '(none)'} of {label} is not supported yet; "
            f"kvcalc refuses rather than guess (supported: {', '.join(sorted(SUPPORTED | MULTIMODAL_WRAPPERS))})"
        )
    merged = dict(_DEFAULTS.get(model_type, {}))
    merged.update(text)  # a key present with null stays null (Mistral v0.3's "sliding_window": null)
    if model_type == "nemotron_h":
        merged = _nemotron_h_pattern(merged)
    vision = cfg.get("vision_config") if wrapped else None
    if not trusted:
        from .config_schema import check_config, check_vision_config  # pydantic: only for configs users supply

        check_config(merged, model_type, label, prefix="text_config." if wrapped else "")
        if vision is not None:
            check_vision_config(vision, outer_type, label)
    try:
        spec = _BUILDERS[model_type](merged, name, model_type, source)
        if wrapped and (outer_type in MULTIMODAL_WRAPPERS or outer_type in TEXT_ONLY_WRAPPERS):
            spec = _encoders(spec, cfg, outer_type)
    except UsageError:
        raise
    except KeyError as exc:
        raise UsageError(f"config of {label} ({model_type}) is missing the field {shown(exc.args[0], 40)}") from None
    except (TypeError, ValueError, ArithmeticError, AttributeError, IndexError, RecursionError, MemoryError) as exc:
        # a trusted config, or a field the schema does not know a builder reads: still one line, never a traceback
        raise UsageError(f"config of {label} ({model_type}) has a field kvcalc cannot use "
                         f"({type(exc).__name__}: {shown(str(exc), 80, quote=False)})") from None
    return replace(spec, wrapper_type=outer_type) if wrapped else spec


# ---------------------------------------------------------------------------------------------------------------------
# counting helpers


class _Count:
    """Accumulates parameters by part and the quantizable Linear weights, layer by layer."""

    def __init__(self) -> None:
        self.parts = {"attention": 0, "mlp": 0, "norms": 0, "other": 0}
        self.active_mlp = 0
        self.fp32 = 0
        self._linears: dict[tuple[str, int, int], int] = {}

    def add(self, part: str, n: int) -> int:
        self.parts[part] += n
        return n

    def linear(self, part: str, name: str, fin: int, fout: int, count: int = 1, bias: bool = False,
               quantized: bool = True) -> int:
        """count nn.Linear(fin, fout) weights (+ bias); quantized=False for weights bitsandbytes/AWQ leave alone."""
        if count <= 0:
            return 0
        n = (fin * fout + (fout if bias else 0)) * count
        self.parts[part] += n
        if quantized:
            key = (name, fin, fout)
            self._linears[key] = self._linears.get(key, 0) + count
        return n

    def linears(self) -> tuple[LinearGroup, ...]:
        return tuple(LinearGroup(name, fin, fout, count) for (name, fin, fout), count in self._linears.items())


def _dtype_bytes(cfg: dict[str, Any]) -> int:
    dtype = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", "")
    return {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}.get(dtype, 2)


def _head_dim(cfg: dict[str, Any]) -> int:
    h, n_heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    return int(_get(cfg, "head_dim", default=h // n_heads))


def _rotary_dim(cfg: dict[str, Any], head_dim: int) -> int:
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    from_rope = rope.get("partial_rotary_factor", 1.0) if isinstance(rope, dict) else 1.0
    partial = _get(cfg, "partial_rotary_factor", default=from_rope)
    return int(head_dim * float(partial))


def _attention_kinds(cfg: dict[str, Any], model_type: str, n_layers: int) -> list[str]:
    """'full' or 'sliding' for each layer, the way transformers' config classes decide it."""
    if cfg.get("layer_types"):  # these families' configs name only the two attention kinds
        return kinds_from_layer_types(cfg, n_layers, {"full_attention": "full", "sliding_attention": "sliding"})
    window = cfg.get("sliding_window")
    if model_type == "gemma2":  # configuration_gemma2.py: (i + 1) % 2 -> sliding, so even layers slide
        return ["sliding" if (i + 1) % 2 else "full" for i in range(n_layers)]
    if model_type == "gemma3_text":  # configuration_gemma3.py: every sliding_window_pattern-th layer is full
        pattern = int(_get(cfg, "sliding_window_pattern", "_sliding_window_pattern", default=6))
        return ["sliding" if (i + 1) % pattern else "full" for i in range(n_layers)]
    if model_type in ("qwen2", "qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text"):
        # layers >= max_window_layers slide when use_sliding_window
        if cfg.get("use_sliding_window") and window:
            first = int(_get(cfg, "max_window_layers", default=n_layers))
            return ["sliding" if i >= first else "full" for i in range(n_layers)]
        return ["full"] * n_layers
    if model_type in ("mistral", "mixtral", "phi3", "jamba") and window:  # one window for every layer
        return ["sliding"] * n_layers
    return ["full"] * n_layers


def _kv_cache(kind: str, cfg: dict[str, Any], n_kv: int, head_dim: int) -> LayerCache:
    if kind == "sliding":
        return SlidingWindow(n_kv, head_dim, head_dim, window=int(cfg["sliding_window"]))
    return FullAttention(n_kv, head_dim, head_dim)


def _standard_attention(counts: _Count, cfg: dict[str, Any], model_type: str) -> None:
    """One layer of q/k/v/o attention (phi3: fused qkv_proj) with the model type's biases and q/k norms."""
    h, n_heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    n_kv = int(_get(cfg, "num_key_value_heads", default=n_heads))
    hd = _head_dim(cfg)
    q_out, kv_out = n_heads * hd, n_kv * hd
    if model_type == "qwen2":  # modeling_qwen2.py: q/k/v always biased, o never
        qkv_bias, o_bias = True, False
    elif model_type in ("mistral", "mixtral", "phi3", "jamba"):
        qkv_bias = o_bias = False
    else:  # llama, granite, olmo2, gemma*, qwen3*: attention_bias on all four projections
        qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
    if model_type == "phi3":
        counts.linear("attention", "qkv_proj", h, q_out + 2 * kv_out)
    else:
        counts.linear("attention", "q_proj", h, q_out, bias=qkv_bias)
        counts.linear("attention", "k_proj", h, kv_out, bias=qkv_bias)
        counts.linear("attention", "v_proj", h, kv_out, bias=qkv_bias)
    counts.linear("attention", "o_proj", q_out, h, bias=o_bias)
    if model_type in ("qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text", "gemma3_text"):  # per-head q/k norms
        counts.add("attention", 2 * hd)
    elif model_type == "olmo2":  # full-width RMSNorm on q and k
        counts.add("attention", q_out + kv_out)


def _gated_mlp(counts: _Count, h: int, inter: int, prefix: str = "", count: int = 1, bias: bool = False,
               fused: bool = False) -> int:
    """gate/up/down MLP(s) of width inter; returns their parameters."""
    if fused:  # phi3: gate_up_proj is one Linear
        n = counts.linear("mlp", prefix + "gate_up_proj", h, 2 * inter, count, bias)
    else:
        n = counts.linear("mlp", prefix + "gate_proj", h, inter, count, bias)
        n += counts.linear("mlp", prefix + "up_proj", h, inter, count, bias)
    return n + counts.linear("mlp", prefix + "down_proj", inter, h, count, bias)


def _moe_mlp(counts: _Count, h: int, expert_inter: int, n_experts: int, top_k: int, *,
             router: Literal["linear", "fp32"] = "linear", router_bias: bool = False, shared_inter: int = 0) -> None:
    """One mixture-of-experts MLP: a router, optional always-on shared experts of total width shared_inter, and
    n_experts gated experts of width expert_inter, of which a token reads top_k.

    router="linear": an nn.Linear(hidden, n_experts) without bias (Mixtral, Qwen3-MoE, Jamba; bitsandbytes quantizes
    it). router="fp32": a bare Parameter kept in float32 (DeepSeek's gate, plus e_score_correction_bias when
    router_bias), never quantized.
    """
    if router == "linear":
        router_params = counts.linear("mlp", "router", h, n_experts)
    else:
        router_params = counts.add("mlp", n_experts * h + (n_experts if router_bias else 0))
        counts.fp32 += router_params
    shared = _gated_mlp(counts, h, shared_inter, prefix="shared_experts.") if shared_inter else 0
    _gated_mlp(counts, h, expert_inter, prefix="experts.", count=n_experts)
    counts.active_mlp += router_params + shared + top_k * 3 * h * expert_inter


def _spec(cfg: dict[str, Any], name: str, model_type: str, source: str, counts: _Count, layers: list[LayerCache], *,
          head_dim: int, n_kv: int, intermediate: int, moe: MoeInfo | None = None, rotary_dim: int | None = None,
          ) -> ModelSpec:
    h, vocab = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    tied = bool(_get(cfg, "tie_word_embeddings", default=model_type in _TIED_BY_DEFAULT))
    params = ParamCounts(embedding=vocab * h, attention=counts.parts["attention"], mlp=counts.parts["mlp"],
                         norms=counts.parts["norms"], lm_head=0 if tied else vocab * h, other=counts.parts["other"],
                         active_mlp=counts.active_mlp if moe else None)
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=h,
        num_layers=len(layers),
        num_heads=int(cfg["num_attention_heads"]),
        num_kv_heads=n_kv,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_position_embeddings=int(_get(cfg, "max_position_embeddings", default=0)),
        tie_word_embeddings=tied,
        params=params,
        layers=tuple(layers),
        linears=counts.linears(),
        dtype_bytes=_dtype_bytes(cfg),
        moe=moe,
        rotary_dim=_rotary_dim(cfg, head_dim) if rotary_dim is None else rotary_dim,
        source=source,
        config=cfg,
        fp32_params=counts.fp32,
    )


# ---------------------------------------------------------------------------------------------------------------------
# dense decoders: llama, mistral, qwen2, qwen3, phi3, granite, olmo2, gemma, gemma2, gemma3_text


def _dense(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    h, n_layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    n_kv = int(_get(cfg, "num_key_value_heads", default=cfg["num_attention_heads"]))
    hd, inter = _head_dim(cfg), int(cfg["intermediate_size"])
    kinds = _attention_kinds(cfg, model_type, n_layers)
    norms_per_layer = 4 if model_type in ("gemma2", "gemma3_text") else 2
    mlp_bias = bool(cfg.get("mlp_bias")) and model_type in ("llama", "granite")
    counts = _Count()
    for _ in range(n_layers):
        _standard_attention(counts, cfg, model_type)
        _gated_mlp(counts, h, inter, bias=mlp_bias, fused=model_type == "phi3")
        counts.add("norms", norms_per_layer * h)
    counts.add("norms", h)  # final norm
    layers = [_kv_cache(k, cfg, n_kv, hd) for k in kinds]
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=hd, n_kv=n_kv, intermediate=inter)


# ---------------------------------------------------------------------------------------------------------------------
# mixture of experts: mixtral, qwen3_moe


def _moe(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    h, n_layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    n_kv = int(_get(cfg, "num_key_value_heads", default=cfg["num_attention_heads"]))
    hd = _head_dim(cfg)
    k = int(cfg["num_experts_per_tok"])
    if model_type == "mixtral":  # modeling_mixtral.py: every layer is MoE, experts of intermediate_size
        n_exp, exp_inter, dense_inter = int(cfg["num_local_experts"]), int(cfg["intermediate_size"]), 0
        is_moe = [True] * n_layers
    else:  # modeling_qwen3_moe.py: MoE unless in mlp_only_layers or off the decoder_sparse_step grid
        n_exp, exp_inter = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
        dense_inter = int(cfg["intermediate_size"])
        step, only = int(cfg.get("decoder_sparse_step") or 1), set(cfg.get("mlp_only_layers") or [])
        is_moe = [i not in only and n_exp > 0 and (i + 1) % step == 0 for i in range(n_layers)]
    kinds = _attention_kinds(cfg, model_type, n_layers)
    counts = _Count()
    for moe_layer in is_moe:
        _standard_attention(counts, cfg, model_type)
        if moe_layer:
            _moe_mlp(counts, h, exp_inter, n_exp, k)
        else:
            counts.active_mlp += _gated_mlp(counts, h, dense_inter)
        counts.add("norms", 2 * h)
    counts.add("norms", h)
    layers = [_kv_cache(kind, cfg, n_kv, hd) for kind in kinds]
    moe = MoeInfo(num_experts=n_exp, experts_per_token=k, expert_intermediate_size=exp_inter,
                  moe_layers=sum(is_moe))
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=hd, n_kv=n_kv,
                 intermediate=dense_inter if not all(is_moe) else exp_inter, moe=moe)


# ---------------------------------------------------------------------------------------------------------------------
# DeepSeek V2 / V3: multi-head latent attention + MoE with shared experts


def _deepseek(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    """modeling_deepseek_v2.py / modeling_deepseek_v3.py. Attention per layer: q_proj (or q_a_proj + q_a_layernorm +
    q_b_proj with q_lora_rank), kv_a_proj_with_mqa (hidden -> kv_lora_rank + qk_rope_head_dim), kv_a_layernorm,
    kv_b_proj (kv_lora_rank -> heads * (qk_nope_head_dim + v_head_dim)), o_proj. MLP: dense for the first
    first_k_dense_replace layers, then a router (weight n_routed_experts x hidden, a bare Parameter kept in fp32;
    V3 adds the e_score_correction_bias the checkpoint stores), n_routed_experts experts and one shared MLP of width
    moe_intermediate_size * n_shared_experts. The MTP (next-token-prediction) layers of V3 checkpoints are not part of
    the model transformers and vLLM load (see the catalog entry's params_note)."""
    h, n_layers, n_heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    q_lora = cfg.get("q_lora_rank")
    kv_lora, rope, nope = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"]), int(cfg["qk_nope_head_dim"])
    v_dim = int(cfg["v_head_dim"])
    bias = bool(cfg.get("attention_bias", False))
    n_exp, k = int(cfg["n_routed_experts"]), int(cfg["num_experts_per_tok"])
    exp_inter, dense_inter = int(cfg["moe_intermediate_size"]), int(cfg["intermediate_size"])
    n_shared = int(cfg.get("n_shared_experts") or 0)
    first_dense, freq = int(cfg.get("first_k_dense_replace") or 0), int(cfg.get("moe_layer_freq") or 1)
    score_bias = cfg.get("topk_method") == "noaux_tc" or model_type in ("deepseek_v3", "deepseek_v32", "kimi_k2",
                                                                         "glm_moe_dsa")
    has_indexer = _indexer_layers(cfg, n_layers)
    counts = _Count()
    n_moe = 0
    for i in range(n_layers):
        if q_lora is None:
            counts.linear("attention", "q_proj", h, n_heads * (nope + rope))
        else:
            counts.linear("attention", "q_a_proj", h, int(q_lora), bias=bias)
            counts.add("attention", int(q_lora))  # q_a_layernorm
            counts.linear("attention", "q_b_proj", int(q_lora), n_heads * (nope + rope))
        counts.linear("attention", "kv_a_proj_with_mqa", h, kv_lora + rope, bias=bias)
        counts.add("attention", kv_lora)  # kv_a_layernorm
        counts.linear("attention", "kv_b_proj", kv_lora, n_heads * (nope + v_dim))
        counts.linear("attention", "o_proj", n_heads * v_dim, h, bias=bias)
        if has_indexer[i]:  # V3.2 lightning indexer (modeling_deepseek_v32 / vLLM deepseek_v2.py Indexer)
            idx_heads, idx_dim = int(cfg["index_n_heads"]), int(cfg["index_head_dim"])
            counts.linear("attention", "indexer.wq_b", int(q_lora or h), idx_heads * idx_dim)
            counts.linear("attention", "indexer.wk", h, idx_dim)
            counts.add("attention", 2 * idx_dim)  # k_norm (LayerNorm: weight + bias)
            counts.linear("attention", "indexer.weights_proj", h, idx_heads, quantized=False)
        if i >= first_dense and i % freq == 0:
            n_moe += 1
            _moe_mlp(counts, h, exp_inter, n_exp, k, router="fp32", router_bias=score_bias,
                     shared_inter=exp_inter * n_shared)
        else:
            counts.active_mlp += _gated_mlp(counts, h, dense_inter)
        counts.add("norms", 2 * h)
    counts.add("norms", h)
    index_dim = int(cfg.get("index_head_dim") or 0)
    layers = [MultiLatentAttention(n_heads, kv_lora, rope, nope, v_dim,
                                   index_head_dim=index_dim if has_indexer[i] else 0, sparse=bool(index_dim))
              for i in range(n_layers)]
    moe = MoeInfo(num_experts=n_exp, experts_per_token=k, shared_experts=n_shared, expert_intermediate_size=exp_inter,
                  moe_layers=n_moe)
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=nope + rope, n_kv=n_heads,
                 intermediate=dense_inter if n_moe < n_layers else exp_inter, moe=moe, rotary_dim=rope)


# ---------------------------------------------------------------------------------------------------------------------
# DeepSeek V4: compressed sparse attention (CSA / HCA / sliding) + hash-routed then top-k MoE + hyper-connections


def _dsv4_ratios(cfg: dict[str, Any], n_layers: int) -> list[int]:
    """compress_ratios per decoder layer (the list also covers the MTP layers after them): 0 or 1 sliding window
    only, 4 CSA, 128 HCA (transformers configuration_deepseek_v4.py maps them to layer_types the same way)."""
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < n_layers:
        raise UsageError(f"compress_ratios must list at least num_hidden_layers ({n_layers}) entries")
    out = [max(int(r), 1) for r in ratios[:n_layers]]
    unknown = sorted(set(out) - {1, 4, 128})
    if unknown:
        raise UnsupportedModelError(f"compress ratio {unknown[0]} is not supported yet; kvcalc refuses rather than "
                                    "guess (known: 0/1 sliding, 4 CSA, 128 HCA; vLLM sparse_swa.py _layer_type_for)")
    return out


def _deepseek_v4(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    """modeling_deepseek_v4.py (transformers 5.24), checked on the meta device. Attention per layer: q_a_proj
    (hidden -> q_lora) + q_a_norm, q_b_proj (q_lora -> heads x head_dim), kv_proj (hidden -> head_dim, the one KV
    head) + kv_norm, o_a_proj (grouped: heads x head_dim x o_lora_rank), o_b_proj (o_groups x o_lora -> hidden), and
    one fp32 sink per head. Compressor (CSA/HCA layers): kv_proj and gate_proj (hidden -> coff x head_dim),
    position_bias (ratio x coff x head_dim, fp32), kv_norm; CSA adds the indexer: its own compressor of coff x
    index_head_dim, q_b_proj (q_lora -> index heads x index_head_dim) and weights_proj (hidden -> index heads). MoE in
    every layer: router (fp32; the first num_hash_layers route by token id, tid2eid a buffer, the others keep an
    e_score_correction_bias), fused experts, one shared MLP of moe_intermediate_size. Hyper-connections (hc_mult
    streams): per layer two of fn (2N+N^2) x N*hidden, base, 3 scales; a head of N x N*hidden + N + 1. MTP layers
    are not part of the model transformers and vLLM load."""
    h, n_layers, n_heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    hd, rope, q_lora = int(cfg["head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["q_lora_rank"])
    o_lora, o_groups = int(cfg["o_lora_rank"]), int(cfg["o_groups"])
    idx_heads, idx_dim = int(cfg["index_n_heads"]), int(cfg["index_head_dim"])
    n_exp, k, inter = int(cfg["n_routed_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["moe_intermediate_size"])
    n_shared, n_hash = int(cfg.get("n_shared_experts") or 1), int(cfg.get("num_hash_layers") or 0)
    hc = int(cfg.get("hc_mult") or 1)
    window = int(cfg["sliding_window"])
    ratios = _dsv4_ratios(cfg, n_layers)
    counts = _Count()
    layers: list[LayerCache] = []
    for i, ratio in enumerate(ratios):
        counts.fp32 += counts.add("attention", n_heads)  # sinks
        counts.linear("attention", "q_a_proj", h, q_lora)
        counts.fp32 += counts.add("attention", q_lora)  # q_a_norm
        counts.linear("attention", "q_b_proj", q_lora, n_heads * hd)
        counts.linear("attention", "kv_proj", h, hd)
        counts.fp32 += counts.add("attention", hd)  # kv_norm
        counts.linear("attention", "o_a_proj", n_heads * hd // o_groups, o_groups * o_lora)
        counts.linear("attention", "o_b_proj", o_groups * o_lora, h)
        if ratio > 1:
            coff = 2 if ratio == 4 else 1
            counts.linear("attention", "compressor.kv_proj", h, coff * hd, quantized=False)
            counts.linear("attention", "compressor.gate_proj", h, coff * hd, quantized=False)
            counts.fp32 += counts.add("attention", ratio * coff * hd + hd)  # position_bias, kv_norm
        if ratio == 4:
            counts.linear("attention", "indexer.kv_proj", h, 2 * idx_dim, quantized=False)
            counts.linear("attention", "indexer.gate_proj", h, 2 * idx_dim, quantized=False)
            counts.add("attention", ratio * 2 * idx_dim + idx_dim)  # position_bias, kv_norm
            counts.linear("attention", "indexer.q_b_proj", q_lora, idx_heads * idx_dim)
            counts.linear("attention", "indexer.weights_proj", h, idx_heads, quantized=False)
        router = counts.add("mlp", n_exp * h + (0 if i < n_hash else n_exp))  # weight (+ e_score_correction_bias)
        counts.fp32 += router
        shared = _gated_mlp(counts, h, inter * n_shared, prefix="shared_experts.")
        _gated_mlp(counts, h, inter, prefix="experts.", count=n_exp)
        counts.active_mlp += router + shared + k * 3 * h * inter
        counts.fp32 += counts.add("norms", 2 * h)
        streams = 2 * hc + hc * hc
        counts.fp32 += counts.add("other", 2 * (streams * hc * h + streams + 3))  # attn_hc, ffn_hc
        layers.append(CompressedSparseAttention(hd, rope, window, ratio, idx_dim if ratio == 4 else 0))
    counts.fp32 += counts.add("norms", h)
    counts.fp32 += counts.add("other", hc * hc * h + hc + 1)  # hc_head
    moe = MoeInfo(num_experts=n_exp, experts_per_token=k, shared_experts=n_shared, expert_intermediate_size=inter,
                  moe_layers=n_layers)
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=hd, n_kv=1, intermediate=inter, moe=moe,
                 rotary_dim=rope)


# ---------------------------------------------------------------------------------------------------------------------
# MiniMax M3: GQA attention with MiniMax sparse attention (MSA) index keys, dense then MoE MLPs


def _minimax_m3(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    """vLLM's MiniMaxM3ForCausalLM (read in baidu/vLLM-Kunlun vllm/model_executor/models/minimax_m3.py, which says it
    mirrors upstream; transformers has no class): per layer q/k/v/o projections, per-head q_norm / k_norm of head_dim
    (use_qk_norm, qk_norm_type per_head); sparse layers (sparse_attention_config.sparse_attention_freq) add the MSA
    indexer: index_q_proj (hidden -> sparse_num_index_heads x sparse_index_dim), index_k_proj (hidden -> one index
    head) and two norms of sparse_index_dim, and keep an index-key cache. MLP: gated dense of dense_intermediate_size
    where moe_layer_freq is 0, else block_sparse_moe: fp32 gate + e_score_correction_bias (use_routing_bias), a shared
    expert of shared_intermediate_size and num_local_experts experts of moe_intermediate_size. The MTP modules are not
    part of the model vLLM loads."""
    h, n_layers, n_heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    n_kv, hd = int(cfg["num_key_value_heads"]), int(cfg["head_dim"])
    sparse = cfg.get("sparse_attention_config") or {}
    use_sparse = bool(sparse.get("use_sparse_attention"))
    sparse_freq = _per_layer(sparse.get("sparse_attention_freq", 0), n_layers, "sparse_attention_freq")
    moe_freq = _per_layer(cfg.get("moe_layer_freq", 1), n_layers, "moe_layer_freq")
    idx_heads, idx_dim = int(sparse.get("sparse_num_index_heads") or 0), int(sparse.get("sparse_index_dim") or 0)
    n_exp, k = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"])
    # the VL wrapper's text_config leaves moe_intermediate_size out: intermediate_size is the expert width (as in M2)
    inter = int(_get(cfg, "moe_intermediate_size", "intermediate_size"))
    dense_inter = int(cfg["dense_intermediate_size"])
    shared = int(cfg.get("shared_intermediate_size") or 0) * int(cfg.get("n_shared_experts") or 1)
    counts = _Count()
    layers: list[LayerCache] = []
    for i in range(n_layers):
        counts.linear("attention", "q_proj", h, n_heads * hd)
        counts.linear("attention", "k_proj", h, n_kv * hd)
        counts.linear("attention", "v_proj", h, n_kv * hd)
        counts.linear("attention", "o_proj", n_heads * hd, h)
        if cfg.get("use_qk_norm", True):
            counts.add("attention", 2 * hd)
        indexed = use_sparse and bool(sparse_freq[i]) and idx_dim > 0
        if indexed:
            counts.linear("attention", "index_q_proj", h, idx_heads * idx_dim)
            counts.linear("attention", "index_k_proj", h, idx_dim)
            counts.add("attention", 2 * idx_dim)
        if moe_freq[i]:
            _moe_mlp(counts, h, inter, n_exp, k, router="fp32", router_bias=bool(cfg.get("use_routing_bias", True)),
                     shared_inter=shared)
        else:
            counts.active_mlp += _gated_mlp(counts, h, dense_inter)
        counts.add("norms", 2 * h)
        layers.append(FullAttention(n_kv, hd, hd, index_key_dim=idx_dim if indexed else 0))
    counts.add("norms", h)
    moe = MoeInfo(num_experts=n_exp, experts_per_token=k, shared_experts=int(cfg.get("n_shared_experts") or 1),
                  expert_intermediate_size=inter, moe_layers=sum(1 for f in moe_freq if f))
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=hd, n_kv=n_kv, intermediate=inter, moe=moe,
                 rotary_dim=int(cfg.get("rotary_dim") or hd))


def _per_layer(value: Any, n_layers: int, what: str) -> list[int]:
    """A per-layer 0/1 list, or one number for every layer."""
    if isinstance(value, list):
        if len(value) != n_layers:
            raise UsageError(f"{what} has {len(value)} entries for {n_layers} layers")
        return [int(v) for v in value]
    return [int(value)] * n_layers


def _indexer_layers(cfg: dict[str, Any], n_layers: int) -> list[bool]:
    """Which layers run a DSA lightning indexer of their own. Every layer when index_head_dim is set (DeepSeek V3.2,
    GLM-5/5.1); GLM-5.2's indexer_types marks "shared" layers that reuse the top-k of the last "full" layer
    (IndexCache): they hold no indexer weights and no indexer key cache (transformers modeling_glm_moe_dsa builds
    the indexer only where indexer_types is "full")."""
    if not cfg.get("index_head_dim"):
        return [False] * n_layers
    types = cfg.get("indexer_types")
    if types is None:
        return [True] * n_layers
    if len(types) != n_layers:
        raise UsageError(f"indexer_types has {len(types)} entries for {n_layers} layers")
    unknown = sorted({str(t) for t in types} - {"full", "shared"})
    if unknown:
        raise UnsupportedModelError(f"indexer type {shown(unknown[0], 30)} is not supported yet; kvcalc refuses "
                                    "rather than guess (known: full, shared)")
    return [t == "full" for t in types]


# ---------------------------------------------------------------------------------------------------------------------
# Jamba: Mamba-1 mixers + attention every attn_layer_period layers, MoE every expert_layer_period layers


def _jamba(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    """modeling_jamba.py. A Mamba mixer (JambaMambaMixer) with I = mamba_expand * hidden, R = mamba_dt_rank
    ('auto' = ceil(hidden / 16)), N = mamba_d_state, K = mamba_d_conv: in_proj hidden -> 2I, depthwise conv1d I x K
    (+ I bias), x_proj I -> R + 2N, dt_proj R -> I (+ I bias), A_log I x N, D I, out_proj I -> hidden, and RMSNorms of
    R, N and N (dt/b/c_layernorm). Its cache per sequence follows vLLM's MambaStateShapeCalculator.mamba1_state_shape
    (vllm/model_executor/layers/mamba/mamba_utils.py): conv state I x (K - 1), SSM state I x N. transformers'
    HybridMambaAttentionDynamicCache keeps the conv state one column wider (I x K)."""
    h, n_layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    n_kv = int(_get(cfg, "num_key_value_heads", default=cfg["num_attention_heads"]))
    hd, inter = _head_dim(cfg), int(cfg["intermediate_size"])
    n_exp, k = int(cfg["num_experts"]), int(cfg["num_experts_per_tok"])
    e_period, e_offset = int(cfg["expert_layer_period"]), int(cfg["expert_layer_offset"])
    a_period, a_offset = int(cfg["attn_layer_period"]), int(cfg["attn_layer_offset"])
    big_i = int(cfg["mamba_expand"]) * h
    rank = cfg["mamba_dt_rank"]
    rank = math.ceil(h / 16) if rank == "auto" else int(rank)
    n_state, k_conv = int(cfg["mamba_d_state"]), int(cfg["mamba_d_conv"])
    proj_bias, conv_bias = bool(cfg.get("mamba_proj_bias")), bool(cfg.get("mamba_conv_bias"))
    window_kinds = _attention_kinds(cfg, model_type, n_layers)
    counts = _Count()
    layers: list[LayerCache] = []
    n_moe = 0
    for i in range(n_layers):
        if i % a_period == a_offset:
            _standard_attention(counts, cfg, model_type)
            layers.append(_kv_cache(window_kinds[i], cfg, n_kv, hd))
        else:
            counts.linear("other", "mamba.in_proj", h, 2 * big_i, bias=proj_bias)
            counts.add("other", big_i * k_conv + (big_i if conv_bias else 0))  # conv1d (not a Linear)
            counts.linear("other", "mamba.x_proj", big_i, rank + 2 * n_state)
            counts.linear("other", "mamba.dt_proj", rank, big_i, bias=True)
            counts.add("other", big_i * n_state + big_i + rank + 2 * n_state)  # A_log, D, dt/b/c_layernorm
            counts.linear("other", "mamba.out_proj", big_i, h, bias=proj_bias)
            layers.append(MambaState(conv_state_elements=big_i * (k_conv - 1), ssm_state_elements=big_i * n_state,
                                     conv_channels=big_i))
        if n_exp > 1 and i % e_period == e_offset:
            n_moe += 1
            _moe_mlp(counts, h, inter, n_exp, k)
        else:
            counts.active_mlp += _gated_mlp(counts, h, inter)
        counts.add("norms", 2 * h)  # input_layernorm, pre_ff_layernorm
    counts.add("norms", h)
    moe = MoeInfo(num_experts=n_exp, experts_per_token=k, expert_intermediate_size=inter, moe_layers=n_moe)
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=hd, n_kv=n_kv, intermediate=inter,
                 moe=moe if n_moe else None, rotary_dim=0)


# ---------------------------------------------------------------------------------------------------------------------
# 2026 families, read layer by layer (layer_kinds.py): hybrid attention / Gated DeltaNet / Mamba2 / short conv
# decoders, chunked and sliding attention, and their MoE flavours. One builder; the family differences are the
# small tables below, each citing the modeling file it follows (transformers src/transformers/models/<type>/).

# attention projections: (q/k/v bias, o bias) by family; attention_bias from the config where the family reads it
_ATTN_BIAS = {"gpt_oss": "config", "glm4_moe": "qkv", "minimax_m2": "none", "nemotron_h": "config",
              "granitemoehybrid": "config", "lfm2": "none", "llama4_text": "config", "qwen3_next": "none",
              "qwen3_5_text": "none", "qwen3_5_moe_text": "none", "gemma3n_text": "none", "gemma4_text": "config"}


def _q_k_norm(cfg: dict[str, Any], model_type: str, q_out: int, kv_out: int, hd: int) -> int:
    """Parameters of the q/k norms: per-head RMSNorms (Qwen3-Next/3.5, LFM2, Gemma 3n/4; GLM-4.5 when use_qk_norm),
    full-width ones (MiniMax-M2 qk_norm_type per_layer), or none (Llama 4's L2 norm has no weight)."""
    if model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "lfm2", "gemma3n_text", "gemma4_text"):
        return 2 * hd
    if model_type == "glm4_moe" and cfg.get("use_qk_norm"):
        return 2 * hd
    if model_type == "minimax_m2" and cfg.get("use_qk_norm", True):
        return q_out + kv_out
    return 0


def _attention_params(counts: _Count, cfg: dict[str, Any], model_type: str, kind: str, n_kv: int, hd: int,
                      kv_shared: bool = False) -> None:
    h, n_heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    if kind == "full" and cfg.get("global_head_dim"):  # Gemma 4 global layers
        n_kv, hd = int(_get(cfg, "num_global_key_value_heads", default=n_kv)), int(cfg["global_head_dim"])
    q_out, kv_out = n_heads * hd, n_kv * hd
    rule = _ATTN_BIAS.get(model_type, "config")
    qkv_bias = rule == "qkv" or (rule == "config" and bool(cfg.get("attention_bias")))
    o_bias = rule == "config" and bool(cfg.get("attention_bias"))
    # Qwen3-Next / Qwen3.5 gated attention: q_proj also yields the output gate
    gate = 2 if cfg.get("attn_output_gate", model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")) else 1
    counts.linear("attention", "q_proj", h, q_out * gate, bias=qkv_bias)
    norms = _q_k_norm(cfg, model_type, q_out, kv_out, hd)
    if kv_shared:  # Gemma 3n / 4 KV-sharing layers read an earlier layer's keys: no k/v projections, no k_norm
        norms //= 2
    else:
        counts.linear("attention", "k_proj", h, kv_out, bias=qkv_bias)
        if not (kind == "full" and cfg.get("attention_k_eq_v")):  # Gemma 4 global layers: values are the keys
            counts.linear("attention", "v_proj", h, kv_out, bias=qkv_bias)
    counts.linear("attention", "o_proj", q_out, h, bias=o_bias)
    counts.add("attention", norms)
    if model_type == "gpt_oss":  # modeling_gpt_oss.py: one learned attention-sink logit per head
        counts.add("attention", n_heads)


def _mixer_params(counts: _Count, cfg: dict[str, Any], kind: str) -> None:
    """Recurrent mixers (counted under 'other', not quantized by the weight formats kvcalc models... except their
    in/out projections, which are Linears)."""
    h = int(cfg["hidden_size"])
    if kind == "mamba":  # modeling_nemotron_h.py / modeling_granitemoehybrid.py Mamba2Mixer
        heads, head_dim, state, groups, kernel = mamba2_dims(cfg)
        inner = mamba2_inner(cfg)
        conv_dim = inner + 2 * groups * state
        proj_bias = bool(_get(cfg, "mamba_proj_bias", "use_bias", default=False))
        conv_bias = bool(_get(cfg, "use_conv_bias", "mamba_conv_bias", default=True))
        counts.linear("other", "mixer.in_proj", h, inner + conv_dim + heads, bias=proj_bias)
        counts.add("other", conv_dim * kernel + (conv_dim if conv_bias else 0))  # depthwise conv1d
        # dt_bias, A_log, D, and the gated RMSNorm (Falcon-H1 only with mamba_rms_norm)
        counts.add("other", 3 * heads + (inner if cfg.get("mamba_rms_norm", True) else 0))
        counts.linear("other", "mixer.out_proj", inner, h, bias=proj_bias)
    elif kind == "linear":  # modeling_qwen3_next.py Qwen3NextGatedDeltaNet (Qwen3.5 splits in_proj, same sizes)
        nk, nv, dk, dv, kernel = gdn_dims(cfg)
        conv_dim = 2 * nk * dk + nv * dv
        counts.linear("other", "linear_attn.in_proj_qkvz", h, conv_dim + nv * dv)
        counts.linear("other", "linear_attn.in_proj_ba", h, 2 * nv)
        counts.add("other", conv_dim * kernel + 2 * nv + dv)  # conv1d (no bias), dt_bias, A_log, norm
        counts.linear("other", "linear_attn.out_proj", nv * dv, h)
    elif kind == "conv":  # modeling_lfm2.py Lfm2ShortConv
        channels, length = short_conv_dims(cfg)
        bias = bool(cfg.get("conv_bias"))
        counts.linear("other", "conv.in_proj", h, 3 * channels, bias=bias)
        counts.add("other", channels * length + (channels if bias else 0))
        counts.linear("other", "conv.out_proj", channels, h, bias=bias)


def _moe_layers(cfg: dict[str, Any], model_type: str, kinds: list[str]) -> list[str]:
    """'moe', 'dense' or 'none' (Nemotron-H mixer-only layers) for each layer's MLP."""
    n = len(kinds)
    if model_type == "nemotron_h":
        return ["moe" if k == "moe" else "dense" if k == "mlp" else "none" for k in kinds]
    if model_type in ("gpt_oss", "minimax_m2"):
        return ["moe"] * n
    if model_type == "granitemoehybrid":
        return ["moe" if int(cfg.get("num_local_experts") or 0) else "dense"] * n
    if model_type in ("qwen3_next", "qwen3_5_moe_text"):
        step, only = int(cfg.get("decoder_sparse_step") or 1), set(cfg.get("mlp_only_layers") or [])
        return ["moe" if i not in only and (i + 1) % step == 0 else "dense" for i in range(n)]
    if model_type == "llama4_text":  # configuration_llama4.py: moe_layers = every interleave_moe_layer_step-th
        step = int(cfg.get("interleave_moe_layer_step") or 1)
        moe = cfg.get("moe_layers")
        moe = set(moe) if moe is not None else set(range(step - 1, n, step))
        return ["moe" if i in moe else "dense" for i in range(n)]
    if model_type == "glm4_moe":
        first = int(cfg.get("first_k_dense_replace") or 0)
        return ["dense" if i < first else "moe" for i in range(n)]
    if model_type == "gemma4_text" and cfg.get("enable_moe_block"):
        return ["moe"] * n
    return ["dense"] * n


def _family_mlp(counts: _Count, cfg: dict[str, Any], model_type: str, kind: str, layer: int) -> None:
    h = int(cfg["hidden_size"])
    if kind == "none":
        return
    if model_type == "nemotron_h":  # relu2 MLPs: up/down only (NemotronHMLP), MoE of such experts
        if kind == "dense":
            counts.active_mlp += counts.linear("mlp", "up_proj", h, int(cfg["intermediate_size"]),
                                               bias=bool(cfg.get("mlp_bias")))
            counts.active_mlp += counts.linear("mlp", "down_proj", int(cfg["intermediate_size"]), h,
                                               bias=bool(cfg.get("mlp_bias")))
            return
        n_exp, k = int(cfg["n_routed_experts"]), int(cfg["num_experts_per_tok"])
        inter = int(cfg["moe_intermediate_size"])
        shared = int(cfg.get("moe_shared_expert_intermediate_size") or 0) * int(cfg.get("n_shared_experts") or 1)
        router = counts.add("mlp", n_exp * h + n_exp)  # gate weight + e_score_correction_bias (fp32)
        counts.fp32 += router
        s = counts.linear("mlp", "shared_experts.up_proj", h, shared) + counts.linear(
            "mlp", "shared_experts.down_proj", shared, h) if shared else 0
        # Nemotron 3 Super / Ultra: latent MoE (NemotronHMoE fc1_latent_proj / fc2_latent_proj): the routed experts
        # run in moe_latent_size, between a down- and an up-projection shared by all experts of the layer
        latent = int(cfg.get("moe_latent_size") or 0)
        width = latent or h
        proj = (counts.linear("mlp", "fc1_latent_proj", h, latent, bias=bool(cfg.get("mlp_bias")))
                + counts.linear("mlp", "fc2_latent_proj", latent, h, bias=bool(cfg.get("mlp_bias")))) if latent else 0
        counts.linear("mlp", "experts.up_proj", width, inter, n_exp)
        counts.linear("mlp", "experts.down_proj", inter, width, n_exp)
        counts.active_mlp += router + s + proj + k * 2 * width * inter
        return
    if kind == "dense":
        if model_type == "lfm2":
            inter = _lfm2_ff(cfg)
        elif model_type == "llama4_text":
            inter = int(cfg["intermediate_size_mlp"])
        elif model_type == "gemma3n_text" and isinstance(cfg.get("intermediate_size"), list):
            inter = int(cfg["intermediate_size"][layer])
        elif model_type == "granitemoehybrid":
            inter = int(cfg["shared_intermediate_size"])
        else:
            inter = int(cfg["intermediate_size"])
        counts.active_mlp += _gated_mlp(counts, h, inter)
        return
    if model_type == "gpt_oss":  # modeling_gpt_oss.py: biased router and experts, gate_up fused
        n_exp, k, inter = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["intermediate_size"])
        router = counts.linear("mlp", "router", h, n_exp, bias=True)
        counts.linear("mlp", "experts.gate_up_proj", h, 2 * inter, n_exp, bias=True)
        counts.linear("mlp", "experts.down_proj", inter, h, n_exp, bias=True)
        counts.active_mlp += router + k * (3 * h * inter + 2 * inter + h)
        return
    if model_type == "granitemoehybrid":  # block_sparse_moe (fused input_linear) + shared_mlp
        n_exp, k, inter = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["intermediate_size"])
        _moe_mlp(counts, h, inter, n_exp, k, shared_inter=int(cfg.get("shared_intermediate_size") or 0))
        return
    if model_type in ("qwen3_next", "qwen3_5_moe_text"):
        n_exp, k, inter = int(cfg["num_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["moe_intermediate_size"])
        _moe_mlp(counts, h, inter, n_exp, k, shared_inter=int(cfg.get("shared_expert_intermediate_size") or 0))
        counts.active_mlp += counts.linear("mlp", "shared_expert_gate", h, 1)
        return
    if model_type == "llama4_text":  # Llama4TextMoe: router, experts of intermediate_size, one shared expert
        n_exp, k, inter = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["intermediate_size"])
        _moe_mlp(counts, h, inter, n_exp, k, shared_inter=inter)
        return
    if model_type == "glm4_moe":  # Glm4MoeMoE: DeepSeek-style router (fp32 + correction bias), shared experts
        n_exp, k = int(cfg["n_routed_experts"]), int(cfg["num_experts_per_tok"])
        inter = int(cfg["moe_intermediate_size"])
        _moe_mlp(counts, h, inter, n_exp, k, router="fp32", router_bias=True,
                 shared_inter=inter * int(cfg.get("n_shared_experts") or 0))
        return
    if model_type == "minimax_m2":  # block_sparse_moe: gate + e_score_correction_bias (use_routing_bias)
        n_exp, k, inter = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["intermediate_size"])
        _moe_mlp(counts, h, inter, n_exp, k, router="fp32", router_bias=bool(cfg.get("use_routing_bias", True)),
                 shared_inter=int(cfg.get("shared_intermediate_size") or 0))
        return
    if model_type == "gemma4_text":  # dense MLP beside the MoE block (enable_moe_block)
        counts.active_mlp += _gated_mlp(counts, h, int(cfg["intermediate_size"]))
        n_exp, k, inter = int(cfg["num_experts"]), int(cfg["top_k_experts"]), int(cfg["moe_intermediate_size"])
        _moe_mlp(counts, h, inter, n_exp, k)
        return
    raise UnsupportedModelError(f"{model_type}: no MoE reader; kvcalc refuses rather than guess")


def _gemma_layer_extras(counts: _Count, cfg: dict[str, Any], model_type: str, mlp: str) -> None:
    """Gemma 3n / Gemma 4 per-layer parts beyond attention + MLP + two norms (modeling_gemma3n.py,
    modeling_gemma4.py): pre/post feed-forward norms; Gemma 4's MoE block norms and router scales; Gemma 3n's AltUp
    (A = altup_num_inputs streams), LAuReL (rank r) and per-layer-input gate/projection (width p)."""
    if model_type not in ("gemma3n_text", "gemma4_text"):
        return
    h = int(cfg["hidden_size"])
    counts.add("norms", 2 * h)  # pre_feedforward_layernorm, post_feedforward_layernorm
    if model_type == "gemma4_text":
        if mlp == "moe":  # post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2; router.scale, per_expert_scale
            counts.add("norms", 3 * h)
            counts.add("mlp", h + int(cfg["num_experts"]))
        p = int(cfg.get("hidden_size_per_layer_input") or 0)
        if p:
            counts.linear("other", "per_layer_input_gate", h, p)
            counts.linear("other", "per_layer_projection", p, h)
            counts.add("norms", h)
        return
    a, r, p = int(cfg.get("altup_num_inputs") or 4), int(cfg.get("laurel_rank") or 64), int(
        cfg["hidden_size_per_layer_input"])
    counts.add("other", h + a * a + a * a * a + h * a + h)  # altup: scale, correction/prediction coefs, router, norm
    counts.linear("other", "laurel.linear_left", h, r)
    counts.linear("other", "laurel.linear_right", r, h)
    counts.add("norms", h)  # post_laurel_norm
    counts.linear("other", "per_layer_input_gate", h, p)
    counts.linear("other", "per_layer_projection", p, h)
    counts.add("norms", h)  # post_per_layer_input_norm


def _gemma_model_extras(counts: _Count, cfg: dict[str, Any], model_type: str, n_layers: int) -> None:
    """Model-level parts: per-layer token embeddings (vocab_size_per_layer_input x layers x p) and their projection
    (Gemma 3n, and Gemma 4 when hidden_size_per_layer_input > 0); Gemma 3n's AltUp in/out projections."""
    if model_type not in ("gemma3n_text", "gemma4_text"):
        return
    h = int(cfg["hidden_size"])
    p = int(cfg.get("hidden_size_per_layer_input") or 0)
    if p:
        counts.add("other", int(cfg["vocab_size_per_layer_input"]) * n_layers * p)  # embed_tokens_per_layer
        counts.linear("other", "per_layer_model_projection", h, n_layers * p)
        counts.add("norms", p)  # per_layer_projection_norm
    if model_type == "gemma3n_text":
        a = int(cfg.get("altup_num_inputs") or 4)
        counts.linear("other", "altup_projections", h, h, count=2 * (a - 1))  # in and unembed projections


def _lfm2_ff(cfg: dict[str, Any]) -> int:
    """configuration_lfm2.py / modeling_lfm2.py Lfm2MLP: block_ff_dim, 2/3 of it when auto-adjusted, times the
    multiplier, rounded up to block_multiple_of (later configs give intermediate_size directly)."""
    if cfg.get("block_ff_dim") is None:
        return int(cfg["intermediate_size"])
    ff = int(cfg["block_ff_dim"])
    if cfg.get("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        if cfg.get("block_ffn_dim_multiplier") is not None:
            ff = int(float(cfg["block_ffn_dim_multiplier"]) * ff)
        multiple = int(cfg.get("block_multiple_of") or 256)
        ff = multiple * ((ff + multiple - 1) // multiple)
    return ff


def _layered(cfg: dict[str, Any], name: str, model_type: str, source: str) -> ModelSpec:
    h, n_layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    n_kv = int(_get(cfg, "num_key_value_heads", default=cfg["num_attention_heads"]))
    hd = int(_get(cfg, "head_dim", "attention_head_dim", default=h // int(cfg["num_attention_heads"])))
    kinds = mixer_kinds(cfg, n_layers, lambda: _attention_kinds(cfg, model_type, n_layers))
    mlps = _moe_layers(cfg, model_type, kinds)
    counts = _Count()
    first_shared = n_layers - int(cfg.get("num_kv_shared_layers") or 0)
    for i, (kind, mlp) in enumerate(zip(kinds, mlps)):
        if kind in ("full", "sliding", "chunked", "parallel"):
            _attention_params(counts, cfg, model_type, "full" if kind == "parallel" else kind, n_kv, hd,
                              kv_shared=i >= first_shared)
        if kind not in ("full", "sliding", "chunked"):
            _mixer_params(counts, cfg, "mamba" if kind == "parallel" else kind)
        _family_mlp(counts, cfg, model_type, mlp, i)
        # one norm before the mixer, one before the MLP (Nemotron-H: one per block, every block is one of them)
        counts.add("norms", (1 if model_type == "nemotron_h" else 2) * h)
        _gemma_layer_extras(counts, cfg, model_type, mlp)
    counts.add("norms", h)  # final norm
    _gemma_model_extras(counts, cfg, model_type, n_layers)
    layers = layer_caches(cfg, kinds, n_kv, hd)
    n_moe = mlps.count("moe")
    moe = None
    if n_moe:
        n_exp = int(_get(cfg, "num_local_experts", "num_experts", "n_routed_experts"))
        k = int(_get(cfg, "num_experts_per_tok", "top_k_experts", "experts_per_token"))
        exp_inter = int(_get(cfg, "moe_intermediate_size", "intermediate_size"))
        shared = int(_get(cfg, "n_shared_experts", default=1 if model_type in ("llama4_text", "qwen3_next",
                                                                                "qwen3_5_moe_text") else 0))
        moe = MoeInfo(num_experts=n_exp, experts_per_token=k, shared_experts=shared,
                      expert_intermediate_size=exp_inter, moe_layers=n_moe)
    inter = int(cfg["intermediate_size"][0]) if isinstance(cfg.get("intermediate_size"), list) else int(
        _get(cfg, "intermediate_size", default=0) or 0)
    if model_type == "lfm2":
        inter = _lfm2_ff(cfg)
    return _spec(cfg, name, model_type, source, counts, layers, head_dim=hd, n_kv=n_kv, intermediate=inter, moe=moe,
                 rotary_dim=_rotary_dim(cfg, hd) if cfg.get("rotary_dim") is None else int(cfg["rotary_dim"]))


# ---------------------------------------------------------------------------------------------------------------------
# encoders of multimodal wrappers (encoders.py)


def _encoders(spec: ModelSpec, cfg: dict[str, Any], outer_type: str) -> ModelSpec:
    """A wrapper's encoders: counted (ModelSpec.encoders) where encoders.py knows the family, named in `uncounted`
    where it does not (never guessed)."""
    notes: list[str] = []
    encoder = vision_encoder(cfg, outer_type, spec.hidden_size)
    vc = cfg.get("vision_config")
    extra: list[Encoder] = []
    if outer_type == "gemma3n" and vc:  # its embed_vision is counted; the timm MobileNet-v5 tower is not
        embedder = gemma3n_vision_embedder(cfg, spec.hidden_size)
        extra += [embedder] if embedder else []
        notes.append(f"vision tower ({outer_type}.vision_config, timm MobileNet-v5: not counted; its embed_vision is)")
    elif encoder is None and vc:
        notes.append(f"vision encoder ({outer_type}.vision_config, not counted)")
    elif encoder is None and cfg.get("vision_config") is None and outer_type in TEXT_ONLY_WRAPPERS:
        # a trimmed copy without vision_config: the checkpoint still holds a tower
        notes.append(f"vision encoder ({outer_type}: no vision_config in this config.json, not counted)")
    audio = audio_encoder(cfg, outer_type, spec.hidden_size)
    if audio is not None:
        extra.append(audio)
    elif cfg.get("audio_config"):
        notes.append(f"audio encoder ({outer_type}.audio_config, not counted)")
    encoders = ((encoder,) if encoder is not None else ()) + tuple(extra)
    return replace(spec, encoders=encoders, vision_params=sum(e.params for e in encoders), uncounted=tuple(notes))


_BUILDERS = {
    **{t: _dense for t in DENSE_LLAMA_LIKE},
    **{t: _moe for t in MOE},
    **{t: _deepseek for t in MLA},
    "jamba": _jamba,
    "deepseek_v4": _deepseek_v4,
    "minimax_m3": _minimax_m3,
    **{t: _layered for t in LAYERED},
}


def local_config_at(text: str) -> dict | None:
    """The config.json at a local path (the file, or a folder holding one), read as data; None when the text names
    no local file (a hub id, a NUL byte, a name too long, an unknown ~user)."""
    try:
        path = Path(text).expanduser()
        found = (path.is_dir() and (path / "config.json").is_file()) or path.is_file()
    except (OSError, ValueError, RuntimeError):
        return None
    return load_config_file(path) if found else None


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A config.json (or a folder holding one), read as data: at most 8 MiB of UTF-8 JSON, finite numbers, bounded
    nesting (input_files.py); anything else is a one-line UsageError."""
    p = Path(path)
    if is_dir(p):
        p = p / "config.json"
    return load_json(p, "model config", MAX_CONFIG_BYTES)
