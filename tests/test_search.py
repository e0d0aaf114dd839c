"""`kvcalc search`: every reported deployment meets its targets on the scalar paths; bad input exits 2; prices."""

import json
import subprocess
import sys

import pytest
from cli_helper import invoke

from kvcalc.catalog import load_model
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu, list_gpus
from kvcalc.latency import decode_line, tpot_s, ttft_s
from kvcalc.plan import PlanRequest
from kvcalc.prices import load_prices, parse_override, shipped_prices
from kvcalc.search import SearchRequest, Space, Targets, Workload, pareto_front, run_search, search_json
from kvcalc.inverse import row_for


def _search(model="llama-3.1-8b", gpus=("l4", "a10g", "h100-sxm"), **kw):
    wl = Workload(kw.pop("input_len", 2048), kw.pop("output_len", 256), kw.pop("concurrency", 16),
                  kw.pop("request_rate", None))
    tg = Targets(kw.pop("max_ttft_ms", None), kw.pop("max_tpot_ms", None), kw.pop("min_context", None),
                 kw.pop("max_quality_risk", None))
    top = kw.pop("top", 12)  # every shown row is simulated: keep the tests' runs short
    version = kw.pop("vllm_version", None)
    space = Space([get_gpu(g) for g in gpus], **kw)
    extra = {"vllm_version": version} if version else {}
    return run_search(SearchRequest(load_model(model), wl, tg, space, load_prices(use_user_file=False), top=top,
                                    **extra))


