"""The Gradio app: a Blocks of tabs, each defined in its own ui/*_tab.py; every computation is a call into core/.

    python app.py                      # http://127.0.0.1:7860
    python -c "from ui.app import launch; launch(server_port=7861)"

Decoding events share one queue slot ("decode", 1 at a time by default) because tokens/s and the race's wall
times are only honest when runs do not share the CPU; set SPECULUM_CONCURRENCY to allow more on bigger machines.
"""

from __future__ import annotations

import ctypes
import os
import sys

import gradio as gr

from core.decoding.engine import SpeculativeEngine
from core.models.registry import load_drafter
from core.world import scenes
from ui import about_tab, models, race_tab, reap_tab, spec_tab
from ui.baseline import AR_REFERENCE
from ui.style import CSS

# Each tab module has TITLE and build().
TABS = (spec_tab, race_tab, reap_tab, about_tab)
# Gradio refuses bigger uploads before they reach disk; core.decoding.limits.MAX_PIXELS caps what is decoded. A 40-megapixel
# JPEG is 10-20 MB.
MAX_UPLOAD = "25mb"
M_ARENA_MAX = -8  # glibc's mallopt parameter number


def add_tabs(tabs=TABS) -> None:
    for tab in tabs:
        with gr.Tab(tab.TITLE):
            tab.build()


def build() -> gr.Blocks:
    with gr.Blocks(title="Speculum") as demo:
        gr.Markdown("# Speculum\nWatch a vision-language model decode speculatively, token by token, race its "
                    "drafters (text-only, MASSV, DREAM, EAGLE-3), and prune a mixture-of-experts model with REAP. Runs on tiny "
                    "embedded models trained on a synthetic world (see About); hub presets load where the hub is "
                    "reachable.")
        add_tabs()
    return demo.queue(default_concurrency_limit=int(os.environ.get("SPECULUM_CONCURRENCY", 1)), max_size=64)


def warm_up() -> None:
    """Load the embedded target and default drafter and decode once, so the first click pays no load time and
    "speedup vs AR" has a measured AR speed from the start."""
    sample = scenes.sample("heldout", 0)
    engine = SpeculativeEngine(models.target(models.EMBEDDED))
    # The first run pays one-time costs at every new cache length (~7x slower here), so the second one is timed.
    plain = [engine.generate(sample.image, sample.prompt, None, max_new_tokens=32) for _ in range(2)][-1]
    AR_REFERENCE.record(plain.seconds, plain.new_tokens)
    drafter = models.default_drafter()
    if drafter != models.NO_DRAFTER:
        engine.generate(sample.image, sample.prompt, load_drafter(drafter), max_new_tokens=8)


def limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives every thread that allocates its own heap arena (up to 8 per core) and seldom hands their pages
    back; Gradio runs each event on a worker thread, so under load the server grew ~40 MB a round and kept growing.
    Two arenas hold it flat (docs/reliability.md, "Load": scripts/load_test.py). MALLOC_ARENA_MAX, when set, wins."""
    if sys.platform != "linux" or "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, arenas)
    except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to cap
        pass


def launch(**kwargs) -> gr.Blocks:
    limit_malloc_arenas()
    warm_up()
    demo = build()
    demo.launch(css=CSS, **{"max_file_size": MAX_UPLOAD} | kwargs)
    return demo
