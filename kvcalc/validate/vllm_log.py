"""Parse a vLLM start-up log (any 0.2x version, V0 or V1 engine) into bytes, and compare it with kvcalc.

Every pattern is written against the format string in vLLM's own source; the cited lines are vLLM 0.26.0 unless an
older version is named. format_gib() prints round(bytes / 2**30, 2) (vllm/utils/mem_utils.py), so every GiB value
read from a log is exact only to +-0.005 GiB (+-5.4 MB).

Lines may carry ANSI colours, a process prefix such as "(EngineCore_DP0 pid=123) " and the logger prefix
"INFO 11-29 12:00:00 [gpu_worker.py:123] " (older: "INFO 03-14 09:12:41 gpu_worker.py:123] "); multi-line messages
repeat the prefix on every line (vllm/logging_utils/formatter.py NewLineFormatter). All of that is stripped first.

Hard edges (a log is untrusted input):
- read_log() streams at most MAX_LOG_BYTES and refuses binary or non-UTF-8 files with one line;
- each line is clipped to MAX_LINE_CHARS before any regex sees it;
- every pattern is a table row (PATTERNS) with a literal needle tested with `in` first, and regexes without nested
  quantifiers, so the work per line is linear in its length;
- every number a pattern captures is checked (empty, malformed like 135..43, absurdly long, NaN): a bad one is a
  LogError naming the line; settings from "non-default args" and the engine-config dump are type-checked, and a bad
  one is ignored with a warning that says so;
- a file holding several engine starts is split into runs; the last one is read unless another is asked for.
"""

from __future__ import annotations

import ast
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..units import GiB, MiB

MAX_LOG_BYTES = 64 * MiB  # start-up logs are KiB to a few MiB; a serving log of days is not what this reads
MAX_LINE_CHARS = 64 * 1024  # the longest real start-up line (the engine-config dump) is ~4 KiB
MAX_NUMBER_CHARS = 40


class LogError(UsageError):
    """A log kvcalc cannot read as data: too big, binary, not UTF-8, or a number that is not a number."""


def read_log(path: str | os.PathLike, max_bytes: int = MAX_LOG_BYTES) -> str:
    """The text of a log file, read in chunks up to max_bytes; one-line LogError when it is not a UTF-8 text log."""
    chunks, size = [], 0
    try:
        with open(path, "rb") as fh:
            while True:
                chunk = fh.read(MiB)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    cap = f"{max_bytes // MiB} MiB" if max_bytes % MiB == 0 else f"{max_bytes:,} bytes"
                    raise LogError(f"{path}: larger than {cap}; give the start-up part only "
                                   f"(e.g. head -c {max_bytes} FILE)")
                chunks.append(chunk)
    except OSError as exc:
        raise LogError(f"cannot read log {str(path)!r}: {exc.strerror or exc}") from None
    data = b"".join(chunks)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise LogError(f"{path}: binary data (a NUL byte at offset {nul}), not a text log")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None


# --------------------------------------------------------------------------------------------------------------------
# Lines: prefixes off, bounded length
# --------------------------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
# "(EngineCore_DP0 pid=123) ", "(VllmWorker rank=1 pid=77) ", "(APIServer pid=1) ": one bounded group, applied a
# few times at most (the old form nested quantifiers over overlapping classes and backtracked exponentially)
_PROC_PREFIX = re.compile(r"\([A-Za-z_][^()\n]{0,200}\)\s{0,8}")
_LEVEL_PREFIX = re.compile(
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s{1,8}\d\d-\d\d\s{1,8}\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\s{1,8}"
    r"(?:\[?[\w./\-]{1,300}\.py:\d{1,9}\]\s?)?"
)


def _clean_line(raw: str) -> str:
    line = raw[:MAX_LINE_CHARS]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = line.lstrip()
    for _ in range(4):
        m = _PROC_PREFIX.match(line)
        if not m:
            break
        line = line[m.end():]
    m = _LEVEL_PREFIX.match(line)
    if m:
        line = line[m.end():]
    return line.rstrip()


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


# Terminal capture: a terminal of ~140 columns splits a long message mid-word onto lines that carry no prefix
# ("... Model loading took 7.1217 GiB" / "and 198.94 seconds", "... Available KV cache me" / "mory: 11.03 GiB").
_WRAP_MIN_CHARS = 80  # a wrapped line is long; short un-prefixed lines after it are something else
_WRAP_MAX_JOINS = 64  # the engine-config dump wraps onto ~12 lines at 140 columns
_NEW_MESSAGE = re.compile(r"\s{0,8}(?:Traceback|File \"|[A-Z]\w{0,60}(?:Error|Exception|Warning)\b|#|\[rank|\*|-{3}|={3}|\$ )")


def _has_prefix(line: str) -> bool:
    line = line.lstrip()
    return bool(_PROC_PREFIX.match(line) or _LEVEL_PREFIX.match(line))


def _logical_lines(text: str) -> tuple[list[str], dict[int, str], dict[int, str]]:
    """Cleaned lines, with terminal-wrapped continuations joined onto the log line they belong to (the continuation's
    own index becomes ""), so line numbers stay the file's. A wrap may have eaten a space ("GiB" / "and"): spaced[i]
    is the same joined line with a space at each join, tried when the direct join matches no pattern; files[i] is the
    engine ("v0"/"v1") that line i's prefix names (_engine_sign).
    A continuation: no log prefix, not empty, not a new message (traceback, error, '#'), after a prefixed line of at
    least _WRAP_MIN_CHARS characters (or after its previous continuation)."""
    raws = _lines(text)
    lines: list[str] = []
    spaced: dict[int, str] = {}
    files: dict[int, str] = {}  # line -> "v0" / "v1": the engine its prefix names
    head: int | None = None
    joins = 0
    for i, raw in enumerate(raws):
        raw = raw[:MAX_LINE_CHARS]
        plain = _ANSI.sub("", raw) if "\x1b" in raw else raw
        if (head is not None and joins < _WRAP_MAX_JOINS and plain.strip() and not _has_prefix(plain)
                and not _NEW_MESSAGE.match(plain)):
            tail = plain.rstrip()
            lines[head] = (lines[head] + tail)[:MAX_LINE_CHARS]
            sep = "" if tail[:1].isspace() else " "
            spaced[head] = (spaced.get(head, lines[head][:len(lines[head]) - len(tail)]) + sep + tail)[:MAX_LINE_CHARS]
            lines.append("")
            joins += 1
            continue
        lines.append(_clean_line(raw))
        sign = _engine_sign(plain[:400])
        if sign:
            files[i] = sign
        head, joins = (i, 0) if (len(plain.rstrip()) >= _WRAP_MIN_CHARS and _has_prefix(plain)) else (None, 0)
    return lines, spaced, files


# Which engine logged a line, from its prefix: V1's engine-core process and v1/worker files, V0's worker processes
# and worker/executor files. model_runner.py alone says nothing (V0's worker/model_runner.py, and V1's V2 runner
# v1/worker/gpu/model_runner.py from 0.2x).
_V1_SIGNS = ("(EngineCore", "gpu_worker.py:", "gpu_model_runner.py:", "kv_cache_utils.py:", "core.py:")
_V0_SIGNS = ("(VllmWorkerProcess", " worker.py:", "[worker.py:", "executor_base.py:", "distributed_gpu_executor.py:",
             "llm_engine.py:", "cache_engine.py:",
             # V0-only messages: worker.py raise_if_cache_size_invalid, 0.4-0.7 model_runner.py load_model
             "maximum number of tokens that can be stored in KV cache (", "Loading model weights took ")


def _engine_sign(head: str) -> str | None:
    if any(sign in head for sign in _V1_SIGNS):
        return "v1"
    if any(sign in head for sign in _V0_SIGNS):
        return "v0"
    return None


def clean_log(text: str) -> str:
    """The log's messages only: ANSI codes, process prefixes and logger prefixes removed, one message line per line."""
    return "\n".join(_clean_line(raw) for raw in _lines(text))


# --------------------------------------------------------------------------------------------------------------------
# Numbers: every capture checked
# --------------------------------------------------------------------------------------------------------------------

_FLOAT = re.compile(r"[+-]?\d{1,20}(?:\.\d{1,20})?")
_INT = re.compile(r"\d{1,18}|\d{1,3}(?:,\d{3}){1,5}")


