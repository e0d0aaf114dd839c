"""`kvcalc validate`: compare kvcalc with a vLLM start-up log, or run the real engines and compare.

    kvcalc validate --from-log vllm.log --model llama-3.1-8b --gpu h100-sxm      (no GPU, no torch needed)
    kvcalc validate --bench result.json --model llama-3.1-8b --gpu h100-sxm     (a vllm bench serve result)
    kvcalc validate --report results/vllm.jsonl                                  (tables of earlier runs)
    kvcalc validate --hf --vllm --out results/ [--quick]                         (on a GPU host)
    kvcalc validate --hf --device cpu --model llama-3.2-1b --out results/        (transformers on the CPU)

Importing this module imports neither torch nor vLLM: the runners load them in child processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .. import limits
from .. import options
from ..cli_errors import CONTEXT_SETTINGS
from ..errors import UsageError, shown
from ..input_files import is_file


def _from_log(path: str, model: str | None, gpu: str | None, as_json: bool, overrides: dict, *, strict: bool = False,
              vllm_version: str | None = None, run: int | None = None) -> None:
    """Compare a start-up log with kvcalc: a verdict per row against compare.TOLERANCES, the reasons the log may be
    another run than the one asked for (MISMATCH), and what was assumed. --strict: exit 1 on any MISS or MISMATCH."""
    from .compare import render_table
    from .reports import from_log, log_json
    from .vllm_log import log_answer

    sglang_text = _sglang_text(path)
    if sglang_text is not None:  # the engine is read off the log's own wording
        _from_sglang_log(sglang_text, Path(path), model, gpu, as_json, overrides, strict=strict)
        return
    if overrides.pop("mem_fraction_static", None) is not None:
        raise UsageError("--mem-fraction-static is SGLang's; this is a vLLM log (use --util)")
    if overrides.pop("sglang_version", None) is not None:
        raise UsageError("--sglang-version is SGLang's; this is a vLLM log (use --vllm-version)")
    result = from_log(path, model, gpu, overrides, vllm_version=vllm_version, run=run)
    parsed, report, model = result["parsed"], result["report"], result["model"]
    for warning in parsed["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    if result["model_note"]:
        click.echo(f"note: {result['model_note']}", err=True)
    rows, mismatches = report["rows"], report["mismatches"]
    if as_json:
        click.echo(json.dumps(log_json(parsed, report), indent=1))
    else:
        version = parsed.get("version") or "unknown version"
        click.echo(render_table(rows, title=f"vLLM {version} log {Path(path).name} vs kvcalc ({model} on {gpu})"))
        for err in parsed.get("errors", []):
            click.echo(f"log reports a start-up failure: {err}")
        answer = log_answer(parsed, (report["assumed"].get("max_model_len") or {}).get("value"))
        _echo_findings(rows, mismatches, report["notes"], report["assumed"],
                       [f"answer (the log's own figures): {answer}"] if answer else [])
    _exit_if_strict(strict, rows, mismatches)


def _misses_and_passes(rows: list[dict]) -> tuple[list[str], int]:
    return [r["quantity"] for r in rows if r.get("verdict") == "MISS"], sum(r.get("verdict") == "PASS" for r in rows)


def _echo_findings(rows: list[dict], mismatches: list[str] | None, notes: list[str], assumed: dict,
                   extra: list[str]) -> None:
    """What every comparison prints under its table: MISMATCH lines, notes, the settings compared and where each
    came from, `extra` lines, the verdict. mismatches None: a comparison that has no such check (SGLang logs)."""
    misses, passes = _misses_and_passes(rows)
    for line in mismatches or []:
        click.echo(f"MISMATCH {line}")
    for line in notes:
        click.echo(f"note: {line}")
    click.echo("settings: " + ", ".join(f"{k} {v['value']} ({v['from']})" for k, v in assumed.items()
                                        if v["value"] is not None))
    for line in extra:
        click.echo(line)
    click.echo(f"verdict: {passes} PASS, {len(misses)} MISS" + (f" ({', '.join(misses)})" if misses else "")
               + (f", {len(mismatches)} MISMATCH" if mismatches else ""))


def _exit_if_strict(strict: bool, rows: list[dict], mismatches: list[str] | None) -> None:
    """--strict: exit 1 on any MISS or MISMATCH (after the report is printed)."""
    misses, _ = _misses_and_passes(rows)
    if strict and (misses or mismatches):
        click.echo(f"error: --strict: {len(misses)} MISS" + ("" if mismatches is None else
                                                           f", {len(mismatches)} MISMATCH"), err=True)
        raise SystemExit(1)


def _sglang_text(path: str) -> str | None:
    """The log's text when it is an SGLang start-up log (validate/sglang_log.py), else None (also for a file that
    cannot be read: the vLLM path says why)."""
    from .sglang_log import is_sglang_log
    from .vllm_log import read_log

    if not is_file(path):
        return None
    text = read_log(Path(path))
    return text if is_sglang_log(text) else None


def _from_sglang_log(text: str, p: Path, model: str | None, gpu: str, as_json: bool, overrides: dict, *,
                     strict: bool = False) -> None:
    """--from-log for an SGLang start-up log (validate/sglang_log.py): the same table, verdicts and --strict."""
    from .compare import render_table
    from .sglang_log import check_sglang_log, parse_sglang_log

    if not gpu:
        raise UsageError("--from-log needs --gpu (e.g. h100-sxm) for an SGLang log too")
    parsed = parse_sglang_log(text)
    if not parsed["values"]:
        raise UsageError(f"{p}: no SGLang memory lines found (KV Cache is allocated, max_total_num_tokens=, "
                         "Load weight end)")
    if not model:
        from .reports import model_the_log_served

        served = parsed["settings"].get("model_path")
        model = model_the_log_served(served, "server ran")
        click.echo(f"note: model {model} (the log served {served})", err=True)
    # validate's vLLM-named options in SGLang's terms (--util is vLLM's gpu_memory_utilization: not carried over)
    known = {"kv": "kv_cache_dtype", "tensor_parallel_size": "tp_size", "max_model_len": "context_length",
             "max_num_seqs": "max_running_requests", "max_num_batched_tokens": "chunked_prefill_size",
             "weights": "weights", "mem_fraction_static": "mem_fraction_static", "sglang_version": "version"}
    given = {known[k]: v for k, v in overrides.items() if k in known}
    ignored = sorted(k for k in overrides if k not in known)
    report = check_sglang_log(parsed, model, gpu, **given)
    if ignored:
        report["notes"].insert(0, f"{', '.join(ignored)}: vLLM options, not used for an SGLang log")
    rows = report["rows"]
    if as_json:
        misses, passes = _misses_and_passes(rows)
        click.echo(json.dumps({"engine": "sglang", "parsed": {k: parsed[k] for k in ("settings", "values", "errors")},
                               "comparison": rows, "notes": report["notes"], "assumed": report["assumed"],
                               "verdict": {"pass": passes, "miss": len(misses), "mismatch": 0}}, indent=1))
    else:
        click.echo(render_table(rows, title=f"SGLang log {p.name} vs kvcalc ({model} on {gpu})"))
        _echo_findings(rows, None, report["notes"], report["assumed"], [])
    _exit_if_strict(strict, rows, None)


def _metrics(source: str, model: str | None, gpu: str | None, as_json: bool, overrides: dict, *, strict: bool,
             vllm_version: str | None) -> None:
    """Compare a running server's /metrics (vllm:cache_config_info) with the plan for these options (metrics.py)."""
    from .compare import render_table
    from .metrics import check_metrics, read_metrics

    if not model or not gpu:
        raise UsageError("--metrics needs --model and --gpu (the plan to compare the server with)")
    report = check_metrics(read_metrics(source), model, gpu, vllm_version=vllm_version, **overrides)
    rows, mismatches = report["comparison"], report["mismatches"]
    if as_json:
        from .reports import metrics_json

        click.echo(json.dumps(metrics_json(source, report), indent=1))
    else:
        click.echo(render_table(rows, title=f"vLLM server {source} vs kvcalc's plan ({model} on {gpu})"))
        _echo_findings(rows, mismatches, report["notes"], report["assumed"], [])
    _exit_if_strict(strict, rows, mismatches)


