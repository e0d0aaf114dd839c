"""Built-in model facts: one JSON file per model holding its config.json (unchanged field names), the hub id, and the
published parameter count with its source. Lets `--model llama-3.2-3b` work offline."""

from __future__ import annotations

import difflib
import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..model import ModelSpec, load_config_file, spec_from_config

DEFAULT_MODEL = "llama-3.2-3b"


@lru_cache(maxsize=None)
def _entries() -> dict[str, dict[str, Any]]:
    folder = resources.files(__package__)
    out = {}
    for item in folder.iterdir():
        if item.name.endswith(".json"):
            out[item.name[: -len(".json")]] = json.loads(item.read_text())
    return out


def catalog_names() -> list[str]:
    return sorted(_entries())


def catalog_entry(name: str) -> dict[str, Any]:
    return _entries()[name]


def _by_hub_id(hub_id: str) -> str | None:
    for short, entry in _entries().items():
        if entry.get("hf_id", "").lower() == hub_id.lower():
            return short
    return None


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog short name, a hub id of a catalog model, a local config.json (or its folder), or a hub id fetched
    through huggingface_hub when it is installed and online."""
    key = name_or_path.strip()
    short = key.lower() if key.lower() in _entries() else _by_hub_id(key)
    if short:
        entry = _entries()[short]
        return spec_from_config(entry["config"], name=short, source=f"catalog ({entry.get('hf_id', short)})")
    if os.path.exists(key) or key.endswith(".json"):
        return spec_from_config(load_config_file(key), name=Path(key).stem if key.endswith(".json") else Path(key).name,
                                source=f"file {key}")
    if "/" in key and not key.startswith((".", "/")):
        return spec_from_config(_hub_config(key), name=key, source=f"hub {key}")
    close = difflib.get_close_matches(key.lower(), catalog_names(), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; built in: {', '.join(catalog_names())}"
    raise UsageError(f"unknown model {key!r} (not in the catalog, not a file){hint}")


def _hub_config(hub_id: str) -> dict[str, Any]:
    try:
        from huggingface_hub import hf_hub_download  # optional: only for ids outside the catalog
    except ImportError:
        raise UsageError(
            f"{hub_id!r} is not in the catalog and huggingface_hub is not installed; "
            "pass a local config.json with --model PATH"
        ) from None
    try:
        return load_config_file(hf_hub_download(hub_id, "config.json"))
    except UsageError:
        raise
    except Exception as exc:  # offline, gated, missing: all the same to the user
        raise UsageError(f"cannot fetch config.json of {hub_id!r} from the hub ({type(exc).__name__}); "
                         "offline? pass a local config.json with --model PATH") from None
