"""SGLang's speculative-decoding drafter: its parameters, the weights it loads and the KV pool it keeps, per release
(SglangRules.spec_*). The drafter's shapes are vLLM's (engines/vllm_draft.py: the same MTP layers and EAGLE heads);
what differs is when SGLang allocates them and what it shares.

Sources, sglang 0.5.14 unless said (paths under python/sglang/srt/):
- Algorithms: server_args.py:1448 (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH); arg_groups/speculative_hook.py:
  42-49 NEXTN runs as EAGLE; :261-268 STANDALONE refuses DP attention, :466-470 NGRAM too.
- max_running_requests: 48 unless --max-running-requests (speculative_hook.py:270-275 EAGLE family, :411-416 NGRAM;
  0.5.4 server_args.py:1285-1294 and :1374-1375).
- The draft model: on the DeepSeek / GLM / Bailing / Mistral-Large-3 architectures of speculative_hook.py:290-305 the
  draft is the checkpoint's own MTP layers (speculative_draft_model_path = model_path); else the path given.
  (steps, topk, draft tokens) when not given: _auto_choose_speculative_params (:512-546): STANDALONE (3, 1, 4),
  LlamaForCausalLM (5, 4, 8), the MTP architectures (3, 1, 4), others the release's (SglangRules.spec_default_params);
  topk 1 forces draft tokens = steps + 1 (:382-390); NGRAM topk = --speculative-ngram-max-bfs-breadth (10,
  server_args.py:1560-1563), 12 draft tokens, steps = draft // topk (:418-428).
- Weights: the draft worker is a TpModelWorker of its own (speculative/eagle_worker_v2.py:166-188) that allocates its
  whole model, its own embed_tokens and lm_head included (models/llama_eagle3.py:137-141, :274-287;
  llama_eagle.py:66, :130-136; deepseek_nextn.py:96-100, :310-314). init_lm_head swaps them for the target's
  (eagle_worker_v2.py:318-345, llama.py:778-807: del, then torch.cuda.empty_cache) only in alloc_memory_pool
  (:216-229), after the target's pool was sized (managers/scheduler.py:826-846, run from :859-868); STANDALONE keeps
  its own
  (standalone_worker_v2.py:117-151).
- The pool: the draft runner shares the target's req_to_token pool and token indices and allocates a KV pool of the
  same token count over its own layers (model_runner_kv_cache_mixin.py:1020-1049, :1078-1088). From 0.5.14 the target
  sizes its cell x (1 + draft layers / target layers) for it (pool_configurator.py:129-145; draft layers =
  num_nextn_predict_layers, else max(num_hidden_layers, num_attention_layers) of the draft config,
  model_runner.py:435-456), hybrid sliding-window pools excepted (HybridSWAPoolConfigurator, :236-336).
- The req-to-token rows: context_len + 4 + draft tokens (mem_cache/common.py:251-267; 0.5.4 model_runner.py:1727-1729).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import UnsupportedModelError, UsageError, shown
from ..model import ModelSpec

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SPEC_MAX_RUNNING_REQUESTS = 48  # speculative_hook.py:270-275
NGRAM_BFS_BREADTH = 10  # server_args.py:1560-1563 speculative_ngram_max_bfs_breadth
NGRAM_DRAFT_TOKENS = 12  # speculative_hook.py:420-421
POOL_INFLATE_BUFFER = 100  # draft_runner_cache_size's "+ 100" (0.5.4 model_runner.py:1683)
# speculative_hook.py:290-305 (0.5.14): EAGLE-family drafts default to the checkpoint itself (its MTP layers)
MTP_ARCHS = frozenset({"DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM",
                       "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM",
                       "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM",
                       "PixtralForConditionalGeneration", "HYV3ForCausalLM"})
# _auto_choose_speculative_params (:512-546): (3, 1, 4) for these, (5, 4, 8) for Llama and Grok
_SHORT_PARAMS_ARCHS = frozenset({"DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM",
                                 "GptOssForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
                                 "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                                 "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM",
                                 "PixtralForConditionalGeneration", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})
_LONG_PARAMS_ARCHS = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})


@dataclass(frozen=True)
class SglangDraft:
    algorithm: str  # as given, upper case
    kind: str  # "mtp", "eagle", "eagle3", "standalone", "ngram"
    steps: int
    topk: int
    draft_tokens: int
    weights_bytes: int = 0  # per rank while the target's pool is sized (its own embedding and lm_head still held)
    kept_bytes: int = 0  # per rank once init_lm_head shares the target's embedding / lm_head
    cell_bytes: int = 0  # one token of the draft's own KV pool, per rank
    layers: int = 0  # the draft layers the target's cell is scaled by (eagle_draft_num_layers)
    path_set: bool = False  # speculative_draft_model_path is set (given, or the model's own for MTP_ARCHS)
    described: str = ""

    @property
    def has_model(self) -> bool:
        return self.kind != "ngram"


def _arch(spec: ModelSpec) -> str:
    return ((spec.config or {}).get("architectures") or [""])[0]


def algorithm_of(name: str | None) -> str | None:
    """--speculative-algorithm as SGLang reads it (upper case), or None; one clear line for a name it lacks."""
    if name is None or not str(name).strip():
        return None
    algo = str(name).strip().upper()
    if algo not in ALGORITHMS:
        raise UsageError(f"--speculative-algorithm {shown(name)}: kvcalc models SGLang's {', '.join(ALGORITHMS)}")
    return algo


def params(rules, spec: ModelSpec, algo: str, steps: int | None, topk: int | None,
           draft_tokens: int | None) -> tuple[int, int, int]:
    """(steps, topk, draft tokens) SGLang runs with (speculative_hook.py: given, else auto-chosen)."""
    for flag, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
                        ("--speculative-num-draft-tokens", draft_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64):
            raise UsageError(f"{flag} must be a whole number from 1 to 64, got {shown(value)}")
    if algo == "NGRAM":
        k = NGRAM_BFS_BREADTH
        d = draft_tokens or NGRAM_DRAFT_TOKENS
        return steps or max(d // k, 1), k, d
    if steps is None:
        if topk is not None or draft_tokens is not None:
            raise UsageError("--speculative-eagle-topk and --speculative-num-draft-tokens need --speculative-num-steps "
                             "too: SGLang chooses the three together or takes all three (speculative_hook.py:316-323)")
        arch = _arch(spec)
        if algo == "STANDALONE" or arch in _SHORT_PARAMS_ARCHS:
            return 3, 1, 4
        if arch in _LONG_PARAMS_ARCHS:
            return 5, 4, 8
        return rules.spec_default_params
    if topk is None:
        raise UsageError("--speculative-num-steps needs --speculative-eagle-topk (SGLang has no default for it once "
                         "the steps are given)")
    if topk == 1:
        return steps, 1, steps + 1  # speculative_hook.py:382-390
    if draft_tokens is None:
        raise UsageError("--speculative-eagle-topk above 1 needs --speculative-num-draft-tokens")
    return steps, topk, draft_tokens


def draft_config_of(path: str, read_files: bool = True) -> dict | None:
    """SGLang's --speculative-draft-model-path as a config: a catalog model (short name or hub id) from the catalog,
    a local config.json or its folder when read_files; None for a hub id outside the catalog (not fetched: an EAGLE
    head is then taken to have the target's shape, as vLLM's draft_config_at does)."""
    from ..catalog import _by_hub_id, _entries
    from ..model import local_config_at

    key = str(path).strip()
    short = key.lower() if key.lower() in _entries() else _by_hub_id(key)
    if short:
        return dict(_entries()[short]["config"])
    if not read_files:
        return None
    return local_config_at(key)


def _padded_rows(rows: int, tp: int) -> int:
    from .vllm_draft import _padded

    return _padded(rows, tp)


def _draft_cell(kv_layout, layer_spec: ModelSpec, s, layers: int | None = None) -> int:
    """Bytes of one token of the draft's own pool on one rank: its attention layers as kv_layout (engines/sglang.py)
    lays out a pool."""
    plain = replace(s, speculative_algorithm=None, disable_hybrid_swa_memory=True)
    _, cell, n, _, _ = kv_layout(layer_spec, plain)
    if layers is not None and n:
        cell = cell // n * layers
    return cell


def _draft_layers(cfg: dict[str, Any], fallback: int) -> int:
    """eagle_draft_num_layers (model_runner.py:446-456): num_nextn_predict_layers, else max(num_hidden_layers,
    num_attention_layers) of the draft config."""
    n = cfg.get("num_nextn_predict_layers")
    if n is not None:
        return int(n)
    return int(max(int(cfg.get("num_hidden_layers") or fallback), int(cfg.get("num_attention_layers") or 0)))


def drafter(spec: ModelSpec, s, kv_layout=None, weight_bytes=None) -> SglangDraft | None:
    """The drafter SglangSettings `s` run, per rank; None without --speculative-algorithm. kv_layout and weight_bytes:
    engines/sglang.py's (passed in, so that this module does not import it back)."""
    from ..formats import weight_format
    from . import vllm_draft

    algo = algorithm_of(s.speculative_algorithm)
    if algo is None:
        return None
    rules = s.rules
    if algo in ("NGRAM", "STANDALONE") and s.enable_dp_attention:
        raise UsageError(f"SGLang's {algo} speculative decoding does not support DP attention "
                         "(arg_groups/speculative_hook.py:261-268, :466-470): drop --enable-dp-attention")
    from .sglang_versions import version_key

    if s.enable_lora and algo != "NGRAM" and version_key(s.version) >= (0, 5, 10):
        raise UsageError(f"SGLang {s.version} runs LoRA only with NGRAM speculative decoding (server_args.py:6849-6852 "
                         f"in 0.5.14, :6269-6272 in 0.5.10): drop --enable-lora or --speculative-algorithm {algo}")
    steps, topk, k = params(rules, spec, algo, s.speculative_num_steps, s.speculative_eagle_topk,
                            s.speculative_num_draft_tokens)
    if algo == "NGRAM":
        return SglangDraft(algo, "ngram", steps, topk, k, described="n-gram drafts from the request's own tokens: "
                           "no draft model, no draft pool")
    arch = _arch(spec)
    cfg = s.speculative_draft_config
    tp, d_bytes, h = s.tensor_parallel, s.dtype_bytes, spec.hidden_size
    given = bool(s.speculative_draft_model_path) or cfg is not None
    if algo == "NEXTN" or (algo in ("EAGLE", "EAGLE3") and not given and arch in MTP_ARCHS):
        if vllm_draft.mtp_layers(spec) < 1:
            raise UsageError(f"--speculative-algorithm {algo} drafts with the checkpoint's own MTP layers and "
                             f"{spec.name} has none (num_nextn_predict_layers is 0 or absent): use EAGLE or EAGLE3 "
                             "with a draft head (--speculative-draft-model-path), STANDALONE or NGRAM")
        d = vllm_draft.drafter(spec, "mtp", weights=s.weights, dtype_bytes=d_bytes, tp=tp)
        # its own embed_tokens and shared_head.head (VocabParallelEmbedding / ParallelLMHead) until init_lm_head
        ends = 2 * _padded_rows(spec.vocab_size, tp) * h * d_bytes
        cell = _draft_cell(kv_layout, d.layer_spec, s, d.num_layers)
        return SglangDraft(algo, "mtp", steps, topk, k, d.weight_bytes + ends, d.weight_bytes, cell,
                           vllm_draft.mtp_layers(spec), given or arch in MTP_ARCHS,
                           f"{d.num_layers} MTP layer(s) of the checkpoint")
    if algo == "STANDALONE":
        if cfg is None:
            raise UsageError("--speculative-algorithm STANDALONE drafts with a model of its own: give "
                             "--speculative-draft-model-path as a catalog name, a config.json or its folder")
        from ..model import spec_from_config

        draft = spec_from_config(cfg, str(s.speculative_draft_model_path or "the draft model"), trusted=False)
        plain = replace(s, speculative_algorithm=None, weights=weight_format("bf16"), speculative_draft_config=None)
        w = weight_bytes(draft, plain)
        try:
            cell = _draft_cell(kv_layout, draft, s)
        except UnsupportedModelError as exc:
            raise UnsupportedModelError(f"STANDALONE draft: {exc}") from None
        return SglangDraft(algo, "standalone", steps, topk, k, w, w, cell, _draft_layers(cfg, draft.num_layers), True,
                           f"draft model {draft.name} ({draft.num_layers} layers, its own embedding and lm_head)")
    method = "eagle3" if algo == "EAGLE3" else "eagle"
    if algo == "EAGLE3" and s.enable_dp_attention:
        # an EAGLE-3 head under DP attention loads in the attention TP group (eagle_worker_v2.py:169-172)
        tp = s.attn_tp
    d = vllm_draft.drafter(spec, method, dtype_bytes=d_bytes, tp=tp, draft_config=cfg)
    dh = d.hidden_size
    tied = bool((cfg or {}).get("tie_word_embeddings"))
    draft_vocab = int((cfg or {}).get("vocab_size") or spec.vocab_size)
    ends = _padded_rows(draft_vocab, tp) * dh * d_bytes  # its own embed_tokens
    if not d.own_lm_head_rows and not tied:  # an lm_head of the target's vocabulary, swapped for the target's
        ends += _padded_rows(spec.vocab_size, tp) * dh * d_bytes
    cell = _draft_cell(kv_layout, d.layer_spec, s)
    return SglangDraft(algo, method, steps, topk, k, d.weight_bytes + ends, d.weight_bytes, cell,
                       _draft_layers(cfg or {}, d.num_layers), True, d.described.replace("; embedding shared", "")
                       .replace(", lm_head shared", ""))
