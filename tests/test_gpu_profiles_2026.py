"""Issue 19 item 4: the GPU profiles added for 2026 (H20 141 GB, RTX PRO 4000 Blackwell, RTX 4070 / 4050 Laptop):
each profile's numbers checked by hand against the arithmetic its `sources` write down, its names, what `kvcalc gpus`
says its speed rests on, and a plan on each (a laptop GPU is one per machine: no TP sweep, no split in search)."""

from __future__ import annotations

import json

import pytest
from cli_helper import invoke

from kvcalc.catalog import load_model
from kvcalc.errors import UsageError
from kvcalc.hardware import get_gpu, list_gpus
from kvcalc.inverse import answer
from kvcalc.plan import PlanRequest
from kvcalc.trust import LABELS, speed_basis

MiB, GiB = 2**20, 2**30
NEW = ("h20-141gb", "rtx-pro-4000", "rtx-4070-laptop", "rtx-4050-laptop")


# -- each profile's numbers, by hand ---------------------------------------------------------------------------------


def test_h20_141gb_by_hand():
    g = get_gpu("h20-141gb")
    assert g.memory_marketing_bytes == 141 * GiB == 151_397_597_184  # aiconfigurator's mem_capacity, to the byte
    # no CUDA total observed: the H200's (same nvidia-smi total, 143,771 MiB), 615 MiB under it
    assert g.memory_total_bytes == get_gpu("h200").memory_total_bytes == 150_109_716_480
    assert 143_771 * MiB - g.memory_total_bytes == pytest.approx(615.2 * MiB, abs=0.1 * MiB)
    assert g.memory_bandwidth_bytes_per_s == 4_800_000_000_000  # the H200's six HBM3e stacks' datasheet rate
    assert 6144 * 6.4e9 / 8 == pytest.approx(4915.2e9)  # aiconfigurator's 4917 GB/s: the raw bus rate
    # the public Triad (0.8083 of 4.8 TB/s) is 0.97 of the 96 GB part's 4.0 TB/s, where the same Triad reaches 0.848
    # of an H200's peak: the 141 GB part's memory is the faster
    triad_over_96gb_peak = 0.8083 * 4.8e12 / get_gpu("h20").memory_bandwidth_bytes_per_s
    assert triad_over_96gb_peak == pytest.approx(0.97, abs=0.001) and triad_over_96gb_peak > 0.848
    # the same capped GH100 as the 96 GB H20: every tensor rate, the SM count and the measured torch.mm equal
    h20 = get_gpu("h20")
    assert g.flops == h20.flops and g.sm_count == h20.sm_count == 78
    assert g.measured_bf16_matmul_flops == h20.measured_bf16_matmul_flops == 142.06e12
    assert g.flops_for("bf16") == 148e12 and g.flops_for("fp8") == 296e12 and g.flops_for("fp4") is None
    # a 10,240 x 10,240 BF16 GEMM is compute-bound on both memories: N / 3 FLOP per byte >> 148e12 / 4.0e12
    assert 10240 / 3 > 148e12 / 4.0e12
    assert (g.tdp_watts, g.compute_capability, g.architecture) == (500, 9.0, "Hopper")
    assert "NVLink 900 GB/s" in g.sources["interconnect"]


def test_rtx_pro_4000_by_hand():
    g = get_gpu("rtx-pro-4000")
    assert g.memory_marketing_bytes == 24 * GiB
    assert g.memory_total_bytes == (24_467 - 465) * MiB == 25_167_921_152  # nvidia-smi less an L4-sized reserve
    assert g.memory_bandwidth_bytes_per_s == 192 // 8 * 28 * 10**9 == 672_000_000_000  # 192-bit GDDR7 at 28 Gbps
    sms, boost = 70, 2.617e9
    assert g.sm_count == sms
    assert g.flops_for("fp32") == pytest.approx(8960 * 2 * boost, rel=1e-3)  # the published 46.9 TFLOPS
    # an RTX PRO SM: 1,024 FLOP/clock BF16 with FP32 accumulate (the SFF card's 95.84 TFLOPS at 1,337 MHz)
    assert 70 * 1024 * 1.337e9 == pytest.approx(95.84e12, rel=1e-3)
    assert g.flops_for("bf16") == pytest.approx(sms * 1024 * boost, rel=1e-3)
    assert g.flops_for("fp8") == pytest.approx(2 * g.flops_for("bf16"), rel=1e-3)
    assert g.flops_for("fp4") == pytest.approx(4 * g.flops_for("bf16"), rel=1e-3)
    assert g.measured_bf16_matmul_flops is None  # no public torch.mm row: the derived peak stands
    assert (g.tdp_watts, g.compute_capability, g.native_fp8) == (140, 12.0, True)
    assert not g.laptop


