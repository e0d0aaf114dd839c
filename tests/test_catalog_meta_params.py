"""Every catalog model's parameter count against transformers' own class built on the meta device
(docs/validation/data/catalog_meta_params.json, written by scripts/catalog_meta_params.py, which needs torch; this
test reads the recorded counts, so it runs offline and without torch). Regenerate after adding an entry."""

import json
from pathlib import Path

import pytest

from kvcalc.catalog import catalog_names, load_model

DATA = json.loads((Path(__file__).resolve().parent.parent / "docs/validation/data/catalog_meta_params.json")
                  .read_text())


@pytest.mark.parametrize("name", catalog_names())
def test_catalog_count_matches_transformers_meta_device(name):
    assert name in DATA, "run scripts/catalog_meta_params.py for new catalog entries"
    row = DATA[name]
    spec = load_model(name)
    assert row["kvcalc_params"] == spec.params.total, "kvcalc's count moved: rerun scripts/catalog_meta_params.py"
    if row["meta_params"] is None:  # this transformers has no class for the model type: the reason is recorded
        assert row["why_none"]
        return
    # *ForCausalLM classes hold the text model only; wrappers (ForConditionalGeneration) hold the encoders too:
    # their decoder alone (language_model + lm_head) is meta_text_params
    expected = row["meta_params"] + row["meta_score_bias_buffers"]
    if not row["class"].endswith("ForCausalLM"):
        if spec.uncounted:  # a tower kvcalc names but does not count: compare the decoders
            expected = row["meta_text_params"] + row["meta_score_bias_buffers"]
        else:
            expected -= spec.vision_params
    assert spec.params.total == expected


def test_meta_counts_cover_the_late_2026_families():
    """The families issue 19 names are counted by transformers' classes, not only by kvcalc's closed form."""
    for name in ("glm-5", "glm-5.2", "nemotron-3-super-120b-a12b-fp8", "nemotron-3-ultra-550b-a55b",
                 "qwen3.6-27b-nvfp4", "qwen3.6-35b-a3b-nvfp4", "deepseek-v4-flash", "deepseek-v4-pro",
                 "minimax-m3-nvfp4"):
        assert DATA[name]["meta_params"], name
