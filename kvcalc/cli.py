"""The `kvcalc` command: plan, explain, plot, gpus, models, validate.

Usage errors print one line and exit with code 2; no traceback reaches the user for bad input.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import click

from .cli_errors import run_command
from .errors import UsageError
from .units import parse_tokens

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class _Tokens(click.ParamType):
    name = "tokens"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_tokens(value, what=f"--{param.name.replace('_', '-')}" if param else "size")
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


class _Fraction(click.ParamType):
    name = "fraction"

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not 0 < number <= 1:
            self.fail(f"gpu_memory_utilization must be in (0, 1], got {value}: it is the share of the GPU's "
                      "memory vLLM may use", param, ctx)
        return number


class _Positive(click.ParamType):
    name = "n"

    def convert(self, value, param, ctx):
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if number < 1:
            self.fail(f"must be at least 1, got {value}", param, ctx)
        return number


TOKENS, FRACTION, POSITIVE = _Tokens(), _Fraction(), _Positive()


def _plan_options(func):
    options = [
        click.option("--gpu", default="t4", show_default=True, help="GPU id or alias (kvcalc gpus), or a YAML file."),
        click.option("--model", default=None, help="catalog name (kvcalc models), config.json path, or hub id. "
                     "[default: llama-3.2-3b]"),
        click.option("--context", default="8k", type=TOKENS, show_default=True,
                     help="tokens per request (prompt + generation), e.g. 32k."),
        click.option("--batch", default=1, type=POSITIVE, show_default=True, help="concurrent requests."),
        click.option("--engine", type=click.Choice(["hf", "vllm", "both"]), default="both", show_default=True),
        click.option("--weights", default=None, help="weight format: bf16, fp8, int8, nf4, nf4-dq, awq, gptq, hqq4."),
        click.option("--kv", default=None, help="KV format: auto, fp8, fp8-e5m2, hqq-8 (int8), hqq-4, hqq-2, quanto-4, quanto-2."),
        click.option("--util", "--gpu-memory-utilization", "util", default=0.9, type=FRACTION, show_default=True,
                     help="vLLM gpu_memory_utilization."),
        click.option("--max-model-len", type=TOKENS, default=None, help="vLLM max_model_len [default: --context]."),
        click.option("--max-num-batched-tokens", type=TOKENS, default=None,
                     help="vLLM max_num_batched_tokens [default: vLLM's for this GPU]."),
        click.option("--max-num-seqs", type=POSITIVE, default=None, help="vLLM max_num_seqs."),
        click.option("--enforce-eager", is_flag=True, help="vLLM without CUDA graphs."),
        click.option("--vllm-version", default=None, help="vLLM version whose rules apply [default: 0.26.0]."),
        click.option("--tp", default=1, type=POSITIVE, show_default=True, help="tensor-parallel GPUs."),
        click.option("--pp", default=1, type=POSITIVE, show_default=True, help="pipeline-parallel stages."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _request(gpu, model, context, batch, engine, weights, kv, util, max_model_len, max_num_batched_tokens,
             max_num_seqs, enforce_eager, vllm_version, tp, pp):
    from .catalog import DEFAULT_MODEL, load_model
    from .engines.vllm import DEFAULT_VERSION, parse_version
    from .hardware import get_gpu
    from .plan import PlanRequest

    spec = load_model(model or DEFAULT_MODEL)
    profile = get_gpu(gpu)
    version = vllm_version or DEFAULT_VERSION
    parse_version(version)
    warnings = []
    if spec.max_position_embeddings and context > spec.max_position_embeddings:
        warnings.append(f"context {context:,} exceeds {spec.name}'s max_position_embeddings "
                        f"{spec.max_position_embeddings:,}: quality past it is not what the model was trained for")
    engines = ("vllm", "hf") if engine == "both" else (engine,)
    req = PlanRequest(spec=spec, gpu=profile, context=context, batch=batch, engines=engines, weights=weights, kv=kv,
                      util=util, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                      max_num_seqs=max_num_seqs, enforce_eager=enforce_eager, vllm_version=version, tp=tp, pp=pp)
    return req, warnings


@click.group(context_settings=CONTEXT_SETTINGS)
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
                   "(needs matplotlib: pip install 'kvcalc[plot]').")
def plan(as_json, as_csv, explain_config, tp_sweep, plot_path, **kwargs):
    """The decision table: configurations x engines, with memory, capacity, speed, risk and verdicts.

    Example: kvcalc plan --gpu t4 --context 32k
    """
    from .plan import plan as make_plan
    from .plan import custom_key, plan_json, tp_sweep as make_sweep

    if plot_path:
        from .plots import check_output

        check_output(plot_path)
    req, warnings = _request(**kwargs)
    rows = make_plan(req, warnings)
    sweep = None
    # the configuration asked for (or the baseline): when it does not fit on one GPU, show the TP sizes that do
    target = [r for r in rows if r.engine == "vllm" and r.config == custom_key(req)]
    if "vllm" in req.engines and req.tp == 1 and req.pp == 1 and (tp_sweep or (target and not target[0].fits)):
        sweep = make_sweep(req)
    if as_json:
        click.echo(json.dumps(plan_json(req, rows, warnings, sweep), indent=1))
        _write_plot("all", req, rows, plot_path)
        return
    if as_csv:
        click.echo(_csv(rows), nl=False)
        _write_plot("all", req, rows, plot_path)
        return
    from .render import explain_text, render_sweep, render_table

    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    render_table(req, rows)
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
    from .plan import plan as make_plan
    from .render import explain_text

    req, warnings = _request(**kwargs)
    rows = make_plan(req, warnings)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    from .plan import custom_key

    wanted = [r for r in rows if r.config == custom_key(req)]
    for row in wanted or rows[:1]:
        click.echo(explain_text(req, row))


def _csv(rows) -> str:
    buf = io.StringIO()
    fields = ["config", "engine", "weights_format", "kv_format", "weights_bytes", "kv_bytes_per_token",
              "kv_capacity_tokens", "max_concurrency", "hf_memory_bytes", "decode_tokens_per_s", "fits",
              "shortfall_bytes", "quality_risk", "verdicts"]
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        data = row.to_json()
        data["verdicts"] = "; ".join(row.verdicts)
        data["decode_tokens_per_s"] = round(row.decode_tokens_per_s, 2)
        writer.writerow({k: data[k] for k in fields})
    return buf.getvalue()


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def gpus(as_json):
    """GPU profiles built in (add your own with --gpu FILE.yaml)."""
    from .hardware import list_gpus
    from .render import render_gpus

    profiles = list_gpus()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(p) for p in profiles], indent=1))
    else:
        render_gpus(profiles)


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def models(as_json):
    """Models in the built-in catalog (any config.json also works with --model PATH)."""
    from .catalog import catalog_entry, catalog_names, load_model
    from .render import render_models

    specs = []
    for name in catalog_names():
        try:
            specs.append((load_model(name), catalog_entry(name)))
        except UsageError:
            continue
    if as_json:
        click.echo(json.dumps([{"name": s.name, "hf_id": e.get("hf_id"), "params": s.params.total,
                                "model_type": s.model_type, "layers": s.num_layers} for s, e in specs], indent=1))
    else:
        render_models(specs)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to bind; anything but loopback lets other machines use the page.")
@click.option("--port", default=8000, type=click.IntRange(1, 65535), show_default=True)
@click.option("--open", "open_browser", is_flag=True, help="open the page in the default browser.")
@click.option("--allow-hub", is_flag=True, help="let the page read hub ids outside the catalog (network access).")
def serve(host, port, open_browser, allow_hub):
    """A local web page: the table, the plots and explain, updated as you type (needs kvcalc[web])."""
    from .web.server import serve as run_server

    run_server(host=host, port=port, open_browser=open_browser, allow_hub=allow_hub)


def _add_validate() -> None:
    try:
        from .validate.cli import validate
    except ImportError:  # the validation package is optional while it is being built
        return
    cli.add_command(validate)


_add_validate()


def main(argv: list[str] | None = None) -> None:
    run_command(cli, argv, "kvcalc")


if __name__ == "__main__":
    main()