@pytest.mark.parametrize("gpu_id,gib,smi_mib,bus_bits,sms,boost_hz", [
    ("rtx-4070-laptop", 8, 8188, 128, 36, 2.175e9),
    ("rtx-4050-laptop", 6, 6141, 96, 20, 2.370e9),
])
def test_laptop_gpus_by_hand(gpu_id, gib, smi_mib, bus_bits, sms, boost_hz):
    g = get_gpu(gpu_id)
    assert g.memory_marketing_bytes == gib * GiB
    assert g.memory_total_bytes == smi_mib * MiB  # nvidia-smi's total, as CUDA reports it under WDDM/WSL2
    assert g.memory_marketing_bytes - g.memory_total_bytes == (gib * 1024 - smi_mib) * MiB  # 4 / 3 MiB kept
    assert g.memory_bandwidth_bytes_per_s == bus_bits // 8 * 16 * 10**9  # GDDR6 at 16 Gbps, at every TGP
    assert g.sm_count == sms and g.tdp_watts == 115  # the top of the 35-115 W range, whose boost clock is taken
    # Ada per SM: 256 FP32 FLOP/clock, 512 BF16 with FP32 accumulate (GeForce half rate), FP8 x2, INT8 x4, INT4 x8
    assert g.flops_for("fp32") == pytest.approx(sms * 256 * boost_hz, rel=2e-3)
    assert g.flops_for("bf16") == pytest.approx(sms * 512 * boost_hz, rel=2e-3)
    assert g.flops_for("fp8") == pytest.approx(sms * 1024 * boost_hz, rel=2e-3)
    assert g.flops_for("int8") == pytest.approx(sms * 2048 * boost_hz, rel=2e-3)
    assert g.flops_for("int4") == pytest.approx(sms * 4096 * boost_hz, rel=2e-3)
    # the same per-SM rate gives the RTX 4090's whitepaper figure (128 SMs at 2.52 GHz: 165.2 TFLOPS)
    assert 128 * 512 * 2.52e9 == pytest.approx(get_gpu("rtx-4090").flops_for("bf16"), rel=2e-3)
    # INT8 sparse is the part's marketed AI TOPS: 321 (4070 Laptop), 194 (4050 Laptop)
    assert round(2 * g.flops_for("int8") / 1e12) == {"rtx-4070-laptop": 321, "rtx-4050-laptop": 194}[gpu_id]
    assert g.laptop and g.measured_bf16_matmul_flops is None and g.compute_capability == 8.9


# -- names, listing, what the speed rests on --------------------------------------------------------------------------


@pytest.mark.parametrize("typed,expected", [
    ("NVIDIA H20-3e", "h20-141gb"), ("h20-141", "h20-141gb"), ("H20 141GB", "h20-141gb"), ("H20", "h20"),
    ("NVIDIA H20", "h20"), ("h20-96gb", "h20"),
    ("NVIDIA RTX PRO 4000 Blackwell", "rtx-pro-4000"), ("rtx-pro-4000", "rtx-pro-4000"),
    ("NVIDIA GeForce RTX 4070 Laptop GPU", "rtx-4070-laptop"), ("4070-laptop", "rtx-4070-laptop"),
    ("NVIDIA GeForce RTX 4050 Laptop GPU", "rtx-4050-laptop"), ("RTX 4050", "rtx-4050-laptop"),
])
def test_driver_names_and_short_names_resolve(typed, expected):
    assert get_gpu(typed).id == expected


@pytest.mark.parametrize("typed,first", [("h20-14", "h20-141gb"), ("rtx-pro-400", "rtx-pro-4000"),
                                         ("4070-laptpo", "rtx-4070-laptop"), ("4050 laptop gpu 6gb", "rtx-4050-laptop")])
def test_near_misses_suggest_the_new_profiles(typed, first):
    with pytest.raises(UsageError, match=f"did you mean {first}"):
        get_gpu(typed)


