"""Count each catalog model's parameters with transformers' own class, built on the meta device (no weights, no
memory), and write the counts next to kvcalc's closed form: docs/validation/data/catalog_meta_params.json.

Usage: python3 scripts/catalog_meta_params.py [NAME ...]   (needs torch and transformers; the core does not)

The class is the one AutoModelForCausalLM (or, for multimodal wrappers, AutoModelForImageTextToText / AutoModel)
picks for the config's model_type; quantization_config is dropped first so the count is the logical (unquantized)
parameter count kvcalc's ModelSpec.params reports. Models whose model_type this transformers does not know are
written with "params": null and the reason, never skipped silently. tests/test_catalog_meta_params.py compares.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "validation" / "data" / "catalog_meta_params.json"
sys.path.insert(0, str(ROOT))


def count(config: dict) -> tuple[tuple[int, int, int] | None, str, str]:
    import torch
    import transformers
    from transformers import AutoConfig

    cfg = {k: v for k, v in config.items() if k not in ("quantization_config", "auto_map")}
    if isinstance(cfg.get("text_config"), dict):
        cfg["text_config"] = {k: v for k, v in cfg["text_config"].items()
                              if k not in ("quantization_config", "auto_map")}
    model_type = cfg.pop("model_type", None)
    try:
        hf = AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as exc:
        return None, "", f"transformers {transformers.__version__} has no config class: {str(exc)[:160]}"
    last = ""
    for auto in ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel"):
        try:
            with torch.device("meta"):
                model = getattr(transformers, auto).from_config(hf)
        except (ValueError, KeyError, TypeError, AttributeError, NotImplementedError, RuntimeError) as exc:
            last = f"{auto}: {type(exc).__name__}: {str(exc)[:160]}"
            continue
        # tied weights are one tensor: parameters() yields each once; e_score_correction_bias is a buffer in
        # transformers but a tensor of the checkpoint, which kvcalc counts
        buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
        # a wrapper's decoder alone (its language_model and lm_head), for the towers kvcalc does not count
        text = sum(p.numel() for n, p in model.named_parameters()
                   if ".language_model." in f".{n}" or n.startswith("lm_head."))
        return (sum(p.numel() for p in model.parameters()), buffers, text), type(model).__name__, ""
    return None, "", last


def main(names: list[str]) -> int:
    import transformers

    from kvcalc.catalog import catalog_entry, catalog_names, load_model

    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data["_about"] = {"transformers": transformers.__version__, "script": "scripts/catalog_meta_params.py",
                      "date": time.strftime("%Y-%m-%d")}
    for name in names or catalog_names():
        entry = catalog_entry(name)
        t0 = time.time()
        counted, cls, why = count(entry["config"])
        params, buffers, text = counted if counted else (None, None, None)
        spec = load_model(name)
        row = {"hf_id": entry.get("hf_id"), "class": cls, "meta_params": params, "meta_score_bias_buffers": buffers,
               "meta_text_params": text if text and not cls.endswith("ForCausalLM") else None,
               "kvcalc_params": spec.params.total, "kvcalc_vision_params": spec.vision_params}
        if why:
            row["why_none"] = why
        data[name] = row
        print(f"{name:40s} {cls:40s} {params} kvcalc {spec.params.total}+{spec.vision_params} "
              f"({time.time() - t0:.1f}s) {why}", flush=True)
    OUT.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
