"""Files a user names (config.json, GPU profile YAML), read as data: capped, regular files only, UTF-8 checked, parsed
with bounded nesting, numbers and (for YAML) no aliases or tags. Every failure is one UsageError line.

Why each edge exists (fuzz review 2026-11, T6, T7, T12-T14, H5, H7, H8):
- ``/dev/zero``, ``/dev/urandom``, FIFOs and ``/dev/stdin`` never end or block: only regular files are read, opened
  non-blocking so a FIFO without a writer cannot hang the open itself, and never more than the cap.
- Binary and UTF-16 files are refused by a strict UTF-8 decode, not by a UnicodeDecodeError traceback.
- ``[[[[...`` 200,000 deep overflows the parser's recursion and a 5,000-digit integer trips Python's digit limit:
  both are refused with a line saying so.
- ``NaN``, ``Infinity`` and ``1e400`` are read (as transformers' json.load reads them: real Mamba2 configs carry
  ``"time_step_limit": [0.0, Infinity]``, Nemotron-H for one), and refused where it matters: config_schema.py and
  hardware/schema.py take only finite numbers in every field kvcalc reads.
- YAML anchors and aliases make "billion laughs" files that expand exponentially; a profile never needs them.
- A name with a NUL byte or longer than the OS allows raises ValueError/OSError from ``os.stat``.

Leaf module: imports only errors and units (yaml lazily, inside the YAML reader).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import UsageError, shown
from .units import MiB

MAX_CONFIG_BYTES = 8 * MiB  # the largest real config.json we know (multimodal, with quantization_config) is < 100 KiB
MAX_PROFILE_BYTES = 1 * MiB  # a GPU profile is ~2 KiB
MAX_DEPTH = 64  # nesting of objects/arrays (mappings/sequences); real configs nest < 8 deep
MAX_INT_DIGITS = 30  # no count or size kvcalc reads is near 10**30; Python's own limit (4,300 digits) is too late


def _path_text(path: str | Path) -> str:
    text = os.fspath(path)
    if "\0" in text:
        raise UsageError(f"path {shown(text)} contains a NUL byte")
    return str(Path(text).expanduser())


def is_file(path: str | Path) -> bool:
    """Path.is_file() that answers False, instead of raising, for names with NUL bytes or too long for the OS."""
    try:
        return os.path.isfile(os.path.expanduser(os.fspath(path)))
    except (OSError, ValueError):
        return False


def exists(path: str | Path) -> bool:
    try:
        return os.path.exists(os.path.expanduser(os.fspath(path)))
    except (OSError, ValueError):
        return False


def is_dir(path: str | Path) -> bool:
    try:
        return os.path.isdir(os.path.expanduser(os.fspath(path)))
    except (OSError, ValueError):
        return False


def read_text(path: str | Path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of a regular file of at most max_bytes; anything else is a one-line UsageError."""
    name = _path_text(path)
    label = f"{what} {shown(os.fspath(path))}"
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UsageError(f"cannot read {label}: not found") from None
    except OSError as exc:
        raise UsageError(f"cannot read {label}: {exc.strerror or type(exc).__name__}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"{label} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise UsageError(f"{label} is not a regular file (a device, pipe or socket); pass a file on disk")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 * MiB, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UsageError(f"cannot read {label}: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise UsageError(f"{label} is larger than {max_bytes // MiB} MiB, the most kvcalc reads for a {what}")
    data = b"".join(chunks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})") from None
    return text.removeprefix("\ufeff")  # a byte-order mark is legal UTF-8; json.loads refuses it


# ---------------------------------------------------------------------------------------------------------------------
# JSON


class _BadNumber(Exception):
    pass


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _BadNumber(f"an integer of {len(text.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _depth_ok(value: Any, limit: int) -> bool:
    """True when objects/arrays nest at most `limit` deep (iterative: deep input cannot overflow this check)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def parse_json(text: str, label: str) -> Any:
    """json.loads with bounded integers and bounded nesting; errors are one line naming label. NaN and Infinity are
    read as Python's json reads them; the schemas refuse them in the fields kvcalc uses."""
    try:
        value = json.loads(text, parse_int=_bounded_int)
    except _BadNumber as exc:
        raise UsageError(f"{label} holds {exc}") from None
    except RecursionError:
        raise UsageError(f"{label} nests objects or arrays deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{label} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # e.g. the interpreter's own integer-digit limit, should the hook be bypassed
        raise UsageError(f"{label} is not valid JSON: {shown(str(exc), 80)}") from None
    if isinstance(value, (dict, list)) and not _depth_ok(value, MAX_DEPTH):
        raise UsageError(f"{label} nests objects or arrays deeper than {MAX_DEPTH} levels")
    return value


def load_json(path: str | Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    return parse_json(read_text(path, what, max_bytes), f"{what} {shown(os.fspath(path))}")


# ---------------------------------------------------------------------------------------------------------------------
# YAML

# The tags a plain YAML 1.1 document resolves to by itself; an explicit tag (!!python/object, !custom) is refused.
_YAML_CORE = "tag:yaml.org,2002:"
_YAML_PLAIN_TAGS = {_YAML_CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")}


def parse_yaml(text: str, label: str, *, trusted: bool = False) -> Any:
    """YAML as data. A user's file (trusted=False) is first walked as events: no anchors or aliases (billion laughs),
    no explicit tags (python/object and friends), nesting at most MAX_DEPTH. Shipped files skip the walk (start-up)."""
    import yaml  # deferred: only loading profiles needs it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # yaml.safe_load, C-accelerated when available
    try:
        if not trusted:
            depth = 0
            for event in yaml.parse(text, Loader=loader):
                if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                    mark = event.start_mark
                    raise UsageError(f"{label} uses a YAML anchor or alias (line {mark.line + 1}); "
                                     "write the values out: kvcalc reads profiles as plain data")
                tag = getattr(event, "tag", None)
                if tag is not None and tag not in _YAML_PLAIN_TAGS:
                    raise UsageError(f"{label} uses the YAML tag {shown(tag, 40)} (line {event.start_mark.line + 1}); "
                                     "kvcalc reads profiles as plain data")
                if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_INT_DIGITS and not event.style \
                        and event.value.lstrip("+-").replace("_", "").isdigit():
                    raise UsageError(f"{label} holds an integer of {len(event.value):,} characters "
                                     f"(line {event.start_mark.line + 1}; at most {MAX_INT_DIGITS} digits)")
                if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                    depth += 1
                    if depth > MAX_DEPTH:
                        raise UsageError(f"{label} nests mappings or lists deeper than {MAX_DEPTH} levels")
                elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                    depth -= 1
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except UsageError:
        raise
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or (str(exc).strip().splitlines() or ["syntax error"])[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise UsageError(f"{label} is not valid YAML: {shown(problem, 100, quote=False)}{where}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a timestamp out of range, a 5000-digit int
        raise UsageError(f"{label} holds a value YAML cannot read: {shown(str(exc), 80, quote=False)}") from None