def test_listed_and_what_their_speed_rests_on():
    ids = [g.id for g in list_gpus()]
    assert set(NEW) <= set(ids)
    # no public result: the datasheet x the classes fitted on other GPUs
    for gpu_id in NEW[1:]:
        label, backing = speed_basis(get_gpu(gpu_id))
        assert label == LABELS[2] and "no public result; datasheet" in backing, (gpu_id, backing)
        assert "torch.mm" not in backing  # no public torch.mm row: the derived peak stands
    # the H20 141 GB has the vllm-recipes DeepSeek-V3.2 rows (3, one source: at MIN_ROWS, judged on them), and the
    # 96 GB part's torch.mm rate (142.1 / 148 over the H200's 790.3 / 989.5 = x1.20)
    label, backing = speed_basis(get_gpu("h20-141gb"))
    assert label == LABELS[1] and "h20-141gb: 3 public results (1 sources)" in backing
    assert "tensor rate x1.20 from a public torch.mm measurement" in backing
    # the rows are no longer the 96 GB profile's
    assert "public result" not in speed_basis(get_gpu("h20"))[1].replace("no public result", "")
    code, out, err = invoke(["gpus", "--json"])
    assert code == 0, err
    listed = {r["id"]: r for r in json.loads(out)}
    for gpu_id in NEW:
        assert listed[gpu_id]["speed_evidence"]["label"] == (LABELS[1] if gpu_id == "h20-141gb" else LABELS[2])


# -- plans ---------------------------------------------------------------------------------------------------------


def _plan(gpu, weights, **kw):
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", gpu, "--weights", weights, "--engine", "vllm",
                             "--json", *kw.get("extra", [])])
    assert code == 0, err
    return json.loads(out)


def test_llama_8b_does_not_fit_a_4070_laptop_in_bf16_nor_fp8_and_says_by_how_much():
    plan = _plan("4070-laptop", "bf16,fp8")
    assert plan["gpu_memory_total_bytes"] == 8188 * MiB
    rows = {r["weights_format"]: r for r in plan["rows"]}
    bf16, fp8 = rows["bf16"], rows["fp8"]
    # why: the weights alone exceed what the driver reports, before any KV, activation or graph
    assert bf16["weights_bytes"] == 2 * 8_047_038_464 == 16_094_076_928  # 8.03 B parameters x 2 bytes
    assert bf16["weights_bytes"] - plan["gpu_memory_total_bytes"] == 7_508_336_640  # 6.99 GiB over, weights alone
    assert not bf16["fits"] and not fp8["fits"]
    assert fp8["weights_bytes"] > plan["gpu_memory_total_bytes"]  # FP8 weights: 8.49 GiB (embeddings stay 16-bit)
    # by how much: the shortfall is the ledger's terms (plus one request's KV) over the 8,188 MiB
    for r in (bf16, fp8):
        b = r["vllm_breakdown"]
        over = b["weights_bytes"] + b["activation_bytes"] + b["non_torch_bytes"] + b["cudagraph_bytes"] - b["total_memory"]
        assert r["shortfall_bytes"] > over > 0
        assert r["kv_capacity_tokens"] == 0 and r["max_concurrency"] == 0
    assert bf16["shortfall_bytes"] / GiB == pytest.approx(11.18, abs=0.01)
    assert fp8["shortfall_bytes"] / GiB == pytest.approx(4.68, abs=0.01)
    # one GPU per laptop: no 'smallest tensor-parallel size that fits' over several of it
    assert plan["tp_sweep"] is None


def test_the_4070_laptop_table_says_does_not_start_and_offers_no_tp_sweep(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the table's cells unwrapped, whatever width an earlier test left
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "4070-laptop", "--weights", "bf16,fp8",
                             "--engine", "vllm"])
    assert code == 0, err
    assert "does not start (-11.18 GiB)" in out and "does not start (-4.68 GiB)" in out
    assert "tensor-parallel size" not in out
    code, out, err = invoke(["plan", "--model", "llama-3.1-8b", "--gpu", "l4", "--weights", "bf16", "--engine", "vllm",
                             "--context", "128k"])
    assert code == 0, err  # a datacenter card that does not fit still gets the sweep
    assert "tensor-parallel size" in out


