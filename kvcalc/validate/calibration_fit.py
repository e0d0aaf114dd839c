"""`kvcalc calibrate LOG...`: fit the user's environment (GPU, driver, vLLM version) from their vLLM start-up logs and
keep it in the user profile (kvcalc/calibrate.py says what is fitted, why, and where it is kept).

    kvcalc calibrate --gpu h100-sxm serve-tp1.log serve-tp2.log      # fit and save
    kvcalc calibrate --show                                          # what the profile holds

Each log is parsed (validate/vllm_log.py) and predicted with the settings it states, as `validate --from-log` does;
kvcalc's per-rank terms are set beside the log's:
- non-torch memory per rank ("non_torch_memory takes", "non-torch forward increase memory", "GiB for non-torch
  memory"): the log's value, per tensor-parallel size (two logs of one TP size must agree within 0.25 GiB);
- activation peak: observed / kvcalc's formula, as one scale (the logs' scales must agree within 25%);
- CUDA-graph memory vLLM subtracts ("Estimated CUDA graph memory", else "GiB for CUDAGraph memory" where kvcalc's
  rules subtract graphs), agreeing within 0.25 GiB or 25%.
Refused with one line, exit 2, nothing written: an unreadable/binary/oversized log, a log without memory lines or
without any breakdown line, an unknown version, logs of different GPUs or vLLM versions, contradicting logs, and an
existing calibration of the same GPU and version unless --force.
"""

from __future__ import annotations

import json
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from .. import options
from ..calibrate import layout_key, layout_text
from ..errors import UsageError
from ..units import GiB

NON_TORCH_AGREE = int(0.25 * GiB)
SCALE_AGREE = 0.25  # max/min - 1 of the logs' activation scales
GRAPH_AGREE = (int(0.25 * GiB), 0.25)
SAME_GPU = 0.01  # the logs' driver-reported totals within 1%: one kind of GPU


def _model_for(parsed: dict[str, Any], model: str | None, name: str) -> str:
    if model:
        return model
    from ..catalog import _by_hub_id

    served = parsed.get("settings", {}).get("model")
    if isinstance(served, str) and _by_hub_id(served.strip()):
        return _by_hub_id(served.strip())
    raise UsageError(f"{name}: cannot tell which model the log served"
                     + (f" ({served!r} is not in kvcalc's catalog)" if served else "") + "; give --model")


def _read(path: str, vllm_version: str | None) -> tuple[str, dict[str, Any], str]:
    """(file name, parsed log, vLLM version): UsageError (one line) when the log cannot be used."""
    from ..engines import vllm as vllm_engine
    from .vllm_log import parse_vllm_log, read_log

    name = Path(path).name
    if not Path(path).is_file():
        raise UsageError(f"cannot read log {path!r}: no such file")
    parsed = parse_vllm_log(read_log(path))
    values = parsed["values"]
    if not values:
        raise UsageError(f"{name}: no vLLM memory lines (is this a vLLM start-up log?)")
    version = vllm_version or parsed.get("version")
    if not version:
        raise UsageError(f"{name}: the log states no vLLM version; give --vllm-version")
    try:
        vllm_engine.parse_version(str(version))
    except UsageError as exc:
        raise UsageError(f"{name}: kvcalc has no rules for vLLM {version}: {exc}") from None
    return name, parsed, str(version)


