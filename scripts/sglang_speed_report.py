"""kvcalc's SGLang speed against the public SGLang benchmark rows of the speed corpus
(docs/validation/data/speed-corpus/corpus.jsonl, rows with "engine": "sglang"), through `kvcalc plan --engine sglang`'s
own path (plan.plan: the shared speed and scheduler models with SGLang's chunked_prefill_size and
max_running_requests, vLLM's per-step overhead). Every row is held out: scripts/speed_corpus_report.py fits its class
constants on vLLM rows only and skips these, and nothing is fitted on them here.

    python3 scripts/sglang_speed_report.py            # the table on stdout
    python3 scripts/sglang_speed_report.py --write    # also docs/validation/sglang.md (between the AUTO markers)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doc_blocks import print_or_write  # noqa: E402 (scripts/, beside this file)

CORPUS = ROOT / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"
DOC = ROOT / "docs" / "validation" / "sglang.md"
START, END = "<!-- AUTO: scripts/sglang_speed_report.py -->", "<!-- /AUTO: scripts/sglang_speed_report.py -->"
CLASS = {"tpot_ms": "TPOT", "ttft_ms": "TTFT", "itl_ms": "ITL", "output_throughput": "throughput"}


def sglang_rows() -> list[dict]:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("engine") == "sglang"]


def predict(row: dict) -> float:
    """The row's metric as `kvcalc plan --engine sglang` with the row's workload prints it (the checkpoint's own
    weights, as the benchmark served them)."""
    from kvcalc.catalog import load_model
    from kvcalc.hardware import get_gpu
    from kvcalc.plan import PlanRequest, plan
    from kvcalc.workload import Workload

    n = row.get("num_prompts")
    burst = bool(n) and n <= row["concurrency"]
    wl = Workload(int(row["input_len"]), int(row["output_len"]), concurrency=int(row["concurrency"]), burst=burst,
                  num_prompts=None if burst else n)
    args = row.get("sglang_args") or {}  # the server flags the benchmark launched SGLang with (settings_source)
    req = PlanRequest(spec=load_model(row["kvcalc_model"]), gpu=get_gpu(row["gpu"]), engines=("sglang",),
                      context=wl.input_len + wl.output_len, tp=int(row.get("tp") or 1), workload=wl,
                      sglang_version=row.get("sglang_version"), mem_fraction_static=args.get("mem_fraction_static"),
                      max_num_seqs=args.get("max_running_requests"),
                      max_num_batched_tokens=args.get("chunked_prefill_size"),
                      max_prefill_tokens=args.get("max_prefill_tokens"), cuda_graph_max_bs=args.get("cuda_graph_max_bs"),
                      stream_interval=int(args.get("stream_interval") or 1))
    bench = plan(req)[0].bench
    metric = row["metric"]
    if metric == "tpot_ms":
        return bench.tpot_s * 1000
    if metric == "ttft_ms":
        return bench.ttft_s * 1000
    if metric == "itl_ms":  # the gap between streamed chunks (--stream-interval tokens each)
        return bench.itl_s * 1000
    if metric == "output_throughput":  # per_gpu: the source divides by the deployment's GPUs
        return bench.output_tokens_per_s / (int(row.get("tp") or 1) if row.get("per_gpu") else 1)
    raise ValueError(metric)


def results() -> list[dict]:
    out = []
    for r in sglang_rows():
        p = predict(r)
        out.append({"id": r["id"], "source": r["source_url"], "gpu": f"{r['tp']}x {r['gpu']}",
                    "model": r["kvcalc_model"],
                    "workload": f"{r['input_len']}/{r['output_len']} at {r['concurrency']}", "metric": r["metric"],
                    "class": CLASS[r["metric"]], "measured": r["value"], "predicted": p, "error": p / r["value"] - 1})
    return out


def table(rs: list[dict]) -> str:
    lines = ["| row | GPU | model | in/out at concurrency | metric | measured | kvcalc | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        lines.append(f"| [{r['id']}]({r['source']}) | {r['gpu']} | {r['model']} | {r['workload']} | {r['metric']} | "
                     f"{r['measured']:,.1f} | {r['predicted']:,.1f} | {r['error'] * 100:+.1f}% |")
    lines.append("")
    for cls in ("TPOT", "TTFT", "ITL", "throughput"):
        errs = [r["error"] for r in rs if r["class"] == cls]
        if errs:
            lines.append(f"- {cls}: {len(errs)} rows, median error {statistics.median(errs) * 100:+.1f}%, median "
                         f"|error| {statistics.median(abs(e) for e in errs) * 100:.1f}% (all held out)")
    return "\n".join(lines)


def generated_blocks() -> list[tuple]:
    """(doc, start, end, text) of the block this script writes (tests/test_doc_blocks_current.py holds it)."""
    return [(DOC, START, END, table(results()) + "\n")]


def main(argv: list[str]) -> None:
    print_or_write(generated_blocks(), argv)


if __name__ == "__main__":
    main(sys.argv[1:])