def test_every_result_meets_its_targets_on_the_scalar_plan_path():
    """Each shown row is plan's row of that replica: the same simulation, the same KV capacity and concurrency."""
    res = _search(max_tpot_ms=40, max_ttft_ms=3000, max_quality_risk="low")
    assert res.results
    spec = load_model("llama-3.1-8b")
    for d in res.results:
        assert d.tpot_ms <= 40 and d.ttft_ms <= 3000 and d.quality_risk in ("none", "low")
        assert d.timing == "simulation"
        req = PlanRequest(spec=spec, gpu=get_gpu(d.gpu), context=2048 + 256, batch=d.concurrency_per_replica,
                          engines=("vllm",), weights=d.weights_format, kv=d.kv_format, util=d.util,
                          max_model_len=d.max_model_len, max_num_batched_tokens=d.max_num_batched_tokens,
                          max_num_seqs=d.max_num_seqs, tp=d.tp, pp=d.pp,
                          workload=Workload(2048, 256, d.concurrency_per_replica))
        row = row_for(req)
        assert row.fits and row.max_concurrency * d.replicas == d.max_concurrency
        assert row.kv_capacity_tokens == d.kv_capacity_tokens
        assert d.max_num_seqs >= d.concurrency_per_replica == -(-16 // d.replicas)
        assert d.tpot_ms == row.bench.tpot_s * 1e3 and d.ttft_ms == row.bench.ttft_s * 1e3
        assert d.output_tokens_per_s == row.bench.output_tokens_per_s * d.replicas
        # the closed-form screen is optimistic: it never puts a deployment slower than the simulation does
        fmt = (spec, get_gpu(d.gpu), weight_format(d.weights_format), kv_format(d.kv_format))
        line = decode_line(*fmt, d.concurrency_per_replica, tp=d.tp)
        assert ttft_s(line, 2048, d.max_num_batched_tokens, line.wread) * 1e3 <= d.ttft_ms
        assert tpot_s(line, 2048, 256) * 1e3 <= d.tpot_ms * 1.05


def test_ranking_is_by_cost_and_the_pareto_front_is_undominated():
    res = _search(max_tpot_ms=60)
    costs = [d.cost_per_hour for d in res.results]
    assert costs == sorted(costs)
    front = res.pareto
    assert front == pareto_front(res.results + [])  # recomputing gives the same front
    for p in front:
        assert not any(d.cost_per_hour <= p.cost_per_hour and d.tpot_ms < p.tpot_ms for d in res.results)


def test_winner_command_is_the_vllm_serve_line():
    res = _search(gpus=("h100-sxm",), weights=("bf16",), kv=("fp8",))
    d = res.results[0]
    assert d.command.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")
    assert f"--gpu-memory-utilization {d.util:.2f}" in d.command and "--kv-cache-dtype fp8" in d.command
    assert f"--max-model-len {2048 + 256}" in d.command and f"--max-num-seqs {d.max_num_seqs}" in d.command


def test_util_is_the_versions_default_when_it_works():
    """`vllm serve` without --gpu-memory-utilization uses 0.92 from 0.21 and 0.9 before (config/cache.py,
    kvcalc/engines/vllm_versions.py): the search keeps that util where it meets every target, and the winner's
    command says it."""
    for version, default in (("0.26.0", 0.92), ("0.19.0", 0.9)):
        wl, tg = Workload(2048, 256, 16), Targets(max_tpot_ms=60)
        space = Space([get_gpu("h100-sxm")], weights=("bf16",), kv=("auto",))
        res = run_search(SearchRequest(load_model("llama-3.1-8b"), wl, tg, space, load_prices(use_user_file=False),
                                       vllm_version=version))
        assert res.results and all(d.util == default and d.min_util < default for d in res.results)
        assert f"--gpu-memory-utilization {default:.2f}" in res.results[0].command
    # a grid without the default: the closest util below it where that works, else the closest above (0.33: 0.92)
    res = _search(gpus=("h100-sxm",), weights=("bf16",), kv=("auto",), utils=(0.85, 0.93, 0.95), vllm_version="0.33.0")
    assert {d.util for d in res.results} == {0.85}
    res = _search(gpus=("h100-sxm",), weights=("bf16",), kv=("auto",), utils=(0.93, 0.95), vllm_version="0.33.0")
    assert {d.util for d in res.results} == {0.93}
    # 0.34: 1.0 with the extensible KV cache; the default grid (0.80-0.95) gains it, an explicit grid does not
    res = _search(gpus=("h100-sxm",), weights=("bf16",), kv=("auto",))
    assert res.results and {d.util for d in res.results} == {1.0}
    res = _search(gpus=("h100-sxm",), weights=("bf16",), kv=("auto",), utils=(0.85, 0.93, 0.95))
    assert {d.util for d in res.results} == {0.95}


def test_unmeetable_tpot_names_the_binding_constraint_and_closest_value():
    res = _search(max_tpot_ms=0.5)
    assert not res.results and res.binding == "tpot"
    assert res.closest["value_ms"] > 0.5 and "--max-tpot-ms 0.5 binds" in res.message
    loose = _search(max_tpot_ms=1000)
    # the screen's value is a lower bound of what the simulation shows for the deployments it lets through
    assert res.closest["value_ms"] <= min(d.tpot_ms for d in loose.results)


def test_unmeetable_memory_and_context():
    res = _search(model="llama-3.1-70b", gpus=("t4",), tp=(1,), max_replicas=1)
    assert not res.results and res.binding == "memory" and "GiB short" in res.message
    res = _search(min_context=10_000_000)
    assert not res.results and res.binding == "context" and "131,072" in res.message


def test_request_rate_concurrency_follows_littles_law():
    res = _search(concurrency=None, request_rate=4.0, max_tpot_ms=80)
    assert res.results
    spec = load_model("llama-3.1-8b")
    for d in res.results[:20]:
        fmt = (spec, get_gpu(d.gpu), weight_format(d.weights_format), kv_format(d.kv_format))
        line = decode_line(*fmt, 1, tp=d.tp)
        rate = 4.0 / d.replicas

        def throughput(n):
            ttft = ttft_s(line, 2048, d.max_num_batched_tokens, line.wread)
            return n / (ttft + 255 * tpot_s(decode_line(*fmt, n, tp=d.tp), 2048, 256))

        n = d.concurrency_per_replica
        assert throughput(n) >= rate * (1 - 1e-12)
        assert n == 1 or throughput(n - 1) < rate


def test_json_schema_and_evaluated():
    res = _search()
    data = search_json(res)
    assert data["schema"] == "kvcalc.search/1"
    # utils (0.80-0.95 and 0.34's default 1.0) x max_num_seqs x replicas
    assert data["evaluated"] == res.structures * 17 * 11 * 8
    assert data["results"][0]["rank"] == 1 and data["winner_command"].startswith("vllm serve")
    json.dumps(data)


def test_search_json_fields_match_the_readme():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("**Search JSON**"):]
    section = section[:section.index("\n\n")]
    top, row = section.split("Each result has")
    code, out, err = invoke(["search", "--model", "llama-3.2-1b", "--input-len", "1k", "--output-len", "128",
                             "--concurrency", "4", "--gpus", "l4", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert set(re.findall(r"`([a-z_]+)`", top)) - {"kvcalc"} <= set(data)
    assert set(re.findall(r"`([a-z_]+)`", row)) <= set(data["results"][0])


@pytest.mark.parametrize("args,needle", [
    (["--gpus", "h10"], "h100"),
    (["--gpus", "l4,nope"], "nope"),
    (["--price", "l4=-1"], "non-negative"),
    (["--price", "l4"], "GPU=USD"),
    (["--price", "h9000=1"], "h9000"),
    (["--prices", "/nonexistent/prices.yaml"], "no such file"),
    (["--weights", "hqq4"], "vLLM does not load"),
    (["--kv", "hqq-4"], "vLLM has no"),
    (["--utils", "0:2"], "--utils"),
    (["--tp", "0"], "at least 1"),  # plan's --tp rule, per element
    (["--max-tpot-ms", "-5"], "positive"),
    (["--max-replicas", "1024", "--utils", "0.5:0.99:0.001"], "narrow"),
])
def test_search_bad_input_is_one_line_exit_2(args, needle):
    load = "5000" if "--max-replicas" in args else "4"
    code, out, err = invoke(["search", "--input-len", "1k", "--output-len", "128", "--concurrency", load, *args])
    assert code == 2, (out, err)
    assert "Traceback" not in err and needle in err.strip().splitlines()[-1]


def test_search_needs_exactly_one_load():
    code, _, err = invoke(["search", "--input-len", "1k", "--output-len", "128"])
    assert code == 2 and "exactly one of --concurrency" in err
    code, _, err = invoke(["search", "--input-len", "1k", "--output-len", "128", "--concurrency", "2",
                           "--request-rate", "1"])
    assert code == 2 and "exactly one" in err


def test_unmeetable_targets_exit_1_with_message():
    """No deployment meets the targets: a failed gate (kvcalc/gate.py): the output, then one line, exit 1."""
    code, out, err = invoke(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "512",
                             "--concurrency", "32", "--max-tpot-ms", "1", "--gpus", "l4,h100"])
    assert code == 1, err
    assert "no configuration meets the targets: --max-tpot-ms 1 binds" in out
    assert err.strip().splitlines()[-1].startswith("gate failed: search: no configuration meets the targets")
    code, out, _ = invoke(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "512",
                           "--concurrency", "32", "--max-tpot-ms", "1", "--gpus", "l4", "--json"])
    data = json.loads(out)
    assert code == 1 and data["results"] == [] and data["binding"] == "tpot" and data["closest"]["value_ms"] > 1


