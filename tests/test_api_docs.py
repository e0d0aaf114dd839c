"""The Python examples of docs/api.md and skills/kvcalc/SKILL.md run as written (and their JSON keys exist)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "docs" / "api.md", ROOT / "skills" / "kvcalc" / "SKILL.md", ROOT / "README.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _examples():
    for page in PAGES:
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            yield pytest.param(code, id=f"{page.name}-{i}")


@pytest.mark.parametrize("code", list(_examples()))
def test_example_runs(code, capsys):
    exec(compile(code, "<docs example>", "exec"), {})  # noqa: S102 - the repository's own docs
    assert capsys.readouterr().out  # every example prints what it shows


def test_skill_json_keys_are_real():
    """The keys SKILL.md tells an agent to read are in the JSON kvcalc prints."""
    import kvcalc

    plan = kvcalc.plan(gpu="l4", model="llama-3.1-8b", input_len="1k", output_len=128, engine="vllm").to_json()
    row = plan["rows"][0]
    for key in ("fits", "shortfall_bytes", "kv_capacity_tokens", "max_concurrency", "verdicts", "vllm_breakdown",
                "decode_tokens_per_s", "bench", "config"):
        assert key in row, key
    for key in ("weights_bytes", "activation_bytes", "available_kv_bytes", "num_gpu_blocks", "max_num_seqs"):
        assert key in row["vllm_breakdown"], key
    assert "warnings" in plan
    fit = kvcalc.fit("max-context", gpu="l4", model="llama-3.1-8b").to_json()
    assert {"value", "unit", "detail", "fits_one_step_beyond"} <= set(fit)
    found = kvcalc.search(model="llama-3.1-8b", input_len="1k", output_len=128, concurrency=4, gpus="l4").to_json()
    assert {"results", "winner_command", "message", "binding"} <= set(found)
    assert {"gpu", "tp", "pp", "replicas", "weights_format", "kv_format", "util", "cost_per_hour", "ttft_ms",
            "tpot_ms"} <= set(found["results"][0])
