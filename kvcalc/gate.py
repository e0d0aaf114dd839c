"""kvcalc as a pre-flight gate: exit 1 with one line that says what failed.

Exit codes, every command: 0 the answer is yes (or the command only reports); 1 a gate failed (`plan --require-fit`
and the chosen rows do not fit, `fit` finds no answer in range, `search` finds no deployment that meets the targets,
`validate --strict` finds a mismatch); 2 usage error (bad input, one `error:` line). The output (table or JSON) is
printed either way, so a CI job can keep it; the reason is the last line on stderr, starting with `gate failed:`.
"""

from __future__ import annotations

from .units import GiB

GATE_FAILED = 1


class GateFailed(Exception):
    """The command answered and the answer is no; str() is the one line (cli_errors prints it, exits 1)."""


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def row_reason(row) -> str:
    """Why one plan row does not fit, in a few words (the row's own figures)."""
    est = row.vllm
    if row.engine == "vllm" and est is not None:
        if est.serve_gate is not None:
            return f"vLLM {est.serve_gate.since}+ is the first release that serves this model"
        capture = est.graph_capture
        if capture is not None and capture.fails_at_capture:
            return (f"starts, then fails at CUDA-graph capture: graphs need ~{_gib(capture.capture_bytes)} after the "
                    f"KV cache, {_gib(capture.headroom_bytes)} is left (short {_gib(capture.overflow_bytes)})")
        if not est.fits:
            return f"vLLM does not start: short {_gib(row.shortfall_bytes)} per GPU"
        return (f"holds {row.max_concurrency:,} requests of the context at once, fewer than the batch asked "
                f"(short {_gib(row.shortfall_bytes)} of KV per GPU)")
    return f"transformers needs {_gib(row.shortfall_bytes)} more than the GPU has"


def plan_failure(req, rows) -> str | None:
    """`plan --require-fit`: the rows of the asked configuration (--weights/--kv, else the baseline), one per asked
    engine, must all fit. None when they do; else the one line naming each that does not."""
    from .plan import custom_key

    key = custom_key(req)
    chosen = [r for r in rows if r.config == key]
    if not chosen:
        return f"no row for configuration {key} (see the warnings)"
    failing = [r for r in chosen if not r.fits]
    if not failing:
        return None
    where = f"{req.tp * req.pp} x {req.gpu.id}" + (f" (TP {req.tp}, PP {req.pp})" if req.tp * req.pp > 1 else "")
    parts = [f"{r.engine} {r.config} does not fit on {where} at context {req.context:,} x batch {req.batch}: "
             f"{row_reason(r)}" for r in failing]
    return "; ".join(parts)


def fit_failure(answer) -> str | None:
    """`kvcalc fit`: no value in range is a failed gate."""
    if answer.value is not None:
        return None
    return f"fit {answer.question}: nothing in range fits ({answer.detail})"


def search_failure(result, sglang_rows=None, server: str = "vllm") -> str | None:
    """`kvcalc search`: no deployment meeting the targets is a failed gate (the binding constraint says why). With
    --server sglang SGLang's deployments are the answer (why its structures were left out: the result's
    "sglang:" warnings); with --server both either server's."""
    if server == "sglang":
        if sglang_rows:
            return None
        why = next((w[len("sglang: "):] for w in result.warnings if w.startswith("sglang: ")), None)
        return "search: no SGLang deployment meets the targets" + (f" ({why})" if why else "")
    if result.results or (server == "both" and sglang_rows):
        return None
    return "search: " + (result.message or "no deployment meets the targets")
