"""One option vocabulary (kvcalc/options.py) across plan, explain, plot, fit, search, validate, calibrate and the web
API: every option a command takes under one of the vocabulary's names or spellings has that option's spellings,
type and default; search's grids are lists of plan's values; the web takes the same names (and spellings)."""

from __future__ import annotations

import click
import pytest

from cli_helper import invoke
from kvcalc import options as O

GRID_OF = {"gpus": "gpu"}  # search's list options under another name than plan's single value
# validate and calibrate read a log or a bench file: an option not given is the file's value (None), not plan's default
OVERRIDE_COMMANDS = {"validate", "calibrate"}


def _commands() -> dict[str, click.Command]:
    from kvcalc.cli import cli
    from kvcalc.search_cli import commands

    out = {name: cli.get_command(None, name) for name in ("plan", "explain", "plot", "validate", "calibrate")}
    return out | commands()


def _spelling_index() -> dict[str, str]:
    index = {}
    for option in O.PLAN_OPTIONS:
        for flag in option.spellings:
            index[flag] = option.name
    return index


def _item(kind):
    return kind.item if isinstance(kind, O.ListOf) else kind


def _reference() -> dict[str, click.Option]:
    """The vocabulary as click builds it (a flag's type is click's BOOL)."""
    return {p.name: p for p in O.decorator(O.PLAN_OPTIONS)(click.command()(lambda **kw: None)).params}


def _same_type(a, b) -> bool:
    a, b = _item(a), _item(b)
    return a is b or (type(a) is type(b) and a.name == b.name and getattr(a, "choices", None) ==
                      getattr(b, "choices", None))


COMMANDS = sorted(_commands())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_shared_option_is_the_vocabularys(command):
    cmd = _commands()[command]
    index = _spelling_index()
    reference = _reference()
    problems = []
    for p in cmd.params:
        if not isinstance(p, click.Option):
            continue
        spelled = set(p.opts) | set(p.secondary_opts)
        name = GRID_OF.get(p.name, p.name)
        # an option spelled like a vocabulary option must be that option (search's --max-num-seqs was `seqs`)
        for flag in spelled:
            if flag in index and index[flag] != name:
                problems.append(f"{command} {flag}: named {p.name}, the vocabulary's is {index[flag]}")
        if name not in O.PLAN:
            continue
        canonical = O.PLAN[name]
        missing = set(canonical.spellings) - spelled
        if missing:
            problems.append(f"{command} --{name}: lacks the spellings {sorted(missing)}")
        grid = isinstance(p.type, O.ListOf) and not isinstance(canonical.type, O.ListOf)
        if command == "fit" and name == "engine":
            assert list(p.type.choices) == ["vllm"] and p.default == "vllm"  # fit answers for vLLM only
            continue
        if not _same_type(p.type, reference[name].type):
            problems.append(f"{command} --{name}: type {p.type!r}, the vocabulary's is {reference[name].type!r}")
        expected = None if (command in OVERRIDE_COMMANDS or grid) else reference[name].default
        if p.default != expected:
            problems.append(f"{command} --{name}: default {p.default!r}, expected {expected!r}")
    assert not problems, problems


def test_the_shared_options_are_shared():
    """The options a user names in several commands are there in each: the workload in plan and search, the
    deployment in plan, search and validate, and search takes --gpu, -tp and --vllm-command too."""
    params = {name: {p.name for p in cmd.params} for name, cmd in _commands().items()}
    for name in ("input_len", "output_len", "concurrency", "request_rate", "model", "weights", "kv", "tp", "pp",
                 "util", "max_num_seqs", "max_num_batched_tokens", "vllm_version", "vllm_command"):
        assert name in params["plan"] and name in params["search"], name
    for name in ("input_len", "output_len", "model", "gpu", "kv", "util", "weights", "quantization", "tp", "pp",
                 "max_model_len", "max_num_batched_tokens", "max_num_seqs", "enforce_eager", "entrypoint",
                 "vllm_version"):
        assert name in params["validate"], name
    search = {f for p in _commands()["search"].params for f in p.opts}
    assert {"--gpu", "--gpus", "-tp", "--tensor-parallel-size", "--kv-cache-dtype", "--util",
            "--gpu-memory-utilization", "--vllm-command"} <= search


def test_plan_and_search_read_one_value_alike():
    """Search's output length defaults as plan's (128), and its grids read each value as plan does."""
    search = {p.name: p for p in _commands()["search"].params}
    plan = {p.name: p for p in _commands()["plan"].params}
    assert search["output_len"].default is plan["output_len"].default is None  # both: 128 when not given
    assert not search["output_len"].required
    ctx = click.Context(_commands()["search"])
    assert search["tp"].type.convert("4,1,2,2", search["tp"], ctx) == (1, 2, 4)
    assert search["max_num_batched_tokens"].type.convert("8k", search["max_num_batched_tokens"], ctx) == 8000
    assert search["util"].type.convert("0.9:0.92:0.01", search["util"], ctx) == (0.9, 0.91, 0.92)


