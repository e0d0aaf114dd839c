"""The shipped GPU profiles and name lookup: by id, alias or driver-reported name, or a user's own YAML file.

The shipped profiles live in ``kvcalc/hardware_profiles/<id>.yaml`` and are validated by the test suite; here they are
only read (fast start-up). A user's file is checked against every rule of schema.py, which is imported only then:
building pydantic models costs more start-up time than a whole `kvcalc plan`.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

from ..errors import UsageError, shown
from ..input_files import MAX_PROFILE_BYTES, exists, parse_yaml, read_text
from .profile import ID_PATTERN, GpuProfile, canonical_dtype, normalize_name

# Leading words dropped when matching a typed or driver-reported name ("NVIDIA GeForce RTX 4090" -> "rtx-4090").
_VENDOR_WORDS = ("nvidia", "amd", "geforce", "tesla", "instinct", "radeon", "quadro")


def _lookup_keys(name: str) -> list[str]:
    """Keys to try for a typed name, most specific first: as typed, without vendor words, without dashes."""
    key = normalize_name(name)
    keys = [key]
    stripped = key
    changed = True
    while changed:
        changed = False
        for word in _VENDOR_WORDS:
            if stripped.startswith(word + "-"):
                stripped = stripped[len(word) + 1:]
                changed = True
    if stripped and stripped not in keys:
        keys.append(stripped)
    for k in list(keys):
        compact = k.replace("-", "")
        if compact and compact not in keys:
            keys.append(compact)
    return keys


def _read_yaml(text: str, origin: str, *, trusted: bool = False) -> dict:
    """A profile's mapping. A user's file is read as plain data (input_files.parse_yaml: no anchors, aliases or tags,
    bounded nesting); shipped files are trusted and go straight to the C loader."""
    data = parse_yaml(text, f"GPU profile {origin}", trusted=trusted)
    if not isinstance(data, dict):
        raise UsageError(f"GPU profile {origin} must be a YAML mapping of fields (id, name, memory_total_bytes, ...)")
    return data


def _parse_profile(text: str, origin: str, default_id: str | None = None) -> GpuProfile:
    """A user's file: every rule of schema.GpuProfileSchema is checked."""
    from .schema import validate_profile

    data = _read_yaml(text, origin)
    if default_id is not None and "id" not in data:
        data["id"] = normalize_name(default_id)[:64]
    return validate_profile(data, origin)


def _shipped_profile(text: str, origin: str) -> GpuProfile:
    """A shipped file, validated by the test suite; only normalized here, to keep start-up fast."""
    data = _read_yaml(text, origin, trusted=True)
    data["aliases"] = tuple(normalize_name(a) for a in data.get("aliases") or ())
    data["flops"] = {canonical_dtype(k): v for k, v in (data.get("flops") or {}).items()}
    return GpuProfile(**data)


def load_gpu_file(path: str | Path) -> GpuProfile:
    """Read a user's own GPU profile YAML (same fields as the shipped ones; id defaults to the file stem).

    Any problem (missing file, not a regular file, over 1 MiB, not UTF-8, bad YAML, failed validation) is raised as a
    one-line UsageError.
    """
    text = read_text(path, "GPU profile", MAX_PROFILE_BYTES)
    return _parse_profile(text, shown(os.fspath(path), 120, quote=False), default_id=Path(os.fspath(path)).stem)


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[tuple[GpuProfile, ...], dict[str, str]]:
    """All shipped profiles sorted by id, and an index from every lookup key (id, alias, compact forms) to id."""
    folder = resources.files("kvcalc") / "hardware_profiles"
    profiles: list[GpuProfile] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        stem = entry.name[: -len(".yaml")]
        profile = _shipped_profile(entry.read_text(encoding="utf-8"), f"hardware_profiles/{entry.name}")
        if profile.id != stem:
            raise UsageError(f"shipped GPU profile hardware_profiles/{entry.name} has id {profile.id!r}; expected {stem!r}")
        profiles.append(profile)
    profiles.sort(key=lambda g: g.id)

    index: dict[str, str] = {}

    def claim(key: str, gpu_id: str) -> None:
        owner = index.setdefault(key, gpu_id)
        if owner != gpu_id:
            raise UsageError(f"GPU name {key!r} is claimed by both {owner} and {gpu_id} in hardware_profiles/")

    # ids and aliases first (exact), then their dash-less forms
    for g in profiles:
        for key in (g.id, *g.aliases):
            claim(key, g.id)
    for g in profiles:
        for key in (g.id, *g.aliases):
            compact = key.replace("-", "")
            if compact not in index:
                index[compact] = g.id
            elif index[compact] != g.id:
                raise UsageError(f"GPU names {key!r} and {compact!r} collide across profiles in hardware_profiles/")
    return tuple(profiles), index


@functools.lru_cache(maxsize=None)
def _shipped_by_id(key: str) -> GpuProfile | None:
    if len(key) > 64 or not ID_PATTERN.match(key):  # also keeps over-long names away from the file system
        return None
    entry = resources.files("kvcalc") / "hardware_profiles" / f"{key}.yaml"
    if not entry.is_file():
        return None
    return _shipped_profile(entry.read_text(encoding="utf-8"), f"hardware_profiles/{entry.name}")


def list_gpus() -> list[GpuProfile]:
    """Every shipped GPU profile, sorted by id."""
    return list(_shipped()[0])


def _suggest(name: str, index: dict[str, str], limit: int = 3) -> list[str]:
    import difflib

    key = normalize_name(name)
    candidates = sorted(index)
    found: list[str] = []
    # names that start with what was typed ("h10" -> h100-*) first: difflib ranks short prefixes low
    if len(key) >= 2:
        for k in candidates:
            if k.startswith(key) and index[k] not in found:
                found.append(index[k])
    for probe in _lookup_keys(name):
        for match in difflib.get_close_matches(probe, candidates, n=10, cutoff=0.5):
            if index[match] not in found:
                found.append(index[match])
    return found[:limit]


def get_gpu(name: str | Path | GpuProfile) -> GpuProfile:
    """A GPU profile by id, alias or driver-reported name (case, spaces and underscores do not matter),
    or by the path of a user's YAML file (ending in .yaml/.yml, or any existing file).

    Unknown names raise UsageError with the nearest known names. A GpuProfile is returned as is.
    """
    if isinstance(name, GpuProfile):
        return name
    if isinstance(name, Path):
        return load_gpu_file(name)
    text = str(name).strip()
    if not text:
        raise UsageError("no GPU given; try one of: " + ", ".join(g.id for g in list_gpus()))
    if text.lower().endswith((".yaml", ".yml")) or ("/" in text and exists(text)):
        return load_gpu_file(text)
    if len(text) > 200 or "\0" in text:
        raise UsageError(f"unknown GPU {shown(text)}: not a GPU name (`kvcalc gpus` lists them) nor a .yaml file")
    for key in _lookup_keys(text):  # the common case, an exact id: read that one file only (start-up time)
        profile = _shipped_by_id(key)
        if profile is not None:
            return profile
    profiles, index = _shipped()
    by_id = {g.id: g for g in profiles}
    for key in _lookup_keys(text):
        if key in index:
            return by_id[index[key]]
    suggestions = _suggest(text, index)
    if suggestions:
        raise UsageError(f"unknown GPU {shown(text)}; did you mean {', '.join(suggestions)}? (`kvcalc gpus` lists all)")
    raise UsageError(
        f"unknown GPU {shown(text)}; known GPUs: {', '.join(by_id)} (or pass the path of your own profile .yaml)"
    )
