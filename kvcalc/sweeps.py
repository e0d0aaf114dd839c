"""The numbers behind the pictures: vLLM concurrency over a grid of contexts, decode speed over a range of batches,
the H200 speed measurements, and where one GPU's memory goes per plan row.

Plain Python, tested on its own (tests/test_plots.py); `plots.py` only draws what these functions return. Every
engine call goes through the plan's one request -> settings translation (`PlanRequest.vllm_settings`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .engines import vllm as vllm_engine
from .errors import UnsupportedModelError
from .formats import kv_format
from .plan import FormatChoice, PlanRequest, Row, configs_for, dtype_bytes_for, plan, vllm_decode

MAX_CONTEXT = 128 * 1024
MIN_CONTEXT = 1024
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
SPEED_KV_FORMATS = ("auto", "fp8")  # the speed picture compares BF16 KV with FP8 KV, whatever --kv asked


def plan_rows(req: PlanRequest) -> list[Row]:
    """The plan's rows, for a picture drawn without them."""
    return plan(req, [])


def config_labels(req: PlanRequest) -> dict[str, str]:
    return {c.key: c.label for c in configs_for(req)}


def kv_label(kv: str) -> str:
    return kv_format(kv).label


def vllm_configs(req: PlanRequest) -> list[FormatChoice]:
    """The configurations of the plan that vLLM can run (kv cache auto/fp8, weights vLLM loads)."""
    return [c for c in configs_for(req) if c.kv_vllm is not None and "vllm" in c.weights.engines]


