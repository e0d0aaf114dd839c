"""Issue 22 item 3: deployment files for the chosen deployment, validated offline against the Kubernetes, KServe and
llm-d schemas vendored in tests/fixtures/schemas (README.md there: sources and licences)."""

import copy
import gzip
import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from kvcalc import deploy
from kvcalc.plan import custom_key, plan
from kvcalc.request import build_request

from cli_helper import invoke

SCHEMAS = Path(__file__).parent / "fixtures" / "schemas"


def _load(name):
    with gzip.open(SCHEMAS / name, "rt", encoding="utf-8") as fh:
        return json.load(fh)


K8S = _load("kubernetes-v1.37.0-strict.json.gz")
KSERVE = _load("kserve-inferenceservice-v1beta1.json.gz")
LLMD = _load("llm-d-modelservice-values-v0.4.12.json.gz")


def _k8s_validator(top):
    schema = {k: v for k, v in K8S["tops"][top].items() if k != "$id"}
    schema["$defs"] = K8S["$defs"]
    return jsonschema.Draft202012Validator(schema)


VALIDATORS = {("apps/v1", "Deployment"): _k8s_validator("deployment-apps-v1"),
              ("v1", "Service"): _k8s_validator("service-v1"),
              ("serving.kserve.io/v1beta1", "InferenceService"): jsonschema.Draft7Validator(KSERVE)}
CONTAINER = _k8s_validator("container-v1")
LLMD_VALUES = jsonschema.Draft7Validator(LLMD)


def _errors(validator, doc):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def _check_llmd(values):
    problems = _errors(LLMD_VALUES, values)
    for c in values["decode"]["containers"]:  # the chart types containers loosely: check them as Kubernetes does
        problems += _errors(CONTAINER, {k: v for k, v in c.items() if k not in ("modelCommand", "mountModelVolume")})
    return problems


PLANS = {
    "8b-l4": ["--gpu", "l4", "--model", "llama-3.1-8b", "--context", "8k"],
    "70b-tp4-fp8kv": ["--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--tp", "4", "--kv", "fp8", "--batch", "16"],
    "8b-fp8-eager-pp2": ["--gpu", "a10", "--model", "llama-3.1-8b", "--weights", "fp8", "--pp", "2", "--enforce-eager"],
    "mi300x": ["--gpu", "mi300x", "--model", "qwen3-8b", "--context", "32k"],
    "fp8-checkpoint": ["--gpu", "h200", "--model", "llama-3.1-70b-fp8"],
    "ngram": ["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--speculative-config",
              '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'],
}


def _plan_deployment(argv):
    from kvcalc.options import PLAN_OPTIONS, parse

    values, given = parse(PLAN_OPTIONS, argv)
    req, warnings = build_request(values, given)
    rows = plan(req, warnings)
    row = next(r for r in rows if r.engine == "vllm" and r.config == custom_key(req))
    return req, row, deploy.from_plan(req, row)


@pytest.mark.parametrize("case", sorted(PLANS))
def test_every_file_validates(case):
    _, _, d = _plan_deployment(PLANS[case])
    for kind in ("kubernetes", "kserve"):
        for doc in yaml.safe_load_all(deploy.emit(d, kind)):
            assert not _errors(VALIDATORS[(doc["apiVersion"], doc["kind"])], doc), (kind, doc["kind"])
    assert not _check_llmd(yaml.safe_load(deploy.emit(d, "llm-d")))


def test_a_misspelt_field_fails_each_schema():
    """The validators can fail: a typo in a container field, in the InferenceService, in the chart's values."""
    _, _, d = _plan_deployment(PLANS["8b-l4"])
    dep, _ = deploy.kubernetes_objects(d)
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["resource"] = bad["spec"]["template"]["spec"]["containers"][0].pop("resources")
    assert _errors(VALIDATORS[("apps/v1", "Deployment")], bad)
    isvc = deploy.kserve_object(d)
    isvc["spec"]["predictor"]["minReplica"] = 1
    assert _errors(VALIDATORS[("serving.kserve.io/v1beta1", "InferenceService")], isvc)
    values = deploy.llmd_values(d)
    values["decode"]["replicas"] = "one"
    assert _check_llmd(values)
    values = deploy.llmd_values(d)
    values["decode"]["containers"][0]["imagePullPolicy"] = 3
    assert _check_llmd(values)


