"""Human output: the plan table, the explain breakdown, GPU and model lists. Units always printed."""

from __future__ import annotations

import csv
import io
import shutil
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from .checkpoint import baseline_weights, checkpoint_label
from .engines.vllm_versions import rules_with_engine
from .units import GiB, fmt_bytes, fmt_gib, fmt_shortfall, fmt_tokens
from .workload import ASSUMPTIONS

if TYPE_CHECKING:  # annotations only: render sits above plan and never runs it
    from .plan import PlanRequest, Row, TpOption

CSV_FIELDS = ["config", "engine", "weights_format", "kv_format", "weights_bytes", "kv_bytes_per_token",
              "kv_capacity_tokens", "max_concurrency", "hf_memory_bytes", "decode_tokens_per_s", "fits",
              "shortfall_bytes", "quality_risk", "verdicts"]


def _console() -> Console:
    # Wide enough for the decision table even when piped (rich falls back to 80 columns without a terminal);
    # made per call so a COLUMNS set at run time (tests/docs_sync.py, the golden test) is honoured.
    return Console(highlight=False, width=max(shutil.get_terminal_size((160, 24)).columns, 150))


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f}"


def workload_text(req: PlanRequest) -> str:
    """How many requests the plan is for: --batch, or the workload's concurrency / request rate (never "batch 1"
    under --request-rate, where the concurrency follows from the rate)."""
    wl = req.workload
    if wl is None:
        return f"batch {req.batch}"
    if wl.request_rate:
        return f"request rate {wl.request_rate:g}/s" + (f" (at most {wl.concurrency} in flight)" if wl.concurrency
                                                        else "")
    return f"concurrency {wl.concurrency or 1}"


shortfall_text = fmt_shortfall


def fits_text(req: PlanRequest, r: Row) -> str:
    """The fits cell: vLLM that starts but holds fewer requests than asked says how many (the rest queue), which
    is another story than a process that does not start or runs out of memory."""
    if r.vllm is not None and r.vllm.serve_gate is not None:  # not served by this release at all
        return f"no (vLLM {r.vllm.serve_gate.since}+)"
    if r.fits:
        return "yes"
    if r.vllm is not None and r.vllm.fits and r.max_concurrency:
        return f"no: {r.max_concurrency} of {req.batch}"
    if r.vllm is not None and not r.vllm.fits:
        return f"no: does not start ({shortfall_text(r.shortfall_bytes)})"
    return f"no ({shortfall_text(r.shortfall_bytes)})"


def decode_text(req: PlanRequest, r: Row) -> str:
    """decode tok/s of all requests together; "@N" when vLLM decodes fewer than --batch at once."""
    text = f"{r.decode_tokens_per_s:,.1f}"
    return text + (f" @{r.decode_batch}" if r.decode_batch < req.batch else "")


