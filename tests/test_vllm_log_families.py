"""The parser on each vLLM version family's own wording, read from the real public excerpts
(tests/fixtures/vllm_logs/public/, sources in index.json). Expected numbers are the figures printed on those lines."""

from pathlib import Path

from kvcalc.units import GiB
from kvcalc.validate.vllm_log import parse_vllm_log

PUBLIC = Path(__file__).parent / "fixtures" / "vllm_logs" / "public"


def _parse(name: str) -> dict:
    return parse_vllm_log((PUBLIC / name).read_text(encoding="utf-8"))


def _gib(x: float) -> int:
    return int(round(x * GiB))


def test_v0_06_one_line_profiling_and_blocks_without_hash():
    """0.6.3-0.6.4: 'Memory profiling results: total_gpu_memory=23.58GiB ... kv_cache_size=3.81GiB
    gpu_memory_utilization=0.90' and a blocks line whose '# ' the post lost (vllm#10517)."""
    p = _parse("vllm10517-rtx3090-llama31-8b-20k.log")
    v = p["values"]
    assert v["total_memory_bytes"] == _gib(23.58)
    assert v["non_torch_bytes"] == _gib(0.35)
    assert v["available_kv_bytes"] == _gib(3.81)
    assert v["num_gpu_blocks"] == 1952
    assert v["weights_bytes"] == _gib(14.9888)  # 'Loading model weights took 14.9888 GB' (GiB in fact)
    assert p["settings"]["gpu_memory_utilization"] == 0.9


def test_v0_064_comma_form_with_duration():
    """0.6.4 adds 'duration=..., ' and commas, and ends with 'gpu_memory_utilization=0.90.' (vllm#10909, 2 ranks)."""
    p = _parse("vllm10909-80gb-bamba-9b-tp2.log")
    v = p["values"]
    assert v["available_kv_bytes"] == _gib(34.96)  # the first rank's line
    assert v["non_torch_bytes"] == _gib(1.96) and v["total_memory_bytes"] == _gib(79.15)
    assert v["num_gpu_blocks"] == 189945
    assert p["settings"]["gpu_memory_utilization"] == 0.9


def test_v0_065_multi_line_profiling_table():
    """0.6.5: 'Memory profiling results:' then one 'name    value' line each (vllm#10511, TP=1)."""
    v = _parse("vllm10511-80gb-llama3-8b-tp1.log")["values"]
    assert v["total_memory_bytes"] == _gib(79.22)
    assert v["requested_memory_bytes"] == _gib(71.29)
    assert v["weights_bytes"] == _gib(14.96)  # from 'model weights take' (no 'Model loading took' in 0.6.5)
    assert v["non_torch_bytes"] == _gib(1.79)
    assert v["activation_bytes"] == _gib(1.26)
    assert v["available_kv_bytes"] == _gib(53.29)


def test_v0_07_08_three_line_profiling_and_cuda_blocks():
    """0.7-0.8: '... total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB' then 'model weights
    take ...; non_torch_memory takes ...' and '# cuda blocks: 7191' (gateway-api-inference-extension#550)."""
    p = _parse("gaie550-80gb-v0-llama-7b-class.log")
    v = p["values"]
    assert v["weights_bytes"] == _gib(12.55) and v["activation_bytes"] == _gib(2.38)
    assert v["non_torch_bytes"] == _gib(0.16) and v["available_kv_bytes"] == _gib(56.18)
    assert v["num_gpu_blocks"] == 7191 and v["requested_memory_bytes"] == _gib(71.27)


def test_v0_start_up_error_names_the_kv_tokens_and_max_model_len():
    """V0's raise_if_cache_size_invalid: 'max seq len (4096) is larger than the maximum number of tokens that can be
    stored in KV cache (3584)' (vllm#16199)."""
    p = _parse("vllm16199-24gb-gemma3-27b-awq-v0-4k.log")
    assert p["values"]["kv_tokens_in_error"] == 3584
    assert p["settings"]["max_model_len"] == 4096
    assert p["values"]["weights_bytes"] == _gib(17.611)