def test_fit_offers_only_vllm():
    code, out, _ = invoke(["fit", "--help"])
    assert code == 0 and "[vllm]" in out and "hf|vllm|both" not in out
    code, _, err = invoke(["fit", "max-context", "--gpu", "l4", "--model", "llama-3.1-8b", "--batch", "16",
                           "--engine", "hf"])
    assert code == 2 and err.strip() == "error: kvcalc fit answers for vLLM (block-granular); drop --engine 'hf'"


def _rows(args):
    import json

    code, out, err = invoke(["plan", *args, "--json"])
    assert code == 0, err
    return [(r["config"], r["engine"]) for r in json.loads(out)["rows"]]


def test_weights_and_kv_take_lists():
    """`--weights awq,fp8 --kv auto,fp8` is every combination beside the baseline, in the order asked; one value is
    the table it always was."""
    base = ["--gpu", "l4", "--model", "llama-3.1-8b", "--context", "4608", "--batch", "16", "--engine", "vllm"]
    rows = _rows([*base, "--weights", "awq,fp8", "--kv", "auto,fp8"])
    assert [c for c, _ in rows] == ["baseline", "awq", "awq+fp8-kv", "fp8", "fp8+fp8-kv"]
    assert _rows([*base, "--weights", "awq"]) == [("baseline", "vllm"), ("awq", "vllm")]
    assert _rows([*base, "--weights", "awq,awq"]) == [("baseline", "vllm"), ("awq", "vllm")]
    code, out, _ = invoke(["explain", *base, "--weights", "awq,fp8"])
    heads = [line for line in out.splitlines() if line.startswith("== ")]
    assert code == 0 and heads == ["== AWQ int4 weights + BF16 KV on vllm ==", "== FP8 W8 weights + BF16 KV on vllm =="]
    code, _, err = invoke(["fit", "max-context", *base, "--weights", "awq,fp8"])
    assert code == 2 and "one --weights" in err


def test_web_takes_the_same_names_and_spellings():
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from kvcalc.web.app import create_app

    client = TestClient(create_app(cache_size=0), base_url="http://localhost")
    info = client.get("/api/info").json()
    assert info["options"] == sorted(o.name for o in O.web_table("plan"))
    assert info["search_options"] == sorted(o.name for o in O.web_table("search"))
    plain = client.get("/api/plan", params={"gpu": "l4", "input_len": "2k", "concurrency": "4"}).json()
    for spelling in ("input-len", "--input-len"):
        dashed = client.get("/api/plan", params={"gpu": "l4", spelling: "2k", "concurrency": "4"})
        assert dashed.status_code == 200 and dashed.json() == plain
    twice = client.get("/api/plan", params={"gpu": "l4", "input_len": "2k", "input-len": "2k"})
    assert twice.status_code == 400 and "given twice" in twice.json()["error"]
    listed = client.get("/api/plan", params={"gpu": "l4", "model": "llama-3.1-8b", "weights": "awq,fp8",
                                              "engine": "vllm"}).json()
    assert [r["config"] for r in listed["rows"]] == ["baseline", "awq", "fp8"]
    assert info["defaults"]["enforce_eager"] is False  # a flag's default, not click's sentinel


def test_an_option_is_one_entry():
    """The docstring's recipe: an Option with into="request" reaches PlanRequest through the table alone."""
    from kvcalc.request import _request_fields

    fields = _request_fields({o.name: o.default for o in O.PLAN_OPTIONS} | {"nccl_nvls": "off"})
    assert fields["nccl_nvls"] is False and fields["other_processes_bytes"] == 0
    from dataclasses import fields as dc_fields

    from kvcalc.plan import PlanRequest

    names = {f.name for f in dc_fields(PlanRequest)}
    assert all((o.field or o.name) in names for o in O.PLAN_OPTIONS if o.into == "request")
    from kvcalc.workload import Workload

    wl = {f.name for f in dc_fields(Workload)}
    assert all((o.field or o.name) in wl for o in O.PLAN_OPTIONS if o.into == "workload")


def test_every_vllm_command_flag_lands_on_an_option():
    """--vllm-command's flag table names plan options only (or the ones request.py reads by name)."""
    from kvcalc.vllm_command import FLAGS

    assert {name for name, _ in FLAGS.values()} <= set(O.PLAN)


def test_search_takes_a_vllm_command():
    """The command's model and flags fix the search's space; a search option typed beside it wins."""
    import json

    cmd = "vllm serve llama-3.1-8b -tp 2 --kv-cache-dtype fp8 --quantization awq --max-num-seqs 64"
    code, out, err = invoke(["search", "--vllm-command", cmd, "--input-len", "2k", "--concurrency", "8",
                             "--gpus", "l4", "--json"])
    assert code == 0, err
    res = json.loads(out)
    assert res["model"] == "llama-3.1-8b"
    assert (res["space"]["tp"], res["space"]["kv"], res["space"]["weights"]) == ([2], ["fp8"], ["awq"])
    assert all(r["max_num_seqs"] == 64 for r in res["results"])
    code, out, err = invoke(["search", "--vllm-command", cmd, "--input-len", "2k", "--concurrency", "8",
                             "--gpus", "l4", "--tp", "1", "--json"])
    res = json.loads(out)
    assert code == 0 and res["space"]["tp"] == [1] and any("search option given wins" in w for w in res["warnings"])
