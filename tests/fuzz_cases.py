"""Fuzz cases for every input kvcalc takes, and the oracle that judges each run (issue 14.4).

Used by tests/test_fuzz.py (a few hundred cases, fixed seed, in CI) and benchmarks/fuzz.py (10,000+ cases, with a
summary table in benchmarks/README.md). Each case is an argv for `kvcalc.cli.main` plus the files it names (written to
a scratch folder): CLI options of plan/explain/plot/validate --from-log (bad values and valid combinations), config.json
files (mutations of the catalog's configs and tests/fixtures/configs), GPU profile YAML (mutations of the shipped
profiles and malformed files), and vLLM start-up logs (mutations of tests/fixtures/vllm_logs, public/ included).

The oracle (`judge`) counts as a failure:
- a traceback: any exception other than SystemExit escaping main;
- a run over SLOW_S seconds (5 s) or killed by the alarm;
- an exit 2 that is not exactly one line `error: ...` (the README's promise), or an exit code other than 0 and 2
  (validate --strict may exit 1: that is its verdict);
- NaN, inf or a negative number anywhere in JSON output;
- a `plan --json` row that says fits yet breaks an invariant: weights over the GPU's memory, KV blocks x page bytes
  over the KV budget, the logged KV tokens x bytes/token over the budget, max_concurrency < batch, a context over
  max_model_len, TP that does not divide the attention heads, bytes that are not integers, fits without shortfall 0.

Generators take a random.Random, so a seed fixes the case list (files included).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import random
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "vllm_logs"
CONFIG_FIXTURES = ROOT / "tests" / "fixtures" / "configs"
PROFILES = ROOT / "kvcalc" / "hardware_profiles"
CATALOG = ROOT / "kvcalc" / "catalog"

SLOW_S = 5.0  # a run using more CPU than this is a failure (CPU, not wall: the 2-core machines these run on are shared,
#               and a loaded machine stretches wall time 3-5x; a run blocked without using CPU meets ALARM_S instead)
MAX_LINE = 420  # an error or warning line longer than this echoes input in full (fuzz review §1c; cli_errors clips
#                 error lines to "error: " + 400 characters)
ALARM_S = 60  # a run is stopped after this long (and counted as a hang)

# ---------------------------------------------------------------------------------------------------------------------
# Value pools

GPUS = sorted(p.stem for p in PROFILES.glob("*.yaml"))
MODELS = sorted(p.stem for p in CATALOG.glob("*.json"))
WEIGHTS = ["bf16", "fp16", "fp32", "fp8", "int8", "nf4", "nf4-dq", "awq", "gptq", "hqq4"]
KVS = ["auto", "fp8", "fp8-e5m2", "hqq-8", "hqq-4", "hqq-2", "quanto-4", "quanto-2"]
CONTEXTS = ["1", "2", "16", "63", "64", "100", "512", "1k", "4k", "8k", "32k", "128k", "1m", "16m", "1024", "8192"]
VERSIONS = ["0.9.1", "0.10.2", "0.11.0", "0.22.0", "0.24.0", "0.25.1", "0.26.0", "0.26.0rc1"]

# Bad text for any option: the fuzz review's list (§1) and more.
BAD_TEXT = [
    "", " ", "abc", "-1", "0", "-0", "00", "+5", "1e400", "1e-400", "1e30", "1e300", "0x10", "0b11", "32k", "1.5M",
    "1.5", "0.5", "nan", "NaN", "inf", "-inf", "9" * 19, "9" * 30, "9" * 400, "9" * 5000, "1" + "0" * 400,
    "\uff13\uff12k", "\u0663\u0662", "\u200f5", "5\u200f", "a" * 10000, "x\ny", "8k\n", "1,000", "1_000", "  8k ",
    "1k1", "..", "v", "[1]", "{}", "'", '"', "%s", "$(id)", "\\", "-", "--", "-5k", "2**30", "1/2", "½", "٣",
    "\x00", "a\x00b", "\t", "k", "kk", "1kk", "1KiB", "1GiB", "1 GB", "0.26.x", "2.0.0", "99999999999999999999.0.0",
    "../../etc/passwd", "/dev/null", "/dev/zero", "/dev/urandom", "/proc/self/status", "/", "/tmp", "/bin/ls",
    "a/b", "x" * 300, "models/llama3", "meta-llama/Llama-3.1-8B", "é", "😀", "true", "None", "null",
]
TOKEN_OPTIONS = ["--context", "--max-model-len", "--max-num-batched-tokens"]
COUNT_OPTIONS = ["--batch", "--max-num-seqs", "--tp", "--pp"]
NAME_OPTIONS = ["--gpu", "--model", "--weights", "--kv", "--vllm-version"]
ALL_PLAN_OPTIONS = TOKEN_OPTIONS + COUNT_OPTIONS + NAME_OPTIONS + ["--util", "--engine"]


def _good_value(rng: random.Random, option: str) -> str:
    if option == "--gpu":
        return rng.choice(GPUS)
    if option == "--model":
        return rng.choice(MODELS)
    if option in ("--context", "--max-model-len"):
        return rng.choice(CONTEXTS)
    if option == "--max-num-batched-tokens":
        return rng.choice(["512", "2048", "8192", "16k", "64k"])
    if option in ("--batch", "--max-num-seqs"):
        return str(rng.choice([1, 2, 3, 8, 16, 64, 256, 512, 4096]))
    if option == "--tp":
        return str(rng.choice([1, 1, 2, 4, 8, 3, 16]))
    if option == "--pp":
        return str(rng.choice([1, 1, 2, 4, 3, 7]))
    if option == "--weights":
        return rng.choice(WEIGHTS)
    if option == "--kv":
        return rng.choice(KVS)
    if option == "--util":
        return rng.choice(["0.05", "0.3", "0.5", "0.85", "0.9", "0.95", "0.99", "1.0", "1"])
    if option == "--engine":
        return rng.choice(["hf", "vllm", "both"])
    if option == "--vllm-version":
        return rng.choice(VERSIONS)
    raise KeyError(option)


def _value(rng: random.Random, option: str, bad_share: float) -> str:
    return rng.choice(BAD_TEXT) if rng.random() < bad_share else _good_value(rng, option)


# ---------------------------------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    kind: str  # "cli", "config", "gpu-yaml", "log"
    argv: list[str]  # "{dir}" in an argument is replaced by the case's scratch folder
    files: dict[str, bytes] = field(default_factory=dict)
    label: str = ""  # what was mutated, for the report
    env: dict[str, str] = field(default_factory=dict)  # set while the case runs ("{dir}" replaced too)

    def materialize(self, folder: Path) -> list[str]:
        for name, data in self.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return [a.replace("{dir}", str(folder)) for a in self.argv]


def _base_options(rng: random.Random) -> dict[str, str]:
    opts = {"--gpu": rng.choice(GPUS), "--model": rng.choice(MODELS), "--context": rng.choice(CONTEXTS[4:13])}
    for option in ("--batch", "--engine", "--weights", "--kv", "--util", "--tp", "--max-model-len",
                   "--max-num-seqs", "--max-num-batched-tokens", "--vllm-version", "--pp"):
        if rng.random() < 0.25:
            opts[option] = _good_value(rng, option)
    return opts


def _argv(command: list[str], opts: dict[str, str], flags: list[str]) -> list[str]:
    argv = list(command)
    for key, value in opts.items():
        argv += [key, value]
    return argv + flags


def cli_case(rng: random.Random) -> Case:
    """plan (table, --json, --csv, --explain, --tp-sweep), explain, plot, with 0-3 fuzzed options (30%: many)."""
    opts = _base_options(rng)
    if rng.random() < 0.3:
        fuzzed = rng.sample(ALL_PLAN_OPTIONS, rng.randint(3, 8))
    else:
        fuzzed = rng.sample(ALL_PLAN_OPTIONS, rng.randint(0, 3))
    for option in fuzzed:
        opts[option] = _value(rng, option, bad_share=0.6)
    flags = []
    if rng.random() < 0.2:
        flags.append("--enforce-eager")
    roll = rng.random()
    if roll < 0.45:
        command, flags = ["plan"], flags + ["--json"]
    elif roll < 0.6:
        command = ["plan"]
        flags += rng.choice([[], ["--csv"], ["--tp-sweep"], ["--explain", rng.choice(["baseline", "fp8-kv", "x"])]])
    elif roll < 0.85:
        command = ["explain"]
    elif roll < 0.95:
        kind = rng.choice(["capacity", "speed", "memory", "pie"])
        out = rng.choice(["{dir}/p.png", "{dir}", "{dir}/missing/p.png", "{dir}/p.txt", "/proc/p.png"])
        command = ["plot", kind, "--out", out]
    else:  # option order, repeated options, unknown options, stray arguments
        command = ["plan"]
        flags += rng.choice([["--foo"], ["extra"], ["--context"], ["--json", "--csv"], ["-h"], ["--version"]])
    if rng.random() < 0.05:  # an option with a NUL or newline in its name's value
        opts[rng.choice(NAME_OPTIONS)] = rng.choice(["a\x00b", "l4\n", "\x00"])
    return Case("cli", _argv(command, opts, flags), label=",".join(fuzzed) or "valid")


# ---------------------------------------------------------------------------------------------------------------------
# config.json

BAD_NUMBERS = [0, -1, -4096, 1, 2, 3, 7, 10**6, 10**12, 10**18, 10**30, 10**100, 1.5, 0.5, -0.0, 1e308, float("inf"),
               float("-inf"), float("nan"), "12", "abc", None, True, False, [], [8], {}, {"a": 1}]


@lru_cache(maxsize=None)
def _config_sources() -> tuple[tuple[str, str], ...]:
    """(name, json text) of every catalog config and every config fixture (hf_quant_config sidecars excluded)."""
    out = []
    for path in sorted(CATALOG.glob("*.json")):
        out.append((path.stem, json.dumps(json.loads(path.read_text())["config"])))
    for path in sorted(CONFIG_FIXTURES.glob("*.json")):
        if path.name.endswith(".hf_quant_config.json") or path.name == "param_totals.json":
            continue
        out.append((path.stem, path.read_text()))
    return tuple(out)


def _dumps(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def _mutate_dict(rng: random.Random, cfg: dict, steps: int) -> list[str]:
    done = []
    for _ in range(steps):
        target = cfg
        for key in ("text_config", "vision_config"):  # mutate nested configs too
            if isinstance(cfg.get(key), dict) and rng.random() < 0.3:
                target = cfg[key]
        if not target:
            break
        key = rng.choice(sorted(target))
        roll = rng.random()
        if roll < 0.25:
            target.pop(key)
            done.append(f"-{key}")
        elif roll < 0.85 and isinstance(target[key], (int, float)) and not isinstance(target[key], bool):
            old = target[key]
            target[key] = copy.deepcopy(rng.choice(BAD_NUMBERS + [old * 2, old // 3 if isinstance(old, int) else old / 3, -old,
                                                                    old + 1]))
            done.append(f"{key}={target[key]!r:.20}")
        else:
            target[key] = copy.deepcopy(rng.choice(BAD_NUMBERS + ["siglip", "", {"x": []}]))
            done.append(f"{key}:={target[key]!r:.20}")
    return done


SPECIAL_CONFIGS = [
    (b"\x89PNG\r\n\x1a\n", "binary"), ("{}".encode("utf-16"), "utf-16"), (b"", "empty"), (b"{", "truncated"),
    (b"[]", "list"), (b"3", "scalar"), (b"null", "null"), (b"[" * 200000 + b"]" * 200000, "deep"),
    (b'{"num_hidden_layers": ' + b"9" * 5000 + b"}", "5000 digits"), (b'{"a": 1, "a": 2}', "duplicate keys"),
    (b'{"model_type": "llama\x00"}', "NUL"), (b"\xef\xbb\xbf{}", "BOM"), (b'{"model_type": "nope"}', "unknown type"),
    (b'{"model_type": "llama", "num_hidden_layers": 1e400}', "1e400"), (b"NaN", "NaN"),
]


def config_case(rng: random.Random) -> Case:
    """plan/explain/validate on a mutated or malformed config.json."""
    if rng.random() < 0.06:
        data, label = rng.choice(SPECIAL_CONFIGS)
    else:
        name, text = rng.choice(_config_sources())
        cfg = json.loads(text)
        label = name + ":" + ";".join(_mutate_dict(rng, cfg, rng.choice([1, 1, 1, 2, 3, 6])))
        data = _dumps(cfg)
        if rng.random() < 0.04:
            data = data[: rng.randrange(1, max(2, len(data)))]
            label += ":truncated"
    opts = _base_options(rng)
    opts["--model"] = "{dir}/config.json"
    files = {"config.json": data}
    if rng.random() < 0.1:  # a folder holding config.json
        opts["--model"] = "{dir}"
    roll = rng.random()
    if roll < 0.7:
        argv = _argv(["plan"], opts, ["--json"])
    elif roll < 0.9:
        argv = _argv(["explain"], opts, [])
    else:
        argv = ["validate", "--from-log", str(rng.choice(_fixture_logs())), "--model", opts["--model"], "--gpu",
                "h200", "--json"]
    return Case("config", argv, files, label[:120])


# ---------------------------------------------------------------------------------------------------------------------
# GPU profile YAML

BAD_YAML_VALUES = ["0", "-1", "1", "-.inf", ".inf", ".nan", "1e400", "9" * 400, "abc", "''", "[]", "{}", "null", "true",
                   "0.0", "-0.5", "1.5", "2.0", "1e-30", "'8.9'", "[1, 2]", "2026-01-01", "0x10", "!!python/name:os.system"]

SPECIAL_YAML = [
    (b"", "empty"), (b"- a\n- b\n", "list"), (b"3\n", "scalar"), (b"id: [\n", "syntax"), (b"\tid: x\n", "tab"),
    (b"\xff\xfe\x00\x00", "binary"), ("id: x\n".encode("utf-16"), "utf-16"), (b"id: !!python/object:os.system x\n", "tag"),
    (b"id: a\nid: b\n", "duplicate keys"), (b"a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                                            b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\naliases: [*c,*c,*c,*c,*c,*c]\n", "laughs"),
    (b"[" * 100000 + b"]" * 100000, "deep"), (b"sources:\n" + b"  k: v\n" * 200000, "1.4 MB"),
]


@lru_cache(maxsize=None)
def _profile_texts() -> tuple[tuple[str, str], ...]:
    return tuple((p.stem, p.read_text()) for p in sorted(PROFILES.glob("*.yaml")))


def gpu_yaml_case(rng: random.Random) -> Case:
    if rng.random() < 0.08:
        data, label = rng.choice(SPECIAL_YAML)
    else:
        name, text = rng.choice(_profile_texts())
        lines = text.splitlines()
        keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")]
        done = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            i = rng.choice(keyed)
            key, _, _ = lines[i].partition(":")
            if rng.random() < 0.25:
                lines[i] = ""
                done.append(f"-{key.strip()}")
            else:
                lines[i] = f"{key}: {rng.choice(BAD_YAML_VALUES)}"
                done.append(f"{key.strip()}={lines[i].split(': ', 1)[1][:20]}")
        data, label = ("\n".join(lines) + "\n").encode(), name + ":" + ";".join(done)
    opts = _base_options(rng)
    opts["--gpu"] = "{dir}/gpu.yaml"
    argv = _argv(["plan"], opts, ["--json"]) if rng.random() < 0.8 else _argv(["explain"], opts, [])
    return Case("gpu-yaml", argv, {"gpu.yaml": data}, label[:120])


# ---------------------------------------------------------------------------------------------------------------------
# vLLM logs


@lru_cache(maxsize=None)
def _fixture_logs() -> tuple[Path, ...]:
    return tuple(sorted(LOGS.glob("*.log")) + sorted((LOGS / "public").glob("*.log")))


@lru_cache(maxsize=None)
def _log_models() -> dict[str, str]:
    """Log file name -> the --model to validate it with (index.json for public logs, the file name for ours)."""
    out = {}
    index = json.loads((LOGS / "public" / "index.json").read_text())
    for entry in index["logs"]:
        model = entry.get("kvcalc_model")
        if model:
            out[entry["file"]] = str(ROOT / model) if model.endswith(".json") else model
    ours = {"3b": "llama-3.2-3b", "8b": "llama-3.1-8b", "dsv2lite": "deepseek-v2-lite", "gemma3-1b": "gemma-3-1b",
            "v1_debug": "qwen2.5-7b", "llama-3.1-8b": "llama-3.1-8b", "llama-3.2-3b": "llama-3.2-3b",
            "kv_too_small": "llama-3.1-8b", "v0engine": "llama-3.1-8b"}
    for path in sorted(LOGS.glob("*.log")):
        out[path.name] = next((m for k, m in ours.items() if k in path.name), "llama-3.2-3b")
    return out


def _mutate_number(rng: random.Random, line: str) -> str:
    import re

    spans = [m.span() for m in re.finditer(r"\d[\d,]*(?:\.\d+)?", line)]
    if not spans:
        return line
    a, b = rng.choice(spans[len(spans) // 3:] or spans)  # prefer numbers after the timestamp
    old = line[a:b]
    try:
        value = float(old.replace(",", ""))
    except ValueError:
        value = 1.0
    new = rng.choice([f"{value * 10:g}", f"{value / 10:g}", "0", f"-{old}", "9" * 400, "9" * 5000, "1.2.3", ",", "nan",
                      f"{value * 1.01:.2f}", "", "..", "inf", "1e400", f"{old}.{old}", "-0"])
    return line[:a] + new + line[b:]


def log_case(rng: random.Random) -> Case:
    path = rng.choice(_fixture_logs())
    model = _log_models().get(path.name, "llama-3.2-3b")
    data, label = mutated_log(rng, path)
    opts = ["validate", "--from-log", "{dir}/v.log", "--model", model, "--gpu", rng.choice(["h200", "h100-sxm", "l4"])]
    if rng.random() < 0.5:
        opts.append("--json")
    if rng.random() < 0.15:
        opts += [rng.choice(["--kv", "--util", "--max-num-batched-tokens", "--run", "--vllm-version", "--entrypoint",
                             "--tp", "--pp", "--max-model-len", "--max-num-seqs", "--weights"]),
                 rng.choice(BAD_TEXT[:40] + ["fp8", "0.9", "2048", "0", "-1", "serve", "bfloat16", "awq_marlin"])]
    if rng.random() < 0.1:
        opts.append("--strict")
    return Case("log", opts, {"v.log": data}, f"{path.name}:{label}")


def mutated_log(rng: random.Random, path: Path) -> tuple[bytes, str]:
    """A fixture log with numbers changed, lines removed, truncated, concatenated, binary inserted, another version,
    CRLF/ANSI/prefixes, or an adversarial file instead."""
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    roll = rng.random()
    if roll < 0.4:
        for _ in range(rng.choice([1, 1, 2, 4])):
            i = rng.randrange(len(lines))
            lines[i] = _mutate_number(rng, lines[i])
        label = "number"
        data = "".join(lines).encode()
    elif roll < 0.55:
        for _ in range(rng.choice([1, 3, 10])):
            if len(lines) > 1:
                lines.pop(rng.randrange(len(lines)))
        label, data = "lines removed", "".join(lines).encode()
    elif roll < 0.63:
        data = "".join(lines).encode()
        data, label = data[: rng.randrange(len(data) + 1)], "truncated"
    elif roll < 0.7:
        other = rng.choice(_fixture_logs()).read_bytes()
        data, label = "".join(lines).encode() + other, "concatenated"
    elif roll < 0.76:
        data = "".join(lines).encode()
        at = rng.randrange(len(data) + 1)
        data, label = data[:at] + bytes(rng.randrange(256) for _ in range(512)) + data[at:], "binary inserted"
    elif roll < 0.84:
        text = "".join(lines)
        import re

        new = rng.choice(["0.7.3", "0.9.0", "1.0.0", "99.0.0", "x.y.z", "0.26.0rc1", "0.26.0.dev12+g1234", ""])
        data, label = re.sub(r"(?i)(vllm[^\n]{0,20}?(?:version|v)\s*)\d+\.\d+[.\w+]*", r"\g<1>" + new, text).encode(), \
            f"version {new}"
    elif roll < 0.9:
        text = "".join(lines)
        style = rng.choice(["crlf", "ansi", "prefix", "strip-prefix"])
        if style == "crlf":
            text = text.replace("\n", "\r\n")
        elif style == "ansi":
            text = "".join("\x1b[32m" + line for line in lines)
        elif style == "prefix":
            text = "".join(f"(EngineCore_DP0 pid=1) {line}" for line in lines)
        else:
            text = "".join(line.split("] ", 1)[-1] for line in lines)
        data, label = text.encode(), style
    else:
        data, label = _adversarial_log(rng), "adversarial"
    return data, label


def _adversarial_log(rng: random.Random) -> bytes:
    base = (LOGS / "real_v0.26.0_v-3b-auto-eager-u90.log").read_text()
    kind = rng.randrange(8)
    if kind == 0:  # the ReDoS prefix of H2
        return (f"(EngineCore{'_a' * rng.choice([24, 28, 40])} x\n" + base).encode()
    if kind == 1:  # one long line (H3), needles included
        needle = rng.choice(["", "CUDA out of memory", "GPU KV cache size: ", "Loading weights took ", "model="])
        return (needle + "A" * rng.choice([80_000, 300_000]) + needle).encode()
    if kind == 2:  # a big ordinary log (H4): ~2 MiB
        return (base * 120).encode()
    if kind == 3:
        return b"\x00" * 10000
    if kind == 4:
        return (base.replace("\n", " ")).encode()
    if kind == 5:  # 50k tiny lines
        return b"\n" * 50000
    if kind == 6:  # every key line repeated with different numbers
        return "".join(base.splitlines(keepends=True)[:5] * 2000).encode()
    return ("INFO " + "GiB " * 20000 + "\n").encode()


# ---------------------------------------------------------------------------------------------------------------------
# calibrate (landed on main during the fuzz session): logs in, a profile out; and plan reading a damaged profile

CALIBRATION = ROOT / "tests" / "fixtures" / "calibration_h200.json"  # written by `kvcalc calibrate` on two real logs


def calibrate_case(rng: random.Random) -> Case:
    """kvcalc calibrate on 1-3 mutated (or intact) fixture logs, profile written under the case's own folder."""
    files, argv = {}, ["calibrate"]
    for i in range(rng.choice([1, 1, 2, 3])):
        path = rng.choice(_fixture_logs())
        data, _ = mutated_log(rng, path) if rng.random() < 0.6 else (path.read_bytes(), "intact")
        files[f"l{i}.log"] = data
        argv.append(f"{{dir}}/l{i}.log")
    model = rng.choice([None, "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-7b"] + BAD_TEXT[:12])
    if model is not None:
        argv += ["--model", model]
    if rng.random() < 0.9:
        argv += ["--gpu", rng.choice(["h200", "h100-sxm", "a100-80gb", "l4"] + BAD_TEXT[:8])]
    for flag in ("--dry-run", "--force", "--json", "--show"):
        if rng.random() < 0.3:
            argv.append(flag)
    if rng.random() < 0.15:
        argv += ["--vllm-version", rng.choice(VERSIONS + BAD_TEXT[:20])]
    if rng.random() < 0.2:  # an existing profile, intact or damaged, beside which the new calibration is written
        files["cfg/calibration.json"] = _profile_mutation(rng)
    for i in range(rng.choice([0, 0, 1, 2])):  # vllm bench results (kvcalc calibrate --bench), intact or damaged
        files[f"b{i}.json"] = _bench_mutation(rng)
        argv += ["--bench", f"{{dir}}/b{i}.json" + (f"=l0.log" if rng.random() < 0.2 else "")]
    if rng.random() < 0.1:
        argv += ["--input-len", rng.choice(["1024", "0", "-3", "1e9", "x"]), "--output-len", rng.choice(["128", "0"])]
    return Case("calibrate", argv, files, f"{len(files)} files", env={"KVCALC_CONFIG_DIR": "{dir}/cfg"})


