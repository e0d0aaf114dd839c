#!/usr/bin/env python3
"""Write the two per-GPU case queues (cases_gpu0.json, cases_gpu1.json) the device calls run. Each call runs both
queues (one per GPU) until its time budget; cases already observed in an earlier call on the same warm host are
skipped, cases that need the MoE kernels wait for the call that sends them (see README in docs/validation/data/v2).

    python3 scripts/gpu_v2/make_cases.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Serve-like settings for speed (issue 11) and capacity-as-people-run-it (issue 10): CUDA graphs on,
# max_num_batched_tokens 2048, 256 sequences, prefix caching off (random prompts never hit it anyway).
SERVE = {"gpu_memory_utilization": 0.9, "max_model_len": 34816, "max_num_batched_tokens": 2048,
         "max_num_seqs": 256, "enable_prefix_caching": False}
GRID = {"batches": [1, 8, 32, 128, 256], "contexts": [1024, 4096, 16384, 32768], "decode_tokens": 64,
        "max_prompt_tokens": 600000, "kv_fill_limit": 0.9}
TTFT = {"inputs": [512, 2048, 8192, 16384], "repeats": 3}
CAP = {"gpu_memory_utilization": 0.9, "max_model_len": 8192, "enforce_eager": True}


def speed_case(cid, config, kv="auto", grid=None, ttft=None, extra=None, expected=300, needs=None):
    llm = dict(SERVE, kv_cache_dtype=kv)
    llm.update(extra or {})
    c = {"id": cid, "config": f"{config}.json", "llm": llm, "speed": dict(grid or GRID), "expected_s": expected}
    if ttft is not False:
        c["ttft"] = dict(ttft or TTFT)
    if needs:
        c["needs"] = needs
    return c


def cap_case(cid, config, extra=None, expected=60, needs=None, share=True, check=True):
    llm = dict(CAP)
    llm.update(extra or {})
    c = {"id": cid, "config": f"{config}.json", "llm": llm, "expected_s": expected, "share_process": share}
    if check:
        c["generate_check"] = True
    if needs:
        c["needs"] = needs
    return c


def serve_eager(cid, extra, expected=45):
    """Issue 10 overheads: the 3B at serve-like settings, eager (cheap starts), one setting changed at a time."""
    llm = {"gpu_memory_utilization": 0.9, "max_model_len": 8192, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
           "enforce_eager": True}
    llm.update(extra)
    return {"id": cid, "config": "llama-3.2-3b.json", "llm": llm, "expected_s": expected, "share_process": True,
            "generate_check": True}


def build():
    small_grid = {"batches": [1, 8, 32, 128], "contexts": [1024, 4096, 16384], "decode_tokens": 64,
                  "max_prompt_tokens": 300000, "kv_fill_limit": 0.9}
    moe_grid = {"batches": [1, 8, 32, 64], "contexts": [1024, 4096], "decode_tokens": 64,
                "max_prompt_tokens": 300000, "kv_fill_limit": 0.9}
    gpu0 = [
        speed_case("s-3b-auto", "llama-3.2-3b", "auto", expected=240),
        speed_case("s-3b-fp8", "llama-3.2-3b", "fp8", expected=240),
        serve_eager("c-3b-serve-eager", {}),
        serve_eager("c-3b-mnbt512", {"max_num_batched_tokens": 512}),
        serve_eager("c-3b-mnbt8192", {"max_num_batched_tokens": 8192}),
        serve_eager("c-3b-seqs16", {"max_num_seqs": 16}),
        serve_eager("c-3b-seqs1024", {"max_num_seqs": 1024}),
        serve_eager("c-3b-lora4-r16", {"enable_lora": True, "max_loras": 4, "max_lora_rank": 16}),
        serve_eager("c-3b-ngram4", {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_max": 4, "prompt_lookup_min": 2}}),
        {"id": "s-8b-eager", "config": "llama-3.1-8b.json", "llm": dict(SERVE, enforce_eager=True),
         "speed": {"batches": [1, 32], "contexts": [1024], "decode_tokens": 64, "max_prompt_tokens": 100000},
         "ttft": {"inputs": [512, 2048], "repeats": 3}, "expected_s": 90},
        speed_case("s-8b-fp8w", "llama-3.1-8b", "auto", grid=small_grid, extra={"quantization": "fp8"},
                   expected=200),
        speed_case("s-8b-awq", "llama-3.1-8b-awq", "auto", grid=small_grid, extra={"dtype": "float16"},
                   expected=200),
        speed_case("s-qwen3-30b-a3b", "qwen3-30b-a3b", "auto", grid=moe_grid, expected=200, needs="moe",
                   extra={"max_model_len": 32768}),
        speed_case("s-mixtral-8x7b", "mixtral-8x7b", "auto", grid=moe_grid, expected=220, needs="moe",
                   extra={"max_model_len": 32768}),  # its max_position_embeddings
        cap_case("l-deepseek-v3-l5", "deepseek-v3-l5", expected=70, needs="moe"),
        cap_case("l-qwen3.5-35b-a3b", "qwen3.5-35b-a3b", extra={"limit_mm_per_prompt": {"image": 0, "video": 0}},
                 expected=70, needs="moe"),
        cap_case("l-llama-4-scout-l16-64k", "llama-4-scout-l16", extra={"max_model_len": 65536}, expected=70,
                 needs="moe"),
        cap_case("l-qwen3-30b-a3b", "qwen3-30b-a3b", expected=60, needs="moe"),
    ]
    gpu1 = [
        speed_case("s-8b-auto", "llama-3.1-8b", "auto", expected=300),
        speed_case("s-8b-fp8", "llama-3.1-8b", "fp8", expected=300),
        cap_case("l-lfm2-1.2b", "lfm2-1.2b", expected=50),
        cap_case("l-gemma-3n-e4b-text", "gemma-3n-e4b-text", expected=50),
        cap_case("l-nemotron-h-56b-l60", "nemotron-h-56b-l60", expected=70),
        cap_case("l-qwen3-next-80b-a3b-l24", "qwen3-next-80b-a3b-l24", expected=70, needs="moe"),
        cap_case("l-nemotron-3-nano-30b-a3b", "nemotron-3-nano-30b-a3b", expected=60, needs="moe"),
        cap_case("l-granite-4.0-h-tiny", "granite-4.0-h-tiny", expected=50, needs="moe"),
        cap_case("l-llama-4-scout-l16", "llama-4-scout-l16", expected=70, needs="moe"),
        cap_case("l-glm-4.5-air-l16", "glm-4.5-air-l16", expected=70, needs="moe"),
        cap_case("l-minimax-m2.5-l12", "minimax-m2.5-l12", expected=70, needs="moe"),
        cap_case("l-gpt-oss-20b-mxfp4", "gpt-oss-20b", expected=50, needs="moe"),
        cap_case("l-gpt-oss-20b-bf16", "gpt-oss-20b-bf16", expected=50, needs="moe"),
    ]
    return gpu0, gpu1


def build_c4():
    """Call 4 (a fresh host, dense kernels only): larger KV volumes per decode step (about 0.6-1.1M tokens of
    context in flight) at the same (batch, context) for bf16 and fp8 KV, and CUDA-graph capacity starts at other
    max_num_seqs (graph capture sizes follow max_num_seqs)."""
    def big(points, cap):
        bs = sorted({b for b, _ in points})
        cs = sorted({c for _, c in points})
        return {"batches": bs, "contexts": cs, "decode_tokens": 64, "max_prompt_tokens": cap, "kv_fill_limit": 0.95,
                "only_points": [list(p) for p in points]}
    p3 = [(128, 6144), (24, 32768)]
    p8 = [(96, 6144), (20, 32768)]
    fp8_more = [(256, 4096), (32, 32768)]
    gpu0 = [
        speed_case("s4-3b-auto-big", "llama-3.2-3b", "auto", grid=big(p3, 1100000), ttft=False, expected=130),
        speed_case("s4-3b-fp8-big", "llama-3.2-3b", "fp8", grid=big(p3 + fp8_more, 1100000), ttft=False,
                   expected=140),
        {"id": "c4-3b-graphs-seqs16", "config": "llama-3.2-3b.json", "expected_s": 70,
         "llm": dict(SERVE, max_model_len=8192, max_num_seqs=16), "generate_check": True},
        {"id": "c4-3b-graphs-seqs1024", "config": "llama-3.2-3b.json", "expected_s": 70,
         "llm": dict(SERVE, max_model_len=8192, max_num_seqs=1024), "generate_check": True},
    ]
    gpu1 = [
        speed_case("s4-8b-auto-big", "llama-3.1-8b", "auto", grid=big(p8, 1100000), ttft=False, expected=140),
        speed_case("s4-8b-fp8-big", "llama-3.1-8b", "fp8", grid=big(p8 + fp8_more, 1100000), ttft=False,
                   expected=160),
    ]
    return gpu0, gpu1


def main() -> None:
    gpu0, gpu1 = build()
    (HERE / "cases_gpu0.json").write_text(json.dumps(gpu0, indent=1) + "\n")
    (HERE / "cases_gpu1.json").write_text(json.dumps(gpu1, indent=1) + "\n")
    g0, g1 = build_c4()
    (HERE / "cases_gpu0_c4.json").write_text(json.dumps(g0, indent=1) + "\n")
    (HERE / "cases_gpu1_c4.json").write_text(json.dumps(g1, indent=1) + "\n")
    print(len(gpu0), len(gpu1), len(g0), len(g1))


if __name__ == "__main__":
    main()
