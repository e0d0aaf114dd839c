"""Cold-start time of `kvcalc plan` (target: under 0.3 s on the 2-core CI machine), and proof it imports no engine.

Run: python benchmarks/startup.py [--runs 10]
Each run is a fresh interpreter, as a user's shell would start it. Reports min/median wall time for the table and
the JSON output, and the heavy modules found in sys.modules afterwards (must be none).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "plan (table)": ["plan", "--gpu", "t4", "--context", "32k"],
    "plan --json": ["plan", "--gpu", "t4", "--context", "32k", "--json"],
}
HEAVY = ("torch", "transformers", "vllm", "matplotlib", "numpy", "starlette", "uvicorn", "kvcalc.web")


def time_command(args: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvcalc.cli", *args], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def heavy_imports() -> list[str]:
    code = ("import sys\nfrom kvcalc.cli import main\n"
            "try:\n    main(['plan', '--gpu', 't4', '--context', '32k', '--json'])\nexcept SystemExit:\n    pass\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in result.stderr.strip().split(",") if m]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    for label, args in COMMANDS.items():
        times = time_command(args, runs)
        print(f"{label:14s} min {min(times):.3f} s  median {statistics.median(times):.3f} s  ({runs} runs)")
    heavy = heavy_imports()
    print("heavy modules imported:", ", ".join(heavy) if heavy else "none")


if __name__ == "__main__":
    main()
