"""The plan JSON (kvcalc.plan/1) is written by explicit to_json methods, so internal names can change without
changing it. tests/fixtures/plan_json_shapes.json holds every key path and value type that dataclasses.asdict
wrote for vllm_breakdown, hf_breakdown and tp_sweep entries at commit 9291737 (the last commit whose JSON was
asdict of the internals, when to_json was checked equal to asdict), over every catalog model on an H200 and a T4
at 8k context. to_json must write exactly those paths and types; tests/test_golden.py pins the values and order."""

import json
from pathlib import Path

import pytest

from kvcalc.catalog import catalog_names, load_model
from kvcalc.errors import UnsupportedModelError, UsageError
from kvcalc.hardware import get_gpu
from kvcalc.plan import PlanRequest, plan, tp_sweep

SHAPES = Path(__file__).resolve().parent / "fixtures" / "plan_json_shapes.json"
TYPES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}


def _paths(obj, prefix: str, out: set[str]) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            _paths(value, f"{prefix}.{key}" if prefix else key, out)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _paths(value, prefix + "[]", out)
    else:
        out.add(f"{prefix}: {TYPES[type(obj)]}")


def _shapes(gpu: str) -> dict[str, set[str]]:
    shapes: dict[str, set[str]] = {"vllm_breakdown": set(), "hf_breakdown": set(), "tp_sweep": set()}
    for name in catalog_names():
        spec = load_model(name)
        try:
            rows = plan(PlanRequest(spec, get_gpu(gpu), 8192), [])
        except (UnsupportedModelError, UsageError):
            continue
        for row in rows:
            for kind, est in (("vllm_breakdown", row.vllm), ("hf_breakdown", row.hf)):
                if est is not None:
                    _paths(json.loads(json.dumps(est.to_json())), "", shapes[kind])
        try:
            for option in tp_sweep(PlanRequest(spec, get_gpu(gpu), 8192)):
                _paths(option.to_json(), "", shapes["tp_sweep"])
        except UnsupportedModelError:
            pass
    return shapes


def test_to_json_writes_the_keys_asdict_wrote_for_every_catalog_model():
    recorded = {kind: set(paths) for kind, paths in json.loads(SHAPES.read_text()).items()}
    both = _shapes("h200")
    for kind, paths in _shapes("t4").items():
        both[kind] |= paths
    for kind in recorded:
        assert both[kind] == recorded[kind], kind


@pytest.mark.parametrize("kind, path", [("vllm_breakdown", "layout.rules[].cap_blocks: int"),
                                        ("vllm_breakdown", "layout.rules[].fixed_blocks: int"),
                                        ("vllm_breakdown", "layout.groups[][]: int"),
                                        ("vllm_breakdown", "notes[]: str"), ("hf_breakdown", "notes[]: str"),
                                        ("tp_sweep", "weights_per_gpu_bytes: int")])
def test_the_recorded_shapes_cover_the_nested_parts(kind, path):
    assert path in json.loads(SHAPES.read_text())[kind]