BENCHES = sorted((ROOT / "tests" / "fixtures" / "vllm_bench").glob("*.json"))


def _bench_mutation(rng: random.Random) -> bytes:
    """A real bench fixture, intact, with values replaced by bad numbers or text, keys dropped, or not JSON."""
    doc = json.loads(rng.choice(BENCHES).read_text())
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(SPECIAL_CONFIGS)[0]
    if roll < 0.2:  # a `vllm bench throughput` result
        doc = {"elapsed_time": 10.0, "num_requests": 100, "total_num_tokens": 204800, "requests_per_second": 10.0,
               "tokens_per_second": 20480.0}
    for _ in range(rng.choice([0, 1, 2, 3])):
        if doc and rng.random() < 0.3:
            doc.pop(rng.choice(sorted(doc)))
        else:
            key = rng.choice(sorted(doc) + ["max_concurrency", "request_rate", "gpu"])
            doc[key] = copy.deepcopy(rng.choice(BAD_NUMBERS + ["inf", "4xNVIDIA_L40S", "NVIDIA H200", None]))
    return _dumps(doc)


def _profile_mutation(rng: random.Random) -> bytes:
    doc = json.loads(CALIBRATION.read_text())
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(SPECIAL_CONFIGS)[0]
    if roll < 0.2:
        return b""
    env = doc["environments"][0]
    if rng.random() < 0.4:  # a speed calibration (kvcalc calibrate --bench)
        env["speed"] = {"bandwidth_bytes_per_s": 3.9e12, "step_overhead_s": 0.0012, "tensor_fraction": 0.6,
                        "benches": ["b.json"], "not_fitted": []}
    for _ in range(rng.choice([0, 1, 2, 3])):
        target = rng.choice([doc, env] + [env[k] for k in ("non_torch_bytes_by_tp", "activation_scale_by_tp",
                                                             "cudagraph_bytes_by_tp", "speed")
                                          if isinstance(env.get(k), dict)])
        if target and rng.random() < 0.3:
            target.pop(rng.choice(sorted(target)))
        else:
            key = rng.choice(sorted(target) + ["tp2", "tp0", "tp1pp2", "tpx", "pp2", "tp1" * 10])
            target[key] = copy.deepcopy(rng.choice(BAD_NUMBERS + ["NVIDIA H200 SXM 141GB", "0.26.0", "x.y.z"]))
    return _dumps(doc)