def _bench(path: str, model: str | None, gpu: str | None, kv: str | None, weights: str | None, util: float | None,
           max_num_batched_tokens: int | None, max_num_seqs: int | None, max_model_len: int | None,
           tp: int, input_len: int | None, output_len: int | None, vllm_version: str | None, as_json: bool,
           strict: bool) -> None:
    """Compare a `vllm bench serve`/`throughput` result with kvcalc's workload prediction (kvcalc/workload.py)."""
    from ..catalog import catalog_entry, catalog_names, load_model
    from ..engines import vllm as vllm_engine
    from ..formats import kv_format, weight_format
    from ..hardware import get_gpu
    from ..workload import vllm_bench
    from .bench import compare, read_bench, same_model, workload_of

    if not model or not gpu:
        raise UsageError("--bench needs --model (what the server ran) and --gpu (what it ran on)")
    data = read_bench(path)
    hf_id = catalog_entry(model.lower()).get("hf_id") if model.lower() in catalog_names() else None
    if data["kind"] == "serve" and data.get("model_id") and not same_model(str(data["model_id"]), model, hf_id):
        raise UsageError(f"{path} is a benchmark of {data['model_id']!r}, not of --model {model}")
    spec, profile = load_model(model), get_gpu(gpu)
    wl = workload_of(data, input_len, output_len)
    settings = vllm_engine.VllmSettings(
        weights=weight_format(weights or "bf16"), kv=kv_format(kv or "auto"), gpu_memory_utilization=util or 0.9,
        max_model_len=max_model_len or wl.context, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, version=vllm_version or vllm_engine.DEFAULT_VERSION,
        entrypoint="serve" if data["kind"] == "serve" else "llm", tensor_parallel=tp)
    wl.check(settings.max_model_len)
    est = vllm_engine.estimate(spec, profile, settings)
    if not est.fits:
        raise UsageError(f"kvcalc predicts this deployment does not start on {profile.name} "
                         f"(short {est.shortfall_bytes:,} bytes); check --util/--max-model-len/--tp")
    slots = min(est.max_num_seqs, est.concurrency_at(wl.context))
    predicted = vllm_bench(spec, profile, settings.weights, settings.kv, wl,
                           chunk_tokens=est.max_num_batched_tokens, slots=slots,
                           kv_bytes_per_token=est.deployment_kv_bytes_per_token, tp=tp, est=est,
                           entrypoint=settings.entrypoint, vllm_version=settings.version)
    rows = compare(data, predicted, wl)
    misses = [r["quantity"] for r in rows if r["verdict"] == "MISS"]
    if as_json:
        click.echo(json.dumps({"kind": data["kind"], "model_id": data.get("model_id"), "workload": {
            "input_len": wl.input_len, "output_len": wl.output_len, "concurrency": wl.concurrency,
            "request_rate": wl.request_rate}, "prediction": predicted.to_json(), "comparison": rows}, indent=1))
    else:
        how = f"rate {wl.request_rate:g}/s" if wl.request_rate else f"concurrency {wl.concurrency}"
        click.echo(f"vllm bench {data['kind']} {Path(path).name} vs kvcalc ({model} on {profile.name}): input "
                   f"{wl.input_len:,}, output {wl.output_len:,}, {how}; {slots} requests fit at once")
        for r in rows:
            click.echo(f"  {r['quantity']:<20} measured {r['measured']:>10.2f} {r['unit']:<5} predicted "
                       f"{r['predicted']:>10.2f}  {100 * r['error']:+6.1f}%  {r['verdict']}")
        for note in predicted.notes:
            click.echo(f"note: {note}")
        click.echo(f"verdict: {len(rows) - len(misses)} PASS, {len(misses)} MISS")
    if strict and misses:
        click.echo(f"error: --strict: {len(misses)} MISS", err=True)
        raise SystemExit(1)


