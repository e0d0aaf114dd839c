"""vLLM's speculative-decoding drafter: the weights it adds, the KV-cache layers it adds, and its share of the profile
run. Pure arithmetic on the target's ModelSpec (and, for EAGLE heads, the drafter's own config.json when given).

Sources, vLLM 0.26.0 (paths under vllm/):
- config/speculative.py:692-705: "mtp" drafts from the target's own checkpoint (model = the target's) with the
  target's quantization; hf_config_override (:331-615) turns the target config into the MTP one (DeepSeek V2/V3:
  deepseek_mtp, n_predict = num_nextn_predict_layers; Qwen3-Next: qwen3_next_mtp; Qwen3.5: mtp_num_hidden_layers).
  "eagle"/"eagle3" (:820-930) load the head named by speculative_config.model, in the target's dtype, quantized only
  by the head's own config (models/utils.py:895 get_draft_quant_config).
- MTP modules: models/deepseek_mtp.py:83-117 (per predictor layer: enorm, hnorm, eh_proj = nn.Linear(2h, h) (not
  TP-sharded, not quantized), shared_head (norm + head), and one DeepseekV2DecoderLayer numbered num_hidden_layers +
  i, so MoE when that index is past first_k_dense_replace), :156-178 (an own embed_tokens); glm4_moe_mtp.py:78-90 the
  same; qwen3_next_mtp.py:61-104 (embed_tokens, fc = ColumnParallelLinear(2h, h), num_nextn_predict_layers (default
  1) full-attention Qwen3NextDecoderLayers, norm, pre_fc_norm_hidden, pre_fc_norm_embedding; lm_head :195);
  qwen3_5_mtp.py:80-124 the same with mtp_num_hidden_layers.
- Sharing: v1/spec_decode/llm_base_proposer.py:1421-1508 and :1510-1580 (V1 runner), v1/worker/gpu/spec_decode/
  eagle/utils.py:12-110 (V2 runner): an MTP drafter always takes the target's embedding and lm_head (its own copies
  are deleted inside the load measurement, gpu_model_runner.py:5261-5335); an EAGLE head keeps its own only when its
  checkpoint carries them (has_own_embed_tokens / has_own_lm_head, set while loading by models/utils.py:1028
  process_eagle_weight; with load_format=dummy nothing is loaded, so both are shared).
- EAGLE heads: models/llama_eagle.py:30-131 (EAGLE-1: fc = ReplicatedLinear(2h, h), the first layer's
  input_layernorm removed, no lm_head); models/llama_eagle3.py:35-66 (EAGLE-3: layer 0's qkv_proj reads 2h,
  hidden_norm), :130-220 (fc = ReplicatedLinear(3 x target hidden, h), norm), :272-310 (lm_head over
  draft_vocab_size, draft_id_to_target_id: draft_vocab_size int64).
- KV: the drafter's attention layers register in the same forward context and are grouped with the target's
  (llm_base_proposer.py:1330-1350); Mamba layers keep num_speculative_tokens extra state blocks per request for any
  method (model_executor/layers/mamba/abstract.py:56, v1/kv_cache_interface.py:708-718).
- Profile run: V1 runner, gpu_model_runner.py:6090-6140 (after the target's dummy forward, drafter.dummy_run over
  the same max_num_batched_tokens, k forwards, llm_base_proposer.py:1621-1672) and :6244-6274 (the rejection
  sampler on random logits of 2 x min(max_num_seqs, mnbt) rows); 0.26 runs dense, non-hybrid targets with
  eagle/eagle3/mtp on the V2 runner (config/vllm.py:2154-2180), whose _dummy_run calls speculator.propose
  (v1/worker/gpu/model_runner.py:605-640) and whose sampler profile has no rejection pass. The tensors each phase
  holds were read off the H200 allocator traces (rejection_sampler_bytes, Drafter.held_hidden_states).
Checked against H200 starts of 0.26: docs/validation/README.md, "Speculative decoding".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from ..formats import weight_format
from ..hardware import GpuProfile
from ..layers import LayerCache, MambaState, flatten
from ..model import ModelSpec, spec_from_config
from ..units import ceil_div
from .vllm_profile import cublas_workspace_bytes, flashinfer_sampler_default
from .weights import weight_bytes

VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
EAGLE3_DRAFT_VOCAB = 32000  # the reduced draft vocabulary of the public EAGLE-3 heads (assumed without a config)
# MTP builders kvcalc knows by their family (the MTP layer is built as a one-layer model of the target's family)
_DEEPSEEK_MTP = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe",
                 "glm_moe_dsa")
_QWEN_MTP = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


@dataclass(frozen=True)
class Drafter:
    """What a model-based drafter adds on the rank that runs it (the last pipeline stage)."""

    method: str
    layer_spec: ModelSpec  # the drafter's decoder layers as a model of their own (embedding/lm_head not counted)
    num_layers: int  # decoder layers the drafter runs (MTP: num_nextn_predict_layers; EAGLE: the head's layers)
    kv_layers: tuple[LayerCache, ...]  # the attention layers it adds to the KV cache
    weight_bytes: int  # per rank, after sharing
    own_lm_head_rows: int  # rows of an lm_head of its own (EAGLE-3's reduced vocabulary); 0 when shared
    aux_hidden_states: int  # target hidden states the drafter reads besides the last (EAGLE-3: 3)
    described: str

    @property
    def held_hidden_states(self) -> int:
        """M x H tensors alive beside the drafter layer's own during its dummy forward, counted on the H200 traces
        (docs/validation/data/v3, vllm-gpu0_v3g.jsonl): MTP 4 (the target's output, the drafter's embedding, enorm
        and hnorm outputs: s-deepseek-v3-l5-mtp3-2k), EAGLE-3 the 3 auxiliary hidden states + 2 (the embedding and
        a norm output: s-llama-3.1-8b-eagle3-k3); EAGLE-1 taken as EAGLE-3 without the auxiliary states."""
        return 4 if self.method == "mtp" else self.aux_hidden_states + 2

    @property
    def hidden_size(self) -> int:
        return self.layer_spec.hidden_size


def _padded(rows: int, tp: int) -> int:
    """Rows of a VocabParallelEmbedding / ParallelLMHead on one rank (padded to 64, then split)."""
    return ceil_div(rows, VOCAB_PADDING) * VOCAB_PADDING // tp


def _per_param_bytes(target: ModelSpec, weights: Any, dtype_bytes: int) -> float | None:
    """A checkpoint's own format (exact total from its headers) has no per-Linear rule: its average bytes per
    parameter, used for the drafter's layers cut from the same checkpoint (MTP)."""
    total = getattr(weights, "total_bytes", None)
    if total:
        return total / max(target.params.total, 1)
    return None