def calibrated_plan_case(rng: random.Random) -> Case:
    """plan/explain/fit with a user calibration profile (intact or damaged) in KVCALC_CONFIG_DIR."""
    opts = _base_options(rng)
    opts["--gpu"] = rng.choice(["h200", "h200", "h100-sxm"])
    opts["--vllm-version"] = rng.choice(["0.26.0", "0.26.0", "0.24.0"])
    command = rng.choice([["plan"], ["plan"], ["explain"], ["fit", "max-context"]])
    flags = ["--json"] if command[0] != "explain" and rng.random() < 0.7 else []
    data = CALIBRATION.read_bytes() if rng.random() < 0.3 else _profile_mutation(rng)
    return Case("calibration", _argv(command, opts, flags), {"cfg/calibration.json": data}, "profile",
                env={"KVCALC_CONFIG_DIR": "{dir}/cfg"})


# ---------------------------------------------------------------------------------------------------------------------
# kvcalc serve's JSON API (landed on main during the fuzz session): GET query strings and POST bodies

API_PATHS = ["/api/plan", "/api/plan", "/api/explain", "/api/plots", "/api/search", "/api/gpus", "/api/nope"]


def serve_case(rng: random.Random) -> Case:
    """A request to the web API through starlette's TestClient: the CLI's options as query or JSON body, fuzzed,
    plus malformed bodies. argv = ["serve", METHOD, PATH, BODY] (BODY: the query as JSON, or the raw POST body)."""
    path = rng.choice(API_PATHS)
    if path == "/api/search":
        opts = {k.lstrip("-").replace("-", "_"): v for k, v in zip(search_case(rng).argv[1::2], search_case(rng).argv[2::2])}
    else:
        base = _base_options(rng)
        for option in rng.sample(ALL_PLAN_OPTIONS, rng.randint(0, 3)):
            base[option] = _value(rng, option, bad_share=0.6)
        opts = {k.lstrip("-").replace("-", "_"): v for k, v in base.items()}
        if path == "/api/plots":
            opts["kind"] = rng.choice(["capacity", "speed", "memory", "pie", ""])
    if rng.random() < 0.1:  # values of other JSON types in a POST
        opts[rng.choice(sorted(opts) or ["context"])] = copy.deepcopy(rng.choice(BAD_NUMBERS))
    roll = rng.random()
    if roll < 0.45:
        method, body = "GET", json.dumps({k: str(v) for k, v in opts.items()})
    elif roll < 0.9:
        method, body = "POST", json.dumps(opts, allow_nan=True)
    else:
        method, body = "POST", rng.choice(['[1]', '{"context": ', "\udcff", "[" * 5000 + "]" * 5000, '"x"', "null",
                                           '{"context": "8k", "context": "9k"}', "x" * 70000])
    return Case("serve", ["serve", method, path, body], label=f"{method} {path}")


