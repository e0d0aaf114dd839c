"""The speed-model error tables in docs/validation/README.md are what scripts/fit_speed.py computes from the
committed runs and constants (reproducible: rerun `python3 scripts/fit_speed.py --report --write`)."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent


def _script():
    return load_script("fit_speed")


def test_published_tables_match_the_committed_constants():
    fs = _script()
    points = fs.v2_points(fs.V2) + fs.v1_points() + fs.hf_points(fs.V2)
    rows = fs.errors(points)
    text = (ROOT / "docs" / "validation" / "README.md").read_text()
    published = text.split(fs.START, 1)[1].split(fs.END, 1)[0].strip("\n")
    assert published == fs.tables(rows).strip("\n"), "rerun python3 scripts/fit_speed.py --report --write"


def test_at_least_a_third_of_the_vllm_points_are_held_out():
    fs = _script()
    points = [p for p in fs.v2_points(fs.V2) if p.kind == "decode"]
    assert sum(p.held_out for p in points) >= len(points) / 3
