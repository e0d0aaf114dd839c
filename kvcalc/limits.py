"""Upper bounds on what one request may ask. Past them no deployment exists, and the arithmetic would only run
long (a loop per pipeline stage) or overflow a float (a 400-digit batch): the CLI and PlanRequest refuse them with
one line that states the bound.
"""

from __future__ import annotations

from .errors import UsageError, shown

MAX_CONTEXT = 2**24  # tokens (16,777,216): --context, --max-model-len; 16x the longest context served today (1M)
MAX_BATCHED_TOKENS = 2**24  # --max-num-batched-tokens: vLLM's prefill chunk; defaults are 2,048-16,384
MAX_BATCH = 2**16  # --batch, --max-num-seqs (65,536): vLLM's default max_num_seqs is 256 to 1,024
MAX_PARALLEL = 256  # --tp, --pp: GPUs per parallel dimension; a 671B model runs on 8-32

BOUNDS = {
    "context": MAX_CONTEXT, "max_model_len": MAX_CONTEXT, "max_num_batched_tokens": MAX_BATCHED_TOKENS,
    "batch": MAX_BATCH, "max_num_seqs": MAX_BATCH, "tp": MAX_PARALLEL, "pp": MAX_PARALLEL,
    "input_len": MAX_CONTEXT, "output_len": MAX_CONTEXT, "concurrency": MAX_BATCH,
}


def check(name: str, value: int | None) -> None:
    """Refuse a value of option `name` (a key of BOUNDS) above its bound, or below 1."""
    if value is None:
        return
    option = "--" + name.replace("_", "-")
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{option} must be a whole number, got {shown(value)}")
    if value < 1:
        raise UsageError(f"{option} must be at least 1, got {shown(value)}")
    if value > BOUNDS[name]:
        raise UsageError(f"{option} must be at most {BOUNDS[name]:,}, got {shown(value)}")
