"""UI latency benchmark: time from clicking Generate to the first coloured token on screen, on the embedded
default (the app launched in-process, warmed up as `python app.py` does), plus the same through the API.

    OMP_NUM_THREADS=1 python scripts/bench_ui.py --runs 5 > runs/bench_ui.json

Browser figures need Playwright for Python and Debian's chromium (see tests/test_browser.py); without them only
the API figures are reported. Prints one JSON object. Goal: first token < 1.5 s after the click.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradio_client import Client, handle_file  # noqa: E402

from core import world  # noqa: E402
from ui import models  # noqa: E402
from ui.app import launch  # noqa: E402

GOAL_S = 1.5
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


def bench_browser(url: str, image: Path, runs: int) -> dict:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "playwright is not installed"}
    chromium = shutil.which("chromium")
    if chromium is None:
        return {"skipped": "chromium is not installed"}
    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for _ in range(runs):
            page.goto(url)  # a fresh page each run: no tokens from the previous answer on screen
            page.locator("#spec-image input[type=file]").set_input_files(str(image))
            page.locator("#spec-image img").first.wait_for()
            results.append(page.evaluate(CLICK_AND_WATCH))
        browser.close()
    return {key: _summary([r[key] for r in results]) for key in ("first_token_s", "first_draft_token_s", "done_s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sample = world.sample("heldout", 0)
    image = Path(tempfile.mkdtemp()) / "caption.png"
    sample.image.save(image)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    drafter = models.default_drafter()
    try:
        browser = bench_browser(url, image, args.runs)
        api = bench_api(url, image, sample.prompt, drafter, args.runs)
    finally:
        with contextlib.redirect_stdout(sys.stderr):  # Gradio announces the close on stdout; stdout is the JSON
            demo.close()
    first = browser.get("first_token_s", {}).get("max")
    print(json.dumps({
        "model": models.EMBEDDED, "drafter": drafter, "prompt": sample.prompt, "max_new_tokens": 64,
        "goal_first_token_s": GOAL_S, "goal_met": first is not None and first < GOAL_S,
        "browser": browser, "api": api,
    }, indent=1))


if __name__ == "__main__":
    main()
