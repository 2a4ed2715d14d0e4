"""Tab "Drafter race": the same image and prompt through plain decoding (AR) and every chosen drafter, streamed
side by side (ui/race.py), each with its own wall time, target forwards and τ, and a check that every final
text equals AR's. Greedy decoding, so "lossless" means identical tokens."""

from __future__ import annotations

import html

import gradio as gr

from core.decoding.engine import MAX_GAMMA, SpeculativeEngine
from core.decoding.limits import check_prompt
from core.decoding.metrics import RunStats
from core.models.registry import DRAFTERS, load_drafter
from ui import inputs, models
from ui.baseline import AR_REFERENCE
from ui.examples import TASK_PROMPTS, world_examples
from ui.inputs import image_input, user_errors, whole
from ui.race import Lane, race
from ui.render import LEGEND, tokens_html
from ui.replay import PACES, Controls, events_of, views_of
from ui.replay import build as build_replay
from ui.zerogpu import gpu

TITLE = "Drafter race"
AR = "AR"
SUMMARY_HEADERS = ["lane", "wall time (s)", "target forwards", "τ", "tokens/s", "speedup vs AR", "identical to AR"]


def _lane_html(lane: Lane, decode, ar_tps: float | None) -> str:
    if lane.error:
        body, foot = f"<div class='lane-error'>{html.escape(lane.error)}</div>", "skipped"
    else:
        stats = RunStats.of(lane.rounds, lane.seconds)
        speedup = stats.speedup(ar_tps)
        body = tokens_html(lane.rounds, decode, legend=False)
        foot = (f"{lane.seconds:.2f} s · {stats.forwards} target forwards · τ {stats.tau:.2f}"
                + (f" · {speedup:.2f}x vs AR" if speedup and lane.name != AR else "")
                + (" · done" if lane.done else ""))
    return (f"<div class='lane'><div class='lane-name'>{html.escape(lane.name)}</div>{body}"
            f"<div class='lane-stats'>{foot}</div></div>")


def _summary(lanes: list[Lane]) -> list[list]:
    ar = lanes[0]
    ar_tps = RunStats.of(ar.rounds, ar.seconds).tokens_per_second
    rows = []
    for lane in lanes:
        if lane.error:
            continue
        stats = RunStats.of(lane.rounds, lane.seconds)
        same = "yes" if lane.token_ids == ar.token_ids else ("no" if lane.done and ar.done else "…")
        rows.append([lane.name, round(lane.seconds, 3), stats.forwards, round(stats.tau, 2),
                     round(stats.tokens_per_second, 1), round(stats.speedup(ar_tps) or 0.0, 2), same])
    return rows


def _verdict(lanes: list[Lane]) -> str:
    ar, raced = lanes[0], [lane for lane in lanes[1:] if not lane.error]
    if not raced:
        return "Only AR ran: pick at least one drafter with weights to race."
    differ = [lane.name for lane in raced if lane.token_ids != ar.token_ids]
    if differ:
        return f"**Not lossless:** {', '.join(differ)} differ from AR's output. This is a bug in the engine."
    who = f"the {raced[0].name} drafter" if len(raced) == 1 else f"all {len(raced)} drafters"
    return f"**Lossless:** {who} produced exactly AR's {len(ar.token_ids)} tokens (greedy decoding)."


@gpu
def run_race(image, prompt, drafters, gamma, max_new_tokens, drafting="chain", progress=gr.Progress()):
    with user_errors():
        prompt = check_prompt(prompt)
        gamma, max_new_tokens = whole(gamma, "γ"), whole(max_new_tokens, "max tokens")
        progress(0, desc="loading models")
        target = models.target(models.EMBEDDED)
        engine = SpeculativeEngine(target)
        decode = lambda t: target.tokenizer.decode([t])  # noqa: E731

        def session(drafter):
            return engine.open(image, prompt, drafter, gamma=gamma, max_new_tokens=max_new_tokens)

        lanes = [Lane(AR, session(None))]
        for name in drafters or []:
            lane = name if drafting == "chain" else f"{name} (tree)"
            try:
                lanes.append(Lane(lane, session(load_drafter(inputs.drafter_spec(name, mode=drafting)))))
            except ValueError as exc:
                lanes.append(Lane(lane, None, error=str(exc)))
        for lanes in race(lanes):
            ar_tps = RunStats.of(lanes[0].rounds, lanes[0].seconds).tokens_per_second
            progress((sum(lane.done for lane in lanes), len(lanes)), desc="racing", unit="lanes finished")
            board = LEGEND + "<div class='lanes'>" + "".join(_lane_html(x, decode, ar_tps) for x in lanes) + "</div>"
            yield board, "", _summary(lanes), *[gr.skip()] * 6
        AR_REFERENCE.record(lanes[0].seconds, len(lanes[0].token_ids))
        ran = [lane for lane in lanes if not lane.error]
        events = {lane.name: events_of(lane.rounds, decode) for lane in ran}
        views = {lane.name: views_of(lane.rounds, events[lane.name], decode) for lane in ran}
        shown = ran[-1].name
        yield (board, _verdict(lanes), _summary(lanes), events, views,
               gr.Dropdown(choices=[lane.name for lane in ran], value=shown),
               *Controls.shown(events[shown], views[shown], 0))


def build() -> None:
    with gr.Row():
        with gr.Column(scale=2):
            image = image_input(type="pil", label="Image", height=200, elem_id="race-image", sources=["upload", "clipboard"])
            prompt = gr.Textbox(label="Prompt", value=TASK_PROMPTS["caption"], max_lines=4, elem_id="race-prompt")
            gr.Examples(world_examples(), [image, prompt], label="World samples", visible_columns=[0],
                        examples_per_page=8)
            drafters = gr.CheckboxGroup(
                [choice for choice in models.drafter_choices() if choice[1] in DRAFTERS],
                value=[name for name in DRAFTERS if models.has_weights(name)],
                label="Drafters racing AR", info="Greedy decoding on the embedded target.",
            )
            with gr.Row():
                gamma = gr.Slider(1, MAX_GAMMA, value=4, step=1, label="Draft length γ")
                max_new = gr.Slider(1, inputs.MAX_NEW_TOKENS, value=128, step=1, label="Max new tokens")
            drafting = gr.Radio(["chain", "tree"], value="chain", label="Drafting (tree: EAGLE-2's dynamic tree, "
                                "4 nodes expanded per level, 16 tokens, depth = γ)")
            run = gr.Button("Race", variant="primary")
        with gr.Column(scale=3):
            board = gr.HTML(label="Lanes", elem_id="race-board")
            verdict = gr.Markdown(elem_id="race-verdict")
            summary = gr.Dataframe(headers=SUMMARY_HEADERS, interactive=False, label="Summary")
            pace = gr.Radio(PACES, value=0, label="Replay pace per round", elem_id="race-pace")
            events, views = gr.JSON(visible=False), gr.JSON(visible=False)
            replay = build_replay("race", events, views, pace, lanes=True)
    run.click(run_race, [image, prompt, drafters, gamma, max_new, drafting],
              [board, verdict, summary, events, views, replay.lane, replay.slider, replay.view, replay.tree],
              api_name="race", concurrency_id="decode", show_progress_on=[summary])
