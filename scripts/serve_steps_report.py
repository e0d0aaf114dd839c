"""The H200 serve runs e/f/g step by step: every engine step vLLM logged (--enable-logging-iteration-details,
kvcalc/validate/vllm_iterations.py) against the steps kvcalc's simulation schedules (kvcalc/serve_sim.py) and what
kvcalc/step_cost.py charges for them (issue 25).

Per run (a workload of a server's log; runs.jsonl's row and the --save-detailed JSON in raw-efg.tar.xz):
- step wall time (ms: the gap from the previous step's line to the step's own, the API server's clock: a line is
  logged as the step's outputs arrive; means, as the API server logs a busy stretch's lines in bunches; a step after
  an idle engine carries the idle time too, so the lone-request runs' prompt steps are not step times: their
  engine time is the /metrics interval of serve_load_report's lone-request table) by class: pure decode by the number of decodes, and steps with prompt tokens by
  how many (at most max_cudagraph_capture_size tokens: replayed as a CUDA graph; more: launched eagerly);
- the composition: steps with prompt tokens, prompts per such step, the prefill bursts (consecutive steps with
  prompt tokens: vLLM admits a wave of equal requests over a few full-budget steps, then decodes them in lockstep);
- the same figures of the simulated run (its trace), so each difference is a mechanism's, not a summary's.

A log's steps are cut into the bench runs by the client's clock: vllm bench's `start_times` (one perf_counter clock per
server, the runner calls the bench in-process) and `duration` place each run; the offset to the server's clock is
the first run's first step.

    PYTHONPATH=. python3 scripts/serve_steps_report.py            # markdown
    PYTHONPATH=. python3 scripts/serve_steps_report.py --json
    PYTHONPATH=. python3 scripts/serve_steps_report.py --write    # docs/validation/serve-steps.md and .json
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load_report as load_report  # noqa: E402

from kvcalc.validate.vllm_iterations import Step, parse_steps  # noqa: E402

ROOT = load_report.ROOT
RAW = load_report.DATA / "raw-efg.tar.xz"
STALL_S = 0.5  # a step this long is no step cost of these models: a Triton kernel compiled at first use (the MoE logs'
# jit_monitor warning) or the engine idle between requests
GRAPH_MAX = 512  # max_cudagraph_capture_size of every server of runs e-g (their logs' compilation_config)
DECODE_CLASSES = ((1, 1), (2, 8), (9, 32), (33, 64), (65, 128), (129, 256), (257, 1024))
PREFILL_CLASSES = ((1, GRAPH_MAX), (GRAPH_MAX + 1, 4096), (4097, 8191), (8192, 1 << 30))

_MEMBERS = None


def members() -> dict:
    """raw-efg.tar.xz's files by name, read once."""
    global _MEMBERS
    if _MEMBERS is None:
        with tarfile.open(RAW) as tar:
            _MEMBERS = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                        if m.isfile() and m.name.startswith("raw/")}
    return _MEMBERS


def server_steps(shape: str, run: str) -> list[Step]:
    return parse_steps(members()[f"{shape}.{run}.server.log"].decode())


def run_steps(cases: list[dict]) -> dict:
    """case id -> (the case, its logged steps, their wall times), every run of e-g with a server log."""
    out = {}
    by_server: dict = {}
    for c in cases:
        if c["run"] in "efg":
            by_server.setdefault((c["id"].rsplit(".", 1)[0], c["run"]), []).append(c)
    for (shape, run), group in by_server.items():
        steps = server_steps(shape, run)
        windows = []
        for c in group:
            d = json.loads(members()[f"{c['id']}.{run}.json"])
            windows.append((min(d["start_times"]), min(d["start_times"]) + d["duration"], c))
        windows.sort(key=lambda w: w[0])
        offset = steps[0].t - windows[0][0]  # the first run's first step: the client's clock on the server's
        for k, (lo, hi, c) in enumerate(windows):
            nxt = windows[k + 1][0] if k + 1 < len(windows) else float("inf")
            mine = [s for s in steps if lo + offset - 0.05 <= s.t < min(hi + offset + 0.5, nxt + offset - 0.05)]
            walls = [b.t - a.t for a, b in zip(mine, mine[1:])]
            out[c["id"]] = (c, mine, walls)  # walls: steps[1:] (the first has no line before it to time it)
    return out


