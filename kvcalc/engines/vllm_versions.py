"""What changes in vLLM's start-up memory accounting from release to release, as data.

One row of VERSION_RULES per release where a rule kvcalc models changed; a version gets the newest row at or below
it (`rules_for`). Every field names the vLLM source it follows, in the row's `sources`. Versions are read with
`packaging` (0.26.0rc1, 0.10.1.1, 0.8.5.dev169+g...: the release number decides); a version older than the first
row is refused, one newer than NEWEST_RELEASE_KNOWN runs on the newest row with a warning (plan.request_warnings).

Pure data and small pure functions; no torch or vLLM import. docs/method.md has the same table for readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import UsageError, shown
from .release_rows import newest_at_or_below

NEWEST_RELEASE_KNOWN = "0.34.0"  # the newest release kvcalc has a rules row for; later ones warn
MEASURED_RELEASE = "0.26.0"  # the release whose rules were measured on a GPU (the H200 runs, docs/validation/data)
OLDEST_RELEASE = "0.4.0"


@dataclass(frozen=True)
class VersionRules:
    since: str  # first release the row applies to
    engine: str  # "v0" (LLMEngine + worker.py) or "v1" (v1/engine/core.py + v1/worker/gpu_worker.py)
    default_util: float  # CacheConfig.gpu_memory_utilization default
    batch_defaults: str  # key of BATCH_DEFAULTS: how max_num_batched_tokens / max_num_seqs default
    chunked_prefill: str  # "always" (V1), "long_context" (V0: on when max_model_len > 32K), "off"
    prefix_caching: bool  # enable_prefix_caching default for decoder models
    hybrid_allocator: bool  # sliding-window / Mamba layers keep their own groups (V1 hybrid KV-cache manager)
    cudagraph_estimate: bool  # a profiled CUDA-graph estimate is subtracted from the KV budget
    v2_runner: bool  # dense, non-hybrid decoders run on the V2 model runner (graphs captured after the KV cache)
    logged_tokens: str  # "blocks" (# GPU blocks x block_size), "per_group" (blocks // groups x block), "concurrency"
    others_reduce_kv: bool  # memory other processes hold on the GPU comes out of the KV budget (else: must be free)
    sampler_bytes_per_logit: float | None  # None: fitted (constants.yaml); the dummy sampler's torch peak per logit on the V0 / V1 runner
    sources: str
    # "mechanism": the profile peak is built tensor by tensor (engines/vllm_profile.py, traced on this release);
    # "fitted": the older fitted forward factor and per-logit sampler, calibrated on public logs of those releases
    profile: str = "fitted"
    # How the row is known (explain prints it): "measured" (run on a GPU by this project: 0.26 on the H200),
    # "source" (read from vLLM's source at the release and checked on public start-up logs, never run here),
    # "source-only" (read from the source, no public start-up log of the release found to check it),
    # "carried" (the release was not read line by line: no rule change found in the sources read, so the previous
    # row's rules apply unverified)
    evidence: str = "source"
    # vLLM PR #47272 (0.28.1rc0): the start check and --max-model-len auto plan against the memory minus one block
    # (the null block), kv_cache_utils.py
    null_block_first: bool = False
    # 0.29.0+: the V2 model runner profiles its CUDA graphs before the KV cache too (v1/worker/gpu/model_runner.py:
    # 896-898 at v0.29.0 calls v1/worker/gpu/cudagraph_utils.py:718 profile_cudagraph_memory, a throwaway capture;
    # v0.27.1 :749-751 and v0.28.0 :843-845 still return 0), so its graphs come out of the KV budget
    # (gpu_worker.py:606-610) instead of being captured on top of it
    v2_cudagraph_estimate: bool = False
    # 0.27.0+: the logged "peak activation" is the profile's transient peak plus the CUDA-graph estimate subtracted
    # (gpu_worker.py:527-529 at v0.27.1, self.peak_activation_memory = transient_peak_headroom +
    # cudagraph_memory_estimate_applied; v0.26.0:526 logged torch_peak_increase alone)
    logged_peak_with_graphs: bool = False
    # 0.29.0+: the V2 model runner is every model's default, MoE and hybrid too (config/vllm.py:645-677 at v0.29.0:
    # only VLLM_USE_V2_MODEL_RUNNER, ROCm's DeepSeek V3.2/V4 list and unsupported features such as n-gram drafting
    # keep V1; 0.28.0's _is_default_v2_model_runner_model :691-712 still sent MoE and hybrid models to V1 unless
    # their architecture was listed)
    v2_runner_for_all: bool = False
    # 0.27.0+: the profile's "consumed memory" is the drop in free device memory since the worker's first snapshot
    # (utils/mem_utils.py:317-319 at v0.29.0, before_create.free_memory - after_profile.free_memory; 0.26.0:310-314
    # summed non_torch_increase, which leaves torch tensors out), so torch tensors allocated after the weights are
    # measured and before the profile (the V2 sampler's penalty state) come out of the KV budget
    consumed_from_free_memory: bool = False
    # 0.34.0+: config/cache.py:185 CacheConfig.DEFAULT_BLOCK_SIZE 64 (16 through 0.33.0, :185), the value
    # platforms/interface.py:782-791 passes to each attention backend's get_preferred_block_size
    default_block_size: int = 16
    # 0.33.0+: engine/arg_utils.py:2960-2962 at v0.33.0 keeps GB10 (DGX Spark, compute capability 12.1) on the small
    # batching tier whatever its memory ("has the memory but not the compute of a large discrete GPU"); absent in
    # 0.32.0's get_batch_defaults
    batch_gb10_small: bool = False
    # 0.34.0+: the extensible KV cache (config/cache.py:395, on by default on CUDA and ROCm unless
    # kv_cache_memory_bytes is set: config/vllm.py:3180-3254): the cache is sized after warmup and CUDA-graph
    # capture from measured free memory (v1/worker/extensible_kv_cache.py:592-618 measure_kv_cache_bytes), and
    # gpu_memory_utilization defaults to 1.0 (config/cache.py:495-501 resolved_gpu_memory_utilization)
    extensible_kv_cache: bool = False

    @property
    def profile_may_pin_freed_blocks(self) -> bool:
        """0.27-0.30: "consumed memory" is the drop in free device memory across the profile, and nothing stops a
        later small allocation from being carved out of a freed multi-GiB block, which pins the whole segment past
        empty_cache() (0.31.0 v1/worker/gpu_worker.py:612-626 caps block splitting during the profile for exactly
        this); whether a start pins depends on the allocator's state, so it is a range, not a figure."""
        return self.consumed_from_free_memory and _key("0.27.0") <= _key(self.since) < _key("0.31.0")

    def default_util_for(self, fixed_kv_budget: bool = False) -> float:
        """gpu_memory_utilization when the user sets none: 1.0 with the extensible KV cache (0.34+; off when
        --kv-cache-memory-bytes fixes the budget, config/vllm.py:3204-3208), else default_util."""
        return 1.0 if self.extensible_kv_cache and not fixed_kv_budget else self.default_util


