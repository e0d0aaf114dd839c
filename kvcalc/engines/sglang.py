"""SGLang memory accounting, release-aware (the rows of engines/sglang_versions.py).

SGLang budgets differently from vLLM: it runs no profile forward. `mem_fraction_static` is the share of the free GPU
memory at start-up that weights and the KV pool may take together; activations, CUDA graphs, the req-to-token table
and the sampler live in the rest. Sources (sglang 0.5.4 unless said; other releases' lines in sglang_versions.py):

- model_runner.py:305 `min_per_gpu_memory = self.init_torch_distributed()`: the free memory (GiB,
  torch.cuda.mem_get_info,
  the minimum over ranks) after the CUDA context and NCCL are up, before the weights load (logged as
  "Load weight begin. avail mem=X GB"); :932-939 the weights' "mem usage" is the free memory they took.
- model_runner.py:1383-1431 `profile_max_num_token`: rest = free_after_weights - free_before x
  (1 - mem_fraction_static);
  max_total_num_tokens = int(rest x 2**30 // cell_size), cell_size = bytes of one token across the KV layers of a rank:
  MHA kv_heads_per_rank x head_dim x 2 x layers x element size (heads = max(1, kv_heads // attn_tp)), MLA
  (kv_lora_rank + qk_rope_head_dim) x layers x element size at any TP, DeepSeek V3.2's indexer key (index_head_dim +
  a 4-byte scale per 128) beside it.
- model_runner.py:1647-1655 the req-to-token pool: max_num_reqs = clamp(int(tokens / context_len x 512), 2048, 4096)
  unless --max-running-requests; ReqToTokenPool (mem_cache/memory_pool.py:71-89) is int32 [max_num_reqs,
  context_len + 4], allocated after the token count is fixed (so it comes out of the 1 - mem_fraction_static rest).
- model_runner.py:1680-1684 tokens rounded down to a multiple of page_size; managers/tp_worker.py:279-287
  max_running_requests = min(--max-running-requests // dp (else tokens // 2), req pool size).
- server_args.py `_handle_gpu_memory_settings`: the default mem_fraction_static, chunked_prefill_size and
  cuda_graph_max_bs from the GPU's memory (nvidia-smi memory.total, utils/common.py:1535 get_nvgpu_memory_capacity).
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field

from ..constants import engine_constants
from ..errors import UnsupportedModelError, UsageError
from ..formats import KvFormat, WeightFormat
from ..hardware import GpuProfile
from ..layers import FullAttention, MambaState, MultiLatentAttention, flatten
from ..model import ModelSpec
from ..units import GiB, MiB
from .sglang_versions import DEFAULT_VERSION, SglangRules, rules_for

# nvidia-smi --query-gpu=memory.total (MiB), which SGLang's defaults read (utils/common.py get_nvgpu_memory_capacity);
# a few hundred MiB above the cudaMemGetInfo total kvcalc's profiles hold. Values as nvidia-smi prints them for
# these boards; a GPU not listed uses its driver total in MiB.
SMI_MIB = {"h200": 143771, "h100-sxm": 81559, "h100-pcie": 81559, "h100-nvl": 95830, "a100-80gb": 81920,
           "a100-80gb-pcie": 81920, "a100-40gb": 40960, "l40s": 46068, "l4": 23034, "a10g": 23028, "a10": 23028,
           "t4": 15360, "rtx-4090": 24564, "rtx-3090": 24576, "rtx-5090": 32607, "rtx-a6000": 49140,
           "b200": 183359, "v100-16gb": 16384}

SWA_FULL_TOKENS_RATIO = 0.8  # server_args.py swa_full_tokens_ratio default
KV_DTYPES = {"auto": None, "fp8": 1, "fp8-e5m2": 1}  # kvcalc KV format -> SGLang element bytes (None: model dtype)
# SGLang --quantization names -> kvcalc weight formats (server_args.py QUANTIZATION_CHOICES; Marlin variants are
# kernels for the same checkpoints)
QUANTIZATION = {"awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "marlin": "gptq",
                "fp8": "fp8", "w8a8_fp8": "fp8", "modelopt_fp8": "fp8", "bitsandbytes": "nf4", "w8a8_int8": "w8a8"}
REQ_POOL_EXTRA = 4  # model_runner.py: extra_max_context_len = 4 (+ speculative draft tokens)


@dataclass(frozen=True)
class SglangSettings:
    weights: WeightFormat
    kv: KvFormat
    mem_fraction_static: float | None = None  # None: the release's default for this GPU, TP and chunk size
    context_length: int | None = None  # None: the model's max_position_embeddings
    max_running_requests: int | None = None
    max_total_tokens: int | None = None  # --max-total-tokens: a cap on the pool
    chunked_prefill_size: int | None = None  # None: by GPU memory; -1 or 0 disables chunking
    max_prefill_tokens: int = 16384
    page_size: int | None = None  # None: 1 (FlashMLA 64, cutlass MLA 128, trtllm MLA 64 when chosen)
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    dtype_bytes: int = 2
    version: str = DEFAULT_VERSION
    speculative_algorithm: str | None = None  # EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM
    disable_hybrid_swa_memory: bool = False
    swa_full_tokens_ratio: float = SWA_FULL_TOKENS_RATIO
    kv_fp4: bool = False  # --kv-cache-dtype fp4_e2m1 (0.5.10+): half a byte per element + a scale per 16
    other_processes_bytes: int = 0
    # --enable-piecewise-cuda-graph / --piecewise-cuda-graph-max-tokens while piecewise graphs are opt-in (0.5.4-0.5.9):
    # from 0.5.6 the flag adds a reserve to the default mem_fraction_static (SglangRules.optin_piecewise)
    enable_piecewise_cuda_graph: bool = False
    piecewise_cuda_graph_max_tokens: int | None = None
    # --enable-torch-compile: decode batches up to --torch-compile-max-bs (default 32) replay inductor-compiled graphs
    # (decode_cuda_graph_runner.py compile_bs), and the default piecewise prefill graphs are off ("full torch.compile
    # mode", server_args.py:3008 in 0.5.14; 0.5.10's _handle_piecewise_cuda_graph rule 4), before the memory default
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    # --lora-paths / --enable-lora and --moe-a2a-backend: no memory figure of their own here; they switch the
    # default piecewise prefill graphs off (piecewise_off), as --speculative-algorithm does in 0.5.10
    enable_lora: bool = False
    moe_a2a_backend: str = "none"
    # speculative decoding (engines/sglang_draft.py): --speculative-draft-model-path as given, the draft's config.json
    # when kvcalc could read it (an EAGLE head, a STANDALONE model; None: an EAGLE head of the target's shape), and
    # --speculative-num-steps / --speculative-eagle-topk / --speculative-num-draft-tokens (None: SGLang's choice)
    speculative_draft_model_path: str | None = None
    speculative_draft_config: Any = field(default=None, compare=False)
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    # --disable-overlap-schedule: the scheduler runs event_loop_normal instead of event_loop_overlap (overlap_off)
    disable_overlap_schedule: bool = False

    @property
    def rules(self) -> SglangRules:
        return rules_for(self.version)

    @property
    def attn_tp(self) -> int:
        """get_attention_tp_size(): TP ranks one attention group spans (DP attention splits TP into dp groups)."""
        return self.tensor_parallel // self.dp_size if self.enable_dp_attention else self.tensor_parallel


@dataclass
class SglangEstimate:
    gpu_memory_mib: int  # what SGLang's defaults read (nvidia-smi)
    total_memory: int
    free_at_start: int  # "Load weight begin. avail mem" per rank (min over ranks)
    mem_fraction_static: float
    mem_fraction_source: str
    weights_bytes: int
    kv_budget_bytes: int  # free_at_start x mfs - weights
    cell_bytes: int  # one token across this rank's KV layers (the full layers when hybrid), as the pool is sized
    max_total_num_tokens: int  # logged "max_total_num_tokens=" and "KV Cache is allocated. #tokens"
    swa_tokens: int | None  # hybrid SWA: the sliding layers' pool ("swa_layer_tokens")
    page_size: int
    context_len: int
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    req_pool_size: int
    req_to_token_bytes: int
    max_running_requests: int
    headroom_bytes: int  # free_at_start x (1 - mfs): what activations, graphs and the req table get
    kv_bytes_per_token: int
    fits: bool
    shortfall_bytes: int
    deployment_weights_bytes: int = 0
    deployment_kv_bytes_per_token: int = 0
    notes: list[str] = field(default_factory=list)
    layout: str = "mha"  # mha, mla, hybrid-swa
    pool_cell_bytes: int = 0  # one token as the pool's buffers hold it (NSA fp8: 656 bytes a layer); 0: cell_bytes
    max_prefill_tokens: int = 16384  # --max-prefill-tokens: a prefill batch's input budget (the scheduler's)
    # the largest prefill (extend) batch that replays a piecewise CUDA graph: the release's default piecewise graphs
    # (captured up to the chunk, clamped to --context-length; the start-up log's "Capture target prefill CUDA graph
    # begin. backend=tc_piecewise, num_tokens=[4, ..., 8192]" on 0.5.14) or the opt-in flag's; 0: prefill runs eager
    prefill_graph_max_tokens: int = 0
    # --enable-torch-compile: decode batches up to this replay inductor-compiled graphs, whose fused kernels leave no
    # eager norm chain (eager_norm_kernels); 0 without the flag or without CUDA graphs
    fused_decode_max_bs: int = 0
    # speculative decoding (engines/sglang_draft.py): the drafter's weights per rank as the pool is sized, its own KV
    # pool per rank (max_total_num_tokens x its layers), and (steps, topk, draft tokens)
    speculative_algorithm: str = ""
    draft_weights_bytes: int = 0
    draft_kv_bytes: int = 0
    speculative_params: tuple = ()
    draft_in_budget_bytes: int = 0  # the draft's weights inside the budget (0.5.14); 0 where they come out of the rest
    count_cell_bytes: int = 0  # the bytes per token the pool's size is cut by (the cell scaled for a draft); 0: cell
    # DP attention: the dp schedulers of one server, each with its own pool (max_total_num_tokens) and request cap
    # (max_running_requests = --max-running-requests // dp, model_runner_kv_cache_mixin.py:981-1000 in 0.5.14)
    dp_workers: int = 1
    # the scheduler's loop: event_loop_overlap (True, SGLang's default) or event_loop_normal (overlap_off says why)
    overlap_schedule: bool = True

    @property
    def logged_kv_tokens(self) -> int:
        return self.max_total_num_tokens

    def concurrency_at(self, context: int) -> int:
        """Requests of `context` tokens whose KV fits at once (whole pages each; prefix sharing not counted),
        capped by max_running_requests. Sliding layers' pool holds min(context, window + chunk) per request."""
        if not self.fits or context < 1:
            return 0
        per = -(-context // self.page_size) * self.page_size
        return min(self.max_running_requests, self.max_total_num_tokens // per) * self.dp_workers

    def to_json(self) -> dict:
        keys = ("gpu_memory_mib", "total_memory", "free_at_start", "mem_fraction_static", "mem_fraction_source",
                "weights_bytes", "kv_budget_bytes", "cell_bytes", "max_total_num_tokens", "swa_tokens", "page_size",
                "context_len", "chunked_prefill_size", "cuda_graph_max_bs", "req_pool_size", "req_to_token_bytes",
                "max_running_requests", "headroom_bytes", "kv_bytes_per_token", "fits", "shortfall_bytes",
                "deployment_weights_bytes", "deployment_kv_bytes_per_token", "layout", "speculative_algorithm",
                "draft_weights_bytes", "draft_kv_bytes", "overlap_schedule")
        return {k: getattr(self, k) for k in keys} | {"notes": list(self.notes)}


def gpu_memory_mib(gpu: GpuProfile) -> int:
    """nvidia-smi's memory.total for this GPU (MiB), which SGLang's defaults are computed from."""
    return SMI_MIB.get(gpu.id, gpu.memory_total_bytes // MiB)


def default_chunk_and_graph_bs(rules: SglangRules, gpu_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks by GPU memory (server_args.py; lines in
    sglang_versions.py). Before 0.5.3 the graph size does not enter the memory rule: 160 (8 / 80 under 35 GiB)."""
    if rules.chunk_rule == "25k":
        chunk = 2048 if gpu_mib < 25_000 else 8192
        return chunk, (8 if tp < 4 else 80) if gpu_mib < 25_000 else 160
    if rules.chunk_rule == "35k":
        chunk = 2048 if gpu_mib < 35 * 1024 else 8192 if gpu_mib < 160 * 1024 else 16384
        return chunk, (8 if tp < 4 else 80) if gpu_mib < 35 * 1024 else 160
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 2048, rules.small_gpu_graph_bs if tp < 4 else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def start_context_bytes(gpu: GpuProfile, world: int) -> int:
    """Free memory SGLang does not see at start-up per rank (total - "Load weight begin. avail mem"). One GPU: the
    CUDA context. Tensor parallel over NVLink (SXM/OAM boards): plus NCCL's buffers over NVLink and SGLang's custom
    all-reduce (the 8 x H200 log of sgl-project/sglang PR 11716: "Init torch distributed ends. mem usage=2.01 GB";
    SGLang allocates them with cudaMalloc, NCCL_CUMEM_ENABLE=0 and NCCL_NVLS_ENABLE=0 by default: entrypoints/
    engine.py:356 in 0.4.3.post4, :672-674 in 0.5.4). Over PCIe the custom all-reduce is off beyond two GPUs
    (distributed/device_communicators/custom_all_reduce.py:148-155 in 0.5.4, custom_all_reduce_utils.py:466-470 in
    0.5.14) and NCCL's PCIe buffers are small (4 x L4: "Init torch distributed ends. mem usage=0.13 GB"), so the
    one-GPU context stands."""
    from ..throughput import class_keys

    c = engine_constants("sglang")
    fast_link = class_keys(gpu)["comm"] in ("nvlink", "xgmi")  # the link class the speed model uses
    return int(c["context_bytes_tp"] if world > 1 and fast_link else c["context_bytes"])


# multimodal architectures SGLang serves text-only unless --enable-multimodal (configs/model_config.py
# mm_disabled_models: 0.5.10:156-160, 0.5.14:293-297): not multimodal to the prefill-graph rule
_MM_DISABLED = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                          "Step3VLForConditionalGeneration"})


def piecewise_off(rules: SglangRules, s: SglangSettings, spec: ModelSpec | None = None,
                  gpu: GpuProfile | None = None) -> str:
    """Why SGLang switches its default piecewise prefill graphs off for this configuration ("" when it keeps
    them): 0.5.10's _handle_piecewise_cuda_graph (server_args.py:1078-1139, run at :778 before
    _handle_gpu_memory_settings at :784) and 0.5.14's _disable_tc_piecewise_cudagraph_if_incompatible
    (server_args.py:2998-3057, run from _handle_cuda_graph_config at :2517 before _handle_gpu_memory_settings at
    :2524), so the memory default drops the reserve as well. The conditions kvcalc can express; the others
    (GGUF, CPU offload and hierarchical cache, deterministic inference, PD disaggregation, symmetric memory, the
    expert distribution recorder, context parallelism, DLLM, debug modes) are listed in docs/validation/sglang.md."""
    arch = ((spec.config or {}).get("architectures") or [""])[0] if spec is not None else ""
    if arch in rules.piecewise_off_archs:
        return f"model-arch blacklist ({arch})"
    if rules.piecewise_off_nsa and spec is not None and any(
            isinstance(x, MultiLatentAttention) and x.index_head_dim for x in flatten(spec.layers)):
        return "DeepSeek sparse attention (is_deepseek_nsa)"
    if rules.piecewise_off_speculative and s.speculative_algorithm:
        return "speculative decoding"
    if s.enable_dp_attention:
        return "DP attention"
    if s.enable_torch_compile:
        return "full torch.compile mode"
    if s.pipeline_parallel > 1:
        return "pipeline parallelism (pp_size > 1)"
    if gpu is not None and gpu.vendor != "nvidia":
        return "non-CUDA hardware"
    if s.moe_a2a_backend and s.moe_a2a_backend != "none":
        return "MoE A2A backend"
    if s.enable_lora:
        return "LoRA"
    if spec is not None and spec.encoders and arch not in _MM_DISABLED and arch not in rules.piecewise_mm_kept:
        return "multimodal model"
    return ""


def overlap_off(s: SglangSettings) -> str:
    """Why the scheduler runs event_loop_normal rather than event_loop_overlap ('' when it overlaps, the default:
    managers/scheduler.py:337 enable_overlap = not disable_overlap_schedule, :4091-4094 dispatch_event_loop in
    0.5.14): --disable-overlap-schedule, or a configuration the release's server_args.py switches it off for.

    Speculative decoding, by release (the drafter's EAGLE-family worker without overlap before spec v2):
    - before 0.5.11 every algorithm: 0.4.4 server_args.py:280-284 (EAGLE, NEXTN); 0.5.4 :1302-1303 (EAGLE, EAGLE3,
      STANDALONE without --enable-beta-spec, default off) and :1376 (NGRAM); 0.5.10 :3014-3015 (EAGLE-family without
      SGLANG_ENABLE_SPEC_V2, default False: environ.py:442) and :3104 (NGRAM);
    - 0.5.11 and 0.5.12: NGRAM (0.5.11 :3569, 0.5.12 :3858), and the EAGLE family at --speculative-eagle-topk > 1
      ("spec v2 currently only supports topk = 1": 0.5.11 :3461-3467, 0.5.12 :3749-3755; SGLANG_ENABLE_SPEC_V2 is
      True from 0.5.11, environ.py:459);
    - 0.5.13 and 0.5.14: none (0.5.14's built-in algorithms run spec v2 with overlap; speculative/spec_registry.py:96
      refuses only a plugin algorithm registered without overlap).
    The other switch-offs of 0.5.14 are configurations kvcalc does not model for SGLang: pipeline parallel
    (_handle_pipeline_parallelism, server_args.py:5418-5423; estimate refuses --pp > 1), a Mamba/linear-attention
    model whose radix cache falls back to no_buffer (:4380-4394; estimate refuses Mamba layers), Apple MPS without
    MLX (:2896-2899), SGLANG_EMBEDDINGS_SPARSE_HEAD (:4288-4292) and diffusion LLMs (:6091-6095)."""
    if s.disable_overlap_schedule:
        return "--disable-overlap-schedule"
    algorithm = (s.speculative_algorithm or "").upper()
    if not algorithm:
        return ""
    from .sglang_versions import version_key

    release = version_key(s.version)[:3]
    if release < (0, 5, 11):
        return f"speculative decoding ({algorithm}; SGLang {s.version} runs its drafter without overlap)"
    if release < (0, 5, 13):
        if algorithm == "NGRAM":
            return f"speculative decoding (NGRAM; SGLang {s.version} runs it without overlap)"
        if (s.speculative_eagle_topk or 1) > 1:
            return (f"speculative decoding at --speculative-eagle-topk {s.speculative_eagle_topk} (SGLang "
                    f"{s.version}'s spec v2 overlaps topk 1 only)")
    return ""


def default_piecewise(rules: SglangRules, s: SglangSettings, spec: ModelSpec | None = None,
                      gpu: GpuProfile | None = None) -> bool:
    """Whether the release's default piecewise prefill graphs are captured (and reserved for): on from 0.5.10 unless
    CUDA graphs are off or the configuration is one SGLang switches them off for (piecewise_off)."""
    return rules.piecewise_graph_reserve and not s.disable_cuda_graph and not piecewise_off(rules, s, spec, gpu)


def piecewise_graph_sizes(max_tokens: int, sizes_of: str = "0.5.10") -> list[int]:
    """The token sizes SGLang captures prefill (piecewise) CUDA graphs for, up to max_tokens: 0.5.10's
    server_args.py _generate_piecewise_cuda_graph_tokens (640-4096 step 128, then step 256), or 0.5.14's
    _generate_prefill_cuda_graph_batch_sizes (server_args.py:3384-3400: 576-1024 step 64, 1280-4096 step 256, then
    step 512; 58 sizes up to 8192 where 0.5.10's list has 73)."""
    if sizes_of == "0.5.14":
        sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                 + list(range(576, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256))
                 + list(range(4608, max_tokens + 1, 512)))
    else:
        sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                 + list(range(640, 4096 + 1, 128)) + list(range(4352, max_tokens + 1, 256)))
    return [s for s in sizes if s <= max_tokens]


def optin_piecewise_reserve_mib(rules: SglangRules, s: SglangSettings, chunk: int, mla: bool) -> tuple[int, bool]:
    """MiB the default mem_fraction_static sets aside for --enable-piecewise-cuda-graph while the piecewise graphs
    are opt-in, and whether SGLang adds it after the 10 GiB floor (SglangRules.optin_piecewise cites the lines)."""
    if not s.enable_piecewise_cuda_graph or not rules.optin_piecewise:
        return 0, False
    if rules.optin_piecewise == "quarter":
        return (s.piecewise_cuda_graph_max_tokens or 4096) // 4, True
    max_tokens = s.piecewise_cuda_graph_max_tokens or (2048 if mla and rules.optin_piecewise != "eighth" else chunk)
    if rules.optin_piecewise == "eighth":
        return max_tokens // 8, True
    first = 576 if rules.optin_piecewise == "sizes-0.5.9" else 640
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(first, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256))
             + list(range(4608, max_tokens + 1, 512)))
    return len([x for x in sizes if x <= max_tokens]) * 8, False


# vision encoder families whose transformers config names its block count `depth`, with no num_hidden_layers
# (configuration_qwen2_5_vl.py / configuration_qwen3_vl.py / configuration_qwen3_5.py in transformers 4.57.1, 5.3.0
# and 5.8.1, the releases SGLang 0.5.4-0.5.6, 0.5.10 and 0.5.14 pin): SGLang's getattr falls back to 24 for them
_VIT_DEPTH_FAMILIES = frozenset({"qwen2_5_vl", "qwen3_vl"})


def _vlm_factor(spec: ModelSpec) -> float:
    """server_args.py adjust_mem_fraction_for_vlm: 0.95 x (1 - 0.1 x (ViT complexity / ViT-L/14's - 1)), the
    second factor clamped to [0.8, 1.05]; complexity = layers x hidden^2 of the vision config.

    SGLang reads `getattr(vision_config, "num_hidden_layers", 24)` and `getattr(vision_config, "hidden_size", 1024)`
    on transformers' config object (0.5.4:3598, 0.5.6:4288-4289, 0.5.10:6406, 0.5.14:7007). The vision tower's
    shape comes from the model's encoder (encoders.py; a wrapper config's vision_config is not kept on the text
    ModelSpec). Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 vision configs have `depth` and no num_hidden_layers, so
    SGLang takes 24 for them whatever their depth: sgl-project/sglang PR 11830's Qwen2.5-VL-7B on a B200 logs
    mem_fraction_static=0.7629746875 = 0.851 x 0.95 x (1 - 0.1 x (1280^2 / 1024^2 - 1)); its 32 blocks would give
    0.721. SigLIP (Gemma 3), Gemma 4, Pixtral and Llama 4 vision configs state num_hidden_layers, and SGLang's
    KimiK25VisionConfig sets it (configs/kimi_k25.py:45-68 in 0.5.14)."""
    if not spec.encoders:
        return 1.0
    enc = spec.encoders[0]
    layers = 24 if enc.family in _VIT_DEPTH_FAMILIES else enc.layers
    ratio = layers * enc.width ** 2 / (24 * 1024 ** 2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def default_mem_fraction(rules: SglangRules, gpu_mib: int, s: SglangSettings, chunk: int, graph_bs: int,
                         mla: bool, spec: ModelSpec, gpu: GpuProfile | None = None) -> tuple[float, str]:
    """SGLang's default mem_fraction_static and how it came about (server_args.py, per release)."""
    piecewise = default_piecewise(rules, s, spec, gpu)
    parallel = s.tensor_parallel * s.pipeline_parallel
    if rules.mfs_rule == "tp_only":
        tp = s.tensor_parallel
        mfs = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
        return mfs, f"by TP {tp}"
    if rules.mfs_rule == "tp_table":
        if gpu_mib <= 81920:
            mfs = 0.79 if parallel >= 16 else 0.81 if parallel >= 8 else 0.85 if parallel >= 4 else \
                0.87 if parallel >= 2 else 0.88
        else:
            mfs = 0.88
        if gpu_mib > 96 * 1024:
            mfs = min(mfs + 48 * 1024 * (1 - mfs) / gpu_mib, (gpu_mib - 1024 * 18) / gpu_mib)
        return mfs, f"by TP x PP {parallel} and {gpu_mib:,} MiB"
    if rules.mfs_rule == "bucket":
        if gpu_mib < 35 * 1024:
            reserved = (2.8 + parallel / 10) * 1024
        elif gpu_mib < 90 * 1024:
            reserved = (9.5 + parallel / 2) * 1024
        elif gpu_mib < 160 * 1024:
            reserved = (12 + parallel / 2) * 1024
        else:
            reserved = 32 * 1024
        if s.speculative_algorithm:
            reserved += 6 * 1024 if s.speculative_algorithm.upper() == "STANDALONE" else rules.speculative_reserve_mib
        if s.enable_dp_attention:
            reserved += 4 * 1024
        why = f"reserve {reserved / 1024:.2f} GiB for {gpu_mib:,} MiB at TP x PP {parallel}"
    else:
        tokens = max(chunk, 2048) if chunk > 0 else max(s.max_prefill_tokens, 2048)
        reserved = 512 + tokens * 1.5 + graph_bs * 2 + parallel / 8 * 1024
        if s.enable_dp_attention:
            reserved += graph_bs * s.dp_size * 3 + (graph_bs * s.dp_size * 1.5 if graph_bs > 300 else 0)
        if piecewise:
            top = chunk if chunk > 0 else 4096
            if rules.piecewise_sizes == "0.5.14" and s.context_length:  # server_args.py:3264-3267
                top = min(top, s.context_length)
            if rules.piecewise_sizes == "0.5.14" and s.max_total_tokens:  # server_args.py:3248-3252
                top = min(top, s.max_total_tokens)
            reserved += 1.5 * 1024 if mla else len(piecewise_graph_sizes(top, rules.piecewise_sizes)) * 8
        optin, after_floor = optin_piecewise_reserve_mib(rules, s, chunk, mla)
        if not after_floor:
            reserved += optin
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if s.speculative_algorithm and s.speculative_algorithm.upper() != "NGRAM" and rules.speculative_reserve_mib:
            # 0.5.14 reserves nothing for a drafter, STANDALONE included (server_args.py:3276-3312): it charges the
            # draft's weights and pool to the budget itself (SglangRules.spec_draft_memory)
            reserved += 6 * 1024 if s.speculative_algorithm.upper() == "STANDALONE" else rules.speculative_reserve_mib
        if after_floor:
            reserved += optin
        why = (f"reserve {reserved / 1024:.2f} GiB = 0.5 + 1.5 MiB x {tokens:,} prefill tokens + 2 MiB x "
               f"{graph_bs} graph batch sizes + TP x PP {parallel} / 8 GiB"
               + (" + piecewise graphs" if piecewise else "")
               + (f" + {optin:,.0f} MiB for --enable-piecewise-cuda-graph" if optin else "")
               + (", at least 10 GiB" if gpu_mib > 60 * 1024 else "") + f" of {gpu_mib:,} MiB")
    mfs = round((gpu_mib - reserved) / gpu_mib, 3)
    factor = _vlm_factor(spec) if rules.vlm_adjust else 1.0
    if factor != 1.0:
        mfs *= factor
        why += f"; x {factor:.3f} for the vision tower (adjust_mem_fraction_for_vlm)"
    return mfs, why


def _kv_element_bytes(s: SglangSettings) -> int:
    if s.kv.name not in KV_DTYPES:
        raise UsageError(f"SGLang has no {s.kv.label} cache (--kv-cache-dtype auto, fp8_e4m3, fp8_e5m2"
                         + (", fp4_e2m1" if rules_for(s.version).piecewise_graph_reserve else "") + ")")
    return KV_DTYPES[s.kv.name] or s.dtype_bytes


def _cell(heads_dims: int, layers: int, elem: int, fp4: bool) -> int:
    """model_runner_kv_cache_mixin.py:74-140 (0.5.10): fp4_e2m1 stores half a byte per element plus one scale
    byte per 16 elements."""
    if fp4:
        return heads_dims * layers // 2 + heads_dims * layers // 16
    return heads_dims * layers * elem


def kv_layout(spec: ModelSpec, s: SglangSettings) -> tuple[str, int, int, int, int]:
    """(layout, cell bytes used for the token count, full layers, sliding layers, per-token bytes of one sliding
    layer) for one rank, as SGLang lays the pool out."""
    rules = s.rules
    layers = flatten(spec.layers)
    if any(isinstance(x, MambaState) for x in layers):
        raise UnsupportedModelError(f"{spec.name}: kvcalc does not model SGLang's Mamba/linear-attention pool "
                                    "(HybridReqToTokenPool, max_mamba_cache_size) yet")
    elem = _kv_element_bytes(s)
    mla = [x for x in layers if isinstance(x, MultiLatentAttention)]
    if mla:
        m = mla[0]
        cell = _cell(m.latent_elements_per_token(), len(mla), elem, s.kv_fp4)
        if m.index_head_dim:  # NSA indexer: fp8 key + a 4-byte scale per 128 (NSATokenToKVPool.quant_block_size)
            cell += (m.index_head_dim + m.index_head_dim // 128 * 4) * len(mla)
        return "mla", cell, len(mla), 0, 0
    attn = [x for x in layers if isinstance(x, FullAttention)]
    if not attn:
        raise UnsupportedModelError(f"{spec.name}: no attention layers for SGLang's token pool")
    per_layer = [max(1, x.num_kv_heads // s.attn_tp) * (x.head_dim + x.v_head_dim) for x in attn]
    sliding = [i for i, x in enumerate(attn) if x.kind in ("sliding", "chunked")]
    arch = ((spec.config or {}).get("architectures") or [""])[0]
    hybrid = (rules.hybrid_swa and sliding and len(sliding) < len(attn) and not s.disable_hybrid_swa_memory
              and arch not in rules.swa_opt_out and "Llama4" not in arch)
    if hybrid:
        full_i = [i for i in range(len(attn)) if i not in set(sliding)]
        return ("hybrid-swa", _cell(per_layer[full_i[0]], len(full_i), elem, s.kv_fp4), len(full_i), len(sliding),
                _cell(per_layer[sliding[0]], 1, elem, s.kv_fp4))
    return "mha", sum(_cell(p, 1, elem, s.kv_fp4) for p in per_layer), len(attn), 0, 0


ATTENTION_LINEARS = {"qkv_proj", "q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj",
                     "kv_a_proj_with_mqa", "kv_b_proj"}  # model.py's attention projections (+ "indexer.*")


def attention_linear_bytes(spec: ModelSpec, s: SglangSettings) -> int:
    """Bytes of the attention projections in the weight format (model.py LinearGroup names). A checkpoint format
    with no per-linear layout (its exact total only) is charged its average bytes per parameter."""
    groups = [g for g in spec.linears if g.name in ATTENTION_LINEARS or g.name.startswith("indexer.")]
    if getattr(s.weights, "total_bytes", None):
        from .weights import text_weight_bytes

        per_param = text_weight_bytes(spec, s.weights, s.dtype_bytes) / max(spec.params.total, 1)
        return int(sum(g.in_features * g.out_features * g.count for g in groups) * per_param)
    return sum(s.weights.linear_bytes(g.in_features, g.out_features, s.dtype_bytes) * g.count for g in groups)


# SGLang loads these checkpoint Linears as one tensor (models/*.py: qkv_proj, gate_up_proj; the fused MoE's w13 and
# w2 hold every expert of a layer)
FUSED_TENSORS = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
                 "up_proj": "gate_up_proj", "shared_experts.gate_proj": "shared_experts.gate_up_proj",
                 "shared_experts.up_proj": "shared_experts.gate_up_proj", "experts.gate_proj": "experts.w13_weight",
                 "experts.up_proj": "experts.w13_weight", "experts.gate_up_proj": "experts.w13_weight",
                 "experts.down_proj": "experts.w2_weight"}
REPLICATED_LINEARS = {"router", "q_a_proj", "kv_a_proj_with_mqa"}  # ReplicatedLinear on every rank


def weight_tensor_sizes(spec: ModelSpec, s: SglangSettings) -> list[int]:
    """Bytes of each weight tensor one rank allocates, in load order (layer by layer, then the vocabulary): the
    Linears fused as SGLang holds them and sharded over TP (attention over the attention TP group; K/V heads
    replicated when TP exceeds them), the embedding and an untied lm_head padded to 64 rows. Norms, biases and
    quantization scales are left out: small tensors (a few hundred KiB at most), packed together in the allocator's
    small pool or the free rest of a segment."""
    from .vllm import _padded_vocab

    layout = getattr(s.weights, "layout", None)
    per_param = None
    if layout is None and getattr(s.weights, "total_bytes", None):
        from .weights import text_weight_bytes

        per_param = text_weight_bytes(spec, s.weights, s.dtype_bytes) / max(spec.params.total, 1)
    bits = layout.bits if layout is not None and layout.kind != "dense" else 8 * s.dtype_bytes
    experts = spec.moe.num_experts if spec.moe is not None else 0
    tensors: dict[str, list[int]] = {}  # fused name -> [bytes per tensor, tensors]
    for g in spec.linears:
        # the weight tensor alone (its scales are separate small tensors)
        size = (int(g.in_features * g.out_features * per_param) if per_param is not None
                else -(-g.in_features * g.out_features * bits // 8))
        count = g.count
        if g.name.startswith("experts.") and experts:
            size, count = size * experts, g.count // experts
        if g.name in REPLICATED_LINEARS:
            shards = 1
        elif g.name in ("k_proj", "v_proj"):
            shards = min(s.attn_tp, max(g.out_features // max(spec.head_dim, 1), 1))
        else:
            shards = s.attn_tp if g.name in ATTENTION_LINEARS else s.tensor_parallel
        entry = tensors.setdefault(FUSED_TENSORS.get(g.name, g.name), [0, count])
        entry[0] += size // shards
    sizes = [size for i in range(max((n for _, n in tensors.values()), default=0))
             for size, n in tensors.values() if i < n]
    vocab = _padded_vocab(spec.vocab_size, s.tensor_parallel) * spec.hidden_size * s.dtype_bytes
    return [vocab] + sizes + ([] if spec.tie_word_embeddings else [vocab])


def allocator_rounding_bytes(spec: ModelSpec, s: SglangSettings) -> int:
    """Device memory the weights take beyond their bytes: SGLang reads the weights' "mem usage" and the KV budget
    from the device's free memory (model_runner.py load_model: before - after, torch.cuda.mem_get_info), so PyTorch's
    caching allocator's segment rounding counts (torch_allocator.py). Qwen2.5-32B at TP 4: 0.22 GiB per rank, the
    public 4 x L4 log's 15.54 GiB of weights against 15.27 GiB of parameters; Llama shapes at powers of two: ~0."""
    from .torch_allocator import rounding_bytes

    return rounding_bytes(weight_tensor_sizes(spec, s))


def sglang_weight_bytes(spec: ModelSpec, s: SglangSettings, amd: bool = False) -> int:
    """Weights one rank loads. SGLang's layers are vLLM's (vocab padded to 64: layers/vocab_parallel_embedding.py:36
    DEFAULT_VOCAB_PADDING_SIZE; TP shards projections and the vocabulary; rotary cos/sin cache), so the one weight
    model of engines/vllm.py serves both; on top, the caching allocator's rounding that SGLang's free-memory
    accounting sees (allocator_rounding_bytes)."""
    from .vllm import VllmSettings, vllm_weight_bytes

    v = VllmSettings(weights=s.weights, kv=s.kv, tensor_parallel=s.tensor_parallel, dtype_bytes=s.dtype_bytes)
    # the one weight model's replicated K/V heads (engines/vllm.py replicated_parts; SGLang's QKVParallelLinear is
    # vLLM's); the MLA and router replicas come from replicated_weight_bytes below, SGLang's own
    per_rank = (vllm_weight_bytes(spec, v, kv_heads_only=True) + allocator_rounding_bytes(spec, s)
                + mla_absorbed_bytes(spec, s)
                + replicated_weight_bytes(spec, s, amd))
    if s.attn_tp != s.tensor_parallel:
        # DP attention: each attention group of tp / dp ranks holds a whole copy of the attention projections
        # (layers/dp_attention.py: attention TP = tp_size // dp_size), the MLP stays sharded over all tp ranks
        att = attention_linear_bytes(spec, s)
        per_rank += att // s.attn_tp - att // s.tensor_parallel
    if s.enable_dp_attention and s.tensor_parallel > 1:
        # is_dp_attention_enabled() is the flag itself, so the embedding is whole even at --dp 1
        arch = ((spec.config or {}).get("architectures") or [""])[0]
        if arch in DP_REPLICATED_EMBEDDING:
            # VocabParallelEmbedding(..., enable_tp=not is_dp_attention_enabled()): every rank holds the whole
            # input embedding (the lm_head stays sharded unless --enable-dp-lm-head)
            from .vllm import _padded_vocab

            per_rank += (_padded_vocab(spec.vocab_size, 1) - _padded_vocab(spec.vocab_size, s.tensor_parallel)) \
                * spec.hidden_size * s.dtype_bytes
    return per_rank


# Architectures whose SGLang model file builds the input embedding with enable_tp=not is_dp_attention_enabled()
# (sglang 0.5.4: models/deepseek_v2.py:2647-2651, qwen2.py, qwen2_moe.py (Qwen3-MoE builds on it), gpt_oss.py,
# llama4.py, glm4_moe.py)
DP_REPLICATED_EMBEDDING = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Qwen2ForCausalLM",
    "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM", "Llama4ForCausalLM",
    "Llama4ForConditionalGeneration", "Glm4MoeForCausalLM"})


def _checkpoint_linear_bytes(spec: ModelSpec, s: SglangSettings, g: Any) -> int:
    """Bytes of one Linear group in the weight format; for the checkpoint's own format, in the layout its
    quantization_config gives that module (checkpoint.closed_form_bytes' rule: Kimi-K2.5 keeps self_attn in bf16
    while its experts are int4), taken at layer 0."""
    scheme = getattr(getattr(spec, "checkpoint", None), "scheme", None)
    if getattr(s.weights, "total_bytes", None) and scheme is not None:
        from ..checkpoint import module_paths

        layout = scheme.layout_for(module_paths(g.name, 0, True, spec.model_type), g.name)
        per = (layout.linear_bytes(g.in_features, g.out_features) if layout is not None
               else g.in_features * g.out_features * s.dtype_bytes)
        return per * g.count
    return s.weights.linear_bytes(g.in_features, g.out_features, s.dtype_bytes) * g.count


def replicated_weight_bytes(spec: ModelSpec, s: SglangSettings, amd: bool = False) -> int:
    """What the weights SGLang keeps whole on every rank add over the TP-sharded share the one weight model gives
    them (sglang 0.5.8 wheel): MLA's fused_qkv_a_proj_with_mqa (q_a + kv_a, or kv_a_proj_with_mqa alone) is a
    ReplicatedLinear (models/deepseek_v2.py:1127-1159); the DSA indexer's wq_b, wk and weights_proj are
    ReplicatedLinear, weights_proj in bf16 on CUDA and float32 elsewhere (layers/attention/nsa/nsa_indexer.py:
    170-191); DeepSeek's MoEGate is a bare Parameter of n_routed_experts x hidden (deepseek_v2.py:286-299), and the
    Mixtral / Qwen2-MoE / Qwen3-MoE gates are ReplicatedLinear without a quant_config (mixtral.py:81,
    qwen2_moe.py:182, qwen3_moe.py:248). The attention ones are whole
    per attention group (sharded over attn_tp in the one model), the routers per rank (sharded over tp). GLM-5-FP8
    at TP 8: 0.98 GiB (q_a + kv_a in fp8) + 0.62 GiB (indexer, weights_proj fp32 on ROCm) + 0.20 GiB (routers)."""
    tp, attn_tp = s.tensor_parallel, s.attn_tp
    if tp == 1:
        return 0
    whole_in_group = [g for g in spec.linears
                      if g.name in ("q_a_proj", "kv_a_proj_with_mqa", "indexer.wq_b", "indexer.wk")]
    group_bytes = sum(_checkpoint_linear_bytes(spec, s, g) for g in whole_in_group)
    extra = group_bytes - group_bytes // attn_tp
    mla = [x for x in flatten(spec.layers) if isinstance(x, MultiLatentAttention)]
    indexed = [x for x in mla if x.index_head_dim]
    if indexed:  # weights_proj: hidden -> index heads, counted in bf16 and sharded by the one model
        heads = int((spec.config or {}).get("index_n_heads") or 0)
        params = spec.hidden_size * heads * len(indexed)
        extra += params * (4 if amd else s.dtype_bytes) - params * s.dtype_bytes // attn_tp
    if spec.moe is not None and spec.moe.moe_layers:
        router = spec.moe.num_experts * spec.hidden_size * spec.moe.moe_layers * s.dtype_bytes
        extra += router - router // tp
    for enc in spec.encoders:
        if enc.family == "moonvit":
            # Kimi-K2.5's MoonViT (sglang 0.5.9 models/kimi_k25.py): VisionAttention's qkv/proj are TP-sharded, but
            # each layer's MLP2 is two plain nn.Linear (kimi_vl_moonvit.py:389-400) and the projector two
            # ReplicatedLinear (kimi_k25.py:557-567): all but the attention is whole on every rank
            attention = enc.layers * 4 * (enc.width ** 2 + enc.width)
            whole = (enc.params - attention) * s.dtype_bytes
            extra += whole - whole // tp
    return extra


def mla_absorbed_bytes(spec: ModelSpec, s: SglangSettings) -> int:
    """MLA's absorbed up-projections: after loading, SGLang splits kv_b_proj into w_kc and w_vc for the decode
    path, dequantized to bf16 from an fp8 block checkpoint, and keeps kv_b_proj for prefill (models/deepseek_v2.py
    post_load_weights, 0.5.4:2987-3090): per layer and attention rank heads x (qk_nope + v_head) x kv_lora_rank
    bf16 elements more. DeepSeek V3.2 at DP attention 8: 61 x 128 x 256 x 512 x 2 B = 1.91 GiB per rank."""
    mla = [x for x in flatten(spec.layers) if isinstance(x, MultiLatentAttention)]
    if not mla:
        return 0
    m = mla[0]
    heads = max(1, m.num_heads // s.attn_tp)
    return len(mla) * heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank * 2


NSA_FP8_KV_DIM = 656  # mem_cache/memory_pool.py:1248-1252 (0.5.4): fp8 latent 512 + 4 fp32 scales + bf16 rope 64


def nsa_fp8_pool_cell(spec: ModelSpec, s: SglangSettings, cell: int) -> int:
    """Bytes per token the NSA pool's buffers hold: with an fp8 cache each layer stores 656 bytes (FlashMLA's fp8
    layout), while profile_max_num_token sizes the pool with kv_lora_rank + qk_rope_head_dim bytes
    (model_runner.py:1400-1415): the token count follows `cell`, the allocation (and "KV size") this."""
    mla = [x for x in flatten(spec.layers) if isinstance(x, MultiLatentAttention)]
    if not mla or _kv_element_bytes(s) != 1 or s.kv_fp4:
        return cell
    return cell + (NSA_FP8_KV_DIM - mla[0].latent_elements_per_token()) * len(mla)


def _nsa_settings(spec: ModelSpec, gpu: GpuProfile, s: SglangSettings) -> SglangSettings:
    """DeepSeek sparse attention (an indexer beside MLA: DeepSeek V3.2, GLM-5): what SGLang's
    _handle_model_specific_adjustments sets, per release (SglangRules.nsa_mode cites the lines): DP attention with
    dp = tp and pages of 64 (0.5.4-0.5.5), the DP-attention flag with dp as given (0.5.6-0.5.7), or TP attention
    with pages of 64 on CUDA and 1 on ROCm (0.5.8+); with --kv-cache-dtype auto an fp8 cache on sm >= 10
    (Blackwell), bf16 elsewhere (ROCm included: torch reports gfx950 as 9.x)."""
    from dataclasses import replace

    if not any(isinstance(x, MultiLatentAttention) and x.index_head_dim for x in flatten(spec.layers)):
        return s
    kv = s.kv
    if (gpu.compute_capability or 0) >= 10 and kv.name == "auto":
        from ..formats import kv_format

        kv = kv_format("fp8")
    mode = s.rules.nsa_mode
    if mode == "dp":
        return replace(s, enable_dp_attention=True, dp_size=s.tensor_parallel, page_size=s.page_size or 64, kv=kv)
    if mode == "dp-flag":
        return replace(s, enable_dp_attention=True, page_size=s.page_size or 64, kv=kv)
    return replace(s, page_size=s.page_size or (1 if gpu.vendor == "amd" else 64), kv=kv)


# SGLang model implementations whose norms run as eager PyTorch chains (issue 20, the time part). Gemma 3's
# Gemma3RMSNorm.forward_cuda returns forward_native (layers/layernorm.py:826-849 in 0.5.14; the same in 0.5.4, 0.5.8
# and 0.5.10): x.float(), pow(2), mean(-1), + eps, rsqrt, x * rsqrt, weight.float(), 1.0 + w, x * (1 + w), type_as:
# 10 kernels where a fused norm is one. models/gemma3_causal.py runs six per decoder layer (input_layernorm, q_norm,
# k_norm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm, :230-395) and one after
# the last layer (:661), and adds each residual on its own (`residual + hidden_states`, twice a layer). The decode
# CUDA graph ("backend=full") and the piecewise prefill graphs (tc_compiler='eager' in the start-up log's
# server_args: no inductor fusion) capture every one of those kernels, so each still costs the GPU a kernel's time.
# SGLang's main has since fused them (sgl-project/sglang#32383, July 2026: the 2-D norms and the residual path, 105 of
# Gemma 3 1B's 157 norm calls; #32670, open: the q/k norms), after 0.5.14: a release with #32383 keeps only the
# q/k chains, which this rule (0.5.4-0.5.14's code) does not know yet.
EAGER_NORM_MODEL_TYPES = frozenset({"gemma3", "gemma3_text"})
EAGER_NORM_KERNELS = 10  # Gemma3RMSNorm.forward_native's kernels
EAGER_NORMS_PER_LAYER = 6


def eager_norm_kernels(spec: ModelSpec) -> tuple[int, float]:
    """(kernels a forward launches beyond a fused implementation's, their extra bytes per token) of SGLang's model
    implementation (EAGER_NORM_MODEL_TYPES; (0, 0.0) for every other architecture). Per norm of width w: 9 kernels
    more than one fused norm, and 36 w bytes per token more (bf16 in, float32 between the steps: 40 w read and
    written against a fused norm's 4 w); each unfused residual add one kernel and 6 w bytes (two bf16 reads, one
    write). The widths: hidden for the four layer norms and the final norm, heads x head_dim for q_norm and k_norm."""
    if spec.model_type not in EAGER_NORM_MODEL_TYPES:
        return 0, 0.0
    extra = EAGER_NORM_KERNELS - 1
    h, hq, hk = spec.hidden_size, spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    kernels = spec.num_layers * (EAGER_NORMS_PER_LAYER * extra + 2) + extra
    per_layer = 4 * 36 * h + 36 * (hq + hk) + 2 * 6 * h
    return kernels, float(spec.num_layers * per_layer + 36 * h)


# Gemma 3's rotary embedding in SGLang 0.5.14 (models/gemma3_causal.py:288) is apply_rotary_pos_emb_native, a
# function under @torch.compile(dynamic=True, backend=get_compiler_backend()) (layers/rotary_embedding/utils.py:73-94):
# q.float(), k.float(), cos/sin unsqueeze().float(), then q * cos + rotate_half(q) * sin (rotate_half: neg + cat,
# :66-70) and the same for k, cast back: 16 kernels where inductor makes one. The decode graph ("backend=full")
# captures the model run eagerly, so that inner torch.compile runs inductor's fused kernel; the piecewise prefill
# graphs trace the whole forward with torch.compile and compile it with tc_compiler "eager" (model_executor/
# cuda_graph_config.py:80), and a torch.compile'd function called inside a traced region is inlined into it, so in a
# prefill step the 16 kernels run unfused, in float32.
EAGER_ROPE_KERNELS = 16


def prefill_eager_rope_kernels(spec: ModelSpec) -> tuple[int, float]:
    """(kernels, bytes per token) of Gemma 3's unfused rotary embedding in SGLang's piecewise prefill graphs, beyond
    the fused kernel decode runs ((0, 0.0) for every other architecture). Per layer and token, for q of width
    hq = heads x head_dim (k alike, hk): the float casts 6 hq (2 read, 4 written), q * cos 8 hq, the negated half 4 hq,
    the cat 8 hq, * sin 8 hq, the add 12 hq, the cast back 6 hq: 52 hq; and cos, sin (head_dim d each, bf16) cast
    to float and read by the four products: 28 d."""
    if spec.model_type not in EAGER_NORM_MODEL_TYPES:
        return 0, 0.0
    hq, hk = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    return spec.num_layers * EAGER_ROPE_KERNELS, float(spec.num_layers * (52 * (hq + hk) + 28 * spec.head_dim))


def estimate(spec: ModelSpec, gpu: GpuProfile, s: SglangSettings) -> SglangEstimate:
    """Predict what SGLang logs at start-up ("KV Cache is allocated. #tokens: N", "max_total_num_tokens=N, ...,
    max_running_requests=M") for this model, GPU and settings."""
    rules = s.rules
    if "vllm" not in s.weights.engines:
        raise UsageError(f"SGLang does not load {s.weights.label} weights (kvcalc models the formats both servers "
                         "load)")
    if s.tensor_parallel < 1 or s.dp_size < 1:
        raise UsageError("--tp and --dp must be at least 1")
    if s.pipeline_parallel != 1:
        raise UnsupportedModelError("kvcalc models SGLang at --pp 1 (its pipeline ranks each size their own pool "
                                    "and take the smallest; not modelled yet)")
    if s.enable_dp_attention and s.tensor_parallel % s.dp_size:
        raise UsageError(f"--dp {s.dp_size} must divide --tp {s.tensor_parallel} with DP attention")
    if s.mem_fraction_static is not None and not 0 < s.mem_fraction_static < 1:
        raise UsageError(f"--mem-fraction-static must be in (0, 1), got {s.mem_fraction_static}")
    asked = s  # the memory defaults see the flags as given: server_args.py runs _handle_gpu_memory_settings before
    # _handle_model_specific_adjustments turns DP attention on for NSA (0.5.4:544/551, 0.5.14:2524/2533)
    forced = _nsa_settings(spec, gpu, s)
    nsa = forced is not s
    if nsa:
        s, rules = forced, forced.rules
    c = engine_constants("sglang")
    gpu_mib = gpu_memory_mib(gpu)
    default_chunk, default_bs = default_chunk_and_graph_bs(rules, gpu_mib, s.tensor_parallel)
    chunk = s.chunked_prefill_size if s.chunked_prefill_size is not None else default_chunk
    graph_bs = s.cuda_graph_max_bs or default_bs
    layout, cell, n_full, n_swa, swa_cell = kv_layout(spec, s)
    pool_cell = nsa_fp8_pool_cell(spec, s, cell) if nsa else cell
    notes: list[str] = []
    from . import sglang_draft

    draft = sglang_draft.drafter(spec, s, kv_layout, sglang_weight_bytes)
    if nsa:
        how = (f"DP attention (dp = tp = {s.tensor_parallel})" if s.rules.nsa_mode == "dp" else
               f"the DP-attention flag at dp {s.dp_size}" if s.rules.nsa_mode == "dp-flag" else "TP attention")
        notes.append(f"DeepSeek sparse attention: SGLang {s.version} runs {how}, pages of {s.page_size} and a "
                     f"{s.kv.label} cache (server_args.py)")
    if s.enable_dp_attention and s.attn_tp != s.tensor_parallel:
        notes.append(f"DP attention: {s.dp_size} attention groups of {s.attn_tp} rank(s); every group holds the whole "
                     "attention weights and KV heads of its TP size")
    if s.mem_fraction_static is None:
        mfs, why = default_mem_fraction(rules, gpu_mib, asked, chunk, graph_bs, layout == "mla", spec, gpu)
        source = f"SGLang {s.version}'s default: {why} (server_args.py)"
    else:
        mfs, source = s.mem_fraction_static, "--mem-fraction-static"
    if rules.multimodal_mfs_factor != 1.0 and spec.encoders:  # ModelRunner, before 0.4.10 (sglang_versions.py)
        mfs *= rules.multimodal_mfs_factor
        source += f", x {rules.multimodal_mfs_factor} for a multimodal model (model_runner.py)"
    notes.append(f"mem_fraction_static {mfs:.3f}: {source}")
    world = s.tensor_parallel * s.pipeline_parallel
    context = start_context_bytes(gpu, world)
    total = gpu.memory_total_bytes
    free = total - context - s.other_processes_bytes
    weights = sglang_weight_bytes(spec, s, amd=gpu.vendor == "amd")
    budget = int(free * mfs) - weights
    count_cell = cell  # the bytes per token the pool's size is cut by
    in_budget = draft is not None and draft.has_model and rules.spec_draft_memory == "budget"
    if in_budget:
        budget -= draft.weights_bytes  # loaded before the pool is sized (sglang_draft.py)
        if draft.path_set and layout != "hybrid-swa" and n_full:
            count_cell = int(cell * (1 + draft.layers / n_full))  # pool_configurator.py:129-145
    tokens = max(budget, 0) // count_cell
    if s.max_total_tokens:
        tokens = min(tokens, s.max_total_tokens)
    page = s.page_size or 1
    context_len = s.context_length or spec.max_position_embeddings
    swa_tokens = None
    if layout == "hybrid-swa":
        # model_runner.py:1560-1576 (0.5.4) / kv_cache_mixin.py:313-366 (0.5.10): full = memory / (F x n_full +
        # r x S x n_swa), swa = full x r
        memory = tokens * cell
        full = int(memory / (cell + s.swa_full_tokens_ratio * swa_cell * n_swa))
        swa_tokens = int(full * s.swa_full_tokens_ratio) // page * page
        tokens = full
        notes.append(f"hybrid SWA pools: {n_full} full-attention layers hold {full // page * page:,} tokens, "
                     f"{n_swa} sliding layers {swa_tokens:,} (swa_full_tokens_ratio {s.swa_full_tokens_ratio})")
    elif any(x.kind in ("sliding", "chunked") for x in flatten(spec.layers) if isinstance(x, FullAttention)):
        notes.append(f"SGLang {s.version} keeps every sliding-window layer at full length for this model "
                     "(one pool: disable_hybrid_swa_memory)")
    tokens = tokens // page * page
    if layout == "mla":
        notes.append("MLA: one latent (kv_lora_rank + qk_rope_head_dim) per token and layer, the same on every rank")
    if s.tensor_parallel > spec.num_kv_heads and layout != "mla":
        notes.append(f"tp {s.tensor_parallel} > {spec.num_kv_heads} KV heads: each rank keeps one replicated head")

    estimated = max(min(int(tokens / max(context_len, 1) * 512), 4096), 2048)
    extra = 1 if rules.req_pool_extra_slot else 0
    # speculative decoding sets max_running_requests to 48 unless it is given (sglang_draft.py)
    asked_running = s.max_running_requests or (sglang_draft.SPEC_MAX_RUNNING_REQUESTS if draft else None)
    if asked_running:
        pool = min(asked_running // (s.dp_size if s.enable_dp_attention else 1), estimated) \
            if rules.clamped_requests else asked_running + extra
        running = min(asked_running // (s.dp_size if s.enable_dp_attention else 1), pool)
    else:
        pool = min(estimated, tokens // 2) if rules.clamped_requests else estimated + extra
        running = min(tokens // 2, pool)
    row_extra = REQ_POOL_EXTRA + (draft.draft_tokens if draft else 0)  # mem_cache/common.py:251-267
    req_bytes = pool * (context_len + row_extra) * 4
    draft_kv = 0
    if draft is not None:
        if draft.has_model and rules.spec_pool_inflate and tokens > 0:
            # draft_runner_cache_size (0.5.4 model_runner.py:1666-1687): the shared token indices grow for the
            # draft and verify tokens of every request slot
            tokens = (tokens + pool * (draft.steps * draft.topk + draft.draft_tokens)
                      + sglang_draft.POOL_INFLATE_BUFFER) // page * page
        draft_kv = tokens * draft.cell_bytes
        if not s.max_running_requests:
            notes.append(f"speculative decoding: max_running_requests {sglang_draft.SPEC_MAX_RUNNING_REQUESTS} "
                         "(SGLang's value under speculative decoding unless --max-running-requests is given, "
                         "arg_groups/speculative_hook.py:270-275)")
        notes.append(f"speculative decoding ({draft.algorithm}, steps {draft.steps}, topk {draft.topk}, "
                     f"{draft.draft_tokens} draft tokens): {draft.described}"
                     + (f"; {draft.weights_bytes / GiB:.2f} GiB of draft weights per rank while the pool is sized "
                        f"({draft.kept_bytes / GiB:.2f} GiB once it shares the target's embedding and lm_head) and "
                        f"a draft pool of {tokens:,} tokens x {draft.cell_bytes:,} B = {draft_kv / GiB:.2f} GiB"
                        if draft.has_model else ""))
        if draft.has_model and in_budget:
            reserved = tokens * (count_cell - cell)
            notes.append(f"SGLang {s.version} loads the draft before sizing the pool: its weights come out of the "
                         "mem_fraction_static budget"
                         + (f", and the cell is {count_cell:,} B for {draft.layers} draft layer(s) beside "
                            f"{n_full} (pool_configurator.py)" if count_cell != cell else
                            "; the draft's pool is not in the pool's sizing (a hybrid sliding-window pool, or no "
                            "draft path): it comes out of the rest")
                         + (f"; the draft's pool takes {(draft_kv - reserved) / GiB:.2f} GiB more than that "
                            "reserved, out of the 1 - mem_fraction_static rest" if draft_kv - reserved > MiB else ""))
        elif draft.has_model:
            notes.append(f"SGLang {s.version} sizes the target's pool before it loads the draft: the draft's weights "
                         f"and pool ({(draft.weights_bytes + draft_kv) / GiB:.2f} GiB) come out of the "
                         "1 - mem_fraction_static rest, beside the req-to-token table")
    headroom = free - int(free * mfs)
    notes.append(f"req-to-token table: {pool:,} requests x {context_len + row_extra:,} int32 = "
                 f"{req_bytes / GiB:.2f} GiB, outside mem_fraction_static (ReqToTokenPool)")
    if req_bytes > headroom:
        notes.append(f"the req-to-token table alone ({req_bytes / GiB:.2f} GiB) exceeds the "
                     f"{headroom / GiB:.2f} GiB that 1 - mem_fraction_static leaves: lower --context-length or "
                     "--max-running-requests, or SGLang runs out of memory at start")
    elif draft is not None and draft.has_model:
        outside = req_bytes + (draft_kv - tokens * (count_cell - cell) if in_budget else
                               draft.weights_bytes + draft_kv)
        if outside > headroom:
            notes.append(f"the req-to-token table and the draft's share outside the budget ({outside / GiB:.2f} GiB) "
                         f"exceed the {headroom / GiB:.2f} GiB that 1 - mem_fraction_static leaves: SGLang runs out "
                         "of memory at start or in its CUDA-graph capture; lower --mem-fraction-static")
    notes.append(f"CUDA context and NCCL outside the budget: {c['source']}")
    fits = tokens > 0
    shortfall = 0 if fits else count_cell - budget
    if not fits:
        notes.append(f"weights ({(weights + (draft.weights_bytes if in_budget else 0)) / GiB:.2f} GiB"
                     + (", the draft's included" if in_budget else "")
                     + f") leave no KV pool under mem_fraction_static {mfs:.3f} of {free / GiB:.2f} GiB free: SGLang stops with 'Not enough memory. Please try to increase "
                     "--mem-fraction-static'")
    kv_per_token = int(cell) if layout != "hybrid-swa" else int(cell + swa_cell * n_swa)
    kv_per_token += draft.cell_bytes if draft is not None else 0  # the draft's attention layers, as vLLM's ledger
    prefill_graphs = 0
    off = piecewise_off(rules, asked, spec, gpu) if rules.piecewise_graph_reserve and not s.disable_cuda_graph else ""
    if off:
        notes.append(f"prefill CUDA graphs off: SGLang {s.version} switches its piecewise prefill graphs off for "
                     f"{off} (server_args.py), so prefill runs eager and the default mem_fraction_static reserves "
                     "nothing for them")
    if default_piecewise(rules, asked, spec, gpu):
        # MLA models capture to 2,048 tokens whatever the chunk ("the introduction of piecewise cuda graph will
        # influence the kernel dispatch": server_args.py:3239-3246 in 0.5.14, :3589-3593 in 0.5.15.post1, :4020-4024
        # in 0.5.16, :4727-4731 in 0.5.17; piecewise_cuda_graph_max_tokens = 2048 in the releases before), so a larger
        # prefill batch of DeepSeek-V2-Lite runs eager (the H200 logs: "cuda graph: False" for its 7,168 and 8,192-token
        # batches, captured num_tokens up to 2048)
        prefill_graphs = 2048 if layout == "mla" else chunk if chunk > 0 else 4096
        if rules.piecewise_sizes == "0.5.14" and s.context_length:  # server_args.py:3264-3267
            prefill_graphs = min(prefill_graphs, s.context_length)
        if rules.piecewise_sizes == "0.5.14" and s.max_total_tokens:  # server_args.py:3248-3252
            prefill_graphs = min(prefill_graphs, s.max_total_tokens)
    elif not s.disable_cuda_graph and s.enable_piecewise_cuda_graph:
        prefill_graphs = s.piecewise_cuda_graph_max_tokens or (chunk if chunk > 0 else 4096)
    no_overlap = overlap_off(s)
    if no_overlap:
        notes.append(f"overlap scheduler off ({no_overlap}): SGLang runs its normal loop (event_loop_normal): each "
                     "step's result is processed before the next step is built, so the workload's simulation has no "
                     "result lag and a request that arrives during a step joins the next one (serve_sim NORMAL "
                     "LOOP). The scheduler's own CPU time between steps, which this loop leaves serial with the GPU, "
                     "has no figure in kvcalc and is not in the times: TPOT and throughput are optimistic for it")
    return SglangEstimate(
        overlap_schedule=not no_overlap,
        prefill_graph_max_tokens=prefill_graphs,
        fused_decode_max_bs=min(s.torch_compile_max_bs, graph_bs) if s.enable_torch_compile and not s.disable_cuda_graph
        else 0,
        gpu_memory_mib=gpu_mib, total_memory=total, free_at_start=free, mem_fraction_static=mfs,
        mem_fraction_source=source, weights_bytes=weights, kv_budget_bytes=budget, cell_bytes=cell,
        max_total_num_tokens=tokens, swa_tokens=swa_tokens, page_size=page, context_len=context_len,
        chunked_prefill_size=chunk, cuda_graph_max_bs=graph_bs, req_pool_size=pool, req_to_token_bytes=req_bytes,
        max_running_requests=running, headroom_bytes=headroom, kv_bytes_per_token=kv_per_token, fits=fits,
        shortfall_bytes=shortfall,
        deployment_weights_bytes=(weights + (draft.kept_bytes if draft is not None else 0)) * world,
        speculative_algorithm=draft.algorithm if draft is not None else "",
        draft_weights_bytes=draft.weights_bytes if draft is not None else 0, draft_kv_bytes=draft_kv,
        speculative_params=(draft.steps, draft.topk, draft.draft_tokens) if draft is not None else (),
        draft_in_budget_bytes=draft.weights_bytes if in_budget else 0,
        count_cell_bytes=count_cell if count_cell != cell else 0,
        dp_workers=s.dp_size if s.enable_dp_attention else 1,
        deployment_kv_bytes_per_token=kv_per_token * s.tensor_parallel,
        notes=notes, layout=layout, pool_cell_bytes=pool_cell, max_prefill_tokens=s.max_prefill_tokens)
