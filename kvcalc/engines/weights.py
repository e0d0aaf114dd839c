"""The static ledger: bytes of the weights in memory, for a weight format, per rank."""

from __future__ import annotations

from ..formats import WeightFormat
from ..model import ModelSpec


def weight_bytes(spec: ModelSpec, fmt: WeightFormat, dtype_bytes: int = 2) -> int:
    """Quantizable Linear weights in `fmt`; embeddings, norms, biases, routers' leftovers and lm_head in the compute
    dtype (bitsandbytes and AWQ/GPTQ leave lm_head unquantized; a tied lm_head is the embedding itself).
    A checkpoint's own format (checkpoint.CheckpointWeights) carries its exact total: headers, index or closed form."""
    total = getattr(fmt, "total_bytes", None)
    if total:
        return total
    if not fmt.quantizes_linears:
        per = fmt.bits // 8
        return spec.params.total * per
    linear = sum(fmt.linear_bytes(g.in_features, g.out_features, dtype_bytes) * g.count for g in spec.linears)
    rest = spec.params.total - spec.linear_params
    return linear + rest * dtype_bytes


def weight_bytes_read_per_token(spec: ModelSpec, fmt: WeightFormat, batch: int = 1, dtype_bytes: int = 2) -> float:
    """Weight bytes one decode step reads. Dense: all of them but the embedding table (a gather of B rows).
    MoE: the shared part plus the experts the batch's tokens route to (expected distinct experts for B tokens)."""
    total = weight_bytes(spec, fmt, dtype_bytes)
    embed = spec.params.embedding * dtype_bytes if not spec.tie_word_embeddings else 0
    if spec.moe is None or spec.params.active_mlp is None:
        return float(total - embed)
    e, k = spec.moe.num_experts, spec.moe.experts_per_token
    expected_experts = e * (1 - (1 - k / e) ** batch)
    routed = spec.params.mlp - spec.params.active_mlp  # unread share when one token runs
    per_expert = routed / max(e - k, 1) if e > k else 0.0
    unread_experts = max(e - expected_experts, 0.0)
    ratio = total / max(spec.params.total, 1)  # bytes per parameter of the chosen format, on average
    return float(total - embed - unread_experts * per_expert * ratio)
