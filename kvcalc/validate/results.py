"""Result rows: JSON Lines written as they arrive, and the environment facts every row carries.

A row is one case (one engine configuration) with: status ('ok' | 'oom' | 'error' | 'timeout' | 'skipped'), the
settings, the observed values, kvcalc's prediction and the signed relative errors. Rows are appended whole and fsynced
one at a time, so a crash or kill at any moment never loses an earlier row nor leaves the file unreadable.
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
    """Append rows to a JSON Lines file so that a kill at any moment leaves it valid: each row is one os.write of a
    whole line (O_APPEND), flushed to disk (fsync) before write() returns; a torn last line left by an earlier kill
    is cut off before each new row (its case has no row and runs again or is recorded as failed)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair()

    def repair(self) -> None:
        """Cut a last line that has no newline (a writer killed mid-line) so the next row starts on its own line."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0:
            return
        with open(self.path, "rb+") as fh:
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            keep = 0
            pos = size
            while pos > 0:  # find the last newline, reading backwards in blocks
                step = min(65536, pos)
                pos -= step
                fh.seek(pos)
                block = fh.read(step)
                i = block.rfind(b"\n")
                if i >= 0:
                    keep = pos + i + 1
                    break
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())

    def write(self, row: dict[str, Any]) -> None:
        data = (json.dumps(_jsonable(row), sort_keys=False) + "\n").encode("utf-8")
        self.repair()  # a writer killed earlier (another process) may have left a torn line
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            try:
                os.fsync(fd)
            except OSError:
                pass
        finally:
            os.close(fd)

    def __call__(self, row: dict[str, Any]) -> None:
        self.write(row)


EXIT_CASE_TIMEOUT = 77  # a child ended itself because a case ran past its timeout (its row is written)


class CaseWatchdog:
    """Per-case timeout inside a runner's child process. arm(row) before a case; finish(row) writes the case's row and
    disarms. If the case runs past timeout_s, a thread writes the armed row with status 'timeout' and ends the
    process with EXIT_CASE_TIMEOUT: a hang in C code (CUDA, NCCL, a deadlocked kernel) cannot be interrupted any other
    way, and the parent starts a fresh child for the cases left. One lock orders the two writers, so a case gets
    exactly one row."""

    def __init__(self, writer: JsonlWriter, timeout_s: float | None, poll_s: float = 0.2):
        import threading

        self.writer, self.timeout_s, self.poll_s = writer, timeout_s, poll_s
        self._lock = threading.Lock()
        self._row: dict[str, Any] | None = None
        self._deadline = 0.0
        self._thread = None
        if timeout_s:
            self._thread = threading.Thread(target=self._watch, name="case-watchdog", daemon=True)
            self._thread.start()

    def arm(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._row = dict(row)
            self._deadline = time.monotonic() + float(self.timeout_s or 0)

    def disarm(self) -> None:
        with self._lock:
            self._row = None

    def finish(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._row = None
            self.writer.write(row)

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_s)
            with self._lock:
                if self._row is None or time.monotonic() < self._deadline:
                    continue
                row = dict(self._row, status="timeout", time=now_iso(),
                           message=f"no result after {self.timeout_s:.0f} s (per-case timeout): the case hung; its "
                                   "process was ended and the remaining cases run in a fresh one")
                self.writer.write(row)
                print(f"[watchdog] {row.get('case_id')}: timeout after {self.timeout_s:.0f} s", flush=True)
                os._exit(EXIT_CASE_TIMEOUT)


def done_case_ids(path: str | os.PathLike, ids: Iterable[str] | None = None) -> set[str]:
    """Case ids that already have a row in a results file (--resume): every status but 'skipped' (a case the time
    budget did not reach runs on resume). A missing file has none."""
    wanted = set(ids) if ids is not None else None
    if not Path(path).exists():
        return set()
    out = set()
    for r in iter_jsonl(path):
        cid = r.get("case_id") if isinstance(r, dict) else None
        if cid is not None and r.get("status") != "skipped" and (wanted is None or cid in wanted):
            out.add(cid)
    return out


def append_jsonl(path: str | os.PathLike, row: dict[str, Any]) -> None:
    JsonlWriter(path).write(row)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a truncated last line (a process killed mid-write) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except (ValueError, RecursionError):
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


def load_case_runner(spec: str):
    """The function a runner's child calls per case instead of the real engine: 'package.module:function' or
    '/path/to/file.py:function'. Used by the tests to run the real child-process machinery on a CPU with an engine
    stand-in that really crashes, hangs or runs out of memory."""
    import importlib
    import importlib.util

    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise ValueError(f"case runner {spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    if target.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location(Path(target).stem, target)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"case runner {spec!r}: cannot load {target}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, name)


def end_process_group(proc: subprocess.Popen) -> None:
    """Kill what is left of a runner child's session (started with start_new_session=True): the child itself after
    a timeout, and any worker it spawned (vLLM's tensor-parallel workers) that would otherwise keep GPU memory from
    the next case. Safe after the child has exited."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
