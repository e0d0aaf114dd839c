"""Engine stand-ins for the runner resilience tests: they run inside the runners' real child processes (passed as
--case-runner) and really crash (abort), die by signal, hang, or raise the CUDA out-of-memory error text. Not
imported by kvcalc."""

from __future__ import annotations

import os
import signal
import time
from typing import Any


def _act(case: dict[str, Any]) -> None:
    kind = case.get("fake", "ok")
    if kind == "abort":
        os.abort()  # SIGABRT, as a failed CUDA assert ends a process
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)
    if kind == "spawn-hang":  # a worker of its own (as vLLM's TP workers), then a hang
        import subprocess
        import sys

        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(case["pidfile"], "w") as fh:
            fh.write(str(worker.pid))
        time.sleep(3600)
    if kind == "hang":
        time.sleep(3600)  # a deadlocked kernel: only the watchdog (or the parent's timeout) ends it
    if kind == "oom":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.80 GiB total capacity)")


def vllm_case(case: dict[str, Any], log_path) -> tuple[dict[str, Any], dict[str, Any]]:
    """run_vllm_case's signature: (row, health)."""
    _act(case)
    return ({"engine": "vllm", "case_id": case["id"], "settings": {"model": case.get("model")}, "status": "ok",
             "observed": {"pid": os.getpid()}}, {})


def hf_case(case: dict[str, Any]) -> dict[str, Any]:
    """run_hf_case's signature: one row."""
    _act(case)
    return {"engine": "hf", "case_id": case["id"], "settings": {"model": case.get("model")}, "status": "ok",
            "observed": {"pid": os.getpid()}}
