"""Prediction beside observation for every committed H200 run, with the current kvcalc: writes
docs/validation/errors.json and the tables of docs/validation/README.md (between the AUTO markers).

    python3 scripts/validation_report.py [--write]

A case that fitted a constant (scripts/fit_constants.py FIT_CASES) is marked 'fit'; every other case is held out.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "validation" / "data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_constants import FIT_CASES  # noqa: E402

from kvcalc.catalog import load_model  # noqa: E402
from kvcalc.engines import hf as hf_engine  # noqa: E402
from kvcalc.formats import kv_format, weight_format  # noqa: E402
from kvcalc.hardware import get_gpu  # noqa: E402
from kvcalc.throughput import decode_speed  # noqa: E402
from kvcalc.validate.results import iter_jsonl  # noqa: E402
from kvcalc.validate.compare import rel_error as err  # noqa: E402
from kvcalc.validate.predict import hf_case_settings, normalize_vllm_case, predict_vllm_case  # noqa: E402

GiB = 2**30
FITTED = {c for cases in FIT_CASES.values() for c in cases}
SUMMARY = re.compile(r"Actual usage is ([\d.]+) GiB for weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB for "
                     r"non-torch memory, and ([\d.]+) GiB for CUDAGraph memory")


def load(name: str) -> list[dict]:
    return list(iter_jsonl(DATA / name))


def vllm_rows() -> list[dict]:
    out = []
    for name in ("vllm-gpu0.jsonl", "vllm-gpu1.jsonl", "vllm-tp2.jsonl", "vllm-holdout.jsonl"):
        for r in load(name):
            cid = r["case_id"]
            if r.get("status") != "ok":
                out.append({"case": cid, "engine": "vllm", "status": r.get("status"),
                            "message": (r.get("message") or "")[:160]})
                continue
            s = normalize_vllm_case({**r["settings"], "id": cid})
            internals = r["observed"].get("internals", {})
            total = internals.get("init_total_memory") or r["observed"]["total_bytes"]
            est = predict_vllm_case(s, internals, total, "0.26.0")
            q = {}
            q["KV blocks"] = (est.num_gpu_blocks, internals.get("num_gpu_blocks"))
            q["logged KV tokens"] = (est.logged_kv_tokens, internals.get("kv_cache_size_tokens"))
            q["available KV bytes"] = (est.available_kv_bytes, internals.get("available_kv_cache_memory_bytes"))
            q["weights bytes"] = (est.weights_bytes, internals.get("model_memory_usage"))
            q["activation bytes"] = (est.activation_bytes, internals.get("peak_activation_memory"))
            q["non-torch bytes"] = (est.non_torch_bytes, internals.get("non_torch_memory"))
            tp = int(s.get("tensor_parallel_size") or 1)
            if tp > 1:
                q.update(tp_worker_values(cid, est))
            speed = r["observed"].get("speed") or {}
            spec = load_model(s["model"])
            for key, sp in speed.items():
                if not isinstance(sp, dict) or s["enforce_eager"]:
                    continue
                ctx = int(sp["prompt_len"] + sp["max_tokens"] / 2)
                pred = decode_speed(spec, get_gpu("h200"), "vllm", weight_format(s.get("weights", "bf16")),
                                    kv_format(s["kv"]), sp["batch"], ctx, False, tp).tokens_per_s
                q[f"decode tok/s {key}"] = (pred, sp["decode_tokens_per_s"])
            out.append({"case": cid, "engine": "vllm", "status": "ok", "fit": cid in FITTED, "tp": tp,
                        "quantities": {k: {"predicted": p, "observed": o, "error": err(p, o)}
                                       for k, (p, o) in q.items() if o is not None}})
    return out


def tp_worker_values(cid: str, est) -> dict:
    """Per-GPU memory of a TP run, from the workers' 'Actual usage' summary (GiB with 2 decimals)."""
    with tarfile.open(DATA / "logs-tp2.tar.gz") as tar:
        texts = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.name.endswith(".out")}
    for text in texts.values():
        if cid in text:
            match = SUMMARY.search(text[text.index(cid):])
            if match:
                w, a, n, _ = (float(x) * GiB for x in match.groups())
                return {"weights bytes (per GPU, log)": (est.weights_bytes, w),
                        "activation bytes (per GPU, log)": (est.activation_bytes, a),
                        "non-torch bytes (per GPU, log)": (est.non_torch_bytes, n)}
    return {}


