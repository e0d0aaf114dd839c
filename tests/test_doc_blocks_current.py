"""The docs' generated tables are what their report scripts render from the committed data now: a change to the model
or the data that moves a published number must re-run the script's --write (a stale SGLang table went unnoticed)."""

from __future__ import annotations

import pytest

from script_loader import load_script

REPORTS = ("public_logs_report", "sglang_logs_report", "sglang_speed_report", "serve_load_report", "api_cpu_report")


@pytest.mark.parametrize("name", REPORTS)
def test_generated_blocks_are_current(name):
    script = load_script(name)
    from doc_blocks import stale_blocks

    stale = stale_blocks(script.generated_blocks())
    assert not stale, f"run `python3 scripts/{name}.py --write`: stale {stale}"


def test_block_text_reads_what_replace_block_wrote():
    load_script("doc_blocks")
    from doc_blocks import block_text, replace_block

    doc = replace_block("intro\n", "<!-- a -->", "<!-- /a -->", "| x |\n")
    assert block_text(doc, "<!-- a -->", "<!-- /a -->") == "| x |\n"
    assert block_text("no markers", "<!-- a -->", "<!-- /a -->") is None
