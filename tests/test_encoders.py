"""Multimodal encoders: closed-form parameter counts per family (hand-computed), how the weight ledgers charge them
(never twice: a checkpoint's header sum already holds them), vLLM's text-only mode, and the encoder profile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcalc.catalog import load_model
from kvcalc.checkpoint import Checkpoint, checkpoint_format, encoder_bytes_inside
from kvcalc.encoders import (encoder_cache_bytes, encoder_forward_bytes, pixtral_params, profile_items,
                             qwen2_5_vl_vision_params, siglip_params)
from kvcalc.engines import vllm as vllm_engine
from kvcalc.engines.vllm_encoders import encoder_profile_bytes, skips_encoders
from kvcalc.engines.weights import encoder_weight_bytes, text_weight_bytes, weight_bytes
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu
from kvcalc.model import spec_from_config
from kvcalc.safetensors_header import TensorEntry
from kvcalc.vllm_command import parse_command, parse_mm_limits

from cli_helper import invoke

# Mistral Small 3.1 / 3.2 (model_type mistral3): PixtralVisionConfig of the released checkpoints and the Mistral
# Small text backbone (the same as Devstral-Small-2507, tests/fixtures/configs)
PIXTRAL_VC = {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
              "num_attention_heads": 16, "head_dim": 64, "patch_size": 14, "image_size": 1540, "num_channels": 3}
MISTRAL_TEXT = {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
                "max_position_embeddings": 131072, "sliding_window": None, "rope_theta": 1e9,
                "tie_word_embeddings": False}
# Qwen2.5-VL-7B-Instruct's vision_config (Qwen2_5_VLVisionConfig) and its Qwen2-7B-shaped text decoder
QWEN25_VC = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "patch_size": 14,
             "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584, "in_chans": 3,
             "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]}
QWEN25_TEXT = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
               "tie_word_embeddings": False, "rope_theta": 1e6}


def test_siglip_of_gemma3_27b_by_hand():
    """SigLIP So400m at 896 px (Gemma 3 4B-27B): d 1152, MLP 4304, 27 layers, 14 px patches -> 64^2 = 4,096
    positions; no pooling head. Projector: 1152 x 5376 + a 1152 norm."""
    d, inter = 1152, 4304
    embeddings = 3 * 14 * 14 * d + d + 4096 * d  # 677,376 + 1,152 + 4,718,592
    layer = 4 * (d * d + d) + (d * inter + inter) + (inter * d + d) + 4 * d  # 5,313,024 + 4,962,512 + 4,959,360 + 4,608
    tower = embeddings + 27 * layer + 2 * d
    assert layer == 15_239_504
    assert tower + d * 5376 + d == 423_060_336  # the hub's total minus the text decoder (tests/test_catalog.py)
    assert siglip_params({"hidden_size": d, "intermediate_size": inter, "num_hidden_layers": 27, "patch_size": 14,
                          "image_size": 896, "vision_use_head": False}, 5376) == 423_060_336


def test_pixtral_of_mistral_small_by_hand():
    """Pixtral tower: unbiased patch conv 3 x 14^2 x 1024 = 602,112, ln_pre 1,024, 24 layers of 4 x 1024^2
    (q/k/v/o, no bias) + 3 x 1024 x 4096 (gated MLP, no bias) + 2 x 1024 (norms) = 16,779,264. Projector: norm 1,024,
    patch merger 4,096 x 1,024, linear_1 1,024 x 5,120, linear_2 5,120 x 5,120 (multimodal_projector_bias false)."""
    tower = 602_112 + 1_024 + 24 * 16_779_264
    projector = 1_024 + 4_096 * 1_024 + 1_024 * 5_120 + 5_120 * 5_120
    assert tower == 403_305_472 and projector == 35_652_608
    cfg = {"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"], "spatial_merge_size": 2,
           "multimodal_projector_bias": False, "text_config": MISTRAL_TEXT, "vision_config": PIXTRAL_VC}
    assert pixtral_params(cfg, PIXTRAL_VC, 5120) == 438_958_080
    spec = spec_from_config(cfg, "mistral-small-3.1")
    assert spec.params.total == 23_572_403_200  # the Devstral-Small-2507 text backbone (tests/test_catalog.py)
    assert spec.vision_params == 438_958_080 and spec.uncounted == ()
    (enc,) = spec.encoders
    # 1540 / 14 = 110 -> 12,100 patches, merged 2 x 2 -> 3,025 embeddings per image
    assert (enc.patches_per_item, enc.embeds_per_item, enc.gated) == (12_100, 3_025, True)


def test_qwen2_5_vl_vision_by_hand_and_its_flat_config():
    """Qwen2.5-VL ViT: Conv3d 3 x 2 x 14^2 x 1280 (no bias) = 1,505,280; 32 blocks of qkv 1280 x 3840 + 3840,
    proj 1280^2 + 1280, gate/up 2 x (1280 x 3420 + 3420), down 3420 x 1280 + 1280, two RMSNorms 2 x 1280
    = 19,702,200; merger ln_q 1280 + 5120^2 + 5120 + 5120 x 3584 + 3584 = 44,574,464."""
    block = (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + 2 * (1280 * 3420 + 3420) + (3420 * 1280 + 1280) + 2 * 1280
    assert block == 19_702_200
    total = 1_505_280 + 32 * block + 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584)
    assert total == 676_550_144 == qwen2_5_vl_vision_params(QWEN25_VC)
    flat = {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"], **QWEN25_TEXT,
            "vision_config": QWEN25_VC}
    spec = spec_from_config(flat, "qwen2.5-vl-7b")
    qwen2 = spec_from_config({"model_type": "qwen2", **QWEN25_TEXT}, "qwen2-shaped")
    assert spec.params == qwen2.params and spec.params.total == 7_615_616_512  # = Qwen2.5-7B's decoder
    assert spec.vision_params == 676_550_144
    (enc,) = spec.encoders
    # the image processor's largest image: 12,845,056 px / 14^2 = 65,536 patches -> 16,384 embeddings
    assert (enc.patches_per_item, enc.embeds_per_item) == (65_536, 16_384)
    nested = {"model_type": "qwen2_5_vl", "text_config": {"model_type": "qwen2_5_vl_text", **QWEN25_TEXT},
              "vision_config": QWEN25_VC}
    assert spec_from_config(nested, "nested").params == spec.params


def test_moonvit_of_kimi_k25_by_hand():
    """MoonViT (vLLM 0.26.0 kimi_k25_vit.py): d 1152, MLP 4304, 27 layers, 14 px patches, a 64 x 64 position table;
    the projector merges 2 x 2 (4,608) and projects to the text width 7,168. Hub total - text decoder =
    1,026,879,376,368 - 1,026,408,232,448 = 471,143,920 (param_totals.json, huggingface.js's header test)."""
    from kvcalc.encoders import moonvit_params

    d, inter = 1152, 4304
    tower = 3 * 196 * d + d + 64 * 64 * d
    tower += 27 * (4 * d + (d * inter + inter) + (inter * d + d) + (d * 3 * d + 3 * d) + (d * d + d)) + 2 * d
    projector = 2 * d + (4608 * 4608 + 4608) + (4608 * 7168 + 7168)
    assert tower + projector == 471_143_920
    cfg = __import__("json").loads((__import__("pathlib").Path(__file__).parent
                                     / "fixtures/configs/moonshotai--Kimi-K2.5.json").read_text())
    assert moonvit_params(cfg["vision_config"], 7168) == 471_143_920
    spec = spec_from_config(cfg, "kimi-k2.5")
    assert spec.params.total == 1_026_408_232_448 and spec.uncounted == ()


def test_medgemma_checkpoint_is_gemma3_27b_with_its_tower():
    """google/medgemma-27b-it's index total_size 54,864,813,280 B (param_totals.json) / 2 bytes = the Gemma 3 27B
    decoder + SigLIP tower and projector, read from its own config.json."""
    import json
    from pathlib import Path

    cfg = json.loads((Path(__file__).parent / "fixtures/configs/google--medgemma-27b-it.json").read_text())
    spec = spec_from_config(cfg, "medgemma-27b")
    assert 2 * (spec.params.total + spec.vision_params) == 54_864_813_280


def test_unknown_encoders_are_named_not_guessed():
    cfg = {"model_type": "qwen2_5_vl", **QWEN25_TEXT, "vision_config": QWEN25_VC,
           "audio_config": {"model_type": "whisper"}}
    spec = spec_from_config(cfg, "with-audio")
    assert spec.vision_params == 676_550_144  # the vision tower still counted
    assert spec.uncounted == ("audio encoder (qwen2_5_vl.audio_config, not counted)",)


def test_the_ledger_charges_the_encoder_once():
    spec = load_model("gemma-3-27b")
    bf16, awq = weight_format("bf16"), weight_format("awq")
    assert encoder_weight_bytes(spec, bf16) == 423_060_336 * 2
    assert encoder_weight_bytes(spec, awq) == 423_060_336 * 2  # the tower stays 16-bit in quantized checkpoints
    assert weight_bytes(spec, bf16) == spec.params.total * 2 + 423_060_336 * 2
    assert weight_bytes(spec, awq, encoders=False) == text_weight_bytes(spec, awq)
    assert encoder_weight_bytes(spec, weight_format("fp32")) == 423_060_336 * 4


def test_header_sums_already_hold_the_encoder():
    """A checkpoint read from its safetensors headers: the tensors under vision_tower.* / multi_modal_projector.*
    are the encoder's share of the total; the ledger splits them out instead of adding the closed form again."""
    spec = load_model("gemma-3-4b")
    tensors = (TensorEntry("language_model.model.embed_tokens.weight", "BF16", (262208, 2560), 262208 * 2560 * 2),
               TensorEntry("vision_tower.vision_model.post_layernorm.weight", "BF16", (1152,), 2304),
               TensorEntry("multi_modal_projector.mm_input_projection_weight", "BF16", (1152, 2560), 1152 * 2560 * 2))
    ck = Checkpoint("folder /x", None, tensors, 1)
    fmt = checkpoint_format(spec, ck)
    assert fmt.total_bytes == sum(t.nbytes for t in tensors)
    assert fmt.encoder_bytes == 2304 + 1152 * 2560 * 2 == encoder_bytes_inside(spec, ck, "safetensors headers")
    assert weight_bytes(spec, fmt) == fmt.total_bytes  # not added twice
    assert weight_bytes(spec, fmt, encoders=False) == 262208 * 2560 * 2
    index = checkpoint_format(spec, Checkpoint("folder /x", None, None, 0, index_total=10**10))
    assert index.encoder_bytes == spec.vision_params * 2 and weight_bytes(spec, index) == 10**10


def _settings(spec, **kw):
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), max_model_len=4096, version="0.26.0",
                entrypoint="serve")
    base.update(kw)
    return vllm_engine.VllmSettings(**base)


