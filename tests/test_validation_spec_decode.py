"""Issue 10.3: speculative decoding against the H200 start-ups of vLLM 0.26 (docs/validation/data/v2, v3;
scripts/compare_spec_decode.py): the model runner, the KV layout with the drafter's layers at vLLM's own budget
(exact), the drafter's weights (1%), the profile peak (1%) and the end-to-end KV tokens (0.5%)."""

from __future__ import annotations

from script_loader import load_script

compare_spec_decode = load_script("compare_spec_decode")


def _rows() -> list[dict]:
    rows = compare_spec_decode.all_rows()
    return [compare_spec_decode.compare(r, rows) for r in rows if compare_spec_decode._speculative(r)]


def test_layout_runner_and_drafter_weights_against_h200_starts():
    rows = _rows()
    assert any(r["case"] == "c-3b-ngram4" for r in rows)
    for r in rows:
        assert r["runner"] == r["runner_kvcalc"], r["case"]
        assert r["blocks"][0] == r["blocks"][1] and r["tokens"][0] == r["tokens"][1], r["case"]
        if r.get("drafter_weights") and r["drafter_weights"][1]:
            pred, obs = r["drafter_weights"]
            assert abs(pred - obs) / obs < 0.01, (r["case"], pred, obs)
        pred, obs = r["activation"]
        assert abs(pred - obs) / obs < 0.01, (r["case"], pred, obs)
        pred, obs = r["e2e_tokens"]
        assert abs(pred - obs) / obs < 0.005, (r["case"], pred, obs)