def render_table(req: PlanRequest, rows: list[Row]) -> None:
    spec, gpu = req.spec, req.gpu
    title = (f"{spec.name} ({spec.params.total / 1e9:.2f} B params) on {gpu.name} "
             f"({gpu.memory_total_bytes / GiB:.2f} GiB usable), context {fmt_tokens(req.context)} tokens, "
             f"{workload_text(req)}" + (f", TP {req.tp}" if req.tp > 1 else "") + (f", PP {req.pp}" if req.pp > 1 else ""))
    shipped = baseline_weights(spec)
    if shipped is not None:  # the checkpoint's own format is the baseline (checkpoint.py)
        title += f"; baseline = the checkpoint as shipped: {shipped.scheme_label} weights ({shipped.source})"
    table = Table(title=title, title_justify="left")
    # with a workload the speed is the workload table's (TTFT, TPOT, tok/s in total and per user): printed once
    speed = req.workload is None
    for name, justify in (("config", "left"), ("engine", "left"), ("weights\nGiB", "right"),
                          ("KV\nB/token", "right"), ("KV capacity\ntokens", "right"),
                          (f"max conc.\n@{fmt_tokens(req.context)}", "right"), ("HF mem\nGiB", "right"),
                          ("decode tok/s\nall requests", "right"), ("range", "right"), ("fits", "left"),
                          ("quality\nrisk", "left"), ("verdict", "left")):
        if name.startswith("decode") and not speed or name == "range" and not speed:  # the speed and its range
            continue
        table.add_column(name, justify=justify, overflow="fold")
    for r in rows:
        capacity = "-" if r.kv_capacity_tokens is None else fmt_tokens(r.kv_capacity_tokens)
        if r.engine == "hf" and r.kv_capacity_tokens is not None:
            at_limit = 0 < spec.max_position_embeddings <= r.kv_capacity_tokens
            capacity += " (model max)" if at_limit else " (max ctx)"
        conc = "-" if r.max_concurrency is None else str(r.max_concurrency)
        span = (r.trust or {}).get("capacity_range")
        if span:  # a start kind that leaves the figure open (a cold 0.27-0.30 compile): low-high
            capacity = f"{fmt_tokens(span['kv_capacity_tokens_low'])}-{capacity}"
            if span["max_concurrency_low"] != span["max_concurrency_high"]:
                conc = f"{span['max_concurrency_low']}-{conc}"
        cells = [r.config, r.engine, _gib(r.weights_bytes), f"{r.kv_bytes_per_token:,.0f}", capacity,
                 conc, _gib(r.hf_memory_bytes)]
        cells += [decode_text(req, r), _range(r, "speed")] if speed else []
        table.add_row(*cells, fits_text(req, r), r.quality_risk, ", ".join(r.verdicts))
    _console().print(table)
    for line in trust_lines(rows):
        _console().print(line)
    evidence = {}
    for r in rows:
        if r.quality_evidence:
            evidence.setdefault(r.config, r.quality_evidence)
    if evidence:
        _console().print("Quality evidence, measured on small real models (not a prediction for this model; "
                         "docs/quality.md says what it can and cannot tell):")
        for config, text in evidence.items():
            _console().print(f"  {config}: {text}")
    _console().print(
        "GiB = 2^30 bytes. vLLM: KV capacity = the 'GPU KV cache size' vLLM logs at --util "
        f"{req.vllm_util}; max conc. = requests of --context tokens that fit at once (fits 'no: N of M': vLLM starts, holds "
        "N of the M requests at once and the others wait for a slot). "
        + ("decode tok/s = tokens/s of all requests decoding together, at the batch vLLM holds ('@N' when fewer than "
           "asked); per user: divide by that batch. " if req.workload is None else "") +
        "HF: memory the process holds at "
        "--context x --batch (fits 'no': out of memory); KV capacity = longest context that fits. Memory and speed "
        "constants are fitted on "
        "H200 runs (docs/validation/); other GPUs' speed derives from their datasheet bandwidth, tensor and FP32 "
        "rates (kvcalc explain shows every source).",
        style="dim")
    sglang = next((r.sglang for r in rows if r.sglang is not None), None)
    if sglang is not None:  # engines/sglang.py: what SGLang's rows count
        _console().print(f"SGLang: KV capacity = the max_total_num_tokens it logs at mem_fraction_static "
                         f"{sglang.mem_fraction_static:.3f}; max conc. = min(max_running_requests, pool / --context) "
                         "(x dp with DP attention); "
                         "decode speed uses vLLM's per-step overhead, plus the eager norm kernels SGLang runs for Gemma 3; "
                         "prefill: the lm_head at each request's last token, the piecewise graphs' per-layer CPU (errors on "
                         "SGLang's H200 and public runs: docs/validation/sglang.md).",
                         style="dim")


def _range(row: Row, figure: str) -> str:
    from .trust import range_text

    t = (row.trust or {}).get(figure)
    return "-" if not t else range_text(t["low"], t["high"])


