"""The `kvcalc` command: plan, explain, plot, gpus, models, serve, validate, fit, search.

Parsing and printing only: the options are kvcalc.options' tables, the request is kvcalc.request's. Usage errors
print one line and exit with code 2; no traceback reaches the user for bad input.
"""

from __future__ import annotations

import json

import click

from .cli_errors import CONTEXT_SETTINGS, run_command
from .errors import UsageError
from .options import given_names, plan_command_options, plan_options


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
        if name in ("fit", "search"):
            from .search_cli import commands

            return commands()[name]
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="kvcalc")
def cli():
    """Will this model fit on this GPU under this engine, and how fast will it decode?

    Exit codes: 0 yes; 1 a gate failed (plan --require-fit, fit or search without an answer, validate --strict):
    the output comes first, the reason is the last line on stderr; 2 usage error. Python: import kvcalc
    (docs/api.md).
    """


def _request(kwargs: dict):
    """The PlanRequest and warnings for this command's plan options (the ones typed win over --vllm-command)."""
    from .request import build_request

    return build_request(kwargs, given_names())


@cli.command()
@plan_options
@plan_command_options
def plan(as_json, as_csv, explain_config, tp_sweep, plot_path, emit, require_fit, **kwargs):
    """The decision table: configurations x engines, with memory, capacity, speed, risk and verdicts.

    Example: kvcalc plan --gpu t4 --context 32k
    """
    from .plan import plan as make_plan
    from .plan import plan_json, should_sweep
    from .plan import tp_sweep as make_sweep

    if plot_path:
        from .plots import check_output

        check_output(plot_path)
    if emit and (as_json or as_csv or explain_config or plot_path):
        raise UsageError("--emit prints one deployment file: leave out --json, --csv, --explain and --plot")
    req, warnings = _request(kwargs)
    rows = make_plan(req, warnings)
    if emit:
        return _emit(emit, req, rows, warnings, require_fit)
    sweep = make_sweep(req) if should_sweep(req, rows, tp_sweep) else None
    if as_json:
        click.echo(json.dumps(plan_json(req, rows, warnings, sweep), indent=1))
        _write_plot("all", req, rows, plot_path)
        return _gate(require_fit, req, rows)
    if as_csv:
        from .render import csv_text

        click.echo(csv_text(rows), nl=False)
        _write_plot("all", req, rows, plot_path)
        return _gate(require_fit, req, rows)
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
    _gate(require_fit, req, rows)


def _emit(kind: str, req, rows, warnings, require_fit: bool) -> None:
    """--emit KIND: the deployment file of the asked configuration's vLLM row (kvcalc/deploy.py), warnings on stderr."""
    from .deploy import emit, from_plan
    from .plan import custom_key

    row = next((r for r in rows if r.engine == "vllm" and r.config == custom_key(req)), None)
    if row is None:
        raise UsageError("--emit writes a vLLM deployment, and this plan has no vLLM row for the asked configuration")
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if not row.fits:
        click.echo(f"warning: the plan says vllm {row.config} does not fit (short "
                   f"{row.shortfall_bytes / 2**30:.2f} GiB); the file is written all the same", err=True)
    click.echo(emit(from_plan(req, row), kind), nl=False)
    _gate(require_fit, req, [r for r in rows if r.engine == "vllm"])


def _gate(require_fit: bool, req, rows) -> None:
    """--require-fit: raise GateFailed (exit 1, one line; kvcalc/gate.py) when the asked configuration does not fit."""
    if require_fit:
        from .gate import GateFailed, plan_failure

        reason = plan_failure(req, rows)
        if reason:
            raise GateFailed(reason)


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
@plan_options
def plot_command(kind, out_path, **kwargs):
    """One picture of the plan: capacity (vLLM requests at once vs context), speed (decode tokens/s vs batch,
    with the H200 measurements) or memory (where the GPU's memory goes, per configuration and engine).

    Example: kvcalc plot capacity --gpu l4 --model llama-3.1-8b --context 16k --out capacity.png
    """
    from .plan import plan as make_plan
    from .plots import check_output

    check_output(out_path)
    req, warnings = _request(kwargs)
    rows = make_plan(req, warnings)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    _write_plot(kind, req, rows, out_path)


@cli.command()
@plan_options
def explain(**kwargs):
    """Full breakdown of one configuration (--weights/--kv choose it; default: the baseline; lists: each)."""
    from .plan import explained_rows
    from .plan import plan as make_plan
    from .render import explain_text

    req, warnings = _request(kwargs)
    rows = make_plan(req, warnings)
    wanted = explained_rows(req, rows, warnings)
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
    """A local web page: the table, the plots, explain and search, updated as you type (needs starlette and
    uvicorn: python3 -m pip install starlette uvicorn)."""
    from .web import server  # the web stack loads only here: `kvcalc plan` never pays for it

    server.serve(host=host, port=port, open_browser=open_browser, allow_hub=allow_hub)


def main(argv: list[str] | None = None) -> None:
    run_command(cli, argv, "kvcalc")


if __name__ == "__main__":
    main()