def _log_figures(name: str, parsed: dict[str, Any], version: str, gpu: str, model: str | None,
                 settings_only: bool = False) -> dict[str, Any]:
    """kvcalc's uncalibrated estimate beside the log's terms. settings_only: a log without a memory breakdown is
    kept for the settings it states (the server a bench file ran against) instead of being refused."""
    from ..catalog import load_model
    from ..engines import vllm as vllm_engine
    from .predict import gpu_with_total, settings_with_sources

    values = parsed["values"]
    settings, _ = settings_with_sources(parsed, {"version": version})
    spec = load_model(_model_for(parsed, model, name))
    if model:
        from .vllm_log import log_mismatches

        other = [m for m in log_mismatches(parsed, spec, model) if m.startswith("model:")]
        if other:
            raise UsageError(f"{name}: {other[0]}; calibrate each model's logs with its own --model")
    profile = gpu_with_total(gpu, values.get("total_memory_bytes"))
    est = vllm_engine.estimate(spec, profile, settings)
    graph_observed = values.get("cudagraph_estimate_bytes")
    if graph_observed is None and est.cudagraph_bytes and "graph_capture_bytes" in values:
        graph_observed = values["graph_capture_bytes"]
    fig = {"log": name, "version": version, "tp": (settings.tensor_parallel, settings.pipeline_parallel),
           "total": values.get("total_memory_bytes"), "non_torch": values.get("non_torch_bytes"),
           "activation": values.get("activation_bytes"), "graphs": graph_observed,
           "predicted": {"non_torch": est.non_torch_bytes, "activation": est.activation_bytes,
                         "graphs": est.cudagraph_bytes},
           "spec": spec, "profile": profile, "settings": settings, "values": values,
           "observed_kv": _capacity(values), "predicted_kv_before": _capacity_of(est, values)}
    served = parsed.get("settings", {}).get("model")
    fig["served_model"] = served if isinstance(served, str) else None
    fig["prefix_caching"] = parsed.get("settings", {}).get("enable_prefix_caching")
    if fig["non_torch"] is None and fig["activation"] is None and fig["graphs"] is None and not settings_only:
        raise UsageError(f"{name}: insufficient: the log prints no memory breakdown (non-torch, activation or "
                         "CUDA-graph memory; vLLM prints them in its 'Memory profiling' lines from 0.6.4 and in the "
                         "'Free memory on device' summary from 0.10)")
    return fig


def _capacity(values: dict[str, Any]) -> tuple[str, int] | None:
    for key in ("kv_cache_tokens", "num_gpu_blocks", "kv_tokens_in_error", "available_kv_bytes"):
        if values.get(key) is not None:
            return key, values[key]
    return None


def _capacity_of(est: Any, values: dict[str, Any]) -> int | None:
    cap = _capacity(values)
    if cap is None:
        return None
    return {"kv_cache_tokens": est.logged_kv_tokens, "num_gpu_blocks": est.num_gpu_blocks,
            "kv_tokens_in_error": est.kv_capacity_tokens, "available_kv_bytes": est.available_kv_bytes}[cap[0]]


