"""End to end: `kvcalc serve` in a real process, the page in the distribution's headless Chromium (apt `chromium`),
driven by playwright with `executable_path` (no browser download). The numbers the page shows must be the CLI's for
the same inputs, the plots must draw and answer hover. The screenshots in docs/img/ come from these runs with
KVCALC_WRITE_SCREENSHOTS=1; otherwise they go to a temporary folder, so a test run never edits tracked files.

Skips, saying why, when chromium, playwright or the web extra is missing (.ci/run installs them)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (python3 -m pip install '.[web]')")
pytest.importorskip("uvicorn", reason="the web extra is not installed (python3 -m pip install '.[web]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the [dev] extra)")

from cli_helper import invoke  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMG = (ROOT / "docs" / "img" if os.environ.get("KVCALC_WRITE_SCREENSHOTS") == "1"
       else Path(tempfile.mkdtemp(prefix="kvcalc-web-shots-")))
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
GiB = 2**30
CHROMIUM = next((p for p in (os.environ.get("KVCALC_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                             shutil.which("chromium-browser")) if p and os.path.exists(p)), None)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`kvcalc serve` as a user starts it, on a free loopback port."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "kvcalc.cli", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/api/info", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"kvcalc serve did not start: {proc.stdout.read()}")
        time.sleep(0.2)
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def cli_json(*args) -> dict:
    code, out, err = invoke(["plan", *args, "--json"])
    assert code == 0, err
    return json.loads(out)


def cli_cells(row: dict, batch: int) -> dict:
    """A plan row as `kvcalc plan` prints it (kvcalc/render.py's formats: fits_text, decode_text)."""
    from kvcalc.units import fmt_shortfall

    v = row.get("vllm_breakdown")
    fits = ("yes" if row["fits"] else f"no: {row['max_concurrency']} of {batch}" if v and v["fits"]
            and row["max_concurrency"] else f"no: does not start ({fmt_shortfall(row['shortfall_bytes'])})" if v
            else f"no ({fmt_shortfall(row['shortfall_bytes'])})")
    # a capacity range (trust.capacity_range: a cold compile start on vLLM 0.27-0.30) as render.py prints it: low-high
    span = (row.get("trust") or {}).get("capacity_range")
    capacity = "-" if row["kv_capacity_tokens"] is None else f"{int(row['kv_capacity_tokens']):,}"
    conc = "-" if row["max_concurrency"] is None else str(row["max_concurrency"])
    if span and row["kv_capacity_tokens"] is not None:
        capacity = f"{span['kv_capacity_tokens_low']:,}-{capacity}"
        if span["max_concurrency_low"] != span["max_concurrency_high"]:
            conc = f"{span['max_concurrency_low']}-{conc}"
    return {
        "config": row["config"], "engine": row["engine"],
        "weights_bytes": f"{row['weights_bytes'] / GiB:.2f}",
        "kv_bytes_per_token": f"{row['kv_bytes_per_token']:,.0f}",
        "kv_capacity_tokens": capacity,
        "max_concurrency": conc,
        "hf_memory_bytes": "-" if row["hf_memory_bytes"] is None else f"{row['hf_memory_bytes'] / GiB:.2f}",
        "decode_tokens_per_s": f"{row['decode_tokens_per_s']:,.1f}"
                               + (f" @{row['decode_batch']}" if row["decode_batch"] < batch else ""),
        "fits": fits,
        "quality_risk": row["quality_risk"], "verdicts": ", ".join(row["verdicts"]),
        "trust": trust_text(row),
    }


def trust_text(row: dict) -> str:
    """The speed range as kvcalc/render.py's _range prints it, with the evidence label the CLI prints below the table."""
    t = (row.get("trust") or {}).get("speed")
    if not t:
        return "-"
    if t["low"] is None or t["high"] is None:
        return f"no range ({t['label']})"
    pct = lambda x: f"{'+' if x >= 0 else '-'}{abs(round(x * 100))}%"  # noqa: E731 (JS Math.round, as the page)
    return f"{pct(t['low'])}/{pct(t['high'])} ({t['label']})"


def wait_ready(pg, generation_before: str | None = None) -> None:
    """Wait until the page has drawn the answer to its current inputs (status set, no request in flight)."""
    # functions, not expression strings: an expression would be eval'ed, which the page's CSP forbids
    pg.wait_for_function("() => document.body.dataset.state === 'ready' || document.body.dataset.state === 'error'")
    pg.wait_for_function("() => !document.getElementById('status').textContent.startsWith('computing')")
    pg.wait_for_timeout(100)


def settle(pg) -> None:
    """After typing: let the debounce fire and the new answer arrive."""
    pg.wait_for_timeout(450)
    wait_ready(pg)


def shown_rows(pg, gpu: str) -> list[dict]:
    return pg.eval_on_selector_all(
        f"section.gpu-block[data-gpu='{gpu}'] table.plan:not(.sweep) tbody tr",
        "rows => rows.map(tr => Object.fromEntries([...tr.querySelectorAll('td[data-field]')]"
        ".map(td => [td.dataset.field, {text: td.textContent, value: JSON.parse(td.dataset.value)}])))")


def assert_page_equals_cli(pg, gpu: str, expected: dict) -> None:
    rows = shown_rows(pg, gpu)
    assert len(rows) == len(expected["rows"]) > 0
    for shown, row in zip(rows, expected["rows"]):
        assert {k: v["text"] for k, v in shown.items()} == cli_cells(row, expected["batch"])
        assert {k: v["value"] for k, v in shown.items()} == {k: row[k] for k in shown}


def test_default_view_shows_the_cli_numbers(server, page):
    page.goto(server + "/?gpu=t4&context=32k")
    wait_ready(page)
    assert page.get_attribute("body", "data-state") == "ready"
    assert_page_equals_cli(page, "t4", cli_json("--gpu", "t4", "--context", "32k"))
    page.screenshot(path=str(IMG / "web-page.png"), full_page=True)


def test_typing_updates_the_table_and_the_link_reproduces_it(server, page, browser):
    page.goto(server + "/?gpu=t4&context=8k")
    wait_ready(page)
    page.fill("#model", "qwen3-8b")
    page.fill("#context", "16k")
    page.fill("#batch", "4")
    page.select_option("#kv", "fp8")
    page.check("#gpu-list input[value='l4']")
    page.check("#gpu-list input[value='h100-sxm']")
    page.uncheck("#gpu-list input[value='t4']")
    settle(page)
    for gpu in ("l4", "h100-sxm"):
        assert_page_equals_cli(page, gpu, cli_json("--gpu", gpu, "--model", "qwen3-8b", "--context", "16k",
                                                   "--batch", "4", "--kv", "fp8"))
    url = page.url
    assert "model=qwen3-8b" in url and "context=16k" in url and "kv=fp8" in url and "batch=4" in url
    page.screenshot(path=str(IMG / "web-compare.png"), full_page=True)
    other = browser.new_page(viewport={"width": 1400, "height": 1000})
    other.goto(url)
    wait_ready(other)
    for gpu in ("l4", "h100-sxm"):
        assert shown_rows(other, gpu) == shown_rows(page, gpu)
    other.close()


def test_capacity_range_shows_as_the_cli_prints_it(server, page):
    """vLLM 0.29, a cold compile start of a tied-embedding model: the KV capacity and max conc. cells are the
    CLI's low-high (trust.capacity_range), their tooltip says what the low end is."""
    page.goto(server + "/?gpu=rtx-4090&model=qwen2.5-1.5b&context=32k&vllm_version=0.29")
    wait_ready(page)
    expected = cli_json("--gpu", "rtx-4090", "--model", "qwen2.5-1.5b", "--context", "32k", "--vllm-version", "0.29")
    assert any(r["trust"]["capacity_range"] for r in expected["rows"])
    assert_page_equals_cli(page, "rtx-4090", expected)
    cell = page.locator("section.gpu-block[data-gpu='rtx-4090'] tr[data-engine='vllm'] "
                        "td[data-field='kv_capacity_tokens']").first
    assert "-" in cell.text_content() and "compile segment pinned" in cell.get_attribute("title")


def test_input_and_output_lengths_make_the_context(server, page):
    page.goto(server + "/?gpu=l4&model=llama-3.1-8b&input=12k&output=4k&batch=2&engine=vllm")
    wait_ready(page)
    assert page.is_checked("input[name=lengths][value=io]")
    assert_page_equals_cli(page, "l4", cli_json("--gpu", "l4", "--model", "llama-3.1-8b", "--context", "16k",
                                                "--batch", "2", "--engine", "vllm"))


def test_vllm_settings_reach_the_cli(server, page):
    page.goto(server + "/?gpu=a100-80gb&model=gemma-3-12b&context=8k")
    wait_ready(page)
    page.click("#vllm-settings summary")
    page.fill("#util", "0.8")
    page.fill("#max_num_seqs", "64")
    page.check("#enforce_eager")
    settle(page)
    assert_page_equals_cli(page, "a100-80gb", cli_json("--gpu", "a100-80gb", "--model", "gemma-3-12b", "--context",
                                                       "8k", "--util", "0.8", "--max-num-seqs", "64",
                                                       "--enforce-eager"))


def test_sglang_settings_reach_the_cli(server, page):
    """The SGLang block: --engine sglang rows at the user's mem_fraction_static are the CLI's, and the setting
    travels in the link."""
    page.goto(server + "/?gpu=h200&model=llama-3.1-8b&context=8k&engine=sglang")
    wait_ready(page)
    page.click("#sglang-settings summary")
    page.fill("#mem_fraction_static", "0.8")
    settle(page)
    assert_page_equals_cli(page, "h200", cli_json("--gpu", "h200", "--model", "llama-3.1-8b", "--context", "8k",
                                                  "--engine", "sglang", "--mem-fraction-static", "0.8"))
    assert "mem_fraction_static=0.8" in page.url


def test_bad_input_shows_the_cli_message(server, page):
    page.goto(server + "/?gpu=t4&context=8k")
    wait_ready(page)
    page.fill("#context", "32q")
    settle(page)
    assert page.get_attribute("body", "data-state") == "error"
    code, _, err = invoke(["plan", "--gpu", "t4", "--context", "32q"])
    assert code == 2
    status = page.inner_text("#status")
    assert status and status in err
    assert "invalid" in page.get_attribute("#context", "class")
    page.fill("#context", "32k")
    settle(page)
    assert page.get_attribute("body", "data-state") == "ready"


def test_plots_render_and_hover_shows_exact_values(server, page):
    page.goto(server + "/?gpu=l4&model=llama-3.1-8b&context=16k&batch=4")
    wait_ready(page)
    expected = cli_json("--gpu", "l4", "--model", "llama-3.1-8b", "--context", "16k", "--batch", "4")
    for plot in ("capacity", "speed", "memory"):
        svg = f"#plot-{plot}"
        assert page.get_attribute(svg, "data-rendered") == "chart"
        assert int(page.get_attribute(svg, "data-points")) > 5
    # capacity: the baseline point at 16k is the plan's max concurrency, and hovering it says so
    baseline = next(r for r in expected["rows"] if r["engine"] == "vllm" and r["config"] == "baseline")
    point = page.locator("#plot-capacity .point[data-series='baseline'][data-x='16384']")
    assert int(point.get_attribute("data-y")) == baseline["max_concurrency"]
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert page.is_visible("#tooltip")
    assert f"{baseline['max_concurrency']:,} request{'s' if baseline['max_concurrency'] != 1 else ''} at once" in page.inner_text("#tooltip")
    assert "context 16,384 tokens" in page.inner_text("#tooltip")
    # speed (one series per vLLM configuration, tokens/s per user): the point at batch 4 of a configuration that
    # holds the 4 requests is the plan's decode speed of all requests divided by the 4 users
    held = next(r for r in expected["rows"] if r["engine"] == "vllm" and r["decode_batch"] == 4)
    point = page.locator(f"#plot-speed .point[data-series='{held['config']}'][data-x='4']")
    assert float(point.get_attribute("data-y")) == pytest.approx(held["decode_tokens_per_s"] / 4)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert f"{held['decode_tokens_per_s']:,.1f} all requests" in page.inner_text("#tooltip")
    # memory: the KV segment of vLLM's baseline bar is the breakdown's KV bytes, to the byte
    seg = page.locator("#plot-memory rect.seg[data-segment='KV cache']").first
    kv_bytes = baseline["vllm_breakdown"]["available_kv_bytes"]
    assert int(seg.get_attribute("data-bytes")) == kv_bytes
    seg.hover()
    assert f"{kv_bytes:,} bytes" in page.inner_text("#tooltip")
    page.locator("#plot-capacity").scroll_into_view_if_needed()
    page.locator("#plots").screenshot(path=str(IMG / "web-plots.png"))


def test_explain_opens_for_any_row(server, page):
    page.goto(server + "/?gpu=t4&context=32k")
    wait_ready(page)
    code, out, err = invoke(["explain", "--gpu", "t4", "--context", "32k"])
    assert code == 0, err
    page.click("section.gpu-block[data-gpu='t4'] tr[data-config='baseline'][data-engine='hf'] button.explain-btn")
    page.wait_for_selector("#explain:not([hidden])")
    page.wait_for_function("() => document.getElementById('explain').dataset.key === 't4|baseline|hf'")
    text = page.inner_text("#explain-text")
    assert text.startswith("== baseline (BF16 weights, BF16 KV) on hf ==") and text.strip() in out
    assert "explain=t4%7Cbaseline%7Chf" in page.url
    page.click("section.gpu-block[data-gpu='t4'] tr[data-config='fp8-kv'][data-engine='vllm'] button.explain-btn")
    page.wait_for_function("() => document.getElementById('explain').dataset.key === 't4|fp8-kv|vllm'")
    assert page.inner_text("#explain-text").startswith("== FP8 KV on vllm ==")
    page.locator("#explain").screenshot(path=str(IMG / "web-explain.png"))


def test_pasted_config(server, page):
    path = CONFIGS / "Qwen--Qwen3-32B.json"
    page.goto(server + "/?gpu=h100-sxm&context=16k")
    wait_ready(page)
    page.check("input[name=source][value=config]")
    page.fill("#config-name", "my-qwen")
    page.fill("#config", path.read_text())
    settle(page)
    expected = cli_json("--model", str(path), "--gpu", "h100-sxm", "--context", "16k")
    assert_page_equals_cli(page, "h100-sxm", expected)
    assert "source=config" in page.url and "#config=" in page.url


def test_downloads_are_the_cli_outputs(server, page):
    page.goto(server + "/?gpu=l4&model=qwen3-8b&context=16k")
    wait_ready(page)
    with page.expect_download() as dl:
        page.click("#download-json")
    assert json.loads(Path(dl.value.path()).read_text()) == cli_json("--gpu", "l4", "--model", "qwen3-8b",
                                                                     "--context", "16k")
    with page.expect_download() as dl:
        page.click("#download-csv")
    code, out, err = invoke(["plan", "--gpu", "l4", "--model", "qwen3-8b", "--context", "16k", "--csv"])
    assert Path(dl.value.path()).read_bytes().decode() == out


def test_search_form_shows_the_cli_search(server, page):
    code, out, err = invoke(["search", "--model", "qwen3-8b", "--input-len", "2k", "--output-len", "512",
                             "--concurrency", "16", "--gpus", "l4,h100-sxm", "--json"])
    if code == 2 and "No such command" in err:
        pytest.skip("kvcalc search is not in this kvcalc")
    assert code == 0, err
    expected = json.loads(out)
    page.goto(server + "/?gpu=l4,h100-sxm&model=qwen3-8b&context=8k")
    wait_ready(page)
    assert page.is_visible("#search")
    page.fill("#s_input_len", "2k")
    page.fill("#s_output_len", "512")
    page.fill("#s_concurrency", "16")
    page.check("#s_ticked")
    page.click("#search-run")
    page.wait_for_selector("body[data-search=ready]", timeout=60000)
    rows = page.eval_on_selector_all("#search-out table tbody tr",
                                     "rows => rows.map(tr => [...tr.cells].map(td => td.textContent))")
    assert len(rows) == len(expected["results"]) > 0
    for shown, d in zip(rows, expected["results"]):
        assert shown[0] == str(d["rank"])
        assert shown[1].startswith(f"{d['replicas']} x {d['gpu']}")
        # the page prints util as JavaScript's String() does: 1.0 (vLLM 0.34's default) as "1", 0.92 as "0.92"
        assert shown[2:6] == [d["weights_format"], d["kv_format"], f"{d['util']:g}", str(d["max_num_seqs"])]
        assert shown[6] == f"{d['cost_per_hour']:,.2f}"
    assert expected["winner_command"] in page.inner_text("#search-out")
    assert "s_input_len=2k" in page.url and "search=1" in page.url
    page.locator("#search").screenshot(path=str(IMG / "web-search.png"))
