"""Human output of `kvcalc search`: the ranked table, the Pareto front, the winner's command, the rejections."""

from __future__ import annotations

from rich.table import Table

from .latency import ASSUMPTIONS as SCREEN
from .workload import ASSUMPTIONS
from .render import _console


# Rows the table prints: rich lays out a 10,000-row table in ~7 s (and nobody reads it); --json lists all --top.
TABLE_ROWS = 200


def _deployment(d) -> str:
    par = f"TP{d.tp}" + (f"xPP{d.pp}" if d.pp > 1 else "")
    return f"{d.replicas} x {d.tp * d.pp} {d.gpu} {par}" if d.replicas > 1 else f"{d.tp * d.pp} {d.gpu} {par}"


def _table(title: str, rows) -> Table:
    table = Table(title=title, title_justify="left")
    for name, justify in (("#", "right"), ("deployment", "left"), ("weights", "left"), ("KV", "left"),
                          ("util", "right"), ("max\nseqs", "right"), ("$/h", "right"), ("$/M out\ntokens", "right"),
                          ("TTFT\nms", "right"), ("TPOT\nms", "right"), ("TPOT\nrange", "right"),
                          ("max\nconc.", "right"), ("quality\nrisk", "left"), ("speed\nevidence", "left"),
                          ("pareto", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for d in rows:
        table.add_row(str(d.rank), _deployment(d), d.weights_format, d.kv_format, f"{d.util:.2f}",
                      str(d.max_num_seqs), f"{d.cost_per_hour:,.2f}" + ("*" if d.price_is_estimate else ""),
                      f"{d.usd_per_million_output_tokens:,.3f}", f"{d.ttft_ms:,.0f}", f"{d.tpot_ms:,.1f}",
                      _tpot_range(d), conc_text(d), d.quality_risk, _evidence(d),
                      "yes" if d.pareto else "")
    return table


def conc_text(d) -> str:
    """max conc. as plan's table prints it (render.py): low-high where the row's capacity_range leaves it open."""
    span = getattr(d, "capacity_range", None)
    if span and span["max_concurrency_low"] != span["max_concurrency_high"]:
        return f"{span['max_concurrency_low']:,}-{d.max_concurrency:,}"
    return f"{d.max_concurrency:,}"


def capacity_range_note(rows) -> str | None:
    """One line for the rows whose capacity is a range (plan's trust.capacity_range, one reason for all: the same
    start kind and release), as plan's trust_lines says it; None when no row has one."""
    spans = [d for d in rows if getattr(d, "capacity_range", None)]
    if not spans:
        return None
    from .trust import capacity_range_text

    span = spans[0].capacity_range
    short = [str(d.rank) for d in spans if d.capacity_range["fits_high"] and not d.capacity_range["fits_low"]]
    return (f"max conc. low-high (rows {', '.join(str(d.rank) for d in spans)}; --json capacity_range): "
            + capacity_range_text(span)
            + (f"; at the low end rows {', '.join(short)} would not hold the workload's requests" if short else ""))


def _tpot_range(d) -> str:
    e = d.speed_evidence or {}
    if "tpot_low" not in e:
        return "-"
    if e["tpot_low"] is None or e["tpot_high"] is None:  # SGLang off its measured GPU: too few results for one
        return "no range"
    return f"{d.tpot_ms * (1 + e['tpot_low']):,.1f}-{d.tpot_ms * (1 + e['tpot_high']):,.1f}"


_SHORT = {"measured on this GPU": "measured", "held-out error on a similar case": "public results",
          "extrapolated from datasheet": "datasheet", "assumption": "assumption", "known miss": "known miss"}


def _evidence(d) -> str:
    return _SHORT.get((d.speed_evidence or {}).get("label", ""), "-")


def render_search(res) -> None:
    req = res.request
    wl, tg = req.workload, req.targets
    console = _console()
    load = (f"concurrency {wl.concurrency}" if wl.concurrency is not None else f"{wl.request_rate:g} requests/s")
    targets = ", ".join(t for t in (
        f"TTFT <= {tg.max_ttft_ms:g} ms" if tg.max_ttft_ms is not None else "",
        f"TPOT <= {tg.max_tpot_ms:g} ms" if tg.max_tpot_ms is not None else "",
        f"context >= {tg.min_context:,}" if tg.min_context else "",
        f"quality risk <= {tg.max_quality_risk}" if tg.max_quality_risk else "") if t) or "none"
    console.print(f"{req.spec.name}: {wl.input_len:,} in + {wl.output_len:,} out tokens, {load}; targets: {targets}")
    console.print(f"evaluated {res.evaluated:,} configurations ({res.structures:,} GPU x format x TP/PP structures "
                  f"x util x max_num_seqs x replicas); {res.feasible:,} deployments meet the targets")
    for warning in res.warnings:
        console.print(f"warning: {warning}")
    if not res.results:
        console.print(res.message)
    else:
        shown_rows = res.results[:TABLE_ROWS]
        console.print(_table("Cheapest deployments that meet the targets (ranked by $/h, then $/M output tokens)",
                             shown_rows))
        if len(res.results) > len(shown_rows):
            console.print(f"... and {len(res.results) - len(shown_rows):,} more (--json lists all --top "
                          f"{len(res.results):,})")
        front = [d for d in res.pareto]
        console.print(_table("Pareto front: cost per hour vs TPOT (no other deployment is both cheaper and faster)",
                             front[:12]))
        console.print("Winner, per replica:" if res.results[0].replicas > 1 else "Winner:")
        console.print(f"  {res.results[0].command}", soft_wrap=True)
        if res.results[0].replicas > 1:
            console.print(f"  ({res.results[0].replicas} replicas behind a load balancer)")
    if res.rejected_by:
        counts = ", ".join(f"{k} {v:,}" for k, v in res.rejected_by.items())
        console.print(f"Rejected deployments by the constraint that binds them: {counts}")
    for r in res.rejected:
        console.print(f"  {r.gpu}: best tried {r.replicas} x TP{r.tp}" + (f"xPP{r.pp}" if r.pp > 1 else "")
                      + f" {r.weights_format}/{r.kv_format}: {r.constraint}: {r.detail}")
    estimates = sorted({d.gpu for d in res.results if d.price_is_estimate})
    shown = res.results[:TABLE_ROWS] + [d for d in res.pareto[:12] if d not in res.results[:TABLE_ROWS]]
    rentals = sorted({(d.rented_as, d.gpus_per_instance) for d in shown if d.gpus_per_instance > 1})
    tier = getattr(req, "price_tier", "on-demand")
    notes = [f"$/h: {tier} price per GPU-hour (kvcalc/data/prices.yaml, with source and date) x GPUs, or whole "
             "instances of a provider's offer where cheaper; "
             "* = estimated price" + (f" ({', '.join(estimates)})" if estimates else "") + "; override with "
             "--price GPU=USD or --prices FILE"]
    if rentals:
        notes.append("rented as whole instances (--json: rented_as, instances): "
                     + "; ".join(f"{name} ({n} GPUs each)" for name, n in rentals))
    notes.append("max conc.: requests of input+output tokens the KV caches of all replicas hold at once (raise "
                 "--max-num-seqs to use them)")
    span_note = capacity_range_note(shown)
    if span_note:
        notes.append(span_note)
    notes.append("TPOT range: where ~80% of held-out cases measured (kvcalc/trust.py): the GPU's own held-out public "
                 "results where it has them, else its evidence class's (--json speed_evidence.range_basis says which); "
                 "speed evidence: measured = this GPU's own runs, public results = held out of the fit, datasheet = no "
                 "result for this GPU (kvcalc gpus says what each profile's speed rests on)")
    for line in notes + ["rows shown: " + a for a in ASSUMPTIONS] + ["screen (a lower bound): " + a for a in SCREEN]:
        console.print(line, style="dim")


def render_sglang_search(res, rows, compare: bool = False) -> None:
    """SGLang's deployments of the same search (search_sglang.py), and with vLLM's beside them which is cheaper."""
    console = _console()
    given = getattr(res.request, "sglang_given", None) or {}
    mfs = ("mem_fraction_static " + f"{given['mem_fraction_static']:g}" if "mem_fraction_static" in given
           else "default mem_fraction_static")
    table = Table(title=f"SGLang deployments that meet the targets (ranked by $/h; {mfs})", title_justify="left")
    for name, justify in (("#", "right"), ("deployment", "left"), ("weights", "left"), ("KV", "left"),
                          ("mem\nfrac.", "right"), ("max\nrun. req", "right"), ("$/h", "right"),
                          ("$/M out\ntokens", "right"), ("TTFT\nms", "right"), ("TPOT\nms", "right"),
                          ("TPOT\nrange", "right"), ("max\nconc.", "right"), ("quality\nrisk", "left"),
                          ("speed\nevidence", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for d in rows[:TABLE_ROWS]:
        where = f"{d.replicas} x {d.tp} {d.gpu} TP{d.tp}" if d.replicas > 1 else f"{d.tp} {d.gpu} TP{d.tp}"
        table.add_row(str(d.rank), where, d.weights_format, d.kv_format, f"{d.mem_fraction_static:.3f}",
                      f"{d.max_running_requests:,}", f"{d.cost_per_hour:,.2f}" + ("*" if d.price_is_estimate else ""),
                      f"{d.usd_per_million_output_tokens:,.3f}", f"{d.ttft_ms:,.0f}", f"{d.tpot_ms:,.1f}",
                      _tpot_range(d), conc_text(d), d.quality_risk, _evidence(d))
    if not rows:
        console.print("SGLang: no deployment in the search space meets the targets")
        return
    console.print(table)
    console.print(f"SGLang winner: {rows[0].command}")
    basis = sorted({(d.speed_evidence or {}).get("range_basis", "") for d in rows[:TABLE_ROWS]} - {""})
    if basis:
        console.print("SGLang TPOT range: SGLang's own held-out errors (kvcalc/trust.py sglang_speed_trust): "
                      + "; ".join(basis), style="dim")
    if compare and res.results:
        v, g = res.results[0], rows[0]
        key_v = (round(v.cost_per_hour, 6), round(v.usd_per_million_output_tokens, 6))
        key_g = (round(g.cost_per_hour, 6), round(g.usd_per_million_output_tokens, 6))
        better = "a tie" if key_g == key_v else ("SGLang" if key_g < key_v else "vLLM")
        console.print(f"cheapest of both: {better} (vLLM ${v.cost_per_hour:,.2f}/h, ${v.usd_per_million_output_tokens:,.3f}"
                      f"/M tokens; SGLang ${g.cost_per_hour:,.2f}/h, ${g.usd_per_million_output_tokens:,.3f}/M tokens)")
