"""Which int4 kernel vLLM runs (kvcalc/engines/vllm_kernels.py): the flag and the GPU decide, by release."""

from kvcalc.engines.vllm_kernels import forced_slow_kernel, no_marlin_on_gpu


def test_explicit_awq_or_gptq_forces_the_gemm_kernel_only_before_0_26():
    for release in ("0.5.3", "0.9.2", "0.20.0", "0.25.1"):
        assert "forces AWQ's own GEMM kernel" in forced_slow_kernel("awq", release)
        assert "pass gptq_marlin" in forced_slow_kernel("gptq", release)
    assert forced_slow_kernel("awq", "0.26.0") is None and forced_slow_kernel("gptq", "0.27.0") is None
    for flag in (None, "awq_marlin", "gptq_marlin", "fp8", "bitsandbytes"):  # no flag: vLLM picks Marlin itself
        assert forced_slow_kernel(flag, "0.20.0") is None


def test_marlin_needs_sm80_before_0_26_and_sm75_from_it():
    assert "no Marlin kernel below compute capability 8" in no_marlin_on_gpu("0.20.0", 7.5)  # T4
    assert no_marlin_on_gpu("0.26.0", 7.5) is None and no_marlin_on_gpu("0.20.0", 8.0) is None
    assert "does not load AWQ" in no_marlin_on_gpu("0.26.0", 7.0)  # V100: no AWQ at all
    assert no_marlin_on_gpu("0.26.0", None) is None  # a profile without a compute capability: nothing claimed