# ------------------------------------------------------------------------------------------------ prices


def test_every_builtin_gpu_has_a_sourced_price_or_says_why_it_has_none():
    import yaml
    from importlib import resources

    data = yaml.safe_load(resources.files("kvcalc").joinpath("data/prices.yaml").read_text())
    raw, unpriced = data["prices"], data.get("unpriced") or {}
    prices = shipped_prices()
    # a profile no published offer was found for is listed under `unpriced` with what was looked for (issue 19 item 4:
    # no price is made up); every other profile has a sourced price, and none is both
    assert {g.id for g in list_gpus()} == set(prices) | set(unpriced)
    assert not set(prices) & set(unpriced)
    assert all(isinstance(why, str) and len(why) > 20 for why in unpriced.values())
    for gpu, entry in raw.items():
        assert entry["usd_per_gpu_hour"] > 0 and entry["source"].startswith("https://") and entry["date"]
        if entry.get("estimate"):
            assert entry.get("note"), gpu  # an estimate says how it was made


def test_price_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "kvcalc").mkdir()
    (tmp_path / "kvcalc" / "prices.yaml").write_text("l4: 0.5\nh100: {usd_per_gpu_hour: 2.0, source: mine}\n")
    prices = load_prices()
    assert prices["l4"].usd_per_gpu_hour == 0.5 and prices["h100-sxm"].usd_per_gpu_hour == 2.0
    assert prices["t4"].usd_per_gpu_hour == shipped_prices()["t4"].usd_per_gpu_hour
    other = tmp_path / "other.yaml"
    other.write_text("prices:\n  l4: {usd_per_gpu_hour: 0.9}\n")
    assert load_prices(prices_file=str(other))["l4"].usd_per_gpu_hour == 0.9  # --prices replaces the user file
    assert load_prices(["l4=0.1"], str(other))["l4"].usd_per_gpu_hour == 0.1  # --price wins over both
    assert parse_override("4090=0.3") == ("rtx-4090", 0.3)
    (tmp_path / "bad.yaml").write_text("l4: -2\n")
    with pytest.raises(UsageError, match="non-negative"):
        load_prices(prices_file=str(tmp_path / "bad.yaml"))