@pytest.mark.parametrize("case", sorted(PLANS))
def test_the_files_run_the_same_flags_and_gpus(case):
    req, row, d = _plan_deployment(PLANS[case])
    gpus = req.tp * req.pp
    serve = shlex.split(deploy.serve_line(d))
    assert serve[:2] == ["vllm", "serve"] and serve[2:] == d.args
    docker = shlex.split(deploy.docker_line(d))
    assert docker[-len(d.args):] == d.args and d.image in docker
    assert (f"--gpus {gpus}" in deploy.docker_line(d)) == (req.gpu.vendor == "nvidia")
    dep, svc = deploy.kubernetes_objects(d)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["vllm", "serve"] and container["args"] == [*d.args, "--port", "8000"]
    assert docker[docker.index("--entrypoint") + 1] == "vllm" and docker[docker.index(d.image) + 1] == "serve"
    assert container["resources"]["limits"][d.gpu_resource] == str(gpus)
    isvc = deploy.kserve_object(d)["spec"]["predictor"]["containers"][0]
    assert isvc["args"] == [*d.args, "--port", "8080"] and isvc["resources"] == container["resources"]
    llmd = deploy.llmd_values(d)
    tp_flag = [] if req.tp == 1 else ["--tensor-parallel-size", str(req.tp)]
    assert llmd["decode"]["parallelism"]["tensor"] == req.tp
    assert llmd["decode"]["containers"][0]["args"] + tp_flag == sorted_flags(d.args[1:], tp_flag)
    assert f"--max-model-len {row.vllm.max_model_len}" in " ".join(d.args)


def sorted_flags(args, tp_flag):
    """args with the TP flag moved to the end (the chart adds it from parallelism.tensor)."""
    if not tp_flag:
        return list(args)
    i = args.index(tp_flag[0])
    return args[:i] + args[i + 2:] + tp_flag


@pytest.mark.parametrize("case", ["8b-l4", "70b-tp4-fp8kv", "8b-fp8-eager-pp2", "ngram"])
def test_the_serve_line_plans_back_to_the_same_row(case):
    """kvcalc reads its own `vllm serve` line (--vllm-command) back into the same vLLM figures."""
    req, row, d = _plan_deployment(PLANS[case])
    code, out, err = invoke(["plan", "--gpu", req.gpu.id, "--engine", "vllm", "--context", str(req.context),
                             "--batch", str(req.batch), "--vllm-command", deploy.serve_line(d), "--json"])
    assert code == 0, err
    back = next(r for r in json.loads(out)["rows"] if r["kv_format"] == row.kv_format
                and r["weights_format"] == row.weights_format)
    for key in ("num_gpu_blocks", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "available_kv_bytes"):
        assert back["vllm_breakdown"][key] == getattr(row.vllm, key), key


def test_search_winner_files_match_its_command():
    code, out, err = invoke(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "256",
                             "--concurrency", "16", "--gpus", "l4,a100-80gb", "--json"])
    assert code == 0, err
    command = json.loads(out)["winner_command"]
    code, serve, _ = invoke(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "256",
                             "--concurrency", "16", "--gpus", "l4,a100-80gb", "--emit", "serve"])
    line = [l for l in serve.splitlines() if not l.startswith("#")][0]
    assert code == 0 and shlex.split(line) == shlex.split(command.replace("<", "'<").replace(">", ">'"))
    code, text, _ = invoke(["search", "--model", "llama-3.1-8b", "--input-len", "2k", "--output-len", "256",
                            "--concurrency", "16", "--gpus", "l4,a100-80gb", "--emit", "kubernetes"])
    winner = json.loads(out)["results"][0]
    dep = next(yaml.safe_load_all(text))
    assert code == 0 and not _errors(VALIDATORS[("apps/v1", "Deployment")], dep)
    assert dep["spec"]["replicas"] == winner["replicas"]
    gpus = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == str(winner["tp"] * winner["pp"])


