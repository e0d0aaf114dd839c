"""scripts/public_logs_report.py (the docs/validation table of kvcalc's error on public logs) runs on the current
code, every settings-complete log gets a row, and every miss above 2% carries a cause: a reviewed one within its
error range, else the largest per-rank breakdown gap (a log without breakdown lines and without a reviewed cause
fails here: someone must look at it)."""

import json
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent


def _report():
    return load_script("public_logs_report")


def test_every_miss_is_explained_and_the_table_renders():
    report = _report()
    data = report.rows()
    assert len(data) >= 20
    predicted = [r for r in data if r.get("error") is not None]
    assert len(predicted) >= 18
    for r in predicted:
        if abs(r["error"]) > 0.02:
            assert r["cause"], f"{r['id']}: {r['error']:+.1%} with no cause"
    text = report.markdown(data)
    assert "median |error|" in text and text.count("\n| [") == len(predicted)


# a 3 GiB KV budget per rank turns 0.1 GiB into 3% (Qwen2.5-72B's shape at TP 2, like llmd-h100x2-qwen25-72b-tp2-8k)
H100_SMALL_BUDGET = {"llmd-h100x2-kimi-dev-72b-tp2-8k"}


def test_public_h100_v019_logs_within_three_percent():
    """The llm-d 0.19 H100 logs (dense, FP8, KV FP8, TP=2, PP=2, MoE, MLA, Gemma 2/3 sliding windows): each KV
    token count within 3% of what vLLM logged (TP NCCL NVLS buffers, gathered-vocab sampler, fused-MoE workspace,
    per-group token logging), through the same path as the docs/validation table."""
    rows = [r for r in _report().rows() if r["id"].startswith("llmd-") and r.get("error") is not None]
    assert len(rows) >= 12
    for r in rows:
        assert r["quantity"] == "logged KV cache tokens", r["id"]
        limit = 0.05 if r["id"] in H100_SMALL_BUDGET else 0.03
        assert abs(r["error"]) <= limit, (r["id"], r["observed"], r["predicted"])


# the public logs kvcalc misses by more than 5%, each explained in docs/validation/README.md
EXPLAINED_MISSES = {"vllm16199-24gb-gemma3-27b-awq-v0-4k": "AWQ checkpoint bytes kvcalc's ledger misses (V0, 0.8.3)",
                    "dennislee-a100-40gb-x2-qwen2-7b-tp2-u050": "two nodes over Ray: 0.9 GiB per rank not attributed "
                    "(not NCCL's buffers; the 4-node gpt-oss-120b log needs no such term)",
                    "vllm13061-2x4090-r1-distill-qwen14b-tp2": "V0 driver rank: its sampler peak above kvcalc's V0 "
                    "count, non-torch at TP 2 over PCIe (scripts/public_logs_report.py CAUSES)",
                    "prp-wp24-b-rtx5060ti-qwen3-4b-v0.29": "vLLM 0.29 with a cold torch.compile in the profile run: "
                    "1.26 GiB more non-torch and activation than the same setup's warm-cache start (prp-wp24-a)",
                    "enginrect-rtx4090-wsl2-qwen25-7b-bf16-v0.27": "vLLM 0.27.1 on WSL2, only the KV line kept: 0.8 "
                    "GiB not attributed (scripts/public_logs_report.py CAUSES)",
                    "prp-wp24-a-rtx5060ti-qwen3-4b-v0.30": "vLLM 0.30, warm compile cache (read from the log): kvcalc "
                    "drops its compile phase and the 0.36 GiB of activation both RTX 5060 Ti starts log above kvcalc's "
                    "phases remains (scripts/public_logs_report.py CAUSES)",
                    "tegdam-rtx4050l-wsl2-qwen25-3b-awq-v0.29-cold": "vLLM 0.29.0 with a cold torch.compile: the "
                    "pinned Inductor copy segment, 0.53 GiB against the same setup's warm start (scripts/"
                    "public_logs_report.py CAUSES)",
                    "kashif-rtxpro4000-qwen25-7b-awq-v0.28": "vLLM 0.28.0, only the KV lines and no total kept: 1.47 "
                    "GiB of non-KV memory not attributed (scripts/public_logs_report.py CAUSES)",
                    "gio443-rtx4070l-wsl2-qwen25-15b-v0.30": "vLLM 0.30.0, a cold compile in every container: the "
                    "pinned Inductor copy segment, by elimination against the same day's eager start (scripts/"
                    "public_logs_report.py CAUSES)",
                    "xbill9-mi300x-gemma4-31b-bf16-v0.31": "ROCm 0.31: activation 9.46 GiB logged against 2.95 modelled, "
                    "non-torch 2.23 against 0.22, not attributed (scripts/public_logs_report.py CAUSES)"}


