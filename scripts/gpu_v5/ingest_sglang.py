#!/usr/bin/env python3
"""Turn what sglang_serve.py brought back from the H200 into committed data and a comparison with kvcalc (issue 20).

    python3 scripts/gpu_v5/ingest_sglang.py RESULT.tar.gz [RESULT2.tar.gz ...] [--predictions P.json] [--check]

Writes into docs/validation/data/v5/sglang/:
- runs.jsonl: one row per (case, workload) that ran with every request completed: {"case", "workload", "run",
  "catalog", "serve_command", ...bench_serving's summary (its --output-file line without per-request lists or
  server_info)}, plus "startup": the figures the server's log states (validate/sglang_log.py parse_sglang_log).
  A case already there is replaced when this ingest brings it again; every other committed case stays (merge).
- raw-RUN.tar.xz per run: the server logs, bench logs, /server_info captures, bench lines with per-request lists
  (generated texts dropped) and status.json (commands, versions, GPU, driver).
- compare.md: per case, the log through `kvcalc validate --from-log`'s SGLang check (check_sglang_log, kvcalc as it
  stands) and the pre-registered predictions*.json (written before the runs) against the log's max_total_num_tokens
  and the bench's mean/p99 TTFT, mean TPOT and output tokens/s.
--check: print the comparison, write nothing.
"""
from __future__ import annotations

import io
import json
import lzma
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "docs" / "validation" / "data" / "v5" / "sglang"
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times")
SPEED = (("mean_ttft_ms", "mean TTFT ms"), ("p99_ttft_ms", "p99 TTFT ms"), ("mean_tpot_ms", "mean TPOT ms"),
         ("output_throughput", "output tok/s"))


def read_results(tarballs: list[str]) -> tuple[list[dict], dict[str, bytes]]:
    """(status.json documents, files as "RUN/base name": two runs may serve cases of the same name). A case run again
    in a later tarball of its run replaces its first attempt."""
    files, docs = {}, []
    for path in tarballs:
        with tarfile.open(path) as tar:
            here = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        doc = json.loads(here.pop("status.json"))
        docs.append(doc)
        for name, data in here.items():
            files[f"{doc.get('run') or 'run'}/{name}"] = data
    return docs, files


def last_json_line(data: bytes) -> dict:
    lines = [ln for ln in data.decode().splitlines() if ln.strip()]
    return json.loads(lines[-1])


def ingest(docs: list[dict], files: dict[str, bytes]) -> tuple[list[dict], dict[str, dict[str, bytes]], list[dict]]:
    """(rows, raw members by run, the latest status row of each case)."""
    from kvcalc.validate.sglang_log import parse_sglang_log

    cases: dict[tuple[str, str], dict] = {}  # by (run, case)
    for doc in docs:
        for c in doc["cases"]:
            key = (doc.get("run") or "run", c["case"])
            if "skipped" in c and key in cases:
                continue  # a skip in a later command keeps the earlier attempt
            cases[key] = dict(c, run=key[0], environment=doc.get("environment"))
    rows, raw = [], {}
    for doc in docs:  # every command's status, each under its own name
        members = raw.setdefault(doc.get("run") or "run", {})
        n = sum(1 for m in members if m.startswith("status-"))
        members[f"status-{doc.get('run')}{f'.{n + 1}' if n else ''}.json"] = json.dumps(doc, indent=1).encode()
    for (run, name), c in cases.items():
        for suffix in ("server.log", "bench.log", "server_info.json"):
            if f"{run}/{name}.{suffix}" in files:
                raw[run][f"{name}.{suffix}"] = files[f"{run}/{name}.{suffix}"]
        log = files.get(f"{run}/{name}.server.log", b"").decode(errors="replace")
        c["startup"] = parse_sglang_log(log)["values"] if log else {}
        for w in c.get("workloads", []):
            key = f"{name}.{w['id']}.jsonl"
            if not w.get("ok") or f"{run}/{key}" not in files:
                continue
            full = last_json_line(files[f"{run}/{key}"])
            full.pop("generated_texts", None)
            raw[run][key] = json.dumps(full).encode()
            expected = None
            for part in w.get("bench_command", "").split("--num-prompts ")[1:2]:
                expected = int(part.split()[0])
            if expected is not None and full.get("completed") != expected:
                print(f"{name}.{w['id']}: {full.get('completed')} of {expected} requests completed: not a row")
                continue
            summary = {k: v for k, v in full.items() if k not in PER_REQUEST and k != "server_info"}
            rows.append({"case": name, "workload": w["id"], "run": run, "catalog": c.get("catalog"),
                         "serve_command": c.get("serve_command"), "startup": c["startup"], **summary})
    return rows, raw, list(cases.values())


