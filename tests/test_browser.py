"""The app in a real Chromium (Debian's `chromium`, driven by Playwright for Python): upload an image, Generate,
see exactly the tokens and τ the engine produced; step the replay back and see each round's draft as the API
reports it; draw a DREAM tree round with one node per drafted token; run the drafter race; on the REAP tab, score,
release the ratio slider at a new position with the mouse and see the heatmap's crossed-out experts change, and
click an expert to inspect it. Screenshots go to test-artifacts/; README's picture of a run in progress goes to
docs/img/app.png too when SPECULUM_DOCS_IMG=1.

    apt-get install -y chromium && pip install playwright     # no `playwright install`: the system browser is used
    python -m pytest -q tests/test_browser.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from gradio_client import handle_file

from core.world import scenes

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)")
CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
DOCS_IMG = ARTIFACTS.parent / "docs" / "img" / "app.png"
TOKENS = "() => document.querySelectorAll('#spec-tokens .spec-text .tok').length"
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


def _events(client, path, prompt, drafter="massv", drafting="chain") -> list[dict]:
    """The round events /generate returns for the request the page makes (greedy, so the same rounds)."""
    args = (handle_file(str(path)), prompt, "embedded", drafter, 4, 0.0, 1.0, 0, 128, 0.75, drafting, 4, 16, 0)
    return client.predict(*args, api_name="/generate")[5]


def _kinds(events: list[dict]) -> list[str]:
    """The token view's classes, token by token: a chain's accepted drafts, its rejected one, then the target's."""
    kinds = []
    for e in events:
        chain = [d for d in e["drafted"] if d["status"] != "not reached"] if not e["tree"] else \
            [d for d in e["drafted"] if d["status"] == "accepted"] + [d for d in e["drafted"] if d["status"] == "rejected"][:1]
        kinds += [d["status"] for d in chain][: len(e["emitted"]) + 1]
        kinds += [e["kind"]] * (len(e["emitted"]) - e["accepted"])
    return kinds


def _generated(page, path, prompt):
    page.locator("#spec-image input[type=file]").set_input_files(str(path))
    page.locator("#spec-image img").first.wait_for(timeout=15_000)
    page.locator("#spec-prompt textarea").fill(prompt)
    page.get_by_role("button", name="Generate").click()
    page.locator("#spec-replay-view .replay-head").wait_for(timeout=120_000)  # the run's last output: the replay


def test_a_run_in_progress_streams_its_tokens(page, client, tmp_path):
    """The page mid-run, paced at 500 ms a round: coloured tokens are on screen while more are still arriving."""
    sample = scenes.sample("heldout", 0)  # a caption: rounds enough to catch one mid-run
    path, prompt = tmp_path / "caption.png", sample.prompt
    sample.image.save(path)
    total = len(_kinds(_events(client, path, prompt)))
    page.locator("#spec-pace").get_by_text("500 ms").click()
    page.locator("#spec-image input[type=file]").set_input_files(str(path))
    page.locator("#spec-prompt textarea").fill(prompt)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function(f"() => ({TOKENS})() >= 10", timeout=120_000)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "app-mid-run.png"))
    shown = page.evaluate(TOKENS)
    if os.environ.get("SPECULUM_DOCS_IMG") == "1":
        shutil.copyfile(ARTIFACTS / "app-mid-run.png", DOCS_IMG)
    assert shown < total  # the shot was taken mid-run
    page.wait_for_function(f"() => ({TOKENS})() === {total}", timeout=120_000)
    page.locator("#spec-replay-view .replay-head").wait_for(timeout=120_000)
    page.reload()  # the next tests wait for a run's replay: none may be on the page before theirs
    page.get_by_role("button", name="Generate").wait_for(timeout=30_000)


def test_generate_shows_the_engines_tokens_and_tau(page, client, world_png):
    path, prompt = world_png
    events = _events(client, path, prompt)
    _generated(page, path, prompt)
    page.screenshot(path=str(ARTIFACTS / "generate.png"), full_page=True)
    kinds = page.locator("#spec-tokens .spec-text .tok").evaluate_all("els => els.map(e => e.classList[1])")
    assert kinds == _kinds(events)
    tau = sum(len(e["emitted"]) for e in events) / len(events)
    assert page.locator("#spec-stats .stat-value").first.inner_text() == f"{tau:.2f}"
    hover = page.locator("#spec-tokens .spec-text .tok").first.get_attribute("title")
    assert hover.startswith("round 0")


DRAFT = "() => [...document.querySelectorAll('#spec-replay-view .draft-tok')].map(e => [e.classList[1], e.querySelector('.draft-text').textContent])"


def test_replay_shows_each_rounds_draft_as_the_api_reports_it(page, client, world_png):
    path, prompt = world_png
    events = _events(client, path, prompt)
    last = len(events) - 1
    assert page.locator("#spec-replay-round input[type=range]").get_attribute("max") == str(last)
    for k in range(last, max(last - 4, -1), -1):  # the last rounds, stepping back one at a time
        page.locator("#spec-replay-view .replay-head").get_by_text(f"Round {k} of {last}").wait_for(timeout=10_000)
        assert page.evaluate(DRAFT) == [[d["status"].replace(" ", "-"), d["text"]] for d in events[k]["drafted"]]
        shown = page.locator("#spec-replay-view .replay-emitted").inner_text()
        assert shown == "".join(e["text"] for e in events[k]["emitted"]).strip()
        page.locator("#spec-replay-prev").click()
    page.locator("#spec-replay").first.screenshot(path=str(ARTIFACTS / "replay.png"))


