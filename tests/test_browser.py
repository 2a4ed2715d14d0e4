"""The app in a real Chromium (Debian's `chromium`, driven by Playwright for Python): upload an image, Generate,
see coloured tokens and filled stats; run the drafter race; on the REAP tab, score, release the ratio slider at a new
position with the mouse and see the heatmap's crossed-out experts change. Screenshots go to test-artifacts/.

    apt-get install -y chromium && pip install playwright     # no `playwright install`: the system browser is used
    python -m pytest -q tests/test_browser.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)")
CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# (layer:expert) of the experts crossed out on the saliency map, read from the plotly figure on the page.
MARKS = """() => {
  const plot = document.querySelector('#reap-heatmap .js-plotly-plot');
  const trace = plot && plot.data && plot.data.find(t => t.type === 'scatter');
  return trace ? trace.x.map((x, i) => `${trace.y[i]}:${x}`).sort() : null;
}"""
CURVE_AT = """ratio => {
  const plot = document.querySelector('#reap-curve .js-plotly-plot');
  return Boolean(plot && plot.layout && plot.layout.shapes && plot.layout.shapes[0].x0 === ratio);
}"""
FIRST_SCORING_MS = 600_000  # scoring the calibration set once; seconds on an idle machine, minutes on a busy one


@pytest.fixture(scope="module")
def page(app_url):
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                    args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(app_url)
        page.get_by_role("button", name="Generate").wait_for(timeout=30_000)
        yield page
        browser.close()


def test_generate_shows_coloured_tokens_and_stats(page, world_png):
    path, _ = world_png
    page.locator("#spec-image input[type=file]").set_input_files(str(path))
    page.locator("#spec-image img").first.wait_for(timeout=15_000)
    page.get_by_role("button", name="Generate").click()
    page.locator("#spec-tokens .spec-text .tok").first.wait_for(timeout=30_000)
    page.locator("#spec-stats .stat-value").first.wait_for(timeout=30_000)
    page.locator("#spec-plot .js-plotly-plot").first.wait_for(timeout=30_000)
    page.locator("#spec-output .wrap.hide").wait_for(state="attached", timeout=60_000)  # the progress is done
    page.screenshot(path=str(ARTIFACTS / "generate.png"), full_page=True)
    kinds = page.locator("#spec-tokens .spec-text .tok").evaluate_all("els => els.map(e => e.classList[1])")
    assert kinds and set(kinds) <= {"prefill", "plain", "accepted", "rejected", "correction", "bonus"}
    assert float(page.locator("#spec-stats .stat-value").first.inner_text()) >= 1.0  # τ
    hover = page.locator("#spec-tokens .spec-text .tok").first.get_attribute("title")
    assert hover.startswith("round 0")


def test_race_shows_lanes_and_verdict(page, world_png):
    path, _ = world_png
    page.get_by_role("tab", name="Drafter race").click()
    page.locator("#race-image input[type=file]").set_input_files(str(path))
    page.locator("#race-image img").first.wait_for(timeout=15_000)
    page.get_by_role("button", name="Race").click()
    page.locator("#race-board .lane").first.wait_for(timeout=30_000)
    page.locator("#race-verdict").get_by_text("AR", exact=False).wait_for(timeout=90_000)
    page.screenshot(path=str(ARTIFACTS / "race.png"), full_page=True)
    names = page.locator("#race-board .lane-name").all_inner_texts()
    assert names[0] == "AR" and page.locator("#race-board .lane .tok").count() > 0


def test_slider_release_updates_the_heatmap(page):
    page.get_by_role("tab", name="REAP pruning").click()
    page.get_by_role("button", name="Score & prune").click()
    page.wait_for_function(CURVE_AT, arg=0.5, timeout=FIRST_SCORING_MS)  # the default ratio, all outputs drawn
    before = page.evaluate(MARKS)
    assert len(before) == 4 * 8  # 0.5 of 16 experts in each of 4 layers

    slider = page.locator("#reap-ratio input[type=range]")
    box = slider.bounding_box()
    page.mouse.click(box["x"] + 0.3 * box["width"], box["y"] + box["height"] / 2)  # press and release near 0.25
    page.wait_for_function(f"() => {{ const m = ({MARKS})(); return m !== null && m.length !== {len(before)}; }}",
                           timeout=120_000)
    after = page.evaluate(MARKS)
    ratio = float(slider.input_value())
    assert len(after) == 4 * round(16 * ratio) and set(after) < set(before)  # REAP: fewer removed, same ranking
    page.locator("#reap-summary").get_by_text(f"ratio {ratio:.1%}").wait_for(timeout=10_000)
    assert "math" in page.locator("#reap-quality").inner_text()
    page.wait_for_function(CURVE_AT, arg=ratio, timeout=120_000)  # the event's last output: all of it is drawn
    page.screenshot(path=str(ARTIFACTS / "reap.png"), full_page=True)
