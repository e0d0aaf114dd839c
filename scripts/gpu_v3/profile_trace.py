"""Where vLLM's profile-run peak comes from: record the CUDA caching allocator's history (torch.cuda.memory
._record_memory_history, Python frames) during each `profile_run` of the model runner, and reduce it to the live
allocations at the moment the allocated total peaks, grouped by the innermost vLLM source line that allocated them.

vLLM's own `peak_activation_memory` is the torch peak of that same call less the allocation before it
(v1/worker/gpu_worker.py determine_available_memory, memory_profiling); `peak_over_entry_bytes` here is the same
quantity re-derived from the allocator's event stream, so the two can be compared.

Imported by vllm_obs.py on the GPU host (torch and vLLM present); `summarize` is pure and is tested on CPU.
"""

from __future__ import annotations

import importlib
from typing import Any

RUNNERS = (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
           ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"))
MAX_ENTRIES = 1_000_000
BIG_BYTES = 32 << 20


def _site_key(frames: list[dict[str, Any]]) -> tuple[str, str]:
    """(innermost vLLM frame, innermost frame under model_executor/models or layers) as 'path:line name'."""
    inner, model = "?", ""
    for f in frames or []:
        fn = str(f.get("filename", ""))
        i = fn.rfind("/vllm/")
        if i < 0:
            continue
        where = f"{fn[i + 1:]}:{f.get('line')} {f.get('name')}"
        if inner == "?":
            inner = where
        if not model and ("/model_executor/models/" in fn or "/model_executor/layers/" in fn):
            model = where
    return inner, model


def summarize(snapshot: dict[str, Any], entry_allocated: int, top: int = 30) -> dict[str, Any]:
    """Replay alloc / free_completed events; find the peak of (allocated at entry + net allocations); list what is
    live at the peak (only blocks allocated inside the window; blocks from before are in entry_allocated)."""
    events = [e for trace in snapshot.get("device_traces", []) for e in trace]
    net, peak, peak_i = 0, 0, -1
    for i, e in enumerate(events):
        a = e.get("action")
        if a == "alloc":
            net += int(e["size"])
        elif a == "free_completed":
            net -= int(e["size"])
        if net > peak:
            peak, peak_i = net, i
    live: dict[int, dict[str, Any]] = {}
    big: list[dict[str, Any]] = []
    for i, e in enumerate(events[:peak_i + 1]):
        a = e.get("action")
        if a == "alloc":
            live[int(e["addr"])] = e
        elif a == "free_completed":
            live.pop(int(e["addr"]), None)
    groups: dict[str, dict[str, Any]] = {}
    for e in live.values():
        inner, model = _site_key(e.get("frames") or [])
        g = groups.setdefault(inner, {"site": inner, "model_site": model, "bytes": 0, "count": 0, "sizes": {}})
        g["bytes"] += int(e["size"])
        g["count"] += 1
        g["sizes"][int(e["size"])] = g["sizes"].get(int(e["size"]), 0) + 1
    ranked = sorted(groups.values(), key=lambda g: -g["bytes"])
    for g in ranked:
        g["sizes"] = sorted(([s, n] for s, n in g["sizes"].items()), key=lambda x: -x[0] * x[1])[:4]
    for i, e in enumerate(events):
        if e.get("action") == "alloc" and int(e["size"]) >= BIG_BYTES and len(big) < 400:
            inner, model = _site_key(e.get("frames") or [])
            big.append({"i": i, "size": int(e["size"]), "site": inner, "model_site": model})
    return {"events": len(events), "entry_allocated_bytes": int(entry_allocated),
            "peak_over_entry_bytes": int(peak), "peak_event_index": peak_i,
            "live_at_peak_bytes": int(sum(int(e["size"]) for e in live.values())),
            "live_at_peak_top": ranked[:top], "big_allocations": big}


_STORE: list[list[dict[str, Any]]] = [[]]


def install(store: list[dict[str, Any]]) -> list[str]:
    """Wrap profile_run of every model runner class vLLM has (once per process); each call appends its summary to
    the store of the latest install() call, i.e. of the engine being built now."""
    import torch

    _STORE[0] = store

    hooked = []
    for mod_name, cls_name in RUNNERS:
        try:
            cls = getattr(importlib.import_module(mod_name), cls_name)
        except Exception:  # noqa: BLE001 - one runner module may not exist in this version
            continue
        orig = cls.profile_run
        if getattr(orig, "_kvobs_trace", False):
            hooked.append(f"{mod_name}.{cls_name}")
            continue

        def wrapped(self, *a, _orig=orig, _name=f"{mod_name}.{cls_name}", **k):
            torch.cuda.synchronize()
            entry = torch.cuda.memory_allocated()
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                     max_entries=MAX_ENTRIES)
            try:
                return _orig(self, *a, **k)
            finally:
                torch.cuda.synchronize()
                try:
                    snap = torch.cuda.memory._snapshot()
                    s = summarize(snap, entry)
                except Exception as exc:  # noqa: BLE001
                    s = {"error": repr(exc)[:500]}
                torch.cuda.memory._record_memory_history(enabled=None)
                s["runner"] = _name
                s["max_num_tokens"] = getattr(self, "max_num_tokens", None)
                _STORE[0].append(s)

        wrapped._kvobs_trace = True
        cls.profile_run = wrapped
        hooked.append(f"{mod_name}.{cls_name}")
    return hooked
