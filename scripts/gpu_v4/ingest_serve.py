#!/usr/bin/env python3
"""Turn what serve_load.py brought back from the GPU host into the committed data (issue 25).

    python3 scripts/gpu_v4/ingest_serve.py RUN CASES.json RESULT.tar.gz [RESULT2.tar.gz ...]

For every workload of the case file that ran (status.json says ok) and is not a warm-up (`"warmup": true`: the pass
that makes a fresh server JIT-compile its kernels before anything is timed; kept raw only), appends vllm bench's summary (the
--save-result JSON without its per-request lists) to docs/validation/data/v4/serve/runs.jsonl as
{"shape", "workload", "run", ...}, and writes raw-RUN.tar.xz beside it: the --save-detailed JSONs (per-request ttfts,
itls, start_times; generated_texts dropped), each server's start-up and iteration log, its /metrics capture (and, where the case file asks, each workload's /metrics before
and after it: `<shape>.<workload>.RUN.metrics0.txt` / `metrics1.txt`) and the
run's status.json (serve command, server env, bench commands) as status-RUN.json. Rows already there for RUN are
replaced, so a second ingest of the same run does not duplicate them. A workload with failed requests is kept in
the raw tarball and left out of runs.jsonl (what it measured is not the workload).
"""
from __future__ import annotations

import io
import json
import lzma
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "validation" / "data" / "v4" / "serve"
PER_REQUEST = ("ttfts", "itls", "start_times", "output_lens", "input_lens", "errors", "generated_texts")


def read_results(tarballs: list[str]) -> dict[str, bytes]:
    """Every file of the result tarballs by its base name (a later tarball wins; their status.json lists are merged
    by shape, so a shape served again in a later command replaces its first attempt)."""
    files, status = {}, {}
    for path in tarballs:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    files[Path(m.name).name] = tar.extractfile(m).read()
        status.update({s["shape"]: s for s in json.loads(files.get("status.json", b"[]"))})
        files.pop("status.json", None)
    files["status.json"] = json.dumps(list(status.values()), indent=1).encode()
    return files


def _round_us(v):
    return [_round_us(x) for x in v] if isinstance(v, list) else round(v, 6) if isinstance(v, float) else v


def ingest(run: str, cases: dict, files: dict[str, bytes]) -> tuple[list[dict], dict[str, bytes]]:
    """(runs.jsonl rows, raw tarball members) of one run."""
    status = {s["shape"]: s for s in json.loads(files["status.json"])}
    rows, raw = [], {f"status-{run}.json": files["status.json"]}
    for shape in cases["shapes"]:
        name = shape["name"]
        for suffix in ("server.log", "metrics.txt"):
            if f"{name}.{suffix}" in files:
                raw[f"{name}.{run}.{suffix}"] = files[f"{name}.{suffix}"]
        ran = {w["id"] for w in status.get(name, {}).get("workloads", []) if w.get("ok")}
        # the server's own per-workload records (pyprof samples, pyinstr counters): prof-/instr-<pid>-<n>.json, each
        # naming its workload; the pid is the server's (status.json's server log names it)
        for key in sorted(files):
            if key.startswith(("prof-", "instr-")) and key.endswith(".json"):
                rec = json.loads(files[key])
                if str(rec.get("phase", "")).startswith(name + ".") and rec["phase"][len(name) + 1:] in ran:
                    raw[f"{rec['phase']}.{run}.{key}"] = files[key]
        for wl in shape["workloads"]:
            key = f"{name}.{wl['id']}.json"
            if wl["id"] not in ran or key not in files:
                continue
            full = json.loads(files[key])
            full.pop("generated_texts", None)
            # per-request times to the microsecond (vllm bench writes 17 digits of a second): a third of the bytes
            for key in ("ttfts", "itls", "start_times"):
                if key in full:
                    full[key] = _round_us(full[key])
            # a warm-up's per-request times stay raw too: its window places the server log's steps on the client's clock
            raw[f"{name}.{wl['id']}.{run}.json"] = json.dumps(full).encode()
            for part in ("metrics0", "metrics1"):  # /metrics before and after the workload (metrics_each)
                if f"{name}.{wl['id']}.{part}.txt" in files:
                    raw[f"{name}.{wl['id']}.{run}.{part}.txt"] = files[f"{name}.{wl['id']}.{part}.txt"]
            if f"{name}.{wl['id']}.cpu.json" in files:  # every server thread's CPU seconds over it (proc_cpu)
                raw[f"{name}.{wl['id']}.{run}.cpu.json"] = files[f"{name}.{wl['id']}.cpu.json"]
            if wl.get("warmup"):
                continue
            if full.get("failed"):  # a run with failed requests measures something else: kept raw, never compared
                print(f"{name}.{wl['id']}: {full['failed']} of {full['num_prompts']} requests failed: not a row")
                continue
            summary = {k: v for k, v in full.items() if k not in PER_REQUEST}
            rows.append({"shape": name, "workload": wl["id"], "run": run, **summary})
    return rows, raw


def write(run: str, rows: list[dict], raw: dict[str, bytes]) -> None:
    path = DATA / "runs.jsonl"
    kept = [line for line in path.read_text().splitlines() if json.loads(line)["run"] != run]
    path.write_text("\n".join(kept + [json.dumps(r) for r in rows]) + "\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(raw):
            info = tarfile.TarInfo(f"raw/{name}")
            info.size, info.mtime = len(raw[name]), 0
            tar.addfile(info, io.BytesIO(raw[name]))
    (DATA / f"raw-{run}.tar.xz").write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__)
        return 2
    run, cases = argv[0], json.loads(Path(argv[1]).read_text())
    rows, raw = ingest(run, cases, read_results(argv[2:]))
    write(run, rows, raw)
    print(f"run {run}: {len(rows)} rows, {len(raw)} raw files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