def test_vllm_loads_the_encoder_per_rank_unless_every_modality_is_zero():
    spec, gpu = load_model("gemma-3-27b"), get_gpu("h100-sxm")
    full = vllm_engine.estimate(spec, gpu, _settings(spec))
    text = vllm_engine.estimate(spec, gpu, _settings(spec, language_model_only=True))
    assert full.weights_bytes - text.weights_bytes == 423_060_336 * 2
    tp2 = vllm_engine.estimate(spec, gpu, _settings(spec, tensor_parallel=2))
    tp2_text = vllm_engine.estimate(spec, gpu, _settings(spec, tensor_parallel=2, language_model_only=True))
    assert tp2.weights_bytes - tp2_text.weights_bytes == 423_060_336  # sharded over the 2 ranks
    # before the family's text-only support the limit did not stop vLLM building the tower: Gemma 3 is confirmed in
    # the 0.26.0 source only (kvcalc keeps charging it before), Llama 4 and Mistral 3 from 0.10.1 (vllm#22299)
    old = _settings(spec, language_model_only=True, version="0.24.0")
    assert not skips_encoders(spec, old) and skips_encoders(spec, _settings(spec, language_model_only=True))
    assert any("still loads this model's encoders" in n for n in vllm_engine.estimate(spec, gpu, old).notes)
    scout = load_model("llama-4-scout")
    assert skips_encoders(scout, _settings(scout, language_model_only=True, version="0.10.1"))
    assert not skips_encoders(scout, _settings(scout, language_model_only=True, version="0.10.0"))


