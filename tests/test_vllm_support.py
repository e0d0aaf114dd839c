"""Per-version serve gates (issue 9: "where vLLM, at the version asked, cannot serve a layout, say so").

kvcalc/data/vllm_support.yaml names, per model_type, the first vLLM release that serves it, with its source. A plan
for an older release says no on every vLLM row and why; fit and search refuse with the same line.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc.catalog import catalog_names, load_model
from kvcalc.engines.vllm_support import (layer_kinds_of, serve_gates, support_table, table_markdown, unserved_gate,
                                         unserved_reason)
from kvcalc.engines.vllm_versions import version_key
from kvcalc.model import spec_from_config

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
# model types every release kvcalc models (0.4.0 and later) serves: vLLM's supported-models page at v0.4.0
# (https://docs.vllm.ai/en/v0.4.0.post1/models/supported_models.html) lists their architectures
PREDATE_OLDEST = {"llama", "mistral", "mixtral", "qwen2", "gemma"}


def fixture(name: str):
    return spec_from_config(json.loads((FIXTURES / name).read_text()), name)


def test_every_row_is_a_release_with_a_source():
    table = support_table()
    for key, row in {**table["architectures"], **table["layer_kinds"]}.items():
        assert version_key(str(row["since"])) >= (0, 4), key
        assert "https://" in row["source"], key
    assert not set(table["architectures"]) & set(table["not_found"])


def test_every_model_type_kvcalc_plans_is_gated_or_said_not_found():
    """The catalog's and the fixtures' model types (wrapper and text) each have a row, are listed as not found, or
    predate 0.4.0: a missing row is never silently read as 'always served'."""
    table = support_table()
    known = set(table["architectures"]) | set(table["not_found"]) | PREDATE_OLDEST
    specs = [load_model(name) for name in catalog_names()]
    specs += [fixture(p.name) for p in FIXTURES.glob("*.json") if p.name != "param_totals.json"
              and "hf_quant_config" not in p.name and json.loads(p.read_text()).get("model_type")
              not in ("molmo", "deepseek_v4")]
    missing = {s.wrapper_type or s.model_type for s in specs} - known
    assert not missing


@pytest.mark.parametrize("version, served", [("0.9.0", False), ("0.10.0", False), ("0.10.1", True),
                                             ("0.10.1.1", True), ("0.10.1rc1", True), ("0.26.0", True)])
def test_gpt_oss_is_first_served_in_0_10_1(version, served):
    spec = load_model("gpt-oss-20b")
    assert (unserved_gate(spec, version) is None) == served


def test_a_plan_on_an_old_release_says_no_and_why():
    code, out, err = invoke(["plan", "--model", "gpt-oss-20b", "--gpu", "h200", "--vllm-version", "0.9.0", "--json"])
    assert code == 0
    plan = json.loads(out)
    vllm = [r for r in plan["rows"] if r["engine"] == "vllm"]
    assert vllm and all(not r["fits"] and r["verdicts"] == ["not served: needs vLLM 0.10.1+"] for r in vllm)
    assert all(r["vllm_breakdown"]["notes"][0].startswith("vLLM 0.9.0 cannot serve gpt-oss-20b: gpt_oss "
                                                          "(GptOssForCausalLM) is first served in vLLM 0.10.1")
               for r in vllm)
    assert any("first served in vLLM 0.10.1 (https://github.com/vllm-project/vllm/releases/tag/v0.10.1)" in w
               for w in plan["warnings"])
    assert any(r["fits"] for r in plan["rows"] if r["engine"] == "hf")  # transformers is not gated
    # the figures are the first serving release's: the same as a plan on 0.10.1
    code, out, _ = invoke(["plan", "--model", "gpt-oss-20b", "--gpu", "h200", "--vllm-version", "0.10.1", "--json"])
    served = [r for r in json.loads(out)["rows"] if r["engine"] == "vllm"]
    assert [r["kv_capacity_tokens"] for r in vllm] == [r["kv_capacity_tokens"] for r in served]
    assert all(r["fits"] for r in served)


def test_the_table_and_explain_say_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")  # the fits cell on one line beside the range column
    code, out, err = invoke(["plan", "--model", "gpt-oss-20b", "--gpu", "h200", "--vllm-version", "0.9.0",
                             "--engine", "vllm"])
    assert code == 0 and "no (vLLM 0.10.1+)" in out
    assert "tensor-parallel size" not in out  # no TP sweep offered: no TP size makes 0.9.0 serve it
    code, out, err = invoke(["explain", "--model", "gpt-oss-20b", "--gpu", "h200", "--vllm-version", "0.9.0"])
    assert code == 0 and "does NOT start: vLLM 0.9.0 does not serve gpt_oss (GptOssForCausalLM)" in out + err


def test_fit_refuses_with_one_line():
    code, out, err = invoke(["fit", "max-context", "--model", "qwen3-next-80b-a3b", "--gpu", "h200",
                             "--vllm-version", "0.10.2"])
    assert code == 2
    line = (out + err).strip()
    assert "\n" not in line and len(line) <= 400
    assert "qwen3_next (Qwen3NextForCausalLM) is first served in vLLM 0.11.0" in line


def test_hybrids_on_releases_before_their_layout_existed_still_get_a_row():
    """Qwen3.5 on 0.6: the V0 rules have no hybrid KV manager (the layout would be refused); the row is planned on
    0.17.0's rules instead and says no."""
    code, out, err = invoke(["plan", "--model", "qwen3.5-35b-a3b", "--gpu", "h200", "--vllm-version", "0.6.0",
                             "--engine", "vllm", "--json"])
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows and all(r["verdicts"] == ["not served: needs vLLM 0.17.0+"] for r in rows)