NODES = "() => { const p = document.querySelector('#spec-tree .js-plotly-plot'); const t = p && p.data.find(t => t.name === 'drafted'); return t ? [t.x.length, p.layout.title.text] : null; }"


def test_a_tree_round_draws_one_node_per_drafted_token(page, client, world_png):
    path, prompt = world_png
    events = _events(client, path, prompt, "dream", "tree")
    page.get_by_label("Drafter").click()
    page.get_by_role("option", name="dream", exact=False).first.click()
    page.get_by_text("Draft trees and DREAM").click()
    page.locator("#spec-drafting").get_by_role("radio", name="tree").check()
    _generated(page, path, prompt)
    tree_round = max(range(len(events)), key=lambda k: len(events[k]["drafted"]) if events[k]["tree"] else -1)
    assert events[tree_round]["tree"]
    for _ in range(len(events) - 1 - tree_round):
        page.locator("#spec-replay-prev").click()
    title = f"round {tree_round}: the drafted tree ({len(events[tree_round]['drafted'])} tokens)"
    page.wait_for_function(f"() => {{ const n = ({NODES})(); return n && n[1] === {title!r}; }}", timeout=20_000)
    assert page.evaluate(NODES)[0] == len(events[tree_round]["drafted"])
    page.locator("#spec-tree").first.screenshot(path=str(ARTIFACTS / "tree.png"))


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


RACE_DRAFT = DRAFT.replace("#spec-replay-view", "#race-replay-view")


def test_race_replay_steps_through_each_lane(page, client, world_png):
    path, prompt = world_png
    page.locator("#race-verdict").get_by_text("Lossless", exact=False).wait_for(timeout=90_000)  # the race above
    page.locator("#race-prompt textarea").fill(prompt)
    page.get_by_role("button", name="Race").click()
    page.locator("#race-verdict").get_by_text("Lossless", exact=False).wait_for(timeout=90_000)
    page.locator("#race-replay-view .replay-head").wait_for(timeout=20_000)
    drafters = page.locator("#race-board .lane-name").all_inner_texts()[1:]
    events = client.predict(handle_file(str(path)), prompt, drafters, 4, 128, api_name="/race")[3]
    page.locator("#race-replay-lane input").click()
    assert page.get_by_role("option").all_inner_texts()[0] == "AR"
    for lane in ("AR", drafters[0]):
        page.locator("#race-replay-lane input").click()
        page.get_by_role("option", name=lane, exact=True).click()
        page.locator("#race-replay-view .replay-head").get_by_text(f"Round 0 of {len(events[lane]) - 1}").wait_for(
            timeout=10_000)
        page.locator("#race-replay-next").click()
        page.locator("#race-replay-view .replay-head").get_by_text(f"Round 1 of {len(events[lane]) - 1}").wait_for(
            timeout=10_000)
        assert page.evaluate(RACE_DRAFT) == [[d["status"].replace(" ", "-"), d["text"]] for d in events[lane][1]["drafted"]]
    page.locator("#race-replay").first.screenshot(path=str(ARTIFACTS / "race-replay.png"))


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


CELL = """([layer, expert]) => { const p = document.querySelector('#reap-heatmap .js-plotly-plot');
  const x = p._fullLayout.xaxis, y = p._fullLayout.yaxis; return [x._offset + x.l2p(expert), y._offset + y.l2p(layer)]; }"""


def test_clicking_an_expert_shows_its_numbers(page):
    from core.reap.lab import lab_for

    page.get_by_role("tab", name="REAP pruning").click()
    if page.evaluate(MARKS) is None:  # run alone: score first
        page.get_by_role("button", name="Score & prune").click()
        page.wait_for_function(CURVE_AT, arg=0.5, timeout=FIRST_SCORING_MS)
    ratio = float(page.locator("#reap-ratio input[type=range]").input_value())
    for layer, expert in ((2, 14), (1, 3)):
        expected = lab_for("embedded").inspect("mixed", "reap", ratio, layer, expert)
        x, y = page.evaluate(CELL, [layer, expert])
        box = page.locator("#reap-heatmap .js-plotly-plot").bounding_box()
        page.mouse.click(box["x"] + x, box["y"] + y)
        head = page.locator("#reap-inspector-view .inspect-head")
        head.get_by_text(f"Layer {layer}, expert {expert}").wait_for(timeout=20_000)
        assert expected.fate in head.inner_text()
        values = page.locator("#reap-inspector-view .stat-value").all_inner_texts()
        assert values == [f"{expected.saliency:.4g}", f"{expected.reap:.4g}", f"{expected.frequency:.1%}",
                          f"{expected.mean_gate:.3f}", f"{expected.max_activation:.4g}"]
        text = page.locator("#reap-inspector-tokens").first.inner_text()
        rows = [c for c in text.split("occurrences in context", 1)[1].split("\n") if c.strip()]
        assert rows[1::3] == [str(t["count"]) for t in expected.top_tokens]  # token, count, contexts per row
    page.locator("#reap-inspector").first.screenshot(path=str(ARTIFACTS / "reap-inspector.png"))