def classify(ctx_tokens: int, decodes: int) -> str:
    if ctx_tokens == 0:
        for lo, hi in DECODE_CLASSES:
            if lo <= decodes <= hi:
                return f"decode {lo}-{hi}" if lo != hi else f"decode {lo}"
    total = ctx_tokens + decodes
    for lo, hi in PREFILL_CLASSES:
        if lo <= total <= hi:
            graph = "graph" if total <= GRAPH_MAX else "eager"
            return f"prompt {lo}-{hi if hi < 1 << 29 else 'budget'} ({graph})"
    return "other"


def class_means(rows) -> dict:
    """class -> (steps, mean ms, median ms) over (ctx tokens, decodes, seconds) rows (the median is blind to the
    seconds-long stalls of a Triton kernel compiled at first use, jit_monitor's warning in the MoE logs)."""
    acc: dict = {}
    for ctx, dec, dt in rows:
        acc.setdefault(classify(ctx, dec), []).append(dt)
    return {k: (len(v), 1e3 * statistics.fmean(v), 1e3 * statistics.median(v)) for k, v in sorted(acc.items())}


def bursts(rows) -> list[tuple[int, int]]:
    """(steps, prompts) of each maximal stretch of steps with prompt tokens; rows: (ctx requests, ctx tokens, ...)."""
    out, cur = [], None
    for req, tok in rows:
        if tok > 0:
            cur = [cur[0] + 1, cur[1] + req] if cur else [1, req]
        elif cur:
            out.append(tuple(cur))
            cur = None
    if cur:
        out.append(tuple(cur))
    return out


def composition(rows) -> dict:
    """Steps, steps with prompt tokens, prompts per such step, mixed steps (prompts and decodes), bursts."""
    pre = [(r, t, g) for r, t, g in rows if t > 0]
    b = bursts([(r, t) for r, t, _ in rows])
    big = [x for x in b if x[1] >= 8]
    return {"steps": len(rows), "prompt_steps": len(pre),
            "prompts_per_prompt_step": statistics.fmean(r for r, _, _ in pre) if pre else 0.0,
            "mixed_steps": sum(1 for _, _, g in pre if g > 0), "bursts": len(b),
            "waves": len(big), "wave_prompts": [x[1] for x in big][:8], "wave_steps": [x[0] for x in big][:8]}


def simulated(case: dict, frontend_s: float):
    """The simulated run and its step trace: (start s, seconds, ctx requests, ctx tokens, decodes)."""
    trace: list = []
    res = load_report._simulate(case, frontend_s, trace=trace)[0]
    return res, trace


def report() -> dict:
    cases = load_report.runs()
    fe = load_report.fit_frontend(cases)
    out = []
    for cid, (case, steps, walls) in run_steps(cases).items():
        _, trace = simulated(case, fe)
        meas = [(s.context_tokens, s.generation_requests, w) for s, w in zip(steps[1:], walls)]
        sim_rows = [(tok, dec, dt) for _, dt, _, tok, dec in trace]
        stalls = [w for w in walls if w > STALL_S]
        out.append({"id": cid, "run": case["run"],
                    "measured": {"classes": class_means(meas), "stalls": len(stalls), "stall_s": sum(stalls),
                                 "composition": composition([(s.context_requests, s.context_tokens,
                                                              s.generation_requests) for s in steps]),
                                 "duration_s": steps[-1].t - steps[0].t if steps else 0.0,
                                 "prompt_tokens": sum(s.context_tokens for s in steps)},
                    "simulated": {"classes": class_means(sim_rows),
                                  "composition": composition([(r, t, g) for _, _, r, t, g in trace]),
                                  "duration_s": trace[-1][0] - trace[0][0] if trace else 0.0,
                                  "prompt_tokens": sum(t for _, _, _, t, _ in trace)}})
    return {"frontend_per_request_s": fe, "runs": out}