def context_grid(req: PlanRequest) -> list[int]:
    """Context lengths from 1k to the model's max positions (at most 128k): powers of two and the midpoints
    1.5 x 2^n, plus the model's max itself when it is not on the grid."""
    top = min(req.spec.max_position_embeddings or MAX_CONTEXT, MAX_CONTEXT)
    top = max(top, MIN_CONTEXT)
    grid = []
    n = MIN_CONTEXT
    while n <= top:
        grid.append(n)
        if n * 3 // 2 <= top:
            grid.append(n * 3 // 2)
        n *= 2
    if grid[-1] != top:
        grid.append(top)
    return sorted(set(grid))


def capacity_series(req: PlanRequest) -> dict[str, list[tuple[int, int]]]:
    """Per vLLM configuration: [(context, requests of that many tokens that fit at once)], vLLM re-estimated with
    max_model_len = context (what you would start it with to serve that context). 0 = vLLM does not start."""
    out: dict[str, list[tuple[int, int]]] = {}
    grid = context_grid(req)
    for choice in vllm_configs(req):
        points = []
        for context in grid:
            est = vllm_engine.estimate(req.spec, req.gpu, req.vllm_settings(choice, max_model_len=context))
            points.append((context, est.concurrency_at(context)))
        out[choice.key] = points
    return out


def hf_longest_contexts(req: PlanRequest, rows: list[Row] | None = None) -> dict[str, int]:
    """Per HF configuration: the longest context (prompt + generation) that fits at --batch, from the plan rows."""
    if rows is None:
        rows = plan_rows(req)
    return {r.config: int(r.kv_capacity_tokens) for r in rows if r.engine == "hf" and r.kv_capacity_tokens}


@dataclass(frozen=True)
class SpeedPoint:
    batch: int
    tokens_per_s: float
    fits: bool  # the batch's KV at this context fits in vLLM's cache (max concurrency >= batch)
    bound: str  # "memory" or "compute"


def speed_label(req: PlanRequest, kv: str) -> str:
    return f"{req.weights_or_default.label} weights, {kv_label(kv)}"


def vllm_estimate(req: PlanRequest, choice: FormatChoice, context: int) -> vllm_engine.VllmEstimate | None:
    """vLLM started to serve `context` tokens (max_model_len = --max-model-len, else `context`) in this
    configuration; None when vLLM cannot account for this model."""
    try:
        return vllm_engine.estimate(req.spec, req.gpu,
                                    req.vllm_settings(choice, max_model_len=req.max_model_len or context))
    except UnsupportedModelError:
        return None


def vllm_concurrency(req: PlanRequest, choice: FormatChoice, context: int) -> int:
    """Requests of `context` tokens vLLM holds at once in this configuration (0: it does not start)."""
    est = vllm_estimate(req, choice, context)
    return est.concurrency_at(context) if est else 0


def speed_series(req: PlanRequest, context: int | None = None) -> dict[str, list[SpeedPoint]]:
    """Predicted vLLM decode tokens/s vs batch at `context` (default --context), BF16 KV and FP8 KV, with the
    weights of --weights (default BF16). Keys: 'auto' and 'fp8' (the KV format)."""
    context = context or req.context
    w = req.weights_or_default
    out: dict[str, list[SpeedPoint]] = {}
    for kv in SPEED_KV_FORMATS:
        k = kv_format(kv)
        est = vllm_estimate(req, FormatChoice(kv, kv, w, k, None), context)
        capacity = est.concurrency_at(context) if est else 0
        points = []
        for batch in BATCHES:  # the table's decode model (plan.vllm_decode: the release's rules on the GPU's step)
            d = vllm_decode(req, w, k, batch, context, est, dtype_bytes=dtype_bytes_for(req.dtype))
            points.append(SpeedPoint(batch, d.tokens_per_s, batch <= capacity, d.bound))
        out[kv] = points
    return out


def config_speed_series(req: PlanRequest, context: int | None = None) -> dict[str, tuple[int, list[SpeedPoint]]]:
    """Per vLLM configuration of the plan (every one, fitting or not): (requests of `context` tokens it holds at
    once, [decode tokens/s of all requests vs batch]); the table's decode speed at its held batch is on the curve."""
    context = context or req.context
    out: dict[str, tuple[int, list[SpeedPoint]]] = {}
    for choice in vllm_configs(req):
        est = vllm_estimate(req, choice, context)
        capacity = est.concurrency_at(context) if est else 0
        points = []
        for batch in BATCHES:
            d = vllm_decode(req, choice.weights, choice.kv_vllm, batch, context, est,
                            dtype_bytes=dtype_bytes_for(req.dtype))
            points.append(SpeedPoint(batch, d.tokens_per_s, batch <= capacity, d.bound))
        out[choice.key] = (capacity, points)
    return out


@dataclass(frozen=True)
class MeasuredPoint:
    case: str
    kv: str
    batch: int
    tokens_per_s: float
    context: int  # the mean context during the measured decode: prompt + half the generated tokens
    prompt_len: int
    new_tokens: int
    gpu: str  # e.g. "H200"
    vllm_version: str


def validation_data_dir() -> Path:
    """The repository's docs/validation/data, next to the package in a checkout (absent from an installed wheel).
    The one place the package reads the repository: the speed picture shows the H200 measurements when it can."""
    import kvcalc

    return Path(kvcalc.__file__).resolve().parent.parent / "docs" / "validation" / "data"


def measured_speed_points(model: str, gpu_id: str, tp: int = 1, weights: str = "bf16",
                          data_dir: Path | None = None) -> list[MeasuredPoint]:
    """Decode speeds measured with vLLM and CUDA graphs (docs/validation/data/*.jsonl) for this model on this GPU.
    Only the H200 was measured; anything else, or a missing data folder (an installed wheel), gives []."""
    if gpu_id != "h200":
        return []
    folder = data_dir or validation_data_dir()
    if not folder.is_dir():
        return []
    out: list[MeasuredPoint] = []
    for path in sorted(folder.glob("vllm*.jsonl")):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            s = rec.get("settings") or {}
            if rec.get("status") != "ok" or s.get("model") != model or s.get("enforce_eager", True):
                continue
            if int(s.get("tensor_parallel_size") or 1) != tp or (s.get("weights") or "bf16") != weights:
                continue
            env = rec.get("environment") or {}
            gpu_name = (env.get("gpu_name") or "H200").replace("NVIDIA ", "")
            version = (rec.get("versions") or {}).get("vllm", "")
            speed = (rec.get("observed") or {}).get("speed") or {}
            for value in speed.values():
                if not isinstance(value, dict) or not value.get("decode_tokens_per_s"):
                    continue
                context = int(value.get("prompt_len", 0) + value.get("max_tokens", 0) / 2)
                out.append(MeasuredPoint(rec.get("case_id", ""), s.get("kv", "auto"), int(value["batch"]),
                                         float(value["decode_tokens_per_s"]), context,
                                         int(value.get("prompt_len", 0)), int(value.get("max_tokens", 0)),
                                         gpu_name, version))
    return out


VLLM_SEGMENTS = ("weights", "activation peak", "non-torch", "CUDA graphs", "KV cache", "unused (1 - util)")
HF_SEGMENTS = ("weights", "KV cache", "transient", "CUDA context", "free")


@dataclass(frozen=True)
class MemoryBar:
    label: str  # e.g. "vLLM  baseline"
    config: str
    engine: str
    fits: bool
    segments: list[tuple[str, int]]  # (name, bytes), in drawing order; negative KV (does not fit) is clipped to 0
    kv_tokens: int = 0  # vLLM: the KV cache size it logs; HF: context x batch held at the end of generate
    shortfall_bytes: int = 0  # the plan's: how much more memory the row needs (0 when it fits)
    starts: bool = True  # vLLM: the server starts (a row that starts but holds fewer requests than asked "fits" no)
    held: int | None = None  # vLLM: requests of --context tokens it holds at once

    @property
    def total(self) -> int:
        return sum(b for _, b in self.segments)


def memory_segments(req: PlanRequest, rows: list[Row]) -> list[MemoryBar]:
    """Where one GPU's memory goes, per row. vLLM: its budget (total x util) is weights + activation peak +
    non-torch + CUDA graphs + the KV cache it allocates from what is left, and the rest of the GPU is unused, so a
    fitting row sums to the GPU total. HF: weights + the cache at --context x --batch + the largest activation or
    transient buffer + the CUDA context, and what is left is free."""
    total = req.gpu.memory_total_bytes
    bars = []
    for r in rows:
        if r.engine == "vllm" and r.vllm is not None:
            e = r.vllm
            segs = [("weights", e.weights_bytes), ("activation peak", e.activation_bytes),
                    ("non-torch", e.non_torch_bytes), ("CUDA graphs", e.cudagraph_bytes),
                    ("KV cache", max(e.available_kv_bytes, 0))]
            # what vLLM leaves unused: total x (1 - util); with 0.34's extensible KV cache, where free memory binds,
            # also the CUDA context and the sizing margin (engines/vllm.py stage_budgets): the rest of the GPU either way
            unused = e.total_memory - e.requested_memory
            if e.available_kv_bytes > 0:
                unused = e.total_memory - sum(b for _, b in segs)
            segs.append(("unused (1 - util)", unused))
            bars.append(MemoryBar(f"vLLM  {r.config}", r.config, "vllm", r.fits, segs, e.logged_kv_tokens,
                                  r.shortfall_bytes, starts=e.fits, held=r.max_concurrency))
        elif r.engine == "hf" and r.hf is not None:
            h = r.hf
            transient = h.peak_increment_bytes - h.cache_bytes
            used = h.static_bytes + h.peak_increment_bytes + h.cuda_context_bytes
            segs = [("weights", h.static_bytes), ("KV cache", h.cache_bytes),
                    ("transient", transient), ("CUDA context", h.cuda_context_bytes),
                    ("free", max(total - used, 0))]
            bars.append(MemoryBar(f"HF  {r.config}", r.config, "hf", r.fits, segs, h.cache_tokens * req.batch,
                                  r.shortfall_bytes))
    return bars
