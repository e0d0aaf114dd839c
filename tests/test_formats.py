"""Exact bytes of each format, hand-computed from the libraries' storage layouts."""

from kvcalc.formats import kv_format, weight_format


def test_nf4_is_0_5625_bytes_per_param():
    n_in, n_out = 4096, 4096
    # 4096*4096/2 packed bytes + 4096*4096/64 fp32 absmax values
    assert weight_format("nf4").linear_bytes(n_in, n_out) == 8_388_608 + 262_144 * 4
    assert weight_format("nf4").linear_bytes(n_in, n_out) / (n_in * n_out) == 0.5625


def test_nf4_double_quant_is_about_0_516_bytes_per_param():
    per = weight_format("nf4-dq").linear_bytes(8192, 8192) / (8192 * 8192)
    assert 0.515 < per < 0.517


def test_awq_group_128_layout():
    # qweight 4096*4096/2; qzeros (32 groups * 4096 / 8) int32 = 32*4096/2 bytes; scales 32*4096 fp16
    assert weight_format("awq").linear_bytes(4096, 4096) == 8_388_608 + 65_536 + 262_144


def test_gptq_adds_g_idx():
    assert weight_format("gptq").linear_bytes(4096, 4096) == weight_format("awq").linear_bytes(4096, 4096) + 4096 * 4


def test_fp8_and_int8():
    assert weight_format("fp8").linear_bytes(1024, 512) == 1024 * 512 + 4
    assert weight_format("int8").linear_bytes(1024, 512) == 1024 * 512 + 512 * 4


def test_compressed_tensors_w4a16_and_w8a8():
    # W4A16: weight_packed int32 [4096, 4096/8] = 4096*512*4; weight_scale [4096, 32] bf16; weight_shape int64 [2]
    assert weight_format("w4a16").linear_bytes(4096, 4096) == 8_388_608 + 4096 * 32 * 2 + 16
    # fp32 scales only if the compute dtype is fp32
    assert weight_format("w4a16").linear_bytes(4096, 4096, 4) == 8_388_608 + 4096 * 32 * 4 + 16
    # W8A8 int8, channel strategy: int8 [out, in] + fp32 scale per output row; dynamic activations store no scale
    assert weight_format("w8a8").linear_bytes(4096, 1024) == 4096 * 1024 + 1024 * 4
    # the same bytes as the compressed-tensors reader computes from a checkpoint's quantization_config
    from kvcalc.quant_config import Layout

    assert Layout("wna16", 4, group_size=128).linear_bytes(4096, 4096) == weight_format("w4a16").linear_bytes(4096, 4096)
    assert Layout("int8", 8, strategy="channel", scale_bytes=4).linear_bytes(4096, 1024) == \
        weight_format("w8a8").linear_bytes(4096, 1024)


def test_hqq_4bit_kv_is_4_5_bits_with_bf16_scales():
    fmt = kv_format("hqq-4")
    assert fmt.bits_per_element(2) == 4.5
    assert fmt.quantized_bytes(64, 2) == 32 + 4  # 64 elements: 32 packed bytes, one bf16 scale + one bf16 zero
    assert kv_format("hqq-2").bits_per_element(2) == 2.5
    # int8 KV in transformers is hqq's 8-bit backend: one byte + a bf16 scale and zero per 64 elements
    assert kv_format("int8").name == "hqq-8" and kv_format("int8").bits_per_element(2) == 8.5
    assert kv_format("int8").quantized_bytes(128, 2) == 128 + 2 * 4
    assert fmt.residual_length == 128


def test_aliases_and_unknown():
    assert kv_format("bf16").name == "auto"
    assert kv_format("fp8_e4m3").name == "fp8"
    assert weight_format("bnb-nf4").name == "nf4"
    import pytest
    from kvcalc.errors import UsageError
    with pytest.raises(UsageError, match="known"):
        kv_format("fp4")


def test_every_weight_format_is_a_layout_preset():
    """One byte formula per Linear (kvcalc/layouts.py): a registered format's bytes are its Layout's, and a
    checkpoint's quantization_config read into a Layout gives the same bytes as the format it matches."""
    from kvcalc.formats import WEIGHT_FORMATS
    from kvcalc.layouts import Layout
    from kvcalc.quant_config import parse_scheme

    for f in WEIGHT_FORMATS.values():
        assert isinstance(f.layout, Layout), f.name
        assert f.linear_bytes(4096, 14336) == f.layout.linear_bytes(4096, 14336)
    awq = parse_scheme({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}).rules[0].layout
    gptq = parse_scheme({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}).rules[0].layout
    for fin, fout in ((4096, 4096), (4096, 14336), (14336, 4096), (5120, 1024)):
        assert awq.linear_bytes(fin, fout) == WEIGHT_FORMATS["awq"].linear_bytes(fin, fout)
        assert gptq.linear_bytes(fin, fout) == WEIGHT_FORMATS["gptq"].linear_bytes(fin, fout)
    # hand-computed: AWQ group 128 on 4096 x 4096: n/2 + 32 groups x 4096 / 2 (zeros) + 32 x 4096 x 2 (fp16 scales)
    assert WEIGHT_FORMATS["awq"].linear_bytes(4096, 4096) == 4096 * 4096 // 2 + 32 * 4096 // 2 + 32 * 4096 * 2
    # scales in the compute dtype follow --dtype: W4A16 at fp32 stores 4-byte scales
    w = WEIGHT_FORMATS["w4a16"]
    assert w.linear_bytes(4096, 4096, 4) - w.linear_bytes(4096, 4096, 2) == 4096 * 32 * 2


def test_a_new_weight_format_is_one_entry():
    """A format defined by its layout alone plans end to end: weights bytes follow the Layout's formula."""
    from dataclasses import replace

    from kvcalc.catalog import load_model
    from kvcalc.engines.weights import text_weight_bytes
    from kvcalc.formats import WEIGHT_FORMATS
    from kvcalc.layouts import Layout

    int3 = replace(WEIGHT_FORMATS["gptq"], name="gptq3", label="GPTQ int3", bits=3,
                   layout=Layout("gptq", 3, group_size=128, zero_points=True))
    spec = load_model("llama-3.1-8b")
    got = text_weight_bytes(spec, int3)
    linear = sum(int3.layout.linear_bytes(g.in_features, g.out_features) * g.count for g in spec.linears)
    assert got == linear + (spec.params.total - spec.linear_params) * 2
    assert text_weight_bytes(spec, int3) < text_weight_bytes(spec, WEIGHT_FORMATS["gptq"])