def hf_rows() -> list[dict]:
    out = []
    for name in ("hf.jsonl", "hf-gemma.jsonl", "hf-holdout.jsonl"):
        for r in load(name):
            cid = r["case_id"]
            if r.get("status") != "ok":
                if r.get("status") != "skipped":
                    out.append({"case": cid, "engine": "hf", "status": r.get("status"),
                                "message": (r.get("message") or "")[:160]})
                continue
            s = r["settings"]
            spec = load_model(s["model"])
            settings = hf_case_settings(s, kv_format(s["kv"]))
            est = hf_engine.estimate(spec, settings)
            o = r["observed"]
            speed = decode_speed(spec, get_gpu("h200"), "hf", settings.weights, settings.kv, s["batch"],
                                 s["prompt_len"] + s["new_tokens"] // 2).tokens_per_s
            q = {"static bytes": (est.static_bytes, o["static_bytes"]),
                 "cache bytes": (est.cache_bytes, o["cache"]["cache_bytes"]),
                 "peak increment bytes": (est.peak_increment_bytes, o["peak_increment_bytes"]),
                 "decode tok/s": (speed, o.get("decode_tokens_per_s"))}
            out.append({"case": cid, "engine": "hf", "status": "ok", "fit": cid in FITTED,
                        "quantities": {k: {"predicted": p, "observed": v, "error": err(p, v)}
                                       for k, (p, v) in q.items() if v is not None}})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| case | used for | quantity | predicted | observed | error |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['case']} | - | **{r['status']}** | {r.get('message', '')} | | |")
            continue
        for k, v in r["quantities"].items():
            fmt = (lambda x: f"{x:,.1f}") if "tok/s" in k else (
                (lambda x: f"{x / GiB:.3f} GiB") if "bytes" in k else (lambda x: f"{x:,}"))
            e = "-" if v["error"] is None else f"{v['error'] * 100:+.2f}%"
            lines.append(f"| {r['case']} | {'fit' if r['fit'] else 'held out'} | {k} | {fmt(v['predicted'])} | "
                         f"{fmt(v['observed'])} | {e} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r["status"] != "ok" or r["fit"]:
            continue
        for k, v in r["quantities"].items():
            if v["error"] is not None:
                key = f"{r['engine']}: {re.sub(r' b(1|32|8)$', '', k)}"
                if "tok/s" in k:
                    key += f" (batch {k.split(' b')[-1]})" if r["engine"] == "vllm" else ""
                groups.setdefault(key, []).append(v["error"])
    lines = ["| quantity (held-out cases) | n | mean error | worst |", "|---|---:|---:|---:|"]
    for k in sorted(groups):
        es = groups[k]
        worst = max(es, key=abs)
        lines.append(f"| {k} | {len(es)} | {sum(es) / len(es) * 100:+.2f}% | {worst * 100:+.2f}% |")
    return "\n".join(lines)


def main() -> None:
    rows = vllm_rows() + hf_rows()
    text = "## Summary\n\n" + summary(rows) + "\n\n## Every case\n\n" + table(rows) + "\n"
    if "--write" in sys.argv:
        (ROOT / "docs" / "validation" / "errors.json").write_text(json.dumps(rows, indent=1))
        page = ROOT / "docs" / "validation" / "README.md"
        old = page.read_text()
        start, end = "<!-- AUTO: scripts/validation_report.py -->", "<!-- /AUTO -->"
        new = old[: old.index(start) + len(start)] + "\n" + text + old[old.index(end):]
        page.write_text(new)
    print(text)


if __name__ == "__main__":
    main()
