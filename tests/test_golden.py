"""Refactors leave the CLI's output unchanged: a few hundred plan/explain, workload, fit and search invocations against recorded outputs.

Re-record with `python tests/golden/cases.py --write` only in a commit that changes behaviour on purpose.
"""

import os

import pytest

from golden.cases import cases, load
from cli_helper import invoke


@pytest.fixture(scope="module")
def recorded():
    return load()


def test_golden_outputs_unchanged(recorded, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    changed = []
    for args in cases():
        key = " ".join(args)
        code, out, err = invoke(args)
        if recorded.get(key) != {"code": code, "stdout": out, "stderr": err}:
            changed.append(key)
    assert not changed, f"{len(changed)} invocations changed, first: {changed[:3]}"
