"""SGLang's speculative-decoding drafter in its ledger (engines/sglang_draft.py), hand-computed from the release
source (0.5.14 unless said: model_runner_kv_cache_mixin.py:85-120, pool_configurator.py:129-145,
arg_groups/speculative_hook.py; 0.5.4 model_runner.py:1666-1687), and its agreement with vLLM's drafter
(engines/vllm_draft.py: the same layers, weighed the same way)."""

import pytest

from kvcalc.catalog import load_model
from kvcalc.engines import sglang as S
from kvcalc.engines import sglang_draft, vllm_draft
from kvcalc.errors import UsageError
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu

LLAMA_8B_CELL = 32 * 8 * 128 * 2 * 2  # 32 layers x 8 KV heads x 128 x (K, V) x bf16 = 131,072 B


def settings(**kw):
    base = dict(weights=weight_format("bf16"), kv=kv_format("auto"), context_length=8192)
    return S.SglangSettings(**(base | kw))


def test_eagle3_head_is_charged_to_the_pool_budget_on_0_5_14():
    """Llama-3.1-8B + an EAGLE-3 head of its shape on one H200 (SGLang 0.5.14's defaults): the head's weights come out
    of the budget before the pool is sized, its own embedding (128,256 x 4,096 bf16) included, and the cell grows by
    one draft layer in 32."""
    spec, h200 = load_model("llama-3.1-8b"), get_gpu("h200")
    plain = S.estimate(spec, h200, settings())
    eagle = S.estimate(spec, h200, settings(speculative_algorithm="EAGLE3"))
    # the head, by hand: one Llama decoder layer at 8B's shape (q, o 4096 x 4096; k, v 4096 x 1024; gate, up, down
    # 4096 x 14336) + its two norms and the final norm; layer 0's qkv reads 2h (+ (4096 + 2 x 1024) x 4096), fc
    # 3 x 4096 -> 4096, hidden_norm 4096, an lm_head of 32,000 rows; all bf16; d2t 32,000 int64; its rotary cache
    # (2,048 positions x 128 bf16: its max_position_embeddings is not the target's)
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 3 * 4096
    extra = (4096 + 2 * 1024) * 4096 + 3 * 4096 * 4096 + 4096 + 32000 * 4096
    kept = (layer + extra) * 2 + 32000 * 8 + 2048 * 128 * 2
    assert kept == 850_159_616
    assert vllm_draft.drafter(spec, "eagle3").weight_bytes == kept  # what vLLM's ledger charges for the same head
    embedding = 128256 * 4096 * 2  # VocabParallelEmbedding, swapped for the target's only after the pool is sized
    assert eagle.draft_weights_bytes == kept + embedding == 1_900_832_768
    assert eagle.draft_in_budget_bytes == eagle.draft_weights_bytes
    assert eagle.mem_fraction_static == plain.mem_fraction_static == 0.903  # 0.5.14 reserves nothing for it
    assert eagle.kv_budget_bytes == plain.kv_budget_bytes - eagle.draft_weights_bytes
    assert eagle.count_cell_bytes == LLAMA_8B_CELL * 33 // 32 == 135_168
    assert eagle.max_total_num_tokens == eagle.kv_budget_bytes // 135_168 == 865_744
    assert plain.max_total_num_tokens == plain.kv_budget_bytes // LLAMA_8B_CELL == 907_300
    # the draft's own pool: the same token count over its one layer
    assert eagle.draft_kv_bytes == 865_744 * 8 * 128 * 2 * 2
    # speculative decoding: max_running_requests 48 unless given; req-to-token rows context + 4 + 8 draft tokens
    # (Llama's auto-chosen steps 5, topk 4, 8 draft tokens)
    assert eagle.speculative_params == (5, 4, 8)
    assert eagle.max_running_requests == eagle.req_pool_size == 48
    assert eagle.req_to_token_bytes == 48 * (8192 + 4 + 8) * 4
    assert eagle.deployment_weights_bytes == eagle.weights_bytes + kept
    assert eagle.kv_bytes_per_token == LLAMA_8B_CELL + 4096  # the draft's layer read beside the target's
    asked = S.estimate(spec, h200, settings(speculative_algorithm="EAGLE3", max_running_requests=128))
    assert asked.max_running_requests == 128


