"""scripts/serve_load_report.py: the H200 load runs against the simulation, with the split fixed in the script. The
front-end constant in kvcalc/data/serve.yaml is the one its fit set gives; the published table is the script's."""

from __future__ import annotations

import json

import pytest
from script_loader import load_script

from kvcalc.constants import load

report = load_script("serve_load_report")


@pytest.fixture(scope="module")
def rep():
    return report.report()


def test_the_fit_set_is_one_lone_request_and_everything_else_is_held_out(rep):
    splits = {r["id"]: r["split"] for r in rep["rows"]}
    assert [k for k, v in splits.items() if v == "fit"] == list(report.FIT)
    assert rep["held_out_summary"]["mean_ttft"]["of"] == len(splits) - len(report.FIT) >= 15


def test_the_shipped_front_end_cost_is_its_fit(rep):
    assert load("serve")["frontend"]["per_request_s"] == pytest.approx(rep["frontend_per_request_s"], abs=1e-4)


def test_the_published_errors_are_the_scripts(rep):
    published = json.loads((report.ROOT / "docs" / "validation" / "serve-load-errors.json").read_text())
    for name, v in rep["held_out_summary"].items():
        assert published["held_out_summary"][name]["mean_abs_error"] == pytest.approx(v["mean_abs_error"], rel=1e-6)
    readme = (report.ROOT / "docs" / "validation" / "README.md").read_text()
    assert report.markdown(rep) in readme


def test_the_simulation_beats_the_closed_form_it_replaced(rep):
    s = rep["held_out_summary"]
    assert s["mean_ttft"]["mean_abs_error"] < 0.5 * s["mean_ttft"]["closed_form_mean_abs_error"]
    assert s["mean_tpot"]["mean_abs_error"] < 0.5 * s["mean_tpot"]["closed_form_mean_abs_error"]
