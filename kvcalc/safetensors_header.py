"""Read the header of a .safetensors file: the exact dtype and shape of every tensor, without reading the tensors.

The format (https://github.com/huggingface/safetensors, README "Format"): 8 bytes, a little-endian unsigned 64-bit
integer N; then N bytes of UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets into the byte buffer that follows the header) plus an optional "__metadata__" object of strings; then the
buffer. We parse it ourselves (struct + json): no torch, no safetensors package, and a header is at most 100 MiB
(the safetensors library's own limit is 100,000,000 bytes, MAX_HEADER_SIZE in safetensors/src/tensor.rs), so a
corrupt length cannot make kvcalc read gigabytes.

Every tensor's byte count is checked against its dtype x shape and its data_offsets, the ranges must be disjoint and
inside the file's buffer, and a tensor name may appear once (the safetensors library refuses the same: InvalidOffset,
duplicate keys), so a header that lies is refused with one line naming the file and the tensor.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from typing import NamedTuple

from .errors import UsageError, shown

MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_TENSORS = 1_000_000  # DeepSeek-V3 has ~92,000 tensors over 163 files

# bits per element of the safetensors dtypes (safetensors/src/tensor.rs, enum Dtype; F4/F6 are the sub-byte types
# added in safetensors 0.6 and counted in bits there too)
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


class TensorEntry(NamedTuple):  # a NamedTuple: ~90,000 of them for a DeepSeek-V3 folder, built 3x faster
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def tensor_nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    bits = DTYPE_BITS[dtype] * math.prod(shape)
    return -(-bits // 8)


def _fail(path: str, why: str) -> UsageError:
    return UsageError(f"safetensors file {shown(os.path.basename(path))}: {why}")


def read_header(path: str) -> list[TensorEntry]:
    """The tensors a .safetensors file holds, from its header alone. Any inconsistency is a one-line UsageError."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _fail(path, f"cannot open ({exc.strerror or type(exc).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _fail(path, "not a regular file")
        size = st.st_size
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise _fail(path, f"{size} bytes, too short for the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES:
            raise _fail(path, f"header length {n:,} bytes is over the {MAX_HEADER_BYTES // 2**20} MiB limit "
                              "(not a safetensors file, or a corrupt one)")
        if 8 + n > size:
            raise _fail(path, f"header length {n:,} bytes runs past the end of the {size:,}-byte file")
        raw = os.pread(fd, n, 8)
    except OSError as exc:
        raise _fail(path, f"cannot read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    if len(raw) != n:
        raise _fail(path, "the file shrank while it was read")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise _fail(path, f"header names {shown(str(exc), 60)} twice") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _fail(path, f"header is not valid JSON ({shown(first, 80, quote=False)})") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    if len(header) > MAX_TENSORS:
        raise _fail(path, f"header lists {len(header):,} tensors (more than {MAX_TENSORS:,})")
    buffer = size - 8 - n
    out: list[TensorEntry] = []
    ranges: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            if info is not None and not isinstance(info, dict):
                raise _fail(path, "__metadata__ is not an object")
            continue
        out.append(_entry(path, name, info, buffer, ranges))
    _check_disjoint(path, ranges)
    return out


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """json's object hook: a key given twice is an error (json.loads would keep the last one silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out


def _check_disjoint(path: str, ranges: list[tuple[int, int, str]]) -> None:
    """No two tensors share a byte: 10,000 tensors on one 2 MiB range would count 20 GB of weights in a 3 MB
    file. Empty tensors (begin == end) hold no byte and may sit anywhere."""
    ranges.sort()
    last_end, last_name = 0, ""
    for begin, end, name in ranges:
        if begin == end:
            continue
        if begin < last_end:
            raise _fail(path, f"tensor {shown(name, 60)} (bytes {begin:,}..{end:,}) overlaps tensor "
                              f"{shown(last_name, 60)} (ending at byte {last_end:,}): not a safetensors file a "
                              "library would load")
        last_end, last_name = end, name


def _entry(path: str, name: str, info: object, buffer: int,
           ranges: list[tuple[int, int, str]] | None = None) -> TensorEntry:
    """One tensor, checked. The common case runs without building any message (a DeepSeek-V3-sized checkpoint
    has ~90,000 tensors); anything unusual goes through _checked_entry, which names what is wrong."""
    try:
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]  # type: ignore[index]
        bits = DTYPE_BITS[dtype]
        if type(shape) is list and len(shape) <= 16 and type(begin) is int and type(end) is int:
            elements = 1
            for d in shape:
                if type(d) is not int or not 0 <= d < 2**48:
                    break
                elements *= d
            else:
                nbytes = -(-bits * elements // 8)
                if 0 <= begin <= end <= buffer and end - begin == nbytes:
                    if ranges is not None:
                        ranges.append((begin, end, name))
                    return TensorEntry(name, dtype, tuple(shape), nbytes)
    except (TypeError, KeyError, ValueError):
        pass
    entry = _checked_entry(path, name, info, buffer)
    if ranges is not None:
        begin, end = info["data_offsets"]  # type: ignore[index]  # checked just now
        ranges.append((begin, end, name))
    return entry


def _checked_entry(path: str, name: str, info: object, buffer: int) -> TensorEntry:
    label = shown(name, 60)
    if not isinstance(info, dict):
        raise _fail(path, f"tensor {label} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise _fail(path, f"tensor {label} has an unknown dtype {shown(dtype, 20)}")
    if (not isinstance(shape, list) or len(shape) > 16
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**48 for d in shape)):
        raise _fail(path, f"tensor {label} has a bad shape {shown(shape, 40)}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise _fail(path, f"tensor {label} has bad data_offsets {shown(offsets, 40)}")
    begin, end = offsets
    nbytes = tensor_nbytes(dtype, tuple(shape))
    if not 0 <= begin <= end or end - begin != nbytes:
        raise _fail(path, f"tensor {label}: data_offsets {begin}..{end} do not hold {dtype} x {shape} "
                          f"({nbytes:,} bytes)")
    if end > buffer:
        raise _fail(path, f"tensor {label} ends at byte {end:,} of a {buffer:,}-byte data buffer (truncated file?)")
    return TensorEntry(name, dtype, tuple(shape), nbytes)


def header_from_json(name: str, header: dict) -> list[TensorEntry]:
    """Entries from an already-parsed header (the hub's header metadata); the same checks but the file size."""
    out = []
    ranges: list[tuple[int, int, str]] = []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        out.append(_entry(name, key, info, 2**63, ranges))
    _check_disjoint(name, ranges)
    return out
