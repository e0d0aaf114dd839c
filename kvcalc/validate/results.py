"""Result rows: JSON Lines written as they arrive, and the environment facts every row carries.

A row is one case (one engine configuration) with: status ('ok' | 'oom' | 'error' | 'skipped'), the settings, the
observed values, kvcalc's prediction and the signed relative errors. Rows are appended and flushed one at a time so a
crash in a later case never loses an earlier one.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import UsageError

# Packages whose versions decide what the engines do (reported when installed).
VERSION_PACKAGES = ("torch", "transformers", "vllm", "hqq", "optimum-quanto", "bitsandbytes", "gguf", "accelerate",
                    "flashinfer-python", "triton")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    # numpy / torch scalars and anything else: try a number, then text
    for cast in (int, float):
        try:
            number = cast(value)
            if number == value:
                return number
        except (TypeError, ValueError):
            pass
    return str(value)


class JsonlWriter:
    """Append rows to a JSON Lines file; every row is flushed and fsynced before write() returns."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, row: dict[str, Any]) -> None:
        line = json.dumps(_jsonable(row), sort_keys=False)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            try:
                os.fsync(fh.fileno())
            except OSError:
                pass

    def __call__(self, row: dict[str, Any]) -> None:
        self.write(row)


def append_jsonl(path: str | os.PathLike, row: dict[str, Any]) -> None:
    JsonlWriter(path).write(row)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a truncated last line (a process killed mid-write) is skipped."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


MAX_RESULTS_BYTES = 256 * 2**20


class ResultsError(UsageError):
    """A results file kvcalc cannot read as rows: not UTF-8, a line that is not a JSON object, a row of the wrong
    shape. One line naming the line number."""


def _check_row(row: Any, lineno: int) -> None:
    if not isinstance(row, dict):
        raise ResultsError(f"line {lineno}: not a JSON object but {type(row).__name__}")
    for key in ("status", "engine", "case_id"):
        if key in row and row[key] is not None and not isinstance(row[key], str):
            raise ResultsError(f"line {lineno}: {key!r} is not text")
    for key in ("settings", "observed"):
        if key in row and row[key] is not None and not isinstance(row[key], dict):
            raise ResultsError(f"line {lineno}: {key!r} is not an object")
    comparison = row.get("comparison")
    if comparison is None:
        return
    if not isinstance(comparison, list):
        raise ResultsError(f"line {lineno}: 'comparison' is not a list")
    for item in comparison:
        if not isinstance(item, dict) or not isinstance(item.get("quantity"), str):
            raise ResultsError(f"line {lineno}: a comparison entry has no 'quantity'")
        if not isinstance(item.get("unit", ""), str):
            raise ResultsError(f"line {lineno}: {item['quantity']!r} has a unit that is not text")
        for key in ("predicted", "observed", "error"):
            value = item.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ResultsError(f"line {lineno}: {item['quantity']!r} {key} is not a finite number")


def read_results(path: str | os.PathLike, max_bytes: int = MAX_RESULTS_BYTES) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, warnings) of a results JSONL file, checked: a truncated last line (a run killed mid-write) is skipped
    with a warning; anything else that is not a row is a ResultsError naming the line."""
    try:
        size = os.stat(path).st_size
        if size > max_bytes:
            raise ResultsError(f"{path}: larger than {max_bytes // 2**20} MiB")
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ResultsError(f"cannot read results {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise ResultsError(f"{path}: larger than {max_bytes // 2**20} MiB")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ResultsError(f"{path}: binary data (a NUL byte at offset {nul}), not JSON Lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    lines = text.split("\n")
    rows, warnings = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        lineno = i + 1
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if i == len(lines) - 1:  # no newline after it: the writer was killed mid-line
                warnings.append(f"{path}: line {lineno} is a truncated last row (a run stopped mid-write); skipped")
                continue
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise ResultsError(f"{path}: line {lineno} is not JSON ({message})") from None
        try:
            _check_row(row, lineno)
        except ResultsError as exc:
            raise ResultsError(f"{path}: {exc}") from None
        rows.append(row)
    if not rows:
        raise ResultsError(f"{path}: no result rows (a JSON object per line)")
    return rows, warnings


def package_versions(names: Iterable[str] = VERSION_PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def nvidia_smi() -> dict[str, Any]:
    """Driver version, GPU name and memory as nvidia-smi reports them ({} when there is no nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    if not out:
        return {}
    parts = [p.strip() for p in out[0].split(",")]
    info: dict[str, Any] = {"name": parts[0] if parts else None}
    if len(parts) >= 4:
        info["driver"] = parts[1]
        try:
            info["memory_total_mib"] = int(parts[2])
            info["memory_used_mib"] = int(parts[3])
        except ValueError:
            pass
    return info


def torch_device_facts(device: str = "cuda") -> dict[str, Any]:
    """GPU name, total memory (cudaMemGetInfo), capability, CUDA runtime and driver; CPU facts on 'cpu'.
    Imports torch: call only from a runner."""
    import torch

    facts: dict[str, Any] = {"device": device, "python": platform.python_version(), "host": platform.node()}
    if device.startswith("cuda") and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu_name=torch.cuda.get_device_name(0),
            memory_total_bytes=int(total),
            memory_free_bytes_at_start=int(free),
            compute_capability=float(f"{props.major}.{props.minor}"),
            cuda_runtime=torch.version.cuda,
        )
        smi = nvidia_smi()
        if smi.get("driver"):
            facts["driver"] = smi["driver"]
        if smi:
            facts["nvidia_smi"] = smi
    else:
        facts.update(gpu_name=None, cpu=platform.processor() or platform.machine(), cpu_count=os.cpu_count())
        try:
            facts["memory_total_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            facts["memory_total_bytes"] = None
        facts["torch_threads"] = torch.get_num_threads()
    return facts


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def classify_failure(exc: BaseException | str) -> str:
    """'oom' when the engine ran out of memory (or refused a configuration that does not fit), else 'error'."""
    text = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)
    low = text.lower()
    needles = ("out of memory", "outofmemoryerror", "cuda error: out of memory", "kv cache is needed",
               "no available memory for the cache blocks", "is less than desired gpu memory utilization",
               "insufficient memory", "cannot allocate memory")
    return "oom" if any(n in low for n in needles) else "error"


def error_message(exc: BaseException, limit: int = 2000) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pct(error: float | None) -> str:
    """A signed relative error as the runners echo it: '+1.23%', or '-' when there is none."""
    return "-" if error is None else f"{error * 100:+.2f}%"


def release_gpu(teardown: Iterable[Any] = ()) -> None:
    """After the last reference to a model or engine is dropped: collect its cycles, run the engine's own teardown
    callables (each may fail without losing the row: a failed cleanup must not cost the measurement), collect again
    and return torch's cached blocks to the driver. Imports torch only if it is already loaded or installed."""
    import gc

    gc.collect()
    for fn in teardown:
        try:
            fn()
        except Exception:  # noqa: BLE001
            pass
    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
