"""The plan JSON (kvcalc.plan/1) is written by explicit to_json methods: they must emit exactly the keys, order and
values that dataclasses.asdict gave before, for every catalog model on two GPUs, so internal names can change."""

import json
from dataclasses import asdict

import pytest

from kvcalc.catalog import catalog_names, load_model
from kvcalc.errors import UnsupportedModelError, UsageError
from kvcalc.hardware import get_gpu
from kvcalc.plan import PlanRequest, plan, tp_sweep


def _same(obj) -> None:
    assert json.dumps(obj.to_json()) == json.dumps(asdict(obj))


@pytest.mark.parametrize("gpu", ["h200", "t4"])
def test_to_json_matches_asdict_for_every_catalog_model(gpu):
    profile = get_gpu(gpu)
    checked = 0
    for name in catalog_names():
        spec = load_model(name)
        try:
            rows = plan(PlanRequest(spec, profile, 8192), [])
        except (UnsupportedModelError, UsageError):
            continue
        for row in rows:
            for est in (row.vllm, row.hf):
                if est is not None:
                    _same(est)
                    checked += 1
            if row.vllm is not None:
                _same(row.vllm.layout)
        try:
            for option in tp_sweep(PlanRequest(spec, profile, 8192)):
                _same(option)
        except UnsupportedModelError:
            pass
    assert checked > 50