def trust_lines(rows: list[Row]) -> list[str]:
    """One line per engine: what the speed and capacity figures rest on (kvcalc/trust.py), and the rows whose speed
    rests on an assumption or a known miss, with the constant named."""
    from .trust import capacity_range_text, range_text

    lines, seen = [], set()
    for r in rows:
        t = r.trust or {}
        if not t or r.engine in seen:
            continue
        seen.add(r.engine)
        sp, cap = t["speed"], t["capacity"]
        rng = (f"{range_text(sp['low'], sp['high'])} = where ~80% of such cases measured: "
               f"{sp.get('range_basis') or 'its class'}" if sp["low"] is not None else sp.get("range_basis", "no range"))
        lines.append(f"Evidence ({r.engine}): speed: {sp['label']} ({sp['backing']}); "
                     f"capacity: {cap['label']} ({cap['backing']}, {cap['low']:+.0%}/{cap['high']:+.0%})")
        lines.append(f"  speed range ({r.engine}): {rng}")
        lines.append("  quality risk: the format rule of kvcalc/formats.py (explain names it per row)")
    spans = [r for r in rows if (r.trust or {}).get("capacity_range")]
    if spans:  # one reason for all: the same start kind and release
        span = spans[0].trust["capacity_range"]
        short = [r.config for r in spans if r.trust["capacity_range"]["fits_high"]
                 and not r.trust["capacity_range"]["fits_low"]]
        lines.append(f"  capacity range ({', '.join(r.config for r in spans)}): " + capacity_range_text(span)
                     + (f"; at the low end {', '.join(short)} would not hold --batch" if short else ""))
    for r in rows:  # the rows whose speed rests on an unmeasured constant or is known to be off
        sp = (r.trust or {}).get("speed") or {}
        if sp.get("label") in ("assumption", "known miss"):
            lines.append(f"  {r.config} ({r.engine}) speed: {sp['label']}"
                         + (f": {'; '.join(sp['assumptions'])}" if sp.get("assumptions") else ""))
    return lines


def render_bench(req: PlanRequest, rows: list[Row]) -> None:
    """The --input-len workload per row, in vllm bench's terms."""
    wl = req.workload
    how = f"request rate {wl.request_rate:g}/s" if wl.request_rate else f"concurrency {wl.concurrency or 1}"
    if wl.request_rate and wl.burstiness != 1:
        how += f", burstiness {wl.burstiness:g}"
    extra = "".join([f", prefix {wl.prefix_len:,}" if wl.prefix_len else "",
                     f", range ratio {wl.random_range_ratio:g}" if wl.random_range_ratio else "",
                     (", a fresh server (vLLM: its first request pays the server's one-time cost"
                      + ("; SGLang warms itself at start: see the notes" if "sglang" in req.engines else "") + ")")
                     if wl.fresh_server else ""])
    table = Table(title=f"Workload as vllm bench reports it: input {wl.input_len:,} + output {wl.output_len:,} "
                        f"tokens, {how}{extra}, {wl.prompts():,} prompts", title_justify="left")
    pcts = [p for p in wl.percentiles if p != 50] or list(wl.percentiles)
    heads = ["config", "engine", "in flight", "TTFT\nmean ms", "TTFT\nmedian"]
    heads += [f"TTFT\np{p:g}" for p in pcts] + ["TPOT\nmean ms"] + [f"TPOT\np{p:g}" for p in pcts]
    heads += ["ITL\nmean ms", "e2e\nmean s", "output tok/s\nall users", "tok/s\nper user"]
    for name in heads:
        table.add_column(name, justify="left" if name in ("config", "engine") else "right")
    for r in rows:
        b = r.bench
        if b is None:
            continue
        pc = b.percentiles

        def cell(key, fmt):
            return "-" if key not in pc else f"{pc[key]:{fmt}}"

        cells = [r.config, r.engine, f"{b.concurrency:g}", f"{b.ttft_s * 1e3:,.1f}", cell("median_ttft_ms", ",.1f")]
        cells += [cell(f"p{p:g}_ttft_ms", ",.1f") for p in pcts] + [f"{b.tpot_s * 1e3:,.2f}"]
        cells += [cell(f"p{p:g}_tpot_ms", ",.2f") for p in pcts]
        cells += ["-" if b.itl_s is None else f"{b.itl_s * 1e3:,.2f}", f"{b.e2e_s:,.2f}",
                  f"{b.output_tokens_per_s:,.1f}", f"{b.output_tokens_per_s_per_user:,.1f}"]
        table.add_row(*cells)
    _console().print(table)
    for r in rows:
        for note in (r.bench.notes if r.bench else []):
            _console().print(f"  {r.config} ({r.engine}): {note}", style="yellow")
    _console().print("Assumptions: " + "; ".join(ASSUMPTIONS) + ".", style="dim")


