"""Sets CPython's GIL switch interval from KVCALC_SWITCH_INTERVAL_S in every process that imports site.

Used by serve_cases_k.json (issue 25): vLLM's engine core runs its scheduler loop and the thread that takes requests
in (v1/engine/core.py process_input_sockets) under one GIL, and a thread that wants the GIL while another runs
Python waits up to the switch interval (5 ms by default). A server started with a shorter interval tests whether
prompts reach the engine late because of that hand-over. The server's processes are started afresh (spawn) or
forked from one that ran this, so all of them carry the setting.
"""
import os
import sys

_interval = os.environ.get("KVCALC_SWITCH_INTERVAL_S")
if _interval:
    sys.setswitchinterval(float(_interval))
    # into the server log, so the run shows which processes took it
    print(f"kvcalc sitecustomize: switch interval {sys.getswitchinterval()} s in pid {os.getpid()} ({' '.join(sys.argv)[:80]})",
          file=sys.stderr, flush=True)
