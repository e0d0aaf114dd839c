"""The encoders multimodal checkpoints carry beside their text decoder: parameters in closed form, and the shapes
vLLM's profile run pushes through them.

Pure arithmetic over a wrapper's `vision_config`, each following the transformers module it counts (numbers checked
against transformers 5.24's own modules built on the meta device, tests/test_model.py and tests/test_encoders.py, and
by hand in tests/test_encoders.py):
- SigLIP (Gemma 3, modeling_siglip.py + modeling_gemma3.py Gemma3MultiModalProjector): a biased patch Conv2d,
  (image/patch)^2 learned positions, layers of biased q/k/v/out + biased fc1/fc2 + two LayerNorms, the post
  LayerNorm, the attention-pooling head when vision_use_head, and the projector (mm_input_projection_weight
  d x text hidden, mm_soft_emb_norm of d).
- Qwen3-VL / Qwen3.5 ViT (modeling_qwen3_vl.py Qwen3VLVisionModel, modeling_qwen3_5.py): a Conv3d patch embedding
  (in_channels x temporal_patch_size x patch_size^2 -> hidden, with bias), learned position embeddings, `depth`
  blocks of LayerNorm + fused qkv + proj + GELU MLP (all biased), a patch merger (LayerNorm of hidden, then
  hidden*m^2 -> hidden*m^2 -> out_hidden_size, m = spatial_merge_size) and one "deepstack" merger per
  deepstack_visual_indexes entry (its LayerNorm over hidden*m^2).
- Qwen2.5-VL ViT (modeling_qwen2_5_vl.py Qwen2_5_VisionTransformerPretrainedModel): an unbiased Conv3d patch
  embedding, no position table (2-D RoPE), `depth` blocks of RMSNorm + biased fused qkv + biased proj + a biased
  gated MLP (gate/up/down), and the merger (RMSNorm ln_q of hidden, hidden*m^2 -> hidden*m^2 -> out_hidden_size,
  biased).
- Pixtral (Mistral Small 3.1/3.2, modeling_pixtral.py PixtralVisionModel + modeling_mistral3.py
  Mistral3MultiModalProjector): an unbiased patch Conv2d, ln_pre RMSNorm, layers of unbiased q/k/v/o + an unbiased
  gated MLP + two RMSNorms (2-D RoPE, no table), and the projector: RMSNorm, the patch merger (hidden*m^2 -> hidden),
  linear_1 hidden -> text hidden and linear_2 text hidden -> text hidden (biased when multimodal_projector_bias).
- Llama 4 vision model and projector (modeling_llama4.py), with Llama4VisionConfig's defaults for absent keys.
- Gemma 4 vision tower (modeling_gemma4.py): a patch input projection (3 p^2 -> hidden, no bias), a two-axis position
  table (2 x position_embedding_size x hidden), layers of q/k/v/o (no bias) with per-head q/k RMSNorms, a gated MLP
  and four RMSNorms, and the embed_vision projection into the text width.

- MoonViT (Kimi-K2.5): from vLLM 0.26.0's kimi_k25_vit.py (transformers has no class for it).
- Gemma 3n's USM audio tower and its multimodal embedders (modeling_gemma3n.py).

Encoders kvcalc cannot count (Gemma 3n's timm MobileNet-v5 vision tower, any other audio_config) are named, never
guessed: model.py lists them in ModelSpec.uncounted and every plan says so.

Per item (the largest image vLLM's dummy data builds, `patches` through the encoder's layers, `embeds` handed to the
decoder): what config.json fixes (Gemma 3: (image_size/patch)^2 patches, mm_tokens_per_image embeddings; Pixtral:
(image_size/patch)^2 patches merged m x m), or the processor's default largest image where config.json does not say
(Qwen2.5-VL / Qwen3-VL: max_pixels of the image processor; Llama 4: 16 tiles + a global one). Gemma 4's variable
resolution is not modelled (patches 0: no encoder activation is charged, and the plan says so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable


@dataclass(frozen=True)
class Encoder:
    """One encoder of a multimodal checkpoint: its parameters and the shapes of one item through it."""

    family: str  # siglip, qwen2_5_vl, qwen3_vl, pixtral, llama4, gemma4
    modality: str  # image (audio encoders are not counted yet)
    params: int  # tower + projector into the text width
    width: int  # hidden size of the encoder's layers
    intermediate: int  # MLP width of one layer
    gated: bool  # gate/up/down MLP (three matrices) rather than fc1/fc2
    layers: int
    patches_per_item: int  # tokens the layers run over for the largest item (0: not modelled)
    embeds_per_item: int  # embeddings one item hands the decoder (the encoder cache's unit)
    sizes_from: str  # where the per-item sizes come from (config.json, or the processor's default)
    prefixes: tuple[str, ...]  # module names of the tower and projector in the checkpoint (headers, ignore lists)
    wrapper: str = ""  # the config's model_type (gemma3, qwen3_5, ...): which transformers class loads it
    sample_linear: str = ""  # one Linear of the tower by its checkpoint name, to ask a quantization_config about

    @property
    def label(self) -> str:
        return f"{self.family} {self.modality} encoder"


def _i(vc: dict[str, Any], key: str, default: int | None = None) -> int:
    value = vc.get(key, default)
    if value is None:
        raise KeyError(f"vision_config.{key}")
    return int(value)


# ---------------------------------------------------------------------------------------------------------------------
# SigLIP (Gemma 3)

SIGLIP_PREFIXES = ("vision_tower", "multi_modal_projector", "model.vision_tower", "model.multi_modal_projector")


def siglip_params(vc: dict[str, Any], text_hidden: int) -> int:
    d, inter, n_layers = _i(vc, "hidden_size", 768), _i(vc, "intermediate_size", 3072), _i(vc, "num_hidden_layers", 12)
    patch, image, channels = _i(vc, "patch_size", 16), _i(vc, "image_size", 224), _i(vc, "num_channels", 3)
    embeddings = channels * patch * patch * d + d + (image // patch) ** 2 * d  # patch conv (+bias), positions
    layer = 4 * (d * d + d) + (d * inter + inter) + (inter * d + d) + 2 * 2 * d  # attn, fc1, fc2, 2 LayerNorms
    total = embeddings + n_layers * layer + 2 * d  # post_layernorm
    if vc.get("vision_use_head", True):  # SiglipMultiheadAttentionPoolingHead
        total += d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * inter + inter) + (inter * d + d)
    return total + d * text_hidden + d  # mm_input_projection_weight, mm_soft_emb_norm


def _siglip(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> Encoder:
    patch, image = _i(vc, "patch_size", 16), _i(vc, "image_size", 224)
    return Encoder("siglip", "image", siglip_params(vc, text_hidden), _i(vc, "hidden_size", 768),
                   _i(vc, "intermediate_size", 3072), False, _i(vc, "num_hidden_layers", 12), (image // patch) ** 2,
                   int(cfg.get("mm_tokens_per_image") or 256),
                   "config.json: (image_size / patch_size)^2 patches, mm_tokens_per_image embeddings (pan-and-scan "
                   "off, vLLM's default)", SIGLIP_PREFIXES,
                   sample_linear="vision_tower.vision_model.encoder.layers.0.self_attn.q_proj")


# ---------------------------------------------------------------------------------------------------------------------
# Qwen2.5-VL, Qwen3-VL / Qwen3.5

QWEN_PREFIXES = ("visual", "model.visual")
# The image processors' largest image (preprocessor_config.json, not config.json): Qwen2.5-VL max_pixels 12845056
# (Qwen2VLImageProcessor), Qwen3-VL size.longest_edge 16777216; vLLM's dummy image has the most features the
# processor allows (qwen2_vl.py get_image_size_with_most_features).
QWEN25_MAX_PIXELS = 12_845_056
QWEN3_MAX_PIXELS = 16_777_216


def qwen3_vl_vision_params(vc: dict[str, Any]) -> int:
    d, inter, depth = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["depth"])
    patch, temporal = int(vc.get("patch_size", 16)), int(vc.get("temporal_patch_size", 2))
    channels, merge = int(vc.get("in_channels", 3)), int(vc.get("spatial_merge_size", 2))
    out = int(vc["out_hidden_size"])
    embed = channels * temporal * patch * patch * d + d + int(vc.get("num_position_embeddings", 0)) * d
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * inter + inter) + (inter * d + d)
    wide = d * merge * merge

    def merger(norm_width: int) -> int:
        return 2 * norm_width + (wide * wide + wide) + (wide * out + out)

    deepstack = len(vc.get("deepstack_visual_indexes") or [])
    return embed + depth * block + merger(d) + deepstack * merger(wide)


def qwen2_5_vl_vision_params(vc: dict[str, Any]) -> int:
    d, inter, depth = _i(vc, "hidden_size", 1280), _i(vc, "intermediate_size", 3420), _i(vc, "depth", 32)
    patch, temporal = _i(vc, "patch_size", 14), _i(vc, "temporal_patch_size", 2)
    channels, merge = _i(vc, "in_channels", 3), _i(vc, "spatial_merge_size", 2)
    out = _i(vc, "out_hidden_size", 3584)
    embed = channels * temporal * patch * patch * d  # Conv3d, bias=False
    block = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * (d * inter + inter) + (inter * d + d)
    wide = d * merge * merge
    merger = d + (wide * wide + wide) + (wide * out + out)  # ln_q RMSNorm + mlp
    return embed + depth * block + merger


def _qwen(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int, family: str) -> Encoder:
    merge = _i(vc, "spatial_merge_size", 2)
    if family == "qwen2_5_vl":
        params, patch = qwen2_5_vl_vision_params(vc), _i(vc, "patch_size", 14)
        max_pixels, gated = QWEN25_MAX_PIXELS, True
    else:
        params, patch = qwen3_vl_vision_params(vc), _i(vc, "patch_size", 16)
        max_pixels, gated = QWEN3_MAX_PIXELS, False
    patches = max_pixels // (patch * patch)
    return Encoder(family, "image", params, _i(vc, "hidden_size"), _i(vc, "intermediate_size"), gated,
                   _i(vc, "depth"), patches, patches // (merge * merge),
                   f"the image processor's default largest image ({max_pixels:,} pixels, preprocessor_config.json; "
                   "--mm-processor-kwargs max_pixels lowers it)", QWEN_PREFIXES,
                   sample_linear="visual.blocks.0.attn.qkv")


# ---------------------------------------------------------------------------------------------------------------------
# Pixtral (Mistral Small 3.1 / 3.2: model_type mistral3)

PIXTRAL_PREFIXES = ("vision_tower", "multi_modal_projector", "model.vision_tower", "model.multi_modal_projector")


def pixtral_params(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> int:
    d, inter, n_layers = _i(vc, "hidden_size", 1024), _i(vc, "intermediate_size", 4096), _i(vc, "num_hidden_layers", 24)
    patch, channels = _i(vc, "patch_size", 16), _i(vc, "num_channels", 3)
    merge = int(cfg.get("spatial_merge_size") or 2)
    bias = bool(cfg.get("multimodal_projector_bias", False))
    tower = channels * patch * patch * d + d + n_layers * (4 * d * d + 3 * d * inter + 2 * d)
    projector = d + d * merge * merge * d + (d * text_hidden + (text_hidden if bias else 0)) \
        + (text_hidden * text_hidden + (text_hidden if bias else 0))
    return tower + projector


def _pixtral(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> Encoder:
    patch, image = _i(vc, "patch_size", 16), _i(vc, "image_size", 1024)
    merge = int(cfg.get("spatial_merge_size") or 2)
    patches = (image // patch) ** 2
    return Encoder("pixtral", "image", pixtral_params(cfg, vc, text_hidden), _i(vc, "hidden_size", 1024),
                   _i(vc, "intermediate_size", 4096), True, _i(vc, "num_hidden_layers", 24), patches,
                   patches // (merge * merge),
                   "config.json: (image_size / patch_size)^2 patches merged spatial_merge_size^2 to one embedding",
                   PIXTRAL_PREFIXES, sample_linear="vision_tower.transformer.layers.0.attention.q_proj")


# ---------------------------------------------------------------------------------------------------------------------
# Llama 4

# Llama4VisionConfig's defaults (configuration_llama4.py): what transformers and vLLM build for a key left out, or for
# a llama4 config.json without vision_config at all
LLAMA4_VISION_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 34, "intermediate_size": 5632, "image_size": 448,
                          "patch_size": 14, "num_channels": 3, "projector_input_dim": 4096,
                          "projector_output_dim": 4096, "vision_output_dim": 7680, "pixel_shuffle_ratio": 0.5}
LLAMA4_TILES = 16 + 1  # Llama4ImageProcessorFast max_patches 16, plus the global tile when an image is split
LLAMA4_PREFIXES = ("vision_model", "multi_modal_projector")


def llama4_vision_params(vc: dict[str, Any], text_hidden: int) -> int:
    """modeling_llama4.py Llama4VisionModel + Llama4MultiModalProjector: class embedding, (image/patch)^2 + 1
    positions, an unbiased patch Linear, pre/post LayerNorms, layers of biased q/k/v/o + biased fc1/fc2 + two
    LayerNorms, the pixel-shuffle adapter MLP (intermediate -> projector_input_dim -> projector_output_dim, no
    biases) and the projector vision_output_dim -> text hidden (no bias)."""
    c = {**LLAMA4_VISION_DEFAULTS, **{k: v for k, v in vc.items() if v is not None}}
    d, layers, inter = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["intermediate_size"])
    patch, channels = int(c["patch_size"]), int(c["num_channels"])
    positions = (int(c["image_size"]) // patch) ** 2 + 1
    embed = d + positions * d + channels * patch * patch * d + 2 * 2 * d
    layer = 4 * (d * d + d) + (d * inter + inter) + (inter * d + d) + 2 * 2 * d
    adapter = inter * int(c["projector_input_dim"]) + int(c["projector_output_dim"]) ** 2
    return embed + layers * layer + adapter + int(c["vision_output_dim"]) * text_hidden


def _llama4(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> Encoder:
    c = {**LLAMA4_VISION_DEFAULTS, **{k: v for k, v in vc.items() if v is not None}}
    grid = (int(c["image_size"]) // int(c["patch_size"])) ** 2
    per_tile = int(grid * float(c["pixel_shuffle_ratio"]) ** 2)
    return Encoder("llama4", "image", llama4_vision_params(vc, text_hidden), int(c["hidden_size"]),
                   int(c["intermediate_size"]), False, int(c["num_hidden_layers"]), LLAMA4_TILES * (grid + 1),
                   LLAMA4_TILES * per_tile,
                   f"{LLAMA4_TILES} tiles of (image_size / patch_size)^2 + 1 patches (the processor's max_patches 16 "
                   "and the global tile), pixel-shuffled by pixel_shuffle_ratio^2", LLAMA4_PREFIXES,
                   sample_linear="vision_model.model.layers.0.self_attn.q_proj")


# ---------------------------------------------------------------------------------------------------------------------
# Gemma 4

GEMMA4_PREFIXES = ("model.vision_tower", "model.embed_vision", "vision_tower", "embed_vision")


def gemma4_vision_params(vc: dict[str, Any], text_hidden: int) -> int:
    d, inter, layers = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["num_hidden_layers"])
    patch, head_dim = int(vc.get("patch_size", 16)), int(vc["head_dim"])
    embed = 2 * int(vc["position_embedding_size"]) * d + 3 * patch * patch * d
    layer = 4 * d * d + 2 * head_dim + 3 * d * inter + 4 * d
    return embed + layers * layer + d * text_hidden  # + embed_vision.embedding_projection


def _gemma4(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> Encoder:
    return Encoder("gemma4", "image", gemma4_vision_params(vc, text_hidden), int(vc["hidden_size"]),
                   int(vc["intermediate_size"]), True, int(vc["num_hidden_layers"]), 0, 0,
                   "variable resolution: the largest item is not modelled (no encoder profile charged)",
                   GEMMA4_PREFIXES, sample_linear="model.vision_tower.encoder.layers.0.self_attn.q_proj")


# ---------------------------------------------------------------------------------------------------------------------
# MoonViT (Kimi-K2.5): transformers has no class for it; the layout is vLLM 0.26.0's
# model_executor/models/kimi_k25_vit.py (MoonViT3dPretrainedModel) and kimi_k25.py (KimiK25MultiModalProjector)

MOONVIT_PREFIXES = ("vision_tower", "mm_projector")


def moonvit_params(vc: dict[str, Any], text_hidden: int) -> int:
    """A biased patch Conv2d (3 x p^2 -> d), a learned init_pos_emb_height x init_pos_emb_width x d position table,
    layers of two LayerNorms + biased fused wqkv (d -> 3d) + biased wo + a biased GELU MLP fc0/fc1, a final
    LayerNorm; the projector: a LayerNorm of d, then d*m^2 -> d*m^2 -> mm_hidden_size (the text width unless the
    config says otherwise), biased (m x m = merge_kernel_size)."""
    d, inter = int(vc["vt_hidden_size"]), int(vc["vt_intermediate_size"])
    layers, patch = int(vc["vt_num_hidden_layers"]), int(vc.get("patch_size", 14))
    mh, mw = (int(x) for x in (vc.get("merge_kernel_size") or [2, 2]))
    out = int(vc.get("text_hidden_size") or text_hidden)
    if vc.get("mm_hidden_size") and int(vc["mm_hidden_size"]) != d:
        out = int(vc["mm_hidden_size"])
    positions = int(vc.get("init_pos_emb_height", 64)) * int(vc.get("init_pos_emb_width", 64))
    tower = 3 * patch * patch * d + d + positions * d
    tower += layers * (4 * d + (d * inter + inter) + (inter * d + d) + (d * 3 * d + 3 * d) + (d * d + d)) + 2 * d
    wide = d * mh * mw
    return tower + 2 * d + (wide * wide + wide) + (wide * out + out)


def _moonvit(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> Encoder:
    return Encoder("moonvit", "image", moonvit_params(vc, text_hidden), int(vc["vt_hidden_size"]),
                   int(vc["vt_intermediate_size"]), False, int(vc["vt_num_hidden_layers"]), 0, 0,
                   "dynamic resolution: the largest item is not modelled (no encoder profile charged)",
                   MOONVIT_PREFIXES, sample_linear="vision_tower.encoder.blocks.0.wqkv")


# ---------------------------------------------------------------------------------------------------------------------
# Gemma 3n audio (USM conformer) and the multimodal embedders

GEMMA3N_AUDIO_PREFIXES = ("model.audio_tower", "model.embed_audio", "audio_tower", "embed_audio")
# Gemma3nAudioConfig's defaults (configuration_gemma3n.py, transformers 5.24), for keys a config leaves out
GEMMA3N_AUDIO_DEFAULTS = {"hidden_size": 1536, "vocab_size": 128, "input_feat_size": 128, "conf_num_attention_heads": 8,
                          "conf_num_hidden_layers": 12, "conf_conv_kernel_size": 5,
                          "sscp_conv_channel_size": [128, 32], "sscp_conv_kernel_size": [[3, 3], [3, 3]],
                          "sscp_conv_stride_size": [[2, 2], [2, 2]]}


def gemma3n_embedder_params(hidden: int, vocab: int, text_hidden: int) -> int:
    """modeling_gemma3n.py Gemma3nMultimodalEmbedder: an embedding table (vocab x hidden), hard and soft RMSNorms of
    hidden, the projection hidden -> text hidden (no bias) and a scale-less RMSNorm (no parameter)."""
    return vocab * hidden + 2 * hidden + hidden * text_hidden


def gemma3n_audio_params(ac: dict[str, Any], text_hidden: int) -> int:
    """modeling_gemma3n.py Gemma3nAudioEncoder + embed_audio: the sub-sampling projection (two unbiased Conv2d with
    a cumulative group norm each, frequency (F + 2 - k) // s + 1 per conv, then channels x frequency -> hidden) and
    conformer blocks of d = hidden: two macaron feed-forwards (d -> 4d -> d, two RMSNorms each), attention (relative
    position projection, q/k/v, post: 5 d^2, per-dim scale of d / heads, two RMSNorms), the light conv (d -> 2d GLU,
    depthwise conv of kernel K, d -> d, two RMSNorms) and a final RMSNorm: 24 d^2 + d/heads + dK + 9d."""
    c = {**GEMMA3N_AUDIO_DEFAULTS, **{k: v for k, v in ac.items() if v is not None}}
    d, heads, k = int(c["hidden_size"]), int(c["conf_num_attention_heads"]), int(c["conf_conv_kernel_size"])
    channels = [int(x) for x in c["sscp_conv_channel_size"]]
    freq, conv = int(c["input_feat_size"]), 0
    for i, ((kh, kw), (_, sw)) in enumerate(zip(c["sscp_conv_kernel_size"], c["sscp_conv_stride_size"])):
        cin = 1 if i == 0 else channels[i - 1]
        conv += cin * channels[i] * int(kh) * int(kw) + channels[i]
        freq = (freq + 2 - int(kw)) // int(sw) + 1
    subsample = conv + channels[-1] * freq * d
    block = 24 * d * d + d // heads + d * k + 9 * d
    return subsample + int(c["conf_num_hidden_layers"]) * block + gemma3n_embedder_params(d, int(c["vocab_size"]),
                                                                                          text_hidden)


def audio_encoder(cfg: dict[str, Any], outer_type: str, text_hidden: int) -> Encoder | None:
    """The audio encoder of a wrapper config, or None when kvcalc has no reader for it (only Gemma 3n's so far)."""
    ac = cfg.get("audio_config")
    if outer_type != "gemma3n" or not isinstance(ac, dict):
        return None
    c = {**GEMMA3N_AUDIO_DEFAULTS, **{k: v for k, v in ac.items() if v is not None}}
    d = int(c["hidden_size"])
    return Encoder("gemma3n_audio", "audio", gemma3n_audio_params(ac, text_hidden), d, 4 * d, False,
                   int(c["conf_num_hidden_layers"]), 0, int(cfg.get("audio_soft_tokens_per_image") or 188),
                   "audio: the profile's mel frames are not modelled (no encoder profile charged)",
                   GEMMA3N_AUDIO_PREFIXES, wrapper=outer_type,
                   sample_linear="model.audio_tower.conformer.0.attention.attn.q_proj")


def gemma3n_vision_embedder(cfg: dict[str, Any], text_hidden: int) -> Encoder | None:
    """Gemma 3n's embed_vision (the MobileNet-v5 tower itself, a timm model, is not counted: named instead)."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, dict):
        return None
    hidden, vocab = int(vc.get("hidden_size") or 2048), int(vc.get("vocab_size") or 128)
    return Encoder("gemma3n_vision_embedder", "image", gemma3n_embedder_params(hidden, vocab, text_hidden), hidden, 0,
                   False, 0, 0, int(cfg.get("vision_soft_tokens_per_image") or 256),
                   "the MobileNet-v5 tower is not modelled (no encoder profile charged)",
                   ("model.embed_vision", "embed_vision"), wrapper="gemma3n")


# wrapper model_type -> the reader of its vision encoder
VISION_ENCODERS: dict[str, Callable[[dict[str, Any], dict[str, Any], int], Encoder]] = {
    "gemma3": _siglip,
    "mistral3": _pixtral,
    "llama4": _llama4,
    "qwen2_5_vl": lambda cfg, vc, h: _qwen(cfg, vc, h, "qwen2_5_vl"),
    **{t: (lambda cfg, vc, h: _qwen(cfg, vc, h, "qwen3_vl")) for t in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5",
                                                                       "qwen3_5_moe")},
    "gemma4": _gemma4,
    "kimi_k25": _moonvit,
}


def vision_encoder(cfg: dict[str, Any], outer_type: str, text_hidden: int) -> Encoder | None:
    """The vision encoder of a wrapper config, or None when kvcalc has no reader for its family. Llama 4 configs
    without vision_config get Llama4VisionConfig's defaults (what transformers and vLLM build)."""
    reader = VISION_ENCODERS.get(outer_type)
    vc = cfg.get("vision_config")
    if reader is None or (vc is None and outer_type != "llama4"):
        return None
    return replace(reader(cfg, vc or {}, text_hidden), wrapper=outer_type)


def quantized_by(enc: Encoder, scheme: Any) -> bool:
    """Whether a checkpoint's quantization_config (quant_config.QuantScheme) would quantize the tower's Linears: its
    rules target the sample Linear and its ignore list (modules_to_not_convert, ignore, exclude_modules, ...) does
    not name it, matched as the method matches (quant_config.py)."""
    if scheme is None or not enc.sample_linear:
        return False
    paths = [enc.sample_linear, "model." + enc.sample_linear]
    return scheme.layout_for(paths, enc.sample_linear.rsplit(".", 1)[-1]) is not None


# ---------------------------------------------------------------------------------------------------------------------
# vLLM's profile run: the encoder on dummy items, and the encoder cache


DEFAULT_MM_LIMIT = 999  # config/multimodal.py get_limit_per_prompt: an unspecified modality allows 999 items


def profile_items(enc: Encoder, max_num_batched_tokens: int, max_num_seqs: int | None = None,
                  max_model_len: int | None = None, limit: int = DEFAULT_MM_LIMIT,
                  chunked_prefill: bool = True) -> int:
    """Items of the largest size vLLM's profile run encodes at once (vLLM 0.26.0 multimodal/encoder_budget.py
    MultiModalBudget._get_max_items): the encoder budget min(compute budget, cache size), each
    max(max_num_batched_tokens, T) by default (v1/core/encoder_cache_manager.py compute_mm_encoder_budget, T = the
    item's embeddings), over T; at most max_num_seqs x max(1, min(limit, max_model_len // T)) items the decoder can
    take (max_num_seqs capped at max_num_batched_tokens // T without chunked prefill); at least one. Without
    max_num_seqs: the budget alone (V0's profile caps its dummy sequences at max_num_batched_tokens // T, one item
    each at V0's default limit of 1: the same count)."""
    t = enc.embeds_per_item
    if not t:
        return 0
    items = max(max_num_batched_tokens, t) // t
    if max_num_seqs:
        reqs = max_num_seqs if chunked_prefill else min(max_num_seqs, max_num_batched_tokens // t)
        per_prompt = max(1, min(limit, (max_model_len or t) // t))
        items = min(items, reqs * per_prompt)
    return max(1, items)


def encoder_cache_bytes(enc: Encoder, items: int, text_hidden: int, dtype_bytes: int) -> int:
    """The dummy encoder outputs the profile holds while the decoder's dummy forward runs
    (gpu_model_runner.py profile_run: self.encoder_cache["tmp"]): items x embeddings x text hidden x dtype."""
    return items * enc.embeds_per_item * text_hidden * dtype_bytes


def encoder_forward_bytes(enc: Encoder, items: int, dtype_bytes: int, tp: int = 1) -> int:
    """Torch peak of one encoder forward over `items` largest items, layers run one at a time: the residual stream
    and its normed copy (2 x width) plus the larger of the attention phase (fused qkv 3 x width + attention output)
    and the MLP phase (fc1 and its activation, 2 x intermediate; gated: gate, up and their product, 3 x
    intermediate), per patch, in the activation dtype; TP shards the projections' outputs. Attention kernels are
    memory-efficient (no patches^2 score matrix: vLLM's MultiHeadAttention / flash varlen)."""
    if not items or not enc.patches_per_item:
        return 0
    per_patch = 2 * enc.width + max(4 * enc.width // tp, (3 if enc.gated else 2) * enc.intermediate // tp)
    return items * enc.patches_per_item * per_patch * dtype_bytes
