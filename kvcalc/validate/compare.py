"""Prediction beside observation: signed relative errors, a table per case, a summary over many cases.

Error convention everywhere: (predicted - observed) / observed. Positive = kvcalc over-predicts (safe for memory),
negative = kvcalc under-predicts (the dangerous side for memory).
"""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..units import GiB, MiB


def rel_error(predicted: float | int | None, observed: float | int | None) -> float | None:
    """Signed relative error (pred - obs) / obs; None when either is missing or the observation is 0."""
    if predicted is None or observed is None:
        return None
    try:
        if observed == 0:
            return None
        return (float(predicted) - float(observed)) / float(observed)
    except (TypeError, ValueError):
        return None


def row(quantity: str, predicted: Any, observed: Any, unit: str = "bytes", note: str = "") -> dict[str, Any]:
    out = {"quantity": quantity, "unit": unit, "predicted": predicted, "observed": observed,
           "error": rel_error(predicted, observed)}
    if note:
        out["note"] = note
    return out


# --------------------------------------------------------------------------------------------------------------------
# Tolerances: what "kvcalc got this right" means for each quantity of a log comparison
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """PASS when |predicted - observed| <= max(rel * |observed|, abs_units). abs_units covers the log's own rounding
    (vLLM prints GiB with 2 decimals: +-0.005 GiB) and quantities too small for a relative bound to mean anything."""
    rel: float
    abs_units: float = 0.0
    why: str = ""

    def allows(self, predicted: float, observed: float) -> bool:
        return abs(float(predicted) - float(observed)) <= max(self.rel * abs(float(observed)), self.abs_units)

    def text(self, unit: str) -> str:
        parts = [f"{self.rel * 100:g}%"] if self.rel else []
        if self.abs_units:
            parts.append(f"{self.abs_units / GiB:g} GiB" if unit == "bytes" else f"{self.abs_units:g} {unit}")
        return "+-" + " or ".join(parts) if parts else "exact"


_ROUNDING = 0.01 * GiB  # two log values each rounded to 0.01 GiB
# The capacity target of the project (README, docs/validation): KV capacity within 1%.
TOLERANCES: dict[str, Tolerance] = {
    "requested memory (total x util)": Tolerance(0.001, _ROUNDING, "total x util, ceil'd by vLLM"),
    "weights": Tolerance(0.02, _ROUNDING, "weights within 2%"),
    "activation peak": Tolerance(0.25, 0.25 * GiB, "a fitted estimate; 0.25 GiB moves KV capacity ~0.2% on 80 GB"),
    "non-torch memory": Tolerance(0.0, 0.25 * GiB, "CUDA context, NCCL, cuBLAS: a fitted constant"),
    "non-KV (weights+activation+non-torch)": Tolerance(0.05, 0.25 * GiB),
    "CUDA-graph estimate": Tolerance(0.25, 0.1 * GiB),
    "available KV memory": Tolerance(0.01, _ROUNDING, "KV capacity within 1%"),
    "GPU blocks": Tolerance(0.01, 0.0, "KV capacity within 1%"),
    "logged KV cache tokens": Tolerance(0.01, 0.0, "KV capacity within 1%"),
    "KV tokens in the start-up error": Tolerance(0.01, 0.0, "KV capacity within 1% (V0: blocks x block size)"),
    "max concurrency": Tolerance(0.01, 0.01, "KV capacity within 1% (the log prints 2 decimals)"),
    "max_num_batched_tokens": Tolerance(0.0, 0.0, "a default vLLM picks: exact"),
}


def with_verdict(r: dict[str, Any], tolerances: dict[str, Tolerance] = TOLERANCES) -> dict[str, Any]:
    """The row with 'tolerance' (text) and 'verdict': PASS | MISS, or '-' when there is no tolerance or number."""
    out = dict(r)
    tol = tolerances.get(r["quantity"])
    if tol is None or r.get("predicted") is None or r.get("observed") is None:
        out["verdict"] = "-"
        return out
    out["tolerance"] = tol.text(r.get("unit", ""))
    out["verdict"] = "PASS" if tol.allows(r["predicted"], r["observed"]) else "MISS"
    return out


