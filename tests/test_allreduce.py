"""The TP all-reduce per interconnect (kvcalc/allreduce.py, kvcalc/data/interconnect.yaml): hand-computed arithmetic
on the published constants, and how the speed model uses it."""

import dataclasses

import pytest

from kvcalc import throughput
from kvcalc.allreduce import link_class, link_for
from kvcalc.catalog import load_model
from kvcalc.formats import kv_format, weight_format
from kvcalc.hardware import get_gpu


def test_link_classes_follow_the_board():
    assert link_class(get_gpu("h100-sxm"), 2) == "nvlink"
    assert link_class(get_gpu("gb200"), 4) == "nvlink"
    assert link_class(get_gpu("h100-pcie"), 2) == "pcie-p2p"
    assert link_class(get_gpu("l4"), 4) == "pcie-p2p"
    assert link_class(get_gpu("rtx-4090"), 2) == "pcie-host"
    assert link_class(get_gpu("h100-nvl"), 2) == "nvlink-bridge"
    assert link_class(get_gpu("h100-nvl"), 4) == "pcie-p2p"  # a bridge pairs two boards
    assert link_class(get_gpu("mi300x"), 8) == "xgmi"


def test_ring_latency_is_nccls_model():
    """NCCL's ring, LL protocol: base + 2 (n - 1) steps (src/graph/tuning.cc); 8 x RTX 4090 measure 42.1 us."""
    host = link_for(get_gpu("rtx-4090"), 8)
    assert host.latency_s(8) == pytest.approx(6.6e-6 + 14 * 2.54e-6)
    assert host.latency_s(8) == pytest.approx(42.1e-6, rel=0.01)
    assert host.latency_s(2) == pytest.approx(6.6e-6 + 2 * 2.54e-6)
    p2p = link_for(get_gpu("h100-pcie"), 2)
    assert p2p.latency_s(2) == pytest.approx(8.6e-6) and p2p.latency_s(4) == pytest.approx(12.6e-6)
    xgmi = link_for(get_gpu("mi300x"), 8)
    assert xgmi.latency_s(8) == pytest.approx(20.5e-6 + 14 * 2.3e-6)
    nv = link_for(get_gpu("h100-sxm"), 8)  # vLLM's custom all-reduce: one kernel, whatever the group size
    assert nv.latency_s(2) == nv.latency_s(8) == pytest.approx(7.95e-6)
    assert nv.latency_s(1) == 0.0 and nv.allreduce_s(1, 1e9) == 0.0


def test_bus_bandwidth_by_link():
    # NVLink 4: 450 GB/s per direction x 0.84; H800's profile states its cut NVLink (400 GB/s bidirectional)
    assert link_for(get_gpu("h100-sxm"), 2).bus_bytes_per_s == pytest.approx(450e9 * 0.84)
    assert link_for(get_gpu("h800"), 2).bus_bytes_per_s == pytest.approx(200e9 * 0.84)
    assert link_for(get_gpu("a100-80gb"), 2).bus_bytes_per_s == pytest.approx(300e9 * 0.84)
    # PCIe Gen5 (Hopper) vs Gen4 (Ada), x16 per direction
    assert link_for(get_gpu("h100-pcie"), 2).bus_bytes_per_s == pytest.approx(63e9 * 0.56)
    assert link_for(get_gpu("rtx-4090"), 2).bus_bytes_per_s == pytest.approx(31.5e9 * 0.44)
    # xGMI: a peer per link, 48 GB/s usable each
    assert link_for(get_gpu("mi300x"), 8).bus_bytes_per_s == pytest.approx(7 * 48e9)
    assert link_for(get_gpu("mi300x"), 2).bus_bytes_per_s == pytest.approx(48e9)