# Sampler peak per logit, before the V2 runner: fp32 logits (4 B) + the top-k/top-p path's sorted copy (4 B) and
# int64 sort indices (8 B) = 16 B (v1/sample/ops/topk_topp_sampler.py:apply_top_k_top_p; V0
# model_executor/layers/sampler.py:_apply_top_k_top_p does the same sort). The 0.19 public logs agree: torch peak
# / (1024 rows x vocab) = 15.0-16.0 B for Llama-3.1-8B, Qwen3-8B, Gemma 2/3, Qwen2.5-72B, Llama-3.3-70B.
_SORT_SAMPLER = 16.0
# V0 (model_executor/layers/sampler.py, only the driver rank samples), counted at the top-k/top-p step's peak: the
# caller's logits in the model dtype (2 B), Sampler.forward's fp32 copy (4 B), the sort's values (4 B) and int64
# indices (8 B), the two bool masks (2 B), the top-p softmax (4 B) and cumsum (4 B) and the scattered output (4 B):
# 32 B. (28 B before: it counted the TP gather's buffers, freed by then, and missed the masks and the scatter.) The one
# V0 log with a per-rank breakdown (vllm#13061, 2 x RTX 4090, 0.7) implies ~36 B on its driver rank.
_V0_SAMPLER = 32.0

