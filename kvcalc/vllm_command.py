"""`kvcalc plan --vllm-command "vllm serve MODEL --max-model-len 32k ..."`: a pasted vLLM command line, read into
kvcalc's plan options.

The line is split as a shell would (shlex; environment assignments such as CUDA_VISIBLE_DEVICES=0 and `docker run
... vllm/vllm-openai` prefixes are skipped up to the vLLM part). Recognised: `vllm serve MODEL`, `python -m
vllm.entrypoints.openai.api_server --model MODEL` (both: entry point serve) and the flags in FLAGS, in vLLM's own
spellings (`--flag value`, `--flag=value`, `-tp 2`). Numbers follow vLLM's rule (units.parse_vllm_int: 32k = 32,000,
32K = 32,768). Flags that change no memory figure kvcalc models (--port, --host, ...) are accepted silently; others
are warned about, never fatal. Options typed on kvcalc's own command line win over the pasted ones.
"""

from __future__ import annotations

from .command_line import read_flags, split_command
from .errors import UsageError, shown
from .units import parse_vllm_int

# vLLM flag -> (kvcalc option, kind). kind: "int" (vLLM's number rule), "len" (int, or auto/-1), "float", "text",
# "flag" (a switch with no value: True), "off" (a switch that turns it off: False).
FLAGS: dict[str, tuple[str, str]] = {
    "--model": ("model", "text"),
    "--max-model-len": ("max_model_len", "len"),
    "--gpu-memory-utilization": ("util", "float"),
    "--kv-cache-dtype": ("kv", "text"),
    "--tensor-parallel-size": ("tp", "int"), "-tp": ("tp", "int"),
    "--pipeline-parallel-size": ("pp", "int"), "-pp": ("pp", "int"),
    "--quantization": ("quantization", "text"), "-q": ("quantization", "text"),
    "--dtype": ("dtype", "text"),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", "int"),
    "--block-size": ("block_size", "int"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "--max-num-seqs": ("max_num_seqs", "int"),
    "--enforce-eager": ("enforce_eager", "flag"),
    "--enable-lora": ("enable_lora", "flag"),
    "--max-loras": ("max_loras", "int"),
    "--max-lora-rank": ("max_lora_rank", "int"),
    "--speculative-config": ("speculative_config", "text"),
    "--enable-chunked-prefill": ("enable_chunked_prefill", "flag"),
    "--no-enable-chunked-prefill": ("enable_chunked_prefill", "off"),
    "--limit-mm-per-prompt": ("limit_mm_per_prompt", "text"),
    "--language-model-only": ("language_model_only", "flag"),
    "--skip-mm-profiling": ("skip_mm_profiling", "flag"),
}
# Flags kvcalc knows and that move no memory figure it models (value-taking unless in SWITCHES).
IGNORED = {"--port", "--host", "--served-model-name", "--api-key", "--tokenizer", "--revision", "--download-dir",
           "--chat-template", "--uvicorn-log-level", "--seed", "--tool-call-parser", "--reasoning-parser",
           "--load-format", "--config", "--generation-config", "--tokenizer-mode", "--trust-remote-code",
           "--disable-log-requests", "--disable-log-stats", "--enable-auto-tool-choice", "--enable-prefix-caching",
           "--no-enable-prefix-caching", "--disable-custom-all-reduce", "--swap-space",
           "--distributed-executor-backend"}
SWITCHES = {"--trust-remote-code", "--disable-log-requests", "--disable-log-stats", "--enable-auto-tool-choice",
            "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill",
            "--no-enable-chunked-prefill", "--disable-custom-all-reduce", "--enforce-eager", "--enable-lora",
            "--language-model-only", "--skip-mm-profiling"}


def _vllm_part(words: list[str]) -> tuple[list[str], str | None]:
    """The arguments after `vllm serve` (the model first, if positional) or after the OpenAI server module."""
    for i, w in enumerate(words):
        if w.endswith("vllm") and i + 1 < len(words) and words[i + 1] == "serve":
            return words[i + 2:], "serve"
        if w in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
            return words[i + 1:], "serve"
    raise UsageError("--vllm-command: no `vllm serve` or `python -m vllm.entrypoints.openai.api_server` in "
                     f"{shown(' '.join(words)[:120])}")


def parse_command(text: str) -> tuple[dict, list[str]]:
    """The kvcalc option values a vLLM command line sets, and warnings for the flags kvcalc ignored."""
    args, entrypoint = _vllm_part(split_command(text, "--vllm-command"))
    values: dict = {"entrypoint": entrypoint}
    warnings: list[str] = []
    start = 0
    if args and not args[0].startswith("-"):
        values["model"] = args[0]
        start = 1

    def dotted(flag: str, eq: str, inline: str, i: int) -> int | None:
        if not flag.startswith("--limit-mm-per-prompt."):  # vLLM's dotted form: --limit-mm-per-prompt.image 0
            return None
        if not eq:
            if i >= len(args):
                raise UsageError(f"--vllm-command: {flag} needs a value")
            inline, i = args[i], i + 1
        values.setdefault("mm_limits_dotted", {})[flag.split(".", 1)[1]] = inline
        return i

    def store(name: str, kind: str, flag: str, value: str | None) -> None:
        if kind in ("flag", "off"):
            values[name] = kind == "flag"
        elif kind == "float":
            try:
                values[name] = float(value)
            except ValueError:
                raise UsageError(f"--vllm-command: {flag} {shown(value)} is not a number") from None
        elif kind == "len" and str(value).strip().lower() in ("auto", "-1"):
            values[name] = -1
        elif kind in ("int", "len"):
            values[name] = parse_vllm_int(value, what=f"--vllm-command {flag}")
            if kind == "len" and str(value).strip()[-1:] in ("k", "m"):  # vLLM's decimal k, unlike kvcalc's --context
                upper = str(value).strip()[:-1] + str(value).strip()[-1].upper()
                warnings.append(f"--vllm-command: {flag} {value} is {values[name]:,} tokens as vLLM reads it "
                                f"({upper} = {parse_vllm_int(upper):,})")
        else:
            values[name] = value

    # a value is any next word but a flag; -1 (auto) is a value, -tp / -pp / -q are flags
    read_flags(args, start, "--vllm-command", FLAGS, IGNORED, SWITCHES, ("flag", "off"),
               lambda w: not (w.startswith("-") and w != "-1"), store, warnings, special=dotted)
    if "model" not in values:
        raise UsageError("--vllm-command names no model (vllm serve MODEL, or --model MODEL)")
    mm = values.pop("mm_limits_dotted", None)
    if mm:
        values["limit_mm_per_prompt"] = ",".join(f"{k}={v}" for k, v in mm.items())
    return values, warnings


def parse_mm_limits(text: str) -> dict[str, int]:
    """vLLM's --limit-mm-per-prompt: a JSON object ('{"image": 0, "video": 0}', 0.8 on) or the older
    'image=0,video=0'; values are item counts per prompt (newer releases also take a dict per modality: its
    "count")."""
    import json

    raw: object
    text = str(text).strip()
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--limit-mm-per-prompt is not valid JSON: {shown(str(exc), 80, quote=False)}") from None
    else:
        raw = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = part.partition("=")
            if not eq:
                raise UsageError(f"--limit-mm-per-prompt: {shown(part)} is not MODALITY=COUNT")
            raw[key.strip()] = value.strip()
    if not isinstance(raw, dict) or not raw:
        raise UsageError("--limit-mm-per-prompt must name at least one modality, e.g. '{\"image\": 0}'")
    out: dict[str, int] = {}
    for key, value in raw.items():
        if not str(key).strip() or not str(key).replace("_", "").isalnum():
            raise UsageError(f"--limit-mm-per-prompt: {shown(key)} is not a modality name (image, video, audio)")
        if isinstance(value, dict):
            value = value.get("count", 1)
        # a whole number: JSON's Infinity/NaN, 1.5, true or 1e30 are not counts (int(inf) would raise OverflowError)
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"--limit-mm-per-prompt: {shown(key)} needs a whole count (got {shown(value)})")
        count = value
        if count < 0 or count > 1_000_000:
            raise UsageError(f"--limit-mm-per-prompt: {shown(key)} {count} is not a count from 0 to 1,000,000")
        out[str(key)[:40]] = count
    return out


def apply_command(text: str, given: dict, explicit: set[str]) -> tuple[dict, list[str]]:
    """`given` (the plan options) with the command's values filled in where the user typed no kvcalc option."""
    from . import limits

    values, warnings = parse_command(text)
    out = dict(given)
    for name, value in values.items():
        if name in explicit:
            if out.get(name) != value:
                warnings.append(f"--vllm-command sets {name} {shown(value)}; the kvcalc option given "
                                f"({shown(out.get(name))}) wins")
            continue
        if name in limits.BOUNDS and value != -1:
            limits.check(name, value)
        if name == "util" and not 0 < value <= 1:  # NaN fails this too
            raise UsageError(f"--vllm-command: --gpu-memory-utilization must be in (0, 1], got {shown(value)}")
        out[name] = value
    return out, warnings
