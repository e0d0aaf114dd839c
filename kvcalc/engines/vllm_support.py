"""Which vLLM release first serves a model: per-version serve gates, as data (kvcalc/data/vllm_support.yaml).

A plan for a --vllm-version older than the first release that serves the model's architecture (or one of its layer
kinds) is still made, so the user planning an old deployment sees the memory it would take, but every vLLM row
says "no" and why: the release that first serves it and the source (release notes, or a public log of the release
before refusing the architecture). `fit` and `search`, which have no row to say it in, refuse with that line.

Keys are config.json model_type values: the wrapper's for multimodal checkpoints (ModelSpec.wrapper_type: gemma3,
llama4, qwen3_5...), else the text model's. Pure data and small functions; no vLLM import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..layers import ChunkedLocal, MambaState, MultiLatentAttention, flatten
from .vllm_versions import release_of, version_key


@dataclass(frozen=True)
class ServeGate:
    key: str  # the model_type or layer kind the gate is for
    what: str  # what the user reads: "gpt_oss (GptOssForCausalLM)"
    since: str  # first vLLM release that serves it
    source: str

    @property
    def url(self) -> str:
        """The source's first address (release notes), for one-line messages; the whole source is in docs."""
        match = re.search(r"https://[^\s,)]+", self.source)
        return match.group(0) if match else self.source


@lru_cache(maxsize=1)
def support_table() -> dict:
    import yaml

    return yaml.safe_load(resources.files("kvcalc").joinpath("data/vllm_support.yaml").read_text())


def architecture_gate(model_type: str) -> ServeGate | None:
    row = support_table()["architectures"].get(model_type)
    if row is None:
        return None
    return ServeGate(model_type, f"{model_type} ({row['architecture']})", str(row["since"]), row["source"])


def layer_kinds_of(layers) -> set[str]:
    """The gated layer kinds among a spec's layers: gdn, mla_indexer, chunked."""
    kinds = set()
    for layer in flatten(layers):
        if isinstance(layer, MambaState) and layer.mixer == "gdn":
            kinds.add("gdn")
        elif isinstance(layer, MultiLatentAttention) and layer.index_head_dim:
            kinds.add("mla_indexer")
        elif isinstance(layer, ChunkedLocal):
            kinds.add("chunked")
    return kinds


def serve_gates(spec) -> list[ServeGate]:
    """Every gate that applies to `spec`: its architecture's (the wrapper's for multimodal checkpoints, else the
    text model's) and its gated layer kinds'."""
    gates = []
    arch = architecture_gate(getattr(spec, "wrapper_type", "") or spec.model_type)
    if arch is None and getattr(spec, "wrapper_type", ""):
        arch = architecture_gate(spec.model_type)
    if arch is not None:
        gates.append(arch)
    kinds = support_table()["layer_kinds"]
    for kind in sorted(layer_kinds_of(spec.layers)):
        row = kinds[kind]
        gates.append(ServeGate(kind, row["what"], str(row["since"]), row["source"]))
    return gates


def unserved_gate(spec, version: str) -> ServeGate | None:
    """The gate that keeps vLLM `version` from serving `spec` (the newest such release), or None when it serves it."""
    key = version_key(version)
    blocking = [g for g in serve_gates(spec) if key < version_key(g.since)]
    return max(blocking, key=lambda g: version_key(g.since)) if blocking else None


def unserved_reason(spec, version: str) -> str | None:
    """One line: why vLLM `version` cannot serve `spec`, the first release that does and the source; None if it can."""
    gate = unserved_gate(spec, version)
    if gate is None:
        return None
    return (f"vLLM {release_of(version)} cannot serve {spec.name}: {gate.what} is first served in vLLM {gate.since} "
            f"({gate.url})")


def table_markdown() -> str:
    """The gates as markdown tables (docs/method.md)."""
    table = support_table()
    lines = ["| model_type | vLLM architecture | first served | source |", "|---|---|---|---|"]
    for key, row in sorted(table["architectures"].items(), key=lambda kv: (version_key(str(kv[1]["since"])), kv[0])):
        lines.append(f"| {key} | {row['architecture']} | {row['since']} | {row['source']} |")
    lines += ["", "| layer kind | what | first served | source |", "|---|---|---|---|"]
    for key, row in table["layer_kinds"].items():
        lines.append(f"| {key} | {row['what']} | {row['since']} | {row['source']} |")
    return "\n".join(lines)