def _report(path: str, as_json: bool) -> None:
    from .compare import render_report, summarize
    from .results import read_results

    p = Path(path)
    if not is_file(path):  # (a NUL byte or an over-long name is "no such file", not a traceback)
        raise UsageError(f"cannot read results {shown(path)}: no such file")
    rows, warnings = read_results(p)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(summarize(rows), indent=1))
    else:
        click.echo(render_report(rows))


def _run(hf: bool, vllm: bool, quick: bool, out: str | None, device: str, model: str | None,
         per_process: int, budget_s: float, resume: bool = False) -> None:
    if not out:
        raise UsageError("--hf / --vllm need --out DIR for the JSONL results and logs")
    if vllm and device != "cuda":
        raise UsageError("vLLM runs only on a CUDA GPU; use --device cpu with --hf alone")
    from . import matrix

    if model or device == "cpu":
        # A custom transformers run: the given model (or a small default) on the chosen device.
        if vllm:
            raise UsageError("--model with --vllm: write a cases file and use python -m kvcalc.validate.vllm_runner")
        from .hf_runner import run_hf_cases

        name = model or "gguf:smollm2"
        cases = [{"id": f"hf-{name}-{kv}", "model": name, "kv": kv, "batch": 1, "prompt_len": 152 if quick else 512,
                  "new_tokens": 16 if quick else 64, "device": device}
                 for kv in ("auto", "hqq-4", "quanto-4")]
        Path(out).mkdir(parents=True, exist_ok=True)
        run_hf_cases(cases, Path(out) / "hf.jsonl", resume=resume)
        return
    argv = ["--out", out, "--budget-s", str(budget_s), "--per-process", str(per_process), "--device", device]
    if hf:
        argv.append("--hf")
    if vllm:
        argv.append("--vllm")
    if quick:
        argv.append("--quick")
    if resume:
        argv.append("--resume")
    matrix.main(argv)


