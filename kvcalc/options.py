"""kvcalc's option vocabulary: one table for every option `plan`, `explain`, `plot`, `fit`, `search` and the web API
take, and the click parameter types that read them.

The CLI builds its click options from these tables (`plan_options`, `search_options`), the web page parses its
parameters with the same click options (`parse`), and `kvcalc.request` turns the parsed values into a PlanRequest. So
a name, a type, a default and a range check exist once, and no surface imports another.

How to add an option (one entry):

    Option("max_cpu_loras", POSITIVE, default=None, help="vLLM --max-cpu-loras.", into="request")

1. Put an `Option` in PLAN_OPTIONS (options of the request: every command that plans takes them, and so does the
   web API) or in a command's own table (PLAN_COMMAND_OPTIONS, FIT_OPTIONS, SEARCH_OPTIONS: output modes and
   command-only settings, read by that command).
2. Say where its value goes with `into`:
   - "request": the PlanRequest field of the same name (add that field to kvcalc/plan.py, where its behaviour lives;
     `field` names it when it differs); `convert` turns the parsed value into the field's value when they differ
     (e.g. "on"/"off" -> True/False);
   - "workload": the `Workload` field of the same name (kvcalc/workload.py), for `vllm bench` workload options;
   - None: read by name in kvcalc/request.py (options that need other options to mean anything) or by the command.
3. `web=False` keeps it off the web API (output modes, files on the server). Everything else is automatic: the
   command line, `--help`, the web page's option list and defaults (`GET /api/info`), and the vocabulary test
   (tests/test_options.py).

The flag is `--` + the name with dashes (`max_cpu_loras` -> `--max-cpu-loras`) unless `flags` gives the spellings
(first one shown first); `aliases` adds vLLM's own spellings (`-tp`, `--tensor-parallel-size`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import click

from . import limits
from .formats import WEIGHT_FORMATS  # --weights lists the registry: a new format needs no help edit
from .errors import UsageError, shown
from .units import parse_bytes, parse_tokens, parse_vllm_int


def option_flag(param) -> str:
    return "--" + param.name.replace("_", "-") if param else "value"


class _Tokens(click.ParamType):
    """A token count such as 32k; within limits.BOUNDS when the option has a bound there."""

    name = "tokens"

    def convert(self, value, param, ctx):
        number = parse_tokens(value, what=option_flag(param))
        if param is not None and param.name in limits.BOUNDS:
            limits.check(param.name, number)
        return number


class _Fraction(click.ParamType):
    name = "fraction"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{option_flag(param)} {shown(value)} is not a number") from None
        if not 0 < number <= 1:  # NaN fails this too
            raise UsageError(f"{option_flag(param)} must be in (0, 1], got {shown(value)}: it is the share of the "
                             + ("free memory SGLang's weights and KV pool may take" if param is not None
                                and param.name == "mem_fraction_static"
                                else "GPU's memory vLLM may use (gpu_memory_utilization)"))
        return number


class _Positive(click.ParamType):
    """A whole number from 1 (to limits.BOUNDS when the option has a bound there); ASCII digits only."""

    name = "n"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            number = value
        else:
            text = str(value).strip()
            if not (text.isascii() and text.isdigit()):
                raise UsageError(f"{option_flag(param)} {shown(value)} is not a whole number")
            if len(text.lstrip("0")) > 12:
                raise UsageError(f"{option_flag(param)} {shown(value)} is too large")
            number = int(text)
        if param is not None and param.name in limits.BOUNDS:
            limits.check(param.name, number)
        elif number < 1:
            raise UsageError(f"{option_flag(param)} must be at least 1, got {shown(value)}")
        return number


class _Name(click.ParamType):
    """A catalog name, GPU id, hub id or file path: printable text of at most MAX_NAME characters (a NUL or a
    newline cannot name anything, and a path longer than the OS allows is refused before the OS is asked)."""

    name = "text"
    MAX_NAME = 4096  # PATH_MAX on Linux

    def convert(self, value, param, ctx):
        text = str(value)
        if len(text) > self.MAX_NAME:
            raise UsageError(f"{option_flag(param)} {shown(value)} is too long")
        if not text.isprintable():
            raise UsageError(f"{option_flag(param)} {shown(value)} holds a control character")
        return text


class _Rate(click.ParamType):
    """Requests per second: a positive finite number."""

    name = "rate"

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{option_flag(param)} {shown(value)} is not a number") from None
        if not (0 < number < 1e9):  # NaN and inf fail this too
            raise UsageError(f"{option_flag(param)} must be a positive number of requests/s, got {shown(value)}")
        return number


class _VllmInt(click.ParamType):
    """A number as vLLM reads its own flags (units.parse_vllm_int: 32k = 32,000, 32K = 32,768); within
    limits.BOUNDS when the option has a bound there. With allow_auto, 'auto' and -1 mean the model's own maximum
    (vLLM's human_readable_int_or_auto) and convert to AUTO."""

    name = "n"

    def __init__(self, allow_auto: bool = False):
        self.allow_auto = allow_auto

    def convert(self, value, param, ctx):
        if self.allow_auto and str(value).strip().lower() in ("auto", "-1"):
            return AUTO
        number = parse_vllm_int(value, what=option_flag(param))
        if param is not None and param.name in limits.BOUNDS:
            limits.check(param.name, number)
        return number


AUTO = -1  # --max-model-len auto / -1: the model's max_position_embeddings

TOKENS, FRACTION, POSITIVE, NAME, RATE = _Tokens(), _Fraction(), _Positive(), _Name(), _Rate()
VLLM_INT, VLLM_LEN = _VllmInt(), _VllmInt(allow_auto=True)


class ListOf(click.ParamType):
    """A comma-separated list of `item` values, each read exactly as the option's single value is (`--tp 1,2` in
    search takes what `--tp 2` takes in plan, bounds included); repeats dropped, numbers sorted."""

    def __init__(self, item: click.ParamType, sort: bool = False):
        self.item, self.sort = item, sort
        self.name = f"{item.name}[,{item.name}...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = [self.item.convert(text, param, ctx) for text in split_list(str(value), option_flag(param))]
        items = list(dict.fromkeys(items))
        return tuple(sorted(items) if self.sort else items)


class _UtilGrid(ListOf):
    """gpu_memory_utilization values: a list (0.85,0.9) or an inclusive range START:STOP:STEP (0.80:0.95:0.01)."""

    def __init__(self):
        super().__init__(FRACTION, sort=True)
        self.name = "fraction[,...]|start:stop:step"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        return util_list(str(value))


NAMES = ListOf(NAME)  # --weights awq,fp8, --kv auto,fp8, --gpus l4,h100
POSITIVES = ListOf(POSITIVE, sort=True)  # search's --tp 1,2,4, --max-num-seqs 64,128
UTIL_GRID = _UtilGrid()


@dataclass(frozen=True)
class Option:
    """One option of kvcalc's vocabulary (see the module docstring for how to add one)."""

    name: str  # the Python, JSON and web name: max_model_len
    type: Any = None  # a click type; None for a flag
    default: Any = None
    help: str = ""
    flags: tuple[str, ...] = ()  # the spellings, when not just --name-with-dashes
    aliases: tuple[str, ...] = ()  # further spellings after the first (vLLM's -tp, --tensor-parallel-size)
    is_flag: bool = False
    secondary: str | None = None  # the off spelling of an on/off pair: --no-enable-chunked-prefill
    show_default: bool = False
    metavar: str | None = None
    multiple: bool = False
    required: bool = False
    callback: Callable | None = None
    into: str | None = None  # "request" (the PlanRequest field of this name), "workload" (Workload's), None
    field: str | None = None  # the field's name when it is not the option's
    convert: Callable | None = None  # parsed value -> the request's field value, when they differ
    web: bool = True  # the web API takes it
    tri_state: bool = False  # a flag whose default None means "not said" (validate: the log's)

    def __post_init__(self) -> None:
        if self.is_flag and self.default is None and not self.tri_state:
            object.__setattr__(self, "default", False)  # a flag is off unless given

    @property
    def spellings(self) -> tuple[str, ...]:
        first = self.flags or ("--" + self.name.replace("_", "-"),)
        return (*first, *self.aliases)

    def click_option(self):
        decls = list(self.spellings)
        if self.secondary:
            decls[0] = f"{decls[0]}/{self.secondary}"
        kwargs: dict = {"help": self.help or None, "default": self.default}
        if self.is_flag and not self.secondary:
            kwargs["is_flag"] = True
        if self.type is not None:
            kwargs["type"] = self.type
        for key in ("show_default", "multiple", "required"):
            if getattr(self, key):
                kwargs[key] = True
        if self.metavar:
            kwargs["metavar"] = self.metavar
        if self.callback:
            kwargs["callback"] = self.callback
        return click.option(*decls, self.name, **kwargs)


def decorator(table: list[Option]):
    """A click decorator adding `table`'s options in table order."""
    def add(func):
        for option in reversed(table):
            func = option.click_option()(func)
        return func
    return add


def _nvls(word: str) -> bool | None:
    return {"auto": None, "on": True, "off": False}[word]


def _other_processes_bytes(text: str | None) -> int:
    return parse_bytes(text, "--other-processes-memory") if text else 0


def mm_limits(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    from .vllm_command import parse_mm_limits

    return parse_mm_limits(text)


ENGINES = ["hf", "vllm", "sglang", "both", "servers", "all"]  # request.py: both = vllm + hf, servers = vllm + sglang


def _percentiles(text):
    """--percentiles text -> the Workload's tuple (kvcalc/workload.py parse_percentiles)."""
    from .workload import parse_percentiles

    return None if text is None else parse_percentiles(text)

# The options of one request: plan, explain, plot and fit take them all; the web API takes them as parameters.
PLAN_OPTIONS: list[Option] = [
    Option("gpu", NAME, "t4", "GPU id or alias (kvcalc gpus), or a YAML file.", show_default=True),
    Option("model", NAME, None, "catalog name (kvcalc models), config.json path, or hub id. [default: llama-3.2-3b]"),
    Option("context", TOKENS, None, f"tokens per request (prompt + generation), e.g. 32k = 32,768 (kvcalc's rule: "
           f"k = 1,024); at most {limits.MAX_CONTEXT:,} [default: 8k, or --vllm-command's max_model_len]."),
    Option("batch", POSITIVE, 1, f"concurrent requests (at most {limits.MAX_BATCH:,}).", show_default=True),
    Option("engine", click.Choice(ENGINES), "both", "both: vLLM and transformers; servers: vLLM and SGLang side by "
           "side; all: the three.", show_default=True),
    Option("weights", NAMES, None, f"weight format(s): {', '.join(WEIGHT_FORMATS)}; a list (awq,fp8) shows each "
           "beside the baseline."),
    Option("quantization", NAME, None, "vLLM's --quantization (awq, awq_marlin, gptq, gptq_marlin, fp8, "
           "bitsandbytes): sets --weights.", aliases=("-q",)),
    Option("kv", NAMES, None, "KV format(s): auto, fp8, fp8-e5m2, int8/fp8/int4_per_token_head, nvfp4 (vLLM); hqq-8 (int8), hqq-4, "
           "hqq-2, quanto-4, quanto-2 (transformers); "
           "a list (auto,fp8) shows each with every --weights.", aliases=("--kv-cache-dtype",)),
    Option("util", FRACTION, None, "vLLM gpu_memory_utilization [default: the version's, 0.92 from 0.21, 0.9 "
           "before].", aliases=("--gpu-memory-utilization",), into="request"),
    Option("entrypoint", click.Choice(["serve", "offline"]), "serve", "how vLLM is started: `vllm serve` (the "
           "OpenAI server) or the offline LLM class; sets vLLM's default max_num_batched_tokens and max_num_seqs.",
           show_default=True, into="request"),
    Option("max_model_len", VLLM_LEN, None, f"vLLM max_model_len, at most {limits.MAX_CONTEXT:,}; vLLM's number "
           "rule (32k = 32,000, 32K = 32,768); auto or -1: the model's maximum [default: --context]; SGLang's "
           "--context-length.", aliases=("--context-length",)),
    Option("max_num_batched_tokens", VLLM_INT, None, f"vLLM max_num_batched_tokens, at most "
           f"{limits.MAX_BATCHED_TOKENS:,}; vLLM's number rule [default: vLLM's for this GPU, entry point and "
           "version]; SGLang's --chunked-prefill-size.", aliases=("--chunked-prefill-size",), into="request"),
    Option("max_num_seqs", POSITIVE, None, f"vLLM max_num_seqs (at most {limits.MAX_BATCH:,}); SGLang's "
           "--max-running-requests.", aliases=("--max-running-requests",), into="request"),
    Option("enforce_eager", is_flag=True, help="vLLM without CUDA graphs (SGLang's --disable-cuda-graph).",
           aliases=("--disable-cuda-graph",), into="request"),
    Option("vllm_version", NAME, None, "vLLM version whose rules apply, 0.4.0 and later [default: 0.26.0].",
           into="request"),
    Option("tp", POSITIVE, 1, f"tensor-parallel GPUs (at most {limits.MAX_PARALLEL}; must divide the attention "
           "heads).", aliases=("-tp", "--tensor-parallel-size", "--tp-size"), show_default=True, into="request"),
    Option("pp", POSITIVE, 1, f"pipeline-parallel stages (at most {limits.MAX_PARALLEL} and the model's layers).",
           aliases=("-pp", "--pipeline-parallel-size"), show_default=True, into="request"),
    Option("dtype", NAME, None, "vLLM --dtype: auto, bfloat16, float16, half, float32 [default: auto, 16-bit].",
           into="request"),
    Option("block_size", VLLM_INT, None, "vLLM --block-size / SGLang --page-size [default: the backend's; SGLang 1].",
           aliases=("--page-size",), into="request"),
    Option("kv_cache_memory_bytes", VLLM_INT, None, "vLLM --kv-cache-memory-bytes: the KV budget per GPU (vLLM's "
           "number rule: 20G = 20 GiB, 20g = 20 GB); gpu_memory_utilization is then ignored.", into="request"),
    Option("nccl_nvls", click.Choice(["auto", "on", "off"]), "auto", "NCCL NVLink SHARP buffers at TP > 1 (auto: "
           "on for SXM Hopper/Blackwell; off: NCCL_NVLS_ENABLE=0).", show_default=True, into="request",
           convert=_nvls),
    Option("other_processes_memory", NAME, None, "memory other processes hold on the fullest GPU, e.g. 1.5GiB (a "
           "desktop, another engine): vLLM before 0.6.4 takes it from the KV cache, later ones need total x util "
           "free.", metavar="SIZE", into="request", field="other_processes_bytes", convert=_other_processes_bytes),
    Option("vllm_engine", click.Choice(["auto", "v0", "v1"]), "auto", "force vLLM's engine as VLLM_USE_V1=0/1 did "
           "(V0 before 0.11, V1 from 0.7).", show_default=True, into="request"),
    Option("enable_chunked_prefill", None, None, "vLLM's chunked prefill (V0 only: V1 always chunks) [default: the "
           "version's; V0 on when max_model_len > 32K].", secondary="--no-enable-chunked-prefill", into="request"),
    Option("enable_lora", is_flag=True, help="vLLM --enable-lora: adapter slots preallocated (SGLang --enable-lora / "
           "--lora-paths: its default piecewise prefill graphs are off).", into="request"),
    Option("max_loras", POSITIVE, 1, "vLLM --max-loras.", show_default=True, into="request"),
    Option("max_lora_rank", POSITIVE, 16, "vLLM --max-lora-rank.", show_default=True, into="request"),
    Option("speculative_config", NAME, None, 'vLLM --speculative-config, e.g. \'{"method": "ngram", '
           '"num_speculative_tokens": 4}\' (ngram, eagle, eagle3, mtp).', metavar="JSON", into="request"),
    Option("limit_mm_per_prompt", NAME, None, 'vLLM --limit-mm-per-prompt, e.g. \'{"image": 0}\': with every '
           "modality at 0 vLLM (0.10.1+, per model family) loads no vision/audio encoder and skips the encoder "
           "profile.", metavar="JSON", into="request", convert=mm_limits),
    Option("language_model_only", is_flag=True, help="vLLM --language-model-only: the text decoder only (as every "
           "modality limited to 0).", into="request", convert=bool),
    Option("skip_mm_profiling", is_flag=True, help="vLLM --skip-mm-profiling: the profile run encodes no dummy "
           "image (V1 model runner).", into="request", convert=bool),
    Option("compile_cache", click.Choice(["cold", "warm"]), "cold", "torch.compile's cache when vLLM starts: cold "
           "compiles inside the profile run (a first start), warm loads the stored AOT artifact (a restart with the "
           "same cache directory), whose profile holds no Inductor compile buffers (V2 model runner).",
           show_default=True, into="request"),
    Option("vllm_command", NAME, None, "a vLLM command line as you would run it: its model and flags set the "
           "options above (options given here as well win); unknown flags are warned about.",
           metavar="'vllm serve MODEL ...'"),
    Option("mem_fraction_static", FRACTION, None, "SGLang --mem-fraction-static: weights + KV pool as a share of the "
           "free memory [default: SGLang's for this GPU, TP and chunk size].", into="request"),
    Option("sglang_version", NAME, None, "SGLang release whose rules apply, 0.4.4 and later [default: 0.5.14].",
           into="request"),
    Option("dp_size", POSITIVE, 1, "SGLang --dp-size (with --enable-dp-attention: attention TP is tp / dp).",
           aliases=("--dp",), show_default=True, into="request"),
    Option("enable_dp_attention", is_flag=True, help="SGLang --enable-dp-attention.", into="request", convert=bool),
    Option("speculative_algorithm", NAME, None, "SGLang --speculative-algorithm (EAGLE, EAGLE3, NEXTN, STANDALONE, "
           "NGRAM): the drafter's weights and KV pool (0.5.14 charges them to the pool's budget, earlier releases "
           "to the rest), max_running_requests 48 unless given, the drafter reserve of earlier releases' default "
           "--mem-fraction-static; on 0.5.10 the default piecewise prefill graphs are off.", into="request"),
    Option("speculative_draft_model_path", NAME, None, "SGLang --speculative-draft-model-path: the EAGLE head or "
           "STANDALONE draft model (a catalog name, a config.json or its folder is read for its shape; a hub id "
           "outside the catalog is not fetched: an EAGLE head then has the target's shape) [default: the "
           "checkpoint's MTP layers on DeepSeek/GLM].", metavar="MODEL", into="request"),
    Option("max_total_tokens", POSITIVE, None, "SGLang --max-total-tokens: a cap on the KV pool's tokens "
           "(max_total_num_tokens) [default: none].", into="request"),
    Option("speculative_num_steps", POSITIVE, None, "SGLang --speculative-num-steps [default: SGLang's choice for "
           "the model].", into="request"),
    Option("speculative_eagle_topk", POSITIVE, None, "SGLang --speculative-eagle-topk.", into="request"),
    Option("speculative_num_draft_tokens", POSITIVE, None, "SGLang --speculative-num-draft-tokens (topk 1: steps "
           "+ 1).", into="request"),
    Option("moe_a2a_backend", NAME, None, "SGLang --moe-a2a-backend (deepep, mooncake, ...): anything but none "
           "switches the default piecewise prefill graphs off [default: none].", into="request"),
    Option("cuda_graph_max_bs", POSITIVE, None, "SGLang --cuda-graph-max-bs: the largest decode batch a CUDA graph "
           "replays; it sizes the graph reserve in the default --mem-fraction-static [default: SGLang's for the GPU "
           "and TP].", into="request"),
    Option("max_prefill_tokens", POSITIVE, None, "SGLang --max-prefill-tokens: the input tokens of one prefill "
           "batch (the scheduler's budget) [default: 16384].", into="request"),
    Option("stream_interval", POSITIVE, 1, "SGLang --stream-interval: tokens per streamed chunk (spaces ITL; TTFT, "
           "TPOT and e2e unchanged).", show_default=True, into="request"),
    Option("enable_torch_compile", is_flag=True, help="SGLang --enable-torch-compile: decode batches up to "
           "--torch-compile-max-bs replay inductor-compiled graphs; the default piecewise prefill graphs (and their "
           "memory reserve) are off.", into="request", convert=bool),
    Option("torch_compile_max_bs", POSITIVE, 32, "SGLang --torch-compile-max-bs: the largest decode batch "
           "--enable-torch-compile compiles.", show_default=True, into="request"),
    Option("disable_radix_cache", is_flag=True, help="SGLang --disable-radix-cache: no prefix reuse (the workload's "
           "requests, bench_serving's warm-up prompt included, prefill whole).", into="request", convert=bool),
    Option("disable_overlap_schedule", is_flag=True, help="SGLang --disable-overlap-schedule: the scheduler's normal "
           "loop (each step's result processed before the next step is built: no result lag, a request arriving "
           "during a step joins the next one); SGLang switches it off itself for speculative decoding on releases "
           "before 0.5.13 (engines/sglang.py overlap_off).", into="request", convert=bool),
    Option("sglang_command", NAME, None, "an SGLang command line: its model and flags set the options above "
           "(options given here win); it selects --engine sglang unless --engine is given.",
           metavar="'python -m sglang.launch_server ...'"),
    Option("input_len", TOKENS, None, "workload as vllm bench runs it: prompt tokens per request; sets --context "
           "to input + output and adds TTFT, TPOT, latency and output tokens/s per row.", into="workload"),
    Option("output_len", TOKENS, None, "generated tokens per request [default: 128].", into="workload"),
    Option("concurrency", POSITIVE, None, "requests in flight (vllm bench --max-concurrency); sets --batch "
           "[default: 1].", into="workload"),
    Option("request_rate", RATE, None, "Poisson arrivals in requests/s (vllm bench --request-rate); the "
           "concurrency follows.", into="workload"),
    Option("num_prompts", click.IntRange(1, 100_000), None, "requests in the run (vllm bench --num-prompts) "
           "[default: 4 x --concurrency (16-400), or 25 s of --request-rate (50-400)].", into="workload"),
    Option("random_range_ratio", click.FloatRange(0, 1, max_open=True), None, "vllm bench --random-range-ratio: "
           "lengths uniform in [L (1 - r), L (1 + r)] [default: 0].", into="workload"),
    Option("prefix_len", TOKENS, None, "a prefix every prompt shares, before its --input-len tokens (vllm bench "
           "--random-prefix-len); prefix caching computes it once.", aliases=("--random-prefix-len",),
           into="workload"),
    Option("fresh_server", is_flag=True, help="the run is the server's first: vllm bench (0.26) skips its ready "
           "check by default, so its first request pays the server's one-time first-request cost (added to that request's "
           "TTFT; kvcalc/data/serve.yaml first_request_s); default: a server that has served before.", into="workload",
           convert=lambda v: True if v else None, web=False),
    Option("burstiness", click.FloatRange(0, min_open=True), None, "vllm bench --burstiness of --request-rate "
           "arrivals: gamma-distributed gaps, 1 = Poisson, < 1 burstier [default: 1].", into="workload"),
    Option("percentiles", NAME, None, "vllm bench --metric-percentiles of TTFT, TPOT, ITL and e2e "
           "[default: 50,99].", aliases=("--metric-percentiles",), metavar="P,P,...", into="workload",
           convert=_percentiles),
    Option("no_calibration", is_flag=True, help="ignore your calibration (kvcalc calibrate) for this GPU and vLLM "
           "version."),
]

# `kvcalc plan`'s own options (after PLAN_OPTIONS): output modes and extras.
PLAN_COMMAND_OPTIONS: list[Option] = [
    Option("as_json", is_flag=True, flags=("--json",), help="print the table as JSON (schema kvcalc.plan/1).",
           web=False),
    Option("as_csv", is_flag=True, flags=("--csv",), help="print the table as CSV.", web=False),
    Option("explain_config", None, None, "after the table, the full breakdown of one configuration (e.g. "
           "baseline, fp8-kv).", flags=("--explain",), metavar="CONFIG", web=False),
    Option("tp_sweep", is_flag=True, help="also show vLLM at TP 1, 2, 4, 8 (automatic when TP 1 does not fit)."),
    Option("plot_path", None, None, "also write capacity vs context, speed vs batch and the memory breakdown to one "
           "PNG (needs matplotlib: python3 -m pip install matplotlib).", flags=("--plot",), metavar="FILE.png",
           web=False),
    Option("emit", click.Choice(["serve", "docker", "kubernetes", "kserve", "llm-d"]), None, "print a deployment "
           "file for the asked configuration's vLLM row instead of the table: the vllm serve line, a docker run "
           "line, a Kubernetes Deployment + Service, a KServe InferenceService or llm-d Helm values "
           "(docs/api.md).", metavar="KIND", web=False),
    Option("require_fit", is_flag=True, help="a gate: exit 1, with one line saying why, unless the asked "
           "configuration (--weights/--kv, else the baseline) fits on every asked engine (--engine vllm to gate the "
           "vLLM deployment alone).", web=False),
]

FIT_QUESTIONS = ["max-context", "max-concurrency", "min-util", "min-gpus", "auto"]

PLAN = {o.name: o for o in PLAN_OPTIONS}


def same(name: str, **changes) -> Option:
    """Plan's option `name` in another command's table: the same spellings, type and default (only the help, and
    whether it is required, may say more)."""
    assert set(changes) <= {"help", "required", "web"}, changes
    return replace(PLAN[name], into=None, **changes)


def override(name: str, help: str) -> Option:
    """Plan's option `name` as an override of what a log or a bench file says (validate, calibrate): the same
    spellings and type; not given, it is None (the file's value), so it shows no default."""
    option = PLAN[name]
    return replace(option, default=None, show_default=False, help=help, into=None, convert=None, web=False,
                   tri_state=option.is_flag)


def grid(name: str, **changes) -> Option:
    """Plan's option `name` as a list of its values (search's grids): the same spellings and element type."""
    option = PLAN[name]
    item = option.type.item if isinstance(option.type, ListOf) else option.type
    kind = UTIL_GRID if item is FRACTION else ListOf(item, sort=item is not NAME)
    return replace(option, type=kind, default=None, show_default=False, into=None, convert=None, **changes)


class _VllmOnly(click.Choice):
    """fit's --engine: vllm or sglang, the servers it answers for one at a time; the others are refused with the
    reason."""

    def __init__(self):
        super().__init__(["vllm", "sglang"])

    def convert(self, value, param, ctx):
        if str(value).strip().lower() in ENGINES and str(value).strip().lower() not in ("vllm", "sglang"):
            raise UsageError(f"kvcalc fit answers for vLLM (block-granular) or SGLang (--engine sglang), one at a "
                             f"time; drop --engine {shown(value)}")
        return super().convert(value, param, ctx)


# `kvcalc fit`: plan's options, for vLLM only (it answers at vLLM's block granularity).
FIT_PLAN_OPTIONS: list[Option] = [
    replace(o, type=_VllmOnly(), default="vllm", help="fit answers for vLLM (block-granular) or SGLang.")
    if o.name == "engine" else o for o in PLAN_OPTIONS]

# `kvcalc fit`'s own options (after FIT_PLAN_OPTIONS).
FIT_OPTIONS: list[Option] = [
    Option("max_gpus", click.IntRange(1, 64), 16, "min-gpus: the largest GPU count tried.", show_default=True),
    Option("as_json", is_flag=True, flags=("--json",), help="print the answer as JSON (schema kvcalc.fit/1).",
           web=False),
]


def positive_float(name: str):
    """A click callback: a positive finite number, or None."""
    def convert(ctx, param, value):
        if value is None:
            return None
        if not value > 0 or value != value or value == float("inf"):
            raise click.BadParameter(f"must be a positive number, got {value}")
        return value
    return convert


# `kvcalc search`: a workload, targets, and the space of deployments to search: plan's options, or lists of them.
SEARCH_OPTIONS: list[Option] = [
    same("model"),
    same("vllm_command", help="a vLLM command line: its model and flags fix the search's model, formats, TP/PP, "
         "util, max_num_seqs and max_num_batched_tokens (options given here as well win)."),
    same("input_len", help="prompt tokens per request, e.g. 2k.", required=True),
    same("output_len"),
    same("concurrency", help="requests in flight at once, all replicas together (vllm bench --max-concurrency)."),
    same("request_rate", help="requests per second, all replicas together (Little's law sets the concurrency)."),
    same("num_prompts", help="requests in the simulated vllm bench run, all replicas together [default: as "
         "kvcalc plan]."),
    same("random_range_ratio"),
    same("prefix_len"),
    same("burstiness"),
    same("fresh_server"),
    same("percentiles"),
    Option("max_ttft_ms", float, None, "target: time to first token.", callback=positive_float("--max-ttft-ms")),
    Option("max_tpot_ms", float, None, "target: time per output token after the first.",
           callback=positive_float("--max-tpot-ms")),
    Option("min_context", TOKENS, None, "target: max_model_len at least this (default input + output)."),
    Option("max_quality_risk", click.Choice(["none", "low", "moderate", "high"]), None, "target: the worst quality "
           "risk accepted (kvcalc plan's column)."),
    replace(grid("gpu", help="GPU ids/aliases/YAML files to try [default: every built-in]."), name="gpus",
            flags=("--gpus", "--gpu")),
    grid("weights", help="weight formats to try [default: bf16,fp8,awq]."),
    grid("kv", help="KV formats to try [default: auto,fp8]."),
    grid("tp", help="TP sizes to try [default: 1,2,4,8; invalid ones for the model are skipped]."),
    grid("pp", help="PP sizes to try [default: 1]."),
    Option("max_replicas", click.IntRange(1, 1024), 8, show_default=True),
    Option("max_gpus_per_replica", click.IntRange(1, 64), 8, show_default=True),
    replace(grid("util", help="gpu_memory_utilization values to try, or START:STOP:STEP [default: 0.80:0.95:0.01]."),
            flags=("--utils", "--util")),
    grid("max_num_seqs", help="max_num_seqs values to try [default: 1,2,4,...,1024]."),
    same("max_num_batched_tokens", help="vLLM max_num_batched_tokens [default: vllm serve's for each GPU]."),
    same("vllm_version"),
    Option("search_engine", click.Choice(["vllm", "sglang", "both"]), "vllm", "which server's deployments: vLLM's, "
           "SGLang's (engines/sglang.py at its default mem_fraction_static), or both side by side.",
           flags=("--server",), show_default=True),
    same("sglang_version"),
    # SGLang's settings: every SGLang candidate runs with them (search_sglang.py SGLANG_SETTINGS); refused with
    # --server vllm
    *[same(name) for name in ("mem_fraction_static", "dp_size", "enable_dp_attention", "speculative_algorithm",
                              "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
                              "speculative_num_draft_tokens", "moe_a2a_backend", "enable_lora", "max_prefill_tokens",
                              "cuda_graph_max_bs", "enable_torch_compile", "torch_compile_max_bs", "block_size",
                              "enforce_eager", "stream_interval", "disable_radix_cache", "max_total_tokens",
                              "disable_overlap_schedule")],
    same("sglang_command", help="an SGLang command line: its model and flags fix the search's model, formats, TP, "
         "--max-running-requests and SGLang settings, and it searches SGLang's deployments unless --server is "
         "given (options given here as well win)."),
    Option("price", None, None, "override a price (repeatable).", multiple=True, metavar="GPU=USD", web=False),
    Option("prices_file", None, None, "price file [default: $XDG_CONFIG_HOME/kvcalc/prices.yaml if present, over "
           "the shipped one].", flags=("--prices",), metavar="FILE", web=False),
    Option("price_tier", click.Choice(["on-demand", "spot", "reserved"]), "on-demand", "which published price to "
           "rent at: on demand (per GPU or whole instances), or the spot / reserved instance offers of "
           "kvcalc/data/prices.yaml.", show_default=True),
    Option("published_prices_only", is_flag=True, help="rank only GPUs whose price is a published offer (leave out "
           "the estimated prices marked *)."),
    Option("top", click.IntRange(1, 10000), 10, "rows shown.", show_default=True),
    Option("as_json", is_flag=True, flags=("--json",), help="print the result as JSON (schema kvcalc.search/1).",
           web=False),
    Option("emit", click.Choice(["serve", "docker", "kubernetes", "kserve", "llm-d"]), None, "print a deployment "
           "file for the winner instead of the table (serve, docker, kubernetes, kserve, llm-d: docs/api.md).",
           metavar="KIND", web=False),
]

plan_options = decorator(PLAN_OPTIONS)
fit_plan_options = decorator(FIT_PLAN_OPTIONS)
plan_command_options = decorator(PLAN_COMMAND_OPTIONS)
fit_options = decorator(FIT_OPTIONS)
search_options = decorator(SEARCH_OPTIONS)


def web_table(command: str) -> list[Option]:
    """The options the web API takes for `command` (plan, explain, plots: a request; search: a search)."""
    table = SEARCH_OPTIONS if command == "search" else PLAN_OPTIONS + PLAN_COMMAND_OPTIONS
    return [o for o in table if o.web]


def given_names() -> set[str]:
    """The options the user typed on the running command's line (not left at their defaults)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)}


def parse(table: list[Option], argv: list[str], command: str = "kvcalc") -> tuple[dict, set[str]]:
    """`argv` parsed by the click options of `table`, exactly as the CLI parses them: ({name: value}, the names
    given in `argv` rather than left at their defaults)."""
    @click.command(name=command)
    def _noop(**kwargs):  # never run: make_context only parses
        return kwargs

    ctx = decorator(table)(_noop).make_context(command, argv)
    return dict(ctx.params), {name for name in ctx.params
                              if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)}


# ------------------------------------------------------------------------------------ lists (search's grids)


def split_list(text: str | None, what: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c']; None -> []."""
    if text is None:
        return []
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{what}: give a comma-separated list")
    return items


def int_list(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    out = []
    for item in split_list(text, what):
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{what}: {item!r} is not a whole number") from None
        if not 1 <= value <= 1 << 20:
            raise UsageError(f"{what}: {value} is out of range (1 to {1 << 20})")
        out.append(value)
    return tuple(sorted(set(out)))


def util_list(text: str | None) -> tuple[float, ...] | None:
    """'0.8,0.9' or a range 'START:STOP:STEP' (inclusive), e.g. 0.80:0.95:0.01."""
    if text is None:
        return None
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0:
                raise ValueError
            count = int(round((stop - start) / step)) + 1
            # refused below, before the list is built: a step of 1e-9 would build ~10^9 values
            values = [round(start + i * step, 4) for i in range(max(count, 0))] if count <= 1000 else [0.0] * 1001
        else:
            values = [float(x) for x in split_list(text, "--utils")]
    except ValueError:
        raise UsageError(f"--utils {text!r}: use a list (0.85,0.9) or START:STOP:STEP (0.80:0.95:0.01)") from None
    if not values or any(not 0 < v <= 1 for v in values) or len(values) > 1000:
        raise UsageError(f"--utils {text!r}: every gpu_memory_utilization must be in (0, 1], at most 1000 values")
    return tuple(sorted(set(values)))