def gib_to_bytes(value: float | str) -> int:
    return int(round(float(value) * GiB))


def _bad(lineno: int, line: str, what: str, value: str) -> LogError:
    shown = value if len(value) <= MAX_NUMBER_CHARS else value[:MAX_NUMBER_CHARS] + f"... ({len(value)} chars)"
    return LogError(f"line {lineno}: {what} {shown!r} is not a valid number: {line[:160]}")


def _to_float(value: str, lineno: int, line: str, what: str) -> float:
    text = value.strip()
    if not text or len(text) > MAX_NUMBER_CHARS or not _FLOAT.fullmatch(text):
        raise _bad(lineno, line, what, value)
    number = float(text)
    if not math.isfinite(number):
        raise _bad(lineno, line, what, value)
    return number


def _to_int(value: str, lineno: int, line: str, what: str) -> int:
    text = value.strip().rstrip(".;:")
    if not text or len(text) > MAX_NUMBER_CHARS or not _INT.fullmatch(text):
        raise _bad(lineno, line, what, value)
    return int(text.replace(",", ""))


# Figures vLLM computes as differences of memory readings, which it prints negative when the budget is overdrawn
# (gpu_worker.py: "Available KV cache memory: -1.23 GiB", then "No available memory for the cache blocks") or when
# memory was freed meanwhile (non-torch, CUDA-graph capture). Every other figure (sizes, times, counts) is unsigned.
SIGNED_VALUES = frozenset({"available_kv_bytes", "non_torch_bytes", "graph_capture_bytes", "cudagraph_estimate_bytes",
                           "cudagraph_pool_actual_bytes"})


def _cast(kind: str, value: str, lineno: int, line: str, what: str) -> Any:
    if kind in ("gib", "float") and value.strip().startswith("-") and what not in SIGNED_VALUES:
        raise LogError(f"line {lineno}: {what} {value[:MAX_NUMBER_CHARS]!r} is negative, which vLLM never prints "
                       f"there: {line[:160]}")
    if kind == "gib":
        number = _to_float(value, lineno, line, what)
        if abs(number) > 1e6:  # a million GiB: no GPU of this decade
            raise _bad(lineno, line, what, value)
        return gib_to_bytes(number)
    if kind == "int":
        return _to_int(value, lineno, line, what)
    if kind == "util":
        number = _to_float(value, lineno, line, what)
        if not 0 < number <= 1:
            raise LogError(f"line {lineno}: {what} {value!r} is not a fraction in (0, 1]: {line[:160]}")
        return number
    return _to_float(value, lineno, line, what)  # "float"


# --------------------------------------------------------------------------------------------------------------------
# The table: one row per message vLLM prints
# --------------------------------------------------------------------------------------------------------------------

_V = r"(\S*?)"  # a number, checked by _cast (lazy, up to the literal that follows)
_W = r"([-+.,0-9]\S*)"  # a number ending a phrase (trailing '.' allowed); a word there is another message


@dataclass(frozen=True)
class Pattern:
    """One log message: `needle` must be in the line (cheap test first), then `regex` is searched; each group i
    becomes fields[i] = (where, key, kind): where 'values' (first wins) or 'settings' (setdefault), kind gib | int |
    float | util. The first line matching the row is used; rows earlier in the table win for the same key."""
    needle: str
    regex: str
    fields: tuple[tuple[str, str, str], ...]
    source: str

    @property
    def compiled(self) -> re.Pattern:
        return _COMPILED[self.regex]


