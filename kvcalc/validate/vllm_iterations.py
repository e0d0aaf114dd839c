"""Read vLLM's per-step log lines (`--enable-logging-iteration-details`) into engine steps with wall-clock times.

The line (vLLM 0.26.0, vllm/v1/metrics/loggers.py:182 `_log_iteration_details`, logged by the API server when the
step's outputs reach it):

    (APIServer pid=594) INFO 12-02 01:57:38.186 [loggers.py:182] Engine 000: Iteration(0): 1 context requests,
    1024 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 0.04 ms,
    GPU KV cache usage: 0.0%

- counts (vllm/v1/utils.py:797 `compute_iteration_details`): a request is a "context" request while it has no output
  token yet (a new request or a later chunk of a chunked prefill), else a "generation" request; tokens are the ones
  scheduled this step (prefix-cache hits are not scheduled, so not counted);
- elapsed (vllm/v1/engine/core.py:502 `capture_iteration_details`): the engine core's wait on the step's future. With
  async scheduling (`step_with_batch_queue`, core.py:686-696) the next step is already queued when it waits, so this
  is only the blocked part of a step, not its duration;
- the timestamp is the API server's (milliseconds only with a logging config that prints them, e.g.
  scripts/gpu_v4/vllm_logging_ms.json: vLLM's format plus `.%(msecs)03d`). A step's line is logged when its outputs
  reach the API server, at the step's end, so the gap from one line to the next is the later step's wall time as the
  API server sees it (to the millisecond; a busy API server logs a stretch's lines in a bunch, so only means over
  several steps are sound).

`workloads()` splits a server's log into the bench runs it served: an idle gap (no step for longer than `idle_s`)
separates two runs, as the runner leaves one between workloads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

_LINE = re.compile(
    r"(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)\.(?P<ms>\d{3}) \[[^\]]*\] Engine (?P<engine>\d+): "
    r"Iteration\((?P<i>\d+)\): (?P<cr>\d+) context requests, (?P<ct>\d+) context tokens, "
    r"(?P<gr>\d+) generation requests, (?P<gt>\d+) generation tokens, "
    r"iteration elapsed time: (?P<el>[0-9.]+) ms(?P<dummy> \(dummy\))?, GPU KV cache usage: (?P<kv>[0-9.]+)%")
_NEEDLE = "Iteration("
MAX_LINE_CHARS = 4096  # a real line is ~250 characters


@dataclass(frozen=True)
class Step:
    """One engine step as logged."""

    index: int  # the engine core's iteration counter
    t: float  # seconds since the start of the log's first day (API server's clock, millisecond resolution)
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    elapsed_ms: float  # the engine core's blocked wait on this step (see the module doc)
    kv_usage: float  # GPU KV cache usage, a fraction
    engine: int = 0
    dummy: bool = False

    @property
    def tokens(self) -> int:
        return self.context_tokens + self.generation_tokens


def parse_line(line: str, year: int = 2000) -> Step | None:
    """The step a log line reports, or None for any other line."""
    if _NEEDLE not in line:
        return None
    m = _LINE.search(line[:MAX_LINE_CHARS])
    if m is None:
        return None
    when = datetime.strptime(f"{year}-{m['md']} {m['hms']}", "%Y-%m-%d %H:%M:%S")
    t = (when - datetime(year, 1, 1)).total_seconds() + int(m["ms"]) / 1e3
    return Step(int(m["i"]), t, int(m["cr"]), int(m["ct"]), int(m["gr"]), int(m["gt"]), float(m["el"]),
                float(m["kv"]) / 100, int(m["engine"]), m["dummy"] is not None)


def parse_steps(text: str) -> list[Step]:
    """Every step line of a log, in order."""
    return [s for s in (parse_line(line) for line in text.splitlines()) if s is not None]


def workloads(steps: list[Step], idle_s: float = 1.0) -> list[list[Step]]:
    """The log's steps cut into runs at every gap of more than idle_s seconds without a step."""
    out: list[list[Step]] = []
    for s in steps:
        if not out or s.t - out[-1][-1].t > idle_s:
            out.append([])
        out[-1].append(s)
    return out


def wall_times(steps: list[Step]) -> list[float]:
    """The wall time of every step but the first (steps[1:]): seconds from the previous step's line to its own."""
    return [b.t - a.t for a, b in zip(steps, steps[1:])]
