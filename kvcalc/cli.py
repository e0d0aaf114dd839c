"""The `kvcalc` command: plan, explain, plot, gpus, models, validate, fit, search.

Usage errors print one line and exit with code 2; no traceback reaches the user for bad input.
"""

from __future__ import annotations

import json

import click

from . import limits
from .cli_errors import CONTEXT_SETTINGS, run_command
from .errors import UsageError, shown
from .units import parse_bytes, parse_tokens, parse_vllm_int


def _option(param) -> str:
    return "--" + param.name.replace("_", "-") if param else "value"


class _Tokens(click.ParamType):
    """A token count such as 32k; within limits.BOUNDS when the option has a bound there."""

    name = "tokens"

    def convert(self, value, param, ctx):
        number = parse_tokens(value, what=_option(param))
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
            raise UsageError(f"{_option(param)} {shown(value)} is not a number") from None
        if not 0 < number <= 1:  # NaN fails this too
            raise UsageError(f"{_option(param)} must be in (0, 1], got {shown(value)}: it is the share of the GPU's "
                             "memory vLLM may use (gpu_memory_utilization)")
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
                raise UsageError(f"{_option(param)} {shown(value)} is not a whole number")
            if len(text.lstrip("0")) > 12:
                raise UsageError(f"{_option(param)} {shown(value)} is too large")
            number = int(text)
        if param is not None and param.name in limits.BOUNDS:
            limits.check(param.name, number)
        elif number < 1:
            raise UsageError(f"{_option(param)} must be at least 1, got {shown(value)}")
        return number


class _Name(click.ParamType):
    """A catalog name, GPU id, hub id or file path: printable text of at most MAX_NAME characters (a NUL or a
    newline cannot name anything, and a path longer than the OS allows is refused before the OS is asked)."""

    name = "text"
    MAX_NAME = 4096  # PATH_MAX on Linux

    def convert(self, value, param, ctx):
        text = str(value)
        if len(text) > self.MAX_NAME:
            raise UsageError(f"{_option(param)} {shown(value)} is too long")
        if not text.isprintable():
            raise UsageError(f"{_option(param)} {shown(value)} holds a control character")
        return text


class _Rate(click.ParamType):
    """Requests per second: a positive finite number."""

    name = "rate"

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{_option(param)} {shown(value)} is not a number") from None
        if not (0 < number < 1e9):  # NaN and inf fail this too
            raise UsageError(f"{_option(param)} must be a positive number of requests/s, got {shown(value)}")
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
        number = parse_vllm_int(value, what=_option(param))
        if param is not None and param.name in limits.BOUNDS:
            limits.check(param.name, number)
        return number


AUTO = -1  # --max-model-len auto / -1: the model's max_position_embeddings

TOKENS, FRACTION, POSITIVE, NAME, RATE = _Tokens(), _Fraction(), _Positive(), _Name(), _Rate()
VLLM_INT, VLLM_LEN = _VllmInt(), _VllmInt(allow_auto=True)


