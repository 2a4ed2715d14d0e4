"""Tab "Speculative decoding": one image and prompt through the target with the chosen drafter, streamed round
by round (at a chosen pace) as coloured tokens, live statistics, a per-round chart and a round log; then a replay
of its rounds with each round's draft (and draft tree), and the rounds as JSON events."""

from __future__ import annotations

import time

import gradio as gr

from core.decoding.engine import MAX_GAMMA, SpeculativeEngine
from core.decoding.limits import check_prompt
from core.decoding.metrics import RunStats
from core.models.registry import load_drafter
from core.world import photos
from core.world import reference
from core.world.describe import answers
from ui import inputs, models
from ui.baseline import AR_REFERENCE
from ui.charts import figure
from ui.examples import TASK_PROMPTS, known_text, photo_credits, photo_examples, text_examples, world_examples
from ui.inputs import image_input, user_errors, whole
from ui.render import LABELS, tokens_html
from ui.replay import PACES, Controls, events_of, views_of
from ui.replay import build as build_replay
from ui.stats import cards_html
from ui.zerogpu import gpu

TITLE = "Speculative decoding"
# A chart redraw costs more than a round of the embedded model, so the chart follows at most once a second (and
# once at the end) while tokens and stats update every round.
PLOT_EVERY_S = 1.0
LOG_HEADERS = ["round", "ended with", "drafted", "accepted", "emitted", "draft ms", "verify ms"]
# The engine sessions being decoded now. A request that is cancelled or whose client goes away leaves this set at
# once (Gradio closes the generator, so its `finally` runs): tests/test_faults.py watches it.
DECODING: set[int] = set()


def _log_row(r, decode) -> list:
    return [r.index, LABELS.get(r.kind, r.kind), "".join(decode(t) for t in r.drafted), r.accepted,
            "".join(decode(t) for t in r.emitted), round(r.draft_seconds * 1000, 1), round(r.verify_seconds * 1000, 1)]


@gpu
def generate(image, prompt, model_name, drafter_name, gamma, temperature, top_p, seed, max_new_tokens,
             keep_ratio=0.75, drafting="chain", tree_top_k=4, tree_total=16, pace=0, progress=gr.Progress()):
    with user_errors():
        prompt = check_prompt(prompt)
        sampling = inputs.sampling(temperature, top_p)
        gamma, seed, max_new_tokens = whole(gamma, "γ"), whole(seed, "seed"), whole(max_new_tokens, "max tokens")
        progress(0, desc="loading models")
        target = models.target(model_name)
        drafter = load_drafter(inputs.drafter_spec(drafter_name, keep_ratio, drafting, tree_top_k, tree_total),
                               model_name)
        session = SpeculativeEngine(target).open(image, prompt, drafter, gamma=gamma, sampling=sampling,
                                                 max_new_tokens=max_new_tokens, seed=seed)
        DECODING.add(id(session))
        try:
            yield from _rounds(session, target, drafter, max_new_tokens, whole(pace or 0, "pace"), progress)
        finally:
            session.close()  # frees the KV caches now, not whenever the garbage collector gets to them
            DECODING.discard(id(session))


def _rounds(session, target, drafter, max_new_tokens, pace_ms, progress):
    """The tab's outputs after each round of the `session` (`pace_ms` apart), then the chart and the replay."""
    decode = lambda t: target.tokenizer.decode([t])  # noqa: E731  (special tokens stay visible)
    rounds, log, seconds, first, plotted = [], [], 0.0, None, time.perf_counter()
    while True:
        start = time.perf_counter()  # the engine's own time: rendering below is not counted
        r = session.step()
        seconds += time.perf_counter() - start
        if r is None:
            break
        rounds.append(r)
        log.append(_log_row(r, decode))
        first = first or seconds
        stats = RunStats.of(rounds, seconds, first)
        progress((stats.tokens, max_new_tokens), desc="decoding", unit="tokens")
        if drafter is None:
            ar, note = stats.tokens_per_second, "Plain decoding: this run is the AR reference (1.00x)."
        else:
            ar = AR_REFERENCE.tokens_per_second()
            note = (f"Speedup vs AR divides by this server's plain-decoding speed ({ar:.1f} tokens/s over its "
                    "recent AR runs); the Drafter race tab times both on the same request.") if ar else ""
        plot = gr.skip()
        if time.perf_counter() - plotted > PLOT_EVERY_S:
            plot, plotted = figure(rounds, stats), time.perf_counter()
        yield (tokens_html(rounds, decode), cards_html(stats, ar, note), plot, log,
               target.tokenizer.decode([t for x in rounds for t in x.emitted], skip_special_tokens=True).strip(),
               *[gr.skip()] * 5)
        if pace_ms:
            time.sleep(pace_ms / 1000)
    events = events_of(rounds, decode)
    views = views_of(rounds, events, decode)
    yield (gr.skip(), gr.skip(), figure(rounds, stats), gr.skip(), gr.skip(), events, views,
           *Controls.shown(events, views, len(rounds) - 1))
    if drafter is None:
        AR_REFERENCE.record(seconds, stats.tokens)


