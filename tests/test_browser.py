"""The app in a real Chromium (Debian's `chromium`, driven by Playwright for Python): upload an image, Generate,
see coloured tokens and filled stats; run the drafter race. Screenshots go to test-artifacts/.

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