@lru_cache(maxsize=1)
def _client():
    from starlette.testclient import TestClient

    from kvcalc.web.app import create_app

    return TestClient(create_app(), base_url="http://localhost", raise_server_exceptions=False)


def _run_serve(argv: list[str]) -> tuple[int, str, str]:
    """(exit-code-like status, body, error line): 200 -> 0, 400/404/405 -> 2 (a refusal), anything else as is."""
    _, method, path, body = argv
    client = _client()
    if method == "GET":
        response = client.get(path, params=json.loads(body))
    else:
        response = client.post(path, content=body.encode("utf-8", "surrogatepass"),
                               headers={"content-type": "application/json"})
    status = response.status_code
    text = response.text
    if status == 200:
        return 0, text, ""
    if status in (400, 404, 405, 413):
        try:
            message = json.loads(text).get("error", "")
        except (ValueError, AttributeError):
            message = ""
        return 2, "", f"error: {message}" if message else text[:300]
    return status, text[:300], f"HTTP {status}: {text[:300]}"


# ---------------------------------------------------------------------------------------------------------------------
# search and fit (landed on main during the fuzz session)

_PRICES = (ROOT / "kvcalc" / "data" / "prices.yaml")


def _list_value(rng: random.Random, pool: list[str]) -> str:
    if rng.random() < 0.3:
        return rng.choice(BAD_TEXT + [",", ",,", "a,b", "1,,2", "1," * 200, "-1,2", "0"])
    return ",".join(rng.sample(pool, rng.randint(1, min(4, len(pool)))))