def test_emit_cli_usage_and_gate():
    code, _, err = invoke(["plan", "--gpu", "l4", "--emit", "kubernetes", "--json"])
    assert code == 2 and "--emit prints one deployment file" in err
    code, out, err = invoke(["plan", "--gpu", "t4", "--model", "llama-3.1-8b", "--context", "32k", "--engine", "vllm",
                             "--emit", "serve", "--require-fit"])
    assert code == 1 and out.startswith("vllm serve") and "does not fit" in err
    assert err.strip().splitlines()[-1].startswith("gate failed: vllm baseline")
    code, _, err = invoke(["plan", "--gpu", "l4", "--engine", "hf", "--emit", "serve"])
    assert code == 2 and "no vLLM row" in err


def test_k8s_names_are_dns_labels():
    for raw in ("Llama-3.1-8B", "meta-llama/Llama-3.1-70B-Instruct", "3b_model", "x" * 80):
        name = deploy.k8s_name(raw)
        assert len(name) <= 63 and name[0].isalpha() and all(c.isalnum() or c == "-" for c in name)
        assert name == name.lower() and not name.endswith("-")


def test_web_page_download_is_the_clis_file():
    """`kvcalc serve`'s /api/deploy (the page's "Deploy file" button) answers the text `--emit` prints."""
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from kvcalc.web import app as web_app

    client = TestClient(web_app.create_app(), base_url="http://localhost")
    for kind in deploy.KINDS:
        got = client.get("/api/deploy", params={"gpu": "l4", "model": "llama-3.1-8b", "context": "16k", "kind": kind})
        assert got.status_code == 200, got.text
        body = got.json()
        code, out, _ = invoke(["plan", "--gpu", "l4", "--model", "llama-3.1-8b", "--context", "16k", "--emit", kind])
        assert code == 0 and body["text"] == out and body["schema"] == "kvcalc.deploy/1"
        assert body["filename"].startswith("llama-3-1-8b-")
    bad = client.get("/api/deploy", params={"gpu": "l4", "kind": "helm"})
    assert bad.status_code == 400 and "kind must be one of" in bad.json()["error"]


def test_served_model_is_what_vllm_loads(tmp_path):
    """A catalog model is served by its hub id; a local config.json by its folder (vLLM loads folders)."""
    from kvcalc.catalog import load_model

    assert deploy.served_model(load_model("llama-3.1-70b-fp8")) == "nvidia/Llama-3.1-70B-Instruct-FP8"
    cfg = Path(__file__).resolve().parent.parent / "scripts" / "gpu_v2" / "configs" / "llama-3.1-8b.json"
    (tmp_path / "config.json").write_text(cfg.read_text())
    assert deploy.served_model(load_model(str(tmp_path / "config.json"))) == str(tmp_path)
    assert deploy.served_model(load_model(str(tmp_path))) == str(tmp_path)


def test_awq_deployment_names_the_checkpoint_and_forces_no_kernel():
    """An AWQ row is served from the catalog's AWQ checkpoint without --quantization (an explicit `awq` forces the slow
    GEMM kernel before vLLM 0.26; vLLM reads the checkpoint's quant_method and picks Marlin), and that line plans back
    to the same blocks."""
    from kvcalc.catalog import catalog_entry

    req, row, d = _plan_deployment(["--gpu", "l4", "--model", "llama-3.1-8b", "--weights", "awq", "--engine", "vllm"])
    assert d.model == catalog_entry("llama-3.1-8b-awq")["hf_id"] and "--quantization" not in d.args
    code, out, err = invoke(["plan", "--gpu", "l4", "--engine", "vllm", "--context", str(req.context),
                             "--vllm-command", deploy.serve_line(d), "--json"])
    assert code == 0, err
    back = next(r for r in json.loads(out)["rows"] if r["weights_format"] == "awq" and r["kv_format"] == "auto")
    assert back["vllm_breakdown"]["num_gpu_blocks"] == row.vllm.num_gpu_blocks
