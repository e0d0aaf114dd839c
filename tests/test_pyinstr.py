"""scripts/gpu_v4/pyinstr (issue 25, runs m-o): the instruments a `vllm serve` process loads through site, checked on a
stand-in of the vLLM modules they patch (vLLM itself cannot be installed on CPU)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYINSTR = ROOT / "scripts" / "gpu_v4" / "pyinstr"

STANDIN = {
    "vllm/__init__.py": "", "vllm/v1/__init__.py": "", "vllm/v1/engine/__init__.py": "",
    "vllm/v1/engine/output_processor.py": (
        "class OutputProcessor:\n"
        "    def process_outputs(self, engine_core_outputs, engine_core_timestamp=None, iteration_stats=None):\n"
        "        return len(engine_core_outputs)\n"),
    "vllm/v1/engine/core.py": (
        "class Req:\n    pass\n"
        "class EngineCoreProc:\n"
        "    def preprocess_add_request(self, request):\n        return (Req(), 0)\n"
        "    def _handle_client_request(self, request_type, request):\n        return request_type\n"),
    "vllm/v1/serial_utils.py": (
        "class MsgpackEncoder:\n    def encode_into(self, obj, buf):\n        return [b'x']\n"),
}

API = """
import asyncio, time
from concurrent.futures import ThreadPoolExecutor
async def main():
    open(PHASE, "w").write("w1")
    await asyncio.sleep(0.15)  # the probe thread looks at the phase file every 50 ms
    from vllm.v1.engine.output_processor import OutputProcessor
    assert OutputProcessor().process_outputs([1, 2, 3], time.monotonic() - 0.010) == 3
    pool = ThreadPoolExecutor(1)
    def tokenize():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.004:
            pass
    await asyncio.get_running_loop().run_in_executor(pool, tokenize)
    await asyncio.sleep(0.1)
    open(PHASE, "w").write("idle")
    await asyncio.sleep(0.25)
asyncio.run(main())
"""

CORE = """
import time, types
open(PHASE, "w").write("w1")
time.sleep(0.15)  # the watcher looks at the phase file every 50 ms
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.serial_utils import MsgpackEncoder
core = EngineCoreProc()
out = core.preprocess_add_request(types.SimpleNamespace(arrival_time=time.time() - 0.020))
core._handle_client_request("ADD", out)
MsgpackEncoder().encode_into(types.SimpleNamespace(timestamp=time.monotonic() - 0.005, outputs=[1, 2]), bytearray())
open(PHASE, "w").write("idle")
time.sleep(0.25)
"""


def _run(tmp_path: Path, argv: list[str], code: str) -> list[dict]:
    for rel, text in STANDIN.items():
        (tmp_path / "site" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / rel).write_text(text)
    phase = tmp_path / "phase"
    phase.write_text("idle")
    out = tmp_path / "instr"
    env = dict(os.environ, KVCALC_INSTR_DIR=str(out), KVCALC_PHASE_FILE=str(phase), KVCALC_INSTR_PATHS="1",
               PYTHONPATH=f"{PYINSTR}:{tmp_path / 'site'}")
    subprocess.run([sys.executable, *argv], input=f"PHASE = {str(phase)!r}\n" + code, text=True, env=env, check=True,
                   timeout=60)
    return [json.loads(p.read_text()) for p in sorted(out.glob("instr-*.json"))]


def test_the_api_server_books_the_output_age_and_the_tokenizer_job(tmp_path):
    # the command line is what marks the API server process: `... vllm.entrypoints.cli.main serve ...`
    recs = [r for r in _run(tmp_path, ["-", "vllm.entrypoints.cli.main", "serve"], API) if r["phase"] == "w1"]
    assert len(recs) == 1
    rec = recs[0]
    age = rec["paths"]["api_output_age"]
    assert age["n"] == 1 and 9.5 <= age["age"]["mean_ms"] <= 60 and age["outputs"]["mean"] == 3
    (job,) = rec["pool_jobs"].values()
    assert job["jobs"] == 1 and job["wall"]["mean_ms"] >= 3.9 and job["thread_cpu"]["mean_ms"] > 0
    assert rec["probes"] > 0 and rec["gc_enabled"]


def test_the_engine_core_books_its_input_and_output_threads(tmp_path):
    # vLLM spawns the engine core with `python -c "from multiprocessing.spawn import ..."`
    code = "# multiprocessing.spawn\n" + CORE
    recs = [r for r in _run(tmp_path, ["-c", f"exec(open(0).read())  # multiprocessing.spawn"], code)
            if r["phase"] == "w1"]
    assert len(recs) == 1 and recs[0]["process"] == "engine core"
    paths = recs[0]["paths"]
    assert 19.5 <= paths["core_input"]["age"]["mean_ms"] <= 80
    assert paths["core_input_queue"]["n"] == 1
    assert 4.5 <= paths["core_output"]["age"]["mean_ms"] <= 60 and paths["core_output"]["outputs"]["max"] == 2


def test_nothing_is_installed_in_other_processes(tmp_path):
    recs = _run(tmp_path, ["-"], "import time\ntime.sleep(0.1)\n")
    assert recs == []