def search_case(rng: random.Random) -> Case:
    """kvcalc search: workload, targets, grids, prices (flags and price files)."""
    opts = {"--model": rng.choice(MODELS[:20] + ["llama-3.1-8b", "qwen3-8b"]),
            "--input-len": rng.choice(["128", "2k", "8k"]), "--output-len": rng.choice(["64", "512", "1k"]),
            rng.choice(["--concurrency", "--request-rate"]): rng.choice(["1", "8", "32"])}
    choices = {
        "--max-ttft-ms": lambda: rng.choice(["200", "2000", "1e4"]),
        "--max-tpot-ms": lambda: rng.choice(["10", "50", "200"]),
        "--min-context": lambda: rng.choice(["4k", "32k"]),
        "--max-quality-risk": lambda: rng.choice(["none", "low", "moderate", "high"]),
        "--gpus": lambda: _list_value(rng, GPUS[:8] + ["{dir}/gpu.yaml"]),
        "--weights": lambda: _list_value(rng, WEIGHTS),
        "--kv": lambda: _list_value(rng, KVS),
        "--tp": lambda: _list_value(rng, ["1", "2", "4", "8", "3"]),
        "--pp": lambda: _list_value(rng, ["1", "2", "4"]),
        "--max-replicas": lambda: str(rng.choice([1, 2, 8, 64])),
        "--max-gpus-per-replica": lambda: str(rng.choice([1, 4, 8, 16])),
        "--utils": lambda: rng.choice(["0.80:0.95:0.01", "0.9", "0.5,0.9", "0.9:0.8:0.01", "0:1:0", "0.1:0.99:1e-9",
                                       "0.5:0.6:0", "1:2:0.1", "a:b:c", "0.9:", "::"]),
        "--max-num-seqs": lambda: _list_value(rng, ["1", "8", "64", "256", "1024"]),
        "--max-num-batched-tokens": lambda: rng.choice(["2048", "8k"]),
        "--price": lambda: rng.choice(["h200=3.5", "l4=0", "h200=-1", "h200=nan", "h200=inf", "x=1", "h200", "=",
                                       "h200=1e400", "t4=0.0001"]),
        "--prices": lambda: "{dir}/prices.yaml",
        "--vllm-version": lambda: rng.choice(VERSIONS),
        "--top": lambda: str(rng.choice([1, 3, 10, 10000])),
    }
    if rng.random() < 0.05:  # both, or the other one too
        opts[rng.choice(["--concurrency", "--request-rate"])] = rng.choice(["4", "0.5"])
    bad_share = 0.0 if rng.random() < 0.5 else 0.35  # half the cases valid throughout
    for option in rng.sample(sorted(choices), rng.randint(1, 5)):
        opts[option] = choices[option]() if rng.random() >= bad_share else rng.choice(BAD_TEXT)
    files = {}
    if "--prices" in opts:
        text = _PRICES.read_text()
        if rng.random() < 0.7:
            lines = text.splitlines()
            for _ in range(rng.choice([1, 2, 4])):
                i = rng.randrange(len(lines))
                key = lines[i].partition(":")[0]
                lines[i] = f"{key}: {rng.choice(BAD_YAML_VALUES)}" if ":" in lines[i] else ""
            text = "\n".join(lines)
        files["prices.yaml"] = text.encode() if rng.random() > 0.1 else rng.choice(SPECIAL_YAML)[0]
    if "{dir}/gpu.yaml" in opts.get("--gpus", ""):
        files["gpu.yaml"] = dict(_profile_texts())[rng.choice(GPUS)].encode()
    flags = ["--json"] if rng.random() < 0.7 else []
    return Case("search", _argv(["search"], opts, flags), files, ",".join(opts)[:120])


FIT_QUESTIONS = ["max-context", "max-concurrency", "min-util", "min-gpus", "auto"]


def fit_case(rng: random.Random) -> Case:
    opts = _base_options(rng)
    for option in rng.sample(ALL_PLAN_OPTIONS, rng.randint(0, 2)):
        opts[option] = _value(rng, option, bad_share=0.5)
    if rng.random() < 0.2:
        opts["--max-gpus"] = rng.choice(["1", "8", "64", "65", "0", "abc"])
    question = rng.choice(FIT_QUESTIONS) if rng.random() < 0.95 else rng.choice(BAD_TEXT)
    flags = ["--json"] if rng.random() < 0.75 else []
    return Case("fit", _argv(["fit", question], opts, flags), label=question[:30])


def search_invariants(doc: dict, argv: list[str]) -> list[str]:
    """Every ranked deployment meets the stated targets, with positive sizes and non-decreasing cost by rank."""
    problems = []
    ttft, tpot = _opt(argv, "--max-ttft-ms"), _opt(argv, "--max-tpot-ms")
    last = -1.0
    for r in doc.get("results") or []:
        tag = f"rank {r.get('rank')}"
        try:
            if ttft is not None and r.get("ttft_ms") is not None and r["ttft_ms"] > float(ttft) * 1.0001:
                problems.append(f"{tag}: ttft {r['ttft_ms']:.1f} ms over the target {ttft}")
            if tpot is not None and r.get("tpot_ms") is not None and r["tpot_ms"] > float(tpot) * 1.0001:
                problems.append(f"{tag}: tpot {r['tpot_ms']:.1f} ms over the target {tpot}")
        except ValueError:
            pass
        if (r.get("max_concurrency") or 0) < (r.get("concurrency_per_replica") or 0):
            problems.append(f"{tag}: holds {r.get('max_concurrency')} requests, needs {r.get('concurrency_per_replica')}")
        if not all((r.get(k) or 0) >= 1 for k in ("tp", "pp", "replicas", "gpus_total")):
            problems.append(f"{tag}: a size below 1")
        if r.get("gpus_total") != (r.get("tp") or 0) * (r.get("pp") or 0) * (r.get("replicas") or 0):
            problems.append(f"{tag}: gpus_total {r.get('gpus_total')} != tp x pp x replicas")
        if not 0 < (r.get("util") or 0) <= 1:
            problems.append(f"{tag}: util {r.get('util')}")
    return problems


def fit_invariants(doc: dict, argv: list[str]) -> list[str]:
    problems = []
    if doc.get("fits_at_answer") is False and doc.get("value") not in (None, 0):
        problems.append(f"answer {doc.get('value')} that does not fit")
    if doc.get("fits_one_step_beyond") is True:
        problems.append(f"one step beyond {doc.get('value')} still fits: not the extreme")
    return problems