def test_encoder_profile_by_hand():
    """Gemma 3 27B at max_num_batched_tokens 2,048: budget max(2048, 256) -> 8 images of 4,096 patches through
    SigLIP (peak per patch 2 x 1152 + max(4 x 1152, 2 x 4304) = 10,912 values), outputs 8 x 256 x 5376 held."""
    spec = load_model("gemma-3-27b")
    (enc,) = spec.encoders
    assert profile_items(enc, 2048) == 8 and profile_items(enc, 100) == 1
    # MultiModalBudget._get_max_items: at most max_num_seqs x max(1, min(999, max_model_len // 256)) items
    assert profile_items(enc, 2048, max_num_seqs=256, max_model_len=4096) == 8
    assert profile_items(enc, 8192, max_num_seqs=2, max_model_len=512) == 4  # 2 requests x 2 images each
    assert profile_items(enc, 8192, max_num_seqs=1, max_model_len=100) == 1
    assert encoder_forward_bytes(enc, 8, 2) == 8 * 4096 * 10_912 * 2 == 715_128_832
    assert encoder_cache_bytes(enc, 8, 5376, 2) == 8 * 256 * 5376 * 2 == 22_020_096
    s = _settings(spec, version="0.20.0")  # the V1 model runner profiles the encoder
    assert encoder_profile_bytes(spec, s, 2048, decoder_peak=10**9) == 22_020_096  # the cache rides on the peak
    assert encoder_profile_bytes(spec, s, 2048, decoder_peak=10**8) == 715_128_832 - 10**8  # the encoder is the peak
    assert encoder_profile_bytes(spec, replace(s, language_model_only=True), 2048, 10**8) == 0
    assert encoder_profile_bytes(spec, replace(s, skip_mm_profiling=True), 2048, 10**8) == 0
    # 0.26's V2 model runner (dense Gemma 3) runs the text dummy forward only (v1/worker/gpu/model_runner.py)
    assert vllm_engine.uses_v2_runner(spec, _settings(spec))
    assert encoder_profile_bytes(spec, _settings(spec), 2048, decoder_peak=10**8, v2_runner=True) == 0
    est = vllm_engine.estimate(spec, get_gpu("l40s"), _settings(spec, max_num_batched_tokens=2048))
    text = vllm_engine.estimate(spec, get_gpu("l40s"), _settings(spec, max_num_batched_tokens=2048,
                                                                 language_model_only=True))
    assert est.activation_bytes == text.activation_bytes