PATTERNS: tuple[Pattern, ...] = (
    Pattern("Using max model len ", rf"Using max model len {_W}", (("settings", "max_model_len", "int"),),
            "config/model.py:1788 'Using max model len %s'"),
    Pattern("Setting max_num_batched_tokens to ", rf"Setting max_num_batched_tokens to {_V} for",
            (("values", "max_num_batched_tokens", "int"),),
            "engine/arg_utils.py _set_default_args (0.7-0.10): the usage-context default"),
    Pattern("Chunked prefill is enabled with max_num_batched_tokens=",
            rf"max_num_batched_tokens={_W}", (("values", "max_num_batched_tokens", "int"),),
            "config/scheduler.py:253 (the resolved value: an observation, not a setting)"),
    Pattern("Model loading took ", rf"Model loading took {_V} ?GiB(?: memory)? and {_V} ?s(?:econds)?",
            (("values", "weights_bytes", "gib"), ("values", "load_seconds", "float")),
            "gpu_model_runner.py:5348 (0.26); gpu/model_runner.py:306 and 0.7-0.11 '... %.4f GiB and %.6f seconds'"),
    Pattern("Loading model weights took ", rf"Loading model weights took {_V} ?GB",
            (("values", "weights_bytes", "gib"),), "0.4-0.5 V0 '... took %.4f GB' (bytes / 2**30)"),
    Pattern("x gpu_memory_utilization (",
            rf"total_gpu_memory \({_V} ?GiB\) x gpu_memory_utilization \({_V}\) = {_V} ?GiB",
            (("values", "total_memory_bytes", "gib"), ("settings", "gpu_memory_utilization", "util"),
             ("values", "requested_memory_bytes", "gib")),
            "V0 worker.py (0.6-0.8) and early V1 gpu_worker.py, line 2 of the profiling message"),
    Pattern("model weights take ",
            rf"model weights take {_V} ?GiB; non_torch_memory takes {_V} ?GiB; PyTorch activation peak memory takes "
            rf"{_V} ?GiB; the rest of the memory reserved for KV Cache is {_V} ?GiB",
            (("values", "weights_profiled_bytes", "gib"), ("values", "non_torch_bytes", "gib"),
             ("values", "activation_bytes", "gib"), ("values", "available_kv_bytes", "gib")),
            "line 3 of the same message"),
    Pattern("Memory profiling takes ", rf"Memory profiling takes {_V} seconds",
            (("values", "profile_seconds", "float"),), "utils/mem_utils.py MemoryProfilingResult.__repr__"),
    Pattern("Total non KV cache memory: ",
            rf"Total non KV cache memory: {_V} ?GiB; torch peak memory increase: {_V} ?GiB; non-torch forward "
            rf"increase memory: {_V} ?GiB; weights memory: {_V} ?GiB",
            (("values", "non_kv_bytes", "gib"), ("values", "activation_bytes", "gib"),
             ("values", "non_torch_bytes", "gib"), ("values", "weights_profiled_bytes", "gib")),
            "utils/mem_utils.py MemoryProfilingResult.__repr__ (0.9-0.26, DEBUG)"),
    Pattern("Initial free memory",
            rf"Initial free memory:? {_V} ?GiB; Requested memory: {_V} \(util\), {_V} ?GiB",
            (("values", "initial_free_bytes", "gib"), ("settings", "gpu_memory_utilization", "util"),
             ("values", "requested_memory_bytes", "gib")), "gpu_worker.py:551 (DEBUG)"),
    Pattern("Free memory after profiling: ",
            rf"Free memory after profiling: {_V} ?GiB \(total\), {_V} ?GiB \(within requested\)",
            (("values", "free_after_profiling_bytes", "gib"), ("values", "free_within_requested_bytes", "gib")),
            "gpu_worker.py:556 (DEBUG)"),
    Pattern("Available KV cache memory: ", rf"Available KV cache memory: {_V} ?GiB",
            (("values", "available_kv_bytes", "gib"),), "gpu_worker.py:561 (0.7+: '%.2f GiB')"),
    Pattern("GPU KV cache size: ", rf"GPU KV cache size: {_V} tokens", (("values", "kv_cache_tokens", "int"),),
            "kv_cache_utils.py:2177 (thousands separators)"),
    Pattern(" blocks: ", rf"(?:^|# )(?:GPU|cuda|CUDA|gpu) blocks: {_V}(?:,|$)", (("values", "num_gpu_blocks", "int"),),
            "V0 (0.4-0.10) executor '# GPU blocks: %d, # CPU blocks: %d' (posts often lose the '# ')"),
    Pattern("cache_config_info with initialization after num_gpu_blocks is",
            rf"cache_config_info with initialization after num_gpu_blocks is:? {_W}",
            (("values", "num_gpu_blocks", "int"),),
            "v1/metrics/loggers.py (API server, V1): '... after num_gpu_blocks is: %d' (a wrapped line is not read)"),
    Pattern("Maximum concurrency for ", rf"Maximum concurrency for {_V} tokens per request: {_V}x",
            (("values", "concurrency_max_model_len", "int"), ("values", "max_concurrency", "float")),
            "kv_cache_utils.py:2179"),
    Pattern("Graph capturing finished in ", rf"Graph capturing finished in {_V} secs?, took {_V} ?GiB",
            (("values", "graph_capture_seconds", "float"), ("values", "graph_capture_bytes", "gib")),
            "gpu_model_runner.py:6845"),
    Pattern("Estimated CUDA graph memory: ", rf"Estimated CUDA graph memory: {_V} ?GiB total",
            (("values", "cudagraph_estimate_bytes", "gib"),), "gpu_model_runner.py:6738"),
    Pattern("CUDA graph pool memory: ", rf"CUDA graph pool memory: {_V} ?GiB \(actual\), {_V} ?GiB \(estimated\)",
            (("values", "cudagraph_pool_actual_bytes", "gib"), ("values", "cudagraph_pool_estimated_bytes", "gib")),
            "gpu_worker.py:795"),
    Pattern(" is equivalent to --gpu-memory-utilization=",
            rf"--gpu-memory-utilization={_V} is equivalent to --gpu-memory-utilization={_V}(?:\s|$)",
            (("settings", "gpu_memory_utilization", "util"),
             ("values", "equivalent_util_without_cudagraph_profiling", "util")), "gpu_worker.py:575"),
    Pattern("Free memory on device (",
            rf"Free memory on device \({_V}/{_V} ?GiB\) on startup\. Desired GPU memory utilization is "
            rf"\({_V}, {_V} ?GiB\)",
            (("values", "initial_free_bytes", "gib"), ("values", "total_memory_bytes", "gib"),
             ("settings", "gpu_memory_utilization", "util"), ("values", "requested_memory_bytes", "gib")),
            "gpu_worker.py:835-855, the start-up summary (0.10+)"),
    Pattern("Actual usage is ",
            rf"Actual usage is {_V} ?GiB for weight, {_V} ?GiB for peak activation, {_V} ?GiB for non-torch memory, "
            rf"and {_V} ?GiB for CUDAGraph memory",
            (("values", "weights_bytes", "gib"), ("values", "activation_bytes", "gib"),
             ("values", "non_torch_bytes", "gib"), ("values", "graph_capture_bytes", "gib")), "the same summary"),
    Pattern("for consumed memory (weights + non-torch)",
            rf"Actual usage is {_V} ?GiB for consumed memory \(weights \+ non-torch\), {_V} ?GiB for peak "
            rf"activation, and {_V} ?GiB for CUDAGraph memory",
            (("values", "consumed_bytes", "gib"), ("values", "activation_bytes", "gib"),
             ("values", "graph_capture_bytes", "gib")),
            "the same summary, newest wording (gpu_worker.py:876 in the 48 GB sm89 log of the public corpus)"),
    Pattern(" to fit into requested memory",
            r"--kv-cache-memory=(\S*?)`?(?: \([^()]{0,40}\))? to fit into requested memory",
            (("values", "kv_cache_memory_to_requested_bytes", "int"),), "the same summary"),
    Pattern(" to fully utilize gpu memory",
            r"--kv-cache-memory=(\S*?)`?(?: \([^()]{0,40}\))? to fully utilize gpu memory",
            (("values", "kv_cache_memory_to_gpu_bytes", "int"),), "the same summary"),
    Pattern("Current kv cache memory in use is ", rf"Current kv cache memory in use is {_V} ?GiB",
            (("values", "kv_cache_in_use_bytes", "gib"),), "the same summary (0.12+)"),
    Pattern("Current kv cache memory in use is ", rf"Current kv cache memory in use is {_V} bytes",
            (("values", "kv_cache_in_use_bytes", "int"),), "the same summary (0.10-0.11: '%d bytes')"),
    Pattern("init engine (profile, create kv cache, warmup model) took ",
            rf"init engine \(profile, create kv cache, warmup model\) took {_V} seconds",
            (("values", "init_engine_seconds", "float"),), "core.py (0.7+)"),
    # torch.compile's time at this start (compilation/monitor.py end_monitoring_torch_compile: from the first call's
    # start to the compiled or loaded function, AOT load included), as monitor.py and core.py's summary print it
    Pattern("torch.compile took ", rf"torch\.compile took {_V} s in total", (("values", "compile_seconds", "float"),),
            "compilation/monitor.py:53 (0.29-0.30) 'torch.compile took %.2f s in total'"),
    Pattern("(compilation: ", rf"warmup model\) took {_V} s \(compilation: {_V} s\)",
            (("values", "init_engine_seconds", "float"), ("values", "compile_seconds", "float")),
            "core.py (0.27+) 'init engine ... took %.2f s (compilation: %.2f s)'"),
    Pattern("the estimated maximum model length is ", rf"the estimated maximum model length is {_W}",
            (("values", "estimated_max_model_len", "int"),), "kv_cache_utils.py check_enough_kv_cache_memory"),
    Pattern("maximum number of tokens that can be stored in KV cache (",
            r"max seq len \((\d{1,12})\) is larger than the maximum number of tokens that can be stored in KV cache "
            r"\((\d{1,12})\)",
            (("settings", "max_model_len", "int"), ("values", "kv_tokens_in_error", "int")),
            "V0 worker/worker.py raise_if_cache_size_invalid (0.4-0.10): the start-up error names the KV tokens"),
    # vLLM 0.6.3-0.6.4 V0 worker.py: one line of key=value pairs ("duration=..., " and commas from 0.6.4)
    Pattern("total_gpu_memory=", r"total_gpu_memory=([0-9.]{1,20}?) ?GiB",
            (("values", "total_memory_bytes", "gib"),), "0.6.3-0.6.4 worker.py 'Memory profiling results: ...'"),
    Pattern("non_torch_memory=", r"non_torch_memory=([0-9.]{1,20}?) ?GiB",
            (("values", "non_torch_bytes", "gib"),), "the same line"),
    Pattern("kv_cache_size=", r"kv_cache_size=([0-9.]{1,20}?) ?GiB",
            (("values", "available_kv_bytes", "gib"),), "the same line"),
    Pattern("gpu_memory_utilization=", r"GiB,? gpu_memory_utilization=(\d{1,3}(?:\.\d{1,10})?)",
            (("settings", "gpu_memory_utilization", "util"),), "the same line"),
    # vLLM 0.6.5-0.6.6 V0 worker.py: "Memory profiling results:" then one "name   value" line each
    Pattern("total_gpu_memory", r"^total_gpu_memory\s{1,40}([0-9.]{1,20}) ?GiB$",
            (("values", "total_memory_bytes", "gib"),), "0.6.5 worker.py multi-line profiling table"),
    Pattern("gpu_memory_utilization", r"^gpu_memory_utilization\s{1,40}([0-9.]{1,20})$",
            (("settings", "gpu_memory_utilization", "util"),), "the same table"),
    Pattern("the current vLLM instance can use", r"^the current vLLM instance can use\s{1,40}([0-9.]{1,20}) ?GiB$",
            (("values", "requested_memory_bytes", "gib"),), "the same table"),
    Pattern("model weights take", r"^model weights take\s{1,40}([0-9.]{1,20}) ?GiB$",
            (("values", "weights_profiled_bytes", "gib"),), "the same table"),
    Pattern("non_torch_memory", r"^non_torch_memory\s{1,40}([0-9.]{1,20}) ?GiB$",
            (("values", "non_torch_bytes", "gib"),), "the same table"),
    Pattern("PyTorch activation peak memory", r"^PyTorch activation peak memory\s{1,40}([0-9.]{1,20}) ?GiB$",
            (("values", "activation_bytes", "gib"),), "the same table"),
    Pattern("available_kv_cache_memory", r"^available_kv_cache_memory\s{1,40}([0-9.]{1,20}) ?GiB$",
            (("values", "available_kv_bytes", "gib"),), "the same table"),
)
_COMPILED = {p.regex: re.compile(p.regex) for p in PATTERNS}