# ---------------------------------------------------------------------------------------------------------------------
# the third audit's generators (tests/fuzz_hostile.py): checkpoint folders, JSON option values, hostile web
# parameters, lying Content-Length


def ckpt_case(rng: random.Random) -> Case:
    """plan/explain/fit on a hostile (or intact) checkpoint folder; the oracle adds: header weights <= file bytes."""
    import fuzz_hostile as H

    files, kind = H.hostile_checkpoint(rng)
    command = rng.choice([["plan"], ["plan"], ["explain"], ["fit", "max-context"]])
    argv = [*command, "--model", "{dir}/ck", "--gpu", rng.choice(["l4", "h200", "t4", "a100-80gb"]),
            "--context", rng.choice(["1k", "4k"])]
    if rng.random() < 0.4:
        argv += ["--engine", rng.choice(["vllm", "hf"]) if command[0] != "fit" else "vllm"]
    if command[0] != "explain" and rng.random() < 0.7:
        argv.append("--json")
    return Case("ckpt", argv, {f"ck/{k}": v for k, v in files.items()}, f"{kind} disk={H.shard_bytes(files)}")


def jsonopt_case(rng: random.Random) -> Case:
    """--limit-mm-per-prompt / --speculative-config JSON with Infinity, NaN, 1e309, wrong types, deep nesting."""
    import fuzz_hostile as H

    option = rng.choice(["--limit-mm-per-prompt", "--speculative-config"])
    value = H.mm_limit_value(rng) if option == "--limit-mm-per-prompt" else H.speculative_value(rng)
    command = rng.choice([["plan"], ["explain"], ["fit", "max-context"]])
    model = rng.choice(["gemma-3-4b", "llama-3.1-8b", "qwen2.5-vl-7b", "llama-3.2-1b"])
    argv = [*command, "--model", model, "--gpu", rng.choice(["l4", "h200"]), "--context", "4k", option, value]
    if command[0] == "plan" and rng.random() < 0.5:
        argv.append("--json")
    return Case("jsonopt", argv, label=option)


WEB_HOSTILE_PATHS = ["/api/plan", "/api/plan", "/api/explain", "/api/plots", "/api/deploy", "/api/search"]


def web_hostile_case(rng: random.Random) -> Case:
    """An API request whose parameters name server files or hub ids; the oracle adds: no file outside kvcalc's own
    data was opened while it ran, and no answer is a 200 built from the probe folder."""
    import fuzz_hostile as H
    from kvcalc.options import web_table

    path = rng.choice(WEB_HOSTILE_PATHS)
    table = web_table("search" if path == "/api/search" else "plan")
    named = [o.name for o in table if o.name in ("model", "vllm_command", "speculative_config", "gpu", "gpus")]
    names = named if rng.random() < 0.8 else [o.name for o in table]
    params = H.hostile_web_params(rng, names)
    if path == "/api/search":
        params = {"input_len": "1k", "output_len": "64", "concurrency": "4", "gpus": "l4", "tp": "1",
                  "util": "0.9", "max_num_seqs": "8", **params}
    method = rng.choice(["GET", "POST"])
    return Case("web-hostile", ["serve-hostile", method, path, json.dumps(params)], H.probe_files(), method)


def lying_length_case(rng: random.Random) -> Case:
    """Raw HTTP to a real server (kvcalc serve's protocol): bodies shorter than their Content-Length, malformed
    lengths, headers that never finish; the oracle: the connection ends in time, replies carry the headers."""
    import fuzz_hostile as H

    return Case("lying-length", ["lying-length", H.lying_request(rng).decode("latin-1")], label="raw")


CASE_KINDS = {"cli": cli_case, "config": config_case, "gpu-yaml": gpu_yaml_case, "log": log_case, "search": search_case,
              "fit": fit_case, "calibrate": calibrate_case, "calibration": calibrated_plan_case, "serve": serve_case,
              "ckpt": ckpt_case, "jsonopt": jsonopt_case, "web-hostile": web_hostile_case,
              "lying-length": lying_length_case}
# share of each kind in a run
MIX = {"cli": 0.27, "config": 0.14, "gpu-yaml": 0.07, "log": 0.15, "search": 0.06, "fit": 0.06, "calibrate": 0.04,
       "calibration": 0.04, "serve": 0.05, "ckpt": 0.05, "jsonopt": 0.03, "web-hostile": 0.03, "lying-length": 0.01}


# ---------------------------------------------------------------------------------------------------------------------
# hypothesis: argv for plan/explain/fit drawn from strategies (valid values, edge values and arbitrary text mixed)


def argv_strategy():
    """A hypothesis strategy of plan/explain/fit argv: each option absent, a valid value, an edge value or any text."""
    from hypothesis import strategies as st

    def option(name: str, good: list[str], edge: list[str]):
        # mostly valid values, so most argv get past the parser and reach the arithmetic the invariants judge
        value = st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good), st.sampled_from(edge),
                          st.text(max_size=12))
        return st.one_of(st.just([]), st.just([]), value.map(lambda v: [name, v]))

    ints = [str(n) for n in (0, 1, 2, 3, 7, 64, 256, 257, 65536, 65537, 2**24, 2**24 + 1)]
    parts = st.tuples(
        st.sampled_from([["plan", "--json"], ["plan"], ["explain"], ["fit", "max-context", "--json"],
                         ["fit", "max-concurrency", "--json"], ["fit", "min-util", "--json"],
                         ["fit", "min-gpus", "--json"], ["fit", "auto", "--json"]]),
        option("--model", MODELS, ["", "a/b", "x" * 300]),
        option("--gpu", GPUS, ["", "h10", "4090"]),
        option("--context", CONTEXTS, ints + ["1e3", "0.5k", "-1", "1k1"]),
        option("--batch", ["1", "4", "32"], ints),
        option("--engine", ["hf", "vllm", "both"], ["HF", ""]),
        option("--weights", WEIGHTS, ["BF16", "nf4 ", "q4"]),
        option("--kv", KVS, ["FP8", "int8", "q4_0"]),
        option("--util", ["0.5", "0.9", "0.95", "1"], ["0", "1.0000001", "nan", "1e-9", "-0.5"]),
        option("--max-model-len", CONTEXTS, ints),
        option("--max-num-seqs", ["1", "64", "256"], ints),
        option("--max-num-batched-tokens", ["2048", "8192"], ints),
        option("--tp", ["1", "2", "4", "8"], ints),
        option("--pp", ["1", "2", "3"], ints),
        option("--vllm-version", VERSIONS, ["0.9.0", "1!0.26", "0.26.0.post1", "v0.24", "0.26.0-x"]),
        st.sampled_from([[], ["--enforce-eager"]]),
    )
    return parts.map(lambda ps: [a for p in ps for a in p])