def _body_bytes(one: ModelSpec, target: ModelSpec, weights: Any, dtype_bytes: int, tp: int) -> int:
    """One rank's bytes of `one`'s decoder layers (embedding and lm_head excluded, norms replicated), in the target's
    weight format; the same arithmetic as vllm.vllm_weight_bytes."""
    ends = one.params.embedding + one.params.lm_head
    ratio = _per_param_bytes(target, weights, dtype_bytes)
    if ratio is not None:
        body = int(round((one.params.total - ends) * ratio))
    else:
        body = weight_bytes(one, weights, dtype_bytes, encoders=False) - ends * dtype_bytes
    norms = one.params.norms * dtype_bytes
    return (body - norms) // tp + norms


def _one_layer(cfg: dict[str, Any], name: str, trusted: bool = True) -> ModelSpec:
    """A config built by kvcalc from a checked one is trusted; a drafter config.json from the user is checked."""
    return spec_from_config(cfg, name, trusted=trusted)


def mtp_layers(target: ModelSpec) -> int:
    """num_nextn_predict_layers (DeepSeek, GLM, Qwen3-Next) or Qwen3.5's mtp_num_hidden_layers; Qwen3-Next's
    predictor defaults to 1 (qwen3_next_mtp.py:58). 0: the checkpoint has no MTP module."""
    cfg = target.config
    n = cfg.get("num_nextn_predict_layers")
    if n is None:
        n = cfg.get("mtp_num_hidden_layers")
    if n is None and target.model_type == "qwen3_next":
        n = 1
    return int(n or 0)


def _mtp_layer_config(target: ModelSpec) -> dict[str, Any]:
    """The target's config cut to the one decoder layer an MTP predictor runs."""
    cfg = dict(target.config)
    mt = target.model_type
    n = int(cfg.get("num_hidden_layers") or target.num_layers)
    if mt in _DEEPSEEK_MTP:
        # DeepseekV2DecoderLayer at index num_hidden_layers: MoE when past first_k_dense_replace (and on the
        # moe_layer_freq grid); glm4_moe: past first_k_dense_replace
        first = int(cfg.get("first_k_dense_replace") or 0)
        freq = int(cfg.get("moe_layer_freq") or 1)
        moe = n >= first and (mt == "glm4_moe" or n % freq == 0)
        cfg.update(num_hidden_layers=1, first_k_dense_replace=0 if moe else 1)
    elif mt in _QWEN_MTP:
        # layer_type="full_attention", MoE by decoder_sparse_step / mlp_only_layers of index 0
        cfg.update(num_hidden_layers=1, layer_types=["full_attention"], full_attention_interval=1)
    else:
        # other families: one layer like the target's last (kvcalc builds it from the same config)
        types = cfg.get("layer_types")
        cfg.update(num_hidden_layers=1)
        if isinstance(types, list) and types:
            cfg["layer_types"] = [types[-1]]
    return cfg