# Text settings (no number to check): (needle, regex, settings key, cast)
_TEXT_SETTINGS = (
    ("attention backend", re.compile(r"Using (\w{1,64}) attention backend"), "attention_backend", str),
    ("Using FlashAttention version ", re.compile(r"Using FlashAttention version (\d{1,3})\b"),
     "flash_attention_version", int),
    ("Profiling CUDA graph memory: ", re.compile(r"Profiling CUDA graph memory: (.{1,500})"), "cudagraph_groups",
     str),
    ("Resolved architecture: ", re.compile(r"Resolved architecture: (\w{1,100})"), "architecture", str),
    # Which engine ran: V0's worker/model_runner.py and executor vs V1's v1/worker/gpu_*.py (0.8-0.10 ran either,
    # by VLLM_USE_V1). "Initializing a V0/V1 LLM engine" (0.8+) says it outright.
    # torch.compile's cache state at this start (engines/vllm.py VllmSettings.compile_cache): the first of these
    # lines wins. Warm: compilation/decorators.py "Directly load AOT compilation from path %s" (the stored AOT
    # artifact; decorators.py:313 at 0.30.0) or backends.py "Directly load the compiled graph(s) for compile range
    # %s from the cache" (vLLM's Inductor cache: no Inductor compile). Cold: backends.py "Compiling a graph for
    # compile range %s takes %.2f s" and decorators.py "saved AOT compiled function to %s".
    ("Directly load AOT compilation from path", re.compile(r"(Directly load) AOT compilation"), "compile_cache",
     lambda _: "warm"),
    ("from the cache, took", re.compile(r"Directly load the compiled graph\(s\) for compile range .{1,40}? (from the "
                                        r"cache)"), "compile_cache", lambda _: "warm"),
    ("Compiling a graph for compile range", re.compile(r"(Compiling a graph) for compile range"), "compile_cache",
     lambda _: "cold"),
    ("saved AOT compiled function to", re.compile(r"(saved AOT compiled function) to"), "compile_cache",
     lambda _: "cold"),
    ("LLM engine (v", re.compile(r"Initializing an? (V[01]) LLM engine"), "engine", str.lower),
    (" blocks: ", re.compile(r"(?:^|# )(?:GPU|cuda|CUDA|gpu) blocks: \d{1,12}(, # CPU) blocks"), "engine",
     lambda _: "v0"),
    # entrypoints/openai/api_server.py: only `vllm serve` (the OpenAI server) prints its version this way
    ("vLLM API server version", re.compile(r"vLLM (API server) version"), "entrypoint", lambda _: "serve"),
    # engine/arg_utils.py _set_default_args (0.7-0.10): "Setting max_num_batched_tokens to %d for %s usage context."
    (" usage context", re.compile(r"for (\w{1,40}) usage context"), "entrypoint",
     lambda ctx: {"OPENAI_API_SERVER": "serve", "LLM_CLASS": "llm"}.get(ctx, ctx.lower())),
)

# Start-up failures worth recording: (needle, keep the line from the needle on (True) or the whole line (False))
_FAILURES = (
    ("on startup is less than desired GPU memory utilization", False),
    ("No available memory for the cache blocks", True),
    ("To serve at least one request with the model", True),
    ("KV cache is needed, which is larger than the available KV cache memory", False),
    ("CUDA out of memory", False),
    ("OutOfMemoryError", False),
)
# Lines printed once per rank (TP/PP logs): how many ranks reported each; the first one's value is kept.
_REPEATED = (("weights_bytes", "Model loading took "), ("available_kv_bytes", "Available KV cache memory: "),
             ("graph_capture_bytes", "Graph capturing finished in "))

# Where an engine start begins: (needle, kind). A new run starts at one of these once the current run has logged
# memory figures (several engine starts appended to one file, or two logs concatenated).
_VERSION_RES = (
    # v1/engine/core.py:117 "Initializing a V1 LLM engine (v%s) with config: %s"; 0.6-0.10 V0 "a V0 LLM engine";
    # 0.4-0.5 "Initializing an LLM engine (v%s) with config: ..."
    ("LLM engine (v", re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v?([^()\s]{1,64})\)")),
    # entrypoints/openai/api_server.py "vLLM API server version %s"
    ("vLLM API server version", re.compile(r"vLLM API server version v?(\S{1,64})")),
    ("vLLM version", re.compile(r"vLLM version:?\s{0,4}v?(\S{1,64})")),
    # entrypoints/utils.py (0.11+, `vllm serve`): the block-letter banner ends its second row with "version X"
    # ("█  version 0.19.0"; a blog's copy may collapse the banner's spaces)
    ("version ", re.compile(r"[█▀▄] {1,8}version {1,4}v?(\d[^\s]{0,63})")),
)
_STARTS = ("non-default args: ", "LLM engine (v", "vLLM API server version")

# --------------------------------------------------------------------------------------------------------------------
# Settings from "non-default args" and the engine-config dump: type-checked, a bad one ignored with a warning
# --------------------------------------------------------------------------------------------------------------------

_POS = (1, 2**40)
SETTING_TYPES: dict[str, tuple[str, Any]] = {
    "gpu_memory_utilization": ("fraction", None),
    "max_model_len": ("int", _POS),
    "max_num_batched_tokens": ("int", _POS),
    "max_num_seqs": ("int", _POS),
    "block_size": ("int", (1, 2**20)),
    "tensor_parallel_size": ("int", (1, 2**16)),
    "pipeline_parallel_size": ("int", (1, 2**16)),
    "data_parallel_size": ("int", (1, 2**16)),
    "kv_cache_memory_bytes": ("int", (0, 2**60)),
    "enforce_eager": ("bool", None),
    "enable_prefix_caching": ("bool", None),
    "enable_chunked_prefill": ("bool", None),
    "kv_cache_dtype": ("name", None),
    "quantization": ("name", None),
    "dtype": ("name", None),
    "load_format": ("name", None),
    "model": ("text", None),
    "seed": ("text", None),
}
_NAME = re.compile(r"[\w.\-]{1,64}")
_DESCRIBE = {"fraction": "a fraction in (0, 1]", "int": "an integer in range", "bool": "True or False",
             "name": "a short name", "text": "text"}


def _check_setting(key: str, value: Any, from_text: bool) -> tuple[bool, Any]:
    """(ok, value as kvcalc keeps it). from_text: the value is the config dump's text (e.g. '8192', 'True')."""
    kind, bounds = SETTING_TYPES[key]
    if from_text and isinstance(value, str):
        text = value.strip().strip("'\"")
        if kind == "int" and re.fullmatch(r"\d{1,20}", text):
            value = int(text)
        elif kind == "bool" and text in ("True", "False"):
            value = text == "True"
        elif kind == "fraction" and _FLOAT.fullmatch(text):
            value = float(text)
        elif kind in ("name", "text"):
            value = None if text == "None" else text
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
    elif kind == "fraction":
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and 0 < value <= 1)
        value = float(value) if ok else value
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "name":
        ok = value is None or (isinstance(value, str) and bool(_NAME.fullmatch(value)))
    else:
        ok = value is None or (isinstance(value, (str, int, float)) and len(str(value)) <= 4096)
        value = value if value is None else str(value)
    return ok, value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _config_dump(line: str, lineno: int, settings: dict, warnings: list) -> None:
    """config/vllm.py VllmConfig.__str__ (the "with config:" line): "key=value, key=value, ..." pairs."""
    names = {"max_seq_len": "max_model_len", "tensor_parallel_size": "tensor_parallel_size",
             "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
             "kv_cache_dtype": "kv_cache_dtype", "enforce_eager": "enforce_eager", "quantization": "quantization",
             "load_format": "load_format", "dtype": "dtype", "enable_prefix_caching": "enable_prefix_caching",
             "enable_chunked_prefill": "enable_chunked_prefill", "seed": "seed"}
    body = line[line.index("with config: ") + len("with config: "):]
    keys = list(re.finditer(r"(?:^|,\s{1,4})(\w{1,64})=", body))
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(body)
        raw = body[m.end():end].strip()
        key = m.group(1)
        if key == "model":
            settings.setdefault("model", raw.strip("'\""))
            continue
        if key not in names:
            continue
        name = names[key]
        ok, value = _check_setting(name, raw, from_text=True)
        if not ok:
            warnings.append(f"line {lineno}: engine config {key}={_short(raw)} is not {_DESCRIBE[SETTING_TYPES[name][0]]}; "
                            "ignored")
            continue
        settings.setdefault(name, value)


