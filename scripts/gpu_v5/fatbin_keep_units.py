#!/usr/bin/env python3
"""Drop, inside an ELF shared object's .nv_fatbin, the sm_90 code of whole compilation units that a run never
launches, after ../shared/gpu/fatbin_keep_sm90.py has removed the other architectures.

sgl-kernel's flash_ops.abi3.so (FlashAttention 3) is one fatbin container per instantiation file
(flash_fwd_hdim128_bf16_paged_split_sm90.cu, ...): 929 MiB of sm_90 cubins for every head dim, dtype, softcap and
paging variant. A container is named by the `_INTERNAL_<hash>_<n>_<file>_cu_` symbols in its cubin. Containers whose
file matches none of the --keep patterns get their sm_90 cubin zeroed and relabelled as sm_80, so the driver sees a
unit with no image for the GPU: loading the library works, and only a launch of one of its kernels fails ("no kernel
image is available"), exactly as for a library built without that file. Containers with no file name (shared helper
units) are kept.
Usage: fatbin_keep_units.py LIB.so --keep REGEX [--keep REGEX ...] [--dry-run]
"""
import argparse
import re
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "shared" / "gpu"))
sys.path.insert(0, "/work/shared/gpu")
from fatbin_keep_sm90 import MAGIC, fatbin_section  # noqa: E402

UNIT = re.compile(rb"_INTERNAL_[0-9a-f]{8}_\d+_([A-Za-z0-9_]+?)_cu_[0-9a-f]{8}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--keep", action="append", required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    keep = [re.compile(k) for k in a.keep]
    data = bytearray(open(a.lib, "rb").read())
    off, size = fatbin_section(data)
    end = off + size
    kept = dropped = 0
    names = []
    while off + 16 <= end:
        magic, _v, hsz, fsz = struct.unpack_from("<IHHQ", data, off)
        if magic != MAGIC:
            off += 8
            continue
        p, ents, units = off + hsz, [], set()
        while p < off + hsz + fsz:
            kind, _ev, ehsz, psize = struct.unpack_from("<HHIQ", data, p)
            arch = struct.unpack_from("<I", data, p + 28)[0]
            units.update(m.decode() for m in UNIT.findall(bytes(data[p + ehsz:p + ehsz + psize])))
            ents.append((p, ehsz, psize, kind, arch))
            p += ehsz + psize
        want = not units or any(k.search(u) for k in keep for u in units)
        for p, ehsz, psize, kind, arch in ents:
            if kind == 2 and arch == 90:
                if want:
                    kept += psize
                    names.append(",".join(sorted(units)) or "(unnamed)")
                else:
                    dropped += psize
                    if not a.dry_run:
                        data[p + ehsz:p + ehsz + psize] = bytes(psize)
                        struct.pack_into("<I", data, p + 28, 80)
        off += hsz + fsz
    if not a.dry_run:
        open(a.lib, "wb").write(bytes(data))
    for n in names:
        print("keep", n)
    print(f"{a.lib}: kept {kept / 2**20:.1f} MiB of sm_90 code in {len(names)} units, dropped {dropped / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
