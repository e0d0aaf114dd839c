"""Time kvcalc's vLLM log parser on adversarial and ordinary logs, per MiB; fail when over the budget.

    python3 benchmarks/log_parse.py [--budget-s-per-mib 1.0]

Inputs (built in memory, nothing written):
- redos: 2 MiB of lines shaped like the old process-prefix ReDoS, "(EngineCore_a_a_a..._a x" (unclosed, 28+ groups);
- one-line: a single 1 MiB line with no newline (quadratic scans of "[^\\n]*X[^\\n]*" took minutes here);
- needles: 2 MiB of lines that repeat every pattern's needle with no number after it (each row's regex runs);
- digits: 2 MiB of "Available KV cache memory: 9999...": must fail fast with one error line, not hang;
- needle+run: one line with every needle followed by a 40,000-character run (each lazy capture scans it once);
- ordinary: a real 0.26 start-up log repeated to 8 MiB.
Before the table-driven parser, redos took > 20 s for one 61-character line and an 80 kB line 17.5 s
(shared/reviews/fuzz-2026-11.md H2-H4).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcalc.validate.vllm_log import PATTERNS, LogError, parse_vllm_log  # noqa: E402

MiB = 2**20
REAL = ROOT / "tests" / "fixtures" / "vllm_logs" / "real_v0.26.0_v-3b-auto-eager-u90.log"


def inputs() -> dict[str, str]:
    redos_line = "(EngineCore" + "_a" * 28 + " x\n"
    needles = " ".join(p.needle for p in PATTERNS) + "\n"
    return {
        "redos": redos_line * (2 * MiB // len(redos_line)),
        "one-line": "A" * MiB,
        "needles": needles * (2 * MiB // len(needles)),
        "digits": ("Available KV cache memory: " + "9" * 4000 + " GiB\n") * (2 * MiB // 4032),
        "needle+run": "".join(p.needle + "x" * 40000 + " " for p in PATTERNS) * 1,
        "ordinary": REAL.read_text() * (8 * MiB // REAL.stat().st_size),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s-per-mib", type=float, default=1.0)
    args = ap.parse_args(argv)
    worst = 0.0
    print(f"{'input':10} {'MiB':>6} {'seconds':>8} {'s/MiB':>7}  outcome")
    for name, text in inputs().items():
        size = len(text.encode()) / MiB
        t0 = time.perf_counter()
        try:
            out = parse_vllm_log(text)
            outcome = f"{len(out['values'])} values"
        except LogError as exc:
            outcome = f"LogError: {str(exc)[:60]}"
        seconds = time.perf_counter() - t0
        worst = max(worst, seconds / size)
        print(f"{name:10} {size:6.2f} {seconds:8.3f} {seconds / size:7.3f}  {outcome}")
    ok = worst <= args.budget_s_per_mib
    print(f"worst {worst:.3f} s/MiB; budget {args.budget_s_per_mib} s/MiB: {'ok' if ok else 'OVER BUDGET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