_ARG_WANTED = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens", "max_num_seqs", "block_size",
               "kv_cache_dtype", "enforce_eager", "tensor_parallel_size", "pipeline_parallel_size", "dtype",
               "quantization", "model", "enable_prefix_caching", "kv_cache_memory_bytes")


def _non_default_args(line: str, lineno: int, out: dict) -> None:
    """entrypoints/serve/utils/api_utils.py:273 "non-default args: %s" (a dict repr; LLM class and `vllm serve`)."""
    start = line.find("{", line.index("non-default args: "))
    if start < 0 or not line.endswith("}"):
        return
    raw = line[start:]
    args: Any = {}
    try:
        args = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        args = {}
        for mm in re.finditer(r"'(\w{1,64})': ('[^']{0,4096}'|[^,}]{1,4096})", raw):
            value = mm.group(2).strip()
            try:
                args[mm.group(1)] = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                args[mm.group(1)] = value
    if not isinstance(args, dict):
        return
    if "model_tag" in args:  # `vllm serve MODEL` puts the positional model here; the LLM class has no model_tag
        out["settings"].setdefault("entrypoint", "serve")
    out["non_default_args"] = {str(k): v for k, v in args.items()
                               if isinstance(v, (str, int, float, bool)) or v is None}
    limits = args.get("limit_mm_per_prompt")  # {"image": 0, ...} (or {"image": {"count": 0}}): encoders skipped
    if isinstance(limits, dict) and limits and len(limits) <= 16:
        counts = {str(k)[:40]: (v.get("count") if isinstance(v, dict) else v) for k, v in limits.items()}
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
            out["settings"]["limit_mm_per_prompt"] = counts
    if args.get("language_model_only") is True:
        out["settings"]["language_model_only"] = True
    for key in _ARG_WANTED:
        if key in args and args[key] is not None:
            ok, value = _check_setting(key, args[key], from_text=False)
            if not ok:
                out["warnings"].append(f"line {lineno}: non-default args {key}={_short(args[key])} is not "
                                       f"{_DESCRIBE[SETTING_TYPES[key][0]]}; ignored")
                continue
            out["settings"][key] = value
    out["raw"]["non_default_args"] = line.strip()


# --------------------------------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------------------------------


_FIGURE_NEEDLES = ("Model loading took ", "Loading model weights took ", "Available KV cache memory: ",
                   "GPU KV cache size: ", " blocks: ", "model weights take ", "Free memory on device (")


def _split_runs(lines: list[str]) -> list[tuple[int, int]]:
    """[(first line index, end index)] of each engine start. A start marker (non-default args, the engine-config
    line, the API server version) opens a candidate run once the current run has logged a memory figure; the
    candidate stands only if it logs again a figure the run before it already logged (a second engine start repeats
    them). So DP ranks' repeated start lines, and excerpts posted out of order (the args line pasted after the
    figures), stay one run."""
    segments: list[tuple[int, int, set[int]]] = []
    start, kinds = 0, set()
    for i, line in enumerate(lines):
        if kinds and any(n in line for n in _STARTS):
            segments.append((start, i, kinds))
            start, kinds = i, set()
        for k, needle in enumerate(_FIGURE_NEEDLES):
            if needle in line:
                kinds.add(k)
    segments.append((start, len(lines), kinds))
    runs = [segments[0]]
    for a, b, seg_kinds in segments[1:]:
        if seg_kinds & runs[-1][2]:
            runs.append((a, b, seg_kinds))
        else:  # no repeated figure: the same engine start
            first, _, prev = runs[-1]
            runs[-1] = (first, b, prev | seg_kinds)
    return [(a, b) for a, b, _ in runs]


def parse_vllm_log(text: str, run: int | None = None) -> dict[str, Any]:
    """Every memory figure of a vLLM start-up log, in bytes (GiB * 2**30, rounded), plus the raw line of each.

    run: which engine start to read when the text holds several (0-based, negative from the end; default the last).
    Returns {"version", "settings", "values", "raw", "errors", "repeats", "warnings", "runs", "run",
    "non_default_args" (when logged)}. errors: start-up failures the log reports; warnings: settings the log states
    in a form kvcalc ignored, and the runs found. repeats: how many lines gave a per-rank figure when several ranks
    logged it (the first is kept). Raises LogError (one line) on a captured number that is not a number.
    values keys (present when logged): weights_bytes, load_seconds, total_memory_bytes, requested_memory_bytes,
    initial_free_bytes, non_kv_bytes, activation_bytes, non_torch_bytes, available_kv_bytes, kv_cache_tokens,
    num_gpu_blocks (V0 only), max_concurrency, concurrency_max_model_len, graph_capture_bytes,
    graph_capture_seconds, cudagraph_estimate_bytes, cudagraph_pool_actual_bytes, cudagraph_pool_estimated_bytes,
    equivalent_util_without_cudagraph_profiling, kv_cache_memory_to_requested_bytes, kv_cache_memory_to_gpu_bytes,
    kv_cache_in_use_bytes, profile_seconds, init_engine_seconds, free_after_profiling_bytes.
    """
    all_lines, spaced, files = _logical_lines(text)
    raws = _lines(text)  # the same indices as all_lines: the source-line tags are in the prefix _clean_line drops
    runs = _split_runs(all_lines)
    index = len(runs) - 1 if run is None else run
    if not -len(runs) <= index < len(runs):
        raise LogError(f"the log holds {len(runs)} engine start(s); run {run} does not exist")
    index %= len(runs)
    first, end = runs[index]
    out: dict[str, Any] = {"version": None, "settings": {}, "values": {}, "raw": {}, "errors": [], "repeats": {},
                           "warnings": [], "runs": [{"first_line": a + 1, "last_line": b} for a, b in runs],
                           "run": index, "line_tags": {}}
    matches: dict[int, tuple[int, str, re.Match]] = {}
    counts = {key: 0 for key, _ in _REPEATED}
    config_line = args_line = None
    signs: set[str] = set()
    for i in range(first, end):
        line = all_lines[i]
        if not line:
            continue
        lineno = i + 1
        for j, pat in enumerate(PATTERNS):
            for variant in (line, spaced.get(i)):  # a wrapped line: the direct join, then with a space at joins
                if variant is None or pat.needle not in variant:
                    continue
                m = pat.compiled.search(variant)
                if m is None:
                    continue
                for (_, key, kind), value in zip(pat.fields, m.groups()):
                    _cast(kind, value, lineno, variant, key)  # every capture checked, repeats included
                matches.setdefault(j, (lineno, variant, m))
                break
        for key, needle in _REPEATED:
            if needle in line:
                counts[key] += 1
        if out["version"] is None:
            for needle, regex in _VERSION_RES:
                if needle in line and (m := regex.search(line)):
                    out["version"] = m.group(1)
                    out["raw"]["version"] = line.strip()
                    break
        if config_line is None and "LLM engine (v" in line and "with config: " in line:
            config_line = (lineno, line)
        if args_line is None and "non-default args: " in line:
            args_line = (lineno, line)
        for needle, regex, key, cast in _TEXT_SETTINGS:
            if needle in line and key not in out["settings"] and (m := regex.search(line)):
                out["settings"][key] = cast(m.group(1).strip())
        if i in files:
            signs.add(files[i])
        for message, regex in LINE_TAG_MESSAGES:
            if message not in out["line_tags"] and regex.match(line) and (tag := _LINE_TAG.search(raws[i][:400])):
                out["line_tags"][message] = f"{Path(tag.group(1)).name}:{tag.group(2)}"
        if "CUDA graph memory profiling is disabled" in line:
            out["settings"].setdefault("cudagraph_memory_profiling", False)
        for needle, from_needle in _FAILURES:
            if needle in line:
                msg = (line[line.index(needle):] if from_needle else line).strip()[:500]
                if msg and not any(msg in e or e in msg for e in out["errors"]):
                    out["errors"].append(msg)
    # Precedence as before: the config dump (setdefault), then non-default args (override), then the message rows.
    text_settings = dict(out["settings"])
    out["settings"] = {}
    if config_line:
        _config_dump(config_line[1], config_line[0], out["settings"], out["warnings"])
        out["raw"]["config"] = config_line[1].strip()
    if args_line:
        _non_default_args(args_line[1], args_line[0], out)
    for key, value in text_settings.items():
        out["settings"].setdefault(key, value)
    if "entrypoint" not in out["settings"] and "non_default_args" in out:
        # the LLM class logs its non-default args too, but `vllm serve` adds model_tag and the API server's version
        # line (both would have set "serve" above): a logged args line without them is an offline LLM() start
        out["settings"]["entrypoint"] = "llm"
    if "engine" not in out["settings"] and signs:  # any V1 process or file wins: V0 names survive in V1 logs
        out["settings"]["engine"] = "v1" if "v1" in signs else "v0"
    for j, pat in enumerate(PATTERNS):
        if j not in matches:
            continue
        lineno, line, m = matches[j]
        for (where, key, kind), value in zip(pat.fields, m.groups()):
            number = _cast(kind, value, lineno, line, key)
            if where == "settings":
                out["settings"].setdefault(key, number)
            elif key not in out["values"]:  # an earlier (more direct) row already gave it
                out["values"][key] = number
                out["raw"][key] = line.strip()
    if "compile_cache" not in out["settings"] and out["values"].get("compile_seconds", 1.0) < 1.0:
        # no compile line kept, but a sub-second torch.compile is a load of the stored artifact: a compile runs
        # Dynamo first, which alone takes seconds ("Dynamo bytecode transform time" 6.3-9.1 s in the public cold
        # logs); loads take 0.1-4.4 s, so only the sub-second ones are read as warm
        out["settings"]["compile_cache"] = "warm"
    if "weights_bytes" not in out["values"] and "weights_profiled_bytes" in out["values"]:
        # V0 (0.6-0.8) prints the weights only in its profiling summary ("model weights take X GiB"): the same
        # measurement as "Model loading took" (memory after loading minus before), so it stands for it
        out["values"]["weights_bytes"] = out["values"]["weights_profiled_bytes"]
        out["raw"]["weights_bytes"] = out["raw"].get("weights_profiled_bytes", "")
    for key, n in counts.items():
        if n > 1:
            out["repeats"][key] = n
    if len(runs) > 1:
        starts = [str(a + 1) for a, _ in runs]
        shown = ", ".join(starts if len(starts) <= 6 else starts[:3] + ["..."] + starts[-2:])
        out["warnings"].append(f"the log holds {len(runs)} engine starts (from lines {shown}); read the one from "
                               f"line {first + 1}")
    return out


