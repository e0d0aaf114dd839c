"""The API's payloads, made by the same functions the CLI calls: plan rows and kvcalc.plan/1 JSON from kvcalc.plan,
explain text from kvcalc.render, plot numbers from kvcalc's sweep data functions (the ones the PNG plots draw)."""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache

from ..errors import UsageError
from .inputs import MAX_CONFIG_BYTES, MAX_GPUS, WebRequest, option_names

PLOTS_SCHEMA = "kvcalc.plots/1"
EXPLAIN_SCHEMA = "kvcalc.explain/1"


def _name(fmt) -> str | None:
    """A format given as a name (older PlanRequest) or as a resolved format object."""
    return getattr(fmt, "name", fmt)


def plan_rows(web: WebRequest):
    from ..plan import plan

    warnings = list(web.warnings)
    rows = plan(web.req, warnings)
    return rows, warnings


def _tp_sweep(req, rows, asked: bool):
    """The TP sweep exactly when `kvcalc plan` shows it: asked, or the asked configuration misses on one GPU."""
    from ..plan import should_sweep, tp_sweep

    return tp_sweep(req) if should_sweep(req, rows, asked) else None


def plan_payload(web: WebRequest) -> dict:
    """kvcalc.plan/1, as `kvcalc plan --json` prints it for the same options."""
    from ..plan import plan_json

    rows, warnings = plan_rows(web)
    return plan_json(web.req, rows, warnings, _tp_sweep(web.req, rows, web.tp_sweep))


def plan_csv(web: WebRequest) -> str:
    """`kvcalc plan --csv` for the same options."""
    from ..render import csv_text

    rows, _ = plan_rows(web)
    return csv_text(rows)


def explain_payload(web: WebRequest, row: str | None = None, row_engine: str | None = None) -> dict:
    """`kvcalc explain` of one row of the table (default: the configuration --weights/--kv ask for)."""
    from ..plan import custom_key
    from ..render import explain_text

    rows, warnings = plan_rows(web)
    key = row or custom_key(web.req)
    if row_engine not in (None, "", "vllm", "sglang", "hf"):
        raise UsageError(f"row_engine must be vllm, sglang or hf, got {str(row_engine)[:20]!r}")
    chosen = [r for r in rows if r.config == key and (not row_engine or r.engine == row_engine)]
    if not chosen:
        choices = ", ".join(sorted({f"{r.config} ({r.engine})" for r in rows})) or "none"
        raise UsageError(f"no row {str(key)[:40]!r}{' on ' + row_engine if row_engine else ''} in this table; "
                         f"rows: {choices}")
    r = chosen[0]
    return {"schema": EXPLAIN_SCHEMA, "config": r.config, "engine": r.engine, "label": r.label,
            "text": explain_text(web.req, r), "row": r.to_json(), "warnings": warnings}


DEPLOY_SCHEMA = "kvcalc.deploy/1"
DEPLOY_FILES = {"serve": "serve.sh", "docker": "docker-run.sh", "kubernetes": "kubernetes.yaml",
                "kserve": "kserve-inferenceservice.yaml", "llm-d": "llm-d-values.yaml"}


def deploy_payload(web: WebRequest, kind: str | None = None) -> dict:
    """One deployment file of the asked configuration's vLLM row, as `kvcalc plan --emit KIND` prints it."""
    from ..deploy import emit, from_plan
    from ..plan import custom_key

    if kind not in DEPLOY_FILES:
        raise UsageError(f"kind must be one of {', '.join(DEPLOY_FILES)}, got {str(kind)[:20]!r}")
    rows, warnings = plan_rows(web)
    row = next((r for r in rows if r.engine == "vllm" and r.config == custom_key(web.req)), None)
    if row is None:
        raise UsageError("no vLLM row for the asked configuration: nothing to deploy")
    d = from_plan(web.req, row)
    return {"schema": DEPLOY_SCHEMA, "kind": kind, "filename": f"{d.name}-{DEPLOY_FILES[kind]}",
            "text": emit(d, kind), "fits": row.fits, "deployment": d.to_json(), "warnings": warnings}