def test_public_logs_of_every_version_family_within_five_percent():
    """Every settings-complete public log kvcalc can model (V0 0.7, V1 0.10.1.1 on A100, 0.19 on H100): KV capacity
    within 5% of the log, but for the two explained misses."""
    index = json.loads((ROOT / "tests" / "fixtures" / "vllm_logs" / "public" / "index.json").read_text())["logs"]
    family = {e["id"]: e.get("version_family") for e in index}
    rows = [r for r in _report().rows() if r.get("error") is not None]
    assert {"v0", "v1"} <= {family[r["id"]] for r in rows} and len(rows) >= 18
    for r in rows:
        if r["id"] in EXPLAINED_MISSES:
            continue
        assert abs(r["error"]) <= 0.05, (r["id"], r["observed"], r["predicted"])


def test_the_cold_compile_ranges_hold_the_starts_that_pinned_and_none_from_0_31():
    """kvcalc's capacity range for a cold 0.27-0.30 compile (low end: the freed Inductor copy's segment less 20 MiB
    pinned; high end: the point estimate, unchanged) holds the three cold starts whose pin is measured against a
    warm restart of the same setup (RTX 5060 Ti 0.29, RTX 4090 Qwen2.5-0.5B 0.27, RTX 4050 Laptop 0.29) and comes
    within 1.1% of the RTX 4070 Laptop's, pinned by elimination against its eager start; no 0.31+ log, warm start or
    eager start gets a range (0.31's max_split_size_mb 20 during the profile, gpu_worker.py:612-626). Every 0.27+
    log's distance to kvcalc's range (0 inside; the point error where no range) is within 5%."""
    data = [r for r in _report().rows() if r.get("error") is not None and _report().is_new_release(r)]
    by_id = {r["id"]: r for r in data}
    for name in ("prp-wp24-b-rtx5060ti-qwen3-4b-v0.29", "enginrect-rtx4090-wsl2-qwen25-05b-v0.27-first",
                 "tegdam-rtx4050l-wsl2-qwen25-3b-awq-v0.29-cold"):
        r = by_id[name]
        assert r["in_range"] is True and r["range_error"] == 0, name
        assert r["range_low"] < r["observed"] <= r["range_high"] == r["predicted"], name
    r = by_id["gio443-rtx4070l-wsl2-qwen25-15b-v0.30"]
    assert r["in_range"] is False and 0 < r["range_error"] <= 0.011
    for name in ("prp-wp24-a-rtx5060ti-qwen3-4b-v0.30", "enginrect-rtx4090-wsl2-qwen25-05b-v0.27-warm",
                 "tegdam-rtx4050l-wsl2-qwen25-3b-awq-v0.29-warm", "xbill9-mi300x-gemma4-31b-bf16-v0.31",
                 "xbill9-mi300x-gemma4-26b-a4b-bf16-v0.31"):
        assert by_id[name]["in_range"] is None and by_id[name]["range_error"] == by_id[name]["error"], name
    assert max(abs(r["range_error"]) for r in data) <= 0.05
