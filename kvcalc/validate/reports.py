"""The comparisons `kvcalc validate --from-log` and `--metrics` print as JSON, built once for the CLI and the Python
API (kvcalc.validate_log, kvcalc.validate_metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError, shown
from ..input_files import is_file


def one_format(names, option: str) -> str | None:
    """One format name: validate compares one deployment (plan's --weights/--kv lists are for its table)."""
    if not names:
        return None
    if isinstance(names, str):
        return names
    if len(names) > 1:
        raise UsageError(f"{option}: validate compares one deployment; give one format")
    return names[0]


def normalize_formats(weights, kv, quantization, max_model_len) -> tuple[str | None, str | None]:
    """validate's --weights/--kv (one each), --quantization as the weights, and no `auto` length."""
    from ..options import AUTO

    weights, kv = one_format(weights, "--weights"), one_format(kv, "--kv")
    if quantization:
        if weights:
            raise UsageError("give --weights or --quantization, not both")
        weights = quantization  # the log reader takes vLLM's names too
    if max_model_len == AUTO:
        raise UsageError("--max-model-len auto: give the length the engine ran with (or leave it to the log)")
    return weights, kv


def settings_overrides(*, kv=None, util=None, weights=None, tp=None, pp=None, max_model_len=None,
                       max_num_batched_tokens=None, max_num_seqs=None, enforce_eager=None, entrypoint=None,
                       block_size=None) -> dict[str, Any]:
    """`kvcalc validate`'s parsed settings (the --from-log / --metrics options, by their CLI names) as the
    overrides validate.predict reads (VllmSettings' names); only those given."""
    out = {"kv": kv, "gpu_memory_utilization": util, "weights": weights, "tensor_parallel_size": tp,
           "pipeline_parallel_size": pp, "max_model_len": max_model_len,
           "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs,
           "enforce_eager": enforce_eager, "block_size": block_size,
           "entrypoint": {"offline": "llm"}.get(entrypoint, entrypoint)}
    return {k: v for k, v in out.items() if v is not None}


def model_the_log_served(served, who: str) -> str:
    """The catalog name of the model a start-up log names (`served`: its model or model_path setting), for
    --from-log without --model; `who` words the error ("engine served", "server ran")."""
    from ..catalog import _by_hub_id

    model = _by_hub_id(served.strip()) if isinstance(served, str) else None
    if not model:
        raise UsageError(f"--from-log needs --model (the catalog name or config.json the log's {who})"
                         + (f": the log's {served!r} is not in kvcalc's catalog" if served else ""))
    return model


def from_log(path: str, model: str | None, gpu: str | None, overrides: dict, *, vllm_version: str | None = None,
             run: int | None = None, text: str | None = None) -> dict[str, Any]:
    """{"parsed", "report", "model", "model_note"} for a start-up log (a file, or its `text`)."""
    from .vllm_log import check_log, parse_vllm_log, read_log

    if not gpu:
        raise UsageError("--from-log needs --gpu (e.g. h100-sxm); the log's own total memory replaces the "
                         "profile's when the log states it")
    if text is None:
        if not is_file(path):  # (input_files.is_file: a NUL byte or an over-long name is "no such file")
            raise UsageError(f"cannot read log {shown(path)}: no such file")
        text = read_log(Path(path))
    parsed = parse_vllm_log(text, run=run)
    if not parsed["values"]:
        raise UsageError(f"{path}: no vLLM memory lines found (is this a vLLM start-up log?)")
    note = None
    if not model:
        served = parsed["settings"].get("model")
        model = model_the_log_served(served, "engine served")
        note = f"model {model} (the log served {served})"
    report = check_log(parsed, model, gpu, vllm_version=vllm_version, run_given=run is not None, **overrides)
    return {"parsed": parsed, "report": report, "model": model, "model_note": note}


def _verdict(rows: list[dict], mismatches: list) -> dict[str, int]:
    return {"pass": sum(1 for r in rows if r.get("verdict") == "PASS"),
            "miss": sum(1 for r in rows if r.get("verdict") == "MISS"), "mismatch": len(mismatches)}


def log_json(parsed: dict, report: dict) -> dict:
    """`kvcalc validate --from-log --json`."""
    return {"parsed": {k: parsed[k] for k in ("version", "settings", "values", "errors", "warnings", "runs", "run")},
            "comparison": report["rows"], "mismatches": report["mismatches"], "notes": report["notes"],
            "assumed": report["assumed"], "verdict": _verdict(report["rows"], report["mismatches"]),
            # a cold 0.27-0.30 compile: each capacity quantity's low end (the freed compile segment pinned); the
            # comparison's predicted is the high end. None where the capacity is one figure
            "capacity_range": report.get("capacity_range")}


def metrics_json(source: str, report: dict) -> dict:
    """`kvcalc validate --metrics --json` (schema kvcalc.validate-metrics/1)."""
    return {"schema": "kvcalc.validate-metrics/1", "source": source, **report,
            "verdict": _verdict(report["comparison"], report["mismatches"])}