def test_explain_shows_the_encoder_lines():
    code, out, err = invoke(["explain", "--gpu", "l40s", "--model", "gemma-3-27b", "--context", "4k", "--engine",
                             "vllm", "--weights", "awq", "--vllm-version", "0.20.0"])
    assert code == 0, err
    assert "siglip image encoder: 423,060,336 params, 846,120,672 B in the weights" in out
    assert "8 image item(s) of 4,096 patches -> 256 embeddings" in out and "not measured on our GPU" in out
    code, out, _ = invoke(["explain", "--gpu", "l40s", "--model", "gemma-3-27b", "--context", "4k", "--engine", "vllm"])
    assert code == 0 and "the V2 model runner's profile runs no encoder" in out
    code, out, _ = invoke(["explain", "--gpu", "l40s", "--model", "gemma-3-27b", "--context", "4k", "--engine",
                           "vllm", "--weights", "awq", "--limit-mm-per-prompt", '{"image": 0}'])
    assert code == 0 and "encoders not loaded" in out


def test_mm_limit_spellings():
    assert parse_mm_limits('{"image": 0, "video": 0}') == {"image": 0, "video": 0}
    assert parse_mm_limits("image=0,video=2") == {"image": 0, "video": 2}
    assert parse_mm_limits('{"image": {"count": 0}}') == {"image": 0}
    for bad in ("{", "image", "[]", '{"image": -1}', '{"image": "x"}'):
        with pytest.raises(UsageError):
            parse_mm_limits(bad)
    values, _ = parse_command("vllm serve Qwen/Qwen2.5-VL-7B-Instruct --limit-mm-per-prompt.image 0 "
                              "--limit-mm-per-prompt.video=0 --language-model-only")
    assert parse_mm_limits(values["limit_mm_per_prompt"]) == {"image": 0, "video": 0}
    assert values["language_model_only"] is True
    values, _ = parse_command("vllm serve google/gemma-3-27b-it --skip-mm-profiling")
    assert values["skip_mm_profiling"] is True


