"""UI latency benchmark on the embedded default (the app launched in-process, warmed up as `python app.py` does):
  spec       time from clicking Generate to the first coloured token on screen, plus the same through the API
  reap       time from releasing the REAP tab's ratio slider to the updated heatmap and quality table, from cached
             scores (scored once first, into a fresh cache), over several ratios; plus the same through the API
  replay     after a DREAM tree run, time from a replay step ("◀ step") to the updated round view, and to its tree
  inspector  time from picking a layer and expert to the expert inspector's numbers and tokens

    OMP_NUM_THREADS=1 python scripts/bench_ui.py --runs 5 > runs/bench_ui.json
    python scripts/bench_ui.py --parts replay,inspector

Browser figures need Playwright and Debian's chromium (tests/test_browser.py); without them only API figures are
reported. Prints one JSON object; screenshots go to test-artifacts/. Goals: first token < 1.5 s after the click;
heatmap and quality < 2 s after the slider's release; replay step < 150 ms; expert inspector < 500 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradio_client import Client, handle_file  # noqa: E402

from core.models.loading import recorded  # noqa: E402
from core.reap.lab import lab_for  # noqa: E402
from core.reap.results import model_info  # noqa: E402
from core.world import scenes  # noqa: E402
from ui import models  # noqa: E402
from ui.app import launch  # noqa: E402

GOAL_S = 1.5
REAP_GOAL_S = 2.0
REPLAY_GOAL_S = 0.15
INSPECTOR_GOAL_S = 0.5
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
INSPECT_CELLS = ((2, 14), (1, 3), (0, 0), (3, 5), (2, 7))
REAP_MODEL = "embedded"  # core/reap/lab.py's name for the embedded MoE
# Multiples of 1/16 (the embedded MoE's expert count), none of them the tab's default 0.5 used for the warm-up.
REAP_RATIOS = (0.125, 0.25, 0.375, 0.625, 0.75)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# Clicks Generate, then checks every animation frame (i.e. what could be painted) for the first token of each kind.
CLICK_AND_WATCH = """async () => {
  const t0 = performance.now();
  [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Generate').click();
  const seen = {};
  let started = false;
  const until = (sel) => seen[sel] ?? null;
  await new Promise(resolve => {
    const tick = () => {
      for (const sel of ['#spec-tokens .spec-text .tok', '#spec-tokens .spec-text .tok.accepted, #spec-tokens .spec-text .tok.rejected']) {
        if (!(sel in seen) && document.querySelector(sel)) seen[sel] = (performance.now() - t0) / 1000;
      }
      // the progress shown on the output text box appears when the run starts and hides when it ends
      const wrap = document.querySelector('#spec-output .wrap');
      started = started || (wrap && !wrap.classList.contains('hide'));
      const done = started && wrap.classList.contains('hide');
      if (done || performance.now() - t0 > 60000) { seen.done = (performance.now() - t0) / 1000; resolve(); }
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  return {first_token_s: until('#spec-tokens .spec-text .tok'),
          first_draft_token_s: until('#spec-tokens .spec-text .tok.accepted, #spec-tokens .spec-text .tok.rejected'),
          done_s: seen.done};
}"""


# Releases the ratio slider at `ratio` as a pointer would, then checks every animation frame for the heatmap's
# crossed-out experts and the summary above the quality table (updated by the same event) to show the new ratio,
# and for the curve's marker (the event's last output) to reach it.
RELEASE_AND_WATCH = """async ([ratio, experts, layers]) => {
  const range = document.querySelector('#reap-ratio input[type=range]');
  const marks = () => {
    const plot = document.querySelector('#reap-heatmap .js-plotly-plot');
    const trace = plot && plot.data && plot.data.find(t => t.type === 'scatter');
    return trace ? trace.x.length : -1;
  };
  const curveAt = () => {
    const plot = document.querySelector('#reap-curve .js-plotly-plot');
    return plot && plot.layout && plot.layout.shapes && plot.layout.shapes.length && plot.layout.shapes[0].x0;
  };
  const label = `ratio ${(100 * ratio).toFixed(1)}%`;
  const t0 = performance.now();
  range.value = String(ratio);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  range.dispatchEvent(new PointerEvent('pointerup', {bubbles: true}));
  let first = null;
  await new Promise(resolve => {
    const tick = () => {
      const now = (performance.now() - t0) / 1000;
      // textContent, not innerText: reading it every frame must not force a layout the page would not do anyway
      if (first === null && marks() === Math.round(ratio * experts) * layers
          && document.querySelector('#reap-summary').textContent.includes(label)) first = now;
      if ((first !== null && curveAt() === ratio) || now > 300) resolve(); else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  return {heatmap_and_quality_s: first, done_s: (performance.now() - t0) / 1000};
}"""


# Clicks the replay's step-back button, then checks every animation frame for the round view and the draft figure
# to show the new round.
STEP_AND_WATCH = """async () => {
  const head = () => document.querySelector('#spec-replay-view .replay-head').textContent;
  const title = () => { const p = document.querySelector('#spec-tree .js-plotly-plot');
                        return p && p.layout && p.layout.title ? p.layout.title.text : ''; };
  const round = Number(head().match(/^Round (\\d+)/)[1]) - 1;
  const t0 = performance.now();
  document.querySelector('#spec-replay-prev').click();
  let view = null;
  await new Promise(resolve => {
    const tick = () => {
      const now = (performance.now() - t0) / 1000;
      if (view === null && head().startsWith(`Round ${round} `)) view = now;
      if ((view !== null && title().startsWith(`round ${round}:`)) || now > 10) resolve(); else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  return {view_s: view, figure_s: (performance.now() - t0) / 1000};
}"""
# Types a layer and an expert into the inspector's inputs (what a click on the heatmap does), then checks every
# animation frame for the inspector to show that expert.
INSPECT_AND_WATCH = """async ([layer, expert]) => {
  const put = (id, value) => {
    const input = document.querySelector(`#${id} input`);
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(input, value);
    input.dispatchEvent(new Event('input', {bubbles: true}));
    input.dispatchEvent(new Event('blur', {bubbles: true}));
  };
  const t0 = performance.now();
  put('reap-inspect-layer', layer);
  put('reap-inspect-expert', expert);
  const label = `Layer ${layer}, expert ${expert}`;
  await new Promise(resolve => {
    const tick = () => {
      const head = document.querySelector('#reap-inspector-view .inspect-head');
      if ((head && head.textContent.includes(label)) || performance.now() - t0 > 10000) resolve();
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  return (performance.now() - t0) / 1000;
}"""


def _summary(values: list[float | None]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"runs": 0}
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3), "runs": len(values),
            "all": [round(v, 3) for v in values]}


def bench_api(url: str, image: Path, prompt: str, drafter: str, runs: int) -> dict:
    client = Client(url, verbose=False)
    first, total = [], []
    for _ in range(runs):
        start = time.perf_counter()
        job = client.submit(handle_file(image), prompt, models.EMBEDDED, drafter, 4, 0.0, 1.0, 0, 64, api_name="/generate")
        for i, _event in enumerate(job):
            if i == 0:
                first.append(time.perf_counter() - start)
        total.append(time.perf_counter() - start)
    return {"first_event_s": _summary(first), "whole_answer_s": _summary(total)}


def browser_unavailable() -> str | None:
    """Why the browser measurements cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed"
    return None if shutil.which("chromium") else "chromium is not installed"


@contextlib.contextmanager
def browser_page():
    """A page in Debian's chromium, driven by Playwright (check browser_unavailable() first)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def bench_browser(url: str, image: Path, runs: int) -> dict:
    if reason := browser_unavailable():
        return {"skipped": reason}
    results = []
    with browser_page() as page:
        for _ in range(runs):
            page.goto(url)  # a fresh page each run: no tokens from the previous answer on screen
            page.locator("#spec-image input[type=file]").set_input_files(str(image))
            page.locator("#spec-image img").first.wait_for()
            results.append(page.evaluate(CLICK_AND_WATCH))
    return {key: _summary([r[key] for r in results]) for key in ("first_token_s", "first_draft_token_s", "done_s")}


def bench_reap_api(url: str, method: str) -> dict:
    """First event (heatmap + quality) and whole answer per ratio, first visit (quality evaluated) and revisit."""
    client = Client(url, verbose=False)
    out = {}
    for visit in ("first_visit", "revisit"):
        first, total = [], []
        for ratio in REAP_RATIOS:
            start = time.perf_counter()
            for i, _event in enumerate(client.submit(REAP_MODEL, "mixed", method, ratio, "layer", 0, api_name="/reap")):
                if i == 0:
                    first.append(time.perf_counter() - start)
            total.append(time.perf_counter() - start)
        out[visit] = {"heatmap_and_quality_s": _summary(first), "whole_answer_s": _summary(total)}
    return out


def bench_reap_browser(url: str) -> dict:
    if reason := browser_unavailable():
        return {"skipped": reason}
    with browser_page() as page:
        page.goto(url)
        page.get_by_role("tab", name="REAP pruning").click()
        page.locator("#reap-heatmap .js-plotly-plot").wait_for()  # the tab is drawn (its placeholder chart)
        info = model_info(REAP_MODEL)
        results = [page.evaluate(RELEASE_AND_WATCH, [ratio, info.experts, info.layers]) for ratio in REAP_RATIOS]
    return {key: _summary([r[key] for r in results]) for key in ("heatmap_and_quality_s", "done_s")}


def bench_reap_core(method: str) -> dict:
    """One slider release inside the server (core/reap/lab.py's view, quality not cached yet) in CPU seconds as
    well as wall time: with OMP_NUM_THREADS=1 the CPU time is the wall time the release takes on an idle core,
    while the browser and API figures include whatever else the machine is running."""
    lab = lab_for(REAP_MODEL)  # the app's own Lab: this process is the server
    cpu, wall = [], []
    for ratio in REAP_RATIOS:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        lab.view("mixed", method, ratio)
        cpu.append(time.process_time() - cpu0)
        wall.append(time.perf_counter() - wall0)
    return {"cpu_s": _summary(cpu), "wall_s": _summary(wall)}


def bench_reap(url: str) -> dict:
    """Scores once (warm-up at the tab's default ratio), then REAP in the browser, EAN through the API and
    frequency in core, so each measures ratios whose quality is not cached yet."""
    start = time.perf_counter()
    Client(url, verbose=False).predict(REAP_MODEL, "mixed", "reap", 0.5, api_name="/reap")
    warmup = time.perf_counter() - start
    browser = bench_reap_browser(url)
    api = bench_reap_api(url, "ean")
    core = bench_reap_core("frequency")
    worst = browser.get("heatmap_and_quality_s", {}).get("max")
    return {"model": REAP_MODEL, "calibration": "mixed", "ratios": list(REAP_RATIOS),
            "scoring_warmup_s": round(warmup, 3), "goal_s": REAP_GOAL_S,
            "goal_met": worst is not None and worst < REAP_GOAL_S,
            "browser_reap_first_visit": browser, "api_ean": api, "core_frequency_first_visit": core}


def bench_replay(url: str, image: Path, prompt: str, steps: int) -> dict:
    if reason := browser_unavailable():
        return {"skipped": reason}
    ARTIFACTS.mkdir(exist_ok=True)
    with browser_page() as page:
        page.goto(url)
        page.locator("#spec-image input[type=file]").set_input_files(str(image))
        page.locator("#spec-image img").first.wait_for()
        page.locator("#spec-prompt textarea").fill(prompt)
        page.get_by_label("Drafter").click()
        page.get_by_role("option", name="dream", exact=False).first.click()
        page.get_by_text("DREAM and EAGLE-3 settings").click()
        page.get_by_role("radio", name="tree").check()
        page.get_by_role("button", name="Generate").click()
        page.locator("#spec-replay-view .replay-head").wait_for(timeout=120_000)
        rounds = int(page.locator("#spec-replay-round input[type=range]").get_attribute("max")) + 1
        results = [page.evaluate(STEP_AND_WATCH) for _ in range(min(steps, rounds - 1))]
        page.locator("#spec-replay").first.screenshot(path=str(ARTIFACTS / "bench-replay.png"))
        page.locator("#spec-tree").first.screenshot(path=str(ARTIFACTS / "bench-tree.png"))
    worst = max((r["view_s"] for r in results if r["view_s"] is not None), default=None)
    return {"drafter": "dream:tree=4x16", "rounds": rounds, "goal_s": REPLAY_GOAL_S,
            "goal_met": worst is not None and worst < REPLAY_GOAL_S,
            **{key: _summary([r[key] for r in results]) for key in ("view_s", "figure_s")}}


def bench_inspector(url: str) -> dict:
    if reason := browser_unavailable():
        return {"skipped": reason}
    ARTIFACTS.mkdir(exist_ok=True)
    with browser_page() as page:
        page.goto(url)
        page.get_by_role("tab", name="REAP pruning").click()
        page.get_by_role("button", name="Score & prune").click()
        page.locator("#reap-inspector-view .inspect-head").wait_for(timeout=600_000)  # scored, then inspected
        times = [page.evaluate(INSPECT_AND_WATCH, list(cell)) for cell in INSPECT_CELLS]
        page.locator("#reap-inspector").first.screenshot(path=str(ARTIFACTS / "bench-inspector.png"))
    return {"cells": [list(c) for c in INSPECT_CELLS], "goal_s": INSPECTOR_GOAL_S,
            "goal_met": max(times) < INSPECTOR_GOAL_S, "inspect_s": _summary(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--parts", default="spec,reap,replay,inspector", help="comma-separated: spec, reap, replay, inspector")
    parser.add_argument("--image", help="spec, replay: upload this image file instead of a held-out world scene")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    # A fresh score cache, so the REAP figures start from scores computed in this run, not an older model's.
    os.environ["SPECULUM_CACHE"] = tempfile.mkdtemp(prefix="speculum-bench-")
    sample = scenes.sample("heldout", 0)
    image = Path(args.image) if args.image else Path(tempfile.mkdtemp()) / "caption.png"
    if not args.image:
        sample.image.save(image)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    drafter = models.default_drafter()
    result = {}
    try:
        if "spec" in parts:
            browser = bench_browser(url, image, args.runs)
            api = bench_api(url, image, sample.prompt, drafter, args.runs)
            first = browser.get("first_token_s", {}).get("max")
            result |= {"model": models.EMBEDDED, "drafter": drafter, "image": args.image or "a held-out world scene",
                       "prompt": sample.prompt, "max_new_tokens": 64, "goal_first_token_s": GOAL_S,
                       "goal_met": first is not None and first < GOAL_S, "browser": browser, "api": api}
        if "reap" in parts:
            result["reap"] = bench_reap(url)
        if "replay" in parts:
            result["replay"] = bench_replay(url, image, sample.prompt, steps=12)
        if "inspector" in parts:
            result["inspector"] = bench_inspector(url)
    finally:
        with contextlib.redirect_stdout(sys.stderr):  # Gradio announces the close on stdout; stdout is the JSON
            demo.close()
    print(json.dumps(recorded(result), indent=1))


if __name__ == "__main__":
    main()