def csv_text(rows: list[Row]) -> str:
    """The plan table as CSV: the row fields of the JSON, verdicts joined with '; ', speed to 0.01 tok/s."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for row in rows:
        data = row.to_json()
        data["verdicts"] = "; ".join(row.verdicts)
        data["decode_tokens_per_s"] = round(row.decode_tokens_per_s, 2)
        writer.writerow({k: data[k] for k in CSV_FIELDS})
    return buf.getvalue()


def render_sweep(req: PlanRequest, sweep: list[TpOption]) -> None:
    fitting = [o for o in sweep if o.fits]
    head = (f"smallest tensor-parallel size that fits: TP {fitting[0].tp}" if fitting
            else f"does not fit on up to {sweep[-1].tp} x {req.gpu.name}")
    what = f"{req.weights_or_default.name} weights, {req.kv or 'auto'} KV"
    table = Table(title=f"vLLM ({what}) by tensor-parallel size: {head}", title_justify="left")
    for col in ("TP", "weights GiB/GPU", "KV capacity tokens", f"max conc. @{fmt_tokens(req.context)}",
                "decode tok/s", "fits"):
        table.add_column(col, justify="right")
    for o in sweep:
        table.add_row(str(o.tp), f"{o.weights_per_gpu_bytes / GiB:.2f}", fmt_tokens(o.kv_capacity_tokens),
                      str(o.max_concurrency), f"{o.decode_tokens_per_s:,.1f}"
                      + (f" @{o.decode_batch}" if o.decode_batch < req.batch else ""),
                      "yes" if o.fits else f"no: {o.max_concurrency} of {req.batch}" if o.starts
                      else f"no: does not start ({shortfall_text(o.shortfall_bytes)}/GPU)")
    _console().print(table)


def explain_text(req: PlanRequest, row: Row) -> str:
    spec, gpu = req.spec, req.gpu
    lines = [f"== {row.label} on {row.engine} ==",
             f"model {spec.name}: {spec.params.total:,} params ({spec.source}); "
             f"{spec.num_layers} layers, {spec.num_kv_heads} KV heads x head_dim {spec.head_dim}",
             f"GPU {gpu.name}: {gpu.memory_total_bytes:,} bytes ({fmt_gib(gpu.memory_total_bytes)}) as the driver "
             f"reports; {gpu.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s"]
    if row.vllm is not None:
        v = row.vllm
        lines += [
            f"requested = total x util        = {v.total_memory:,} x {req.vllm_util} = {v.requested_memory:,} B "
            f"({fmt_gib(v.requested_memory)})",
            f"- weights (per rank)             = {v.weights_bytes:,} B ({fmt_gib(v.weights_bytes)})",
            f"- activation peak (profile run)  = {v.activation_bytes:,} B ({fmt_gib(v.activation_bytes)}); "
            f"max_num_batched_tokens {v.max_num_batched_tokens:,}, max_num_seqs {v.max_num_seqs:,}",
            f"- non-torch growth               = {v.non_torch_bytes:,} B ({fmt_gib(v.non_torch_bytes)})",
            f"- CUDA-graph estimate            = {v.cudagraph_bytes:,} B ({fmt_gib(v.cudagraph_bytes)})",
        ]
        # the terms that only some settings have (kvcalc/engines/vllm.py notes say why)
        if req.other_processes_bytes and rules_with_engine(req.vllm_version, req.vllm_engine).others_reduce_kv:
            lines.append(f"- other processes (this release) = {req.other_processes_bytes:,} B "
                         f"({fmt_gib(req.other_processes_bytes)})")
        if req.kv_cache_memory_bytes:
            lines.append("  (--kv-cache-memory-bytes: the budget below is given, not the difference above)")
        elif rules_with_engine(req.vllm_version, req.vllm_engine).extensible_kv_cache:
            cap = (v.requested_memory - v.weights_bytes - v.activation_bytes - v.non_torch_bytes - v.cudagraph_bytes
                   - v.available_kv_bytes)
            if cap > 0:  # engines/vllm.py stage_budgets: the free memory at start, less the margin, binds
                lines.append(f"- free-memory cap (0.34+)        = {cap:,} B ({fmt_gib(cap)}): the extensible KV "
                             "cache keeps the CUDA context, other processes and max(1 GiB, 0.75 x peak) free")
        lines += [
            f"= available KV memory            = {v.available_kv_bytes:,} B ({fmt_gib(v.available_kv_bytes)})",
            f"KV per token (all layers, rank)  = {v.kv_bytes_per_token:,} B; block = {v.block_size} tokens = "
            f"{v.page_bytes_all_layers:,} B",
            f"num_gpu_blocks = floor(available / block bytes) = {v.num_gpu_blocks:,} -> "
            f"{v.kv_capacity_tokens:,} tokens",
            f"logged 'GPU KV cache size: {v.logged_kv_tokens:,} tokens', 'Maximum concurrency for "
            f"{v.max_model_len:,} tokens per request: {v.logged_concurrency:.2f}x'",
            f"requests of {req.context:,} tokens at once: {row.max_concurrency} (one null block reserved)",
        ]
        if v.serve_gate is not None:
            lines.append(f"does NOT start: vLLM {req.vllm_version} does not serve {v.serve_gate.what} (first served "
                         f"in {v.serve_gate.since}); the figures above are vLLM {v.serve_gate.since}'s")
        elif not v.fits:
            lines.append(f"does NOT start: short by {fmt_bytes(v.shortfall_bytes)} for one request of "
                         f"{v.max_model_len:,} tokens")
    if row.sglang is not None:  # engines/sglang.py: mem_fraction_static of the free memory holds weights + pool
        g = row.sglang
        lines += [
            f"free at start (per rank)         = {g.free_at_start:,} B ({fmt_gib(g.free_at_start)}): total less the "
            "CUDA context (and NCCL at TP > 1)",
            f"mem_fraction_static              = {g.mem_fraction_static:.4g} ({g.mem_fraction_source})",
            f"- weights (per rank)             = {g.weights_bytes:,} B ({fmt_gib(g.weights_bytes)})",
        ] + ([f"- draft weights (per rank)       = {g.draft_in_budget_bytes:,} B ({fmt_gib(g.draft_in_budget_bytes)}): "
              f"{g.speculative_algorithm}'s drafter, loaded before the pool is sized"]
             if g.draft_in_budget_bytes else []) + [
            f"= KV pool = free x mfs - weights = {g.kv_budget_bytes:,} B ({fmt_gib(g.kv_budget_bytes)})",
            f"bytes per token ({g.layout})       = {g.cell_bytes:,} B; page_size {g.page_size}"
            + (f"; {g.count_cell_bytes:,} B with the draft's layers (the pool's sizing)" if g.count_cell_bytes
               else ""),
            f"max_total_num_tokens = pool // cell = {g.max_total_num_tokens:,}"
            + (f"; sliding-window pool {g.swa_tokens:,}" if g.swa_tokens is not None else ""),
            f"max_running_requests {g.max_running_requests:,}"
            + (f" per DP worker, {g.dp_workers} workers each with its own pool" if g.dp_workers > 1 else "")
            + f" (req-to-token pool {g.req_pool_size:,}, "
            f"{fmt_gib(g.req_to_token_bytes)}); chunked_prefill_size {g.chunked_prefill_size:,}; "
            f"outside the budget: {fmt_gib(g.headroom_bytes)}",
            f"requests of {req.context:,} tokens at once: {row.max_concurrency}",
        ]
        if not g.fits:
            lines.append(f"does NOT start: short by {fmt_bytes(g.shortfall_bytes)}")
    if row.hf is not None:
        h = row.hf
        lines += [
            f"static (weights after load)      = {h.static_bytes:,} B ({fmt_gib(h.static_bytes)})",
            f"+ KV cache ({h.cache_tokens:,} tokens x batch {req.batch}) = {h.cache_bytes:,} B "
            f"({fmt_gib(h.cache_bytes)})",
            f"+ decode transient (largest)     = {h.transient_bytes:,} B ({fmt_bytes(h.transient_bytes)})",
            f"  prefill activations            = {h.prefill_activation_bytes:,} B "
            f"({fmt_bytes(h.prefill_activation_bytes)})",
            f"= peak increment over static     = {h.peak_increment_bytes:,} B ({fmt_gib(h.peak_increment_bytes)})",
            f"+ CUDA context                   = {h.cuda_context_bytes:,} B ({fmt_gib(h.cuda_context_bytes)})",
            f"= total                          = {h.total_bytes:,} B ({fmt_gib(h.total_bytes)}) of "
            f"{fmt_gib(gpu.memory_total_bytes)}" + ("" if h.fits else f"; short by {fmt_gib(h.shortfall_bytes)}"),
        ]
    if req.batch == 1:
        lines.append(f"decode ~ {row.decode_tokens_per_s:,.1f} tokens/s at batch 1, context {req.context:,}")
    else:
        held = (f"batch {row.decode_batch} (vLLM holds {row.decode_batch} of the {req.batch} asked at once)"
                if row.decode_batch < req.batch else f"batch {req.batch}")
        lines.append(f"decode ~ {row.decode_tokens_per_s:,.1f} tokens/s of all requests at {held}, context "
                     f"{req.context:,} ({row.decode_tokens_per_s / max(row.decode_batch, 1):,.1f} per request)")
    if row.speed is not None and row.speed.kernels:
        d = row.speed
        gpu_step = d.step_s if d.gpu_step_s is None else d.gpu_step_s
        if d.gpu_step_s is not None:  # the release's rules on the GPU's step (plan.vllm_decode; the notes say which)
            lines.append(f"  step {d.step_s * 1e3:.3f} ms: the GPU's {gpu_step * 1e3:.3f} ms under vLLM "
                         f"{req.vllm_version}'s rules (its CPU floor or host work per sequence, as the serve "
                         "simulation times a decode step)")
        lines.append(f"  {'GPU step' if d.gpu_step_s is not None else 'step'} {gpu_step * 1e3:.3f} ms = overhead "
                     f"{d.fixed_s * 1e3:.3f} ms + kernels (per GPU, each max-like of memory / tensor / CUDA-core time):")
        for k in d.kernels:
            lines.append(f"  - {k.name:<10} {k.time_s * 1e3:8.3f} ms ({k.bound}): {k.bytes / 1e9:,.3f} GB "
                         f"-> {k.memory_s * 1e3:.3f} ms, {k.flops / 1e12:,.3f} TFLOP -> {k.compute_s * 1e3:.3f} ms, "
                         f"{k.conversion_ops / 1e9:,.2f} G conversion ops -> {k.alu_s * 1e3:.3f} ms")
    if row.bench is not None:
        b = row.bench
        lines.append(f"workload: TTFT {b.ttft_s * 1e3:,.1f} ms, TPOT {b.tpot_s * 1e3:,.2f} ms, e2e {b.e2e_s:,.2f} s, "
                     f"{b.output_tokens_per_s:,.1f} output tok/s ({b.output_tokens_per_s_per_user:,.1f} per user) at "
                     f"{b.concurrency:g} in flight")
        if b.percentiles:
            tail = ", ".join(f"{k.replace('_ms', '').replace('_', ' ')} {v:,.1f} ms" for k, v in b.percentiles.items()
                             if not k.startswith("std_") and ("ttft" in k or "tpot" in k))
            lines.append(f"  simulated {b.num_prompts:,} prompts ({b.duration_s:,.1f} s of vllm bench): {tail}"
                         + (f"; {b.preemptions} preemptions" if b.preemptions else ""))
    t = row.trust or {}
    if t:
        from .trust import range_text

        sp, cap = t["speed"], t["capacity"]
        if sp["low"] is not None:
            lo, hi = row.decode_tokens_per_s * (1 + sp["low"]), row.decode_tokens_per_s * (1 + sp["high"])
            lines.append(f"evidence (speed): {sp['label']}: {sp['backing']}; decode {lo:,.1f}-{hi:,.1f} tok/s "
                         f"({sp['low']:+.0%}/{sp['high']:+.0%}, the spread of held-out errors: "
                         f"{sp.get('range_basis') or 'its class'})")
        else:
            lines.append(f"evidence (speed): {sp['label']}: {sp['backing']}; decode: {sp.get('range_basis') or 'no range'}")
        if sp.get("assumptions"):
            lines.append("  assumed constants: " + "; ".join(sp["assumptions"]))
        for key, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("output_tokens_per_s", "output tok/s")):
            if key in t:
                lines.append(f"  {name}: {range_text(t[key]['low'], t[key]['high'])} ({t[key]['label']}; "
                             f"{t[key].get('range_basis') or 'its class'})")
        lines.append(f"evidence (capacity): {cap['label']}: {cap['backing']} ({cap['low']:+.0%}/{cap['high']:+.0%})")
        span = t.get("capacity_range")
        if span:
            lines.append(f"capacity range: {span['kv_capacity_tokens_low']:,}-{span['kv_capacity_tokens_high']:,} "
                         f"KV tokens, {span['max_concurrency_low']}-{span['max_concurrency_high']} requests of "
                         f"{req.context:,} tokens at once (fits: {'yes' if span['fits_low'] else 'no'} at the low "
                         f"end, {'yes' if span['fits_high'] else 'no'} at the high end); low end = "
                         f"{span['pinned_bytes']:,} B a rank pinned ({span['cause']})")
        if t.get("quality"):
            lines.append(f"quality risk {row.quality_risk}: {t['quality']['backing']}"
                         + ("; " + t["quality"]["measured"] if t["quality"].get("measured") else
                            "; no small-model measurement of this configuration"))
    lines += [f"note: {n}" for n in row.notes]
    return "\n".join(lines) + "\n"


def render_gpus(profiles) -> None:
    table = Table(title="GPU profiles (memory as the driver reports it)", title_justify="left")
    from .trust import speed_basis, speed_range_summary

    for col in ("id", "name", "arch", "CC", "memory GiB", "bandwidth GB/s", "bf16 TFLOP/s", "fp8", "speed rests on"):
        table.add_column(col, overflow="fold")
    for p in profiles:
        bf16 = p.flops_for("bf16")
        label, backing = speed_basis(p)
        rng = speed_range_summary(p)
        table.add_row(p.id, p.name, p.architecture, str(p.compute_capability or "-"),
                      f"{p.memory_total_bytes / GiB:.2f}", f"{p.memory_bandwidth_bytes_per_s / 1e9:,.0f}",
                      "-" if not bf16 else f"{bf16 / 1e12:,.0f}", "native" if p.native_fp8 else "emulated",
                      f"{label}: {backing.split(': ', 1)[-1]}; {rng['text']}")
    _console().print(table)


def render_models(specs) -> None:
    table = Table(title="Model catalog", title_justify="left")
    for col in ("name", "hub id", "params", "type", "layers", "cache layers", "checkpoint format"):
        # the name and the hub id are what you copy: never cut or wrapped (the other columns wrap instead)
        table.add_column(col, no_wrap=col in ("name", "hub id"))
    for spec, entry in specs:
        kinds = ", ".join(sorted(spec.layer_kinds))
        table.add_row(spec.name, entry.get("hf_id", ""), f"{spec.params.total / 1e9:.2f} B", spec.model_type,
                      str(spec.num_layers), kinds, checkpoint_label(spec))
    _console().print(table)


def gpus_payload() -> list[dict]:
    """`kvcalc gpus --json` and the page's /api/gpus: one list, built here only."""
    import dataclasses

    from .hardware import list_gpus

    from .trust import speed_basis, speed_range_summary

    out = []
    for p in list_gpus():
        label, backing = speed_basis(p)
        rng = speed_range_summary(p)
        out.append({**dataclasses.asdict(p), "speed_evidence": {
            "label": label, "backing": backing, "decode_low": rng["low"], "decode_high": rng["high"],
            "range_basis": rng["range_basis"], "coverage": rng["coverage"]}})
    return out


def catalog_specs() -> list[tuple]:
    """(ModelSpec, catalog entry) of every catalog model that builds (the others are left out of both listings)."""
    from .catalog import catalog_entry, catalog_names, load_model
    from .errors import UsageError

    specs = []
    for name in catalog_names():
        try:
            specs.append((load_model(name), catalog_entry(name)))
        except UsageError:
            continue
    return specs


def models_payload(specs: list[tuple] | None = None) -> list[dict]:
    """`kvcalc models --json` and the page's /api/models: one list, built here only."""
    return [{"name": spec.name, "hf_id": entry.get("hf_id"), "params": spec.params.total,
             "model_type": spec.model_type, "layers": spec.num_layers, "checkpoint_format": checkpoint_label(spec)}
            for spec, entry in (catalog_specs() if specs is None else specs)]
