#!/usr/bin/env python3
"""The host CPU's speed at the kind of work vLLM's API server does (issue 25): pure Python, one thread.

    python3 scripts/gpu_v4/pybench.py > pybench.json

The serve runs' machines differ by up to ~1.6x in the API server's CPU seconds per step and per SSE chunk (runs m-o,
docs/validation/README.md "Runs l-o"), more than the transformers decode reference (launch-bound, C++ and CUDA
driver work) tracks. This times what the API loop does per streamed token, each part 3 times, the fastest kept
(thread CPU seconds): JSON encoding of an OpenAI completion chunk and the SSE line around it, an asyncio loop's
turn of callbacks and futures, and dict/str work of an output processor. The figures are only compared between
machines (same Python, same script); nothing here is a vLLM cost.
"""
from __future__ import annotations

import asyncio
import json
import platform
import time

N = 100_000


def _json() -> None:
    chunk = {"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1764800000, "model": "m",
             "choices": [{"index": 0, "text": " t1234", "logprobs": None, "finish_reason": None,
                          "stop_reason": None}], "usage": None}
    for i in range(N):
        chunk["choices"][0]["text"] = f" t{i}"
        line = f"data: {json.dumps(chunk)}\n\n"
        json.loads(line[6:])


def _asyncio() -> None:
    async def worker(q: asyncio.Queue, out: list) -> None:
        while True:
            x = await q.get()
            if x is None:
                return
            out.append(x)

    async def main() -> None:
        qs = [asyncio.Queue() for _ in range(64)]
        out: list = []
        tasks = [asyncio.create_task(worker(q, out)) for q in qs]
        for i in range(N):
            qs[i % 64].put_nowait(i)
            if i % 64 == 63:
                await asyncio.sleep(0)
        for q in qs:
            q.put_nowait(None)
        await asyncio.gather(*tasks)

    asyncio.run(main())


def _dicts() -> None:
    state: dict = {}
    for i in range(N):
        rid = f"cmpl-{i % 512}"
        s = state.setdefault(rid, {"tokens": [], "text": "", "n": 0})
        s["tokens"].append(i)
        s["text"] += f" t{i % 97}"
        s["n"] += 1
        if s["n"] >= 256:
            del state[rid]


def best(fn) -> float:
    times = []
    for _ in range(3):
        t = time.thread_time()
        fn()
        times.append(time.thread_time() - t)
    return round(min(times), 4)


if __name__ == "__main__":
    got = {"json_sse_s": best(_json), "asyncio_queues_s": best(_asyncio), "dict_str_s": best(_dicts)}
    got["total_s"] = round(sum(got.values()), 4)
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        model = None
    print(json.dumps({"pybench": got, "iterations": N, "python": platform.python_version(), "cpu_model": model,
                      "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