def _mtp(target: ModelSpec, weights: Any, dtype_bytes: int, tp: int) -> Drafter:
    n = mtp_layers(target)
    if n < 1:
        raise UsageError(f"speculative method mtp: {target.name} has no multi-token-prediction module "
                         "(num_nextn_predict_layers / mtp_num_hidden_layers is 0 or absent); use eagle3 or ngram")
    one = _one_layer(_mtp_layer_config(target), f"{target.name} MTP layer")
    h = target.hidden_size
    layer = _body_bytes(one, target, weights, dtype_bytes, tp)
    if target.model_type in _QWEN_MTP:
        # n layers (the one-layer spec's final norm is the module's norm, counted once), fc 2h -> h sharded over TP,
        # pre_fc_norm_hidden + pre_fc_norm_embedding
        norm = h * dtype_bytes
        total = n * (layer - norm) + norm + 2 * h * h * dtype_bytes // tp + 2 * h * dtype_bytes
    else:
        # per predictor layer: the decoder layer, its shared_head.norm (the spec's final norm), enorm, hnorm and
        # eh_proj (nn.Linear: every rank holds it whole, in the model dtype)
        total = n * (layer + 2 * h * dtype_bytes + 2 * h * h * dtype_bytes)
    kv = tuple(flatten(one.layers)) * n
    return Drafter("mtp", one, n, kv, total, 0, 0,
                   f"{n} MTP layer(s) of the checkpoint ({'MoE' if one.moe and one.moe.moe_layers else 'dense'}), "
                   "embedding and lm_head shared with the target")


def _eagle_config(target: ModelSpec, method: str) -> dict[str, Any]:
    """A Llama-style one-layer head of the target's shape (what the public EAGLE / EAGLE-3 heads are) when the
    drafter's own config.json is not given."""
    dense_inter = int(target.config.get("intermediate_size") or target.intermediate_size)
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": target.hidden_size,
           "num_attention_heads": target.num_heads, "num_key_value_heads": target.num_kv_heads,
           "head_dim": target.head_dim, "intermediate_size": dense_inter, "num_hidden_layers": 1,
           "vocab_size": target.vocab_size, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False}
    if method == "eagle3":
        cfg["draft_vocab_size"] = EAGLE3_DRAFT_VOCAB
    return cfg


def _eagle(target: ModelSpec, method: str, draft_config: dict[str, Any] | None, dtype_bytes: int, tp: int,
           own_lm_head: bool | None) -> Drafter:
    given = draft_config is not None
    cfg = dict(draft_config) if given else _eagle_config(target, method)
    cfg.setdefault("vocab_size", target.vocab_size)
    one = _one_layer(cfg, f"{target.name} {method} head", trusted=not given)
    h = one.hidden_size
    n = one.num_layers
    # the head is loaded in the target's dtype, quantized only by its own config (none for the public heads)
    layers = _body_bytes(one, target, weight_format("bf16"), dtype_bytes, tp)
    own_rows = 0
    if method == "eagle3":
        q_out = one.num_heads * one.head_dim
        kv_out = one.num_kv_heads * one.head_dim
        target_h = int(cfg.get("target_hidden_size") or target.hidden_size)
        extra_qkv = (q_out + 2 * kv_out) * h // tp  # layer 0's qkv_proj reads [embeds, hidden]: 2h inputs
        fc = 3 * target_h * h  # ReplicatedLinear: whole on every rank
        draft_vocab = int(cfg.get("draft_vocab_size") or cfg["vocab_size"])
        if own_lm_head is None:  # a reduced-vocabulary head cannot be the target's: the checkpoint carries its own
            own_lm_head = draft_vocab != target.vocab_size
        own_rows = _padded(draft_vocab, tp) if own_lm_head else 0
        total = layers + (extra_qkv + fc + h + own_rows * h) * dtype_bytes + draft_vocab * 8  # + hidden_norm; d2t
        aux = 3
    else:
        # EAGLE-1: fc 2h -> h (replicated), the first layer's input_layernorm removed; no final norm
        total = layers + (2 * h * h - h - h) * dtype_bytes
        aux = 0
    if one.max_position_embeddings != target.max_position_embeddings:
        # its rotary cos/sin cache is keyed by max_position (rotary_embedding get_rope): a cache of its own
        total += one.max_position_embeddings * one.rotary_dim * dtype_bytes
    kv = tuple(flatten(one.layers))
    src = "its config.json" if given else "the target's shape (no drafter config given)"
    return Drafter(method, one, n, kv, total, own_rows, aux,
                   f"{method} head of {n} layer(s) from {src}; embedding shared"
                   + ("" if own_rows else ", lm_head shared") + (f", own lm_head of {own_rows:,} rows" if own_rows
                                                                 else ""))


