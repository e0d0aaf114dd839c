"""vLLM 0.26's profile-run peak by mechanism (kvcalc/engines/vllm_profile.py): hand-computed tensors from the traced
H200 engines (docs/validation/data/v3), and the whole comparison held to its published errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_loader import load_script

from kvcalc.catalog import load_model
from kvcalc.engines import vllm
from kvcalc.engines.vllm_profile import cublas_workspace_bytes, moe_workspace
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def settings(**kw):
    # the release these engines were traced on (0.29+ runs MoE and hybrid models on the V2 runner as well)
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=8192, enforce_eager=True,
                entrypoint="llm", flashinfer_sampler=False, version="0.26.0")
    base.update(kw)
    return vllm.VllmSettings(**base)


def test_qwen3_30b_sampler_phase_by_hand():
    """The traced peak of t-qwen3-30b-a3b-16k (3,281.8 MiB), tensor by tensor: MoE workspace 16384 x 8 x 2048 x 2 B
    twice = 1,024 MiB; bf16 logits 1024 x 151,936 x 2 B = 296.75 MiB; three fp32 copies 3 x 593.5 MiB; Triton
    top-k/top-p buffer 132 SMs x 151,936 x 4 B = 76.5 MiB; forward output 16384 x 2048 x 2 B = 64 MiB plus two
    1024 x 2048 x 2 B rows; cuBLAS 32 MiB."""
    spec, gpu = load_model("qwen3-30b-a3b"), get_gpu("h200")
    peak = vllm.profile_peak_of(spec, settings(), 16384, 1024, gpu=gpu)
    parts = dict(peak.parts)
    assert peak.phase == "sampler"
    assert parts["MoE workspace"] == 2 * 16384 * 8 * 2048 * 2
    assert parts["logits (lm_head output)"] == 1024 * 151936 * 2
    assert parts["fp32 logits, probabilities, noise"] == 3 * 1024 * 151936 * 4
    assert parts["top-k/top-p Triton buffer"] == 132 * 151936 * 4
    assert parts["forward output"] == 16384 * 2048 * 2 + 2 * 1024 * 2048 * 2
    assert parts["cuBLAS workspace"] == 32 * MIB
    assert abs(peak.bytes - 3283.3 * MIB) < 2 * MIB  # vLLM's peak_activation_memory for that engine
    # FlashInfer (vLLM's default where installed) has no Triton buffer
    fi = vllm.profile_peak_of(spec, settings(flashinfer_sampler=None), 16384, 1024, gpu=gpu)
    assert peak.bytes - fi.bytes == 132 * 151936 * 4


def test_deepseek_mla_phase_by_hand():
    """u-deepseek-v3-l5 (9,573 MiB): the MLA prefill workspace 65,536 x 128 heads x (128 + 128) x 2 B = 4 GiB, the
    MoE workspace 2 x 16384 x 8 x 7168 x 2 B = 3.5 GiB, q 16384 x 128 x 192 x 2 B, output 16384 x 128 x 128 x 2 B."""
    spec, gpu = load_model("deepseek-v3"), get_gpu("h200")
    peak = vllm.profile_peak_of(spec, settings(weights=weight_format("bf16")), 16384, 1024, gpu=gpu,
                                max_model_len=8192, block_size=16)
    parts = dict(peak.parts)
    assert peak.phase == "MLA"
    assert parts["MLA prefill workspace"] == 65536 * 128 * 256 * 2 == 4 * 2**30
    assert parts["MoE workspace"] == 2 * 16384 * 8 * 7168 * 2
    assert parts["MLA q"] == 16384 * 128 * 192 * 2 and parts["MLA output"] == 16384 * 128 * 128 * 2
    # a short max_model_len and few sequences shrink the workspace: max(8 x 2048, 4 x 256 x 16) = 16,384 rows
    short = vllm.profile_peak_of(spec, settings(max_model_len=2048), 16384, 256, gpu=gpu, max_model_len=2048,
                                 block_size=16)
    assert dict(short.parts)["MLA prefill workspace"] == 16384 * 128 * 256 * 2


def test_compile_phase_is_the_embedding_copy():
    """u-8b-graphs-2k: 1,034 MiB = 128,256 x 4096 x 2 B + 2 x 2048 x 4096 x 2 B (Inductor's copy of the embedding)."""
    spec, gpu = load_model("llama-3.1-8b"), get_gpu("h200")
    s = settings(enforce_eager=False, max_num_batched_tokens=2048, max_num_seqs=256)
    peak = vllm.profile_peak_of(spec, s, 2048, 256, gpu=gpu)
    assert peak.phase == "compile" and peak.bytes == 128256 * 4096 * 2 + 2 * 2048 * 4096 * 2 == 1034 * MIB


def test_moe_workspace_shapes():
    spec = load_model("qwen3-30b-a3b")
    assert moe_workspace(spec, 1, 16384, 2, "bf16") == (16384 * 8 * 2048 + 16384 * 8 * 2048) * 2
    assert moe_workspace(spec, 2, 16384, 2, "bf16") == (16384 * 8 * 2048 + 16384 * 8 * 2048) * 2  # I/2 < H
    assert moe_workspace(load_model("gpt-oss-20b"), 1, 16384, 2, "mxfp4") == 0
    assert moe_workspace(load_model("llama-3.1-8b"), 1, 16384, 2, "bf16") == 0


def test_cublas_workspace_follows_torch():
    assert cublas_workspace_bytes(get_gpu("h100")) == 32 * MIB
    assert cublas_workspace_bytes(get_gpu("a100-80gb")) == 4096 * 1024 * 2 + 16 * 1024 * 8


def test_amd_instinct_takes_the_hipblaslt_workspace():
    """On AMD Instinct (gfx942: MI300X/MI325X, gfx950: MI350X/MI355X) torch prefers hipBLASLt (Context.cpp
    blasPreferredBackend), whose workspace is 76 MiB by default (CublasHandlePool.cpp parseCUDABlasLtWorkspaceSize,
    USE_ROCM); an AMD part outside that list takes hipBLAS's 32 MiB (128 MiB on gfx94x/gfx95x)."""
    from dataclasses import replace

    from kvcalc.engines.vllm_profile import blas_workspace

    for name in ("mi300x", "mi325x", "mi350x", "mi355x"):
        assert blas_workspace(get_gpu(name)) == ("hipBLASLt workspace", 76 * MIB)
    radeon = replace(get_gpu("mi300x"), gfx="gfx1100")
    assert blas_workspace(radeon) == ("hipBLAS workspace", 32 * MIB)
    assert blas_workspace(get_gpu("h100"))[0] == "cuBLAS workspace"


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3", "llama-3.1-8b", "nemotron-h-56b"])
def test_peak_never_shrinks_with_more_batched_tokens_or_sequences(model):
    try:
        spec = load_model(model)
    except Exception:  # noqa: BLE001
        pytest.skip(f"{model} not in the catalog")
    gpu = get_gpu("h200")
    prev = 0
    for m, seqs in ((2048, 256), (8192, 256), (8192, 1024), (16384, 1024)):
        b = vllm.profile_peak_of(spec, settings(), m, seqs, gpu=gpu, max_model_len=8192).bytes
        assert b >= prev
        prev = b


def _compare_module():
    return load_script("compare_profile_v3")


def test_every_traced_engine_within_one_percent_of_kv_tokens():
    module = _compare_module()
    rows = [module.compare(r) for r in module.observations()]
    assert len(rows) >= 25
    for r in rows:
        assert abs(r["tokens_error_pct"]) <= 1.0, r
        assert abs(r["activation_error_pct"]) <= 3.0, r
        if r["phase"][1]:  # the phase kvcalc names is the one the trace shows, or within 3% of it
            assert r["phase"][0] == r["phase"][1] or abs(r["activation_error_pct"]) <= 3.0, r
    readme = (ROOT / "docs" / "validation" / "README.md").read_text()
    assert module.markdown(rows) in readme, "re-run scripts/compare_profile_v3.py into docs/validation/README.md"