def test_allreduce_time_hand_computed():
    """Llama-3.1-8B (hidden 4096), a 2,048-token prefill chunk in BF16 on 2 RTX 4090s: 16 MiB a call."""
    link = link_for(get_gpu("rtx-4090"), 2)
    nbytes = 2048 * 4096 * 2
    expected = (6.6e-6 + 2 * 2.54e-6) + 2 * 1 / 2 * nbytes / (31.5e9 * 0.44)
    assert link.allreduce_s(2, nbytes) == pytest.approx(expected)
    assert expected == pytest.approx(1.222e-3, rel=1e-3)  # 1.2 ms a call, 64 calls a step: PCIe prefill is costly


def _decode(gpu, tp, batch=8):
    spec = load_model("llama-3.1-8b")
    return throughput.decode_speed(spec, get_gpu(gpu), "vllm", weight_format("bf16"), kv_format("auto"),
                                   batch, 1024, tp=tp)


def test_decode_step_carries_the_links_latency_and_bytes():
    one, two = _decode("rtx-4090", 1), _decode("rtx-4090", 2)
    link = link_for(get_gpu("rtx-4090"), 2)
    assert two.fixed_s - one.fixed_s == pytest.approx(2 * link.latency_s(2) * 32)  # 32 layers, 2 calls each
    ar = next(k for k in two.kernels if k.name == "allreduce")
    moved = 2 * 32 * 8 * 4096 * 2 * 2 * (2 - 1) / 2
    assert ar.bytes == pytest.approx(moved) and ar.time_s == pytest.approx(moved / link.bus_bytes_per_s)
    assert any("TP all-reduce: pcie-host" in n for n in two.notes)
    # a slower link costs more at the same TP: host-staged PCIe > peer-to-peer PCIe > NVLink (per call)
    assert link_for(get_gpu("rtx-4090"), 4).latency_s(4) > link_for(get_gpu("l4"), 4).latency_s(4) \
        > link_for(get_gpu("h100-sxm"), 4).latency_s(4)


def test_measured_gpu_keeps_its_fit_and_calibration_wins():
    """The H200's per-layer all-reduce latency is its own TP fit (throughput.yaml tp_comm_per_layer_s: two NVLink
    calls, the link model's base_s), and it pays the bytes term like every other GPU (issue 18: left out before, an
    8x H200 prefill moved its hidden states for free); a user's calibration of the all-reduce replaces the link
    model."""
    h200 = _decode("h200", 2)
    assert any(k.name == "allreduce" for k in h200.kernels)
    rates = throughput.gpu_rates(get_gpu("h200"))
    assert rates.link_gpu is not None
    fitted = throughput.load("throughput")["engines"]["vllm"]["tp_comm_per_layer_s"]
    assert 2 * link_for(get_gpu("h200"), 8).latency_s(8) == pytest.approx(fitted, rel=1e-9)
    cal = dataclasses.replace(throughput.gpu_rates(get_gpu("rtx-4090")), tp_comm_per_layer_s=1e-4, link_gpu=None)
    assert throughput._overhead(load_model("llama-3.1-8b"), throughput.load("throughput")["engines"]["vllm"], cal,
                                32, 2, False, False) == pytest.approx(cal.step_overhead_s + 1e-4 * 32)