# --------------------------------------------------------------------------------------------------------------------
# Comparison with kvcalc
# --------------------------------------------------------------------------------------------------------------------


def compare_log(parsed: dict[str, Any], model: Any, gpu: Any, **overrides: Any) -> list[dict[str, Any]]:
    """Rows of quantity | predicted | observed | signed error | tolerance | verdict for every quantity the log states.

    model: a catalog name, config path or ModelSpec; gpu: a GPU id/alias/profile. The GPU's total memory is replaced by
    the log's (from the "Free memory on device" summary or the old profiling line) when the log states it, so the
    comparison tests the accounting, not the profile's memory size. overrides (weights, kv, gpu_memory_utilization,
    max_model_len, max_num_batched_tokens, max_num_seqs, enforce_eager, block_size, version, entrypoint,
    memory_total_bytes) win over what the log says. Tolerances: compare.TOLERANCES.
    """
    return check_log(parsed, model, gpu, **overrides)["rows"]


# What a V1 start-up log normally states, and what is lost without it (a dropped row is said, never silent).
_EXPECTED = (
    ("kv_cache_tokens", "'GPU KV cache size' line: the logged KV capacity is not compared"),
    ("available_kv_bytes", "'Available KV cache memory' line: the KV memory is not compared"),
    ("weights_bytes", "'Model loading took' line: the weights are not compared"),
)


def _hub_stem(name: str) -> str:
    """'meta-llama/Llama-3.1-8B-Instruct' -> 'llama-3.1-8b' (org dropped; chat/instruct suffixes kept apart)."""
    stem = name.strip().rstrip("/").split("/")[-1].lower()
    return re.sub(r"-(instruct|chat|it|base|hf)$", "", stem)


def log_mismatches(parsed: dict[str, Any], spec: Any, model: Any, vllm_version: str | None = None,
                   run_given: bool = False) -> list[str]:
    """Why this log may not be the run that was asked for: another model, another vLLM version, several runs."""
    from packaging.version import Version

    out: list[str] = []
    settings = parsed.get("settings", {})
    config = getattr(spec, "config", None) or {}
    arch = settings.get("architecture")
    archs = config.get("architectures") or [] if isinstance(config, dict) else []
    archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []  # a user's config: any JSON
    if arch and archs and arch not in archs:
        out.append(f"model: the log's engine resolved {arch}; --model {model} is {', '.join(map(str, archs))}")
    served = settings.get("model")
    if isinstance(served, str) and "/" in served and not served.startswith(("/", ".", "~")):
        asked = None
        try:
            from ..catalog import catalog_entry, catalog_names

            if str(model).lower() in catalog_names():
                asked = catalog_entry(str(model).lower()).get("hf_id")
        except Exception:  # noqa: BLE001 - a model given as a path or a spec: nothing to compare by name
            asked = None
        if asked is None and isinstance(model, str) and "/" in model and not Path(model).exists():
            asked = model
        if asked and _hub_stem(asked) != _hub_stem(served):
            out.append(f"model: the log served {served!r}; --model {model} is {asked!r}")
    logged = parsed.get("version")
    if vllm_version and logged:
        try:
            same = Version(str(vllm_version)) == Version(str(logged))
        except ValueError:  # InvalidVersion, or a number past the interpreter's digit limit
            same = str(vllm_version) == str(logged)
        if not same:
            out.append(f"vLLM version: the log is {logged}; asked for {vllm_version} (kvcalc used its rules)")
    runs = parsed.get("runs") or []
    if len(runs) > 1 and not run_given:
        out.append(f"run: the log holds {len(runs)} engine starts; compared the one from line "
                   f"{runs[parsed.get('run', -1)]['first_line']} (--run N picks one, 0-based)")
    return out


# Start-up wordings only some releases print, for a log that states no version: (raw line key, needle, release
# whose rules apply, why). vLLM 0.6.3-0.6.4's V0 worker.py printed the profile as one line of key=value pairs
# ("Memory profiling results: total_gpu_memory=..."); 0.6.5 split it into a table, 0.7+ no longer prints it.
WORDING_VERSIONS = (
    ("total_memory_bytes", "total_gpu_memory=", "0.6.4",
     "its one-line 'Memory profiling results: total_gpu_memory=...' is vLLM 0.6.3-0.6.4's wording (V0 worker.py)"),
)