def test_nextn_mtp_layers_weigh_what_vllms_drafter_weighs():
    """DeepSeek-V3 at TP 8 with NEXTN: the MTP layer is vLLM's (vllm_draft.py: one decoder layer, eh_proj, enorm,
    hnorm, shared_head.norm, in the target's format), plus its own embedding and shared_head.head while the pool
    is sized (deepseek_nextn.py:96-100, :310-314); the MLA cell grows by 1 layer in 61."""
    spec, h200 = load_model("deepseek-v3"), get_gpu("h200")
    fp8 = weight_format("fp8")
    est = S.estimate(spec, h200, settings(weights=fp8, tensor_parallel=8, speculative_algorithm="NEXTN"))
    vllm = vllm_draft.drafter(spec, "mtp", weights=fp8, tp=8)
    ends = 2 * (129280 // 8) * 7168 * 2  # embed_tokens + shared_head.head, vocab 129,280 over 8 ranks, bf16
    assert est.draft_weights_bytes == vllm.weight_bytes + ends
    assert est.deployment_weights_bytes == (est.weights_bytes + vllm.weight_bytes) * 8
    assert est.count_cell_bytes == (512 + 64) * 2 * 62 == 71_424
    assert est.draft_kv_bytes == est.max_total_num_tokens * (512 + 64) * 2
    assert est.speculative_params == (3, 1, 4)  # DeepSeek's auto-chosen (speculative_hook.py:522-537)
    assert est.max_total_num_tokens == est.kv_budget_bytes // 71_424


def test_standalone_draft_model_on_0_5_14_and_0_5_10():
    """STANDALONE drafts with Llama-3.2-1B: its whole weights (its own embedding, tied head) in the budget, the cell
    scaled by its 16 layers against the target's 32 (pool_configurator.py assumes equal layers), and its pool its own
    16 x 8 x 64 x 2 x 2 B a token. 0.5.14 adds no 6 GiB reserve for it (server_args.py:3276-3312); 0.5.10 does
    (:1316-1319)."""
    spec, h200 = load_model("llama-3.1-8b"), get_gpu("h200")
    draft = load_model("llama-3.2-1b")
    s = settings(speculative_algorithm="STANDALONE", speculative_draft_model_path="llama-3.2-1b",
                 speculative_draft_config=draft.config)
    est = S.estimate(spec, h200, s)
    own = S.estimate(draft, h200, settings())  # the 1B model served alone: the same weight arithmetic
    assert est.draft_weights_bytes == own.weights_bytes
    assert est.count_cell_bytes == LLAMA_8B_CELL * 3 // 2 == 196_608
    assert est.draft_kv_bytes == est.max_total_num_tokens * 16 * 8 * 64 * 2 * 2
    assert est.speculative_params == (3, 1, 4)
    assert est.mem_fraction_static == S.estimate(spec, h200, settings()).mem_fraction_static
    gpu_mib = 143771
    v10 = S.estimate(spec, h200, settings(version="0.5.10", speculative_algorithm="STANDALONE",
                                          speculative_draft_config=draft.config))
    # reserve 512 + 1.5 x 8192 + 2 x 256 + 1/8 x 1024 = 13,440 MiB, no piecewise graphs (0.5.10 switches them off
    # under speculative decoding, :1088-1090), + 6 GiB for the STANDALONE draft
    assert v10.mem_fraction_static == round((gpu_mib - 13440 - 6 * 1024) / gpu_mib, 3) == 0.864
    # 0.5.10 sizes the pool before the draft loads: nothing of it in the budget
    assert v10.draft_in_budget_bytes == 0 and v10.count_cell_bytes == 0


def test_0_5_4_grows_the_shared_pool_for_draft_and_verify_tokens():
    """0.5.4 (draft_runner_cache_size, model_runner.py:1666-1687): the target's pool as sized, plus max_num_reqs x
    (steps x topk + draft tokens) + 100 tokens; the draft's weights outside the budget."""
    spec, h200 = load_model("llama-3.1-8b"), get_gpu("h200")
    plain = S.estimate(spec, h200, settings(version="0.5.4", mem_fraction_static=0.9))
    eagle = S.estimate(spec, h200, settings(version="0.5.4", mem_fraction_static=0.9, speculative_algorithm="EAGLE"))
    assert eagle.kv_budget_bytes == plain.kv_budget_bytes
    assert eagle.speculative_params == (5, 4, 8)
    assert eagle.max_total_num_tokens == plain.max_total_num_tokens + 48 * (5 * 4 + 8) + 100
    # 0.5.7 shares the pool as sized
    v7 = S.estimate(spec, h200, settings(version="0.5.7", mem_fraction_static=0.9, speculative_algorithm="EAGLE"))
    assert v7.max_total_num_tokens == S.estimate(spec, h200, settings(version="0.5.7", mem_fraction_static=0.9)
                                                 ).max_total_num_tokens


def test_ngram_has_no_draft_model():
    spec, h200 = load_model("llama-3.1-8b"), get_gpu("h200")
    plain = S.estimate(spec, h200, settings())
    est = S.estimate(spec, h200, settings(speculative_algorithm="ngram"))
    assert est.draft_weights_bytes == est.draft_kv_bytes == 0
    assert est.max_total_num_tokens == plain.max_total_num_tokens
    assert est.speculative_params == (1, 10, 12)  # bfs breadth 10, 12 draft tokens (speculative_hook.py:418-428)
    assert est.req_to_token_bytes == 48 * (8192 + 4 + 12) * 4


@pytest.mark.parametrize("kw, message", [
    (dict(speculative_algorithm="DFLASH"), "kvcalc models SGLang's"),
    (dict(speculative_algorithm="STANDALONE"), "--speculative-draft-model-path"),
    (dict(speculative_algorithm="EAGLE", speculative_num_steps=3), "--speculative-eagle-topk"),
    (dict(speculative_algorithm="EAGLE", speculative_eagle_topk=2), "need --speculative-num-steps"),
    (dict(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=4),
     "--speculative-num-draft-tokens"),
    (dict(speculative_algorithm="EAGLE3", enable_lora=True), "LoRA only with NGRAM"),
    (dict(speculative_algorithm="NGRAM", enable_dp_attention=True, tensor_parallel=2, dp_size=2), "DP attention"),
])
def test_drafter_settings_sglang_refuses(kw, message):
    with pytest.raises(UsageError, match=message):
        S.estimate(load_model("llama-3.1-8b"), get_gpu("h200"), settings(**kw))


def test_topk_one_draft_tokens_follow_the_steps():
    assert sglang_draft.params(S.rules_for("0.5.14"), load_model("llama-3.1-8b"), "EAGLE", 3, 1, 9) == (3, 1, 4)


def test_validate_reads_the_drafter_a_log_states():
    """A start-up log's server_args carry the algorithm and the steps, topk and draft tokens SGLang resolved
    (validate/sglang_log.py): the prediction it is compared with is the drafter's ledger, not the plain one. The
    log below is made up for the parser (no public log has a speculative start): only its settings are read."""
    from kvcalc.validate.sglang_log import check_sglang_log, parse_sglang_log

    text = ("server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, kv_cache_dtype='auto', "
            "context_length=8192, speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, "
            "speculative_num_draft_tokens=4, max_running_requests=48)\n"
            "[x TP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB\n")
    out = check_sglang_log(parse_sglang_log(text), "llama-3.1-8b", "h200")
    est = S.estimate(load_model("llama-3.1-8b"), get_gpu("h200"), settings(
        speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
        speculative_num_draft_tokens=4, max_running_requests=48))
    row = next(r for r in out["rows"] if r["observed"] == 1000)
    assert row["predicted"] == est.max_total_num_tokens == est.kv_budget_bytes // (LLAMA_8B_CELL * 33 // 32)
    assert est.speculative_params == (3, 1, 4)


def test_dp_attention_workers_each_hold_their_own_requests():
    """With --enable-dp-attention --dp 2 each DP rank schedules from its own pool with max_running_requests // 2
    (model_runner_kv_cache_mixin.py:981-1000): one server holds both ranks' requests."""
    spec, h200 = load_model("llama-3.1-8b"), get_gpu("h200")
    est = S.estimate(spec, h200, settings(tensor_parallel=2, dp_size=2, enable_dp_attention=True,
                                          max_running_requests=64))
    assert est.max_running_requests == 32 and est.dp_workers == 2
    assert est.concurrency_at(8192) == 2 * min(32, est.max_total_num_tokens // 8192) == 64
