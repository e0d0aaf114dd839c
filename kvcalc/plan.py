"""The decision table: configurations x engines -> memory, capacity, speed, quality risk, verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any

from . import limits
from .checkpoint import baseline_weights, weights_note
from .engines.vllm_encoders import encoder_modalities
from .engines import hf as hf_engine
from .engines import sglang as sglang_engine
from .engines import vllm as vllm_engine
from .engines.vllm_versions import is_newer_than_known, rules_for, rules_with_engine
from .engines.vllm_support import unserved_gate, unserved_reason
from .errors import UnsupportedModelError, UsageError, shown
from .engines.vllm_specs import vllm_kv_refusal
from .formats import KvFormat, WeightFormat, kv_format, weight_format
from .hardware import GpuProfile
from .engines.hf import hf_cache_bytes
from .model import ModelSpec
from .quality import quality_cell
from .throughput import DecodeEstimate, decode_speed
from .workload import ASSUMPTIONS as WORKLOAD_ASSUMPTIONS
from .workload import BenchEstimate, Workload, hf_bench, vllm_bench

SCHEMA = "kvcalc.plan/1"


def resolve_vllm_version(text: str | None) -> str:
    """--vllm-version as packaging reads version numbers (PEP 440): '' or None is the default, 'v0.24' is 0.24,
    '0.26.0rc1' follows the 0.26.0 rules; anything else ('abc', '-1', '32k') is refused. The rules go by release
    number, and versions before 0.9.1 (no V1 engine accounting) are refused by the engine."""
    from packaging.version import Version

    if text is None or not str(text).strip():
        return vllm_engine.DEFAULT_VERSION
    try:
        version = Version(str(text).strip())
    except ValueError:  # InvalidVersion, or a 5,000-digit part past the interpreter's integer-digit limit
        raise UsageError(f"--vllm-version {shown(text)} is not a version number like "
                         f"{vllm_engine.DEFAULT_VERSION}") from None
    release = version.base_version
    vllm_engine.parse_version(release)  # refuses versions kvcalc has no rules for (before 0.4.0)
    return release


# vLLM --quantization names -> kvcalc weight formats (model_executor/layers/quantization/__init__.py names; the
# Marlin variants are kernels for the same checkpoints)
VLLM_QUANTIZATION = {"awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "fp8": "fp8",
                     "fbgemm_fp8": "fp8", "bitsandbytes": "nf4", "none": "bf16"}
# vLLM --dtype -> bytes per element of the model's activations and unquantized weights (config/model.py)
VLLM_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float": 4,
                    "float32": 4, "fp32": 4}
ENTRYPOINTS = {"serve": "serve", "offline": "llm"}  # --entrypoint -> vLLM's usage context (OPENAI_API_SERVER, LLM_CLASS)


def weights_for_quantization(name: str) -> str:
    """The kvcalc weight format for vLLM's --quantization NAME; one clear line for methods kvcalc does not model."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in VLLM_QUANTIZATION:
        raise UsageError(f"--quantization {shown(name)}: kvcalc models {', '.join(sorted(VLLM_QUANTIZATION))} "
                         "(use --weights for kvcalc's own formats)")
    return VLLM_QUANTIZATION[key]


def speculative_settings(config: str | dict | None, read_files: bool = True) -> dict | None:
    """vLLM's --speculative-config (a JSON object): its method (ngram, eagle, eagle3, mtp; vLLM's 'deepseek_mtp' and
    the other *_mtp names are mtp) and num_speculative_tokens. One clear line for anything else. read_files=False
    never reads an EAGLE head's local config (the head then has the target's shape, as for a hub id)."""
    if config is None or config == "":
        return None
    if isinstance(config, str):
        import json

        try:
            config = json.loads(config)
        except ValueError:
            raise UsageError(f"--speculative-config {shown(config)} is not JSON, e.g. "
                             '\'{"method": "ngram", "num_speculative_tokens": 4}\'') from None
    if not isinstance(config, dict):
        raise UsageError("--speculative-config must be a JSON object")
    method = str(config.get("method") or "").lower()
    if method.endswith("_mtp"):
        method = "mtp"
    if method not in vllm_engine.SPECULATIVE_METHODS:
        raise UsageError(f"--speculative-config method {shown(config.get('method'))}: kvcalc models "
                         f"{', '.join(vllm_engine.SPECULATIVE_METHODS)}")
    k = config.get("num_speculative_tokens", 1)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise UsageError(f"--speculative-config num_speculative_tokens must be 1-64, got {shown(k)}")
    out = {"method": method, "num_speculative_tokens": k}
    if "draft_config" in config:  # already read (a PlanRequest copied by dataclasses.replace: fit's steps)
        out["draft_config"] = config["draft_config"]
    elif method in ("eagle", "eagle3") and isinstance(config.get("model"), str) and read_files:
        out["draft_config"] = draft_config_at(config["model"])
    return out


def draft_config_at(model: str) -> dict | None:
    """The EAGLE head's config.json when speculative_config.model is a local folder or file (read as data, one line
    on bad input); None for a hub id (not fetched: the head is then assumed to have the target's shape)."""
    from .model import local_config_at

    return local_config_at(model)


def dtype_bytes_for(name: str | None) -> int:
    if name is None:
        return 2
    key = str(name).strip().lower()
    if key not in VLLM_DTYPE_BYTES:
        raise UsageError(f"--dtype {shown(name)} is not one of vLLM's: auto, bfloat16, float16, half, float32")
    return VLLM_DTYPE_BYTES[key]


def parallel_refusal(spec: ModelSpec, tp: int, pp: int = 1, engines: tuple[str, ...] = ("vllm",)) -> str | None:
    """Why vLLM refuses this TP x PP size for this model, or None. vLLM checks, at start-up:
    - the attention heads split evenly over TP ranks (vllm/config/model.py, ModelConfig.verify_with_parallel_config:
      "Total number of attention heads must be divisible by tensor parallel size");
    - the KV heads split evenly, or each rank holds one replicated KV head when TP exceeds them
      (vllm/model_executor/layers/linear.py, QKVParallelLinear: num_kv_heads % tp == 0 or tp % num_kv_heads == 0);
    - every pipeline stage holds at least one layer (vllm/distributed/utils.py, get_pp_indices splits
      num_hidden_layers // pp layers per stage).
    SGLang's model files shard the same way (their attention asserts total_num_heads % tp_size == 0), so the message
    names the engines asked for."""
    named = [{"vllm": "vLLM", "sglang": "SGLang"}.get(e, e) for e in engines if e != "hf"] or ["vLLM"]
    who, verb = " and ".join(named), "require" if len(named) > 1 else "requires"
    if tp > 1 and spec.num_heads % tp:
        sizes = ", ".join(str(n) for n in range(1, min(spec.num_heads, 64) + 1) if spec.num_heads % n == 0)
        return (f"--tp {tp} does not divide {spec.name}'s {spec.num_heads} attention heads, and {who} {verb} it; "
                f"TP sizes that do: {sizes}")
    kv = spec.num_kv_heads
    if tp > 1 and kv and (kv % tp if tp <= kv else tp % kv):
        return (f"--tp {tp} neither divides {spec.name}'s {kv} KV heads nor is a multiple of them, and {who} {verb} "
                "one or the other")
    if pp > spec.num_layers:
        return (f"--pp {pp} is more pipeline stages than {spec.name}'s {spec.num_layers} layers: each stage needs "
                "at least one layer")
    return None


