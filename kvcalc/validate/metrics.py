"""`kvcalc validate --metrics URL|FILE`: is a running vLLM server configured as planned?

vLLM publishes its resolved cache configuration on `/metrics` as an info gauge, `vllm:cache_config_info`, whose labels
are every field of its CacheConfig as text, one series per engine (v0.26.0: v1/metrics/loggers.py:1076-1098
`log_metrics_info` with name "vllm:cache_config_info"; config/cache.py:232-235 `metrics_info` returns
`{key: str(value) for key, value in self.__dict__.items()}`). After start-up the engine core has set `num_gpu_blocks`,
`block_size` (the smallest group's), `kv_cache_size_tokens` and `kv_cache_max_concurrency` (v1/engine/core.py:309-319),
besides the configured `cache_dtype`, `gpu_memory_utilization` and `kv_cache_memory_bytes`. Releases before 0.24 have
no kv_cache_size_tokens / kv_cache_max_concurrency labels; the comparison uses what is there.

The plan is kvcalc's vLLM estimate for the options given here (as on `kvcalc plan`: --kv, --util, --weights, --tp,
--max-model-len ...; kvcalc's defaults where not given). Configuration labels (block size, cache dtype, util, KV budget)
must equal the plan's, else MISMATCH: the server runs another configuration than the one planned. Capacity labels
(blocks, tokens, concurrency) are compared within compare.TOLERANCES, PASS or MISS. max_model_len is not a label: when
not given it is read off the server as round(kv_cache_size_tokens / kv_cache_max_concurrency), the rule by which 0.24+
computes the two (v1/core/kv_cache_utils.py:get_kv_cache_capacity), and said in a note.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import UsageError, shown
from ..units import GiB

INFO = "vllm:cache_config_info"
MAX_BYTES = 16 << 20  # a /metrics page is a few hundred KiB; more is not a metrics page
TIMEOUT_S = 10.0

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def read_metrics(source: str) -> str:
    """The text of a Prometheus /metrics page: fetched from an http(s) URL, else read from a saved file."""
    if source.startswith(("http://", "https://")):
        import urllib.error
        import urllib.request

        from urllib.parse import urlsplit

        # a server on this machine is reached directly, whatever http_proxy says
        local = (urlsplit(source).hostname or "") in ("localhost", "127.0.0.1", "::1")
        opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if local else []))
        try:
            with opener.open(source, timeout=TIMEOUT_S) as response:
                data = response.read(MAX_BYTES + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UsageError(f"--metrics {shown(source)}: cannot read it ({reason})") from None
    else:
        from pathlib import Path

        from ..input_files import is_file

        if not is_file(source):
            raise UsageError(f"--metrics {shown(source)}: no such file (give a saved /metrics text or an http URL)")
        with Path(source).open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UsageError(f"--metrics {shown(source)}: over {MAX_BYTES >> 20} MiB, not a /metrics page")
    return data.decode("utf-8", errors="replace")


def parse_samples(text: str) -> list[tuple[str, dict[str, str], str]]:
    """(name, labels, value) of every sample line of Prometheus' text exposition format (comments skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels: dict[str, str] = {}
        body = m.group("labels") or ""
        pos = 0
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            if not lm:
                break
            labels[lm.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], lm.group(2))
            pos = lm.end()
        out.append((m.group("name"), labels, m.group("value")))
    return out


def cache_configs(text: str) -> list[dict[str, str]]:
    """The labels of every `vllm:cache_config_info` series, one per engine, engine 0 first."""
    found = [labels for name, labels, _ in parse_samples(text) if name == INFO]
    return sorted(found, key=lambda labels: labels.get("engine", ""))


def _int(labels: dict[str, str], key: str) -> int | None:
    text = labels.get(key)
    if text in (None, "", "None", "null"):
        return None
    try:
        return int(float(text))
    except ValueError:
        raise UsageError(f"{INFO}: label {key}={shown(text)} is not a number") from None


def _float(labels: dict[str, str], key: str) -> float | None:
    text = labels.get(key)
    if text in (None, "", "None", "null"):
        return None
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{INFO}: label {key}={shown(text)} is not a number") from None


def server_max_model_len(labels: dict[str, str]) -> int | None:
    """max_model_len as 0.24+ computed its capacity labels: tokens = int(concurrency x max_model_len)."""
    tokens, concurrency = _int(labels, "kv_cache_size_tokens"), _float(labels, "kv_cache_max_concurrency")
    if not tokens or not concurrency:
        return None
    return round(tokens / concurrency)