def what_the_pixels_say(image, prompt, output=None) -> str:
    """The reference answer for this image (core/world/reference.py) and, after a run, whether the target's agrees."""
    if image is None:
        return ""
    verdict = reference.check(image, prompt, output, known_text(image))
    if photos.asks_to_read(verdict.asked):
        said = verdict.expected or f"{reference.honest_readings()}."
        line = f"**What the target may say** to “{verdict.asked}”: {said}"
    elif verdict.expected is None:
        found = answers(image)
        return (f"**What the pixels say** (colour layout, from the image alone): {found['Describe the image.']}  \n"
                f"*The prompt is not one the pixels answer ({', '.join(f'“{q}”' for q in list(found)[:3])}, "
                "“What colour is the top left?”, …, in their paraphrases), so the target's answer is not compared.*")
    else:
        line = f"**What the pixels say** for “{verdict.asked}”: {verdict.expected}"
    if verdict.outcome:
        line += f"  \nThe target's answer **{verdict.outcome}**" + (f": {verdict.reason}" if verdict.reason else ".")
    elif verdict.reason:
        line += f"  \n*{verdict.reason}*"
    return line


def build() -> None:
    with gr.Row():
        with gr.Column(scale=2):
            image = image_input(type="pil", label="Image", height=240, elem_id="spec-image", sources=["upload", "clipboard"])
            prompt = gr.Textbox(label="Prompt", value=TASK_PROMPTS["caption"], max_lines=4, elem_id="spec-prompt")
            gr.Examples(world_examples(), [image, prompt], label="World samples (held out; what the target knows best)",
                        visible_columns=[0], examples_per_page=8)
            texts = text_examples()
            gr.Examples(texts, [image, prompt], visible_columns=[0],
                        label="Text it cannot read, and a page without any (held out)", examples_per_page=4)
            photos = photo_examples()
            if photos:
                gr.Examples(photos, [image, prompt], visible_columns=[0],
                            label=f"Photographs the target never saw ({photo_credits()}; from scikit-image)")
            preset = gr.Radio(list(TASK_PROMPTS), label="Task preset", value="caption")
            with gr.Row():
                model = gr.Dropdown(models.model_choices(), value=models.EMBEDDED, label="Target model")
                drafter = gr.Dropdown(models.drafter_choices(), value=models.default_drafter(), label="Drafter")
            run = gr.Button("Generate", variant="primary")
            with gr.Accordion("Decoding settings", open=True):
                gamma = gr.Slider(1, MAX_GAMMA, value=4, step=1, label="Draft length γ")
                temperature = gr.Slider(0, 1.5, value=0, step=0.05, label="Temperature (0 = greedy)")
                top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
                seed = gr.Number(0, precision=0, label="Seed")
                max_new = gr.Slider(1, inputs.MAX_NEW_TOKENS, value=128, step=1, label="Max new tokens")
            with gr.Accordion("Draft trees and DREAM", open=False):
                drafting = gr.Radio(["chain", "tree"], value="chain", elem_id="spec-drafting",
                                    label="Drafting (tree: EAGLE-2's dynamic tree, greedy only, depth = γ)")
                tree_top_k = gr.Slider(1, 8, value=4, step=1, label="Tree: nodes expanded per level (top-k)")
                tree_total = gr.Slider(1, 64, value=16, step=1, label="Tree: total draft tokens")
                keep = gr.Slider(0.25, 1, value=0.75, step=0.05, label="Share of visual tokens in DREAM's cross-attention")
        with gr.Column(scale=3):
            pace = gr.Radio(PACES, value=0, label="Pace per round (live, and when the replay plays)",
                            elem_id="spec-pace")
            tokens = gr.HTML(tokens_html([], str), label="Tokens", elem_id="spec-tokens")
            stats = gr.HTML(elem_id="spec-stats")
            events = gr.JSON(visible=False)
            views = gr.JSON(visible=False)
            replay = build_replay("spec", events, views, pace)
            plot = gr.Plot(label="Rounds", elem_id="spec-plot")
            text = gr.Textbox(label="Output text", interactive=False, buttons=["copy"], elem_id="spec-output")
            reference = gr.Markdown(elem_id="spec-reference")
            with gr.Accordion("Round log", open=False):
                log = gr.Dataframe(headers=LOG_HEADERS, interactive=False, wrap=True)
    preset.change(lambda task: TASK_PROMPTS[task], preset, prompt, queue=False, api_visibility="private")
    run.click(generate, [image, prompt, model, drafter, gamma, temperature, top_p, seed, max_new, keep, drafting,
                         tree_top_k, tree_total, pace],
              [tokens, stats, plot, log, text, events, views, replay.slider, replay.view, replay.tree],
              api_name="generate",
              concurrency_id="decode", show_progress_on=[text]  # an overlay on the tokens would hide them while they stream
              ).then(what_the_pixels_say, [image, prompt, text], reference, api_visibility="private")
    gr.on([image.change, prompt.change], what_the_pixels_say, [image, prompt], reference, api_visibility="private",
          trigger_mode="always_last")