VERSION_RULES: tuple[VersionRules, ...] = (
    VersionRules("0.4.0", "v0", 0.9, "v0", "off", False, False, False, False, "blocks", True, _V0_SAMPLER,
                 "worker/worker.py:determine_num_available_blocks (profile over max_num_batched_tokens, "
                 "default max(max_model_len, 2048) without chunked prefill: config.py SchedulerConfig; the peak is "
                 "the GPU's whole used memory, other processes included); executor logs '# GPU blocks: N'; CUDA "
                 "graphs captured after the cache, not subtracted"),
    VersionRules("0.5.3", "v0", 0.9, "v0", "long_context", False, False, False, False, "blocks", True,
                 _V0_SAMPLER,
                 "engine/arg_utils.py:create_engine_config: chunked prefill on by default when max_model_len > "
                 "32K (then max_num_batched_tokens 2048: config.py SchedulerConfig) (approximate release)"),
    VersionRules("0.6.4", "v0", 0.9, "v0", "long_context", False, False, False, False, "blocks", False,
                 _V0_SAMPLER,
                 "vllm#9352 (utils.py:memory_profiling): the profile measures this instance's growth from a baseline "
                 "snapshot, so other processes' memory no longer comes out of the KV budget"),
    VersionRules("0.8.0", "v1", 0.9, "v1_context", "always", True, True, False, False, "per_group", True,
                 _SORT_SAMPLER,
                 "V1 engine by default (envs.py VLLM_USE_V1); engine/arg_utils.py:_set_default_args_v1 usage-context "
                 "defaults (LLM class 8192, OpenAI server 2048 tokens; 256 seqs); prefix caching on; "
                 "v1/core/kv_cache_utils.py logs num_blocks // len(groups) * block_size tokens; V1's profile counts "
                 "other processes' memory as non-torch (vllm#19312)"),
    VersionRules("0.8.5", "v1", 0.9, "v1_memory_any", "always", True, True, False, False, "per_group", True,
                 _SORT_SAMPLER,
                 "engine/arg_utils.py:1596-1609 at v0.8.5 (_set_default_args_v1): every GPU with >= 70 GiB, A100 "
                 "80GB included (no device-name check), gets 16384 (LLM) / 8192 (server) tokens and 1024 seqs "
                 "(approximate release for the tier itself)"),
    VersionRules("0.9.0", "v1", 0.9, "v1_memory", "always", True, True, False, False, "per_group", True,
                 _SORT_SAMPLER,
                 "engine/arg_utils.py:1492-1495 at v0.9.0: the >= 70 GiB tier skips A100s ('a100' in the device "
                 "name: larger max_num_batched_tokens lowers A100 throughput, vllm#17885); nothing else changed "
                 "from the 0.8.5 row"),
    VersionRules("0.9.2", "v1", 0.9, "v1_memory", "always", True, True, False, False, "per_group", False,
                 _SORT_SAMPLER,
                 "vllm#18974 / #19312 (v1/worker/gpu_worker.py on utils memory_profiling): other processes' memory "
                 "no longer counts; the worker refuses to start when free memory < total x util (approximate "
                 "release: the PRs merged in June 2025)"),
    VersionRules("0.21.0", "v1", 0.92, "v1_memory", "always", True, True, True, False, "concurrency", False,
                 _SORT_SAMPLER,
                 "vllm#38284: CUDA-graph memory profiling on by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, "
                 "v1/worker/gpu_worker.py: 'default since v0.21.0') and gpu_memory_utilization 0.9 -> 0.92 "
                 "(config/cache.py); logged tokens = int(max concurrency x max_model_len) "
                 "(v1/core/kv_cache_utils.py:_report_kv_cache_config, vllm#40694 / #38364 of April 2026, replacing "
                 "num_blocks // groups x min block size): vllm#43308 logs ~55k tokens on 0.20.0 and ~525k on 0.21.0 "
                 "for Gemma-4-31B at the same ~50 GB of KV memory (was: from 0.24)"),
    VersionRules("0.24.0", "v1", 0.92, "v1_memory", "always", True, True, True, False, "concurrency", False,
                 _SORT_SAMPLER,
                 "v1/core/kv_cache_utils.py:get_kv_cache_capacity: the 0.21 logged-token formula, moved into its "
                 "own function; no memory rule changed"),
    VersionRules("0.26.0", "v1", 0.92, "v1_memory", "always", True, True, True, True, "concurrency", False, None,
                 "config/vllm.py:use_v2_model_runner (dense decoders on v1/worker/gpu/model_runner.py, whose "
                 "profile_cudagraph_memory returns 0); profile peak by mechanism (engines/vllm_profile.py, traced "
                 "tensor by tensor on the H200: docs/validation/data/v3)", profile="mechanism", evidence="measured"),
    VersionRules("0.27.0", "v1", 0.92, "v1_memory", "always", True, True, True, True, "concurrency", False, None,
                 "tag v0.27.0 (commit 4bdc8a78, 2026-08-10): consumed memory is the free-memory drop since the first "
                 "snapshot (utils/mem_utils.py:317-319 at v0.27.1: 'total_consumed already covers persistent torch "
                 "allocations'), so the V2 sampler's penalty state counts "
                 "(v1/worker/gpu/sample/penalties.py); batch tiers unchanged (engine/arg_utils.py:2544-2549, "
                 "top tier >= 70 GiB and not A100); bitsandbytes still in tree (model_loader/bitsandbytes_loader.py); "
                 "public 0.27.1 start-ups print the same budget terms (weights + non-torch, peak activation, "
                 "'Estimated CUDA graph memory', 'CUDA graph memory profiling is enabled (default since v0.21.0)': "
                 "gpustack/runner#251)", consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism"),
    VersionRules("0.28.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None,
                 "tag v0.28.0 (commit 2cf0a691, 2026-08-24): engine/arg_utils.py:2582-2591 adds a tier for GPUs of "
                 ">= 160 GiB ('for GPUs like B200/B300 ... use the largest defaults'): vllm serve "
                 "max_num_batched_tokens 16384 (8192 below); bitsandbytes moved out of tree to vllm-bnb-plugin "
                 "(vllm#43529); KV log merged into one line 'GPU KV cache size: N tokens, Maximum concurrency for "
                 "L tokens per request: Cx' (v1/core/kv_cache_utils.py); new kv_cache_dtype int4_per_token_head and "
                 "turboquant_* (config/cache.py). Not read: the >= 160 GiB tier's LLM-class max_num_batched_tokens "
                 "and max_num_seqs (kvcalc keeps 16384 and 1024)", consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism"),
    VersionRules("0.28.1", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None,
                 "vLLM PR #47272 (merge commit 76fb6d21, 2026-08-20; first in v0.28.1rc0, not in v0.28.0): the null "
                 "block is reserved before the start check and the --max-model-len auto fit "
                 "(v1/core/kv_cache_utils.py), so one max_model_len request needs its blocks plus one",
                 consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism", null_block_first=True),
    VersionRules("0.29.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None,
                 "v0.29.0 release notes: FlashInfer all-reduce on by default for TP CUDA groups (vllm#52998), "
                 "deterministic prefix-cache NONE_HASH (vllm#51875), --max-num-queued-reqs / --max-num-queued-tokens "
                 "admission flags (vllm#49445); the V2 model runner's CUDA graphs are profiled and subtracted from "
                 "the KV budget (v1/worker/gpu/model_runner.py:896-898 -> gpu/cudagraph_utils.py:718 "
                 "profile_cudagraph_memory; 0.28.0's :843-845 returned 0), and the logged 'peak activation' holds "
                 "that estimate (gpu_worker.py:601-603, from 0.27: :527-529 at v0.27.1). Not modelled: the "
                 "FlashInfer all-reduce workspace at TP > 1; the V2 runner as every model's default (config/vllm.py:"
                 "645-677: MoE and hybrid too, ROCm keeping V1 for DeepSeek V3.2/V4)", consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism",
                 null_block_first=True, v2_cudagraph_estimate=True, v2_runner_for_all=True),
    VersionRules("0.30.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None, "no memory rule change found in the sources read; the 0.29 rules apply. Checked in the release wheel: "
                 "util 0.92 (config/cache.py:103), batch tiers (engine/arg_utils.py:2730-2740), the V2 graph "
                 "estimate subtracted (v1/worker/gpu_worker.py:616-624)", consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism",
                 evidence="carried", null_block_first=True, v2_cudagraph_estimate=True, v2_runner_for_all=True),
    VersionRules("0.31.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None, "no memory rule change found in the sources read; the 0.29 rules apply. Checked in the release wheel: "
                 "util 0.92 (config/cache.py:103), batch tiers (engine/arg_utils.py:2858-2868), the V2 graph "
                 "estimate subtracted (v1/worker/gpu_worker.py:668-676); the profile run now caps allocator block splitting at 20 MiB (gpu_worker.py:612-626: freed "
                 "multi-GiB blocks no longer get pinned as consumed memory)", consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism",
                 evidence="carried", null_block_first=True, v2_cudagraph_estimate=True, v2_runner_for_all=True),
    VersionRules("0.32.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None, "no memory rule change found in the sources read; the 0.29 rules apply. Checked in the release wheel: "
                 "util 0.92 (config/cache.py:102), batch tiers (engine/arg_utils.py:2923-2933), the V2 graph "
                 "estimate subtracted (v1/worker/gpu_worker.py:735-743)", consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism",
                 evidence="carried", null_block_first=True, v2_cudagraph_estimate=True, v2_runner_for_all=True),
    VersionRules("0.33.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None, "no memory rule change found in the sources read; config/cache.py still defaults "
                 "gpu_memory_utilization to 0.92 and block_size to 16 at vllm@002f10e0 (a stored commit after "
                 "0.28: its CacheDType lists turboquant_* and nvfp4_4over6); the 0.29 rules apply. Checked in the release "
                 "wheel: util 0.92 (config/cache.py:215), batch tiers (engine/arg_utils.py:2973-2990), the V2 graph "
                 "estimate subtracted (v1/worker/gpu_worker.py:748-756)",
                 consumed_from_free_memory=True, logged_peak_with_graphs=True, profile="mechanism", evidence="carried", null_block_first=True, v2_cudagraph_estimate=True, v2_runner_for_all=True, batch_gb10_small=True),
    VersionRules("0.34.0", "v1", 0.92, "v1_memory_160", "always", True, True, True, True, "concurrency", False,
                 None, "read in the release wheel (vllm-0.34.0, cp38-abi3 manylinux_2_28): the extensible KV cache, on "
                 "by default on CUDA and ROCm (config/cache.py:395-406; config/vllm.py:3180-3254 turns it off for "
                 "kv_cache_memory_bytes, num_gpu_blocks_override, elastic EP and some KV connectors), sizes the cache "
                 "after warmup and CUDA-graph capture: KV = min(requested - non-KV used, free + committed - margin) "
                 "- transient peak, margin = max(1 GiB (3 on ROCm), 0.75 x transient peak) "
                 "(v1/worker/extensible_kv_cache.py:64-65, 592-618; the transient peak is the profile's, "
                 "gpu_worker.py:946-948, folded with the sizing warmup's, :1087-1092); the graph estimate is "
                 "skipped (v1/worker/gpu/model_runner.py:1121-1125), the real capture (:1103) is in the measured "
                 "use; gpu_memory_utilization defaults to 1.0 with it, 0.92 without (config/cache.py:186, 216, "
                 "495-501), and the start check against free memory is skipped (v1/worker/utils.py:783-786); "
                 "default block size 16 -> 64 (config/cache.py:185). Unchanged: batch tiers "
                 "(engine/arg_utils.py:3007-3043, GB10 on the small tier since 0.33), logged tokens "
                 "(v1/core/kv_cache_utils.py:1141-1157), the V2 sampler's penalty state. Not modelled: the "
                 "torch-reservation growth of the sizing steps (taken as at most the transient peak) and the "
                 "sizing warmup's own peak beyond the profile's (mixed prefill/decode step with prompt logprobs, "
                 "chunked at 1024 rows: v1/worker/gpu/warmup.py:483-526, gpu/sample/prompt_logprob.py:20)",
                 consumed_from_free_memory=True, logged_peak_with_graphs=False, profile="mechanism",
                 null_block_first=True, v2_cudagraph_estimate=True, v2_runner_for_all=True, batch_gb10_small=True,
                 default_block_size=64, extensible_kv_cache=True, evidence="source-only"),
)


def release_of(text: str | None) -> str:
    """The release number of a version string (PEP 440 via packaging): 'v0.24' -> '0.24', '0.26.0rc1' -> '0.26.0',
    '0.8.5.dev169+gce17db808.d20250423' -> '0.8.5'. Refuses what is not a version."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(text).strip()).base_version
    except InvalidVersion:
        raise UsageError(f"vLLM version {shown(text)} is not a version number like 0.26.0") from None


@lru_cache(maxsize=256)
def _key(text: str) -> tuple:
    from packaging.version import Version

    release = Version(release_of(text)).release
    # '0.26' is release 0.26.0: pad so it compares equal to the row, not below it ((0, 26) < (0, 26, 0))
    return release + (0,) * (3 - len(release))


def version_key(text: str) -> tuple:
    """A comparable tuple of the release numbers (0.10.1.1 -> (0, 10, 1, 1))."""
    return _key(text)


@lru_cache(maxsize=256)
def rules_for(version: str) -> VersionRules:
    """The rules of `version`: the newest row whose `since` is at or below it. Versions before 0.4 are refused."""
    key = version_key(version)
    if key < version_key(OLDEST_RELEASE):
        raise UsageError(f"vLLM {version} predates the accounting kvcalc models (0.4.0 and later)")
    return newest_at_or_below(VERSION_RULES, key, version_key)


LAST_V0_RELEASE = "0.10.2"  # V0 was removed after 0.10 (VLLM_USE_V1=0 no longer selects it)
FIRST_V1_RELEASE = "0.7.0"  # V1 could be switched on (VLLM_USE_V1=1) from 0.7


def rules_with_engine(version: str, engine: str | None) -> VersionRules:
    """The rules of `version` run on the engine the user forced (VLLM_USE_V1=0 / 1), where that release had both:
    V0 before 0.11, V1 from 0.7. The other engine's rows are the newest of that engine at or below the version
    (V1 before 0.8: the 0.8.0 row); the default utilization stays the version's."""
    from dataclasses import replace

    rules = rules_for(version)
    if engine in (None, "auto", rules.engine):
        return rules
    key = version_key(version)
    if engine == "v0":
        if key > version_key(LAST_V0_RELEASE):
            raise UsageError(f"vLLM {version} has no V0 engine (removed after {LAST_V0_RELEASE})")
        row = [r for r in VERSION_RULES if r.engine == "v0"][-1]
    elif engine == "v1":
        if key < version_key(FIRST_V1_RELEASE):
            raise UsageError(f"vLLM {version} has no V1 engine (VLLM_USE_V1=1 exists from {FIRST_V1_RELEASE})")
        row = next(r for r in VERSION_RULES if r.engine == "v1")
    else:
        raise UsageError(f"vLLM engine {shown(engine)} is not auto, v0 or v1")
    return replace(row, since=rules.since, default_util=rules.default_util)


def is_newer_than_known(version: str) -> bool:
    return version_key(version) > version_key(NEWEST_RELEASE_KNOWN)


# max_num_batched_tokens / max_num_seqs defaults when the user sets neither, by entry point ("llm": the offline
# LLM class; "serve": the OpenAI server). V0 has one default for both.
def batch_defaults_for(rules: VersionRules, memory_bytes: int, gpu_name: str, entrypoint: str,
                       max_model_len: int, compute_capability: float | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks for this GPU, entry point and max_model_len."""
    if rules.batch_defaults == "v0":
        return max(max_model_len, 2048), 256  # config.py SchedulerConfig (chunked prefill off)
    if rules.batch_defaults in ("v1_memory", "v1_memory_160", "v1_memory_any"):
        if rules.batch_defaults == "v1_memory_160" and memory_bytes >= 160 * 2**30:
            # 0.28 arg_utils.py:2582-2591: 16384 tokens and 1024 seqs for both entry points on >= 160 GiB GPUs
            # (the same at v0.34.0 :3010-3018)
            return 16384, 1024
        # the A100 exclusion from 0.9.0 (arg_utils.py:1495 at v0.9.0; absent at v0.8.5 :1596)
        large = memory_bytes >= 70 * 2**30 and (rules.batch_defaults == "v1_memory_any"
                                                 or "a100" not in gpu_name.lower())
        if large and rules.batch_gb10_small and compute_capability is not None \
                and round(compute_capability, 1) == 12.1:
            large = False  # GB10 (DGX Spark) stays on the small tier from 0.33 (arg_utils.py:2960-2962)
        if large:
            return (16384 if entrypoint == "llm" else 8192), 1024
    return (8192 if entrypoint == "llm" else 2048), 256


def chunked_prefill_on(rules: VersionRules, max_model_len: int) -> bool:
    if rules.chunked_prefill == "always":
        return True
    return rules.chunked_prefill == "long_context" and max_model_len > 32768


# Async scheduling (the engine core schedules step k+1 while step k runs, so a request that arrives during step k
# waits for step k+2) is on by default from v0.14.0: "Async scheduling is now enabled by default ... Excludes some
# not-yet-supported configurations: pipeline parallel" (release notes of v0.14.0, vLLM PR #27614,
# https://github.com/vllm-project/vllm/releases/tag/v0.14.0). Before it the flag was opt-in (--async-scheduling,
# v0.10-v0.13) or absent (V0, V1 up to 0.9): a request waits only for the step in flight to end.
ASYNC_SCHEDULING_SINCE = "0.14.0"


# vllm#37307 (scheduler_reserve_full_isl, default True): a waiting request is admitted only when the blocks of its whole
# prompt are free. In 0.19.0's config/scheduler.py:139 and v1/core/sched/scheduler.py:733, absent from 0.18.0's (read
# from both wheels); before it a request was admitted when its first scheduled chunk's blocks were free (0.8.5:
# v1/core/sched/scheduler.py:362-369)
RESERVE_FULL_PROMPT_SINCE = "0.19.0"


# The V0 engine's CUDA graphs (releases before 0.8.0): worker/model_runner.py _use_captured_graph replays a graph only
# for a decode-only batch (a step with a prefill runs eager) whose longest context is at most max_seq_len_to_capture
# and whose size is at most the largest captured batch (0.6.x: `decode_only and not enforce_eager and
# max_decode_seq_len <= max_seq_len_to_capture and batch_size <= max_batchsize_to_capture`); EngineArgs'
# max_seq_len_to_capture default is 8192 (capped at max_model_len). V1 replays graphs by the step's token count
# instead (vllm_graphs.max_graph_tokens), with torch.compile's pieces for the rest.
V0_MAX_SEQ_LEN_TO_CAPTURE = 8192


def v0_graph_max_context(version: str | None) -> int | None:
    """The longest context a V0 release's decode batch replays a CUDA graph at (None: a V1 release, or none named)."""
    if version and rules_for(version).engine == "v0":
        return V0_MAX_SEQ_LEN_TO_CAPTURE
    return None


def reserve_full_prompt_default(version: str) -> bool:
    """Whether this release's scheduler admits a waiting request only when its whole prompt's KV blocks are free.
    The V0 engine (releases before 0.8.0) always did: its block manager's can_allocate counts the blocks of every
    prompt token (vllm/core/block_manager.py SelfAttnBlockSpaceManager.can_allocate, 0.6.x: num_required_blocks =
    BlockTable.get_num_required_blocks(seq.get_token_ids(), ...), AllocStatus.LATER while free - required is below
    the 1% watermark; the watermark is not modelled), chunked prefill or not; V1 dropped that until 0.19."""
    if rules_for(version).engine == "v0":
        return True
    return version_key(version) >= version_key(RESERVE_FULL_PROMPT_SINCE)


def serial_host_per_seq_s(version: str | None) -> float:
    """Seconds of host work per scheduled sequence per step that the GPU waits for, on this release's default engine.

    V0 (the default engine before 0.8.0, vllm_versions VERSION_RULES) runs the scheduler, the next step's input
    preparation (SequenceGroupMetadata and the input tensors, per sequence), the sampler's Python bookkeeping and the
    output processing (incremental detokenization, stop checks) between two forwards, so its step grows with the
    batch even where the GPU's work does not: throughput.yaml engines.vllm v0_host_per_seq_s, from vllm#6801 (a V0
    profile of August 2024: 'When BS is 200, all this together can be 20ms': sampling, prepare input,
    process_model_output and the scheduler, 0.1 ms a sequence). V1 (0.8.0+) moved that work into a busy loop that
    overlaps the forward (and, from 0.14, async scheduling): 0 there, as before. None (no release named): 0."""
    if not version:
        return 0.0
    if rules_for(version).engine != "v0":
        return 0.0
    from ..constants import load

    return float(load("throughput")["engines"]["vllm"].get("v0_host_per_seq_s", 0.0))


# the first release whose V1 engine replays a full CUDA graph for decode-only steps by default
# (CompilationConfig.cudagraph_mode FULL_AND_PIECEWISE: vllm#25444, merged 2025-09-23, in v0.11.0)
FULL_DECODE_GRAPHS_SINCE = "0.11.0"


def piecewise_decode_floor_s(version: str | None, layers: float) -> float:
    """The CPU's least time per step of a V1 release that replays only piecewise CUDA graphs (0.8.0 to 0.10.x).

    Before vllm#25444 (v0.11.0) the V1 default was CUDAGraphMode.PIECEWISE: the graph is split at every attention op
    and only the pieces between attention layers are captured (vllm#14437, docs/source/design/v1/torch_compile.md: "we only
    capture the cudagraph for the piece of graph between attention operations"), so each decode step replays one
    graph per layer and runs that layer's attention from Python in between: per layer, a graph launch and the
    attention backend's Python (metadata, the cache write and the kernel launch). The GPU runs behind the CPU, so a
    step takes at least `layers` x throughput.yaml engines.vllm piecewise_layer_cpu_s (at the host that figure was
    fitted on). 0 for V0 (its own graph rule), 0.11+, or no release named."""
    if not version or rules_for(version).engine == "v0":
        return 0.0
    if version_key(version) >= version_key(FULL_DECODE_GRAPHS_SINCE):
        return 0.0
    from ..constants import load

    return float(load("throughput")["engines"]["vllm"].get("piecewise_layer_cpu_s", 0.0)) * layers


def async_scheduling_default(version: str, pp: int = 1) -> bool:
    """Whether `vllm serve` of this release schedules asynchronously when the user sets nothing."""
    return version_key(version) >= version_key(ASYNC_SCHEDULING_SINCE) and pp == 1


EVIDENCE_TEXT = {
    "measured": "measured on a GPU (the H200 runs, docs/validation/data/v3)",
    "source": "read from vLLM's source and public start-up logs of the release, not run here",
    "source-only": "read from vLLM's source at the release; no public start-up log of it checked, not run here",
    "carried": "not read line by line: no rule change found in the sources read, so the previous release's rules "
               "apply unverified",
}


def evidence_note(version: str) -> str:
    """One line for explain: what the rules of `version` rest on (measured on a GPU, read from source, carried)."""
    rules = rules_for(version)
    text = f"vLLM {release_of(version)} rules (row {rules.since}): {EVIDENCE_TEXT[rules.evidence]}"
    if rules.evidence != "measured" and version_key(version) > version_key(MEASURED_RELEASE):
        text += f"; the profile mechanism and fitted constants are {MEASURED_RELEASE}'s, measured on the H200"
    return text


def table_markdown() -> str:
    """The rules as a markdown table (docs/method.md)."""
    lines = ["| since | engine | default util | batch defaults | chunked prefill | prefix caching | hybrid KV "
             "manager | CUDA-graph estimate | V2 runner | V2 graphs in budget | logged tokens | others' memory | sampler B/logit | null block "
             "first | evidence | source |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in VERSION_RULES:
        lines.append(f"| {r.since} | {r.engine} | {r.default_util} | {r.batch_defaults} | {r.chunked_prefill} | "
                     f"{'on' if r.prefix_caching else 'off'} | {'yes' if r.hybrid_allocator else 'no'} | "
                     f"{'yes' if r.cudagraph_estimate else 'no'} | {'yes' if r.v2_runner else 'no'} | "
                     f"{('yes' if r.v2_cudagraph_estimate else 'no') if r.v2_runner else '-'} | {r.logged_tokens} | {'from KV' if r.others_reduce_kv else 'must be free'} | "
                     f"{r.sampler_bytes_per_logit or '12 (fitted)'} | {'yes' if r.null_block_first else 'no'} | "
                     f"{r.evidence} | {r.sources} |")
    return "\n".join(lines)