# Where each release logs its start-up figures: the "[file:line]" of vLLM's log prefix (vllm/logger.py prints the
# file's name and the line of the logging call), read in each release's wheel: v1/worker/gpu_worker.py (Available
# KV cache memory, CUDA graph pool memory, the "Free memory on device" summary, logged as `logger.info(msg)` after
# the f-string that builds it), v1/core/kv_cache_utils.py (KV cache size), v1/worker/gpu/model_runner.py (the V2
# runner) and v1/worker/gpu_model_runner.py (Model loading took). Python's logging records the line that opens the
# call: 0.30.0's "Available KV cache memory" string is at gpu_worker.py:641, its `logger.info_once(` at :640, and the
# public 0.30.0 start-up (prp-wp24-a) prints [gpu_worker.py:640]. A release not listed here has no entry; its
# patch releases read as the listed one only where every line they log sits where it does.
LINE_TAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.26.0": {"Available KV cache memory": ("gpu_worker.py:560",), "KV cache size": ("kv_cache_utils.py:2177",),
               "Free memory on device": ("gpu_worker.py:857",), "CUDA graph pool memory": ("gpu_worker.py:793",),
               "Model loading took": ("model_runner.py:305", "gpu_model_runner.py:5347")},
    "0.27.1": {"Available KV cache memory": ("gpu_worker.py:563",), "KV cache size": ("kv_cache_utils.py:2235",),
               "Free memory on device": ("gpu_worker.py:789",), "CUDA graph pool memory": ("gpu_worker.py:726",),
               "Model loading took": ("model_runner.py:329", "gpu_model_runner.py:5405")},
    "0.28.0": {"Available KV cache memory": ("gpu_worker.py:578",), "KV cache size": ("kv_cache_utils.py:1869",),
               "Free memory on device": ("gpu_worker.py:804",), "CUDA graph pool memory": ("gpu_worker.py:741",),
               "Model loading took": ("model_runner.py:380", "gpu_model_runner.py:5515")},
    "0.29.0": {"Available KV cache memory": ("gpu_worker.py:625",), "KV cache size": ("kv_cache_utils.py:2032",),
               "Free memory on device": ("gpu_worker.py:860",), "CUDA graph pool memory": ("gpu_worker.py:797",),
               "Model loading took": ("model_runner.py:404", "gpu_model_runner.py:5471")},
    "0.30.0": {"Available KV cache memory": ("gpu_worker.py:640",), "KV cache size": ("kv_cache_utils.py:2395",),
               "Free memory on device": ("gpu_worker.py:888",), "CUDA graph pool memory": ("gpu_worker.py:825",),
               "Model loading took": ("model_runner.py:428", "gpu_model_runner.py:5416")},
    "0.31.0": {"Available KV cache memory": ("gpu_worker.py:692",), "KV cache size": ("kv_cache_utils.py:2464",),
               "Free memory on device": ("gpu_worker.py:955",), "CUDA graph pool memory": ("gpu_worker.py:892",),
               "Model loading took": ("model_runner.py:407", "gpu_model_runner.py:5354")},
    "0.32.0": {"Available KV cache memory": ("gpu_worker.py:759",), "KV cache size": ("kv_cache_utils.py:2327",),
               "Free memory on device": ("gpu_worker.py:1034",), "CUDA graph pool memory": ("gpu_worker.py:971",),
               "Model loading took": ("model_runner.py:424", "gpu_model_runner.py:5149")},
    "0.33.0": {"Available KV cache memory": ("gpu_worker.py:772",), "KV cache size": ("kv_cache_utils.py:1147",),
               "Free memory on device": ("gpu_worker.py:1066",), "CUDA graph pool memory": ("gpu_worker.py:1003",),
               "Model loading took": ("model_runner.py:428", "gpu_model_runner.py:5088")},
    "0.34.0": {"Available KV cache memory": ("gpu_worker.py:795",), "KV cache size": ("kv_cache_utils.py:1168",),
               "Free memory on device": ("gpu_worker.py:1175",), "CUDA graph pool memory": ("gpu_worker.py:1112",),
               "Model loading took": ("model_runner.py:441",)},
}
# the messages whose tag is read, by how the cleaned line starts ("GPU KV cache size", "CPU KV cache size" on CPU)
LINE_TAG_MESSAGES = tuple((m, re.compile(r)) for m, r in (
    ("Available KV cache memory", r"Available KV cache memory: "), ("KV cache size", r"[A-Z]{2,5} KV cache size: "),
    ("Free memory on device", r"Free memory on device \("), ("CUDA graph pool memory", r"CUDA graph pool memory: "),
    ("Model loading took", r"Model loading took ")))
_LINE_TAG = re.compile(r"\[([\w./-]{1,120}\.py):(\d{1,6})\]")
# Two messages at least: one tag alone could be an unlisted release's line that happens to sit where a listed one's does
LINE_TAGS_MIN = 2


def line_tag_version(parsed: dict[str, Any]) -> tuple[str, str] | None:
    """(release, why) when the source-line tags of a log's start-up figures are all where one listed release logs
    them (LINE_TAGS), from two messages at least; None when they are fewer, or any tag is where no listed release
    logs it (a nightly, a fork or an unlisted release: 0.31.1rc1's "Available KV cache memory" is at
    gpu_worker.py:726)."""
    tags = parsed.get("line_tags") or {}
    if len(tags) < LINE_TAGS_MIN:
        return None
    releases = set(LINE_TAGS)
    for message, tag in tags.items():
        releases &= {r for r, row in LINE_TAGS.items() if tag in row.get(message, ())}
    if len(releases) != 1:
        return None
    release = releases.pop()
    shown = ", ".join(f"[{tag}] {message}" for message, tag in tags.items())
    return release, f"its source-line tags ({shown}) are where vLLM {release} logs those lines"


def wording_version(parsed: dict[str, Any]) -> tuple[str, str] | None:
    """(release, why) read from the wording of a log that states no version, else from where its lines were logged
    (line_tag_version), or None."""
    if parsed.get("version"):
        return None
    raw = parsed.get("raw", {})
    for key, needle, release, why in WORDING_VERSIONS:
        if needle in str(raw.get(key, "")):
            return release, why
    return line_tag_version(parsed)


def _version_notes(parsed: dict[str, Any]) -> list[str]:
    from packaging.version import Version

    from ..engines.vllm import DEFAULT_VERSION

    logged = parsed.get("version")
    if not logged:
        hint = wording_version(parsed)
        if hint is not None:
            return [f"the log states no vLLM version; {hint[1]}: kvcalc used the {hint[0]} rules (--vllm-version "
                    "chooses others)"]
        return [f"the log states no vLLM version: kvcalc used the rules of {DEFAULT_VERSION}"]
    try:
        if Version(str(logged)) > Version(DEFAULT_VERSION):
            return [f"vLLM {logged} is newer than kvcalc's newest rules ({DEFAULT_VERSION}): those were used"]
    except ValueError:  # InvalidVersion, or a number past the interpreter's digit limit
        return [f"the log's vLLM version {logged!r} is not a version number: kvcalc used the rules of "
                f"{DEFAULT_VERSION}"]
    return []


def _valid_version(text: Any) -> bool:
    from packaging.version import Version

    try:
        Version(str(text))
    except ValueError:  # InvalidVersion, or a number past the interpreter's digit limit
        return False
    return True


def _quantized_checkpoint(spec: Any) -> Any:
    """The weight format of a model whose checkpoint is quantized (its config.json quantization_config), else None:
    vLLM loaded that checkpoint, whatever name the log gives its method."""
    from ..checkpoint import baseline_weights

    ck = getattr(spec, "checkpoint", None)
    return baseline_weights(spec) if ck is not None and ck.scheme is not None else None


