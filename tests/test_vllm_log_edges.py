"""The vLLM log parser on hostile input: the reproductions of shared/reviews/fuzz-2026-11.md (T15-T20, H2-H4) answer
with one line and exit 2, or a warning that says what was ignored; no regex nests quantifiers; adversarial files parse
in a child process under a 20 s guard (the speed itself is measured by benchmarks/log_parse.py, not asserted here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helper import invoke

from kvcalc.validate import vllm_log
from kvcalc.validate.vllm_log import LogError, parse_vllm_log, read_log

try:  # Python 3.11+
    from re import _parser as sre_parse
    from re._constants import MAX_REPEAT, MIN_REPEAT, MAXREPEAT
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore
    from sre_constants import MAX_REPEAT, MAXREPEAT, MIN_REPEAT  # type: ignore

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_logs"
REAL = FIXTURES / "real_v0.26.0_v-3b-auto-eager-u90.log"
QWEN = FIXTURES / "synthetic_v0.10.2_v1_debug_profile.log"


def _edited(tmp_path, old: str, new: str) -> str:
    text = REAL.read_text()
    assert old in text
    path = tmp_path / "edited.log"
    path.write_text(text.replace(old, new, 1))
    return str(path)


def _validate(path: str, *extra: str):
    return invoke(["validate", "--from-log", path, "--model", "llama-3.2-3b", "--gpu", "h200", *extra])


@pytest.mark.parametrize("old,new,named", [
    ("1,109,408 tokens", ", tokens", "kv_cache_tokens"),  # T16
    ("135.43x", "135..43x", "max_concurrency"),  # T17
    ("118.5 GiB", "9" * 400 + " GiB", "available_kv_bytes"),  # T18
    ("118.5 GiB", "9" * 5000 + " GiB", "available_kv_bytes"),
    ("118.5 GiB", "nan GiB", "available_kv_bytes"),
    ("6.04 GiB and", "6.0.4 GiB and", "weights_bytes"),
])
def test_bad_numbers_are_one_line_naming_the_line(tmp_path, old, new, named):
    code, out, err = _validate(_edited(tmp_path, old, new))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert re.match(r"error: line \d+: " + named, err) and len(err) < 400


@pytest.mark.parametrize("old,new,key", [
    ("'max_model_len': 8192", "'max_model_len': 'eight'", "max_model_len"),  # T19
    ("'max_model_len': 8192", "'max_model_len': [8192]", "max_model_len"),
    ("'max_model_len': 8192", "'max_model_len': 1e400", "max_model_len"),
    ("'gpu_memory_utilization': 0.9", "'gpu_memory_utilization': 'high'", "gpu_memory_utilization"),
    ("'gpu_memory_utilization': 0.9", "'gpu_memory_utilization': 1.7", "gpu_memory_utilization"),
    ("tensor_parallel_size=1", "tensor_parallel_size=auto", "tensor_parallel_size"),  # T20
])
def test_bad_settings_are_ignored_with_a_warning(tmp_path, old, new, key):
    path = _edited(tmp_path, old, new)
    parsed = parse_vllm_log(read_log(path))
    assert any(key in w and "ignored" in w for w in parsed["warnings"]), parsed["warnings"]
    code, out, err = _validate(path)
    assert code == 0, err
    assert "warning: line" in err and key in err and "Traceback" not in err


def test_good_settings_are_kept():
    parsed = parse_vllm_log(REAL.read_text())
    assert parsed["warnings"] == []
    s = parsed["settings"]
    assert s["max_model_len"] == 8192 and s["gpu_memory_utilization"] == 0.9 and s["tensor_parallel_size"] == 1
    assert s["enforce_eager"] is True and s["architecture"] == "LlamaForCausalLM"


def test_read_log_refuses_binary_non_utf8_and_oversized(tmp_path):
    binary = tmp_path / "b.log"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(LogError, match="binary"):
        read_log(binary)
    latin = tmp_path / "l.log"
    latin.write_bytes(REAL.read_bytes() + "caf\xe9\n".encode("latin-1"))
    with pytest.raises(LogError, match="not UTF-8"):
        read_log(latin)
    with pytest.raises(LogError, match="larger than 4,096 bytes"):
        read_log(REAL, max_bytes=4096)  # the fixture is bigger than 4 KiB: the cap is checked while reading
    assert read_log(REAL) == REAL.read_text()


def test_binary_log_on_the_cli_is_one_line(tmp_path):
    path = tmp_path / "bin.log"
    path.write_bytes(bytes(range(256)) * 4)
    code, _, err = _validate(str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "binary" in err


def test_two_engine_starts_read_the_last_and_say_so(tmp_path):
    both = REAL.read_text() + QWEN.read_text()
    parsed = parse_vllm_log(both)
    assert len(parsed["runs"]) == 2 and parsed["run"] == 1
    assert parsed["version"] == "0.10.2" and parsed["values"]["kv_cache_tokens"] == 62_608
    assert any("2 engine starts" in w for w in parsed["warnings"])
    first = parse_vllm_log(both, run=0)
    assert first["version"] == "0.26.0" and first["values"]["kv_cache_tokens"] == 1_109_408
    with pytest.raises(LogError, match="2 engine start"):
        parse_vllm_log(both, run=5)


def test_tp_ranks_and_dp_start_lines_stay_one_run():
    start = "(EngineCore_DP{r} pid=1) INFO 11-29 12:00:00 [core.py:1] Initializing a V1 LLM engine (v0.26.0) with config: model='m'\n"
    load = "(Worker rank={r} pid=2) INFO 11-29 12:00:06 [x.py:1] Model loading took 3.0{r} GiB memory and 1.0 seconds\n"
    parsed = parse_vllm_log(start.format(r=0) + start.format(r=1) + load.format(r=0) + load.format(r=1))
    assert len(parsed["runs"]) == 1 and parsed["repeats"]["weights_bytes"] == 2


# -------------------------------------------------------------------------------------------------- linear regexes


def _nested_repeats(tree, inside: bool = False) -> list:
    found = []
    for op, arg in tree:
        if op in (MAX_REPEAT, MIN_REPEAT):
            lo, hi, sub = arg
            unbounded = hi == MAXREPEAT or hi > 1
            if inside and unbounded:
                found.append((op, arg))
            found += _nested_repeats(sub, inside or unbounded)
        elif isinstance(arg, (list, tuple)):
            for item in arg:
                if isinstance(item, sre_parse.SubPattern):
                    found += _nested_repeats(item, inside)
                elif isinstance(item, (list, tuple)):
                    for sub in item:
                        if isinstance(sub, sre_parse.SubPattern):
                            found += _nested_repeats(sub, inside)
    return found


def _all_regexes() -> list[str]:
    out = [p.regex for p in vllm_log.PATTERNS]
    out += [r.pattern for _, r in vllm_log._VERSION_RES]
    out += [r.pattern for _, r, _, _ in vllm_log._TEXT_SETTINGS]
    out += [vllm_log._PROC_PREFIX.pattern, vllm_log._LEVEL_PREFIX.pattern, vllm_log._ANSI.pattern]
    return out


def test_the_nested_check_sees_a_nested_quantifier():
    assert _nested_repeats(sre_parse.parse(r"(?:[ _][\w=.-]+)*"))  # the old process-prefix ReDoS


@pytest.mark.parametrize("regex", _all_regexes())
def test_no_regex_nests_quantifiers(regex):
    assert not _nested_repeats(sre_parse.parse(regex)), regex


def test_every_pattern_row_is_needed_and_reachable():
    """Each row's needle is literal text of its regex (a line without the needle cannot match, so skipping the regex
    loses nothing), and each row matches at least one line of the committed fixtures (no dead rows)."""
    lines = [vllm_log._clean_line(line) for path in sorted(FIXTURES.rglob("*.log"))
             for line in path.read_text().splitlines()]
    for p in vllm_log.PATTERNS:
        literal = re.sub(r"\\(.)", r"\1", p.regex)
        assert p.needle in literal or literal.split("(")[0] in p.needle, p.needle
        assert p.source
        assert any(p.needle in line and p.compiled.search(line) for line in lines), f"no fixture line for {p.needle!r}"


def test_adversarial_files_parse_under_a_guard(tmp_path):
    """2 MiB of ReDoS-shaped lines, a 1 MiB line, 2 MiB of needles with no numbers, run in a child with a 20 s guard
    (before the rewrite: > 20 s for one 61-character line, 17.5 s for an 80 kB line)."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from kvcalc.validate.vllm_log import PATTERNS, LogError, parse_vllm_log\n"
        "def parse(text):\n"
        "    try:\n"
        "        parse_vllm_log(text)\n"
        "    except LogError:\n"
        "        pass  # one clear line is an answer too\n"
        "line = '(EngineCore' + '_a' * 28 + ' x\\n'\n"
        "parse(line * (2 * 2**20 // len(line)))\n"
        "parse('A' * 2**20)\n"
        "needles = ' '.join(p.needle for p in PATTERNS) + '\\n'\n"
        "parse(needles * (2 * 2**20 // len(needles)))\n"
        "parse(''.join(p.needle + 'x' * 100000 for p in PATTERNS))\n"
        "print('ok')\n" % str(Path(__file__).resolve().parent.parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_version_from_the_serve_banner():
    """vllm serve (0.11+) prints its version at the end of the block-letter banner's second row
    (entrypoints/utils.py); a copy that collapsed the banner's spaces reads the same. Other 'version' lines do not."""
    from kvcalc.validate.vllm_log import parse_vllm_log

    row = "(APIServer pid=1) INFO 04-22 00:10:58 [entrypoints/utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.19.0\n"
    assert parse_vllm_log(row)["version"] == "0.19.0"
    assert parse_vllm_log(row.replace("     ", " ").replace("█  version", "█ version"))["version"] == "0.19.0"
    assert parse_vllm_log("INFO 04-22 00:21:13 [flash_attn.py:596] Using FlashAttention version 3\n")["version"] is None