def hypothesis_cases(n: int, seed: int) -> list[Case]:
    """n argv drawn from argv_strategy() with a fixed seed (hypothesis as a generator: no shrinking here; the CI test
    runs the same strategy under @given, which shrinks a failure to its smallest argv)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hyp_seed

    drawn: list[list[str]] = []

    @hyp_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(argv_strategy())
    def draw(argv):
        drawn.append(argv)

    draw()
    return [Case("hypothesis", argv, label="hypothesis") for argv in drawn[:n]]


def generate(seed: int, n: int, kinds: dict[str, float] | None = None) -> list[Case]:
    rng = random.Random(seed)
    mix = kinds or MIX
    names, weights = list(mix), list(mix.values())
    return [CASE_KINDS[rng.choices(names, weights)[0]](rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------------------------
# Running and judging


@dataclass
class Outcome:
    case: Case
    argv: list[str]
    code: int | None
    seconds: float  # wall
    stdout: str
    stderr: str
    error: str | None = None  # "Type: message @ file:line" for a traceback, "hang" for the alarm
    problems: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0
    opened: list[str] = field(default_factory=list)  # web-hostile: files opened outside kvcalc's data while it ran


class _Alarm(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Alarm()


def run_case(case: Case, folder: Path) -> Outcome:
    from kvcalc.cli import main

    argv = case.materialize(folder)
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update({k: v.replace("{dir}", str(folder)) for k, v in case.env.items()})
    out, err = io.StringIO(), io.StringIO()
    code, error = None, None
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(ALARM_S)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if argv[0] == "serve":
                    code, body, line = _run_serve(argv)
                    out.write(body)
                    err.write(line + "\n" if line else "")
                elif argv[0] == "serve-hostile":
                    import fuzz_hostile as H

                    params = json.loads(argv[3].replace("{probe}", str(folder / "probe")))
                    with H.opened_files() as opened:
                        code, body, line = _run_serve(["serve", argv[1], argv[2], json.dumps(params)])
                    out.write(body)
                    err.write(line + "\n" if line else "")
                elif argv[0] == "lying-length":
                    import fuzz_hostile as H

                    reply, took = H.send_raw(argv[1].encode("latin-1"))
                    code = 0
                    out.write(reply.decode("latin-1"))
                    err.write("".join(f"lying: {p}\n" for p in H.lying_invariants(reply, took)))
                else:
                    main(argv)
                    code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Alarm:
        error = "hang"
    except BaseException as exc:  # noqa: BLE001 - the point is to see every escape
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "kvcalc" in f.filename]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        error = f"{type(exc).__name__}: {str(exc)[:120]} @ {where}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    outcome = Outcome(case, argv, code, seconds, out.getvalue(), err.getvalue(), error, cpu_seconds=cpu,
                      opened=list(locals().get("opened") or []))
    outcome.problems = judge(outcome)
    return outcome


def _gate_failed(o: Outcome) -> bool:
    """Exit 1 from a gate (kvcalc/gate.py: fit/search with no answer, plan --require-fit): the output, then one
    `gate failed:` line last on stderr."""
    lines = o.stderr.strip().splitlines()
    return o.argv[0] in ("plan", "fit", "search") and bool(lines) and lines[-1].startswith("gate failed: ")


def judge(o: Outcome) -> list[str]:
    problems = []
    if o.error == "hang":
        return [f"hang (> {ALARM_S} s)"]
    if o.error:
        return ["traceback " + o.error]
    if o.argv[0] == "lying-length":  # raw HTTP: its own oracle (fuzz_hostile.lying_invariants)
        return [line[len("lying: "):] for line in o.stderr.splitlines() if line.startswith("lying: ")]
    if o.argv[0] == "serve-hostile":
        problems += [f"read a server file: {p}" for p in o.opened]
        if o.code == 0 and '"model":"probe' in o.stdout.replace(" ", ""):
            problems.append("answered with the plan of the probe folder on the server: " + o.argv[3][:120])
        o = Outcome(o.case, ["serve", *o.argv[1:]], o.code, o.seconds, o.stdout, o.stderr, cpu_seconds=o.cpu_seconds)
    if o.cpu_seconds > SLOW_S:
        problems.append(f"slow {o.cpu_seconds:.1f} s of CPU ({o.seconds:.1f} s wall)")
    if o.code == 2:
        lines = o.stderr.splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        if len(errors) != 1 or len(lines) - sum(line.startswith("warning: ") for line in lines) != 1:
            problems.append("exit 2 without exactly one error line: " + repr(o.stderr[:200]))
        if "Traceback" in o.stderr or "Usage:" in o.stderr:
            problems.append("exit 2 with a traceback or usage block")
    # (the web API's errors are a JSON field, not a terminal line: its list of known parameters may be long)
    if o.argv[0] != "serve" and any(len(line) > MAX_LINE for line in o.stderr.splitlines()):
        problems.append(f"exit {o.code}: a message line over {MAX_LINE} characters (input echoed in full?)")
    if o.code == 2:
        pass
    elif o.code not in (0, 1) or (o.code == 1 and "--strict" not in o.argv and not _gate_failed(o)):
        problems.append(f"exit code {o.code}: {o.stderr[-200:]!r}")
    serve_json = o.argv[0] == "serve" and o.code == 0 and o.stdout.lstrip().startswith(("{", "["))
    if o.code == 0 and ("--json" in o.argv or serve_json) and o.argv[0] in ("plan", "validate", "search", "fit",
                                                                              "calibrate", "serve"):
        try:
            doc = json.loads(o.stdout, parse_constant=lambda c: float(c))
        except ValueError as exc:
            return problems + [f"--json output is not JSON ({exc})"]
        problems += [f"{path} = {value!r}" for path, value in _bad_numbers(doc)]
        if o.argv[0] == "plan":
            problems += plan_invariants(doc, o.argv)
            if o.case.kind == "ckpt":
                import fuzz_hostile as H

                problems += H.checkpoint_invariants(doc, int(o.case.label.rsplit("disk=", 1)[1]))
        elif o.argv[0] == "serve" and o.argv[2] == "/api/plan" and isinstance(doc, dict) and "rows" in doc:
            query = json.loads(o.argv[3]) if o.argv[3].startswith("{") else {}
            argv = [a for k, v in (query.items() if isinstance(query, dict) else [])
                    for a in ("--" + str(k).replace("_", "-"), str(v))]
            problems += plan_invariants(doc, ["plan"] + argv)
        elif o.argv[0] == "search":
            problems += search_invariants(doc, o.argv)
        elif o.argv[0] == "fit":
            problems += fit_invariants(doc, o.argv)
    if o.code == 0 and o.argv[0] in ("plan", "explain", "serve") and not o.stdout.strip() and "-h" not in o.argv:
        problems.append("exit 0 with no output")
    return problems


# Numbers that are signed by definition: validate's relative errors, and the memory figures vLLM itself computes as
# differences and prints negative when the budget is overdrawn (kvcalc.validate.vllm_log.SIGNED_VALUES; the plan's
# available_kv_bytes is that figure, and plan_invariants checks that a negative one never comes with fits), and the
# trust intervals' bounds, which are signed relative errors (kvcalc/trust.py: low -0.2 = 20% below the figure).
SIGNED_KEYS = {"error", "available_kv_bytes", "non_torch_bytes", "graph_capture_bytes", "cudagraph_estimate_bytes",
               "cudagraph_pool_actual_bytes", "low", "high", "tpot_low", "tpot_high", "ttft_low", "ttft_high"}
SIGNED_QUANTITIES = ("available KV memory", "non-torch memory", "CUDA graph")


def _bad_numbers(value, path="$", key="", signed=False):
    """NaN, inf and negative numbers anywhere in a JSON document (bools are not numbers here)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            yield path, value
        elif value < 0 and not signed and key not in SIGNED_KEYS:
            yield path, value
    elif isinstance(value, dict):
        quantity = str(value.get("quantity", ""))
        row_signed = any(q.lower() in quantity.lower() for q in SIGNED_QUANTITIES)
        for child_key, child in value.items():
            yield from _bad_numbers(child, f"{path}.{child_key}", child_key,
                                    row_signed and child_key in ("predicted", "observed"))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _bad_numbers(child, f"{path}[{i}]", key, signed)


