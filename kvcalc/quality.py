"""Measured quality evidence for a weights + KV-cache choice, from the committed results (kvcalc/data/quality.json).

Light on purpose (json only, no torch): `kvcalc plan` can ask `evidence_for("nf4", "auto")` for every row it prints.
The numbers were measured on real small models on the CPU by kvcalc.validate.quality_runner (the command that made
them is in the data and in scripts/measure_quality.sh; docs/quality.md shows them). They are evidence about *small*
models, not a prediction for the model being planned: read CAVEAT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA_PATH = Path(__file__).resolve().parent / "data" / "quality.json"
DOC = "docs/quality.md"

CAVEAT = (
    "Measured on 135M/270M-parameter models (SmolLM2-135M, Gemma 3 270M) on one ~500-token English text, on the CPU "
    "in fp32. What that can say about a 3B or 70B model: small models are MORE sensitive to weight quantization than "
    "large ones, so a bad result here (4-bit weights) is a real warning for small models and a weak one for large "
    "models, while a good result is only weak evidence that a large model is fine. KV-cache quantization error "
    "depends on head_dim, the GQA ratio and outlier channels in keys, which differ by model family (SmolLM2: "
    "head_dim 64, 3 KV heads; Gemma 3 270M: head_dim 256, 1 KV head and only 3 of its 18 layers are full-attention "
    "layers that a quantized cache touches), so a cache that is harmless here can hurt another family and vice "
    "versa. Perplexity on one short text and agreement with the unquantized model are not task accuracy (reasoning, "
    "long-context retrieval and code are untested), and greedy generations of a 135M model loop on their own. Use "
    "these numbers to rank options and to catch breakage, not as a guarantee; evaluate the real model on your task."
)

# kvcalc weight format -> the weights the measurement used. Unquantized formats all map to the measured fp32 baseline
# (the CPU computes in fp32; bf16/fp16 rounding of weights is far below the effects measured here).
_WEIGHTS = {"bf16": "fp32", "fp16": "fp32", "fp32": "fp32", "auto": "fp32", "bfloat16": "fp32", "float16": "fp32",
            "float32": "fp32", "nf4": "nf4", "bnb-nf4": "nf4"}
# kvcalc KV format -> measured configurations. "fp8" has two: transformers' fp8 backend (scale frozen at the first
# update) and an emulation of vLLM's default fp8 cache (scale 1.0).
_KV = {"auto": ("auto",), "bf16": ("auto",), "fp16": ("auto",), "default": ("auto",),
       "fp8": ("fp8", "fp8-unit-scale"), "fp8-e4m3": ("fp8", "fp8-unit-scale"), "e4m3": ("fp8", "fp8-unit-scale"),
       "hqq-4": ("hqq-4",), "hqq4": ("hqq-4",), "hqq-2": ("hqq-2",), "hqq2": ("hqq-2",),
       "quanto-4": ("quanto-4",), "quanto4": ("quanto-4",), "quanto-2": ("quanto-2",), "quanto2": ("quanto-2",)}

_VARIANT = {"fp8": " (transformers fp8)", "fp8-unit-scale": " (fp8 scale 1.0)"}
LOOP_THRESHOLD = 0.5  # as in kvcalc.validate.quality_runner

_SHORT_LABEL = {"smollm2-135m": "SmolLM2-135M", "gemma-3-270m": "Gemma 3 270M"}
_KV_LABEL = {"auto": "default cache", "fp8": "transformers fp8 cache",
             "fp8-unit-scale": "fp8 cache, scale 1.0 (vLLM default, emulated)",
             "hqq-4": "HQQ 4-bit cache", "hqq-2": "HQQ 2-bit cache", "quanto-4": "quanto 4-bit cache",
             "quanto-2": "quanto 2-bit cache"}


@dataclass(frozen=True)
class Evidence:
    """One measured (model, weights, KV) configuration, compared with the same model's unquantized baseline."""

    model: str  # short label, e.g. "SmolLM2-135M"
    model_key: str  # "smollm2-135m"
    weights: str  # measured weights: "fp32" (unquantized) or "nf4"
    kv: str  # measured KV configuration: auto, fp8, fp8-unit-scale, hqq-4, ...
    config: str  # human label of what ran
    perplexity: float
    perplexity_ratio: float  # config / baseline, teacher-forced, cache filled token by token
    perplexity_ratio_after_256: float | None  # the same over positions >= 256 (>= 128 tokens quantized)
    kl: float  # mean KL(baseline || config), nats per token
    top1_agreement: float  # share of positions whose argmax equals the baseline's
    greedy_agreement: float  # share of the first 256 greedy tokens equal to the baseline's
    first_divergence: int | None  # index of the first greedy token that differs (None: never in the window)
    loop: bool  # repeated 4-gram share of 500 greedy tokens above the threshold
    repeated_ngram_share: float
    baseline_loop: bool  # whether the baseline itself loops on the same prompt
    is_baseline: bool
    note: str  # what the configuration is exactly, and its limits (e.g. which layers were quantized)
    date: str
    command: str

    def summary(self) -> str:
        """A short cell, e.g. "SmolLM2-135M: ppl x1.03, top-1 agree 97%, no loops"."""
        who = self.model + _VARIANT.get(self.kv, "")
        if self.is_baseline:
            head = f"{who}: baseline, ppl {self.perplexity:.1f}"
        else:
            head = f"{who}: ppl x{self.perplexity_ratio:.2f}, top-1 agree {self.top1_agreement:.0%}"
        if self.loop:
            tail = "loops (baseline too)" if (self.baseline_loop and not self.is_baseline) else "loops"
        else:
            tail = "no loops"
        return f"{head}, {tail}"