def test_nvlink_call_is_vllms_custom_kernel_table():
    """vLLM's custom all-reduce timed per call on 8 x H100 (sglang#2904; interconnect.yaml custom_table_s): a call
    costs base_s + table_n(S) - table_2(16 KiB), flat below 16 KiB, the ring's bus bytes beyond 4 MiB."""
    nv = link_for(get_gpu("h100-sxm"), 8)
    assert nv.call_s(8, 128 * 1024) == pytest.approx(7.95e-6 + 11.8e-6 - 8.8e-6)
    assert nv.call_s(8, 1 << 20) == pytest.approx(7.95e-6 + 24.1e-6 - 8.8e-6)
    assert nv.call_s(2, 4096) == pytest.approx(7.95e-6)  # the TP 2 floor is the project's own graph-replayed call
    assert nv.call_s(8, 8192) == pytest.approx(7.95e-6 + 9.3e-6 - 8.8e-6)  # below 16 KiB: the 16 KiB time
    # halfway between 128 KiB and 1 MiB, linearly
    assert nv.call_s(4, (128 * 1024 + (1 << 20)) / 2) == pytest.approx(7.95e-6 + (9.2e-6 + 20.6e-6) / 2 - 8.8e-6)
    # a larger group costs more from 128 KiB up, and more than latency + ring bytes at NVLink's bus rate
    for size in (128 * 1024, 1 << 20, 4 << 20):
        assert nv.call_s(8, size) > nv.call_s(4, size) > nv.call_s(2, size)
        assert nv.call_s(8, size) > nv.latency_s(8) + nv.ring_bytes_s(8, size)
    # beyond the table (vLLM hands the tensor to NCCL): the 4 MiB call plus the rest at the ring's bus bandwidth
    big = 117e6
    assert nv.call_s(8, big) == pytest.approx(nv.call_s(8, 4 << 20) + nv.ring_bytes_s(8, big - (4 << 20)))
    # between the table's group sizes the larger one's times; another NVLink generation scales the excess
    assert nv.call_s(6, 1 << 20) == nv.call_s(8, 1 << 20) and nv.call_s(3, 1 << 20) == nv.call_s(4, 1 << 20)
    a100 = link_for(get_gpu("a100-80gb"), 8)  # NVLink 3: 300 GB/s per direction, 2/3 of the table's rate
    assert a100.call_s(8, 1 << 20) - 7.95e-6 == pytest.approx((24.1e-6 - 8.8e-6) * 450 / 300)
    # links without a table keep latency + ring bytes
    host = link_for(get_gpu("rtx-4090"), 8)
    assert host.call_s(8, 1 << 20) == pytest.approx(host.latency_s(8) + host.ring_bytes_s(8, 1 << 20))


def test_decode_step_books_the_kernel_table_over_the_latency():
    spec = load_model("deepseek-r1")
    gpu = get_gpu("h200")
    d = throughput.decode_speed(spec, gpu, "vllm", weight_format("fp8"), kv_format("auto"), 4, 440, tp=8)
    nv = link_for(gpu, 8)
    ar = next(k for k in d.kernels if k.name == "allreduce")
    per_call = 4 * spec.hidden_size * 2
    assert ar.time_s == pytest.approx(2 * spec.num_layers * (nv.call_s(8, per_call) - nv.latency_s(8)))
    assert ar.time_s > 2 * spec.num_layers * nv.ring_bytes_s(8, per_call)  # more than the bus bytes alone


def test_tp_replicated_parts_are_read_whole_on_every_rank():
    """MLA's q_a/kv_a down projections and the MoE router are replicated (engines/vllm.py replicated_parts): each
    rank of DeepSeek-R1 at TP 8 reads them whole; a model TP splits evenly reads 1/tp of its dense weights."""
    from kvcalc.engines.vllm import replicated_parts

    spec = load_model("deepseek-r1")
    w, kv = weight_format("fp8"), kv_format("auto")
    proj, router, nbytes = throughput.replicated_linear(spec, w, 8)
    k, mla, r = replicated_parts(spec, 8)
    assert proj == k + mla and router == r and mla > 0 and router > 0
    assert 0.9e9 < nbytes < 1.1e9  # ~0.8 GB of FP8 down projections + ~0.2 GB of bf16 router over 7/8 of the ranks
    split = throughput.weight_split(spec, w)
    lin = next(k for k in throughput.forward_kernels(spec, get_gpu("h200"), w, kv, 4, 0.0, 0.0, 8) if k.name == "linear")
    assert lin.bytes == pytest.approx(split.dense_bytes / 8 + nbytes)
    llama = load_model("llama-3.1-8b")  # 8 KV heads, no MLA, no router: nothing replicated at TP 2
    assert throughput.replicated_linear(llama, weight_format("bf16"), 2) == (0.0, 0.0, 0.0)
