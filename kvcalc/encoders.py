"""Parameters of the vision encoders that multimodal checkpoints carry beside their text decoder.

Pure arithmetic over a wrapper's `vision_config`, each following the transformers module it counts (numbers checked
against transformers 5.24's own modules built on the meta device from the fixtures' configs, tests/test_model.py):
- Qwen3-VL / Qwen3.5 ViT (modeling_qwen3_vl.py Qwen3VLVisionModel, modeling_qwen3_5.py): a Conv3d patch embedding
  (in_channels x temporal_patch_size x patch_size^2 -> hidden, with bias), learned position embeddings, `depth`
  blocks of LayerNorm + fused qkv + proj + GELU MLP (all biased), a patch merger (LayerNorm of hidden, then
  hidden*m^2 -> hidden*m^2 -> out_hidden_size, m = spatial_merge_size) and one "deepstack" merger per
  deepstack_visual_indexes entry (its LayerNorm over hidden*m^2).
- Llama 4 vision model and projector (modeling_llama4.py), with Llama4VisionConfig's defaults for absent keys.
- Gemma 4 vision tower (modeling_gemma4.py): a patch input projection (3 p^2 -> hidden, no bias), a two-axis position
  table (2 x position_embedding_size x hidden), layers of q/k/v/o (no bias) with per-head q/k RMSNorms, a gated MLP
  and four RMSNorms, and the embed_vision projection into the text width.
"""

from __future__ import annotations

from typing import Any


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


def gemma4_vision_params(vc: dict[str, Any], text_hidden: int) -> int:
    d, inter, layers = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["num_hidden_layers"])
    patch, head_dim = int(vc.get("patch_size", 16)), int(vc["head_dim"])
    embed = 2 * int(vc["position_embedding_size"]) * d + 3 * patch * patch * d
    layer = 4 * d * d + 2 * head_dim + 3 * d * inter + 4 * d
    return embed + layers * layer + d * text_hidden  # + embed_vision.embedding_projection


# Llama4VisionConfig's defaults (configuration_llama4.py): what transformers and vLLM build for a key left out, or for
# a llama4 config.json without vision_config at all
LLAMA4_VISION_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 34, "intermediate_size": 5632, "image_size": 448,
                          "patch_size": 14, "num_channels": 3, "projector_input_dim": 4096,
                          "projector_output_dim": 4096, "vision_output_dim": 7680}


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


VISION_PARAMS = {
    "llama4": llama4_vision_params,
    "qwen3_5": lambda vc, text_hidden: qwen3_vl_vision_params(vc),
    "qwen3_5_moe": lambda vc, text_hidden: qwen3_vl_vision_params(vc),
    "qwen3_vl": lambda vc, text_hidden: qwen3_vl_vision_params(vc),
    "qwen3_vl_moe": lambda vc, text_hidden: qwen3_vl_vision_params(vc),
    "gemma4": gemma4_vision_params,
}
