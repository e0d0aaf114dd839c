"""The decision table: configurations x engines -> memory, capacity, speed, quality risk, verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .checkpoint import baseline_weights, weights_note
from .engines import hf as hf_engine
from .engines import vllm as vllm_engine
from .errors import UnsupportedModelError, UsageError
from .formats import KvFormat, WeightFormat, kv_format, weight_format
from .hardware import GpuProfile
from .kvcache import hf_cache_bytes
from .model import ModelSpec
from .throughput import decode_speed

SCHEMA = "kvcalc.plan/1"


@dataclass(frozen=True)
class Config:
    key: str
    label: str
    weights: str | WeightFormat  # a registered format's name, or a checkpoint's own format (checkpoint.py)
    kv_vllm: str | None  # None: this engine has no such configuration
    kv_hf: str | None


STANDARD_CONFIGS = (
    Config("baseline", "baseline (BF16 weights, BF16 KV)", "bf16", "auto", "auto"),
    Config("fp8-kv", "FP8 KV", "bf16", "fp8", None),
    Config("kv4", "4-bit KV (HQQ)", "bf16", None, "hqq-4"),
    Config("nf4", "NF4 weights", "nf4", "auto", "auto"),
    Config("nf4+fp8-kv", "NF4 weights + FP8 KV", "nf4", "fp8", None),
    Config("nf4+kv4", "NF4 weights + 4-bit KV", "nf4", None, "hqq-4"),
    Config("awq", "AWQ int4 weights", "awq", "auto", "auto"),
)


@dataclass
class PlanRequest:
    spec: ModelSpec
    gpu: GpuProfile
    context: int
    batch: int = 1
    engines: tuple[str, ...] = ("vllm", "hf")
    weights: str | None = None
    kv: str | None = None
    util: float = 0.9
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    vllm_version: str = vllm_engine.DEFAULT_VERSION
    tp: int = 1
    pp: int = 1


@dataclass
class Row:
    config: str
    label: str
    engine: str
    weights_format: str
    kv_format: str
    weights_bytes: int
    kv_bytes_per_token: float
    kv_capacity_tokens: int | None  # vLLM: the logged "GPU KV cache size"; HF: longest context that fits at --batch
    max_concurrency: int | None  # vLLM: requests of --context tokens at once; HF: None
    hf_memory_bytes: int | None  # HF: everything the process holds at --context and --batch
    decode_tokens_per_s: float
    fits: bool
    shortfall_bytes: int
    quality_risk: str
    verdicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quality_evidence: str = ""  # measured on small real models (kvcalc/data/quality.json), not a prediction
    vllm: vllm_engine.VllmEstimate | None = field(default=None, repr=False)
    hf: hf_engine.HfEstimate | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("vllm", "hf")}
        if self.vllm is not None:
            out["vllm_breakdown"] = asdict(self.vllm)
        if self.hf is not None:
            out["hf_breakdown"] = asdict(self.hf)
        return out


def configs_for(req: PlanRequest) -> list[Config]:
    ckpt = baseline_weights(req.spec)  # the checkpoint's own format (quantization, exact bytes), if it has one
    standard = list(STANDARD_CONFIGS) if ckpt is None else checkpoint_configs(ckpt)
    if req.weights is None and req.kv is None:
        return standard
    w = weight_format(req.weights) if req.weights else (ckpt or weight_format("bf16"))
    k = kv_format(req.kv or "auto")
    own = w is ckpt or (ckpt is None and w.name == "bf16")
    parts = ([w.name] if not own else []) + ([f"{k.name}-kv"] if k.name != "auto" else [])
    custom = Config("+".join(parts) or "baseline", f"{w.label} weights + {k.label}", w if w is ckpt else w.name,
                    k.name if k.vllm_name else None, k.name if (k.hf_quantized or k.name == "auto") else None)
    return [standard[0], custom] if not own or k.name != "auto" else [standard[0]]


def checkpoint_configs(ckpt: WeightFormat) -> list[Config]:
    """The standard table for a checkpoint with its own format: the baseline and the KV levers run on the weights
    as shipped; the weight what-ifs (NF4, AWQ, and BF16 for a quantized checkpoint) stay beside them."""
    rows = [Config("baseline", f"baseline ({ckpt.label} weights, BF16 KV)", ckpt, "auto", "auto")]
    for cfg in STANDARD_CONFIGS[1:]:
        rows.append(Config(cfg.key, cfg.label, ckpt, cfg.kv_vllm, cfg.kv_hf) if cfg.weights == "bf16" else cfg)
    if ckpt.quantizes_linears:
        rows.append(Config("bf16", "BF16 weights (what-if)", "bf16", "auto", "auto"))
    return rows


def _weights(cfg: Config) -> WeightFormat:
    return cfg.weights if isinstance(cfg.weights, WeightFormat) else weight_format(cfg.weights)


RISK_LEVELS = ("none", "low", "moderate", "high")


def _weights_notes(w: WeightFormat) -> list[str]:
    note = weights_note(w)
    return [note] if note else []


def _risk(spec: ModelSpec, w: WeightFormat, k: KvFormat) -> str:
    """The worse of the two levers' risks; weight risk depends on model size (small models suffer more)."""
    return max(w.risk_for(spec.params.total), k.quality_risk, key=RISK_LEVELS.index)