def test_wrappers_are_gated_by_the_wrapper():
    gemma = fixture("google--medgemma-27b-it.json")
    assert gemma.wrapper_type == "gemma3" and [g.key for g in serve_gates(gemma)] == ["gemma3"]
    assert unserved_gate(gemma, "0.7.3").since == "0.8.0" and unserved_gate(gemma, "0.8.0") is None
    qwen35 = fixture("Qwen--Qwen3.5-27B.json")
    assert unserved_gate(qwen35, "0.16.0").since == "0.17.0"  # the wrapper's row wins over the GDN kind's 0.11.0
    assert load_model("qwen3-8b").wrapper_type == ""


def test_layer_kinds_are_gated_on_their_own():
    """A model type without a row that carries a gated layer kind is still refused before that kind's release."""
    next_ = fixture("Qwen--Qwen3-Next-80B-A3B-Instruct.json")
    assert layer_kinds_of(next_.layers) == {"gdn"}
    unknown = replace(next_, model_type="some_new_gdn_model")
    assert unserved_gate(unknown, "0.10.2").key == "gdn"
    assert unserved_gate(unknown, "0.11.0") is None
    v32 = fixture("deepseek-ai--DeepSeek-V3.2.json")
    assert layer_kinds_of(v32.layers) == {"mla_indexer"}
    scout = fixture("meta-llama--Llama-4-Scout-17B-16E-Instruct.json")
    assert layer_kinds_of(scout.layers) == {"chunked"}
    assert "first served in vLLM 0.8.3" in unserved_reason(scout, "0.8.2")


def test_search_reports_the_release_as_the_binding_constraint():
    code, out, err = invoke(["search", "--model", "gpt-oss-20b", "--vllm-version", "0.9.0", "--input-len", "1000",
                             "--output-len", "100", "--concurrency", "4", "--json"])
    result = json.loads(out)
    assert result["binding"] == "vllm_version" and "first served in vLLM 0.10.1" in result["message"]


def test_docs_carry_the_table():
    method = (ROOT / "docs" / "method.md").read_text()
    assert table_markdown() in method, "docs/method.md: paste kvcalc.engines.vllm_support.table_markdown()"
    assert ", ".join(support_table()["not_found"]) in method


def test_every_key_is_a_model_type_kvcalc_builds():
    """A typo in the table would be a gate that never fires: every key is a model_type model.py builds or wraps."""
    from kvcalc.model import SUPPORTED, TEXT_TYPE_OF_WRAPPER

    table = support_table()
    keys = set(table["architectures"]) | set(table["not_found"])
    assert keys <= SUPPORTED | set(TEXT_TYPE_OF_WRAPPER)
    assert set(table["layer_kinds"]) == {"gdn", "mla_indexer", "chunked"}  # the kinds layer_kinds_of reports