def _pair(bench: str, figs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """(bench path, the log figures of the server it ran against): `FILE=LOG` names the log; a bare FILE goes with
    the one log given, or with the logs' one server when they all state the same speed-relevant settings."""
    path, _, log = bench.rpartition("=") if "=" in bench and not Path(bench).is_file() else (bench, "", "")
    if log:
        match = [f for f in figs if f["log"] == Path(log).name]
        if not match:
            raise UsageError(f"--bench {bench}: {log!r} is not one of the logs given "
                             f"({', '.join(f['log'] for f in figs)})")
        return path, match[0]

    def server(f: dict[str, Any]) -> tuple:
        s = f["settings"]
        return (f["spec"].name, s.tensor_parallel, s.pipeline_parallel, s.weights.name, s.kv.name,
                s.gpu_memory_utilization, s.max_model_len, s.max_num_batched_tokens, s.max_num_seqs, s.enforce_eager)

    if len({server(f) for f in figs}) > 1:
        raise UsageError(f"--bench {path}: the logs ran servers with different settings; say which one the bench ran "
                         f"against: --bench {path}=LOG (LOG one of {', '.join(f['log'] for f in figs)})")
    return path, figs[0]


def fit(paths: list[str], gpu: str, model: str | None = None, vllm_version: str | None = None,
        benches: tuple[str, ...] = (), input_len: int | None = None, output_len: int | None = None):
    """(EnvCalibration, per-log figures with the capacity error before and after, the speed fit's report). UsageError
    when the logs are unusable, from different environments, contradict each other, or fit nothing; with bench files
    (`vllm bench serve` / `throughput` results of the logs' server), the speed model's per-GPU constants are fitted
    too (speed_fit.py), and a log without a memory breakdown is kept for its settings."""
    import dataclasses

    from .. import calibrate
    from ..engines import vllm as vllm_engine

    logs = [_read(p, vllm_version) for p in paths]
    versions = sorted({calibrate.release(version) for _, _, version in logs})
    if len(versions) > 1:
        raise UsageError(f"logs of different vLLM versions ({', '.join(versions)}): calibrate one environment at a "
                         "time")
    figs = [_log_figures(name, parsed, version, gpu, model, settings_only=bool(benches))
            for name, parsed, version in logs]
    totals = [(f["log"], f["total"]) for f in figs if f["total"]]
    if totals:
        lo, hi = min(totals, key=lambda t: t[1]), max(totals, key=lambda t: t[1])
        if hi[1] > lo[1] * (1 + SAME_GPU):
            raise UsageError(f"logs from different GPUs: {lo[0]} reports {lo[1] / GiB:.2f} GiB, {hi[0]} "
                             f"{hi[1] / GiB:.2f} GiB; calibrate one GPU at a time")
        from ..hardware import get_gpu

        given = get_gpu(gpu)
        if abs(lo[1] - given.memory_total_bytes) > 0.05 * given.memory_total_bytes:
            raise UsageError(f"{lo[0]}: the log's GPU has {lo[1] / GiB:.2f} GiB, --gpu {gpu} ({given.name}) has "
                             f"{given.memory_total_bytes / GiB:.2f} GiB: not this GPU")
    by_tp: dict[int, list[tuple[str, int]]] = {}
    for f in figs:
        if f["non_torch"] is not None:
            by_tp.setdefault(f["tp"], []).append((f["log"], f["non_torch"]))
    non_torch = {}
    for tp, seen in sorted(by_tp.items()):
        lo, hi = min(seen, key=lambda t: t[1]), max(seen, key=lambda t: t[1])
        if hi[1] - lo[1] > NON_TORCH_AGREE:
            raise UsageError(f"contradicting logs: non-torch memory at {layout_text(tp)} is {lo[1] / GiB:.2f} GiB in {lo[0]} "
                             f"but {hi[1] / GiB:.2f} GiB in {hi[0]} (more than 0.25 GiB apart)")
        non_torch[tp] = int(statistics.mean(b for _, b in seen))
    by_tp_scale: dict[int, list[tuple[str, float]]] = {}
    for f in figs:
        if f["activation"] is not None and f["predicted"]["activation"]:
            by_tp_scale.setdefault(f["tp"], []).append((f["log"], f["activation"] / f["predicted"]["activation"]))
    scale = {}
    for tp, seen in sorted(by_tp_scale.items()):
        lo, hi = min(seen, key=lambda t: t[1]), max(seen, key=lambda t: t[1])
        if hi[1] > lo[1] * (1 + SCALE_AGREE):
            raise UsageError(f"contradicting logs: at {layout_text(tp)} the activation peak is x{lo[1]:.2f} kvcalc's in "
                             f"{lo[0]} but x{hi[1]:.2f} in {hi[0]} (more than 25% apart)")
        scale[tp] = round(statistics.mean(x for _, x in seen), 4)
    graphs_by_tp: dict[int, list[tuple[str, int]]] = {}
    for f in figs:
        if f["graphs"] is not None:
            graphs_by_tp.setdefault(f["tp"], []).append((f["log"], f["graphs"]))
    graphs = {}
    for tp, seen in sorted(graphs_by_tp.items()):
        lo, hi = min(seen, key=lambda t: t[1]), max(seen, key=lambda t: t[1])
        if hi[1] - lo[1] > max(GRAPH_AGREE[0], GRAPH_AGREE[1] * hi[1]):
            raise UsageError(f"contradicting logs: at {layout_text(tp)} CUDA-graph memory is {lo[1] / GiB:.2f} GiB in {lo[0]} "
                             f"but {hi[1] / GiB:.2f} GiB in {hi[0]} (more than 0.25 GiB and 25% apart)")
        graphs[tp] = int(statistics.mean(b for _, b in seen))
    speed, speed_report, speed_notes = None, [], []
    if benches:
        from .speed_fit import fit_speed, rows_for

        rows = []
        for bench in benches:
            path, fig = _pair(bench, figs)
            rows += rows_for(path, fig, input_len, output_len, speed_notes)
        if not rows:
            raise UsageError("insufficient bench data: the bench files hold no TPOT, TTFT or throughput figure kvcalc "
                             "can use (" + "; ".join(speed_notes)[:300] + ")")
        speed, speed_report = fit_speed(rows, figs[0]["profile"], speed_notes)
    if not non_torch and not scale and not graphs and speed is None:
        raise UsageError("insufficient: no log gives a term to fit (non-torch, activation or CUDA-graph memory)")
    profile_name = figs[0]["profile"].name
    env = calibrate.EnvCalibration(speed=speed,
        gpu=profile_name, vllm_version=versions[0], non_torch_by_tp=tuple(sorted(non_torch.items())),
        activation_scale_by_tp=tuple(sorted(scale.items())), cudagraph_by_tp=tuple(sorted(graphs.items())), total_memory_bytes=totals[0][1] if totals else None,
        logs=tuple(f["log"] for f in figs), created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    for f in figs:
        after = vllm_engine.estimate(f["spec"], f["profile"], dataclasses.replace(f["settings"], calibration=env))
        f["predicted_kv_after"] = _capacity_of(after, f["values"])
    return env, figs, {"rows": speed_report, "notes": speed_notes}


def _err(pred: int | None, cap: tuple[str, int] | None) -> str:
    if pred is None or cap is None or not cap[1]:
        return "-"
    return f"{(pred - cap[1]) / cap[1]:+.1%}"


def _show(as_json: bool) -> None:
    from .. import calibrate

    envs = calibrate.load_profile()
    if as_json:
        click.echo(json.dumps({"profile": str(calibrate.profile_path()),
                               "environments": [e.to_json() for e in envs]}, indent=1))
        return
    if not envs:
        click.echo(f"no calibration in {calibrate.profile_path()}")
        return
    click.echo(f"calibrations in {calibrate.profile_path()}:")
    for e in envs:
        click.echo(f"- {e.gpu}, vLLM {e.vllm_version}, {len(e.logs)} log(s), {e.created}:")
        for layout in e.layouts():
            click.echo("    " + e.describe(*layout).split(": ", 1)[1].split("; --no")[0])
        for reason in e.speed.not_fitted if e.speed is not None else ():
            click.echo(f"    speed: not fitted, kvcalc's value kept: {reason}")


@click.command("calibrate", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("logs", nargs=-1, metavar="LOG...")
@options.override("gpu", "the GPU the logs ran on (kvcalc gpus): plan uses the calibration for this GPU"
                  ).click_option()
@options.override("model", "the model the logs served (catalog name or config.json) [default: the log's, when "
                  "kvcalc's catalog has it]").click_option()
@options.override("vllm_version", "when the logs do not print it").click_option()
@click.option("--bench", "benches", multiple=True, metavar="FILE[=LOG]",
              help="a `vllm bench serve --save-result` or `vllm bench throughput --output-json` result of the logs' "
                   "server (repeatable): fits the speed model's decode bandwidth, tensor efficiency, step "
                   "overhead and TP all-reduce; =LOG names the log of the server it ran against when the logs "
                   "ran several")
@options.override("input_len", "prompt length of `vllm bench throughput` results (they do not record it)"
                  ).click_option()
@options.override("output_len", "output length of `vllm bench throughput` results").click_option()
@click.option("--force", is_flag=True, help="replace an existing calibration of the same GPU and vLLM version")
@click.option("--dry-run", is_flag=True, help="fit and show, write nothing")
@click.option("--show", is_flag=True, help="print the calibrations in the profile and exit")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def calibrate_command(logs, gpu, model, vllm_version, benches, input_len, output_len, force, dry_run, show, as_json):
    """Fit your own vLLM environment (GPU, driver, vLLM version) from its start-up logs: non-torch memory per rank,
    CUDA-graph memory and the activation peak's scale; with --bench files, the speed model's per-GPU constants. plan
    and explain use it when GPU and vLLM version match."""
    from .. import calibrate

    if show:
        _show(as_json)
        return
    if not logs:
        raise UsageError("give the vLLM start-up logs to fit (kvcalc calibrate --gpu GPU LOG...), or --show")
    if not gpu:
        raise UsageError("calibrate needs --gpu (the GPU the logs ran on, e.g. h100-sxm)")
    if vllm_version is not None:
        calibrate.release(vllm_version)  # one line when it is not a version
    env, figs, speed = fit(list(logs), gpu, model, vllm_version, tuple(benches), input_len, output_len)
    envs = calibrate.load_profile()
    old = next((e for e in envs if e.gpu == env.gpu and e.vllm_version == env.vllm_version), None)
    if old is not None and not force and not dry_run:
        raise UsageError(f"a calibration for {env.gpu}, vLLM {env.vllm_version} exists in "
                         f"{calibrate.profile_path()} (from {', '.join(old.logs)}, {old.created}); --force replaces it")
    written = None
    if not dry_run:
        written = calibrate.save_profile([e for e in envs if e is not old] + [env])
    if as_json:
        click.echo(json.dumps({"calibration": env.to_json(), "written": str(written) if written else None,
                               "replaced": old is not None and written is not None,
                               "logs": [{"log": f["log"], "layout": layout_key(f["tp"]), "capacity": (f["observed_kv"] or [None])[0],
                                         "observed": (f["observed_kv"] or [None, None])[1],
                                         "before": f["predicted_kv_before"], "after": f["predicted_kv_after"]}
                                        for f in figs],
                               "benches": speed["rows"], "bench_notes": speed["notes"]}, indent=1))
        return
    tps = env.layouts()
    click.echo(f"{env.gpu}, vLLM {env.vllm_version}, from {len(figs)} log(s):")
    for tp in tps:
        click.echo("  " + env.describe(*tp).split(": ", 1)[1].split("; --no")[0])
    click.echo("KV capacity error on these logs (kvcalc vs log), before -> after calibration:")
    for f in figs:
        cap = f["observed_kv"]
        click.echo(f"  {f['log']} ({layout_text(f['tp'])}, {cap[0] if cap else 'no capacity line'}): "
                   f"{_err(f['predicted_kv_before'], cap)} -> {_err(f['predicted_kv_after'], cap)}")
    if env.speed is not None:
        for reason in env.speed.not_fitted:
            click.echo(f"  speed: not fitted, kvcalc's value kept: {reason}")
        click.echo("bench figures (measured; kvcalc before -> after calibration):")
        for r in speed["rows"]:
            unit, k = ("tok/s", 1.0) if r["quantity"] == "tokens_per_s" else ("ms", 1e3)
            click.echo(f"  {r['bench']} {r['quantity'].upper()}: {r['measured'] * k:.2f} {unit}; "
                       f"{r['before'] / r['measured'] - 1:+.1%} -> {r['after'] / r['measured'] - 1:+.1%}")
        for note in speed["notes"]:
            click.echo(f"  note: {note}")
    if written:
        click.echo(f"{'replaced' if old else 'wrote'} {written}")
    else:
        click.echo("dry run: nothing written")