def _fits_batch(req: PlanRequest, est: vllm_engine.VllmEstimate, concurrency: int) -> tuple[bool, int]:
    """vLLM 'fits' when it starts and holds --batch requests of --context tokens at once; the shortfall is what is
    missing for either (memory to start, or the KV blocks of the missing requests)."""
    fits = est.fits and concurrency >= req.batch
    if fits or not est.fits:
        return fits, est.shortfall_bytes
    blocks_needed = req.batch * est.layout.blocks_per_request(req.context) + 1  # + the null block
    return False, (blocks_needed - est.num_gpu_blocks) * est.layout.bytes_per_block


def _vllm_row(req: PlanRequest, cfg: Config) -> Row | None:
    if cfg.kv_vllm is None:
        return None
    w, k = _weights(cfg), kv_format(cfg.kv_vllm)
    if "vllm" not in w.engines:
        return None
    settings = vllm_engine.VllmSettings(
        weights=w, kv=k, gpu_memory_utilization=req.util,
        max_model_len=req.max_model_len or req.context, max_num_batched_tokens=req.max_num_batched_tokens,
        max_num_seqs=req.max_num_seqs, enforce_eager=req.enforce_eager, version=req.vllm_version,
        tensor_parallel=req.tp, pipeline_parallel=req.pp,
    )
    est = vllm_engine.estimate(req.spec, req.gpu, settings)
    concurrency = est.concurrency_at(req.context)
    fits, shortfall = _fits_batch(req, est, concurrency)
    speed = decode_speed(req.spec, req.gpu, "vllm", w, k, req.batch, req.context, req.enforce_eager, req.tp)
    # capacity as vLLM logs it ("GPU KV cache size"): group-aware, so hybrid models count tokens, not pool blocks.
    # Weights and KV bytes per token are the deployment's: each of tp x pp GPUs holds its share.
    return Row(cfg.key, cfg.label, "vllm", w.name, k.name, est.weights_bytes * req.tp * req.pp,
               est.kv_bytes_per_token * req.tp * req.pp, est.logged_kv_tokens, concurrency, None, speed.tokens_per_s,
               fits, shortfall, _risk(req.spec, w, k), notes=_weights_notes(w) + est.notes + speed.notes, vllm=est)