def test_price_override_changes_the_winner():
    base = _search(gpus=("l4", "a10g"), max_tpot_ms=80)
    assert base.results[0].gpu == "l4"
    code, out, _ = invoke(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "256",
                           "--concurrency", "16", "--max-tpot-ms", "80", "--gpus", "l4,a10g", "--price", "a10g=0.1",
                           "--json"])
    data = json.loads(out)
    assert code == 0 and data["results"][0]["gpu"] == "a10g" and data["results"][0]["price_source"] == "--price"


def test_plan_does_not_import_the_search_modules():
    code = ("import sys\nfrom kvcalc.cli import main\n"
            "try:\n    main(['plan', '--gpu', 't4', '--context', '32k', '--json'])\nexcept SystemExit:\n    pass\n"
            "mods = ('numpy', 'kvcalc.search', 'kvcalc.search_core', 'kvcalc.inverse', 'kvcalc.latency', "
            "'kvcalc.prices', 'kvcalc.search_render', 'kvcalc.search_cli')\n"
            "print(','.join(m for m in mods if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr.strip() == ""


def test_unreachable_request_rate_binds_with_the_best_rate_reached():
    res = _search(model="llama-3.1-70b", gpus=("l4",), concurrency=None, request_rate=200.0, max_replicas=2)
    assert not res.results and res.binding == "throughput"
    assert 0 < res.closest["value"] < 200 and "requests/s" in res.message
    # the screen's closest rate is an upper bound: above it nothing passes; well under it, the simulation finds one
    over = _search(model="llama-3.1-70b", gpus=("l4",), concurrency=None, request_rate=res.closest["value"] * 1.01,
                   max_replicas=2)
    assert not over.results and over.binding == "throughput"
    more = _search(model="llama-3.1-70b", gpus=("l4",), concurrency=None, request_rate=res.closest["value"] * 0.5,
                   max_replicas=2)
    assert more.results


def test_quality_target_binds_when_every_format_is_riskier():
    res = _search(weights=("awq",), max_quality_risk="none")
    assert not res.results and res.binding == "quality" and res.rejected_by == {"quality": res.structures * 8}
    assert all(r.constraint == "quality" for r in res.rejected)


def test_memory_rejections_do_not_start_on_the_scalar_path():
    """Every deployment the search rejects on memory fails to start in `kvcalc plan` even at the grid's largest util
    (vLLM 0.33: 0.95; at 0.34's util 1.0 no combination here is short of concurrency only);
    every one rejected on concurrency starts there but holds fewer requests than it needs (max_num_seqs 32: the
    smallest of the grid that holds 24, so the one that leaves the most KV memory)."""
    res = _search(model="llama-3.1-70b", gpus=("l4", "a100-80gb"), tp=(1, 2, 4), kv=("auto",), weights=("bf16", "awq"),
                  concurrency=24, max_replicas=2, vllm_version="0.33.0")
    spec = load_model("llama-3.1-70b")
    seen = set()
    for tp in (1, 2, 4):
        for gpu in ("l4", "a100-80gb"):
            for w in ("bf16", "awq"):
                req = PlanRequest(spec=spec, gpu=get_gpu(gpu), context=2048 + 256, batch=24, engines=("vllm",),
                                  weights=w, kv="auto", util=0.95, max_num_batched_tokens=None, max_num_seqs=32,
                                  vllm_version="0.33.0",
                                  tp=tp)
                from kvcalc.engines.vllm import batch_defaults

                req.max_num_batched_tokens = batch_defaults(get_gpu(gpu), "serve", version="0.33.0")[0]
                row = row_for(req)
                feasible = any(d.gpu == gpu and d.tp == tp and d.weights_format == w and d.replicas == 1
                               for d in _search(model="llama-3.1-70b", gpus=(gpu,), tp=(tp,), kv=("auto",),
                                                weights=(w,), concurrency=24, max_replicas=1,
                                                vllm_version="0.33.0").results)
                if not row.vllm.fits:
                    assert not feasible
                    seen.add("memory")
                elif row.max_concurrency < 24:
                    assert not feasible
                    seen.add("concurrency")
                else:
                    assert feasible
                    seen.add("fits")
    assert seen == {"memory", "concurrency", "fits"}
    assert "memory" in res.rejected_by


def test_winner_command_names_a_compressed_tensors_checkpoint():
    """vLLM reads a W8A8 / W4A16 scheme from the checkpoint's quantization_config: the command names the checkpoint
    to use instead of the bf16 model id, and passes no --quantization."""
    import json

    from cli_helper import invoke

    code, out, err = invoke(["search", "--model", "llama-3.1-8b", "--weights", "w8a8", "--gpus", "l4", "--input-len",
                             "1000", "--output-len", "200", "--concurrency", "4", "--json"])
    assert code == 0, err
    command = json.loads(out)["winner_command"]
    assert command.startswith("vllm serve <compressed-tensors W8A8 checkpoint of ") and "--quantization" not in command


def test_weight_time_table_over_a_batch_array_is_the_scalar_evaluation():
    """latency.weight_time_table evaluates forward_kernels over every batch at once (issue 19.4: search speed); the
    table must be, bit for bit, the one the scalar evaluation batch by batch gives (dense and MoE, TP 1 and 8,
    quantized and not)."""
    import numpy as np

    from kvcalc import latency
    from kvcalc.throughput import forward_kernels, gpu_rates

    def by_batch(spec, gpu, w, kv, tp, bmax):
        rates = gpu_rates(gpu)

        def parts(b):
            ks = forward_kernels(spec, gpu, w, kv, b, 0.0, 0.0, tp, rates=rates)
            # the parts linear in the rows: the sampler and the TP all-reduce's bytes
            return sum(k.time_s for k in ks), sum(k.time_s for k in ks if k.name in ("sampler", "allreduce"))

        table = np.empty(bmax + 1)
        exact = min(bmax, 64) if spec.moe is not None else 0
        for b in range(1, exact + 1):
            table[b] = parts(b)[0]
        for up in range(16 * (exact // 16 + 1), -(-bmax // 16) * 16 + 1, 16):
            total, sampler = parts(up)
            for b in range(up - 15, min(up, bmax) + 1):
                table[b] = total - (up - b) * (sampler / up)
        table[0] = table[1]
        return table / table[1]

    for name in ("llama-3.1-8b", "qwen3-235b-a22b"):
        spec = load_model(name)
        for gpu_id in ("h200", "l4", "mi300x"):
            for w in ("bf16", "awq", "fp8"):
                for tp in (1, 8):
                    args = (spec, get_gpu(gpu_id), weight_format(w), kv_format("auto"), tp, 200)
                    assert np.array_equal(latency.weight_time_table(*args), by_batch(*args)), (name, gpu_id, w, tp)


def test_search_takes_every_gpu_profile_by_default():
    """issue 19.4: the default search covers every profile (`kvcalc gpus`), the estimated-price ones included."""
    from kvcalc import search as S

    assert not S.NOT_SEARCHED_BY_DEFAULT
    assert len(list_gpus()) >= 38