def test_text_only_needs_every_modality_of_the_model():
    from kvcalc.plan import PlanRequest

    spec = spec_from_config({"model_type": "qwen2_5_vl", **QWEN25_TEXT, "vision_config": QWEN25_VC}, "q")
    gpu = get_gpu("h100-sxm")
    assert not PlanRequest(spec=spec, gpu=gpu, context=4096, limit_mm_per_prompt={"image": 0}).text_only
    assert PlanRequest(spec=spec, gpu=gpu, context=4096, limit_mm_per_prompt={"image": 0, "video": 0}).text_only
    gemma = load_model("gemma-3-27b")
    assert PlanRequest(spec=gemma, gpu=gpu, context=4096, limit_mm_per_prompt={"image": 0}).text_only
    assert not PlanRequest(spec=replace(gemma, encoders=()), gpu=gpu, context=4096,
                           limit_mm_per_prompt={"image": 0}).text_only


def test_transformers_loads_the_encoder_where_its_class_holds_it():
    """AutoModelForCausalLM maps gemma3 to Gemma3ForConditionalGeneration (tower loaded) but llama4 and qwen3_5 to
    their text-only ForCausalLM classes (transformers 5.24 MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)."""
    from kvcalc.engines import hf as hf_engine

    def static(name):
        spec = load_model(name)
        s = hf_engine.HfSettings(weight_format("bf16"), kv_format("auto"), 1, 1024, 128, 2)
        return spec, hf_engine.estimate(spec, s).static_bytes

    gemma, got = static("gemma-3-27b")
    assert got == (gemma.params.total + 423_060_336) * 2
    for name in ("llama-4-scout", "qwen3.5-27b"):
        spec, got = static(name)
        assert spec.vision_params and got == spec.params.total * 2


def test_a_quantization_config_that_does_not_exclude_the_tower_is_said():
    """quant_config.py's matching decides: AWQ's modules_to_not_convert naming the tower (substring) excludes it;
    a compressed-tensors config targeting every Linear with only lm_head ignored does not."""
    from kvcalc.encoders import quantized_by
    from kvcalc.quant_config import parse_scheme

    (enc,) = load_model("gemma-3-27b").encoders
    awq = parse_scheme({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                        "modules_to_not_convert": ["vision_tower", "multi_modal_projector"]})
    assert not quantized_by(enc, awq)
    ct = parse_scheme({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                       "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                           "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}}}})
    assert quantized_by(enc, ct)
    ct_ignoring = parse_scheme({**{"quant_method": "compressed-tensors", "format": "pack-quantized"},
                                "ignore": ["lm_head", "re:vision_tower.*", "re:multi_modal_projector.*"],
                                "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                    "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                    "group_size": 128}}}})
    assert not quantized_by(enc, ct_ignoring)
    assert not quantized_by(enc, None)


def test_runner_cases_started_text_only_are_predicted_text_only():
    from kvcalc.validate.predict import normalize_vllm_case, vllm_case_settings

    case = normalize_vllm_case({"model": "gemma-3-27b", "limit_mm_per_prompt": {"image": 0}})
    assert vllm_case_settings(case, None, "0.26.0").language_model_only
    case = normalize_vllm_case({"model": "gemma-3-27b", "limit_mm_per_prompt": {"image": 2}})
    assert not vllm_case_settings(case, None, "0.26.0").language_model_only
    assert not vllm_case_settings(normalize_vllm_case({"model": "gemma-3-27b"}), None, "0.26.0").language_model_only


@pytest.mark.parametrize("cfg", [
    {"model_type": "mistral3", "spatial_merge_size": 2, "multimodal_projector_bias": False, "image_token_index": 10,
     "tie_word_embeddings": False, "text_config": MISTRAL_TEXT, "vision_config": PIXTRAL_VC},
    {"model_type": "qwen2_5_vl", **QWEN25_TEXT, "vision_config": QWEN25_VC},
], ids=["mistral3", "qwen2_5_vl"])
def test_new_towers_match_transformers(cfg):
    """The Pixtral and Qwen2.5-VL closed forms against the classes transformers builds (meta device): the tower and
    projector, and decoder + encoder = the whole model (Qwen2.5-VL-7B: 8,292,166,656; Mistral Small 3.1:
    24,011,361,280)."""
    import copy

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**copy.deepcopy(cfg))
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    vision = sum(p.numel() for n, p in model.named_parameters()
                 if n.startswith(("model.vision_tower", "model.multi_modal_projector", "model.visual")))
    spec = spec_from_config(cfg, cfg["model_type"])
    assert spec.vision_params == vision
    assert spec.params.total + spec.vision_params == sum(p.numel() for p in model.parameters())


