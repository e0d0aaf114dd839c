"""Built-in model facts: one JSON file per model holding its config.json (unchanged field names), the hub id, and the
published parameter count with its source. Lets `--model llama-3.2-3b` work offline."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import UsageError, shown
from ..input_files import exists, is_dir
from ..model import ModelSpec, spec_from_config

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
    # "org/name@revision" asks for that revision from the hub, not the catalog's pinned copy
    short = key.lower() if key.lower() in _entries() else (None if "@" in key else _by_hub_id(key))
    if short:
        entry = _entries()[short]
        # shipped configs skip the schema at run time (start-up); tests/test_catalog.py holds them to it
        spec = spec_from_config(entry["config"], name=short, source=f"catalog ({entry.get('hf_id', short)})",
                                trusted=True)
        return replace(spec, checkpoint=catalog_checkpoint(entry))
    if exists(key) or key.endswith(".json"):
        return _from_checkpoint(key)
    if _HUB_ID.match(key):
        if is_dir(key.split("/")[0]):  # "models/llama3" with a local models/ folder: a typo, not a hub id
            raise UsageError(f"no such file or folder {shown(key)} (and {shown(key.split('/')[0])} is a local folder, "
                             "so it is not read as a hub id)")
        return _from_checkpoint(key)
    close = difflib.get_close_matches(key.lower(), catalog_names(), n=3, cutoff=0.4) if len(key) <= 100 else []
    hint = (f"; did you mean {', '.join(close)}?" if close
            else f"; `kvcalc models` lists the {len(catalog_names())} built in")
    raise UsageError(f"unknown model {shown(key)} (not in the catalog, not a file){hint}")


def load_catalog_or_hub(name: str, allow_hub: bool) -> ModelSpec:
    """A catalog model (short name or hub id), or with allow_hub a hub id read from the hub cache or the hub; never a
    local file or folder, whatever the text (the web API loads models this way). The refusal is the same line
    whether or not a file of that name exists, so it tells nothing about the server's files."""
    key = str(name).strip()
    short = key.lower() if key.lower() in _entries() else _by_hub_id(key)
    if short:
        return load_model(short)
    if allow_hub and _HUB_ID.match(key) and ".." not in key:
        return _from_hub(key)
    close = difflib.get_close_matches(key.lower(), catalog_names(), n=3, cutoff=0.4) if len(key) <= 100 else []
    hint = f"; did you mean {', '.join(close)}?" if close else "; GET /api/models lists the catalog"
    if _HUB_ID.match(key):
        raise UsageError(f"model {shown(key[:100])} is not in the catalog, and this server reads no hub ids (start "
                         "it with `kvcalc serve --allow-hub`, or paste the model's config.json)" + (hint if close else ""))
    raise UsageError(f"unknown model {shown(key[:100])}: the web page takes catalog names"
                     f"{' and hub ids' if allow_hub else ''}, never paths{hint}")


# A hub repository id: owner/name, each part letters, digits, '-', '_', '.' (huggingface_hub's validate_repo_id).
# An optional "@revision" (branch, tag or commit) follows; checkpoint.split_revision checks it.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}(?:@.{1,200})?$")



def _from_hub(key: str) -> ModelSpec:
    """A hub id from the hub cache or the hub (checkpoint.load_hub_checkpoint), never a local path."""
    from ..checkpoint import load_hub_checkpoint

    cfg, name, ck = load_hub_checkpoint(key)
    return replace(spec_from_config(cfg, name=name, source=ck.origin), checkpoint=ck)


def _from_checkpoint(key: str) -> ModelSpec:
    """A local checkpoint folder, config.json or hub id (checkpoint.py reads its quantization and weight bytes)."""
    from ..checkpoint import load_checkpoint

    cfg, name, ck = load_checkpoint(key)
    return replace(spec_from_config(cfg, name=name, source=ck.origin), checkpoint=ck)


def catalog_checkpoint(entry: dict[str, Any]):
    """The checkpoint format a catalog entry ships in: its config's quantization_config (or the ModelOpt
    hf_quant_config.json the entry carries)."""
    from ..checkpoint import Checkpoint
    from ..quant_config import find_quant_config, parse_scheme

    scheme = parse_scheme(find_quant_config(entry["config"]), entry.get("hf_quant_config"))
    return Checkpoint(f"catalog {entry.get('hf_id', '')}".strip(), scheme)
