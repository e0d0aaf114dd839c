"""scripts/gpu_v4/ingest_serve.py: a result tarball as the GPU host returns it becomes runs.jsonl rows and a raw
tarball. Checked on run e's real files: rebuilt into the host's layout, they ingest to the rows committed for run e."""
import io
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu_v4"))

import ingest_serve  # noqa: E402


def _host_tarball(tmp_path: Path, run: str, cases: dict) -> Path:
    """Run e's raw files renamed as serve_load.py writes them on the host (<shape>.<workload>.json, status.json)."""
    with tarfile.open(ROOT / "docs/validation/data/v4/serve/raw-efg.tar.xz") as tar:
        raw = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    out = tmp_path / f"serve_{run}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        def add(name, data):
            info = tarfile.TarInfo(f"serve_{run}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("status.json", raw[f"status-{run}.json"])
        for shape in cases["shapes"]:
            add(f"{shape['name']}.server.log", raw[f"{shape['name']}.{run}.server.log"])
            for wl in shape["workloads"]:
                add(f"{shape['name']}.{wl['id']}.json", raw[f"{shape['name']}.{wl['id']}.{run}.json"])
    return out


def test_run_e_ingests_to_its_committed_rows(tmp_path):
    cases = json.loads((ROOT / "scripts/gpu_v4/serve_cases_e.json").read_text())
    rows, raw = ingest_serve.ingest("e", cases, ingest_serve.read_results([str(_host_tarball(tmp_path, "e", cases))]))
    committed = [json.loads(l) for l in (ROOT / "docs/validation/data/v4/serve/runs.jsonl").read_text().splitlines()
                 if json.loads(l)["run"] == "e"]
    assert len(rows) == len(committed) == 11
    by_key = {(r["shape"], r["workload"]): r for r in committed}
    for r in rows:
        c = by_key[(r["shape"], r["workload"])]
        assert {k: r[k] for k in c} == c  # every committed field, equal
        assert "ttfts" not in r and "itls" not in r  # per-request lists stay in the raw tarball
    assert "llama-3.1-8b-nopc.c1_1k_256.e.json" in raw and "status-e.json" in raw
    assert len(json.loads(raw["llama-3.1-8b-nopc.c1_1k_256.e.json"])["ttfts"]) == 6


def test_warmup_workloads_are_not_compared(tmp_path):
    cases = json.loads((ROOT / "scripts/gpu_v4/serve_cases_e.json").read_text())
    tarball = _host_tarball(tmp_path, "e", cases)
    cases["shapes"][0]["workloads"][0]["warmup"] = True  # as if c1_1k_256 had been the warm-up pass
    rows, raw = ingest_serve.ingest("e", cases, ingest_serve.read_results([str(tarball)]))
    assert len(rows) == 10
    assert ("llama-3.2-3b-fp8kv-iter", "c1_1k_256") not in {(r["shape"], r["workload"]) for r in rows}