def drafter(target: ModelSpec, method: str | None, *, weights: Any = None, dtype_bytes: int = 2, tp: int = 1,
            draft_config: dict[str, Any] | None = None, own_lm_head: bool | None = None,
            pp: int = 1) -> Drafter | None:
    """The model-based drafter of `method` for `target` on one rank of TP `tp`; None for n-gram (no model) or none.
    own_lm_head overrides the EAGLE-3 rule (None: own when its vocabulary is reduced; False: as vLLM runs a head
    loaded with load_format=dummy). With pipeline parallelism the drafter keeps an embedding of its own (the
    target's is on the first stage; llm_base_proposer.py:1428 and eagle/utils.py:64 share it only at PP 1)."""
    if method == "mtp":
        d = _mtp(target, weights if weights is not None else weight_format("bf16"), dtype_bytes, tp)
    elif method in ("eagle", "eagle3"):
        d = _eagle(target, method, draft_config, dtype_bytes, tp, own_lm_head)
    else:
        return None
    if pp > 1:
        d = replace(d, weight_bytes=d.weight_bytes + _padded(target.vocab_size, tp) * target.hidden_size * dtype_bytes,
                    described=d.described.replace("embedding shared", "own embedding (PP > 1)")
                    .replace("embedding and lm_head shared", "own embedding (PP > 1), lm_head shared"))
    return d


def mamba_speculative_blocks(target: ModelSpec, method: str | None, k: int) -> int:
    """MambaSpec.num_speculative_blocks: every Mamba / linear-attention layer keeps k extra state blocks per request
    under any speculative method (layers/mamba/abstract.py:56)."""
    if not method or not any(isinstance(layer, MambaState) for layer in flatten(target.layers)):
        return 0
    return k


def rejection_sampler_bytes(target: ModelSpec, seqs: int, mnbt: int, dtype_bytes: int = 2,
                            gpu: GpuProfile | None = None, flashinfer_sampler: bool | None = None,
                            fp64_gumbel: bool = False) -> int:
    """The V1 runner's dummy rejection pass (gpu_model_runner.py:6244-6274), tensor by tensor as the H200 trace of
    s-3b-ngram4-16k shows them live at its peak (inside rejection_sampler.py:sample_recovered_tokens), R =
    min(max_num_seqs, mnbt) rows of V = vocab logits:
    - the random logits, 2R x V in the model dtype (gpu_model_runner.py:6263), and the bonus rows R x V
      (rejection_sampler.py:135);
    - fp32 R x V: the bonus sampler's raw logits (sampler.py:93, kept in its output), the target logits
      (rejection_sampler.py:156) and their processed copy (:162), the probabilities (:474), the exponential noise and
      its reciprocal (:684, :696; fp64 with use_fp64_gumbel);
    - without FlashInfer, the Triton top-k/top-p buffer, min(SMs, next power of two of R) x V fp32
      (topk_topp_triton.py:914);
    - the forward's output M x H and the sampled rows' hidden states 2 x R x H, and torch's cuBLAS workspace.
    For Llama-3.2-3B at 16,384 tokens and 1,024 sequences: 4,154,544,128 B against vLLM's 4,160,932,864."""
    rows = min(seqs, mnbt)
    v, h, d = target.vocab_size, target.hidden_size, dtype_bytes
    q = 8 if fp64_gumbel else 4
    logits = rows * v * (3 * d + 4 * 4 + 2 * q)
    use_fi = flashinfer_sampler_default(gpu) if flashinfer_sampler is None else flashinfer_sampler
    triton = 0
    if not use_fi:
        sms = gpu.sm_count if gpu is not None and getattr(gpu, "sm_count", None) else 132
        triton = min(1 << max(rows - 1, 0).bit_length(), sms) * v * 4
    return logits + triton + mnbt * h * d + 2 * rows * h * d + cublas_workspace_bytes(gpu)


def draft_forward_bytes(d: Drafter, mnbt: int, dtype_bytes: int, forward) -> int:
    """Torch peak of the drafter's dummy forward over mnbt tokens: its decoder layer's own peak (the model the release
    uses for the target's layers, `forward(layer_spec)`) plus the M x H tensors held beside it
    (Drafter.held_hidden_states)."""
    return forward(d.layer_spec) + d.held_hidden_states * mnbt * d.hidden_size * dtype_bytes