def _hf_row(req: PlanRequest, cfg: Config) -> Row | None:
    if cfg.kv_hf is None or req.tp > 1 or req.pp > 1:
        return None
    w, k = _weights(cfg), kv_format(cfg.kv_hf)
    if "hf" not in w.engines:
        return None
    new_tokens = max(1, min(256, req.context // 2))
    settings = hf_engine.HfSettings(w, k, req.batch, req.context - new_tokens + 1, new_tokens)
    est = hf_engine.estimate(req.spec, settings, req.gpu)
    longest = hf_engine.max_context(req.spec, settings, req.gpu)
    speed = decode_speed(req.spec, req.gpu, "hf", w, k, req.batch, req.context)
    # per token of context at --context: sliding-window layers stop growing past their window
    per_token = hf_cache_bytes(req.spec.layers, 1, req.context, req.context, k, 2) / req.context
    return Row(cfg.key, cfg.label, "hf", w.name, k.name, est.static_bytes, per_token, longest, None, est.total_bytes, speed.tokens_per_s, est.fits, est.shortfall_bytes, _risk(req.spec, w, k),
               notes=_weights_notes(w) + est.notes + speed.notes, hf=est)


def _mark_verdicts(rows: list[Row]) -> None:
    for engine in ("vllm", "hf"):
        fitting = [r for r in rows if r.engine == engine and r.fits]
        if not fitting:
            continue
        most = max(fitting, key=lambda r: (r.kv_capacity_tokens or 0, r.decode_tokens_per_s))
        most.verdicts.append("most context")
        fastest = max(fitting, key=lambda r: r.decode_tokens_per_s)
        fastest.verdicts.append("fastest decode")
        safest = [r for r in fitting if r.quality_risk in ("none", "low")]
        if safest:
            best = max(safest, key=lambda r: (r.kv_capacity_tokens or 0))
            if "most context" not in best.verdicts:
                best.verdicts.append("most context at low risk")


def plan(req: PlanRequest, warnings: list[str] | None = None) -> list[Row]:
    """Rows for every configuration and engine. An engine that cannot account for this model is left out, with
    the reason appended to `warnings` (the other engine's rows still come); with one engine asked, it raises."""
    if req.batch < 1:
        raise UsageError("--batch must be at least 1")
    rows: list[Row] = []
    for engine in req.engines:
        try:
            for cfg in configs_for(req):
                row = _vllm_row(req, cfg) if engine == "vllm" else _hf_row(req, cfg)
                if row is not None:
                    rows.append(row)
        except UnsupportedModelError as exc:
            if len(req.engines) == 1 or warnings is None:
                raise
            warnings.append(f"{engine}: {exc}")
    _mark_verdicts(rows)
    from .quality import quality_cell

    for row in rows:
        row.quality_evidence = quality_cell(row.weights_format, row.kv_format)
    return rows


def plan_json(req: PlanRequest, rows: list[Row], warnings: list[str], sweep: list | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "model": req.spec.name,
        "gpu": req.gpu.id,
        "gpu_memory_total_bytes": req.gpu.memory_total_bytes,
        "context": req.context,
        "batch": req.batch,
        "settings": {"util": req.util, "max_model_len": req.max_model_len or req.context,
                     "max_num_batched_tokens": req.max_num_batched_tokens, "max_num_seqs": req.max_num_seqs,
                     "enforce_eager": req.enforce_eager, "vllm_version": req.vllm_version, "tp": req.tp,
                     "pp": req.pp},
        "warnings": warnings,
        "rows": [r.to_json() for r in rows],
        "tp_sweep": [asdict(o) for o in sweep] if sweep else None,
    }


@dataclass
class TpOption:
    tp: int
    fits: bool
    shortfall_bytes: int
    weights_per_gpu_bytes: int
    kv_capacity_tokens: int
    max_concurrency: int
    decode_tokens_per_s: float


def custom_key(req: PlanRequest) -> str:
    """The config key of the configuration --weights/--kv asked for ('baseline' when neither)."""
    if req.weights is None and req.kv is None:
        return "baseline"
    return configs_for(req)[-1].key


def tp_sweep(req: PlanRequest, sizes: tuple[int, ...] = (1, 2, 4, 8)) -> list[TpOption]:
    """The baseline vLLM configuration at each tensor-parallel size: what the smallest fitting TP gives and what
    each larger one buys (per-GPU weights shrink; KV capacity and speed grow)."""
    out = []
    w = weight_format(req.weights) if req.weights else (baseline_weights(req.spec) or weight_format("bf16"))
    k = kv_format(req.kv if req.kv and kv_format(req.kv).vllm_name else "auto")
    for tp in sizes:
        settings = vllm_engine.VllmSettings(
            weights=w, kv=k, gpu_memory_utilization=req.util, max_model_len=req.max_model_len or req.context,
            max_num_batched_tokens=req.max_num_batched_tokens, max_num_seqs=req.max_num_seqs,
            enforce_eager=req.enforce_eager, version=req.vllm_version, tensor_parallel=tp)
        est = vllm_engine.estimate(req.spec, req.gpu, settings)
        speed = decode_speed(req.spec, req.gpu, "vllm", w, k, req.batch, req.context, req.enforce_eager, tp)
        concurrency = est.concurrency_at(req.context)
        fits, shortfall = _fits_batch(req, est, concurrency)
        out.append(TpOption(tp, fits, shortfall, est.weights_bytes, est.logged_kv_tokens, concurrency,
                            speed.tokens_per_s))
    return out