def _opt(argv: list[str], name: str, default: str | None = None) -> str | None:
    value = default
    for i, arg in enumerate(argv[:-1]):
        if arg == name:
            value = argv[i + 1]
    return value


@lru_cache(maxsize=256)
def _heads(model: str) -> int | None:
    from kvcalc.catalog import load_model
    from kvcalc.errors import UsageError

    try:
        return load_model(model).num_heads
    except (UsageError, Exception):  # noqa: BLE001 - the run itself judged the model
        return None


def plan_invariants(doc: dict, argv: list[str]) -> list[str]:
    """The physical invariants of a `plan --json` answer (see the module docstring)."""
    problems = []
    total = doc.get("gpu_memory_total_bytes")
    settings = doc.get("settings") or {}
    tp = int(_opt(argv, "--tp", "1")) if (_opt(argv, "--tp", "1") or "").isdigit() else 1
    pp = int(_opt(argv, "--pp", "1")) if (_opt(argv, "--pp", "1") or "").isdigit() else 1
    context, batch = doc.get("context"), doc.get("batch")
    if not doc.get("rows"):
        problems.append("plan --json with no rows")
    heads = _heads(_opt(argv, "--model") or "llama-3.2-3b") if tp > 1 else None
    for row in doc.get("rows", []):
        tag = f"{row.get('config')}/{row.get('engine')}"
        for key, value in row.items():
            if (key.endswith("_bytes") or key == "kv_bytes_per_token") and value is not None \
                    and not isinstance(value, int):
                problems.append(f"{tag}: {key} is not an integer ({value!r})")
        fits = row.get("fits")
        # a release that does not serve the model at all (engines/vllm_support.py) says no whatever the memory:
        # no shortfall is owed; its rows say so in the verdict
        unserved = any(str(v).startswith("not served: needs vLLM") for v in row.get("verdicts") or [])
        if unserved and fits:
            problems.append(f"{tag}: fits although its verdict says the release does not serve the model")
        if fits != (row.get("shortfall_bytes") in (0, None)) and not unserved:
            problems.append(f"{tag}: fits={fits} but shortfall_bytes={row.get('shortfall_bytes')}")
        if not fits:
            continue
        if heads and heads % tp:
            problems.append(f"{tag}: fits with TP {tp} not dividing {heads} attention heads")
        if row.get("engine") == "vllm":
            b = row.get("vllm_breakdown") or {}
            mml = b.get("max_model_len")
            if mml is not None and context is not None and context > mml:
                problems.append(f"{tag}: fits with context {context} > max_model_len {mml}")
            if (row.get("max_concurrency") or 0) < (batch or 1):
                problems.append(f"{tag}: fits with max_concurrency {row.get('max_concurrency')} < batch {batch}")
            if b.get("weights_bytes", 0) > b.get("total_memory", 0):
                problems.append(f"{tag}: fits with weights per GPU {b.get('weights_bytes')} > {b.get('total_memory')}")
            budget = b.get("available_kv_bytes") or 0
            if budget < 0:
                problems.append(f"{tag}: fits with a negative KV budget {budget}")
            if (b.get("num_gpu_blocks") or 0) * (b.get("page_bytes_all_layers") or 0) > budget:
                problems.append(f"{tag}: KV blocks x page bytes > available KV bytes {budget}")
            if (b.get("requested_memory") or 0) > (b.get("total_memory") or 0):
                problems.append(f"{tag}: requested memory over the GPU's total")
            # the logged KV tokens at the physical bytes per token (a block's bytes / its tokens) fit the budget.
            # (The KV B/token column is per token of one max_model_len request, block-rounded: 16x the physical
            # figure at --context 1; README "Columns".) Full attention only: vLLM logs a sliding-window model's tokens as
            # requests x max_model_len, more than its blocks hold, and hybrid layouts pad groups.
            tokens, block = row.get("kv_capacity_tokens") or 0, b.get("block_size") or 1
            physical = (b.get("page_bytes_all_layers") or 0) / block
            layout = b.get("layout") or {}
            full_only = layout.get("layout") == "uniform" and all(r.get("kind") == "full" and not r.get("window")
                                                                   for r in layout.get("rules", []))
            if tokens * physical > budget * 1.0001 and full_only:
                problems.append(f"{tag}: KV tokens {tokens} x {physical:.0f} B/token > KV budget {budget}")
        elif row.get("engine") == "hf":
            mem = row.get("hf_memory_bytes")
            if mem is not None and total is not None and mem > total * tp * pp:
                problems.append(f"{tag}: fits with HF memory {mem} > GPU memory {total}")
            if (row.get("weights_bytes") or 0) > (total or 0) * tp * pp:
                problems.append(f"{tag}: fits with weights {row.get('weights_bytes')} > GPU memory {total}")
    mml = settings.get("max_model_len")
    if isinstance(mml, int) and isinstance(context, int) and context > mml and any(
            r.get("fits") and r.get("engine") == "vllm" for r in doc.get("rows", [])):
        problems.append(f"vLLM fits with context {context} > settings.max_model_len {mml}")
    return problems


def run_cases(cases: list[Case], scratch: Path, progress=None) -> list[Outcome]:
    """Run every case in its own scratch subfolder (deleted after), offline: the hub is never asked."""
    import shutil

    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "KVCALC_CONFIG_DIR")}
    os.environ["HF_HUB_OFFLINE"] = "1"
    # no case may read or write the user's own calibration profile: each calibrate/calibration case sets its own
    os.environ["KVCALC_CONFIG_DIR"] = str(scratch / "no-profile")
    outcomes = []
    try:
        for i, case in enumerate(cases):
            folder = scratch / f"c{i}"
            folder.mkdir(parents=True, exist_ok=True)
            outcomes.append(run_case(case, folder))
            shutil.rmtree(folder, ignore_errors=True)
            if progress and i % 500 == 0:
                progress(i, outcomes)
    finally:
        for key, value in saved.items():  # the caller's environment as it was (pytest runs other tests after)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return outcomes


def summarize(outcomes: list[Outcome]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for o in outcomes:
        cmd = o.argv[0] if o.argv else "?"
        key = f"{o.case.kind}: {cmd}"
        row = table.setdefault(key, {"cases": 0, "exit 0": 0, "exit 1": 0, "exit 2": 0, "traceback": 0, "over 5 s": 0,
                                     "bad numbers": 0, "broken invariant": 0, "bad message": 0})
        row["cases"] += 1
        if o.error:
            row["traceback" if o.error != "hang" else "over 5 s"] += 1
            continue
        row[f"exit {o.code}"] = row.get(f"exit {o.code}", 0) + 1
        for p in o.problems:
            if p.startswith("slow"):
                row["over 5 s"] += 1
            elif p.startswith("$"):
                row["bad numbers"] += 1
            elif "exit" in p:
                row["bad message"] += 1
            else:
                row["broken invariant"] += 1
    return table


def failures(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.error or o.problems]


def describe(o: Outcome) -> str:
    argv = " ".join(repr(a) if (not a or " " in a or "\n" in a) else a for a in o.argv)
    return f"[{o.case.kind} {o.case.label}] {argv[:300]}\n    -> {o.error or ''} {o.problems[:3]}"


if __name__ == "__main__":  # python3 tests/fuzz_cases.py SEED N: run and print failures
    sys.path.insert(0, str(ROOT))
    import tempfile

    seed, n = int(sys.argv[1]), int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        results = run_cases(generate(seed, n), Path(tmp))
    for o in failures(results):
        print(describe(o))
    print(json.dumps(summarize(results), indent=1))