def errors_by_quantity(rows: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    return {r["quantity"]: r.get("error") for r in rows}


def format_value(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        v = float(value)
        if abs(v) >= GiB / 4:
            return f"{v / GiB:.3f} GiB"
        if abs(v) >= MiB:
            return f"{v / MiB:.2f} MiB"
        return f"{int(v):,} B"
    if unit in ("tokens", "blocks", "count"):
        return f"{int(value):,}"
    if unit == "x":
        return f"{float(value):.2f}x"
    if unit in ("tok/s",):
        return f"{float(value):,.1f}"
    if unit in ("ms",):
        return f"{float(value):.2f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_error(error: float | None) -> str:
    if error is None:
        return "-"
    return f"{error * 100:+.2f}%"


def _plain_table(title: str, headers: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(headers)]
    out = io.StringIO()
    if title:
        out.write(title + "\n")
    out.write("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for line in lines:
        out.write("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
                  + "\n")
    return out.getvalue()


def render_table(rows: Sequence[dict[str, Any]], title: str = "", plain: bool = False) -> str:
    """quantity | predicted | observed | signed error %, as text (rich when installed, plain otherwise)."""
    headers: tuple[str, ...] = ("quantity", "predicted", "observed", "error (pred-obs)/obs")
    lines = [(r["quantity"], format_value(r.get("predicted"), r.get("unit", "")),
              format_value(r.get("observed"), r.get("unit", "")), format_error(r.get("error"))) for r in rows]
    judged = any("verdict" in r for r in rows)
    if judged:  # a log comparison: the tolerance and verdict of each row
        headers += ("tolerance", "verdict")
        lines = [line + (r.get("tolerance", "-"), r.get("verdict", "-")) for r, line in zip(rows, lines)]
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            plain = True
    if plain:
        return _plain_table(title, headers, lines)
    table = Table(title=title or None, title_justify="left")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r, line in zip(rows, lines):
        err = r.get("error")
        style = None
        if err is not None and r.get("unit") == "bytes":
            style = "red" if err < -0.05 else ("yellow" if abs(err) > 0.05 else None)
        table.add_row(*line, style=style)
    buf = io.StringIO()
    Console(file=buf, width=140 if judged else 120, force_terminal=False, color_system=None).print(table)
    return buf.getvalue()


def case_title(result: dict[str, Any]) -> str:
    s = result.get("settings", {})
    engine = result.get("engine", "?")
    keys = ("model", "weights", "kv", "batch", "prompt_len", "new_tokens", "util", "max_model_len", "enforce_eager")
    parts = [f"{k}={s[k]}" for k in keys if k in s]
    status = result.get("status", "?")
    extra = f" [{status}: {result.get('message', '')[:160]}]" if status != "ok" else ""
    return f"{engine}: " + " ".join(parts) + extra


def render_result(result: dict[str, Any], plain: bool = False) -> str:
    rows = result.get("comparison") or []
    if not rows:
        return case_title(result) + "\n"
    return render_table(rows, title=case_title(result), plain=plain)


def summarize(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per quantity over every 'ok' case: count, mean signed error, mean |error|, worst error (largest |error|)."""
    acc: dict[str, list[float]] = defaultdict(list)
    status_counts: dict[str, int] = defaultdict(int)
    for res in results:
        status_counts[res.get("status", "?")] += 1
        if res.get("status") != "ok":
            continue
        for r in res.get("comparison") or []:
            if r.get("error") is not None:
                acc[f"{res.get('engine', '?')}:{r['quantity']}"].append(float(r["error"]))
    out = []
    for quantity, errs in sorted(acc.items()):
        worst = max(errs, key=abs)
        out.append({"quantity": quantity, "n": len(errs), "mean_error": sum(errs) / len(errs),
                    "mean_abs_error": sum(abs(e) for e in errs) / len(errs), "worst_error": worst})
    out.append({"quantity": "status", **dict(status_counts)})
    return out


def render_summary(summary: Sequence[dict[str, Any]]) -> str:
    lines = []
    status = None
    for s in summary:
        if s["quantity"] == "status":
            status = s
            continue
        lines.append((s["quantity"], str(s["n"]), format_error(s["mean_error"]), format_error(s["mean_abs_error"]),
                      format_error(s["worst_error"])))
    text = _plain_table("summary (signed error = (pred-obs)/obs)",
                        ("quantity", "n", "mean", "mean |err|", "worst"), lines)
    if status:
        text += "cases: " + ", ".join(f"{k} {v}" for k, v in status.items() if k != "quantity") + "\n"
    return text


def render_report(results: Sequence[dict[str, Any]], plain: bool = False) -> str:
    parts = [render_result(r, plain=plain) for r in results]
    parts.append(render_summary(summarize(results)))
    return "\n".join(parts)
