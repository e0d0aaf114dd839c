"""`kvcalc validate --bench FILE`: compare kvcalc's workload prediction (kvcalc/workload.py) with a result JSON of
`vllm bench serve --save-result` or `vllm bench throughput --output-json`.

Field names are those vLLM writes:
- serve (vllm/benchmarks/serve.py, main(): result_json = setup keys + benchmark()'s result): "model_id",
  "num_prompts", "request_rate" (a number or "inf"), "max_concurrency", "duration", "completed",
  "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput", and per metric
  "mean_<m>_ms", "median_<m>_ms", "p99_<m>_ms" for ttft, tpot, itl, e2el (e2el only when asked with
  --percentile-metrics). Per-request lists (input_lens, ...) are dropped unless --save-detailed, so the lengths are
  total tokens / completed requests.
- throughput (vllm/benchmarks/throughput.py): "elapsed_time", "num_requests", "total_num_tokens",
  "requests_per_second", "tokens_per_second" (no model, no lengths: --input-len/--output-len say them).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..errors import UsageError, shown

MAX_BYTES = 256 * 2**20  # a --save-detailed file of 10k requests is tens of MiB
TOLERANCE = {"ttft": 0.20, "p99_ttft": 0.30, "tpot": 0.15, "e2e": 0.15, "output_tokens_per_s": 0.15, "tokens_per_s": 0.15}


def read_bench(path: str) -> dict:
    """The result JSON as a dict with its kind ('serve' or 'throughput'); one-line UsageError otherwise."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"cannot read bench result {path!r}: no such file")
    if p.stat().st_size > MAX_BYTES:
        raise UsageError(f"{path}: {p.stat().st_size:,} bytes is larger than a vllm bench result ({MAX_BYTES:,})")
    try:
        data = json.loads(p.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a vllm bench result is a JSON object")
    if "mean_ttft_ms" in data or "output_throughput" in data:
        kind = "serve"
        need = ("completed", "total_input_tokens", "total_output_tokens", "duration")
    elif "elapsed_time" in data and "num_requests" in data:
        kind = "throughput"
        need = ("elapsed_time", "num_requests", "total_num_tokens")
    else:
        raise UsageError(f"{path}: neither a `vllm bench serve` result (mean_ttft_ms, output_throughput) nor a "
                         "`vllm bench throughput` one (elapsed_time, num_requests)")
    for key in need:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise UsageError(f"{path}: {key} must be a positive number, got {value!r}")
    return {"kind": kind, **data}


def _norm(name: str) -> str:
    base = name.strip().rstrip("/").split("/")[-1].lower()
    return re.sub(r"[-_.](instruct|chat|hf|it|base)$", "", base).replace("_", "-")


def same_model(model_id: str, asked: str, hf_id: str | None) -> bool:
    """Whether the bench's model_id names the asked model: its last path part (or the catalog's hf_id's),
    lowercased, -Instruct/-chat/-hf dropped, contains the other."""
    bench = _norm(model_id)
    for name in filter(None, (asked, hf_id)):
        mine = _norm(Path(name).stem if name.endswith(".json") else name)
        if mine and (mine in bench or bench in mine):
            return True
    return False


def _whole(data: dict, key: str) -> int | None:
    """A count field of a bench result: a whole number >= 1, or its digits as a string (other tools and hand edits
    write "8"); None when absent. Anything else is one line."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"bench result: {key} must be a whole number of at least 1, got {shown(value, 30)}")
    return value


def _rate(data: dict) -> float | None:
    """request_rate: a positive number, or "inf"/Infinity (every request at once: None)."""
    value = data.get("request_rate")
    if value is None or (isinstance(value, str) and value.strip().lower() in ("inf", "infinity")):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise UsageError(f"bench result: request_rate must be a number or \"inf\", got {shown(value, 30)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(f"bench result: request_rate must be a positive number or \"inf\", got {shown(value, 30)}")
    return None if math.isinf(value) else float(value)


def workload_of(data: dict, input_len: int | None, output_len: int | None, *, prefix_len: int = 0,
                random_range_ratio: float = 0.0):
    """The Workload the bench ran: lengths from its token totals (serve) or the options (throughput); a serve
    result's num_prompts, max_concurrency, request_rate and burstiness as it saved them (serve.py:2138-2156). The
    random dataset's --random-prefix-len and --random-range-ratio are not in the file: pass them."""
    from ..workload import Workload

    if data["kind"] == "serve":
        done = data["completed"]
        i = input_len or max(1, round(data["total_input_tokens"] / done) - prefix_len)
        o = output_len or max(1, round(data["total_output_tokens"] / done))
        rate = _rate(data)
        prompts = _whole(data, "num_prompts") or int(done)
        limit = _whole(data, "max_concurrency")
        conc = min(prompts, limit) if limit else (prompts if rate is None else None)
        burst = rate is None and (not limit or prompts <= limit)
        burstiness = data.get("burstiness")
        burstiness = float(burstiness) if isinstance(burstiness, (int, float)) and 0 < burstiness < 1e6 else 1.0
        return Workload(i, o, concurrency=conc, request_rate=rate, burst=burst, num_prompts=prompts,
                        burstiness=burstiness, prefix_len=prefix_len, random_range_ratio=random_range_ratio)
    if not (input_len and output_len):
        raise UsageError("a `vllm bench throughput` result holds no lengths: give --input-len and --output-len")
    return Workload(input_len, output_len, concurrency=int(data["num_requests"]), num_prompts=int(data["num_requests"]))


def compare(data: dict, bench_estimate, wl) -> list[dict]:
    """Rows of (quantity, measured, predicted, error, verdict)."""
    rows = []

    def add(name, measured, predicted, unit):
        if measured is None or not isinstance(measured, (int, float)) or measured <= 0:
            return
        err = predicted / measured - 1
        rows.append({"quantity": name, "unit": unit, "measured": measured, "predicted": predicted,
                     "error": err, "verdict": "PASS" if abs(err) <= TOLERANCE[name] else "MISS"})

    b = bench_estimate
    if data["kind"] == "serve":
        add("ttft", data.get("mean_ttft_ms"), b.ttft_s * 1e3, "ms")
        add("p99_ttft", data.get("p99_ttft_ms"), b.percentiles.get("p99_ttft_ms", 0.0), "ms")
        add("tpot", data.get("mean_tpot_ms"), b.tpot_s * 1e3, "ms")
        add("e2e", data.get("mean_e2el_ms"), b.e2e_s * 1e3, "ms")
        # the run's throughput includes ramp-up and drain: requests over the whole duration
        add("output_tokens_per_s", data.get("output_throughput"), b.output_tokens_per_s, "tok/s")
    else:
        per = wl.input_len + wl.output_len
        add("tokens_per_s", data.get("tokens_per_second"), b.request_throughput * per, "tok/s")
    return rows
