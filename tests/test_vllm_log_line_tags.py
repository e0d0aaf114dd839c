"""A start-up log that states no vLLM version is read as the release whose sources log its figures at the
"[file:line]" its prefix prints (validate/vllm_log.py LINE_TAGS). Tested on the public corpus
(tests/fixtures/vllm_logs/public/, sources in index.json): each 0.27+ start, with the lines that name its version
taken out, must come back as its own release; no start of an older or unlisted build may be given one."""

import json
import re
from pathlib import Path

import pytest

from kvcalc.validate.vllm_log import LINE_TAGS, check_log, line_tag_version, parse_vllm_log, read_log

PUBLIC = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"
INDEX = {e["id"]: e for e in json.loads((PUBLIC / "index.json").read_text())["logs"]}
# the lines that state a version: the banner's "version X", the engine-config line, the API server's version line
_NAMES_VERSION = re.compile(r"[█▀▄] {1,8}version |LLM engine \(v|vLLM API server version|vLLM version")


def _without_version(log_id: str) -> str:
    text = read_log(PUBLIC / INDEX[log_id]["file"])
    return "\n".join(line for line in text.splitlines() if not _NAMES_VERSION.search(line))


@pytest.mark.parametrize("log_id", ["enginrect-rtx4090-wsl2-qwen25-05b-v0.27-first",
                                    "enginrect-rtx4090-wsl2-qwen25-05b-v0.27-warm",
                                    "kubesimplify-4xrtxpro6000-qwen3-235b-fp8-tp4-v0.27",
                                    "prp-wp24-b-rtx5060ti-qwen3-4b-v0.29",
                                    "prp-wp24-a-rtx5060ti-qwen3-4b-v0.30",
                                    "tegdam-rtx4050l-wsl2-qwen25-3b-awq-v0.29-warm",
                                    "tegdam-rtx4050l-wsl2-qwen25-3b-awq-v0.29-cold",
                                    "kashif-rtxpro4000-qwen25-7b-awq-v0.28",
                                    "gio443-rtx4070l-wsl2-qwen25-15b-v0.30"])
def test_a_public_start_without_its_version_lines_reads_as_its_release(log_id):
    parsed = parse_vllm_log(_without_version(log_id))
    assert parsed["version"] is None
    assert len(parsed["line_tags"]) >= 2
    release, why = line_tag_version(parsed)
    assert release == INDEX[log_id]["vllm_version"]
    assert all(f"[{tag}]" in why for tag in parsed["line_tags"].values())


def test_a_nightly_build_gets_no_release():
    """0.31.1rc1.dev23 (xbill9, MI300X) logs 'Available KV cache memory' at gpu_worker.py:726 and 'KV cache size' at
    kv_cache_utils.py:2481: no listed release logs them there, so the default rules apply, as before."""
    for log_id in ("xbill9-mi300x-gemma4-26b-a4b-bf16-v0.31", "xbill9-mi300x-gemma4-31b-bf16-v0.31"):
        parsed = parse_vllm_log(_without_version(log_id))
        assert parsed["line_tags"]["Available KV cache memory"] == "gpu_worker.py:726"
        assert line_tag_version(parsed) is None


def test_one_tag_is_not_enough():
    """The three Qwen2.5-7B starts of enginrect/llmso keep only the KV-size line ([kv_cache_utils.py:2235], 0.27.1's
    line): one line could be an unlisted release's, so no version is read from it."""
    parsed = parse_vllm_log(read_log(PUBLIC / INDEX["enginrect-rtx4090-wsl2-qwen25-7b-bf16-v0.27"]["file"]))
    assert parsed["line_tags"] == {"KV cache size": "kv_cache_utils.py:2235"}
    assert line_tag_version(parsed) is None


def test_no_older_public_start_is_given_a_listed_release():
    """Every corpus start the index dates before 0.26 (0.6.4-0.19.0, V0 and V1), or dates not at all, gets no
    release from its tags, however many it prints (the llm-d 0.19.0 logs print five)."""
    checked = 0
    for e in INDEX.values():
        version = e["vllm_version"] or e.get("version_hint") or ""
        if version.startswith(("0.26", "0.27", "0.28", "0.29", "0.3")):
            continue
        parsed = parse_vllm_log(read_log(PUBLIC / e["file"]))
        assert line_tag_version(dict(parsed, version=None)) is None, e["id"]
        checked += 1
    assert checked >= 50


def test_a_start_that_states_its_version_keeps_it():
    parsed = parse_vllm_log(read_log(PUBLIC / INDEX["prp-wp24-b-rtx5060ti-qwen3-4b-v0.29"]["file"]))
    assert parsed["version"] == "0.29.0"
    report = check_log(parsed, str(PUBLIC / "prp-typhoon2.5-qwen3-4b.config.json"), "rtx-5060-ti")
    assert report["assumed"]["version"] == {"value": "0.29.0", "from": "log"}


def test_the_030_start_gets_the_030_rules_without_the_post():
    """prp-wp24-a's kept lines state no version (its README names 0.30.0): the tags give it, and the comparison is
    the one made with --vllm-version 0.30.0 (before, 0.34.0's rules: the extensible KV cache, 64-token blocks)."""
    parsed = parse_vllm_log(read_log(PUBLIC / INDEX["prp-wp24-a-rtx5060ti-qwen3-4b-v0.30"]["file"]))
    model = str(PUBLIC / "prp-typhoon2.5-qwen3-4b.config.json")
    read = check_log(parsed, model, "rtx-5060-ti")
    given = check_log(parsed, model, "rtx-5060-ti", vllm_version="0.30.0")
    assert read["assumed"]["version"] == {"value": "0.30.0", "from": "log (source lines)"}
    assert any("source-line tags" in n and "0.30.0 rules" in n for n in read["notes"])
    assert [(r["quantity"], r["predicted"]) for r in read["rows"]] == \
        [(r["quantity"], r["predicted"]) for r in given["rows"]]


_SRC = Path.home() / ".cache" / "vllm-next" / "src"


@pytest.mark.skipif(not _SRC.is_dir(), reason="no release sources on this machine (~/.cache/vllm-next/src)")
def test_the_table_is_where_the_release_sources_log():
    """Where the release wheels' sources are at hand: each tag is a logging call of its message in that file."""
    files = {"gpu_worker.py": "vllm/v1/worker/gpu_worker.py", "kv_cache_utils.py": "vllm/v1/core/kv_cache_utils.py",
             "model_runner.py": "vllm/v1/worker/gpu/model_runner.py",
             "gpu_model_runner.py": "vllm/v1/worker/gpu_model_runner.py"}
    needles = {"Available KV cache memory": '"Available KV cache memory', "KV cache size": "KV cache size: %s tokens",
               "Free memory on device": 'f"Free memory on device ', "CUDA graph pool memory": '"CUDA graph pool memory',
               "Model loading took": '"Model loading took %s GiB'}
    for release, row in LINE_TAGS.items():
        if not (_SRC / release).is_dir():
            continue
        for message, tags in row.items():
            for tag in tags:
                name, line = tag.split(":")
                lines = (_SRC / release / files[name]).read_text().splitlines()
                call = lines[int(line) - 1]
                assert re.match(r"\s*logger\.info(_once)?\(", call), (release, tag, call)
                after = "\n".join(lines[int(line) - 1:int(line) + 3])
                before = "\n".join(lines[max(0, int(line) - 40):int(line)])
                assert needles[message] in after or (call.strip() == "logger.info(msg)" and needles[message] in before), \
                    (release, tag)
