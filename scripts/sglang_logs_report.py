"""kvcalc's SGLang KV-pool error on every public SGLang start-up log in tests/fixtures/sglang_logs/public/ (sources in
index.json), through the same path as `kvcalc validate --from-log`: the log is parsed, and what the post states
outside the kept lines (GPU, TP, mem_fraction_static, context length) is passed as a user would pass flags.

    python3 scripts/sglang_logs_report.py            # the table on stdout
    python3 scripts/sglang_logs_report.py --write    # also docs/validation/sglang.md (between the AUTO markers)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcalc.units import GiB  # noqa: E402
from kvcalc.validate.sglang_log import check_sglang_log, parse_sglang_log  # noqa: E402
from doc_blocks import print_or_write  # noqa: E402 (scripts/, beside this file)

PUBLIC = ROOT / "tests" / "fixtures" / "sglang_logs" / "public"
DOC = ROOT / "docs" / "validation" / "sglang.md"
START, END = "<!-- AUTO: scripts/sglang_logs_report.py -->", "<!-- /AUTO: scripts/sglang_logs_report.py -->"


def rows() -> list[dict]:
    """One row per figure a log states: the KV pool kvcalc predicts from the model, GPU and settings, and (fitted,
    shown for completeness) the free memory at start that sets the context constant."""
    from kvcalc.engines.sglang import start_context_bytes
    from kvcalc.hardware import get_gpu

    out = []
    for e in json.loads((PUBLIC / "index.json").read_text())["logs"]:
        parsed = parse_sglang_log((PUBLIC / e["file"]).read_text(encoding="utf-8"))
        base = {"id": e["id"], "source": e["source_url"], "gpu": f"{e['gpu_count']}x {e['gpu']}", "tp": e["tp"],
                "model": e["model"] or "-", "mfs": e["mem_fraction_static"]}
        if e["model"]:
            overrides = {k: v for k, v in (("tp_size", e["tp"]), ("mem_fraction_static", e["mem_fraction_static"]),
                                          ("context_length", e["context_length"]),
                                          ("kv_cache_dtype", e["kv_cache_dtype"]),
                                          ("version", e.get("sglang_version")), ("dp_size", e.get("dp")),
                                          ("enable_dp_attention", e.get("enable_dp_attention")),
                                          ("enable_piecewise_cuda_graph", e.get("enable_piecewise_cuda_graph")))
                         if v is not None}
            report = check_sglang_log(parsed, e["model"], e["gpu"], **overrides)
            mfs = e["mem_fraction_static"] or f"default {report['estimate'].mem_fraction_static:.3f}"
            kv = next(x for x in report["rows"] if x["quantity"] == "logged KV cache tokens")
            out.append(base | {"quantity": "logged KV cache tokens", "observed": kv["observed"],
                               "predicted": kv["predicted"], "error": kv["error"], "fitted": False, "mfs": mfs,
                               "desktop": bool(e.get("desktop_gpu"))})
            if e.get("mfs_is_default"):  # the command sets no --mem-fraction-static: the logged one is SGLang's default
                stated = parsed["settings"]["mem_fraction_static"]
                unset = parsed | {"settings": {k: v for k, v in parsed["settings"].items() if k != "mem_fraction_static"}}
                default = check_sglang_log(unset, e["model"], e["gpu"], **overrides)["estimate"].mem_fraction_static
                out.append(base | {"quantity": "default mem_fraction_static", "observed": stated, "predicted": default,
                                   "error": (default - stated) / stated, "fitted": False, "detail": "fraction",
                                   "mfs": "-"})
            for x in report["rows"]:  # where a miss comes from, when the post quotes the weights line
                if x["quantity"] == "weights":
                    out.append(base | {"quantity": "weights (per rank)", "observed": x["observed"] / GiB,
                                       "predicted": x["predicted"] / GiB, "error": x["error"], "fitted": False,
                                       "detail": True, "mfs": mfs})
        free = parsed["values"].get("free_before_weights_bytes")
        if free is not None:
            gpu = get_gpu(e["gpu"])
            predicted = gpu.memory_total_bytes - start_context_bytes(gpu, e["tp"])
            out.append(base | {"quantity": "free memory at start (per rank)", "observed": free / GiB,
                               "predicted": predicted / GiB, "error": (predicted - free) / free,
                               "fitted": "free memory at start" in e.get("fits", ()), "detail": True})
    return out


def table(rs: list[dict]) -> str:
    lines = ["| log | GPU | TP | model | mem_fraction_static | quantity | observed | kvcalc | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        fmt = ((lambda v: f"{v:.6f}") if r.get("detail") == "fraction" else (lambda v: f"{v:,.2f} GiB")
               if r.get("detail") else (lambda v: f"{v:,}"))
        lines.append(f"| [{r['id']}]({r['source']}) | {r['gpu']} | {r['tp']} | {r['model']} | {r['mfs'] or '-'} | "
                     f"{r['quantity']}{' (fitted here)' if r['fitted'] else ''} | {fmt(r['observed'])} | "
                     f"{fmt(r['predicted'])} | {r['error'] * 100:+.2f}% |")
    kv = [abs(r["error"]) for r in rs if r["quantity"] == "logged KV cache tokens"]
    # a card that drives a desktop gives part of its memory to the display before SGLang starts, and no post
    # says how much: those rows stay predictions from the card alone, and the median is also shown without them
    headless = [abs(r["error"]) for r in rs if r["quantity"] == "logged KV cache tokens" and not r.get("desktop")]
    lines.append("")
    lines.append(f"KV-pool cases: {len(kv)}; median |error| {statistics.median(kv) * 100:.2f}%, worst "
                 f"{max(kv) * 100:.2f}% (target: 2% median)." if kv else "KV-pool cases: none")
    if kv and len(headless) < len(kv):
        lines.append(f"Without the {len(kv) - len(headless)} desktop card(s) (memory held by the display, not "
                     f"stated): {len(headless)} cases, median |error| {statistics.median(headless) * 100:.2f}%, "
                     f"worst {max(headless) * 100:.2f}%.")
    return "\n".join(lines)


def generated_blocks() -> list[tuple]:
    """(doc, start, end, text) of the block this script writes (tests/test_doc_blocks_current.py holds it)."""
    return [(DOC, START, END, table(rows()) + "\n")]


def main(argv: list[str]) -> None:
    print_or_write(generated_blocks(), argv)


if __name__ == "__main__":
    main(sys.argv[1:])
