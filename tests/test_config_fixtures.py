"""The real config.json fixtures of issue 9 (tests/fixtures/configs/): each parses, each config.json names its model_type
(at top level; multimodal wrappers also carry one in text_config), each ModelOpt hf_quant_config.json names its
quant_algo, and SOURCES.md cites every file, so no fixture arrives without its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FOLDER = Path(__file__).parent / "fixtures" / "configs"
CONFIGS = sorted(p for p in FOLDER.glob("*.json") if p.name != "param_totals.json")


def test_there_are_fixtures():
    assert len(CONFIGS) >= 30


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_fixture_is_valid_json_with_its_kind(path):
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    if path.name.endswith(".hf_quant_config.json"):
        assert data["quantization"]["quant_algo"]
    else:
        assert isinstance(data["model_type"], str) and data["model_type"]
        if "text_config" in data:
            assert data["text_config"].get("model_type")


def test_sources_lists_every_file():
    sources = (FOLDER / "SOURCES.md").read_text()
    missing = [p.name for p in CONFIGS if f"`{p.name}`" not in sources]
    assert not missing, f"not cited in SOURCES.md: {missing}"


def test_param_totals_never_invent_a_number():
    totals = json.loads((FOLDER / "param_totals.json").read_text())
    assert len(totals) >= 60
    for model_id, entry in totals.items():
        assert entry["source"], model_id
        for key in ("total_params", "total_size_bytes"):
            value = entry[key]
            assert value is None or value == "unknown" or (isinstance(value, int) and value > 0), (model_id, key)