@click.command("validate", context_settings=CONTEXT_SETTINGS)
@click.option("--from-log", "from_log", metavar="FILE",
              help="a vLLM or SGLang start-up log to compare with kvcalc (the engine is read off the log)")
@click.option("--bench", metavar="FILE",
              help="a `vllm bench serve --save-result` or `vllm bench throughput --output-json` result to compare "
                   "with kvcalc's TTFT, TPOT, latency and throughput (needs --model and --gpu)")
@options.override("input_len", "--bench: prompt tokens (throughput results)").click_option()
@options.override("output_len", "--bench: output tokens (throughput results)").click_option()
@click.option("--metrics", metavar="URL|FILE",
              help="a running vLLM server's /metrics (http URL or saved text): its vllm:cache_config_info (blocks, "
                   "block size, cache dtype, util) against kvcalc's plan for --model, --gpu and the options below")
@options.override("block_size", "--metrics: vLLM --block-size of the plan [default: the backend's]").click_option()
@click.option("--report", metavar="FILE", help="print the tables and summary of a results JSONL file")
@options.override("model", "model the log's engine served (catalog name or config.json); with --hf: the model"
                  ).click_option()
@options.override("gpu", "GPU id or alias for --from-log (e.g. h100-sxm, h200)").click_option()
@options.override("kv", "--from-log: KV cache dtype (kvcalc's or vLLM's name: auto, fp8, bfloat16, fp8_e5m2) "
                  "[default: the log's]").click_option()
@options.override("util", "--from-log: gpu_memory_utilization [default: the log's, else the version's default]"
                  ).click_option()
@options.override("weights", "--from-log: weight format (kvcalc's name: bf16, fp8, awq, gptq, nf4) [default: the "
                  "log's quantization / dtype]").click_option()
@options.override("quantization", "--from-log: vLLM's --quantization (awq, awq_marlin, gptq_marlin, fp8): sets "
                  "--weights").click_option()
@options.override("tp", "--from-log: tensor-parallel size [default: the log's]").click_option()
@options.override("pp", "--from-log: pipeline-parallel size [default: the log's]").click_option()
@options.override("max_model_len", "--from-log: max_model_len, vLLM's number rule (32k = 32,000, 32K = 32,768) "
                  "[default: the log's]").click_option()
@options.override("max_num_batched_tokens", "--from-log: [default: the log's, else vLLM's]").click_option()
@options.override("max_num_seqs", "--from-log: [default: the log's, else vLLM's]").click_option()
@options.override("enforce_eager", "--from-log: vLLM ran without CUDA graphs").click_option()
@options.override("entrypoint", "--from-log: what started the engine: `vllm serve` or the offline LLM class (batch "
                  "defaults) [default: the log's, else kvcalc's]").click_option()
