"""What the GPU really offers, measured: total memory as the driver reports it and device-to-device copy bandwidth.
Writes JSON to the path given (default stdout). Used to fill the GPU profile's measured fields.

    python3 scripts/gpu_probe.py OUT.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import torch


def copy_bandwidth(n_bytes: int = 4 << 30, repeats: int = 20) -> float:
    """Bytes moved per second (read + write) by a large device-to-device copy, best of `repeats` after warm-up."""
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    return 2 * n_bytes / best


def main() -> None:
    free, total = torch.cuda.mem_get_info()
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "compute_capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "memory_total_bytes": total,
        "memory_free_bytes_at_start": free,
        "driver": driver,
        "torch": torch.__version__,
        "copy_bandwidth_bytes_per_s": copy_bandwidth(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python3 scripts/gpu_probe.py",
    }
    text = json.dumps(result, indent=1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