def _plan_options(func):
    options = [
        click.option("--gpu", default="t4", type=NAME, show_default=True, help="GPU id or alias (kvcalc gpus), or a YAML file."),
        click.option("--model", default=None, type=NAME, help="catalog name (kvcalc models), config.json path, or hub id. "
                     "[default: llama-3.2-3b]"),
        click.option("--context", default=None, type=TOKENS,
                     help=f"tokens per request (prompt + generation), e.g. 32k = 32,768 (kvcalc's rule: k = 1,024); "
                          f"at most {limits.MAX_CONTEXT:,} [default: 8k, or --vllm-command's max_model_len]."),
        click.option("--batch", default=1, type=POSITIVE, show_default=True,
                     help=f"concurrent requests (at most {limits.MAX_BATCH:,})."),
        click.option("--engine", type=click.Choice(["hf", "vllm", "both"]), default="both", show_default=True),
        click.option("--weights", default=None, type=NAME, help="weight format: bf16, fp8, int8, nf4, nf4-dq, awq, gptq, hqq4."),
        click.option("--quantization", "-q", default=None, type=NAME,
                     help="vLLM's --quantization (awq, awq_marlin, gptq, gptq_marlin, fp8, bitsandbytes): sets --weights."),
        click.option("--kv", "--kv-cache-dtype", "kv", default=None, type=NAME,
                     help="KV format: auto, fp8, fp8-e5m2, hqq-8 (int8), hqq-4, hqq-2, quanto-4, quanto-2."),
        click.option("--util", "--gpu-memory-utilization", "util", default=None, type=FRACTION,
                     help="vLLM gpu_memory_utilization [default: the version's, 0.92 from 0.21, 0.9 before]."),
        click.option("--entrypoint", type=click.Choice(["serve", "offline"]), default="serve", show_default=True,
                     help="how vLLM is started: `vllm serve` (the OpenAI server) or the offline LLM class; sets "
                          "vLLM's default max_num_batched_tokens and max_num_seqs."),
        click.option("--max-model-len", type=VLLM_LEN, default=None,
                     help=f"vLLM max_model_len, at most {limits.MAX_CONTEXT:,}; vLLM's number rule (32k = 32,000, "
                          "32K = 32,768); auto or -1: the model's maximum [default: --context]."),
        click.option("--max-num-batched-tokens", type=VLLM_INT, default=None,
                     help=f"vLLM max_num_batched_tokens, at most {limits.MAX_BATCHED_TOKENS:,}; vLLM's number rule "
                          "[default: vLLM's for this GPU, entry point and version]."),
        click.option("--max-num-seqs", type=POSITIVE, default=None,
                     help=f"vLLM max_num_seqs (at most {limits.MAX_BATCH:,})."),
        click.option("--enforce-eager", is_flag=True, help="vLLM without CUDA graphs."),
        click.option("--vllm-version", default=None, type=NAME,
                     help="vLLM version whose rules apply, 0.4.0 and later [default: 0.26.0]."),
        click.option("--tp", "-tp", "--tensor-parallel-size", "tp", default=1, type=POSITIVE, show_default=True,
                     help=f"tensor-parallel GPUs (at most {limits.MAX_PARALLEL}; must divide the attention heads)."),
        click.option("--pp", "-pp", "--pipeline-parallel-size", "pp", default=1, type=POSITIVE, show_default=True,
                     help=f"pipeline-parallel stages (at most {limits.MAX_PARALLEL} and the model's layers)."),
        click.option("--dtype", default=None, type=NAME,
                     help="vLLM --dtype: auto, bfloat16, float16, half, float32 [default: auto, 16-bit]."),
        click.option("--block-size", type=VLLM_INT, default=None, help="vLLM --block-size [default: the backend's]."),
        click.option("--kv-cache-memory-bytes", type=VLLM_INT, default=None,
                     help="vLLM --kv-cache-memory-bytes: the KV budget per GPU (vLLM's number rule: 20G = 20 GiB, "
                          "20g = 20 GB); gpu_memory_utilization is then ignored."),
        click.option("--nccl-nvls", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
                     help="NCCL NVLink SHARP buffers at TP > 1 (auto: on for SXM Hopper/Blackwell; off: "
                          "NCCL_NVLS_ENABLE=0)."),
        click.option("--other-processes-memory", "other_processes_memory", default=None, type=NAME, metavar="SIZE",
                     help="memory other processes hold on the fullest GPU, e.g. 1.5GiB (a desktop, another engine): "
                          "vLLM before 0.6.4 takes it from the KV cache, later ones need total x util free."),
        click.option("--vllm-engine", type=click.Choice(["auto", "v0", "v1"]), default="auto", show_default=True,
                     help="force vLLM's engine as VLLM_USE_V1=0/1 did (V0 before 0.11, V1 from 0.7)."),
        click.option("--enable-chunked-prefill/--no-enable-chunked-prefill", "enable_chunked_prefill", default=None,
                     help="vLLM's chunked prefill (V0 only: V1 always chunks) [default: the version's; V0 on when "
                          "max_model_len > 32K]."),
        click.option("--enable-lora", is_flag=True, help="vLLM --enable-lora: adapter slots preallocated."),
        click.option("--max-loras", type=POSITIVE, default=1, show_default=True, help="vLLM --max-loras."),
        click.option("--max-lora-rank", type=POSITIVE, default=16, show_default=True, help="vLLM --max-lora-rank."),
        click.option("--speculative-config", default=None, type=NAME, metavar="JSON",
                     help='vLLM --speculative-config, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\' '
                          "(ngram, eagle, eagle3, mtp)."),
        click.option("--limit-mm-per-prompt", "limit_mm_per_prompt", default=None, type=NAME, metavar="JSON",
                     help='vLLM --limit-mm-per-prompt, e.g. \'{"image": 0}\': with every modality at 0 vLLM '
                          "(0.10.1+, per model family) loads no vision/audio encoder and skips the encoder profile."),
        click.option("--language-model-only", is_flag=True,
                     help="vLLM --language-model-only: the text decoder only (as every modality limited to 0)."),
        click.option("--skip-mm-profiling", is_flag=True,
                     help="vLLM --skip-mm-profiling: the profile run encodes no dummy image (V1 model runner)."),
        click.option("--vllm-command", default=None, type=NAME, metavar="'vllm serve MODEL ...'",
                     help="a vLLM command line as you would run it: its model and flags set the options above "
                          "(options given here as well win); unknown flags are warned about."),
        click.option("--input-len", type=TOKENS, default=None,
                     help="workload as vllm bench runs it: prompt tokens per request; sets --context to input + "
                          "output and adds TTFT, TPOT, latency and output tokens/s per row."),
        click.option("--output-len", type=TOKENS, default=None, help="generated tokens per request [default: 128]."),
        click.option("--concurrency", type=POSITIVE, default=None,
                     help="requests in flight (vllm bench --max-concurrency); sets --batch [default: 1]."),
        click.option("--request-rate", type=RATE, default=None,
                     help="Poisson arrivals in requests/s (vllm bench --request-rate); the concurrency follows."),
        click.option("--no-calibration", is_flag=True,
                     help="ignore your calibration (kvcalc calibrate) for this GPU and vLLM version."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _workload(input_len, output_len, concurrency, request_rate):
    """The --input-len workload, or None; the other workload options need it."""
    from .workload import Workload

    if input_len is None:
        given = [n for n, v in (("--output-len", output_len), ("--concurrency", concurrency),
                                ("--request-rate", request_rate)) if v is not None]
        if given:
            raise UsageError(f"{given[0]} describes a vllm bench workload and needs --input-len")
        return None
    return Workload(input_len, output_len or 128, concurrency, request_rate)


def _request(gpu, model, context, batch, engine, weights, kv, util, max_model_len, max_num_batched_tokens,
             max_num_seqs, enforce_eager, vllm_version, tp, pp, quantization=None, entrypoint="serve", dtype=None,
             block_size=None, kv_cache_memory_bytes=None, nccl_nvls="auto", vllm_command=None, enable_lora=False,
             max_loras=1, max_lora_rank=16, speculative_config=None, other_processes_memory=None,
             vllm_engine="auto", enable_chunked_prefill=None, no_calibration=False, input_len=None, output_len=None,
             concurrency=None, request_rate=None, limit_mm_per_prompt=None, language_model_only=False,
             skip_mm_profiling=False):
    from .catalog import DEFAULT_MODEL, load_model
    from .hardware import get_gpu
    from .plan import PlanRequest, request_warnings, weights_for_quantization

    given = dict(locals())
    notes: list[str] = []
    if vllm_command:
        from .vllm_command import apply_command

        explicit = _explicit_options()
        given, notes = apply_command(vllm_command, given, explicit)
        if "gpu" not in explicit:  # a pasted command never names its GPU: planning on --gpu's default would mislead
            raise UsageError("--vllm-command needs --gpu: a vLLM command line does not say which GPU it runs on "
                             "(kvcalc gpus lists the ids)")
        if "engine" not in explicit:  # a vLLM command: vLLM rows only, unless --engine asks for more
            given["engine"] = "vllm"
    if given["quantization"]:
        if given["weights"]:
            raise UsageError("give --weights or --quantization, not both")
        given["weights"] = weights_for_quantization(given["quantization"])
    workload = _workload(input_len, output_len, concurrency, request_rate)
    context, batch = given["context"], given["batch"]
    if workload is not None:
        # before any model or GPU is read: a bad workload is a usage error
        workload.check(given["max_model_len"] if given["max_model_len"] != AUTO else None)
        context, batch = workload.context, workload.concurrency or 1
    spec = load_model(given["model"] or DEFAULT_MODEL)
    profile = get_gpu(given["gpu"])
    engine = given["engine"]
    engines = ("vllm", "hf") if engine == "both" else (engine,)
    max_model_len = given["max_model_len"]
    if max_model_len == AUTO:
        max_model_len = spec.max_position_embeddings
        limits.check("max_model_len", max_model_len)
    if vllm_command and context is None:
        context = max_model_len or spec.max_position_embeddings  # the command's own length
    nvls = {"auto": None, "on": True, "off": False}[given["nccl_nvls"]]
    req = PlanRequest(spec=spec, gpu=profile, context=context or 8192, batch=batch, engines=engines,
                      weights=given["weights"], kv=given["kv"], util=given["util"], max_model_len=max_model_len,
                      max_num_batched_tokens=given["max_num_batched_tokens"], max_num_seqs=given["max_num_seqs"],
                      enforce_eager=given["enforce_eager"], vllm_version=given["vllm_version"], tp=given["tp"],
                      pp=given["pp"], entrypoint=given["entrypoint"], dtype=given["dtype"],
                      block_size=given["block_size"], kv_cache_memory_bytes=given["kv_cache_memory_bytes"],
                      nccl_nvls=nvls, enable_lora=given["enable_lora"], max_loras=given["max_loras"],
                      max_lora_rank=given["max_lora_rank"], speculative_config=given["speculative_config"],
                      other_processes_bytes=parse_bytes(other_processes_memory, "--other-processes-memory")
                      if other_processes_memory else 0, vllm_engine=given["vllm_engine"],
                      enable_chunked_prefill=given["enable_chunked_prefill"], workload=workload,
                      limit_mm_per_prompt=mm_limits(given["limit_mm_per_prompt"]),
                      language_model_only=bool(given["language_model_only"]),
                      skip_mm_profiling=bool(given["skip_mm_profiling"]), from_command=bool(vllm_command))
    warnings = notes + request_warnings(req)
    if given["quantization"] and "vllm" in engines:
        from .engines.vllm_kernels import forced_slow_kernel

        slow = forced_slow_kernel(given["quantization"], req.vllm_version)
        if slow:
            warnings.append("vllm: " + slow)
    if "vllm" in engines and not no_calibration:
        from .calibrate import find

        req.calibration, why = find(profile.name, req.vllm_version)
        if req.calibration is not None:
            warnings.append("vllm: " + req.calibration.describe(req.tp, req.pp))
            if req.calibration.speed is not None:  # vLLM rows' speed model uses the fitted per-GPU constants
                from .calibrate import with_speed

                req.gpu = with_speed(req.gpu, req.calibration.speed, req.calibration.source)
        elif why:
            warnings.append(why)
    return req, warnings


def mm_limits(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    from .vllm_command import parse_mm_limits

    return parse_mm_limits(text)


def _explicit_options() -> set[str]:
    """The parameters the user typed on kvcalc's own command line (not defaults)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)}


class _Commands(click.Group):
    """kvcalc's commands. `validate` and `calibrate` (the measuring wing, kvcalc/validate/) and `fit`/`search`
    (kvcalc/search_cli.py) are imported only when they are run or listed, so `kvcalc plan` never loads them."""

    LAZY = ("validate", "calibrate", "fit", "search")

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx, name):
        if name == "validate":
            from .validate.cli import validate

            return validate
        if name == "calibrate":
            from .validate.calibration_fit import calibrate_command

            return calibrate_command
        if name in ("fit", "search"):  # kvcalc/search_cli.py, on plan's own options
            from .search_cli import commands

            return commands(_plan_options, _request, TOKENS)[name]
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="kvcalc")
def cli():
    """Will this model fit on this GPU under this engine, and how fast will it decode?"""


@cli.command()
@_plan_options
@click.option("--json", "as_json", is_flag=True, help="print the table as JSON (schema kvcalc.plan/1).")
@click.option("--csv", "as_csv", is_flag=True, help="print the table as CSV.")
@click.option("--explain", "explain_config", default=None, metavar="CONFIG",
              help="after the table, the full breakdown of one configuration (e.g. baseline, fp8-kv).")
@click.option("--tp-sweep", is_flag=True, help="also show vLLM at TP 1, 2, 4, 8 (automatic when TP 1 does not fit).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="also write capacity vs context, speed vs batch and the memory breakdown to one PNG "
                   "(needs matplotlib: python3 -m pip install matplotlib).")
def plan(as_json, as_csv, explain_config, tp_sweep, plot_path, **kwargs):
    """The decision table: configurations x engines, with memory, capacity, speed, risk and verdicts.

    Example: kvcalc plan --gpu t4 --context 32k
    """
    from .plan import plan as make_plan
    from .plan import plan_json, should_sweep
    from .plan import tp_sweep as make_sweep

    if plot_path:
        from .plots import check_output

        check_output(plot_path)
    req, warnings = _request(**kwargs)
    rows = make_plan(req, warnings)
    sweep = make_sweep(req) if should_sweep(req, rows, tp_sweep) else None
    if as_json:
        click.echo(json.dumps(plan_json(req, rows, warnings, sweep), indent=1))
        _write_plot("all", req, rows, plot_path)
        return
    if as_csv:
        from .render import csv_text

        click.echo(csv_text(rows), nl=False)
        _write_plot("all", req, rows, plot_path)
        return
    from .render import explain_text, render_sweep, render_table

    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    render_table(req, rows)
    if req.workload is not None:
        from .render import render_bench

        render_bench(req, rows)
    if sweep:
        render_sweep(req, sweep)
    if explain_config:
        chosen = [r for r in rows if r.config == explain_config]
        if not chosen:
            raise UsageError(f"no configuration {explain_config!r} in this table; "
                             f"choose from {', '.join(sorted({r.config for r in rows}))}")
        for row in chosen:
            click.echo(explain_text(req, row))
    _write_plot("all", req, rows, plot_path)


def _write_plot(kind, req, rows, path) -> None:
    """Draw one plot (or all three) to `path`; matplotlib is imported only here, only when a plot is asked for."""
    if not path:
        return
    from .plots import plot_kind

    written = plot_kind(kind, req, rows, path)
    click.echo(f"wrote {written}", err=True)


@cli.command(name="plot")
@click.argument("kind", type=click.Choice(["capacity", "speed", "memory"]))
@click.option("--out", "out_path", required=True, metavar="FILE.png", help="where to write the PNG.")
@_plan_options
def plot_command(kind, out_path, **kwargs):
    """One picture of the plan: capacity (vLLM requests at once vs context), speed (decode tokens/s vs batch,
    with the H200 measurements) or memory (where the GPU's memory goes, per configuration and engine).

    Example: kvcalc plot capacity --gpu l4 --model llama-3.1-8b --context 16k --out capacity.png
    """
    from .plan import plan as make_plan
    from .plots import check_output

    check_output(out_path)
    req, warnings = _request(**kwargs)
    rows = make_plan(req, warnings)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    _write_plot(kind, req, rows, out_path)


@cli.command()
@_plan_options
def explain(**kwargs):
    """Full breakdown of one configuration (--weights/--kv choose it; default: the baseline)."""
    from .plan import custom_key
    from .plan import plan as make_plan
    from .render import explain_text

    req, warnings = _request(**kwargs)
    rows = make_plan(req, warnings)
    wanted = [r for r in rows if r.config == custom_key(req)]
    if not wanted:  # the asked configuration runs on no asked engine: say why rather than explain another one
        why = [w for w in warnings if w.startswith(("vllm:", "hf:"))]
        raise UsageError("nothing to explain: " + "; ".join(why or ["no row for the asked configuration"]))
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    for row in wanted:
        click.echo(explain_text(req, row))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def gpus(as_json):
    """GPU profiles built in (add your own with --gpu FILE.yaml)."""
    from .render import gpus_payload, render_gpus

    if as_json:
        click.echo(json.dumps(gpus_payload(), indent=1))
    else:
        from .hardware import list_gpus

        render_gpus(list_gpus())


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def models(as_json):
    """Models in the built-in catalog (any config.json also works with --model PATH)."""
    from .render import catalog_specs, models_payload, render_models

    specs = catalog_specs()
    if as_json:
        click.echo(json.dumps(models_payload(specs), indent=1))
    else:
        render_models(specs)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to bind; anything but loopback lets other machines use the page.")
@click.option("--port", default=8000, type=click.IntRange(1, 65535), show_default=True)
@click.option("--open", "open_browser", is_flag=True, help="open the page in the default browser.")
@click.option("--allow-hub", is_flag=True, help="let the page read hub ids outside the catalog (network access).")
def serve(host, port, open_browser, allow_hub):
    """A local web page: the table, the plots, explain and search, updated as you type (needs starlette and uvicorn: python3 -m pip install starlette uvicorn)."""
    import importlib

    # kvcalc/web/ is a surface above the CLI (it parses every request with the CLI's own options), so the CLI hands
    # over to it by name, as an entry point would, rather than importing it (tests/test_import_graph.py)
    importlib.import_module("kvcalc.web.server").serve(host=host, port=port, open_browser=open_browser,
                                                       allow_hub=allow_hub)


def main(argv: list[str] | None = None) -> None:
    run_command(cli, argv, "kvcalc")


if __name__ == "__main__":
    main()
