"""`kvcalc fit` and `kvcalc search`: command-line parsing and printing only.

This module is imported when the CLI starts (to register the commands), so it imports nothing heavy: numpy and the
search modules load inside the commands, and `kvcalc plan` never pays for them.
"""

from __future__ import annotations

import json

import click

from .errors import UsageError


def _split(text: str | None, what: str) -> list[str]:
    if text is None:
        return []
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{what}: give a comma-separated list")
    return items


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    out = []
    for item in _split(text, what):
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{what}: {item!r} is not a whole number") from None
        if not 1 <= value <= 1 << 20:
            raise UsageError(f"{what}: {value} is out of range (1 to {1 << 20})")
        out.append(value)
    return tuple(sorted(set(out)))


def _utils(text: str | None) -> tuple[float, ...] | None:
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
            values = [float(x) for x in _split(text, "--utils")]
    except ValueError:
        raise UsageError(f"--utils {text!r}: use a list (0.85,0.9) or START:STOP:STEP (0.80:0.95:0.01)") from None
    if not values or any(not 0 < v <= 1 for v in values) or len(values) > 1000:
        raise UsageError(f"--utils {text!r}: every gpu_memory_utilization must be in (0, 1], at most 1000 values")
    return tuple(sorted(set(values)))


def _positive_float(name: str):
    def convert(ctx, param, value):
        if value is None:
            return None
        if not value > 0 or value != value or value == float("inf"):
            raise click.BadParameter(f"must be a positive number, got {value}")
        return value
    return convert


# ------------------------------------------------------------------------------------------------ fit


def register(cli, plan_options, make_request, tokens) -> None:
    """Add `fit` and `search` to the `kvcalc` group."""
    for command in commands(plan_options, make_request, tokens).values():
        cli.add_command(command)


def commands(plan_options, make_request, tokens) -> dict[str, click.Command]:
    """The `fit` and `search` commands, built on plan's own options and request (cli.py passes them in, so this
    module never imports cli.py)."""

    @click.command(name="fit")
    @click.argument("question", type=click.Choice(["max-context", "max-concurrency", "min-util", "min-gpus",
                                                   "auto"]))
    @plan_options
    @click.option("--max-gpus", default=16, type=click.IntRange(1, 64), show_default=True,
                  help="min-gpus: the largest GPU count tried.")
    @click.option("--json", "as_json", is_flag=True, help="print the answer as JSON (schema kvcalc.fit/1).")
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

        kwargs["engine"] = "vllm" if kwargs.get("engine") == "both" else kwargs.get("engine")
        req, warnings = make_request(**kwargs)
        result = answer(question, req, max_gpus)
        if as_json:
            click.echo(json.dumps(result.to_json(), indent=1))
            return
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        _print_answer(req, result)

    @click.command(name="search")
    @click.option("--model", default=None, help="catalog name, config.json path or hub id [default: llama-3.2-3b].")
    @click.option("--input-len", required=True, type=tokens, help="prompt tokens per request, e.g. 2k.")
    @click.option("--output-len", required=True, type=tokens, help="generated tokens per request.")
    @click.option("--concurrency", type=click.IntRange(1, 1 << 20), default=None,
                  help="requests in flight at once (as vllm bench --max-concurrency).")
    @click.option("--request-rate", type=float, default=None, callback=_positive_float("--request-rate"),
                  help="requests per second, all replicas together (Little's law sets the concurrency).")
    @click.option("--max-ttft-ms", type=float, default=None, callback=_positive_float("--max-ttft-ms"),
                  help="target: time to first token.")
    @click.option("--max-tpot-ms", type=float, default=None, callback=_positive_float("--max-tpot-ms"),
                  help="target: time per output token after the first.")
    @click.option("--min-context", type=tokens, default=None,
                  help="target: max_model_len at least this (default input + output).")
    @click.option("--max-quality-risk", type=click.Choice(["none", "low", "moderate", "high"]), default=None,
                  help="target: the worst quality risk accepted (kvcalc plan's column).")
    @click.option("--gpus", default=None, help="comma-separated GPU ids/aliases/YAML files [default: every built-in].")
    @click.option("--weights", "weights", default=None, help="weight formats to try [default: bf16,fp8,awq].")
    @click.option("--kv", "kv", default=None, help="KV formats to try [default: auto,fp8].")
    @click.option("--tp", "tp", default=None, help="TP sizes to try [default: 1,2,4,8; invalid ones for the model "
                                                   "are skipped].")
    @click.option("--pp", "pp", default=None, help="PP sizes to try [default: 1].")
    @click.option("--max-replicas", default=8, type=click.IntRange(1, 1024), show_default=True)
    @click.option("--max-gpus-per-replica", default=8, type=click.IntRange(1, 64), show_default=True)
    @click.option("--utils", default=None, help="gpu_memory_utilization grid [default: 0.80:0.95:0.01].")
    @click.option("--max-num-seqs", "seqs", default=None, help="max_num_seqs grid [default: 1,2,4,...,1024].")
    @click.option("--max-num-batched-tokens", type=tokens, default=None,
                  help="vLLM max_num_batched_tokens [default: vllm serve's for each GPU].")
    @click.option("--price", "price", multiple=True, metavar="GPU=USD", help="override a price (repeatable).")
    @click.option("--prices", "prices_file", default=None, metavar="FILE",
                  help="price file [default: $XDG_CONFIG_HOME/kvcalc/prices.yaml if present, over the shipped one].")
    @click.option("--vllm-version", default=None, help="vLLM version whose rules apply [default: 0.26.0].")
    @click.option("--engine", "search_engine", type=click.Choice(["vllm", "sglang", "both"]), default="vllm",
                  show_default=True, help="which server's deployments: vLLM's, SGLang's (engines/sglang.py at its "
                                          "default mem_fraction_static), or both side by side.")
    @click.option("--sglang-version", default=None, help="SGLang release whose rules apply [default: 0.5.14].")
    @click.option("--top", default=10, type=click.IntRange(1, 10000), show_default=True, help="rows shown.")
    @click.option("--json", "as_json", is_flag=True, help="print the result as JSON (schema kvcalc.search/1).")
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
    res, sglang_rows = search_results(kw)
    if kw["as_json"]:
        click.echo(json.dumps(search_payload(kw, res, sglang_rows), indent=1))
        return
    from .search_render import render_search, render_sglang_search

    engine = kw.get("search_engine") or "vllm"
    if engine != "sglang":
        render_search(res)
    if sglang_rows is not None:
        render_sglang_search(res, sglang_rows, compare=engine == "both")