@dataclass(frozen=True)
class FormatChoice:
    """One configuration of the table: a weight format and, per engine, the KV format it runs with (None: that
    engine has no such configuration). Formats are resolved objects, never names; `key` is the JSON's `config`."""

    key: str
    label: str
    weights: WeightFormat
    kv_vllm: KvFormat | None
    kv_hf: KvFormat | None

    @classmethod
    def of(cls, key: str, label: str, weights: str, kv_vllm: str | None, kv_hf: str | None) -> FormatChoice:
        return cls(key, label, weight_format(weights), kv_vllm and kv_format(kv_vllm), kv_hf and kv_format(kv_hf))


STANDARD_CONFIGS = (
    FormatChoice.of("baseline", "baseline (BF16 weights, BF16 KV)", "bf16", "auto", "auto"),
    FormatChoice.of("fp8-kv", "FP8 KV", "bf16", "fp8", None),
    FormatChoice.of("kv4", "4-bit KV (HQQ)", "bf16", None, "hqq-4"),
    FormatChoice.of("nf4", "NF4 weights", "nf4", "auto", "auto"),
    FormatChoice.of("nf4+fp8-kv", "NF4 weights + FP8 KV", "nf4", "fp8", None),
    FormatChoice.of("nf4+kv4", "NF4 weights + 4-bit KV", "nf4", None, "hqq-4"),
    FormatChoice.of("awq", "AWQ int4 weights", "awq", "auto", "auto"),
    # what docs/capacity-planning.md recommends on Ada/Hopper (L4, L40S, H100): int4 weights with an FP8 cache, and
    # FP8 weights, the low-risk halving of the weights (vLLM only: transformers has no FP8 weight path here)
    FormatChoice.of("awq+fp8-kv", "AWQ int4 weights + FP8 KV", "awq", "fp8", None),
    FormatChoice.of("fp8", "FP8 weights", "fp8", "auto", None),
)
BASELINE = STANDARD_CONFIGS[0]
# (engine, weights) whose decode speed no kvcalc measurement covers: vLLM's bitsandbytes path was never run in
# docs/validation, and it dequantizes in ways the speed model does not price, so such a row never gets "fastest
# decode" (its memory is vLLM's own arithmetic and keeps "most context")
UNMEASURED_SPEED = frozenset({("vllm", "nf4"), ("vllm", "nf4-dq")})