def pct(pred, obs) -> str:
    if pred is None or obs in (None, 0):
        return "-"
    return f"{(pred - obs) / obs * 100:+.1f}%"


def compare(cases: list[dict], files: dict[str, bytes], rows: list[dict], predictions: dict) -> str:
    from kvcalc.validate.sglang_log import check_sglang_log, parse_sglang_log

    pred = {(p.get("run"), p["case"]): p for p in predictions.get("cases", [])}
    commits = ", ".join(f"{f} at kvcalc {c[:7]}" for f, c in predictions.get("commits", {}).items())
    out = [f"# SGLang 0.5.14 on the H200: measured vs kvcalc (pre-registered predictions, written before the runs: "
           f"{commits or '?'})", ""]
    env = next((c.get("environment") for c in cases if c.get("environment")), {}) or {}
    out += [f"Host: {env.get('nvidia_smi', '?')}; torch {env.get('torch', '?')}, sglang {env.get('sglang', '?')}, "
            f"sglang-kernel {env.get('sglang-kernel', '?')}, {env.get('glibc', '?')}.", ""]
    out += ["## KV pool (pre-registered)", "",
            "| run | case | started | start s | predicted mfs | predicted tokens | logged max_total_num_tokens | error |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in cases:
        p = pred.get((c["run"], c["case"]), {}).get("memory", {})
        logged = c.get("startup", {}).get("max_total_num_tokens", c.get("startup", {}).get("kv_cache_tokens"))
        out.append(f"| {c['run']} | {c['case']} | {c.get('started', c.get('skipped', '-'))} | {c.get('start_s', '-')} | "
                   f"{p.get('mem_fraction_static', '-')} | {p.get('max_total_num_tokens', '-'):,} | "
                   f"{'-' if logged is None else f'{logged:,}'} | {pct(p.get('max_total_num_tokens'), logged)} |"
                   if p else f"| {c['run']} | {c['case']} | {c.get('started')} | - | - | - | {logged} | - |")
    out += ["", "## Speed (pre-registered)", "",
            "| run | case | workload | " + " | ".join(f"{label} (pred / meas / err)" for _, label in SPEED) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in SPEED) + " |"]
    for r in rows:
        pw = {w["id"]: w for w in pred.get((r["run"], r["case"]), {}).get("workloads", [])}.get(r["workload"], {})
        cells = [f"{pw.get(k, 0) or 0:.1f} / {r.get(k) or 0:.1f} / {pct(pw.get(k), r.get(k))}" for k, _ in SPEED]
        out.append(f"| {r['run']} | {r['case']} | {r['workload']} | " + " | ".join(cells) + " |")
    out += ["", "## Start-up logs through `kvcalc validate --from-log` (kvcalc as it stands)", ""]
    for c in cases:
        log = files.get(f"{c['run']}/{c['case']}.server.log", b"").decode(errors="replace")
        parsed = parse_sglang_log(log) if log else None
        if not parsed or not parsed["values"]:
            out.append(f"- {c['run']} {c['case']}: no SGLang memory lines in the log" + (f" ({parsed['errors'][0][:120]})"
                                                                              if parsed and parsed["errors"] else ""))
            continue
        report = check_sglang_log(parsed, c["catalog"], "h200", version="0.5.14")
        cells = "; ".join(f"{r['quantity']}: {r['verdict']} ({r['error'] * 100:+.2f}%)" if r.get("error") is not None
                          else f"{r['quantity']}: {r['verdict']}" for r in report["rows"])
        out.append(f"- {c['run']} {c['case']}: {cells}")
    return "\n".join(out) + "\n"