def search_results(kw, spec=None):
    """(the vLLM search result, SGLang's deployments or None) for `kvcalc search --engine ...` (search_sglang.py)."""
    res = search_result(kw, spec)
    engine = kw.get("search_engine") or "vllm"
    if engine not in ("sglang", "both"):
        return res, None
    from .engines.sglang_versions import resolve_version
    from .search_sglang import sglang_search

    rows, notes = sglang_search(res.request, resolve_version(kw.get("sglang_version")))
    res.warnings.extend(notes[:5])
    return res, rows[: res.request.top]


def search_payload(kw, res, sglang_rows) -> dict:
    """kvcalc.search/1 JSON: vLLM's results; with --engine both an "sglang" list beside them, with --engine sglang
    SGLang's deployments as the results (the CLI's --json and the page's /api/search)."""
    from . import search as S

    out = S.search_json(res)
    engine = kw.get("search_engine") or "vllm"
    out["engine"] = engine
    if engine == "sglang":
        out["results"], out["pareto"] = [d.to_json() for d in sglang_rows], []
        out["winner_command"] = sglang_rows[0].command if sglang_rows else None
    elif sglang_rows is not None:
        out["sglang"] = [d.to_json() for d in sglang_rows]
    return out


def search_result(kw, spec=None):
    """The search for the parsed options `kw` of `kvcalc search` (the web page's /api/search calls this too; it
    passes `spec` for a pasted config.json instead of --model)."""
    from .catalog import DEFAULT_MODEL, load_model
    from .engines.vllm import DEFAULT_VERSION, parse_version
    from .formats import kv_format, weight_format
    from .hardware import get_gpu, list_gpus
    from .prices import load_prices
    from . import search as S

    if (kw["concurrency"] is None) == (kw["request_rate"] is None):
        raise UsageError("give exactly one of --concurrency N and --request-rate R")
    spec = spec or load_model(kw["model"] or DEFAULT_MODEL)
    version = kw["vllm_version"] or DEFAULT_VERSION
    parse_version(version)
    gpus = [get_gpu(g) for g in _split(kw["gpus"], "--gpus")] if kw["gpus"] else list_gpus()
    gpus = list({g.id: g for g in gpus}.values())
    weights = tuple(weight_format(w).name for w in _split(kw["weights"], "--weights")) or S.DEFAULT_WEIGHTS
    for w in weights:
        if "vllm" not in weight_format(w).engines:
            raise UsageError(f"--weights {w}: vLLM does not load {weight_format(w).label} weights")
    kvs = tuple(kv_format(k).name for k in _split(kw["kv"], "--kv")) or S.DEFAULT_KV
    for k in kvs:
        if kv_format(k).vllm_name is None:
            raise UsageError(f"--kv {k}: vLLM has no {kv_format(k).label} cache (auto, fp8, fp8-e5m2)")
    space = S.Space(gpus=gpus, weights=weights, kv=kvs, tp=_ints(kw["tp"], "--tp") or S.DEFAULT_TP,
                    pp=_ints(kw["pp"], "--pp") or (1,), max_replicas=kw["max_replicas"],
                    max_gpus_per_replica=kw["max_gpus_per_replica"], utils=_utils(kw["utils"]) or S.DEFAULT_UTILS,
                    seqs=_ints(kw["seqs"], "--max-num-seqs") or S.DEFAULT_SEQS)
    prices = load_prices(kw["price"], kw["prices_file"])
    wl = S.Workload(kw["input_len"], kw["output_len"], kw["concurrency"], kw["request_rate"])
    if wl.output_len < 1:
        raise UsageError("--output-len must be at least 1")
    targets = S.Targets(kw["max_ttft_ms"], kw["max_tpot_ms"], kw["min_context"], kw["max_quality_risk"])
    req = S.SearchRequest(spec, wl, targets, space, prices, version, kw["max_num_batched_tokens"], kw["top"])
    return S.run_search(req)