def check_metrics(text: str, model: Any, gpu: Any, *, vllm_version: str | None = None,
                  **overrides: Any) -> dict[str, Any]:
    """{"server": labels of engine 0, "comparison": rows, "mismatches": [...], "notes": [...], "assumed": {...}}:
    the plan for `overrides` (the options of `kvcalc plan`, by VllmSettings' field names as validate.predict reads
    them) beside what the server reports."""
    from ..catalog import load_model
    from ..engines import vllm as vllm_engine
    from ..model import ModelSpec
    from .compare import row, with_verdict
    from .predict import settings_with_sources
    from .vllm_log import _quantized_checkpoint

    configs = cache_configs(text)
    if not configs:
        raise UsageError(f"no {INFO} series in the metrics (is this a vLLM server's /metrics, after start-up?)")
    labels = configs[0]
    blocks = _int(labels, "num_gpu_blocks")
    if blocks is None:
        raise UsageError(f"{INFO} has no num_gpu_blocks yet: the engine has not finished starting")
    notes: list[str] = []
    if len(configs) > 1:
        notes.append(f"{len(configs)} engines report a cache config (data parallel); compared engine "
                     f"{labels.get('engine', '0')}")
    spec = model if isinstance(model, ModelSpec) else load_model(str(model))
    if vllm_version is not None:
        overrides["version"] = str(vllm_version)
    else:
        notes.append(f"/metrics states no vLLM version: kvcalc used {vllm_engine.DEFAULT_VERSION}'s rules "
                     "(--vllm-version to choose)")
    inferred = None
    if overrides.get("max_model_len") is None:
        inferred = server_max_model_len(labels)
        if inferred is None:
            raise UsageError("--metrics needs --max-model-len: this server's labels do not give it "
                             "(no kv_cache_size_tokens / kv_cache_max_concurrency before vLLM 0.24)")
        overrides["max_model_len"] = inferred
        notes.append(f"max_model_len {inferred:,}: the server's kv_cache_size_tokens / kv_cache_max_concurrency "
                     "(--max-model-len to give it)")
    # the plan: only the user's options and kvcalc's defaults (never the server's labels) set the configuration
    settings, sources = settings_with_sources({"settings": {}}, overrides, checkpoint=_quantized_checkpoint(spec))
    if inferred is not None:
        sources["max_model_len"] = "server (tokens / concurrency)"
    est = vllm_engine.estimate(spec, gpu_profile(gpu), settings)

    rows: list[dict[str, Any]] = []
    mismatches: list[str] = []

    def exact(quantity: str, planned: Any, served: Any, why: str) -> None:
        if served is None:
            return
        same = planned == served
        rows.append({"quantity": quantity, "unit": "", "predicted": planned, "observed": served, "error": None,
                     "tolerance": "exact", "verdict": "PASS" if same else "MISMATCH"})
        if not same:
            mismatches.append(f"{quantity}: the server runs {served}, the plan has {planned} ({why})")

    exact("block size", est.block_size, _int(labels, "block_size"), "--block-size")
    exact("cache dtype", settings.kv.vllm_name, labels.get("cache_dtype"), "--kv-cache-dtype")
    budget = _int(labels, "kv_cache_memory_bytes")
    exact("kv_cache_memory_bytes", settings.kv_cache_memory_bytes, budget, "--kv-cache-memory-bytes")
    if budget is None:
        exact("gpu_memory_utilization", round(settings.util, 4), _float(labels, "gpu_memory_utilization"),
              "--gpu-memory-utilization")

    def capacity(quantity: str, predicted: Any, key: str, unit: str, read) -> None:
        observed = read(labels, key)
        if observed is not None:
            rows.append(with_verdict(row(quantity, predicted, observed, unit)))

    capacity("GPU blocks", est.num_gpu_blocks, "num_gpu_blocks", "blocks", _int)
    capacity("logged KV cache tokens", est.logged_kv_tokens, "kv_cache_size_tokens", "tokens", _int)
    capacity("max concurrency", est.logged_concurrency, "kv_cache_max_concurrency", "x", _float)
    if mismatches:
        notes.append("a MISMATCH row means the server was started with other settings than the plan: its capacity "
                     "rows compare two configurations")
    assumed = {k: {"value": _setting(settings, k), "from": v} for k, v in sources.items()}
    return {"server": labels, "comparison": rows, "mismatches": mismatches, "notes": notes, "assumed": assumed,
            "plan": {"num_gpu_blocks": est.num_gpu_blocks, "block_size": est.block_size,
                     "cache_dtype": settings.kv.vllm_name, "gpu_memory_utilization": settings.util,
                     "available_kv_gib": round(est.available_kv_bytes / GiB, 3), "fits": est.fits}}


def gpu_profile(gpu: Any):
    from ..hardware import get_gpu

    return get_gpu(gpu)


def _setting(settings, key: str):
    from .vllm_log import _setting_value

    return _setting_value(settings, key)