def test_awq_fits_the_rtx_pro_4000_and_decodes_at_its_bandwidth():
    plan = _plan("rtx-pro-4000", "bf16,awq")
    rows = {r["weights_format"]: r for r in plan["rows"]}
    assert rows["bf16"]["fits"] and rows["awq"]["fits"]
    # batch 1 decode reads the weights once a token: 672 GB/s x the pooled bandwidth class 0.831 over 16.09 GB is
    # 34.7 tok/s; the KV read and the step's fixed time take a few percent off
    roof = 672e9 * 0.831 / rows["bf16"]["weights_bytes"]
    assert 0.9 * roof < rows["bf16"]["decode_tokens_per_s"] < roof


def test_the_141gb_h20_decodes_faster_and_holds_more_than_the_96gb():
    h96, h141 = _plan("h20", "bf16")["rows"][0], _plan("h20-141", "bf16")["rows"][0]
    # batch 1 decode is bandwidth-bound: at most 4.8 / 4.0 TB/s = 1.2 faster, less the step's fixed time (the same
    # on both: one GH100, one clock)
    assert 1.1 < h141["decode_tokens_per_s"] / h96["decode_tokens_per_s"] < 1.2
    assert h141["kv_capacity_tokens"] > 1.4 * h96["kv_capacity_tokens"]


def test_a_laptop_gpu_is_never_split_in_min_gpus_or_search():
    req = PlanRequest(spec=load_model("llama-3.1-8b"), gpu=get_gpu("rtx-4070-laptop"), context=8192, batch=1,
                      engines=("vllm",), weights="bf16")
    a = answer("min-gpus", req)
    assert a.value is None and "up to 1 GPUs" in a.detail  # bf16 fits no single 4070 Laptop, and two are two laptops
    assert answer("min-gpus", PlanRequest(spec=load_model("llama-3.1-8b"), gpu=get_gpu("l4"), context=8192, batch=1,
                                          engines=("vllm",), weights="bf16")).value == 1
    code, out, err = invoke(["search", "--model", "llama-3.2-3b", "--input-len", "1k", "--output-len", "256",
                             "--concurrency", "4", "--gpus", "rtx-4070-laptop", "--price", "rtx-4070-laptop=0.2",
                             "--top", "20", "--json"])
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert rows and all(r["gpu"] == "rtx-4070-laptop" and r["tp"] == 1 and r["pp"] == 1 for r in rows)


def test_no_price_is_shipped_for_the_new_profiles():
    """No published offer was found for these (prices.yaml holds none): search leaves them out and says so."""
    from kvcalc.prices import shipped_prices

    assert not set(NEW) & set(shipped_prices())
    code, out, err = invoke(["search", "--model", "llama-3.2-3b", "--input-len", "1k", "--output-len", "256",
                             "--concurrency", "4", "--gpus", "rtx-pro-4000,l4", "--top", "3", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert "rtx-pro-4000: no price known; left out (give one with --price rtx-pro-4000=USD)" in result["warnings"]
    assert {r["gpu"] for r in result["results"]} == {"l4"}


def test_the_recipes_h20_rows_are_the_141gb_part():
    """The vllm-recipes DeepSeek-V3.2 '8xH20' rows (3 of the public corpus) map to the 141 GB H20: the 96 GB part's
    KV pool holds 7 of the run's 100 requests of 3,072 tokens (its figures need all 100 in flight; the script OOMs on
    8x H20 96G, vllm#40592), the 141 GB part's holds them all; the recipe's author calls the H20 a 141 GB part."""
    from pathlib import Path

    from script_loader import load_script

    report = load_script("speed_corpus_report")
    corpus = Path(__file__).resolve().parents[1] / "docs" / "validation" / "data" / "speed-corpus" / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    mine = [r for r in rows if r["source"] == "vllm-recipes-dsv32-h20"]
    assert len(mine) == 3 and all(r["gpu"] == "h20-141gb" and not r.get("outlier") for r in mine)
    assert not [r for r in rows if r["gpu"] == "h20"]
    row = mine[0]
    slots = {}
    for gpu in ("h20", "h20-141gb"):
        report._SETUP.pop(row["id"], None)
        slots[gpu] = report.setup(dict(row, gpu=gpu))[5]["slots"]
    report._SETUP.pop(row["id"], None)
    assert slots["h20"] == 7 and slots["h20-141gb"] >= row["num_prompts"] == 100
