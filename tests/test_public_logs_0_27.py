"""vLLM 0.27+ public start-ups that state too few settings for the public-log corpus (docs/validation/README.md,
"vLLM 0.27+") but print a figure that depends on the KV layout alone: kvcalc's page arithmetic must give it exactly.
Each case cites its post; the figure is as printed."""

from kvcalc.catalog import load_model
from kvcalc.engines.vllm_groups import vllm_kv_layout
from kvcalc.formats import kv_format
from kvcalc.units import GiB


def test_minimax_m2_tp2_one_request_need_on_0_29():
    """https://github.com/eugr/spark-vllm-docker/issues/396 (vLLM 0.29.1rc1.dev17+gd2d649e67, MiniMax-M2.7 AWQ,
    TP 2, bf16 KV): 'To serve at least one request with the model's max seq len (196608), 23.25 GiB KV cache is
    needed'. MiniMax-M2.7 keeps M2.5's attention (62 full layers, 8 KV heads, head_dim 128), so kvcalc's minimax-m2.5
    layout applies: 196,608 tokens x 62 x (8 / 2) x 2 x 128 x 2 B = 24,964,497,408 B = 23.25 GiB exactly (the null
    block 0.28.1+ holds back adds 2,031,616 B, inside the printed rounding)."""
    spec = load_model("minimax-m2.5")
    for null_block_first in (False, True):
        layout = vllm_kv_layout(spec.layers, kv_format("auto"), 2, None, 2, 196_608, spec.model_type,
                                max_num_batched_tokens=8192, null_block_first=null_block_first)
        assert round(layout.min_kv_bytes / GiB, 2) == 23.25
    assert layout.bytes_per_block == 16 * 62 * 4 * 2 * 128 * 2
    assert layout.min_kv_bytes == 196_608 // 16 * layout.bytes_per_block + layout.bytes_per_block