def test_terminal_wrapped_lines_are_joined():
    """A ~140-column capture split 'Model loading took 7.1217 GiB' / 'and 198.9 seconds' (a space lost at the wrap),
    'Available KV cache me' / 'mory: 11.03 GiB', 'finished in 11' / ' secs, took 1.00 GiB', 'num_gpu_blocks is:' /
    ' 25809', and the non-default args dict mid-string (dennislee22/vLLM-benchmarking, 2x A100 40GB)."""
    p = _parse("dennislee-a100-40gb-x2-qwen2-7b-tp2-u050.log")
    v = p["values"]
    assert v["weights_bytes"] == _gib(7.1217)
    assert v["load_seconds"] == 198.942282
    assert v["available_kv_bytes"] == _gib(11.03)
    assert v["graph_capture_bytes"] == _gib(1.00)
    assert v["num_gpu_blocks"] == 25809
    s = p["settings"]
    assert s["model"] == "Qwen2-7B-Instruct"  # 'Qwen' / '2-7B-Instruct' joined without a space
    assert s["max_model_len"] == 16384 and s["tensor_parallel_size"] == 2 and s["gpu_memory_utilization"] == 0.5
    assert p["version"] == "0.10.1.1"


def test_a_traceback_after_a_long_line_is_not_joined():
    text = ("(VllmWorkerProcess pid=1786) INFO 02-11 07:40:45 model_runner.py:1115] Loading model weights took "
            "13.9476 GB and some more text to make this line long enough\n"
            "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be "
            "stored in KV cache (81536).\n")
    p = parse_vllm_log(text)
    assert p["values"]["weights_bytes"] == _gib(13.9476)
    assert p["values"]["kv_tokens_in_error"] == 81536
    assert p["errors"] == [] or all("Loading model weights" not in e for e in p["errors"])


def test_early_v1_and_0_2x_wordings_still_read():
    """V1 0.7.3 (production-stack, L40S) and 0.19 (llm-d-planner, H100): the families the parser read before."""
    early = _parse("prodstack-l40s-granite-3b-a800m-moe.log")
    assert early["version"] == "0.7.3"
    assert early["values"]["num_gpu_blocks"] == 33660  # early V1 kv_cache_utils.py still prints '# GPU blocks'
    assert early["settings"]["entrypoint"] == "serve"  # 'Setting max_num_batched_tokens to 2048 for
    assert early["values"]["max_num_batched_tokens"] == 2048  # OPENAI_API_SERVER usage context.' 
    new = _parse("llmd-h100x2-llama31-8b-tp2-8k.log")
    assert new["version"] == "0.19.0"
    assert new["values"]["kv_cache_tokens"] == 1044688
    assert new["settings"]["tensor_parallel_size"] == 2


def test_the_engine_that_ran_is_read_from_the_log():
    """V0 or V1, from process and logger prefixes and V0-only messages, on every corpus log that shows one: it
    agrees with the family index.json records (read by a person from the post). vllm#16199 ran V0 on 0.8.3, a
    release whose default is V1 (VLLM_USE_V1=0 in the post): only the log can say so."""
    import json

    index = json.loads((PUBLIC / "index.json").read_text())["logs"]
    seen = 0
    for e in index:
        engine = _parse(e["file"])["settings"].get("engine")
        if engine is not None:
            seen += 1
            assert engine == e["version_family"][:2], e["id"]
    assert seen >= 38
    assert _parse("vllm16199-24gb-gemma3-27b-awq-v0-4k.log")["settings"]["engine"] == "v0"
    assert _parse("vllm57047-48gb-sm89-awq-2k-u085.log")["settings"]["engine"] == "v1"  # V2 runner's model_runner.py