@dataclass
class PlanRequest:
    """What the user asked. `weights`/`kv` may be given as names; they are resolved to formats once, here
    (None: not asked, so the table shows the standard configurations)."""

    spec: ModelSpec
    gpu: GpuProfile
    context: int
    batch: int = 1
    engines: tuple[str, ...] = ("vllm", "hf")
    weights: str | None = None  # the asked weight format's name (canonical after __post_init__); None: not asked
    kv: str | None = None  # the asked KV format's name, likewise
    # --weights awq,fp8 / --kv auto,fp8: every combination is a row (weights/kv hold the first of each); () when one
    weights_choices: tuple[str, ...] = ()
    kv_choices: tuple[str, ...] = ()
    util: float | None = None  # None: the vLLM version's default (0.9; 0.92 from 0.21)
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    vllm_version: str = vllm_engine.DEFAULT_VERSION
    tp: int = 1
    pp: int = 1
    entrypoint: str = "serve"  # "serve" (vllm serve / the OpenAI server) or "offline" (the LLM class)
    dtype: str | None = None  # vLLM --dtype; None: auto (the checkpoint's 16-bit type)
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None  # vLLM --kv-cache-memory-bytes: the KV budget, util ignored
    nccl_nvls: bool | None = None  # None: NCCL's default for the GPU
    other_processes_bytes: int = 0  # memory other processes hold on the fullest GPU
    enable_chunked_prefill: bool | None = None  # vLLM --enable-chunked-prefill / --no-enable-chunked-prefill (V0)
    vllm_engine: str = "auto"  # auto, v0 (VLLM_USE_V1=0, before 0.11), v1 (VLLM_USE_V1=1, from 0.7)
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    speculative_config: str | dict | None = None  # vLLM --speculative-config: JSON with method, num_speculative_tokens
    # vLLM --limit-mm-per-prompt (items per modality) and --language-model-only: with every modality of the model at
    # 0, vLLM (0.10.1+, per family) loads no encoder (engines/vllm_encoders.py)
    limit_mm_per_prompt: dict[str, int] | None = None
    language_model_only: bool = False
    skip_mm_profiling: bool = False  # vLLM --skip-mm-profiling: no encoder in the profile run
    compile_cache: str = "cold"  # torch.compile's cache at start: cold (compiles in the profile run) or warm (AOT load)
    workload: Workload | None = None  # --input-len/--output-len/--concurrency/--request-rate (vllm bench terms)
    from_command: bool = False  # --vllm-command: the vLLM row of the asked configuration is the pasted command
    calibration: Any = None  # kvcalc.calibrate.EnvCalibration for this GPU and vLLM version (kvcalc calibrate)
    # SGLang (engines/sglang.py); --max-model-len, --max-num-seqs, --max-num-batched-tokens and --block-size are its
    # --context-length, --max-running-requests, --chunked-prefill-size and --page-size
    sglang_version: str | None = None
    mem_fraction_static: float | None = None  # None: SGLang's default for the GPU, TP and chunk size
    max_prefill_tokens: int | None = None  # SGLang --max-prefill-tokens (None: its 16384)
    cuda_graph_max_bs: int | None = None  # SGLang --cuda-graph-max-bs (None: its default for the GPU and TP)
    stream_interval: int = 1  # SGLang --stream-interval: tokens per streamed chunk (the workload's ITL)
    disable_radix_cache: bool = False  # SGLang --disable-radix-cache: no prefix reuse in the workload's simulation
    # SGLang --disable-overlap-schedule: the normal loop (engines/sglang.overlap_off; serve_sim NORMAL LOOP)
    disable_overlap_schedule: bool = False
    enable_torch_compile: bool = False  # SGLang --enable-torch-compile (engines/sglang.py SglangSettings)
    torch_compile_max_bs: int = 32  # SGLang --torch-compile-max-bs
    dp_size: int = 1
    enable_dp_attention: bool = False
    speculative_algorithm: str | None = None  # SGLang --speculative-algorithm
    # SGLang's draft (engines/sglang_draft.py): --speculative-draft-model-path (a catalog name, a config.json or its
    # folder is read for its shape; a hub id is not fetched), and the draft's steps, topk and tokens (None: SGLang's)
    speculative_draft_model_path: str | None = None
    max_total_tokens: int | None = None  # SGLang --max-total-tokens: a cap on the pool
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_config: Any = field(default=None, compare=False)  # set in __post_init__ from the path
    moe_a2a_backend: str | None = None  # SGLang --moe-a2a-backend (None: none)
    read_files: bool = True  # False (the web API): no file named in the request is read (an EAGLE head's folder)
    # --weights/--kv resolved once, here; everything below uses these objects, never the names
    asked_weights: WeightFormat | None = field(init=False, default=None, repr=False, compare=False)
    asked_kv: KvFormat | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in limits.BOUNDS:
            if hasattr(self, name):
                limits.check(name, getattr(self, name))
        if self.workload is not None:
            self.workload.check(self.max_model_len if "vllm" in self.engines else None)
        self.vllm_version = resolve_vllm_version(self.vllm_version)
        from .engines.sglang_versions import resolve_version

        self.sglang_version = resolve_version(self.sglang_version)
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise UsageError(f"--mem-fraction-static must be in (0, 1), got {shown(self.mem_fraction_static)}")
        if self.entrypoint not in ENTRYPOINTS:
            raise UsageError(f"--entrypoint {shown(self.entrypoint)} is not serve or offline")
        dtype_bytes_for(self.dtype)
        self.speculative_config = speculative_settings(self.speculative_config, self.read_files)
        from .engines import sglang_draft

        self.speculative_algorithm = sglang_draft.algorithm_of(self.speculative_algorithm)
        drafting = [name for name in ("speculative_draft_model_path", "speculative_num_steps",
                                      "speculative_eagle_topk", "speculative_num_draft_tokens")
                    if getattr(self, name) is not None]
        if drafting and not self.speculative_algorithm:
            raise UsageError(f"--{drafting[0].replace('_', '-')} sets SGLang's drafter: give --speculative-algorithm "
                             "(EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM) too")
        if self.speculative_draft_model_path is not None and self.speculative_draft_config is None:
            self.speculative_draft_config = sglang_draft.draft_config_of(self.speculative_draft_model_path,
                                                                         self.read_files)
        rules_with_engine(self.vllm_version, self.vllm_engine)  # refuses an engine the release did not have
        if self.weights is not None:
            self.asked_weights = self.weights if isinstance(self.weights, WeightFormat) else weight_format(self.weights)
            self.weights = self.asked_weights.name
        if self.kv is not None:
            self.asked_kv = self.kv if isinstance(self.kv, KvFormat) else kv_format(self.kv)
            self.kv = self.asked_kv.name
        self.weights_choices = tuple(dict.fromkeys(weight_format(w).name for w in self.weights_choices))
        self.kv_choices = tuple(dict.fromkeys(kv_format(k).name for k in self.kv_choices))

    @property
    def vllm_util(self) -> float:
        """gpu_memory_utilization vLLM runs with: --util, else the version's default."""
        return self.util if self.util is not None else rules_with_engine(
            self.vllm_version, self.vllm_engine).default_util_for(bool(self.kv_cache_memory_bytes))

    @property
    def asked(self) -> bool:
        """True when --weights or --kv chose a configuration (the table then shows it beside the baseline)."""
        return self.asked_weights is not None or self.asked_kv is not None

    @property
    def weights_or_default(self) -> WeightFormat:
        """--weights, else the weights as the checkpoint ships them (checkpoint.py), else BF16."""
        return self.asked_weights or baseline_weights(self.spec) or BASELINE.weights

    @property
    def kv_or_default(self) -> KvFormat:
        return self.asked_kv or BASELINE.kv_vllm

    # -- the one translation from a request to each engine's settings ------------------------------------------------

    def vllm_settings(self, choice: FormatChoice, *, max_model_len: int | None = None,
                      tp: int | None = None) -> vllm_engine.VllmSettings:
        """vLLM's settings for `choice`: max_model_len defaults to --max-model-len, else --context (what you
        would start vLLM with to serve this context); tp defaults to --tp."""
        return vllm_engine.VllmSettings(
            weights=choice.weights, kv=choice.kv_vllm, gpu_memory_utilization=self.util,
            max_model_len=max_model_len or self.max_model_len or self.context,
            max_num_batched_tokens=self.max_num_batched_tokens, max_num_seqs=self.max_num_seqs,
            enforce_eager=self.enforce_eager, block_size=self.block_size, version=self.vllm_version,
            entrypoint=ENTRYPOINTS[self.entrypoint], tensor_parallel=tp or self.tp, pipeline_parallel=self.pp,
            dtype_bytes=dtype_bytes_for(self.dtype), kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            nccl_nvls=self.nccl_nvls, engine=self.vllm_engine,
            enable_chunked_prefill=self.enable_chunked_prefill, other_processes_bytes=self.other_processes_bytes,
            enable_lora=self.enable_lora, max_loras=self.max_loras,
            max_lora_rank=self.max_lora_rank,
            speculative_method=(self.speculative_config or {}).get("method"),
            num_speculative_tokens=int((self.speculative_config or {}).get("num_speculative_tokens") or 0),
            draft_config=(self.speculative_config or {}).get("draft_config"),
            calibration=self.calibration, language_model_only=self.text_only,
            skip_mm_profiling=self.skip_mm_profiling, compile_cache=self.compile_cache)

    def sglang_settings(self, choice: FormatChoice, *, tp: int | None = None) -> sglang_engine.SglangSettings:
        """SGLang's settings for `choice`: context_length is --max-model-len, else --context (as for vLLM)."""
        return sglang_engine.SglangSettings(
            weights=choice.weights, kv=choice.kv_vllm, mem_fraction_static=self.mem_fraction_static,
            context_length=self.max_model_len or self.context, max_running_requests=self.max_num_seqs,
            chunked_prefill_size=self.max_num_batched_tokens, page_size=self.block_size,
            disable_cuda_graph=self.enforce_eager, tensor_parallel=tp or self.tp, pipeline_parallel=self.pp,
            dp_size=self.dp_size, enable_dp_attention=self.enable_dp_attention, dtype_bytes=dtype_bytes_for(self.dtype),
            version=self.sglang_version, other_processes_bytes=self.other_processes_bytes,
            max_prefill_tokens=self.max_prefill_tokens or sglang_engine.SglangSettings.max_prefill_tokens,
            cuda_graph_max_bs=self.cuda_graph_max_bs, enable_torch_compile=self.enable_torch_compile,
            torch_compile_max_bs=self.torch_compile_max_bs, speculative_algorithm=self.speculative_algorithm,
            enable_lora=self.enable_lora, moe_a2a_backend=self.moe_a2a_backend or "none",
            speculative_draft_model_path=self.speculative_draft_model_path,
            speculative_draft_config=self.speculative_draft_config, speculative_num_steps=self.speculative_num_steps,
            speculative_eagle_topk=self.speculative_eagle_topk,
            speculative_num_draft_tokens=self.speculative_num_draft_tokens, max_total_tokens=self.max_total_tokens,
            disable_overlap_schedule=self.disable_overlap_schedule)

    @property
    def text_only(self) -> bool:
        """--language-model-only, or --limit-mm-per-prompt 0 for every modality the model's encoders take."""
        if self.language_model_only:
            return True
        limits_ = self.limit_mm_per_prompt
        if not limits_ or not self.spec.encoders:
            return False
        return all(limits_.get(m, 1) == 0 for m in encoder_modalities(self.spec))

    @property
    def hf_prompt_offset(self) -> int:
        """hf_settings' prompt is context - new_tokens + this: 1 without a workload (the cache ends holding
        --context tokens), 0 with one (input + output)."""
        return 0 if self.workload is not None else 1

    def hf_settings(self, choice: FormatChoice) -> hf_engine.HfSettings:
        """transformers' settings for `choice`: with a workload, its prompt and output; else a prompt and a generation
        that end at --context. The generation is min(256, context / 2) tokens, as a chat turn generates a few hundred tokens and the prefill peak comes from
        the prompt; the cache at the end holds the whole context either way."""
        if self.workload is not None:  # --input-len: the prompt sets the prefill peak, the output the cache's end
            return hf_engine.HfSettings(weights=choice.weights, kv=choice.kv_hf, batch=self.batch,
                                        prompt_len=self.workload.input_len, new_tokens=self.workload.output_len)
        new_tokens = max(1, min(256, self.context // 2))
        return hf_engine.HfSettings(weights=choice.weights, kv=choice.kv_hf, batch=self.batch,
                                    prompt_len=self.context - new_tokens + 1, new_tokens=new_tokens)


@dataclass
class Row:
    config: str
    label: str
    engine: str
    weights_format: str
    kv_format: str
    weights_bytes: int
    kv_bytes_per_token: int
    kv_capacity_tokens: int | None  # vLLM: the logged "GPU KV cache size"; HF: longest context that fits at --batch
    max_concurrency: int | None  # vLLM: requests of --context tokens at once; HF: None
    hf_memory_bytes: int | None  # HF: everything the process holds at --context and --batch
    decode_tokens_per_s: float  # all requests together, at decode_batch
    fits: bool
    shortfall_bytes: int
    quality_risk: str
    decode_batch: int = 1  # requests decoded together: --batch, or fewer when vLLM holds fewer (held_batch)
    verdicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quality_evidence: str = ""  # measured on small real models (kvcalc/data/quality.json), not a prediction
    vllm: vllm_engine.VllmEstimate | None = field(default=None, repr=False)
    hf: hf_engine.HfEstimate | None = field(default=None, repr=False)
    sglang: sglang_engine.SglangEstimate | None = field(default=None, repr=False)
    bench: BenchEstimate | None = field(default=None, repr=False)  # the --input-len workload, when asked
    speed: DecodeEstimate | None = field(default=None, repr=False, compare=False)  # the decode step, per kernel
    # how far to trust the row's figures (kvcalc/trust.py): evidence label, what backs it, low/high per figure
    trust: dict = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        # asdict(self) would deep-copy the estimates too, only to drop them: a third of a web request's time
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in _ROW_ESTIMATES}
        if self.bench is not None:
            out["bench"] = self.bench.to_json()
        if self.vllm is not None:
            out["vllm_breakdown"] = self.vllm.to_json()
        if self.hf is not None:
            out["hf_breakdown"] = self.hf.to_json()
        if self.sglang is not None:
            out["sglang_breakdown"] = self.sglang.to_json()
        return out


_ROW_ESTIMATES = ("vllm", "hf", "bench", "speed", "sglang")  # written by their own to_json, under other keys


def _plain(value):
    """What dataclasses.asdict makes of one field's value (nested dataclasses, lists, tuples, dicts, scalars)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def configs_for(req: PlanRequest) -> list[FormatChoice]:
    """The standard table, or the baseline and the configuration --weights/--kv asked for. A checkpoint with its
    own format (a quantization_config, or exact bytes from its safetensors headers / index) is the baseline."""
    ckpt = baseline_weights(req.spec)
    standard = list(STANDARD_CONFIGS) if ckpt is None else checkpoint_configs(ckpt)
    if not req.asked:
        return standard + nvfp4_kv_configs(req, standard[0].weights)
    ws = [weight_format(n) for n in req.weights_choices] or [req.asked_weights or ckpt or BASELINE.weights]
    ks = [kv_format(n) for n in req.kv_choices] or [req.kv_or_default]
    customs: dict[str, FormatChoice] = {}
    for w in ws:  # --weights awq,fp8 --kv auto,fp8: each combination, in the order asked
        for k in ks:
            own = w is ckpt if ckpt is not None else w.name == "bf16"
            if own and k.name == "auto":
                continue  # the baseline itself
            parts = ([w.name] if not own else []) + ([f"{k.name}-kv"] if k.name != "auto" else [])
            key = "+".join(parts)
            customs.setdefault(key, FormatChoice(key, f"{w.label} weights + {k.label}", w, k if k.vllm_name else None,
                                                 k if (k.hf_quantized or k.name == "auto") else None))
    return [standard[0], *customs.values()]


def nvfp4_kv_configs(req: PlanRequest, weights: WeightFormat) -> list[FormatChoice]:
    """The NVFP4-KV what-if on the weights as shipped, where this vLLM release reads it on this GPU (sm_100 from 0.21:
    formats.py nvfp4, engines/vllm_specs.vllm_kv_refusal); elsewhere vLLM refuses the cache, so no row."""
    nvfp4 = kv_format("nvfp4")
    from .layers import MultiLatentAttention, flatten

    if any(isinstance(layer, MultiLatentAttention) for layer in flatten(req.spec.layers)):
        return []  # MLA backends read auto / fp8 caches only
    if vllm_kv_refusal(nvfp4, req.vllm_version, req.gpu.compute_capability, req.gpu.vendor):
        return []
    return [FormatChoice("nvfp4-kv", "NVFP4 KV", weights, nvfp4, None)]


def checkpoint_configs(ckpt: WeightFormat) -> list[FormatChoice]:
    """The standard table for a checkpoint with its own format: the baseline and the KV levers run on the weights
    as shipped; the weight what-ifs (NF4, AWQ, and BF16 for a quantized checkpoint) stay beside them."""
    base = replace(BASELINE, label=f"baseline ({ckpt.label} weights, BF16 KV)", weights=ckpt)
    if getattr(ckpt, "kv_cache_fp8", False):  # vLLM's auto KV dtype is fp8 for this checkpoint (checkpoint.py)
        base = replace(base, label=f"baseline ({ckpt.label} weights, FP8 KV on vLLM as the checkpoint asks)",
                       kv_vllm=kv_format("fp8"))
    rows = [base]
    rows += [replace(c, weights=ckpt) if c.weights is BASELINE.weights else c for c in STANDARD_CONFIGS[1:]
             if c.weights.name != ckpt.name]  # an FP8 checkpoint needs no FP8 what-if
    if ckpt.quantizes_linears:
        rows.append(FormatChoice.of("bf16", "BF16 weights (what-if)", "bf16", "auto", "auto"))
    return rows


def _weights_notes(w: WeightFormat) -> list[str]:
    note = weights_note(w)
    return [note] if note else []


RISK_LEVELS = ("none", "low", "moderate", "high")


def _risk(spec: ModelSpec, w: WeightFormat, k: KvFormat) -> str:
    """The worse of the two levers' risks; weight risk depends on model size (small models suffer more)."""
    return max(w.risk_for(spec.params.total), k.quality_risk, key=RISK_LEVELS.index)


def _fits_batch(req: PlanRequest, est: vllm_engine.VllmEstimate, concurrency: int) -> tuple[bool, int]:
    """vLLM 'fits' when it starts and holds --batch requests of --context tokens at once; the shortfall is what is
    missing for either (memory to start, or the KV blocks of the missing requests)."""
    fits = est.fits and concurrency >= req.batch
    if fits or not est.fits:
        return fits, est.shortfall_bytes
    blocks_needed = req.batch * est.layout.blocks_per_request(req.context) + 1  # + the null block
    return False, (blocks_needed - est.num_gpu_blocks) * est.layout.bytes_per_block


def _vllm_row(req: PlanRequest, choice: FormatChoice) -> Row | None:
    w, k = choice.weights, choice.kv_vllm
    if k is None or "vllm" not in w.engines:
        return None
    est = vllm_engine.estimate(req.spec, req.gpu, req.vllm_settings(choice))
    concurrency = est.concurrency_at(req.context)
    fits, shortfall = _fits_batch(req, est, concurrency)
    held = held_batch(req.batch, concurrency, est.max_num_seqs)
    # --dtype float32 doubles the weights a step reads, as it doubles the weights vLLM loads
    dtype_bytes = dtype_bytes_for(req.dtype)
    speed = vllm_decode(req, w, k, held, req.context, est, dtype_bytes=dtype_bytes)
    bench = None
    if req.workload is not None:
        bench = vllm_bench(req.spec, req.gpu, w, k, req.workload, chunk_tokens=est.max_num_batched_tokens,
                           slots=min(est.max_num_seqs, concurrency),
                           kv_bytes_per_token=est.deployment_kv_bytes_per_token, tp=req.tp, pp=req.pp,
                           enforce_eager=req.enforce_eager, est=est if est.fits else None,
                           entrypoint=req.entrypoint, dtype_bytes=dtype_bytes,
                           vllm_version=req.vllm_version, host_range=True)
    # capacity as vLLM logs it ("GPU KV cache size"): group-aware, so hybrid models count tokens, not pool blocks.
    # Weights and KV bytes per token are the deployment's: each of tp x pp GPUs holds its share.
    trust = row_trust(req, "vllm", w, k, bench)
    trust["capacity_range"] = capacity_range(req, est, concurrency, fits)
    return Row(trust=trust, config=choice.key, label=choice.label, engine="vllm",
               weights_format=w.name, kv_format=k.name,
               weights_bytes=est.deployment_weights_bytes, kv_bytes_per_token=est.deployment_kv_bytes_per_token,
               kv_capacity_tokens=est.logged_kv_tokens, max_concurrency=concurrency, hf_memory_bytes=None,
               decode_tokens_per_s=speed.tokens_per_s, decode_batch=held, fits=fits, shortfall_bytes=shortfall,
               quality_risk=_risk(req.spec, w, k), notes=_weights_notes(w) + est.notes + speed.notes,
               quality_evidence=quality_cell(w.name, k.name), vllm=est, bench=bench, speed=speed)


def vllm_decode(req: PlanRequest, w: WeightFormat, k: KvFormat, batch: int, context: int,
                est: vllm_engine.VllmEstimate | None, tp: int | None = None, dtype_bytes: int = 2) -> DecodeEstimate:
    """vLLM's decode of `batch` requests at `context` tokens on the release asked (--vllm-version): the GPU's step
    (throughput.decode_speed) under the release's rules as the serve simulation times a pure decode step of that
    batch (workload.vllm_decode_step: 0.8-0.10's piecewise-graph CPU floor, V0's host work per sequence and its eager
    forward past max_seq_len_to_capture, the CPU's launch of a batch above the largest CUDA graph). One model for the
    table, the TP sweep, the speed curves and the simulation behind search and --concurrency."""
    from .workload import vllm_decode_step

    tp = req.tp if tp is None else tp
    per_token = est.deployment_kv_bytes_per_token if est is not None else None
    speed = decode_speed(req.spec, req.gpu, "vllm", w, k, batch, context, req.enforce_eager, tp,
                         dtype_bytes=dtype_bytes, pp=req.pp, kv_bytes_per_token=per_token)
    step, notes = vllm_decode_step(req.spec, req.gpu, w, k, batch, context, speed.step_s, tp=tp, pp=req.pp,
                                   kv_bytes_per_token=per_token, enforce_eager=req.enforce_eager,
                                   dtype_bytes=dtype_bytes, vllm_version=req.vllm_version, est=est)
    if step == speed.step_s:
        return speed
    return replace(speed, step_s=step, tokens_per_s=batch / step, gpu_step_s=speed.step_s, notes=notes + speed.notes)


def sglang_decode(speed: DecodeEstimate, spec: ModelSpec, gpu: GpuProfile, batch: int,
                  fused_max_bs: int = 0) -> DecodeEstimate:
    """The shared decode step plus what SGLang's model implementation adds to it (step_cost.sglang_step_extra: the
    eager norm chains of Gemma 3); `speed` unchanged for architectures SGLang runs fused, and for batches of at most
    `fused_max_bs` (--enable-torch-compile's inductor graphs fuse the chains)."""
    from .step_cost import sglang_step_extra

    per_step, per_token = sglang_step_extra(spec, gpu)
    if not per_step or batch <= fused_max_bs:
        return speed
    add = per_step + per_token * batch
    step = speed.step_s + add
    return replace(speed, step_s=step, tokens_per_s=speed.tokens_per_s * speed.step_s / step,
                   fixed_s=speed.fixed_s + add, notes=speed.notes + [
                       f"SGLang runs this architecture's norms as eager PyTorch chains inside its CUDA graphs "
                       f"(Gemma3RMSNorm.forward_native): +{add * 1e3:.2f} ms a step (engines/sglang.py "
                       "eager_norm_kernels; the kernel time fitted on one H200 run, docs/validation/sglang.md)"])


def _sglang_row(req: PlanRequest, choice: FormatChoice) -> Row | None:
    """SGLang's row: its pool (max_total_num_tokens) and how many --context requests it holds at once. Decode speed
    and the workload come from the shared speed and scheduler models with SGLang's chunk and running-request cap;
    SGLang's per-step overhead is taken as vLLM's with CUDA graphs, plus the kernels SGLang's model code adds
    (sglang_decode; the H200 runs and public SGLang benchmarks test it, scripts/sglang_speed_report.py)."""
    w, k = choice.weights, choice.kv_vllm
    if k is None or k.name not in sglang_engine.KV_DTYPES or "vllm" not in w.engines:
        return None
    est = sglang_engine.estimate(req.spec, req.gpu, req.sglang_settings(choice))
    concurrency = est.concurrency_at(req.context)
    fits = est.fits and concurrency >= req.batch
    shortfall = est.shortfall_bytes if not est.fits else (
        0 if fits else max(req.batch * req.context - est.max_total_num_tokens, 0) * est.cell_bytes)
    speed = sglang_decode(decode_speed(req.spec, req.gpu, "vllm", w, k, req.batch, req.context, req.enforce_eager,
                                       req.tp, pp=req.pp, kv_bytes_per_token=est.deployment_kv_bytes_per_token),
                          req.spec, req.gpu, req.batch, est.fused_decode_max_bs)
    bench = None
    if req.workload is not None:
        bench = vllm_bench(req.spec, req.gpu, w, k, req.workload, chunk_tokens=max(est.chunked_prefill_size, 1),
                           slots=est.max_running_requests, kv_bytes_per_token=est.deployment_kv_bytes_per_token,
                           tp=req.tp, pp=req.pp, enforce_eager=req.enforce_eager, sglang=est,
                           stream_interval=req.stream_interval, prefix_caching=not req.disable_radix_cache)
    notes = est.notes + ["speed: the shared decode model with vLLM's per-step overhead, SGLang's scheduler (prefill "
                         "batches first, decodes wait for them); its held-out error on public SGLang benchmarks: "
                         "docs/validation/sglang.md (scripts/sglang_speed_report.py)"]
    return Row(trust=row_trust(req, "sglang", w, k, bench), config=choice.key, label=choice.label, engine="sglang",
               weights_format=w.name, kv_format=k.name,
               weights_bytes=est.deployment_weights_bytes, kv_bytes_per_token=est.deployment_kv_bytes_per_token,
               kv_capacity_tokens=est.max_total_num_tokens, max_concurrency=concurrency, hf_memory_bytes=None,
               decode_tokens_per_s=speed.tokens_per_s, fits=fits, shortfall_bytes=shortfall,
               quality_risk=_risk(req.spec, w, k), notes=_weights_notes(w) + notes + speed.notes,
               quality_evidence=quality_cell(w.name, k.name), sglang=est, bench=bench, speed=speed)


def held_batch(batch: int, concurrency: int, max_num_seqs: int) -> int:
    """Requests vLLM decodes together: --batch, unless the KV cache or max_num_seqs holds fewer (the rest wait for
    a slot); at least 1, so a row that holds none still shows one request's speed beside its "no"."""
    return max(1, min(batch, concurrency, max_num_seqs))


def _hf_row(req: PlanRequest, choice: FormatChoice) -> Row | None:
    w, k = choice.weights, choice.kv_hf
    if k is None or req.tp > 1 or req.pp > 1 or "hf" not in w.engines:
        return None
    settings = req.hf_settings(choice)
    est = hf_engine.estimate(req.spec, settings, req.gpu)
    # the same context -> prompt mapping as the estimate (hf_settings), so "fits" and the longest context agree
    longest = hf_engine.max_context(req.spec, settings, req.gpu, prompt_offset=req.hf_prompt_offset)
    speed = decode_speed(req.spec, req.gpu, "hf", w, k, req.batch, req.context)
    # per token of context at --context: sliding-window layers stop growing past their window
    # (whole bytes, as every byte figure in the JSON: rounded as the table rounds it)
    per_token = round(hf_cache_bytes(req.spec.layers, 1, req.context, req.context, k, 2) / req.context)
    bench = hf_bench(req.spec, req.gpu, w, k, req.workload) if req.workload is not None else None
    return Row(trust=row_trust(req, "hf", w, k, bench), config=choice.key, label=choice.label, engine="hf",
               weights_format=w.name, kv_format=k.name,
               weights_bytes=est.static_bytes, kv_bytes_per_token=per_token, kv_capacity_tokens=longest,
               max_concurrency=None, hf_memory_bytes=est.total_bytes, decode_tokens_per_s=speed.tokens_per_s,
               decode_batch=req.batch, fits=est.fits, shortfall_bytes=est.shortfall_bytes, quality_risk=_risk(req.spec, w, k),
               notes=_weights_notes(w) + est.notes + speed.notes, quality_evidence=quality_cell(w.name, k.name),
               hf=est, speed=speed, bench=bench)


def quality_source(spec: ModelSpec, w: WeightFormat, k: KvFormat) -> dict:
    """Where a row's quality risk comes from: the rule that sets it (kvcalc/formats.py: each format's risk, the
    weights' stricter risk below 4 B parameters; the worse of weights and KV), and the small-model measurements
    beside it where kvcalc/data/quality.json holds some (evidence, not the label's source)."""
    w_risk, k_risk = w.risk_for(spec.params.total), k.quality_risk
    small = w.quality_risk_small and spec.params.total < 4_000_000_000
    rule = (f"rule (kvcalc/formats.py): weights {w.name} {w_risk}"
            + (" (below 4 B parameters)" if small else "") + f", KV {k.name} {k_risk}; the worse of the two")
    measured = quality_cell(w.name, k.name)
    return {"label": "rule", "backing": rule, "measured": measured or None}


def row_trust(req: PlanRequest, engine: str, w: WeightFormat, k: KvFormat, bench: BenchEstimate | None) -> dict:
    """The evidence behind a row's figures and their ranges (kvcalc/trust.py), as the JSON carries them: `speed` for
    the decode tok/s column, `capacity` for KV capacity / max concurrency / fits, and per workload figure."""
    from .trust import capacity_trust, speed_trust

    out = {"speed": speed_trust(req.gpu, engine, w, k, "TPOT", inverse=True, batch=req.batch,
                                  tp=req.tp).to_json(),
           "capacity": capacity_trust(req.gpu, engine).to_json(),
           # the capacity as a low/high range where the start kind leaves it open (capacity_range; vLLM rows)
           "capacity_range": None, "quality": quality_source(req.spec, w, k)}
    if bench is not None:
        n = req.workload.concurrency or req.batch
        lone = n <= 1 and (req.workload.request_rate is None or req.workload.request_rate <= 1)
        out["ttft"] = speed_trust(req.gpu, engine, w, k, "TTFT" if lone else "TTFT-load", batch=n,
                                   tp=req.tp).to_json()
        out["tpot"] = speed_trust(req.gpu, engine, w, k, "TPOT", batch=n, tp=req.tp).to_json()
        out["output_tokens_per_s"] = speed_trust(req.gpu, engine, w, k, "throughput", batch=n,
                                                   tp=req.tp).to_json()
    return out


def capacity_range(req: PlanRequest, est: vllm_engine.VllmEstimate, concurrency: int, fits: bool) -> dict | None:
    """The row's capacity as a range where the start kind leaves it open (trust.capacity_range in the JSON; None
    where the figure is one value): a cold torch.compile start on vLLM 0.27-0.30, whose freed Inductor embedding
    copy may stay pinned and be counted as consumed (engines/vllm.py pinned_range). Low end: pinned; high end:
    the row's own figures (not pinned)."""
    p = est.pinned
    if p is None:
        return None
    low_conc = est.concurrency_low_at(req.context)
    return {"kv_capacity_tokens_low": p.logged_kv_tokens, "kv_capacity_tokens_high": est.logged_kv_tokens,
            "max_concurrency_low": low_conc, "max_concurrency_high": concurrency,
            "fits_low": bool(fits and p.kv_fits and low_conc >= req.batch), "fits_high": fits,
            "pinned_bytes": p.pinned_bytes, "cause": "pinned compile segment", "reason": p.reason}


def speed_of(row: Row) -> float:
    """The speed "fastest decode" ranks by: with a workload, the tokens/s one user gets (the workload table's, its
    prefills and waits included), else the decode tokens/s of the table."""
    return row.bench.output_tokens_per_s_per_user if row.bench is not None else row.decode_tokens_per_s


def verdicts(rows: list[Row]) -> list[list[str]]:
    """The verdicts of each row, per engine among the rows that fit: the most context (KV capacity, then speed),
    the fastest decode, and the most context among low-risk rows when that is another row."""
    out: list[list[str]] = [[] for _ in rows]
    for engine in ("vllm", "sglang", "hf"):
        fitting = [i for i, r in enumerate(rows) if r.engine == engine and r.fits]
        if not fitting:
            continue
        most = max(fitting, key=lambda i: (rows[i].kv_capacity_tokens or 0, rows[i].decode_tokens_per_s))
        out[most].append("most context")
        measured = [i for i in fitting if (engine, rows[i].weights_format) not in UNMEASURED_SPEED]
        if measured:
            fastest = max(measured, key=lambda i: speed_of(rows[i]))
            out[fastest].append("fastest decode")
        safest = [i for i in fitting if rows[i].quality_risk in ("none", "low")]
        if safest:
            best = max(safest, key=lambda i: (rows[i].kv_capacity_tokens or 0))
            if "most context" not in out[best]:
                out[best].append("most context at low risk")
    for i, r in enumerate(rows):  # vllm_support.py: this release does not serve the model at all
        if r.vllm is not None and r.vllm.serve_gate is not None:
            out[i] = [f"not served: needs vLLM {r.vllm.serve_gate.since}+"]
        elif r.vllm is not None and r.vllm.graph_capture is not None and r.vllm.graph_capture.verdict():
            out[i] = [r.vllm.graph_capture.verdict()]  # engines/vllm_graphs.py: loads, then OOM in capture
    return out


def request_warnings(req: PlanRequest) -> list[str]:
    """What is legal but unwise in the request itself, before any engine is asked."""
    spec, out = req.spec, []
    if spec.max_position_embeddings and req.context > spec.max_position_embeddings:
        out.append(f"context {req.context:,} exceeds {spec.name}'s max_position_embeddings "
                   f"{spec.max_position_embeddings:,}: quality past it is not what the model was trained for")
    if spec.uncounted:  # multimodal wrappers read as their text decoder (model.py TEXT_ONLY_WRAPPERS)
        out.append(f"the rows plan the text decoder; not in their weights: {'; '.join(spec.uncounted)}")
    if "vllm" in req.engines:
        unserved = unserved_reason(spec, req.vllm_version)
        if unserved:
            since = unserved_gate(spec, req.vllm_version).since
            out.append(f"{unserved}; every vLLM row says no (its figures are vLLM {since}'s, the first release "
                       "that serves it)")
    if "sglang" not in req.engines:
        sglang_only = [flag for flag, on in (
            ("--mem-fraction-static", req.mem_fraction_static is not None), ("--dp-size", req.dp_size != 1),
            ("--enable-dp-attention", req.enable_dp_attention),
            ("--speculative-algorithm", req.speculative_algorithm is not None),
            ("--moe-a2a-backend", req.moe_a2a_backend not in (None, "", "none")),
            ("--max-prefill-tokens", req.max_prefill_tokens is not None),
            ("--cuda-graph-max-bs", req.cuda_graph_max_bs is not None),
            ("--max-total-tokens", req.max_total_tokens is not None),
            ("--enable-torch-compile", req.enable_torch_compile), ("--stream-interval", req.stream_interval != 1),
            ("--disable-radix-cache", req.disable_radix_cache),
            ("--disable-overlap-schedule", req.disable_overlap_schedule)) if on]
        if sglang_only:
            out.append(f"{', '.join(sglang_only)}: SGLang's setting(s), and no SGLang row is planned (add --engine "
                       "sglang, servers or all)")
    if "sglang" in req.engines:
        from .engines.sglang_versions import RULES as SGLANG_RULES, is_newer_than_known as sglang_newer

        if sglang_newer(req.sglang_version):
            out.append(f"SGLang {req.sglang_version} is newer than the newest release kvcalc has rules for "
                       f"({SGLANG_RULES[-1].since}); the {SGLANG_RULES[-1].since} rules apply")
    if is_newer_than_known(req.vllm_version):
        newest = rules_for(req.vllm_version).since
        out.append(f"vLLM {shown(req.vllm_version, 40, quote=False)} is newer than the newest release kvcalc has rules for ({newest}); "
                   f"the {newest} rules apply")
    return out


def _left_out(req: PlanRequest, engine: str, choice: FormatChoice) -> str | None:
    """Why `engine` has no row for the configuration the user asked for (None when it has one)."""
    w, k = choice.weights, choice.kv_hf if engine == "hf" else choice.kv_vllm
    if engine == "sglang":
        if "vllm" not in w.engines:
            return f"sglang: {choice.label} left out: kvcalc models SGLang with the weight formats vLLM loads"
        if k is None or k.name not in sglang_engine.KV_DTYPES:
            return f"sglang: {choice.label} left out: SGLang has no {req.kv_or_default.label} cache"
        return None
    if engine not in w.engines:
        return f"{engine}: {choice.label} left out: {engine} does not run {w.label} weights"
    if k is None:
        return f"{engine}: {choice.label} left out: {engine} has no {req.kv_or_default.label} cache"
    return None


def plan(req: PlanRequest, warnings: list[str] | None = None) -> list[Row]:
    """Rows for every configuration and engine. An engine that cannot account for this model is left out, with
    the reason appended to `warnings` (the other engine's rows still come); with one engine asked, it raises.
    A configuration the user asked for that an engine does not run is left out with a warning saying why; a
    request that leaves no row at all is refused (never an empty table)."""
    if req.batch < 1:
        raise UsageError("--batch must be at least 1")
    refusal = parallel_refusal(req.spec, req.tp, req.pp, req.engines)
    if refusal:
        raise UsageError(refusal)
    if "vllm" in req.engines and req.max_model_len is not None and req.context > req.max_model_len:
        raise UsageError(f"--context {req.context:,} exceeds --max-model-len {req.max_model_len:,}: vLLM rejects "
                         "requests longer than max_model_len (raise --max-model-len, or leave it out to use --context; "
                         "--max-model-len reads numbers as vLLM does, 32k = 32,000 and 32K = 32,768, --context as "
                         "kvcalc does, 32k = 32,768)")
    notes: list[str] = []
    rows: list[Row] = []
    for engine in req.engines:
        if engine == "hf" and (req.tp > 1 or req.pp > 1):
            notes.append(f"hf: left out: transformers runs on one GPU here; --tp {req.tp} / --pp {req.pp} apply "
                         "to vLLM")
            continue
        try:
            for choice in configs_for(req):
                row = {"vllm": _vllm_row, "sglang": _sglang_row}.get(engine, _hf_row)(req, choice)
                if row is not None:
                    rows.append(row)
                elif req.asked and choice.key != BASELINE.key and _left_out(req, engine, choice):
                    notes.append(_left_out(req, engine, choice))
        except UnsupportedModelError as exc:
            if len(req.engines) == 1 or warnings is None:
                raise
            notes.append(f"{engine}: {exc}")
    if not rows:
        why = [n for n in notes if n.startswith(("vllm:", "hf:", "sglang:"))]
        raise UsageError("nothing to show: " + "; ".join(why or ["no engine runs this request"]))
    if any(r.engine == "vllm" and r.weights_format in ("awq", "gptq") for r in rows):
        from .engines.vllm_kernels import no_marlin_on_gpu

        slow = no_marlin_on_gpu(req.vllm_version, req.gpu.compute_capability)
        if slow:  # the rows' speed is Marlin's: say where vLLM runs another kernel
            notes.append("vllm: " + slow)
    overflow = next((r.vllm for r in rows if r.vllm is not None and r.vllm.cudagraph_overflow_bytes), None)
    if overflow is not None:
        notes.append(next(n for n in overflow.notes if "the CUDA graphs take after the KV cache" in n))
    if warnings is not None:
        warnings.extend(notes)
    marks = verdicts(rows)
    if req.from_command:  # the row the pasted `vllm serve` line runs, said where the user looks for it
        key = custom_key(req)
        for i, row in enumerate(rows):
            if row.engine == "vllm" and row.config == key:
                marks[i].insert(0, YOUR_COMMAND)
    return [replace(row, verdicts=m) for row, m in zip(rows, marks)]


YOUR_COMMAND = "your command"


def plan_json(req: PlanRequest, rows: list[Row], warnings: list[str], sweep: list | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "model": req.spec.name,
        "gpu": req.gpu.id,
        "gpu_memory_total_bytes": req.gpu.memory_total_bytes,
        "context": req.context,
        "batch": req.batch,
        "settings": {"util": req.vllm_util, "max_model_len": req.max_model_len or req.context,
                     "max_num_batched_tokens": req.max_num_batched_tokens, "max_num_seqs": req.max_num_seqs,
                     "enforce_eager": req.enforce_eager, "vllm_version": req.vllm_version, "tp": req.tp,
                     "pp": req.pp, "entrypoint": req.entrypoint}
        | ({"sglang_version": req.sglang_version, "mem_fraction_static": req.mem_fraction_static,
            "disable_overlap_schedule": req.disable_overlap_schedule}
           if "sglang" in req.engines else {}),
        "warnings": warnings,
        "rows": [r.to_json() for r in rows],
        "tp_sweep": [o.to_json() for o in sweep] if sweep else None,
    } | ({"workload": {**{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(req.workload).items()},
                       "assumptions": list(WORKLOAD_ASSUMPTIONS)}}  # tuples as JSON lists: the API equals the CLI
         if req.workload is not None else {}) | _revision_json(req.spec)


def _revision_json(spec: ModelSpec) -> dict:
    """A hub checkpoint's resolved revision (the commit its files came from), for --model org/name[@revision]."""
    ck = spec.checkpoint
    return {"model_revision": ck.revision} if ck is not None and getattr(ck, "revision", None) else {}


@dataclass
class TpOption:
    tp: int
    fits: bool
    shortfall_bytes: int
    weights_per_gpu_bytes: int
    kv_capacity_tokens: int
    max_concurrency: int
    decode_tokens_per_s: float
    decode_batch: int = 1  # requests decoded together (held_batch)
    starts: bool = True  # vLLM starts at this TP size (it may still hold fewer requests than --batch)

    def to_json(self) -> dict:
        return {"tp": self.tp, "fits": self.fits, "shortfall_bytes": self.shortfall_bytes,
                "weights_per_gpu_bytes": self.weights_per_gpu_bytes, "kv_capacity_tokens": self.kv_capacity_tokens,
                "max_concurrency": self.max_concurrency, "decode_tokens_per_s": self.decode_tokens_per_s,
                "decode_batch": self.decode_batch, "starts": self.starts}


def asked_keys(req: PlanRequest) -> list[str]:
    """The config keys of the configurations --weights/--kv asked for (['baseline'] when neither, or when they ask
    for the baseline)."""
    configs = configs_for(req)
    return [c.key for c in configs[1:]] if req.asked and len(configs) > 1 else [BASELINE.key]


def custom_key(req: PlanRequest) -> str:
    """The config key of the (first) configuration --weights/--kv asked for ('baseline' when neither)."""
    return asked_keys(req)[0]


def explained_rows(req: PlanRequest, rows: list[Row], warnings: list[str]) -> list[Row]:
    """The rows `kvcalc explain` explains: the asked configurations (--weights/--kv, each of a list; else the
    baseline) on each asked engine, in the order asked. None runs: a usage error that says why, rather than
    explaining another configuration."""
    keys = asked_keys(req)
    wanted = sorted((r for r in rows if r.config in keys), key=lambda r: keys.index(r.config))
    if not wanted:  # the asked configuration runs on no asked engine: say why rather than explain another one
        why = [w for w in warnings if w.startswith(("vllm:", "hf:", "sglang:"))]
        raise UsageError("nothing to explain: " + "; ".join(why or ["no row for the asked configuration"]))
    return wanted


def sweep_choice(req: PlanRequest) -> FormatChoice:
    """The configuration the TP sweep runs: --weights, with --kv when vLLM runs it (else BF16 KV)."""
    k = req.asked_kv if req.asked_kv is not None and req.asked_kv.vllm_name else BASELINE.kv_vllm
    return FormatChoice("sweep", "sweep", req.weights_or_default, k, None)


SWEEP_MAX_TP = 8  # GPUs in one server


def tp_sweep(req: PlanRequest, sizes: tuple[int, ...] | None = None) -> list[TpOption]:
    """The asked vLLM configuration at each tensor-parallel size from 1 to 8 that vLLM accepts for this model
    (parallel_refusal: 1, 2, 4, 8 for most models; 1, 3 for 9 heads): what the smallest fitting TP gives and what
    each larger one buys (per-GPU weights shrink; KV capacity and speed grow)."""
    sizes = sizes or tuple(range(1, SWEEP_MAX_TP + 1))
    out = []
    choice = sweep_choice(req)
    w, k = choice.weights, choice.kv_vllm
    for tp in sizes:
        if parallel_refusal(req.spec, tp, req.pp):
            continue
        est = vllm_engine.estimate(req.spec, req.gpu, req.vllm_settings(choice, tp=tp))
        concurrency = est.concurrency_at(req.context)
        speed = vllm_decode(req, w, k, held_batch(req.batch, concurrency, est.max_num_seqs), req.context, est, tp=tp,
                            dtype_bytes=dtype_bytes_for(req.dtype))
        fits, shortfall = _fits_batch(req, est, concurrency)
        out.append(TpOption(tp, fits, shortfall, est.weights_bytes, est.logged_kv_tokens, concurrency,
                            speed.tokens_per_s, held_batch(req.batch, concurrency, est.max_num_seqs), est.fits))
    return out


def should_sweep(req: PlanRequest, rows: list[Row], asked: bool = False) -> bool:
    """Show the TP sweep when asked (--tp-sweep), or when the asked configuration (else the baseline) does not fit
    vLLM on one GPU; never when the user already chose a TP or PP size, nor on a laptop GPU (one per machine)."""
    if "vllm" not in req.engines or req.tp != 1 or req.pp != 1 or req.gpu.laptop:
        return False
    if unserved_reason(req.spec, req.vllm_version):  # no TP size helps a release that does not serve the model
        return False
    target = [r for r in rows if r.engine == "vllm" and r.config == custom_key(req)]
    return asked or bool(target and not target[0].fits)