def plots_payload(web: WebRequest) -> dict:
    """The numbers behind the three plots of `kvcalc plot`: vLLM requests at once vs context, decode tokens/s vs
    batch (with the H200 measurements where they exist), and where one GPU's memory goes per row."""
    from ..formats import kv_format
    from ..plan import configs_for

    from .. import sweeps as data

    req = web.req
    rows, warnings = plan_rows(web)
    labels = {c.key: c.label for c in configs_for(req)}
    out: dict = {"schema": PLOTS_SCHEMA, "model": req.spec.name, "gpu": req.gpu.id, "gpu_name": req.gpu.name,
                 "gpu_memory_total_bytes": req.gpu.memory_total_bytes, "context": req.context, "batch": req.batch,
                 "tp": req.tp, "pp": req.pp, "warnings": warnings, "capacity": None, "speed": None}
    if "vllm" in req.engines:
        try:
            series = data.capacity_series(req)
            out["capacity"] = {
                "grid": data.context_grid(req),
                "series": [{"config": k, "label": labels.get(k, k), "points": [list(p) for p in pts]}
                           for k, pts in series.items()],
                "hf_longest": data.hf_longest_contexts(req, rows) if "hf" in req.engines else {},
            }
            speeds = data.speed_series(req)
            weights = _name(req.weights) or "bf16"
            measured = data.measured_speed_points(req.spec.name, req.gpu.id, req.tp, weights)
            out["speed"] = {
                "context": req.context,
                "weights": weights,
                "series": [{"kv": kv, "label": kv_format(kv).label, "points": [dataclasses.asdict(p) for p in pts]}
                           for kv, pts in speeds.items()],
                "measured": [dataclasses.asdict(m) for m in measured],
                # every vLLM configuration of the table (the PNG's speed plot): requests it holds at once and its
                # decode tok/s of all requests vs batch; the page draws tokens/s per user from it
                "by_config": [{"config": k, "label": labels.get(k, k), "capacity": capacity,
                               "points": [dataclasses.asdict(p) for p in pts]}
                              for k, (capacity, pts) in data.config_speed_series(req).items()],
            }
        except UsageError as exc:  # e.g. vLLM cannot account for this model: the plan's warnings say why too
            out["warnings"] = warnings + [f"plots: {exc}"]
    bars = data.memory_segments(req, rows)
    out["memory"] = {"total_bytes": req.gpu.memory_total_bytes,
                     "bars": [{**dataclasses.asdict(b), "segments": [list(s) for s in b.segments], "total": b.total}
                              for b in bars]}
    return out


@lru_cache(maxsize=1)
def gpus_bytes() -> bytes:
    """`kvcalc gpus --json`."""
    from ..render import gpus_payload

    return json.dumps(gpus_payload(), indent=1).encode()


@lru_cache(maxsize=1)
def models_bytes() -> bytes:
    """`kvcalc models --json`."""
    from ..render import models_payload

    return json.dumps(models_payload(), indent=1).encode()


def search_payload(params: dict, allow_hub: bool) -> dict:
    """`kvcalc search --json` (kvcalc.search/1) for the same options."""
    from ..request import search_result
    from ..search_sglang import search_payload as payload, sglang_rows_for
    from .inputs import parse_search

    kw, load, explicit = parse_search(params, allow_hub)
    res = search_result(kw, load, explicit)
    return payload(kw, res, sglang_rows_for(kw, res))


@lru_cache(maxsize=2)
def info_payload(allow_hub: bool) -> dict:
    """What the page needs to draw its form: the CLI's option names and defaults, the formats, the limits."""
    from .. import __version__
    from ..formats import KV_FORMATS, WEIGHT_FORMATS
    from .inputs import _web_names, search_names

    defaults = {}
    for name, option in _web_names().items():
        value = option.default
        defaults[name] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
    return {
        "schema": "kvcalc.web-info/1",
        "version": __version__,
        "allow_hub": allow_hub,
        "search": True,
        "search_options": search_names(),
        "options": option_names(),
        "defaults": defaults,
        "engines": ["both", "vllm", "sglang", "servers", "all", "hf"],
        "weights": [{"name": k, "label": f.label, "engines": list(f.engines)} for k, f in WEIGHT_FORMATS.items()],
        "kv": [{"name": k, "label": f.label} for k, f in KV_FORMATS.items()],
        "max_config_bytes": MAX_CONFIG_BYTES,
        "max_gpus": MAX_GPUS,
    }
