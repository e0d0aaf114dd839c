#!/usr/bin/env python3
"""transformers decode on the GPU host (random weights, real shapes): the Llama-3.2-3B shape at batch 1 and 8, prompt
512, with the default cache (DynamicCache) and a quantized cache (QuantizedCache, hqq backend, 4 bits, transformers'
defaults q_group_size 64, residual_length 128). Observations only, one JSONL row per (cache, batch).

Method: one full-size warm-up generate; then t1 = generate(max_new_tokens=1) and tN = generate(max_new_tokens=N,
min_new_tokens=N), each timed with torch.cuda.synchronize() around it, greedy; decode step = (tN - t1) / (N - 1).
Peak memory: torch.cuda.max_memory_allocated during the tN generate, minus the allocation before it.

    python3 hf_obs.py --out hf.jsonl [--deadline EPOCH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--deadline", type=float, default=None)
    p.add_argument("--config", default=str(HERE / "configs" / "llama-3.2-3b.json"))
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt", type=int, default=512)
    args = p.parse_args()
    deadline = args.deadline or time.time() + 10**6

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
    try:
        import hqq

        versions["hqq"] = getattr(hqq, "__version__", "?")
    except Exception as exc:  # noqa: BLE001
        versions["hqq"] = f"not importable: {exc!r}"
    raw = json.loads(Path(args.config).read_text())
    raw.pop("_source", None)
    model_type = raw.pop("model_type")
    raw.pop("architectures", None)
    cfg = AutoConfig.for_model(model_type, **raw)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    load_s = time.perf_counter() - t0
    weights_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    caches = [("default", {}), ("quantized-hqq-4", {"cache_implementation": "quantized",
                                                    "cache_config": {"backend": "hqq", "nbits": 4}})]
    g = torch.Generator(device="cuda").manual_seed(0)
    n = args.new_tokens
    for name, kw in caches:
        for batch in (1, 8):
            row = {"engine": "transformers", "case_id": f"hf-3b-{name}-b{batch}", "versions": versions,
                   "settings": {"config": Path(args.config).name, "cache": name, "batch": batch,
                                "prompt_len": args.prompt, "new_tokens": n, "dtype": "bfloat16",
                                "generate_kwargs": {k: v for k, v in kw.items()}},
                   "model_load_s": round(load_s, 2), "weights_bytes": int(weights_bytes),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            if time.time() + 60 > deadline:
                row["status"] = "skipped"
                row["message"] = "time budget"
                _write(args.out, row)
                continue
            try:
                ids = torch.randint(10, cfg.vocab_size - 10, (batch, args.prompt), device="cuda", generator=g)
                mask = torch.ones_like(ids)

                def gen(k):
                    extra = {}
                    if kw:
                        extra = {"cache_implementation": kw["cache_implementation"],
                                 "cache_config": dict(kw["cache_config"])}  # generate() mutates it: fresh copy
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=k, min_new_tokens=k,
                                         do_sample=False, pad_token_id=0, **extra)
                    torch.cuda.synchronize()
                    return time.perf_counter() - t, out

                gen(n)  # warm-up, full size
                t1, _ = gen(1)
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                tn, out = gen(n)
                peak = torch.cuda.max_memory_allocated()
                produced = int(out.shape[1] - args.prompt)
                step = (tn - t1) / (n - 1)
                row.update(status="ok", t1_s=round(t1, 4), tN_s=round(tn, 4), produced_tokens=produced,
                           decode_ms_per_step=round(step * 1000, 3),
                           decode_tokens_per_s=round(batch / step, 2) if step > 0 else None,
                           allocated_before_bytes=int(base), peak_allocated_bytes=int(peak),
                           peak_increment_bytes=int(peak - base),
                           method="decode step = (t(max_new_tokens=N) - t(1)) / (N-1), cuda-synchronized, after "
                                  "one full-size warm-up; greedy, min_new_tokens=N")
            except Exception as exc:  # noqa: BLE001
                row.update(status="error", message=repr(exc)[:2000])
            _write(args.out, row)
            print(row["case_id"], row.get("status"), row.get("decode_ms_per_step"), row.get("message", "")[:200],
                  flush=True)
            torch.cuda.empty_cache()
    return 0


def _write(path: str, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


if __name__ == "__main__":
    sys.exit(main())
