"""Print kvcalc's KV-capacity prediction for every settings-complete public log (tests/fixtures/vllm_logs/public/).

    PYTHONPATH=. python3 tests/public_logs_table.py            # markdown table on stdout

Not a test: it records where today's rules miss, for issue 10 (README.md in that folder holds its output). Settings come
from index.json (what the post states); a log that states no version runs on the
oldest rules of its version family (V0, early V1, V1) and is marked so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kvcalc.catalog import load_model
from kvcalc.checkpoint import baseline_weights
from kvcalc.engines import vllm as vllm_engine
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.validate.vllm_log import gib_to_bytes

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "tests" / "fixtures" / "vllm_logs" / "public"

# index gpu text -> kvcalc GPU profile, and the post's total memory where the post states one
GPU_PROFILE = {"A100": "a100-80gb", "RTX 4090": "rtx-4090", "RTX 3090": "rtx-3090", "L40S": "l40s", "H100": "h100-sxm",
               "T4": "t4"}
WEIGHTS = {None: "bf16", "awq": "awq", "fp8": "fp8", "bitsandbytes": "nf4"}


# a log that states no version: the oldest release of its family (index.json version_family, from the log format)
FAMILY_VERSION = {"v0": "0.7.0", "v1-early": "0.8.0", "v1": "0.9.1"}


def _version(v: str | None, family: str | None = None) -> tuple[str, str]:
    if not v:
        guess = FAMILY_VERSION.get(family or "v1", "0.9.1")
        return guess, f"not stated; {family or 'v1'} log format, {guess} rules"
    return v, v  # every release from 0.4 has rules (kvcalc/engines/vllm_versions.py)


def observed_tokens(obs: dict) -> tuple[int | None, str]:
    if obs.get("kv_cache_tokens"):
        return obs["kv_cache_tokens"], "GPU KV cache size"
    if obs.get("kv_tokens_in_error"):
        return obs["kv_tokens_in_error"], "tokens in the start-up error"
    if obs.get("num_gpu_blocks"):
        return obs["num_gpu_blocks"] * 16, "GPU blocks x 16"
    return None, ""


def predict(e: dict):
    spec = load_model(str(ROOT / e["kvcalc_model"]) if e["kvcalc_model"].endswith(".json") else e["kvcalc_model"])
    gpu_key = e["gpu"]
    profile_name = "a100-40gb" if (gpu_key == "A100" and e["gpu_memory"].startswith("40GB")) else GPU_PROFILE.get(gpu_key)
    profile = get_gpu(profile_name or "rtx-4090")
    if e.get("prediction_total_gpu_memory_gib"):
        profile = dataclasses.replace(profile, memory_total_bytes=gib_to_bytes(e["prediction_total_gpu_memory_gib"]))
    version, version_text = _version(e["vllm_version"] or e.get("version_hint"), e.get("version_family"))
    quant = (e["quantization"] or "").split(" ")[0] or None
    # a quantized catalog checkpoint (gpt-oss MXFP4) brings its own bytes; a float32 run is 4 bytes per element
    ckpt = spec.checkpoint.scheme is not None if getattr(spec, "checkpoint", None) is not None else False
    settings = vllm_engine.VllmSettings(
        weights=baseline_weights(spec) if ckpt else weight_format(WEIGHTS.get(quant, quant or "bf16")),
        dtype_bytes=4 if e["dtype"] == "float32" else 2,
        kv=kv_format(e["kv_cache_dtype"] or "auto"),
        gpu_memory_utilization=e["gpu_memory_utilization"],  # None: the version's default
        max_model_len=e["max_model_len"],
        max_num_batched_tokens=e["max_num_batched_tokens"],
        max_num_seqs=e["max_num_seqs"],
        enforce_eager=bool(e["enforce_eager"]),
        version=version,
        # the engine the log's format shows (index.json version_family): 0.8-0.10 could fall back to V0
        engine="v0" if e.get("version_family") == "v0" else None,
        entrypoint="serve" if str(e["entrypoint"] or "").startswith(("serve", "api")) else "llm",
        tensor_parallel=e["tp"] or 1,
        pipeline_parallel=e["pp"] or 1,
    )
    est = vllm_engine.estimate(spec, profile, settings)
    return est, profile, version_text


def rows():
    index = json.loads((PUBLIC / "index.json").read_text())["logs"]
    out = []
    for e in index:
        if not e["settings_complete"]:
            continue
        obs, how = observed_tokens(e["observed"])
        if not e["kvcalc_model"]:
            out.append((e, obs, None, None, "no kvcalc model/format: " + e["notes"].split("No prediction: ")[-1][:90]))
            continue
        try:
            est, profile, version_text = predict(e)
        except Exception as exc:  # noqa: BLE001 - report, do not hide
            out.append((e, obs, None, None, f"kvcalc refused: {exc}"))
            continue
        pred = est.logged_kv_tokens
        err = (pred - obs) / obs if obs else None
        out.append((e, obs, pred, err, f"{how}; rules {version_text}; GPU profile {profile.name}"))
    return out


def markdown() -> str:
    lines = ["| log | GPU | vLLM | model | observed KV tokens | kvcalc predicted | error | basis |",
             "|---|---|---|---|---:|---:|---:|---|"]
    for e, obs, pred, err, basis in rows():
        gpu = f"{e['gpu_count'] or 1}x {e['gpu'] or '?'}"
        lines.append(f"| {e['id']} | {gpu} | {e['vllm_version'] or e.get('version_hint') or '?'} | {e['model_id']} | "
                     f"{obs if obs is not None else '-'} | {pred if pred is not None else '-'} | "
                     f"{f'{err:+.1%}' if err is not None else '-'} | {basis} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
