"""What changes between SGLang releases, as data: one row per release where a memory rule moved.

Read from the released wheels (PyPI `sglang==X`, `python/sglang/srt/...` inside them); `file:line` below is that
release's. A release between two rows follows the earlier row; a release past the newest row follows the newest.

Rules every row shares (cited in engines/sglang.py): the KV pool is what `mem_fraction_static` of the free memory
at start-up leaves after the weights (model_runner.py `profile_max_num_token`), rounded down to whole pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError, shown
from .release_rows import newest_at_or_below

DEFAULT_VERSION = "0.5.14"  # the newest release that pins torch 2.11.0 (the project's H200 host), cu13 wheels
OLDEST = "0.4.1"


@dataclass(frozen=True)
class SglangRules:
    since: str
    # how mem_fraction_static defaults (server_args.py):
    #   "tp_only":   0.88/0.87/0.85/0.81/0.79 by TP
    #   "tp_table":  0.88/0.87/0.85/0.81/0.79 by TP x PP, raised on GPUs over 96 GiB
    #   "bucket":    (gpu_mem - reserved) / gpu_mem with a reserve per GPU-memory bucket and TP x PP
    #   "activation": reserve = 512 MiB + 1.5 MiB per chunked-prefill token + 2 MiB per CUDA-graph batch size
    #                 + TP x PP / 8 GiB (+ DP attention, piecewise graphs), at least 10 GiB on GPUs over 60 GiB
    mfs_rule: str
    chunk_rule: str  # "25k" (0.4.6), "35k" (0.4.8-0.5.2), "buckets" (0.5.3+): the default chunked_prefill_size
    small_gpu_graph_bs: int  # cuda_graph_max_bs at TP < 4 on 20-35 GiB GPUs (activation rule only)
    hybrid_swa: bool  # sliding-window layers get their own pool (swa_full_tokens_ratio) unless the arch opts out
    swa_opt_out: frozenset[str]  # architectures the release keeps on one full-length pool (disable_hybrid_swa_memory)
    piecewise_graph_reserve: bool  # piecewise (prefill) CUDA graphs on by default and reserved for
    speculative_reserve_mib: int  # EAGLE-style drafters: extra reserve (STANDALONE +6 GiB)
    vlm_adjust: bool  # adjust_mem_fraction_for_vlm: mfs scaled down for a vision tower
    clamped_requests: bool  # the req-to-token pool clamps a user max_running_requests to the 2048-4096 estimate
    source: str
    # ReqToTokenPool(size=max_num_reqs + 1) before 0.4.8 (model_runner.py:618 in 0.4.1.post7, :711 in 0.4.3.post4,
    # :904 in 0.4.6.post5; 0.4.8:942 drops the + 1): the logged max_running_requests reads 2049, not 2048
    req_pool_extra_slot: bool = False
    # before 0.4.10 ModelRunner scaled mem_fraction_static for a multimodal architecture, given or default
    # (model_runner.py:129-130 in 0.4.1.post7, :242-243 in 0.4.4.post1: x 0.95; :393-394 in 0.4.6.post5, :414 in
    # 0.4.8: x 0.90); 0.4.10 moved it into server_args.py adjust_mem_fraction_for_vlm (vlm_adjust)
    multimodal_mfs_factor: float = 1.0
    # the reserve SGLang adds for --enable-piecewise-cuda-graph while the piecewise graphs are opt-in (server_args.py
    # _handle_gpu_memory_settings): "" none (0.5.4, 0.5.5: the flag reserves nothing; 0.5.10 on they are on by
    # default, piecewise_graph_reserve), "quarter" piecewise_cuda_graph_max_tokens // 4 MiB after the 10 GiB floor
    # (0.5.6:855-857, max tokens 4096 by default, :511; 0.5.5.post1-post3 already, but kvcalc keys releases by
    # X.Y.Z), "eighth" max_tokens // 8 after the floor (0.5.7:943-945, max tokens = chunked_prefill_size, :898-902),
    # "sizes-0.5.8" / "sizes-0.5.9" 8 MiB per captured size before the floor (0.5.8:1011-1014, 0.5.9:1043-1046;
    # max tokens = chunked_prefill_size, 2048 with MLA, 0.5.8:974-981; size lists 0.5.8:1069-1085, 0.5.9:1109-1125)
    optin_piecewise: str = ""
    # DeepSeek sparse attention (DSA/NSA: DeepSeek V3.2, GLM-5) in _handle_model_specific_adjustments: "dp" DP attention
    # with dp_size = tp_size and pages of 64 (0.5.4:1018-1024, 0.5.5:1070-1075); "dp-flag" enable_dp_attention on
    # but dp_size as given, so at --dp 1 attention is TP-sharded (0.5.6:940-980, 0.5.7:1029-1062: "NSA with TP
    # mode is active"); "tp" no DP attention unless asked, pages of 64 on CUDA and 1 on ROCm (0.5.8:1140-1158,
    # 0.5.9:1240-1259, 0.5.10:1565-1584; 0.5.14:3611-3623 keeps 1 on ROCm only without aiter's preshuffle path)
    nsa_mode: str = "dp"
    # the prefill CUDA-graph token sizes the piecewise reserve counts (engines/sglang.py piecewise_graph_sizes):
    # "0.5.10" (server_args.py _generate_piecewise_cuda_graph_tokens) or "0.5.14" (a coarser list, 58 sizes to 8192;
    # max = chunked_prefill_size clamped to an explicit --context-length)
    piecewise_sizes: str = "0.5.10"
    # the configurations whose default piecewise prefill graphs SGLang switches off before the memory default is
    # computed (engines/sglang.py piecewise_off): the architectures of configs/model_config.py
    # piecewise_cuda_graph_disabled_model_archs (0.5.10:1352-1358, 0.5.14:1713-1719), whether DeepSeek sparse
    # attention is off too (0.5.10 model_config.py:212-215 is_deepseek_nsa; 0.5.14 drops it, :427-435), whether
    # speculative decoding is (0.5.10 server_args.py:1088-1090, rule 2; not in 0.5.14's list, :3002-3053), and the
    # multimodal architectures that keep the graphs (0.5.14 model_config.py:1725-1727 via :1795-1800; 0.5.10 none)
    piecewise_off_archs: frozenset[str] = frozenset()
    piecewise_off_nsa: bool = False
    piecewise_off_speculative: bool = False
    piecewise_mm_kept: frozenset[str] = frozenset()
    # speculative decoding's drafter (engines/sglang.py draft_memory):
    #   "headroom": the target's pool is sized inside ModelRunner.__init__, before the scheduler builds the draft
    #     worker (0.5.4 model_runner.py:1603-1700; 0.5.10 model_runner.py:623 init_memory_pool), so the draft's
    #     weights and its own KV pool (the target's token count x the draft's layers) come out of the
    #     1 - mem_fraction_static rest that the default's speculative reserve leaves;
    #   "budget": the scheduler loads the draft before either pool is sized (0.5.14 managers/scheduler.py:859-868:
    #     init_tp_model_worker, maybe_init_draft_worker, then init_memory_pools), so the free memory the pool is cut
    #     from has already lost the draft's weights (model_runner_kv_cache_mixin.py:85-120, "Loaded weights (target
    #     + draft)"), and the cell is scaled by (1 + draft layers / target layers) for the draft's pool
    #     (pool_configurator.py:129-145, layers from model_runner.py:435-456).
    # Releases 0.5.11-0.5.13 were not read: they follow the 0.5.10 row.
    spec_draft_memory: str = "headroom"
    # 0.5.4-0.5.6: the target's max_total_num_tokens grows by max_num_reqs x (steps x topk + draft tokens) + 100 for
    # the draft's shared token indices (draft_runner_cache_size, model_runner.py:1666-1687 in 0.5.4, :1696-1717 in
    # 0.5.6); 0.5.7 shares the pool as sized (model_runner_kv_cache_mixin.py:293-311 in 0.5.7/0.5.8). The 0.4 rows
    # are assumed to keep 0.5.4's rule (not read).
    spec_pool_inflate: bool = False
    # (steps, topk, draft tokens) auto_choose_speculative_params gives an architecture it does not list: (5, 4, 8)
    # to 0.5.7 (server_args.py:3805-3835 in 0.5.4), (3, 1, 4) from 0.5.8 (0.5.8 server_args.py auto_choose_...;
    # 0.5.14 arg_groups/speculative_hook.py:512-546); Llama (5, 4, 8), DeepSeek/GPT-OSS/GLM (3, 1, 4) in all
    spec_default_params: tuple[int, int, int] = (5, 4, 8)


_GEMMA = frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
                    "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"})

RULES: tuple[SglangRules, ...] = (
    SglangRules("0.4.1", "tp_only", "25k", 8, False, frozenset(), False, 0, False, False,
                "sglang 0.4.1.post7: server_args.py:189-215 (mem_fraction_static 0.88/0.87/0.85/0.81/0.79 by TP "
                "alone; chunked_prefill_size 2048 under 25,000 MiB, else 8192; cuda_graph_max_bs 8 / 80 / 160), "
                "model_runner.py:532-556 (profile_max_num_token: rest = free - total x (1 - mfs)), :582-590 (req pool "
                "clamp(tokens / context_len x 512, 2048, 4096)); 0.4.3.post4 the same at server_args.py:204-232, "
                "model_runner.py:608-633, :658-666",
                req_pool_extra_slot=True, multimodal_mfs_factor=0.95, spec_pool_inflate=True),
    SglangRules("0.4.4", "tp_only", "25k", 8, False, frozenset(), False, 0, False, False,
                "sglang 0.4.4.post1: server_args.py:204-214 (mem_fraction_static 0.88/0.87/0.85/0.81/0.79 by TP "
                "alone, whatever the GPU), :217-221 (chunked_prefill_size 2048 under 25,000 MiB, else 8192); "
                "model_runner.py:612-637 (profile_max_num_token)",
                req_pool_extra_slot=True, multimodal_mfs_factor=0.95, spec_pool_inflate=True),
    SglangRules("0.4.6", "tp_table", "25k", 8, False, frozenset(), False, 0, False, False,
                "sglang 0.4.6.post5: server_args.py:247-266 (mem_fraction_static by TP x PP; "
                "gpu_mem > 96 GiB: min(mfs + 48 GiB x (1 - mfs) / gpu_mem, (gpu_mem - 18 GiB) / gpu_mem)), "
                ":269-275 (chunked_prefill_size 2048 under 25,000 MiB, else 8192); model_runner.py:785-820 "
                "(profile_max_num_token), :846-853 (req pool), :893 (page rounding)",
                req_pool_extra_slot=True, multimodal_mfs_factor=0.90, spec_pool_inflate=True),
    SglangRules("0.4.8", "bucket", "35k", 8, False, frozenset(), False, 2048, False, False,
                "sglang 0.4.8: server_args.py:274-313 (reserve (2.8 + TP x PP / 10) GiB under 35 GiB, "
                "(9.5 + TP x PP / 2) GiB under 90 GiB, (12 + TP x PP / 2) GiB under 160 GiB, else 32 GiB; "
                "+2 GiB speculative, +4 GiB DP attention), :320-327 (chunked_prefill_size)",
                multimodal_mfs_factor=0.90, spec_pool_inflate=True),
    SglangRules("0.4.10", "bucket", "35k", 8, True, frozenset({"Gemma2ForCausalLM"}), False, 2048, True, False,
                "sglang 0.4.10.post2: server_args.py:310-349 (as 0.4.8), :2040 (adjust_mem_fraction_for_vlm); "
                "model_runner.py:1063-1075 (hybrid SWA pools: full = total / (r x n_swa + n_full), "
                "swa = full x r, r = swa_full_tokens_ratio 0.8)", spec_pool_inflate=True),
    SglangRules("0.5.2", "bucket", "35k", 8, True, frozenset({"Gemma2ForCausalLM", "GptOssForCausalLM"}),
                False, 2048, True, False,
                "sglang 0.5.2: server_args.py:452-496 (STANDALONE drafter +6 GiB), GPT-OSS sets "
                "disable_hybrid_swa_memory; model_runner.py:1092 (profile), :1213 (hybrid), :1253 (req pool)",
                spec_pool_inflate=True),
    SglangRules("0.5.3", "activation", "buckets", 16, True, frozenset({"Gemma2ForCausalLM", "GptOssForCausalLM"}),
                False, 2048, True, False,
                "sglang 0.5.3: server_args.py:567-629 (chunked_prefill_size and cuda_graph_max_bs by GPU memory), "
                ":637-672 (reserve = 512 + 1.5 x max(chunk, 2048) + 2 x cuda_graph_max_bs + TP x PP / 8 x 1024 MiB, "
                "at least 10 GiB over 60 GiB; PR #10975)", spec_pool_inflate=True),
    SglangRules("0.5.4", "activation", "buckets", 24, True,
                _GEMMA | {"GptOssForCausalLM", "Olmo2ForCausalLM"}, False, 2048, True, False,
                "sglang 0.5.4: server_args.py:643-798 (_handle_gpu_memory_settings), :950-990 (GPT-OSS, Gemma 2/3/3n, "
                "OLMo 2 keep one full-length pool); model_runner.py:1383-1431 (profile_max_num_token), :1500-1580 "
                "(set_num_token_hybrid), :1603-1700 (init_memory_pool); mem_cache/memory_pool.py:453 "
                "('KV Cache is allocated. #tokens'); managers/tp_worker.py:279-287 (max_running_requests); "
                "managers/scheduler.py:378 ('max_total_num_tokens=')", spec_pool_inflate=True),
    SglangRules("0.5.6", "activation", "buckets", 24, True,
                _GEMMA | {"GptOssForCausalLM", "Olmo2ForCausalLM"}, False, 2048, True, False,
                "sglang 0.5.6: as 0.5.4, and --enable-piecewise-cuda-graph reserves piecewise_cuda_graph_max_tokens // 4 "
                "MiB after the 10 GiB floor (server_args.py:855-857; max tokens 4096, :511)",
                optin_piecewise="quarter", nsa_mode="dp-flag", spec_pool_inflate=True),
    SglangRules("0.5.7", "activation", "buckets", 24, True,
                _GEMMA | {"GptOssForCausalLM", "Olmo2ForCausalLM"}, False, 2048, True, False,
                "sglang 0.5.7: --enable-piecewise-cuda-graph reserves max tokens // 8 MiB after the floor "
                "(server_args.py:943-945), max tokens = chunked_prefill_size (:898-902)",
                optin_piecewise="eighth", nsa_mode="dp-flag"),
    SglangRules("0.5.8", "activation", "buckets", 24, True,
                _GEMMA | {"GptOssForCausalLM", "Olmo2ForCausalLM"}, False, 2048, True, False,
                "sglang 0.5.8: --enable-piecewise-cuda-graph reserves 8 MiB per captured size before the 10 GiB floor "
                "(server_args.py:1011-1014; sizes :1069-1085, max tokens = chunked_prefill_size, 2048 with MLA, "
                ":974-981)",
                optin_piecewise="sizes-0.5.8", nsa_mode="tp", spec_default_params=(3, 1, 4)),
    SglangRules("0.5.9", "activation", "buckets", 24, True,
                _GEMMA | {"GptOssForCausalLM", "Olmo2ForCausalLM"}, False, 2048, True, False,
                "sglang 0.5.9: as 0.5.8 with 576-1024 step 64 in the size list (server_args.py:1043-1046, "
                ":1109-1125)",
                optin_piecewise="sizes-0.5.9", nsa_mode="tp", spec_default_params=(3, 1, 4)),
    SglangRules("0.5.10", "activation", "buckets", 24, True, _GEMMA, True, 4096, True, True,
                "sglang 0.5.10: server_args.py:1141-1325 (piecewise CUDA graphs on by default: +8 MiB per captured "
                "token size, MLA +1.5 GiB, :1308; EAGLE +4 GiB); GPT-OSS now on hybrid SWA pools; "
                "model_executor/model_runner_kv_cache_mixin.py:74-140 (cell size), :144-176 (profile), "
                ":287-370 (hybrid SWA split), :840-858 (max_num_reqs = min(user // dp, estimate))", nsa_mode="tp",
                piecewise_off_archs=frozenset({"DeepseekV32ForCausalLM", "Qwen3NextForCausalLM", "GlmMoeDsaForCausalLM",
                                               "BailingMoeV2_5ForCausalLM", "LLaDAModelLM"}),
                piecewise_off_nsa=True, piecewise_off_speculative=True, spec_default_params=(3, 1, 4)),
    SglangRules("0.5.14", "activation", "buckets", 24, True, _GEMMA, True, 0, True, True,
                "sglang 0.5.14: server_args.py:3276-3312 (no speculative reserve; prefill CUDA graphs +8 MiB per "
                "captured size, :3303; sizes :3384-3400, max = chunked_prefill_size, 2048 with MLA, clamped to an explicit "
                "context_length, :3239-3267)", nsa_mode="tp", piecewise_sizes="0.5.14",
                piecewise_off_archs=frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN",
                                               "Qwen3NextForCausalLM", "BailingMoeV2_5ForCausalLM", "LLaDAModelLM"}),
                piecewise_mm_kept=frozenset({"Cohere2VisionForConditionalGeneration"}),
                spec_default_params=(3, 1, 4), spec_draft_memory="budget"),
)


def version_key(text: str) -> tuple[int, ...]:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(text).strip()).release
    except InvalidVersion:
        raise UsageError(f"--sglang-version {shown(text)} is not a version number like {DEFAULT_VERSION}") from None


def rules_for(version: str) -> SglangRules:
    """The row a release follows; releases before 0.4.4 are refused (their memory rules were not read)."""
    key = version_key(version)
    if key < version_key(OLDEST):
        raise UsageError(f"SGLang {shown(version, 40, quote=False)}: kvcalc has rules from {OLDEST} on")
    return newest_at_or_below(RULES, key, version_key)


def resolve_version(text: str | None) -> str:
    """--sglang-version as a release number ('' or None: the default); refused before 0.4.4."""
    if text is None or not str(text).strip():
        return DEFAULT_VERSION
    from packaging.version import Version

    release = Version(".".join(str(n) for n in version_key(text))).base_version
    rules_for(release)
    return release


def is_newer_than_known(version: str) -> bool:
    """A release past the newest row (whose rules then apply unread)."""
    return version_key(version)[:3] > version_key(RULES[-1].since)[:3]