@click.option("--hf", is_flag=True, help="run the transformers matrix (needs torch, transformers, hqq, quanto)")
@click.option("--vllm", is_flag=True, help="run the vLLM matrix (needs vLLM on a CUDA GPU)")
@click.option("--quick", is_flag=True, help="a small matrix (< 5 min on one GPU)")
@click.option("--out", metavar="DIR", help="folder for results (JSONL), logs and the summary")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True)
@click.option("--per-process", type=click.IntRange(min=0), default=0, show_default=True,
              help="vLLM cases per child process (1 isolates every case)")
@click.option("--budget-s", type=click.FloatRange(min=1, max=7 * 24 * 3600), default=510.0, show_default=True, help="wall-clock budget of a matrix run")
@click.option("--resume", is_flag=True, help="--hf/--vllm: skip cases that already have a row in --out")
@click.option("--strict", is_flag=True, help="--from-log: exit 1 on any MISS or MISMATCH")
@options.override("mem_fraction_static", "--from-log of an SGLang log: the mem_fraction_static it ran with "
                  "[default: the log's, else SGLang's]").click_option()
@options.override("vllm_version", "--from-log: predict with this version's rules (default: the log's); a log of "
                  "another version is a MISMATCH").click_option()
@options.override("sglang_version", "--from-log of an SGLang log: the release whose rules apply (an SGLang log "
                  "does not print it) [default: 0.5.14]").click_option()
@click.option("--run", "run", type=click.IntRange(min=-1000, max=100000), default=None,
              help="--from-log: which engine start of a log holding several (0-based; default the last)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def validate(from_log, bench, input_len, output_len, metrics, block_size, report, model, gpu, kv, util, weights,
             quantization, tp, pp, max_model_len, max_num_batched_tokens, max_num_seqs, enforce_eager, entrypoint, hf,
             vllm, quick, out, device, per_process, budget_s, resume, strict, mem_fraction_static, vllm_version,
             sglang_version, run, as_json):
    """Compare kvcalc's predictions with real engines: a vLLM start-up log (--from-log), earlier results
    (--report), or new runs of transformers (--hf) and vLLM (--vllm)."""
    modes = [bool(from_log), bool(report), bool(hf or vllm), bool(bench), bool(metrics)]
    if sum(modes) == 0:
        raise UsageError("nothing to validate: give --from-log FILE (with --model and --gpu), --bench FILE (with "
                         "--model and --gpu), --metrics URL|FILE (with --model and --gpu), --report FILE, or "
                         "--hf/--vllm with --out DIR")
    if sum(modes) > 1:
        raise UsageError("choose one of --from-log, --bench, --metrics, --report, or --hf/--vllm")
    from .reports import normalize_formats, settings_overrides

    weights, kv = normalize_formats(weights, kv, quantization, max_model_len)
    if bench:
        _bench(bench, model, gpu, kv, weights, util, max_num_batched_tokens, max_num_seqs, max_model_len, tp or 1,
               input_len, output_len, vllm_version, as_json, strict)
    elif metrics or from_log:
        overrides = settings_overrides(kv=kv, util=util, weights=weights, tp=tp, pp=pp, max_model_len=max_model_len,
                                       max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                       enforce_eager=enforce_eager, entrypoint=entrypoint, block_size=block_size)
        if mem_fraction_static is not None:  # SGLang's (an SGLang log); refused for a vLLM log
            overrides["mem_fraction_static"] = mem_fraction_static
        if sglang_version is not None:  # likewise
            overrides["sglang_version"] = sglang_version
        if metrics:
            if overrides.pop("sglang_version", None) is not None:
                raise UsageError("--sglang-version is for --from-log of an SGLang log; --metrics reads a vLLM server")
            _metrics(metrics, model, gpu, as_json, overrides, strict=strict, vllm_version=vllm_version)
        else:
            if block_size is not None:
                raise UsageError("--block-size is --metrics' option (a start-up log states its own)")
            _from_log(from_log, model, gpu, as_json, overrides, strict=strict, vllm_version=vllm_version, run=run)
    elif report:
        _report(report, as_json)
    else:
        _run(hf, vllm, quick, out, device, model, per_process, budget_s, resume)


def main(argv: list[str] | None = None) -> None:
    """Standalone entry (python -m kvcalc.validate.cli): bad input prints one line and exits 2."""
    from ..cli_errors import run_command

    run_command(validate, argv, "kvcalc validate")


if __name__ == "__main__":
    main()