def summary_lines(rep: dict) -> list[str]:
    """One line per run: the figures that decide its errors."""
    lines = ["| run | steps | first to last step s | prompt tokens scheduled | decode 65-128 ms (mean) | full-budget "
             "prompt step ms (median) | steps over 0.5 s (s) |", "|---|---|---|---|---|---|---|"]
    for r in rep["runs"]:
        m, s = r["measured"], r["simulated"]

        def cell(key, i):
            a, b = m["classes"].get(key), s["classes"].get(key)
            return f"{a[i]:.1f} / {b[i]:.1f}" if a and b else "-"
        lines.append(f"| {r['id']} | {m['composition']['steps']} / {s['composition']['steps']} | "
                     f"{m['duration_s']:.2f} / {s['duration_s']:.2f} | {m['prompt_tokens']:,} / {s['prompt_tokens']:,} | "
                     f"{cell('decode 65-128', 1)} | {cell('prompt 8192-budget (eager)', 2)} | "
                     f"{m['stalls']} ({m['stall_s']:.1f}) |")
    return lines


def markdown(rep: dict) -> str:
    lines = summary_lines(rep) + [""]
    for r in rep["runs"]:
        m, s = r["measured"], r["simulated"]
        lines += [f"### {r['id']} (run {r['run']})", "",
                  f"steps {m['composition']['steps']} logged / {s['composition']['steps']} simulated; "
                  f"from first to last step {m['duration_s']:.2f} s / {s['duration_s']:.2f} s; prompt tokens "
                  f"scheduled {m['prompt_tokens']:,} / {s['prompt_tokens']:,}", "",
                  "| step class | steps | mean ms | median ms |", "|---|---|---|---|"]
        for k in sorted(set(m["classes"]) | set(s["classes"]), key=_class_order):
            nan = (0, float("nan"), float("nan"))
            a, b = m["classes"].get(k, nan), s["classes"].get(k, nan)
            lines.append(f"| {k} | {a[0]} / {b[0]} | {a[1]:.1f} / {b[1]:.1f} | {a[2]:.1f} / {b[2]:.1f} |")
        mc, sc = m["composition"], s["composition"]
        lines += ["", f"- steps with prompt tokens {mc['prompt_steps']} / {sc['prompt_steps']}, prompts per such step "
                  f"{mc['prompts_per_prompt_step']:.2f} / {sc['prompts_per_prompt_step']:.2f}, mixed with decodes "
                  f"{mc['mixed_steps']} / {sc['mixed_steps']}; prefill bursts {mc['bursts']} / {sc['bursts']}; waves "
                  f"(bursts of 8+ prompts) {mc['waves']} / {sc['waves']}: prompts {mc['wave_prompts']} / "
                  f"{sc['wave_prompts']}, steps {mc['wave_steps']} / {sc['wave_steps']}", ""]
    return "\n".join(lines)


def _class_order(k: str):
    head, rng = k.split(" ")[:2]
    return (head != "decode", int(rng.split("-")[0]))


if __name__ == "__main__":
    rep = report()
    if "--write" in sys.argv:
        (ROOT / "docs" / "validation" / "serve-steps.json").write_text(json.dumps(rep, indent=1) + "\n")
        (ROOT / "docs" / "validation" / "serve-steps.md").write_text(
            "# vLLM engine steps, logged and simulated (H200 runs e-g)\n\nGenerated by "
            "`scripts/serve_steps_report.py --write`: see its docstring for what each figure is. Each cell: logged / "
            "simulated.\n\n" + markdown(rep) + "\n")
    print(json.dumps(rep, indent=1) if "--json" in sys.argv else markdown(rep))