def committed() -> tuple[list[dict], dict[str, dict[str, bytes]]]:
    """What is already in DATA: runs.jsonl's rows and each raw-RUN.tar.xz's members by base name."""
    path = DATA / "runs.jsonl"
    rows = [json.loads(ln) for ln in (path.read_text().splitlines() if path.exists() else []) if ln.strip()]
    raw = {}
    for tarball in sorted(DATA.glob("raw-*.tar.xz")):
        with tarfile.open(fileobj=io.BytesIO(lzma.decompress(tarball.read_bytes()))) as tar:
            raw[tarball.name[len("raw-"):-len(".tar.xz")]] = {
                Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return rows, raw


def merge(rows: list[dict], raw: dict[str, dict[str, bytes]], cases: list[dict], files: dict[str, bytes]
          ) -> tuple[list[dict], dict[str, dict[str, bytes]], list[dict], dict[str, bytes]]:
    """This ingest added to what is committed. A run is often served over several commands and leases (cases cut off
    by a deadline are served later with --only), so an ingest adds the cases it brings and replaces only those: a
    case that ran again replaces its earlier rows and raw files, every other committed case stays. Each command's
    status.json is kept under its own name (status-RUN.json, status-RUN.2.json, ...)."""
    old_rows, old_raw = committed()
    brought = {(c["run"], c["case"]) for c in cases if "skipped" not in c}
    kept = [r for r in old_rows if (r["run"], r["case"]) not in brought]
    merged_raw = {run: {n: d for n, d in members.items()
                        if n.startswith("status-") or (run, n.split(".")[0]) not in brought}
                  for run, members in old_raw.items()}
    for run, members in raw.items():
        into = merged_raw.setdefault(run, {})
        for name, data in members.items():
            if name.startswith("status-"):
                if any(n.startswith("status-") and d == data for n, d in into.items()):
                    continue  # the same command ingested again
                k = 1
                while name in into:
                    k += 1
                    name = f"status-{run}.{k}.json"
            into[name] = data
    seen = {(c["run"], c["case"]) for c in cases if "skipped" not in c}
    earlier = []
    for r in kept:  # the cases of earlier ingests, as compare() needs them
        if (r["run"], r["case"]) not in seen:
            seen.add((r["run"], r["case"]))
            earlier.append({"case": r["case"], "run": r["run"], "catalog": r.get("catalog"), "started": True,
                            "startup": r.get("startup", {})})
    later = [c for c in cases if "skipped" not in c or (c["run"], c["case"]) not in seen]
    all_files = {f"{run}/{n}": d for run, members in merged_raw.items() for n, d in members.items()}
    all_files.update(files)
    return kept + rows, merged_raw, earlier + later, all_files


def write(rows: list[dict], raw: dict[str, dict[str, bytes]], text: str) -> None:
    """rows and raw as merge() gives them: the whole of runs.jsonl and of each raw tarball."""
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for run, members in raw.items():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in sorted(members):
                info = tarfile.TarInfo(f"raw/{name}")
                info.size, info.mtime = len(members[name]), 0
                tar.addfile(info, io.BytesIO(members[name]))
        (DATA / f"raw-{run}.tar.xz").write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    (DATA / "compare.md").write_text(text)


def predictions(paths: list[Path]) -> dict:
    """Every pre-registered predictions file in one: {"cases": [...], "commits": {file: kvcalc commit}}; a case is
    (its run, its name), so the files never shadow one another."""
    out: dict = {"cases": [], "commits": {}}
    for path in paths:
        if path.exists():
            doc = json.loads(path.read_text())
            out["cases"] += doc.get("cases", [])
            out["commits"][path.name] = doc.get("kvcalc_commit", "?")
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    pred_paths = sorted(DATA.glob("predictions*.json"))
    if "--predictions" in argv:
        i = argv.index("--predictions")
        pred_paths = [Path(argv[i + 1])]
        argv = argv[:i] + argv[i + 2:]
    if not argv:
        print(__doc__)
        return 2
    docs, files = read_results(argv)
    rows, raw, cases = ingest(docs, files)
    rows, raw, cases, files = merge(rows, raw, cases, files)
    text = compare(cases, files, rows, predictions(pred_paths))
    print(text)
    if not check:
        write(rows, raw, text)
        print(f"{len(rows)} rows, {sum(len(m) for m in raw.values())} raw files, in {DATA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
