"""Write catalog entries from the config.json files ai-dynamo/aiconfigurator vendors (model_configs/), verbatim.

Usage: python3 scripts/catalog_from_aic.py AIC_GIT_DIR SHORT=ORG--NAME [...]
AIC_GIT_DIR is a clone (bare is fine) of https://github.com/ai-dynamo/aiconfigurator; the commit read is its HEAD and
every entry's config_source names that commit, so the text can be re-read. The config is copied unchanged (key order
kept); a ModelOpt hf_quant_config.json beside it is carried as hf_quant_config. The parameter count starts as
kvcalc's closed form (published_params null); scripts/catalog_meta_params.py checks it against transformers' class on
the meta device.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FOLDER = "aic-core/src/aiconfigurator_core/model_configs"
CATALOG = Path(__file__).resolve().parent.parent / "kvcalc" / "catalog"


def _show(git_dir: str, commit: str, path: str) -> str | None:
    run = subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True)
    return run.stdout if run.returncode == 0 else None


def main(argv: list[str]) -> int:
    git_dir, pairs = argv[0], argv[1:]
    commit = subprocess.run(["git", "-C", git_dir, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    base = f"https://github.com/ai-dynamo/aiconfigurator/blob/{commit}/{FOLDER}"
    for pair in pairs:
        short, stem = pair.split("=", 1)
        text = _show(git_dir, commit, f"{FOLDER}/{stem}_config.json")
        if text is None:
            print(f"{stem}: no config in {commit}", file=sys.stderr)
            return 1
        entry = {"hf_id": stem.replace("--", "/", 1), "published_params": None,
                 "params_source": "no citable hub total: kvcalc's closed form from config.json (ModelSpec.params)",
                 "config_source": f"{base}/{stem}_config.json"}
        quant = _show(git_dir, commit, f"{FOLDER}/{stem}_hf_quant_config.json")
        if quant is not None:
            entry["hf_quant_config"] = json.loads(quant)
            entry["hf_quant_config_source"] = f"{base}/{stem}_hf_quant_config.json"
        entry["config"] = json.loads(text)
        (CATALOG / f"{short}.json").write_text(json.dumps(entry, indent=1, ensure_ascii=False) + "\n")
        print(f"{short}.json <- {stem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
