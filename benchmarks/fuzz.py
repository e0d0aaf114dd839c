"""The fuzz suite at full size: 10,000+ generated cases over every input kvcalc takes, judged by the oracle in
tests/fuzz_cases.py (tracebacks, runs over 5 s, one-line errors, NaN/inf/negative numbers in JSON, "fits" that break
an invariant). Exits 1 on any failure and prints each failing argv.

    python3 benchmarks/fuzz.py [--cases 12000] [--hypothesis 1500] [--seed 20261130] [--workers 2] [--write-readme]

Cases are generated from the seed (the same seed gives the same cases and files) and split over --workers processes.
--write-readme replaces the "Fuzz suite" section of benchmarks/README.md with this run's table. tests/test_fuzz.py
runs a few hundred of the same cases in CI.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fuzz_cases as F  # noqa: E402

COLUMNS = ["cases", "exit 0", "exit 1", "exit 2", "traceback", "over 5 s", "bad numbers", "broken invariant",
           "bad message"]


def _cases(args) -> list[F.Case]:
    return F.generate(args.seed, args.cases) + (F.hypothesis_cases(args.hypothesis, args.seed) if args.hypothesis
                                                else [])


def _work(job):
    args, index, workers = job
    os.environ["HF_HUB_OFFLINE"] = "1"
    cases = _cases(args)[index::workers]
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = F.run_cases(cases, Path(tmp))
    slowest = max(outcomes, key=lambda o: o.cpu_seconds)
    return (F.summarize(outcomes), [F.describe(o) for o in F.failures(outcomes)],
            (slowest.cpu_seconds, " ".join(slowest.argv)[:160], slowest.seconds), sum(o.seconds for o in outcomes),
            sum(o.cpu_seconds for o in outcomes), sorted(o.cpu_seconds for o in outcomes))


def merge(tables):
    out = {}
    for table in tables:
        for key, row in table.items():
            acc = out.setdefault(key, dict.fromkeys(COLUMNS, 0))
            for col, n in row.items():
                acc[col] = acc.get(col, 0) + n
    return dict(sorted(out.items()))


def markdown(table, args, wall, slowest, run_seconds, cpu_seconds, cpus) -> str:
    total = dict.fromkeys(COLUMNS, 0)
    lines = ["| input kind: command | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for key, row in table.items():
        lines.append(f"| {key} | " + " | ".join(f"{row.get(c, 0):,}" for c in COLUMNS) + " |")
        for c in COLUMNS:
            total[c] += row.get(c, 0)
    lines.append("| **all** | " + " | ".join(f"**{total[c]:,}**" for c in COLUMNS) + " |")
    head = (f"`python3 benchmarks/fuzz.py --cases {args.cases} --hypothesis {args.hypothesis} --seed {args.seed} "
            f"--workers {args.workers}`, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
            f"{os.cpu_count()} cores shared with other sessions: {total['cases']:,} cases in {wall:.0f} s wall "
            f"({run_seconds / max(total['cases'], 1) * 1000:.0f} ms wall, "
            f"{cpu_seconds / max(total['cases'], 1) * 1000:.0f} ms CPU per case; 99th percentile "
            f"{cpus[int(len(cpus) * 0.99)]:.2f} s CPU); the slowest run took {slowest[0]:.2f} s of CPU "
            f"({slowest[2]:.2f} s wall): `kvcalc {slowest[1]}`. A run is \"over 5 s\" on CPU time (the machine is "
            f"shared, so wall time stretches with other sessions' load; load average {os.getloadavg()[0]:.1f} at the "
            f"end) or when it is still running after {F.ALARM_S} s wall.")
    return head + "\n\n" + "\n".join(lines) + "\n"


SECTION = "## Fuzz suite"


def write_readme(text: str) -> None:
    readme = ROOT / "benchmarks" / "README.md"
    current = readme.read_text()
    intro = (f"{SECTION}\n\n`benchmarks/fuzz.py` generates cases of every input kind (tests/fuzz_cases.py says how) and "
             "judges each run: a traceback, a run over 5 s, an exit 2 that is not one `error:` line, NaN/inf/negative "
             "numbers in JSON (vLLM's own signed memory figures excepted), or a \"fits\" that breaks an invariant "
             "(weights over memory, KV blocks over the budget, context over max_model_len, concurrency under the "
             "batch, TP not dividing the heads, search results missing their targets, a fit answer that does not "
             "fit) is a failure; the script exits 1 on any. `tests/test_fuzz.py` runs a few hundred of the same "
             "cases in CI. Latest run:\n\n")
    block = intro + text
    pattern = re.compile(rf"{re.escape(SECTION)}\n.*?(?=\n## |\Z)", re.S)
    new = pattern.sub(lambda m: block.rstrip("\n") + "\n", current) if SECTION in current else \
        current.rstrip("\n") + "\n\n" + block
    readme.write_text(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=12000)
    parser.add_argument("--hypothesis", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    jobs = [(args, i, args.workers) for i in range(args.workers)]
    if args.workers == 1:
        results = [_work(jobs[0])]
    else:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            results = pool.map(_work, jobs)
    wall = time.perf_counter() - start
    table = merge(r[0] for r in results)
    failures = [f for r in results for f in r[1]]
    slowest = max((r[2] for r in results), key=lambda s: s[0])
    cpus = sorted(c for r in results for c in r[5])
    text = markdown(table, args, wall, slowest, sum(r[3] for r in results), sum(r[4] for r in results), cpus)
    print(text)
    for failure in failures:
        print(failure)
    print(f"{len(failures)} failing cases")
    if args.write_readme:
        write_readme(text + (f"\n{len(failures)} failing cases.\n" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