def test_gemma3n_audio_tower_by_hand_and_against_transformers():
    """Gemma 3n's USM audio encoder at Gemma3nAudioConfig's defaults (d 1536, 8 heads, 12 conformer blocks, kernel
    5; mel 128 -> (128 + 2 - 3) // 2 + 1 = 64 -> 32 frequencies x 32 channels = 1,024 into the projection):
    convs 1 x 128 x 9 + 128 and 128 x 32 x 9 + 32, projection 1,024 x 1,536; blocks 24 d^2 + d/8 + 5d + 9d; the
    embedder 128 x 1,536 + 2 x 1,536 + 1,536 x text hidden. The MobileNet-v5 vision tower is timm's: only its
    embedder is counted, and the plan names the tower."""
    from kvcalc.encoders import gemma3n_audio_params, gemma3n_embedder_params

    d = 1536
    subsample = (1 * 128 * 9 + 128) + (128 * 32 * 9 + 32) + 1024 * d
    block = 24 * d * d + d // 8 + 5 * d + 9 * d
    embedder = 128 * d + 2 * d + d * 2048
    assert gemma3n_audio_params({}, 2048) == subsample + 12 * block + embedder == 684_694_048
    assert gemma3n_embedder_params(2048, 128, 2048) == 128 * 2048 + 2 * 2048 + 2048 * 2048 == 4_460_544
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma3n import modeling_gemma3n as g

    audio, text = transformers.Gemma3nAudioConfig(), transformers.Gemma3nTextConfig(hidden_size=2048)
    with torch.device("meta"):
        modules = [g.Gemma3nAudioEncoder(audio), g.Gemma3nMultimodalEmbedder(audio, text)]
    assert sum(p.numel() for m in modules for p in m.parameters()) == 684_694_048


def test_gemma3n_wrapper_counts_audio_and_names_the_vision_tower():
    transformers = pytest.importorskip("transformers")
    import json

    text = {k: v for k, v in transformers.Gemma3nTextConfig().to_dict().items()
            if not k.startswith("_") and k != "transformers_version"}
    cfg = json.loads(json.dumps({"model_type": "gemma3n", "text_config": text, "audio_config": {},
                                 "vision_config": {"hidden_size": 2048, "vocab_size": 128}}))
    spec = spec_from_config(cfg, "gemma-3n")
    assert [e.family for e in spec.encoders] == ["gemma3n_vision_embedder", "gemma3n_audio"]
    assert spec.vision_params == 4_460_544 + 684_694_048
    assert spec.uncounted == ("vision tower (gemma3n.vision_config, timm MobileNet-v5: not counted; its embed_vision "
                              "is)",)


@pytest.mark.parametrize("value", ["{", "image", "[]", '{"image": -1}', '{"image": "many"}', "{}", "image=", "=0"])
def test_a_bad_mm_limit_is_one_line_and_exit_2(value):
    code, out, err = invoke(["plan", "--gpu", "l4", "--model", "gemma-3-4b", "--limit-mm-per-prompt", value])
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (value, out, err)


def test_a_logs_mm_limit_makes_validate_plan_text_only():
    """`non-default args: {..., 'limit_mm_per_prompt': {'image': 0}}` (vLLM's own line) is read from the log, and
    validate --from-log predicts the decoder alone when it covers every modality of the model's encoders."""
    from kvcalc.validate.predict import settings_with_sources
    from kvcalc.validate.vllm_log import _non_default_args

    out = {"settings": {}, "warnings": [], "raw": {}}
    line = ("INFO 11-30 21:24:24 [api_utils.py:273] non-default args: {'model_tag': 'google/gemma-3-27b-it', "
            "'max_model_len': 8192, 'limit_mm_per_prompt': {'image': 0}}")
    _non_default_args(line, 1, out)
    assert out["settings"]["limit_mm_per_prompt"] == {"image": 0}
    settings, sources = settings_with_sources(out, {}, modalities=("image",))
    assert settings.language_model_only and sources["language_model_only"] == "log"
    settings, _ = settings_with_sources(out, {}, modalities=("image", "video"))  # Qwen: video still allowed
    assert not settings.language_model_only
