"""Built-in model facts: one JSON file per model holding its config.json (unchanged field names), the hub id, and the
published parameter count with its source. Lets `--model llama-3.2-3b` work offline."""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError, shown
from ..input_files import exists, is_dir
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
        # shipped configs skip the schema at run time (start-up); tests/test_catalog.py holds them to it
        return spec_from_config(entry["config"], name=short, source=f"catalog ({entry.get('hf_id', short)})",
                                trusted=True)
    if exists(key) or key.endswith(".json"):
        return spec_from_config(load_config_file(key), name=Path(key).stem if key.endswith(".json") else Path(key).name,
                                source=f"file {key}")
    if _HUB_ID.match(key):
        if is_dir(key.split("/")[0]):  # "models/llama3" with a local models/ folder: a typo, not a hub id
            raise UsageError(f"no such file or folder {shown(key)} (and {shown(key.split('/')[0])} is a local folder, "
                             "so it is not read as a hub id)")
        return spec_from_config(_hub_config(key), name=key, source=f"hub {key}")
    close = difflib.get_close_matches(key.lower(), catalog_names(), n=3, cutoff=0.4) if len(key) <= 100 else []
    hint = (f"; did you mean {', '.join(close)}?" if close
            else f"; `kvcalc models` lists the {len(catalog_names())} built in")
    raise UsageError(f"unknown model {shown(key)} (not in the catalog, not a file){hint}")


# A hub repository id: owner/name, each part letters, digits, '-', '_', '.' (huggingface_hub's validate_repo_id).
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")



# Seconds the hub may take to hand over a config.json (two small requests). huggingface_hub alone retries a failed DNS
# lookup for ~24 s and waits ~400 s on an endpoint that accepts but never answers (fuzz review H9).
HUB_TIMEOUT_S = 4.0


def _hub_timeout() -> float:
    try:
        value = float(os.environ.get("KVCALC_HUB_TIMEOUT", HUB_TIMEOUT_S))
    except ValueError:
        return HUB_TIMEOUT_S
    return value if 0 < value <= 600 else HUB_TIMEOUT_S


def _offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it, also when set after it was imported."""
    return any(os.environ.get(k, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_config(hub_id: str) -> dict[str, Any]:
    """config.json of a hub id: the local hub cache first (no network), then the hub, within _hub_timeout() seconds
    and without huggingface_hub's retry chatter; never the network when HF_HUB_OFFLINE is set."""
    try:
        from huggingface_hub import hf_hub_download  # optional: only for ids outside the catalog
    except ImportError:
        raise UsageError(
            f"{shown(hub_id)} is not in the catalog and huggingface_hub is not installed; "
            "pass a local config.json with --model PATH"
        ) from None
    try:
        return load_config_file(hf_hub_download(hub_id, "config.json", local_files_only=True))
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - not in the cache (or a broken cache entry): ask the hub
        pass
    if _offline():
        raise UsageError(f"{shown(hub_id)} is not in the catalog nor in the local hub cache, and HF_HUB_OFFLINE is "
                         "set; pass a local config.json with --model PATH")
    timeout = _hub_timeout()
    result: dict[str, Any] = {}

    def fetch() -> None:
        try:
            result["path"] = hf_hub_download(hub_id, "config.json", etag_timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - reported below as one line
            result["error"] = exc

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # "Retrying in 8s [Retry 4/5]" x 12 lines
    worker = threading.Thread(target=fetch, name="kvcalc-hub", daemon=True)  # daemon: exit does not wait for it
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise UsageError(f"no answer from the hub for config.json of {shown(hub_id)} within {timeout:g} s; offline? "
                         "pass a local config.json with --model PATH (or raise KVCALC_HUB_TIMEOUT)")
    if "error" in result:
        raise UsageError(f"cannot fetch config.json of {shown(hub_id)} from the hub "
                         f"({type(result['error']).__name__}); offline? pass a local config.json with --model PATH")
    return load_config_file(result["path"])
