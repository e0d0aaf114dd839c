"""`kvcalc fit` and `kvcalc search`: command-line parsing and printing only.

The options are kvcalc.options' tables and the requests kvcalc.request's. The CLI imports this module only when
`fit` or `search` is run or listed, and it imports nothing heavy at module level: numpy and the search modules load
inside the commands, and `kvcalc plan` never pays for them.
"""

from __future__ import annotations

import json

import click

from .errors import UsageError
from .gate import GateFailed, fit_failure, search_failure
from .options import FIT_QUESTIONS, fit_options, fit_plan_options, given_names, search_options


def commands() -> dict[str, click.Command]:
    """The `fit` and `search` commands."""

    @click.command(name="fit")
    @click.argument("question", type=click.Choice(FIT_QUESTIONS))
    @fit_plan_options
    @fit_options
    def fit(question, max_gpus, as_json, **kwargs):
        """Plan backwards for one vLLM configuration (--weights/--kv; default the baseline), exact at vLLM's
        granularity, with proof: the answer fits and one step beyond does not.

        \b
        max-context      longest context at which --batch requests fit at once
        max-concurrency  most requests of --context tokens held at once
        min-util         smallest gpu_memory_utilization (0.01 steps) fitting --batch x --context
        min-gpus         fewest GPUs (TP x PP) fitting --batch x --context
        auto             the max_model_len `vllm serve --max-model-len -1` picks at these settings

        Example: kvcalc fit max-context --gpu l4 --model llama-3.1-8b --batch 16
        """
        from .inverse import answer
        from .request import build_request

        req, warnings = build_request(kwargs, given_names())
        result = answer(question, req, max_gpus)
        if as_json:
            click.echo(json.dumps(result.to_json(), indent=1))
        else:
            for warning in warnings:
                click.echo(f"warning: {warning}", err=True)
            _print_answer(req, result)
        _gate(fit_failure(result))

    @click.command(name="search")
    @search_options
    def search(**kw):
        """The cheapest vLLM deployments that meet a workload's targets: GPU type x TP/PP x replicas x weight
        format x KV format x util x max_num_seqs, ranked by cost per hour.

        Example: kvcalc search --model llama-3.1-8b --input-len 2k --output-len 512 --concurrency 32 --max-tpot-ms 50
        """
        _run_search(kw)

    return {"fit": fit, "search": search}


def _print_answer(req, a) -> None:
    par = "".join(f", {name} {v}" for name, v in (("TP", req.tp), ("PP", req.pp)) if v > 1)
    if req.engines == ("sglang",):
        mfs = f"{req.mem_fraction_static:g}" if req.mem_fraction_static else "its default"
        head = (f"{req.spec.name} on {req.tp * req.pp} x {req.gpu.name}{par}, SGLang {req.sglang_version}, config "
                f"{a.config}, mem_fraction_static {mfs}")
    else:
        head = (f"{req.spec.name} on {req.tp * req.pp} x {req.gpu.name}{par}, vLLM {req.vllm_version}, config "
                f"{a.config}" + ("" if a.question == "min-util" else f", util {req.vllm_util:g}"))
    click.echo(head)
    value = "none" if a.value is None else (f"{a.value:.2f}" if isinstance(a.value, float) else f"{a.value:,}")
    click.echo(f"{a.question}: {value} {a.unit}")
    click.echo(f"  {a.detail}")
    if a.value is not None:
        beyond = {True: "fits", False: "does not fit", None: "(end of range)"}[a.fits_one_step_beyond]
        click.echo(f"  proof: at the answer it fits; {a.step}: {beyond}")
    if a.options:
        click.echo("  splits that fit: " + ", ".join(f"TP {o['tp']} x PP {o['pp']} ({o['max_concurrency']} req, "
                                                    f"{o['decode_tokens_per_s']:.1f} tok/s)" for o in a.options))


def _run_search(kw) -> None:
    from .request import search_result
    from .search_sglang import search_payload, server_of, sglang_rows_for

    if kw["emit"] and kw["as_json"]:
        raise UsageError("--emit prints one deployment file: leave out --json")
    if kw["emit"] and ((kw.get("search_engine") or "vllm") != "vllm" or kw.get("sglang_command")):
        raise UsageError("--emit writes the vLLM winner's deployment files: SGLang's winner is its launch line "
                         "(the last line of the table, winner_command in --json)")
    res = search_result(kw, None, given_names())
    if kw["emit"]:
        _gate(search_failure(res))
        from .deploy import emit, from_search

        click.echo(emit(from_search(res), kw["emit"]), nl=False)
        return
    sglang_rows = sglang_rows_for(kw, res)
    engine = server_of(kw, res)
    if kw["as_json"]:
        click.echo(json.dumps(search_payload(kw, res, sglang_rows), indent=1))
    else:
        from .search_render import render_search, render_sglang_search

        if engine != "sglang":
            render_search(res)
        if sglang_rows is not None:
            render_sglang_search(res, sglang_rows, compare=engine == "both")
    _gate(search_failure(res, sglang_rows, engine))


def _gate(reason: str | None) -> None:
    """No answer is a failed gate: exit 1 after the output, with one line (kvcalc/gate.py)."""
    if reason:
        raise GateFailed(reason)
