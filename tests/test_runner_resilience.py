"""The runners' child-process machinery on the CPU: engine stand-ins (tests/fake_engine.py, run inside the real child
processes through --case-runner) that really abort, die by SIGSEGV, hang or raise CUDA's out-of-memory error. Every
case gets exactly one row, the matrix goes on, the JSONL stays valid after a kill at any moment, and --resume skips
finished cases."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvcalc.validate.results import JsonlWriter, read_results

FAKE = str(Path(__file__).with_name("fake_engine.py"))
ROOT = str(Path(__file__).resolve().parent.parent)


def _cases(*kinds: str) -> list[dict]:
    return [{"id": f"c{i}-{kind}", "model": "llama-3.2-3b", "fake": kind, "enforce_eager": True}
            for i, kind in enumerate(kinds)]


def _env_with_repo(monkeypatch) -> None:
    # the children import kvcalc from this checkout, as the parent does
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_vllm_runner_records_crash_hang_and_oom_and_goes_on(tmp_path, monkeypatch):
    from kvcalc.validate.vllm_runner import run_vllm_cases

    _env_with_repo(monkeypatch)
    out = tmp_path / "vllm.jsonl"
    cases = _cases("ok", "abort", "hang", "oom", "segv", "ok")
    t0 = time.time()
    rows = run_vllm_cases(cases, out, tmp_path / "logs", per_process=0, case_timeout_s=2,
                          case_runner=f"{FAKE}:vllm_case")
    status = {r["case_id"]: r["status"] for r in rows}
    assert status == {"c0-ok": "ok", "c1-abort": "error", "c2-hang": "timeout", "c3-oom": "oom",
                      "c4-segv": "error", "c5-ok": "ok"}, status
    assert time.time() - t0 < 120  # the hang was ended by the child's 2 s watchdog, not the parent's backstop
    by_id = {r["case_id"]: r for r in rows}
    assert "worker exit -6" in by_id["c1-abort"]["message"] and "worker exit -11" in by_id["c4-segv"]["message"]
    assert "per-case timeout" in by_id["c2-hang"]["message"]
    assert "CUDA out of memory" in by_id["c3-oom"]["message"]
    on_disk, warnings = read_results(out)
    assert warnings == [] and sorted(r["case_id"] for r in on_disk) == sorted(c["id"] for c in cases)


def test_a_hung_case_leaves_no_worker_behind(tmp_path, monkeypatch):
    """The child's own worker process (as vLLM's TP workers) dies with it: the parent ends the child's session."""
    from kvcalc.validate.vllm_runner import run_vllm_cases

    _env_with_repo(monkeypatch)
    case = dict(_cases("spawn-hang")[0], pidfile=str(tmp_path / "worker.pid"))
    rows = run_vllm_cases([case], tmp_path / "v.jsonl", tmp_path / "logs", case_timeout_s=2,
                          case_runner=f"{FAKE}:vllm_case")
    assert [r["status"] for r in rows] == ["timeout"]
    pid = int((tmp_path / "worker.pid").read_text())
    for _ in range(50):  # the kill is immediate; reaping by init may take a moment
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break  # a zombie: dead, waiting for init to reap it
        time.sleep(0.1)
    else:
        raise AssertionError(f"worker {pid} outlived its runner child")


def test_vllm_resume_skips_cases_with_rows(tmp_path, monkeypatch):
    from kvcalc.validate.vllm_runner import run_vllm_cases

    _env_with_repo(monkeypatch)
    out = tmp_path / "vllm.jsonl"
    run_vllm_cases(_cases("ok", "oom"), out, tmp_path / "logs", per_process=0, case_runner=f"{FAKE}:vllm_case")
    JsonlWriter(out).write({"engine": "vllm", "case_id": "c2-ok", "status": "skipped", "message": "time budget"})
    rows = run_vllm_cases(_cases("ok", "oom", "ok"), out, tmp_path / "logs", per_process=0, resume=True,
                          case_runner=f"{FAKE}:vllm_case")
    on_disk, _ = read_results(out)
    ids = [r["case_id"] for r in on_disk]
    assert ids.count("c0-ok") == 1 and ids.count("c1-oom") == 1  # not run again
    assert [r["status"] for r in on_disk if r["case_id"] == "c2-ok"] == ["skipped", "ok"]  # a skipped case runs
    assert {r["case_id"] for r in rows} == {"c0-ok", "c1-oom", "c2-ok"}


def test_hf_matrix_records_crash_hang_and_oom_and_goes_on(tmp_path, monkeypatch):
    from kvcalc.validate.matrix import run_hf_matrix

    _env_with_repo(monkeypatch)
    out = tmp_path / "hf.jsonl"
    cases = _cases("ok", "abort", "hang", "oom", "ok")
    run_hf_matrix(cases, out, deadline=time.time() + 300, case_timeout_s=2, case_runner=f"{FAKE}:hf_case")
    rows, warnings = read_results(out)
    status = {r["case_id"]: r["status"] for r in rows}
    assert status == {"c0-ok": "ok", "c1-abort": "error", "c2-hang": "timeout", "c3-oom": "oom", "c4-ok": "ok"}
    assert len(rows) == len(cases) and warnings == []
    # --resume: nothing left to run, nothing written
    size = out.stat().st_size
    run_hf_matrix(cases, out, deadline=time.time() + 300, case_timeout_s=2, case_runner=f"{FAKE}:hf_case",
                  resume=True)
    assert out.stat().st_size == size


def test_a_torn_last_line_is_cut_before_the_next_row(tmp_path):
    path = tmp_path / "r.jsonl"
    JsonlWriter(path).write({"case_id": "a", "status": "ok"})
    with open(path, "ab") as fh:
        fh.write(b'{"case_id": "b", "status": "o')  # a writer killed mid-line
    rows, warnings = read_results(path)
    assert [r["case_id"] for r in rows] == ["a"] and "truncated" in warnings[0]
    JsonlWriter(path).write({"case_id": "c", "status": "ok"})
    rows, warnings = read_results(path)
    assert [r["case_id"] for r in rows] == ["a", "c"] and warnings == []


_WRITER = """
import sys
sys.path.insert(0, sys.argv[2])
from kvcalc.validate.results import JsonlWriter
w = JsonlWriter(sys.argv[1])
for i in range(3000):  # rows of 1-9 kB, each one os.write + fsync; at most ~15 MB per attempt
    w.write({"case_id": f"r{i}", "status": "ok", "pad": "x" * (1000 + (i * 7919) % 8000)})
import time
time.sleep(600)
"""


def test_jsonl_stays_valid_after_a_kill_at_any_moment(tmp_path):
    path = tmp_path / "killed.jsonl"
    rng = random.Random(0)
    for attempt in range(6):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), ROOT])
        time.sleep(0.3 + rng.random() * 0.4)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        rows, _ = read_results(path, max_bytes=2**32)  # readable whatever the moment of the kill
        JsonlWriter(path).write({"case_id": f"after-{attempt}", "status": "ok"})
        rows, warnings = read_results(path, max_bytes=2**32)
        assert warnings == [] and rows[-1]["case_id"] == f"after-{attempt}"
    with open(path, encoding="utf-8") as fh:
        assert all(json.loads(line) for line in fh)