def check_log(parsed: dict[str, Any], model: Any, gpu: Any, *, vllm_version: str | None = None,
              run_given: bool = False, **overrides: Any) -> dict[str, Any]:
    """{"rows": judged comparison rows, "mismatches": [...], "notes": [...], "assumed": {setting: source}}.
    mismatches: reasons the log may be another run than the one asked for (model, version, several runs); notes:
    what kvcalc assumed or could not compare."""
    from ..catalog import load_model
    from ..engines import vllm as vllm_engine
    from ..engines.vllm_versions import rules_for
    from ..model import ModelSpec
    from .compare import row, with_verdict
    from .predict import gpu_with_total, settings_with_sources

    spec = model if isinstance(model, ModelSpec) else load_model(str(model))
    values = parsed.get("values", {})
    notes: list[str] = []
    if vllm_version is not None:  # as on `kvcalc plan`: the rules of this version (a log of another is a MISMATCH)
        if not _valid_version(vllm_version):
            raise UsageError(f"--vllm-version {str(vllm_version)[:40]!r} is not a version number (e.g. 0.26.0)")
        overrides.setdefault("version", str(vllm_version))
    total = overrides.pop("memory_total_bytes", None)
    if total is None:
        total = values.get("total_memory_bytes")
    profile = gpu_with_total(gpu, total)
    if total is None:
        notes.append(f"the log states no total GPU memory: kvcalc used the {profile.name} profile's "
                     f"{profile.memory_total_bytes / GiB:.2f} GiB")
    if overrides.get("version") is None:  # a version given by the user is said in `settings: version X (override)`
        notes += _version_notes(parsed)
        hint = wording_version(parsed)
        if hint is not None:
            parsed = dict(parsed, version=hint[0],
                          version_from_wording="source lines" if hint[1].startswith("its source-line") else "wording")
    if parsed.get("version") and not _valid_version(parsed["version"]):
        parsed = dict(parsed, version=None)  # said in the note above; the default rules apply
    from ..engines.vllm_encoders import encoder_modalities

    settings, sources = settings_with_sources(parsed, overrides, checkpoint=_quantized_checkpoint(spec),
                                              modalities=encoder_modalities(spec) or ("image",))
    logged_engine = parsed.get("settings", {}).get("engine")
    rules = getattr(settings, "rules", None)  # the version's rules (engines/vllm_versions.py)
    if logged_engine and rules is not None and getattr(rules, "engine", logged_engine) != logged_engine:
        notes.append(f"the log ran vLLM's {logged_engine.upper()} engine, but kvcalc's rules for {settings.version} "
                     f"are the {rules.engine.upper()} engine's (VLLM_USE_V1 set?): capacity may differ")
    for key, what in _EXPECTED:
        if key not in values:
            notes.append(f"no {what}")
    est = vllm_engine.estimate(spec, profile, settings)
    note_gib = "log rounds to 0.01 GiB"
    rows = []

    def add(quantity: str, predicted: Any, key: str, unit: str = "bytes", note: str = "") -> None:
        if key in values:
            rows.append(with_verdict(row(quantity, predicted, values[key], unit, note)))

    add("requested memory (total x util)", est.requested_memory, "requested_memory_bytes", note=note_gib)
    add("weights", est.weights_bytes, "weights_bytes", note=note_gib)
    graphs_in_peak = getattr(rules_for(settings.version), "logged_peak_with_graphs", False)
    # 0.27+ logs the transient peak plus the CUDA-graph estimate it subtracted as "peak activation"
    # (engines/vllm_versions.py logged_peak_with_graphs): compared with kvcalc's two together
    add("activation peak", est.activation_bytes + (est.cudagraph_bytes if graphs_in_peak else 0), "activation_bytes",
        note=note_gib + ("; with the CUDA-graph estimate, as 0.27+ logs it" if graphs_in_peak else ""))
    add("non-torch memory", est.non_torch_bytes, "non_torch_bytes", note=note_gib)
    # 0.28+ summary: "Actual usage is X GiB for consumed memory (weights + non-torch)": the two together
    add("consumed memory (weights + non-torch)", est.weights_bytes + est.non_torch_bytes, "consumed_bytes",
        note=note_gib)
    if "non_kv_bytes" in values:
        rows.append(with_verdict(row("non-KV (weights+activation+non-torch)",
                                     est.weights_bytes + est.activation_bytes + est.non_torch_bytes,
                                     values["non_kv_bytes"], note=note_gib)))
    if "cudagraph_estimate_bytes" in values and not est.cudagraph_bytes and not settings.enforce_eager \
            and not rules_for(settings.version).cudagraph_estimate:
        # 0.19-0.20 log "Estimated CUDA graph memory" but leave it out of the KV budget unless
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (on by default from 0.21.0, vllm#38284): kvcalc's 0 subtracted is
        # right, and the logged figure is compared with kvcalc's graph estimate, which it leaves out likewise
        graphs = vllm_engine.cudagraph_estimate_bytes(settings)
        rows.append(with_verdict(row("CUDA-graph estimate (logged, not subtracted)", graphs,
                                     values["cudagraph_estimate_bytes"], note=note_gib)))
        notes.append(f"vLLM {settings.version} logs a CUDA-graph estimate but does not subtract it from the KV "
                     "budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on by default from 0.21.0): the KV rows "
                     "leave it out, as vLLM did")
    elif "cudagraph_estimate_bytes" in values:
        add("CUDA-graph estimate", est.cudagraph_bytes, "cudagraph_estimate_bytes", note=note_gib)
    elif "cudagraph_pool_estimated_bytes" in values and not settings.enforce_eager:
        # the V2 runner (0.29+) prints no "Estimated CUDA graph memory" line; its estimate is in the after-capture
        # comparison "CUDA graph pool memory: A (actual), E (estimated)" (gpu_worker.py:790-800 at v0.29.0)
        add("CUDA-graph estimate", est.cudagraph_bytes, "cudagraph_pool_estimated_bytes", note=note_gib)
    add("available KV memory", est.available_kv_bytes, "available_kv_bytes", note=note_gib)
    add("GPU blocks", est.num_gpu_blocks, "num_gpu_blocks", unit="blocks")
    add("logged KV cache tokens", est.logged_kv_tokens, "kv_cache_tokens", unit="tokens")
    add("KV tokens in the start-up error", est.kv_capacity_tokens, "kv_tokens_in_error", unit="tokens")
    add("max concurrency", est.logged_concurrency, "max_concurrency", unit="x")
    add("max_num_batched_tokens", est.max_num_batched_tokens, "max_num_batched_tokens", unit="tokens")
    span = None
    if est.pinned is not None:
        # a cold 0.27-0.30 compile: the capacity is a range, low end with the freed compile segment pinned
        # (engines/vllm.py pinned_range); each capacity quantity's low end, the rows' predicted being the high end
        p = est.pinned
        span = {"low": {"available KV memory": p.available_kv_bytes, "GPU blocks": p.num_gpu_blocks,
                        "logged KV cache tokens": p.logged_kv_tokens,
                        "KV tokens in the start-up error": p.num_gpu_blocks * est.block_size,
                        "max concurrency": p.logged_concurrency},
                "pinned_bytes": p.pinned_bytes, "reason": p.reason}
        def shown_as(q: str, v: float) -> str:
            return (f"{v / GiB:.2f} GiB" if q == "available KV memory" else f"{v:,.2f}x" if q == "max concurrency"
                    else f"{v:,.0f}")

        for r in rows:
            q, low = r["quantity"], span["low"].get(r["quantity"])
            if low is not None and r.get("observed") is not None:
                inside = low <= r["observed"] <= r["predicted"]
                notes.append(f"{q}: kvcalc's range {shown_as(q, low)}-{shown_as(q, r['predicted'])} (low end: the "
                             f"freed compile segment pinned, {p.pinned_bytes / GiB:.2f} GiB a rank) "
                             + ("holds" if inside else "does not hold") + f" the log's {shown_as(q, r['observed'])}")
    assumed = {k: {"value": _setting_value(settings, k), "from": v} for k, v in sources.items()}
    return {"rows": rows, "mismatches": log_mismatches(parsed, spec, model, vllm_version, run_given),
            "notes": notes, "assumed": assumed, "capacity_range": span}


def log_answer(parsed: dict[str, Any], max_model_len: Any = None) -> str | None:
    """The log's own answer in plain words (what the server holds and where its memory went), from its figures
    alone: what a reader of the PASS/MISS table wanted to know. None when the log states too little."""
    v = parsed.get("values", {})
    parts = []
    n = max_model_len or v.get("concurrency_max_model_len")
    if v.get("max_concurrency") is not None and n:
        held = f"this server holds {v['max_concurrency']:g}x requests of {int(n):,} tokens at once"
        if v.get("kv_cache_tokens"):
            held += f" ({int(v['kv_cache_tokens']):,} tokens of KV cache)"
        parts.append(held)
    if v.get("available_kv_bytes") is not None:
        used = [(name, v[key]) for name, key in (("weights", "weights_bytes"), ("activations", "activation_bytes"),
                                                 ("non-torch memory", "non_torch_bytes")) if v.get(key) is not None]
        mem = f"its KV memory {v['available_kv_bytes'] / GiB:.2f} GiB"
        if used:
            of = f" of {v['requested_memory_bytes'] / GiB:.2f} GiB" if v.get("requested_memory_bytes") else ""
            mem += f" is what remained{of} after " + ", ".join(f"{name} {b / GiB:.2f} GiB" for name, b in used)
        parts.append(mem)
    return "; ".join(parts) if parts else None


_SETTING_ATTR = {"kv_cache_dtype": ("kv", "name"), "weights": ("weights", "name"),
                 "gpu_memory_utilization": ("gpu_memory_utilization",), "max_model_len": ("max_model_len",),
                 "max_num_batched_tokens": ("max_num_batched_tokens",), "max_num_seqs": ("max_num_seqs",),
                 "block_size": ("block_size",), "version": ("version",), "entrypoint": ("entrypoint",),
                 "enforce_eager": ("enforce_eager",), "tensor_parallel_size": ("tensor_parallel",),
                 "pipeline_parallel_size": ("pipeline_parallel",), "dtype": ("dtype_bytes",)}


def _setting_value(settings: Any, key: str) -> Any:
    obj = settings
    for attr in _SETTING_ATTR.get(key, (key,)):
        obj = getattr(obj, attr, None)
    return obj
