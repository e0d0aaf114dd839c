"""The static ledger: bytes of the weights in memory, for a weight format, per rank."""

from __future__ import annotations

from ..formats import WeightFormat
from ..model import ModelSpec


def weight_bytes(spec: ModelSpec, fmt: WeightFormat, dtype_bytes: int = 2, encoders: bool = True) -> int:
    """The text decoder's weights plus, with `encoders`, the multimodal encoders the checkpoint holds
    (encoder_weight_bytes). encoders=False: the decoder alone (what vLLM loads when every modality is limited to 0,
    and what a decode step reads)."""
    return text_weight_bytes(spec, fmt, dtype_bytes) + (encoder_weight_bytes(spec, fmt, dtype_bytes) if encoders else 0)


def vllm_text_weight_bytes(spec: ModelSpec, fmt: WeightFormat, dtype_bytes: int = 2) -> int:
    """The text decoder's weights as vLLM loads them: unquantized weights in the model dtype (model_loader:
    set_default_torch_dtype), so --dtype float32 doubles a bf16 checkpoint and auto halves an fp32 one. The one
    figure for vLLM's weight memory (engines/vllm.py) and the bytes its decode and prefill steps read
    (throughput.py)."""
    total = weight_bytes(spec, fmt, dtype_bytes, encoders=False)
    if not fmt.quantizes_linears and fmt.bits != 8 * dtype_bytes:
        total = total * 8 * dtype_bytes // fmt.bits
    return total


def encoder_weight_bytes(spec: ModelSpec, fmt: WeightFormat, dtype_bytes: int = 2) -> int:
    """The encoders' weights (encoders.py: tower + projector). A checkpoint's own exact bytes already hold them
    (safetensors headers: the tensors under the encoders' module names; the index's total_size: the closed form
    below), so they are split out of its total, never added twice. Otherwise every encoder parameter is charged in
    the compute dtype under a quantizing format (quantized checkpoints ship their encoders in 16-bit: AWQ/GPTQ
    modules_to_not_convert, compressed-tensors and ModelOpt ignore lists name the vision tower, and the formats'
    group layouts do not fit its widths), or at the format's own width for a plain dtype (fp32, bf16)."""
    inside = getattr(fmt, "encoder_bytes", None)
    if inside is not None:
        return inside
    if not spec.vision_params:
        return 0
    per = dtype_bytes if fmt.quantizes_linears else fmt.bits // 8
    return spec.vision_params * per


def text_weight_bytes(spec: ModelSpec, fmt: WeightFormat, dtype_bytes: int = 2) -> int:
    """Quantizable Linear weights in `fmt`; embeddings, norms, biases, routers' leftovers and lm_head in the compute
    dtype (bitsandbytes and AWQ/GPTQ leave lm_head unquantized; a tied lm_head is the embedding itself).
    A checkpoint's own format (checkpoint.CheckpointWeights) carries its exact total: headers, index or closed form,
    less the encoders inside it."""
    total = getattr(fmt, "total_bytes", None)
    if total:
        return total - (getattr(fmt, "encoder_bytes", None) or 0)
    if not fmt.quantizes_linears:
        per = fmt.bits // 8
        return spec.params.total * per
    linear = sum(fmt.linear_bytes(g.in_features, g.out_features, dtype_bytes) * g.count for g in spec.linears)
    rest = spec.params.total - spec.linear_params
    return linear + rest * dtype_bytes


def weight_bytes_read_per_token(spec: ModelSpec, fmt: WeightFormat, batch: int = 1, dtype_bytes: int = 2) -> float:
    """Weight bytes one decode step reads. Dense: all of them but the embedding table (a gather of B rows).
    MoE: the shared part plus the experts the batch's tokens route to (expected distinct experts for B tokens)."""
    total = weight_bytes(spec, fmt, dtype_bytes, encoders=False)  # the encoders run on images, not per decode step
    embed = spec.params.embedding * dtype_bytes if not spec.tie_word_embeddings else 0
    if spec.moe is None or spec.params.active_mlp is None:
        return float(total - embed)
    e, k = spec.moe.num_experts, spec.moe.experts_per_token
    if e <= 0:  # a config with num_experts 0 (the fuzz corpus has one): no routed experts, every weight is read
        return float(total - embed)
    expected_experts = e * (1 - (1 - k / e) ** batch)
    routed = spec.params.mlp - spec.params.active_mlp  # unread share when one token runs
    per_expert = routed / max(e - k, 1) if e > k else 0.0
    unread_experts = max(e - expected_experts, 0.0)
    ratio = total / max(spec.params.total, 1)  # bytes per parameter of the chosen format, on average
    return float(total - embed - unread_experts * per_expert * ratio)