@lru_cache(maxsize=4)
def load_results(path: str | None = None) -> dict:
    """The committed measurement: {"rows": [...], "models": {...}, "command": ..., ...}; empty when absent."""
    p = Path(path) if path else DATA_PATH
    if not p.exists():
        return {"rows": [], "models": {}}
    return json.loads(p.read_text(encoding="utf-8"))


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _evidence(row: dict, models: dict) -> Evidence:
    m = row["metrics"]
    key = row["model"]
    meta = models.get(key, {})
    baseline_share = meta.get("baseline_repeated_ngram_share")
    weights_label = "fp32 weights" if row["weights"] == "fp32" else f"{row['weights'].upper()} weights"
    config = f"{weights_label} + {_KV_LABEL.get(row['kv'], row['kv'])}"
    note = row.get("note", "")
    if row["kv"] != "auto" and meta.get("full_attention_layers", 0) != meta.get("num_layers", 0):
        note = (note + "; " if note else "") + "KV quantized in " + meta.get("kv_quantized_layers", "some layers")
    return Evidence(
        model=_SHORT_LABEL.get(key, row.get("model_label", key)),
        model_key=key,
        weights=row["weights"],
        kv=row["kv"],
        config=config,
        perplexity=m["ppl"],
        perplexity_ratio=m["ppl_ratio"],
        perplexity_ratio_after_256=m.get("ppl_ratio_after_256"),
        kl=m["kl"],
        top1_agreement=m["top1_agreement"],
        greedy_agreement=m["greedy_agreement"],
        first_divergence=m.get("first_divergence"),
        loop=bool(m["loop"]),
        repeated_ngram_share=m["repeated_ngram_share"],
        baseline_loop=bool(baseline_share is not None and baseline_share > LOOP_THRESHOLD),
        is_baseline=(row["weights"] == "fp32" and row["kv"] == "auto"),
        note=note,
        date=row.get("date", ""),
        command=row.get("command", ""),
    )


def evidence_for(weights: str, kv: str, path: str | None = None) -> list[Evidence]:
    """What was measured for kvcalc weight format ``weights`` with KV format ``kv``, one entry per model and variant.

    [] when that combination was not measured (e.g. AWQ/GPTQ/int8 weights, or NF4 weights with a quantized cache).
    """
    w = _WEIGHTS.get(_key(weights))
    kvs = _KV.get(_key(kv))
    if w is None or kvs is None:
        return []
    data = load_results(path)
    models = data.get("models", {})
    return [_evidence(r, models) for r in data.get("rows", []) if r["weights"] == w and r["kv"] in kvs]


def quality_cell(weights: str, kv: str, path: str | None = None) -> str:
    """The `plan` quality column: "measured on SmolLM2-135M: ppl x1.03, ...; Gemma 3 270M: ..." or "" if nothing."""
    ev = evidence_for(weights, kv, path)
    if not ev:
        return ""
    return "measured, small models: " + "; ".join(e.summary() for e in ev)


def measured_configs(path: str | None = None) -> list[tuple[str, str, str]]:
    """(model key, weights, kv) of every committed row."""
    return [(r["model"], r["weights"], r["kv"]) for r in load_results(path).get("rows", [])]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def markdown_table(path: str | None = None) -> str:
    """The results table of docs/quality.md, rendered from the data (a test keeps the page in sync)."""
    data = load_results(path)
    lines = ["| model | weights | KV cache | ppl | ppl ratio | ratio past 256 | KL (nats) | top-1 agree | greedy agree "
             "(256) | first diff | repeated 4-grams | loop |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data.get("rows", []):
        m = r["metrics"]
        lines.append(
            f"| {_SHORT_LABEL.get(r['model'], r['model'])} | {r['weights']} | {r['kv']} | {m['ppl']:.2f} | "
            f"x{m['ppl_ratio']:.3f} | x{_num(m.get('ppl_ratio_after_256'), '.3f')} | {m['kl']:.4f} | "
            f"{_pct(m['top1_agreement'])} | {_pct(m['greedy_agreement'])} | "
            f"{'-' if m['first_divergence'] is None else m['first_divergence']} | {m['repeated_ngram_share']:.2f} | "
            f"{'LOOP' if m['loop'] else 'no'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m kvcalc.quality: print the table of docs/quality.md
    print(markdown_table(), end="")
