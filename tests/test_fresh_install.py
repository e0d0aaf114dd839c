"""Issue 22's "runs from a fresh install": the wheel built from this tree, installed on its own (no source tree on
the path), answers the gate, writes a deployment file, checks a /metrics page and serves the Python API."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
METRICS = ROOT / "tests" / "fixtures" / "vllm_metrics" / "h200-llama-3.1-8b-auto-u90.txt"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The kvcalc wheel of this tree installed into a folder of its own (its dependencies are this interpreter's)."""
    tmp = tmp_path_factory.mktemp("fresh")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "kvcalc", src / "kvcalc", ignore=shutil.ignore_patterns("__pycache__"))
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp / "wheel"), str(src)], capture_output=True, text=True)
    if wheel.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {wheel.stderr[-300:]}")
    site = tmp / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                           *map(str, (tmp / "wheel").glob("kvcalc-*.whl"))], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return tmp, site


def _run(installed, code):
    tmp, site = installed
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp,
                            env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp)})
    return result


def _cli(installed, *args):
    return _run(installed, "import sys\nfrom kvcalc.cli import main\nmain(sys.argv[1:])\n".replace(
        "sys.argv[1:]", repr(list(args))))


def test_it_is_the_installed_copy(installed):
    result = _run(installed, "import kvcalc; print(kvcalc.__file__, kvcalc.__version__)")
    assert result.returncode == 0 and str(installed[1]) in result.stdout and "0.2.0" in result.stdout


def test_gate_from_the_install(installed):
    ok = _cli(installed, "plan", "--gpu", "h200", "--model", "llama-3.1-8b", "--engine", "vllm", "--require-fit",
              "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["schema"] == "kvcalc.plan/1"
    failed = _cli(installed, "plan", "--gpu", "t4", "--model", "llama-3.1-70b", "--engine", "vllm", "--require-fit")
    assert failed.returncode == 1 and failed.stderr.strip().splitlines()[-1].startswith("gate failed: vllm baseline")


def test_deployment_file_from_the_install(installed):
    got = _cli(installed, "plan", "--gpu", "l4", "--model", "llama-3.1-8b", "--engine", "vllm", "--emit", "kserve")
    assert got.returncode == 0 and "kind: InferenceService" in got.stdout and "nvidia.com/gpu: '1'" in got.stdout


def test_metrics_check_from_the_install(installed):
    got = _cli(installed, "validate", "--metrics", str(METRICS), "--model", "llama-3.1-8b", "--gpu", "h200",
               "--util", "0.9", "--entrypoint", "offline", "--vllm-version", "0.26.0", "--json", "--strict")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["verdict"] == {"pass": 6, "miss": 0, "mismatch": 0}


def test_python_api_from_the_install(installed):
    got = _run(installed, "import kvcalc\nr = kvcalc.plan(gpu='l4', model='llama-3.1-8b', context='16k')\n"
               "print(r.to_json()['schema'], r.chosen('vllm').fits, kvcalc.fit('auto', gpu='l4').value > 0)")
    assert got.returncode == 0 and got.stdout.split() == ["kvcalc.plan/1", "True", "True"], got.stderr
