"""`kvcalc plan --sglang-command "python -m sglang.launch_server --model-path MODEL ..."`: a pasted SGLang command
line, read into kvcalc's plan options (the SGLang twin of vllm_command.py; the flag loop both walk is command_line.py).

Recognised: `python -m sglang.launch_server`, `sglang serve` (newer releases) and the flags in FLAGS, in SGLang's own
spellings (server_args.py add_cli_args: `--flag value` or `--flag=value`; numbers are plain integers, as argparse
reads them). Flags that change no memory figure kvcalc models are accepted silently; others are warned about.
Options typed on kvcalc's own command line win over the pasted ones.
"""

from __future__ import annotations

from .command_line import read_flags, split_command
from .errors import UsageError, shown

# SGLang flag -> (kvcalc option, kind): "int", "float", "text", "kv" (SGLang's kv_cache_dtype names), "flag"
FLAGS: dict[str, tuple[str, str]] = {
    "--model-path": ("model", "text"), "--model": ("model", "text"),
    "--tp-size": ("tp", "int"), "--tp": ("tp", "int"), "--tensor-parallel-size": ("tp", "int"),
    "--pp-size": ("pp", "int"), "--pipeline-parallel-size": ("pp", "int"),
    "--dp-size": ("dp_size", "int"), "--dp": ("dp_size", "int"), "--data-parallel-size": ("dp_size", "int"),
    "--enable-dp-attention": ("enable_dp_attention", "flag"),
    "--mem-fraction-static": ("mem_fraction_static", "float"),
    "--context-length": ("max_model_len", "int"),
    "--kv-cache-dtype": ("kv", "kv"),
    "--chunked-prefill-size": ("max_num_batched_tokens", "int"),
    "--max-running-requests": ("max_num_seqs", "int"),
    "--page-size": ("block_size", "int"),
    "--quantization": ("quantization", "text"),
    "--dtype": ("dtype", "text"),
    "--disable-cuda-graph": ("enforce_eager", "flag"),
    "--cuda-graph-max-bs": ("cuda_graph_max_bs", "int"),
    "--max-prefill-tokens": ("max_prefill_tokens", "int"),
    "--stream-interval": ("stream_interval", "int"),
    "--disable-radix-cache": ("disable_radix_cache", "flag"),
    "--disable-overlap-schedule": ("disable_overlap_schedule", "flag"),
    "--enable-torch-compile": ("enable_torch_compile", "flag"),
    "--torch-compile-max-bs": ("torch_compile_max_bs", "int"),
    "--speculative-algorithm": ("speculative_algorithm", "text"),
    "--max-total-tokens": ("max_total_tokens", "int"),
    "--speculative-draft-model-path": ("speculative_draft_model_path", "text"),
    "--speculative-draft-model": ("speculative_draft_model_path", "text"),
    "--speculative-num-steps": ("speculative_num_steps", "int"),
    "--speculative-eagle-topk": ("speculative_eagle_topk", "int"),
    "--speculative-num-draft-tokens": ("speculative_num_draft_tokens", "int"),
    "--moe-a2a-backend": ("moe_a2a_backend", "text"),
    "--enable-lora": ("enable_lora", "flag"),
}
KV_NAMES = {"auto": "auto", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8-e5m2", "bf16": "auto", "bfloat16": "auto"}
IGNORED = {"--host", "--port", "--served-model-name", "--api-key", "--tokenizer-path", "--revision",
           "--download-dir", "--chat-template", "--log-level", "--random-seed", "--tool-call-parser",
           "--reasoning-parser", "--load-format", "--trust-remote-code", "--enable-metrics", "--attention-backend",
           "--sampling-backend", "--schedule-policy", "--watchdog-timeout", "--decode-log-interval",
           "--enable-cache-report", "--enable-mixed-chunk", "--nnodes", "--node-rank",
           "--dist-init-addr", "--moe-runner-backend", "--ep-size"}
SWITCHES = {"--trust-remote-code", "--enable-metrics", "--disable-radix-cache", "--enable-torch-compile",
            "--enable-cache-report", "--disable-overlap-schedule", "--enable-mixed-chunk", "--enable-dp-attention",
            "--disable-cuda-graph", "--enable-lora"}


def _sglang_part(words: list[str]) -> list[str]:
    for i, w in enumerate(words):
        if w in ("sglang.launch_server", "sglang.launch_server.py") or w.endswith("/launch_server.py"):
            return words[i + 1:]
        if w.endswith("sglang") and i + 1 < len(words) and words[i + 1] == "serve":
            return words[i + 2:]
    raise UsageError("--sglang-command: no `python -m sglang.launch_server` or `sglang serve` in "
                     f"{shown(' '.join(words)[:120])}")


def parse_sglang_command(text: str) -> tuple[dict, list[str]]:
    """The kvcalc option values an SGLang command line sets, and warnings for the flags kvcalc ignored."""
    args = _sglang_part(split_command(text, "--sglang-command"))
    values: dict = {"engine": "sglang"}
    warnings: list[str] = []

    def store(name: str, kind: str, flag: str, value: str | None) -> None:
        try:
            if kind == "flag":
                values[name] = True
            elif kind == "int":
                values[name] = int(str(value).strip())
            elif kind == "float":
                values[name] = float(value)
            elif kind == "kv":
                values[name] = KV_NAMES.get(str(value).strip().lower())
            else:
                values[name] = value
        except ValueError:
            raise UsageError(f"--sglang-command: {flag} {shown(value)} is not a number") from None
        if kind == "kv" and values[name] is None:  # outside the try: UsageError is a ValueError
            raise UsageError(f"--sglang-command: --kv-cache-dtype {shown(value)}: kvcalc models "
                             f"{', '.join(KV_NAMES)}")

    def special(flag: str, eq: str, inline: str, i: int) -> int | None:
        """--lora-paths takes any number of NAME=PATH words (server_args.py nargs="*"): LoRA on."""
        if flag != "--lora-paths":
            return None
        while not eq and i < len(args) and not args[i].startswith("--"):
            i += 1
        values["enable_lora"] = True
        return i

    # argparse reads a next word that is not a --flag as the value (-1 turns chunked prefill off)
    read_flags(args, 0, "--sglang-command", FLAGS, IGNORED, SWITCHES, ("flag",), lambda w: not w.startswith("--"),
               store, warnings, special)
    if "model" not in values:
        raise UsageError("--sglang-command names no model (--model-path MODEL)")
    if values.get("max_num_batched_tokens", 1) <= 0:  # server_args.py: -1 turns chunked prefill off
        del values["max_num_batched_tokens"]
        warnings.append("--sglang-command: --chunked-prefill-size <= 0 (chunked prefill off) is planned with "
                        "SGLang's default chunk")
    return values, warnings


def apply_sglang_command(text: str, given: dict, explicit: set[str]) -> tuple[dict, list[str]]:
    """`given` (the plan options) with the command's values where the user typed no kvcalc option."""
    from . import limits

    values, warnings = parse_sglang_command(text)
    out = dict(given)
    for name, value in values.items():
        if name in explicit:
            if out.get(name) != value and name != "engine":
                warnings.append(f"--sglang-command sets {name} {shown(value)}; the kvcalc option given "
                                f"({shown(out.get(name))}) wins")
            continue
        if name in limits.BOUNDS:
            limits.check(name, value)
        if name == "mem_fraction_static" and not 0 < value < 1:
            raise UsageError(f"--sglang-command: --mem-fraction-static must be in (0, 1), got {shown(value)}")
        if name in ("tp", "dp_size", "pp", "max_num_seqs", "block_size", "max_model_len", "cuda_graph_max_bs",
                    "max_prefill_tokens", "stream_interval", "torch_compile_max_bs", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens", "max_total_tokens") and value < 1:
            raise UsageError(f"--sglang-command: {name.replace('_', '-')} must be at least 1, got {value}")
        out[name] = value
    return out, warnings
