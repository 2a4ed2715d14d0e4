"""Tab "Drafter race": the same image and prompt through plain decoding (AR) and every chosen drafter, streamed
side by side (ui/race.py), each with its own wall time, target forwards and τ, and a check that every final
text equals AR's. Greedy decoding, so "lossless" means identical tokens. The vLLM lanes (core/serve/lanes.py) stream
the same request through vLLM, plain and with EAGLE-3, one after the other once the engine's lanes are done."""

from __future__ import annotations

import html

import gradio as gr

from core.decoding.engine import MAX_GAMMA, SpeculativeEngine
from core.decoding.limits import check_prompt
from core.models.registry import DRAFTERS, load_drafter
from core.serve import lanes as served_lanes
from core.serve.lanes import SERVED, ServedLane
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


def _foot(lane: Lane | ServedLane, ar_tps: float | None) -> str:
    stats = lane.stats
    speedup = stats.speedup(ar_tps)
    foot = (f"{lane.seconds:.2f} s · {stats.forwards} target forwards · τ {stats.tau:.2f}"
            + (f" · {speedup:.2f}x vs AR" if speedup and lane.name != AR else ""))
    if isinstance(lane, ServedLane) and lane.metrics is not None:
        per_position = " / ".join(f"{a:.2f}" for a in stats.position_acceptance)
        foot += (f" · γ {lane.gamma}: {stats.accepted} of {stats.drafted} drafts accepted, per position "
                 f"{per_position} (vLLM's counters)")
    return foot + (" · done" if lane.done else "")


def _lane_html(lane: Lane | ServedLane, decode, ar_tps: float | None) -> str:
    if isinstance(lane, ServedLane) and lane.client is None and not lane.done:
        body = "<div class='lane-wait'>streams once the engine's lanes are done</div>"
    elif isinstance(lane, ServedLane):  # vLLM streams chunks of tokens (about one per engine step), not rounds
        body = "<div class='spec-text'>" + "".join(
            f"<span class='tok chunk{i % 2}' title='chunk {i + 1}: {len(chunk)} tokens'>"
            f"{html.escape(''.join(map(decode, chunk)))}</span>" for i, chunk in enumerate(lane.chunks)) + "</div>"
    else:
        body = tokens_html(lane.rounds, decode, legend=False) if lane.rounds or not lane.error else ""
    if lane.error:
        body += f"<div class='lane-error'>{html.escape(lane.error)}</div>"
        foot = _foot(lane, ar_tps) if lane.token_ids else "skipped"
    else:
        foot = _foot(lane, ar_tps)
    return (f"<div class='lane'><div class='lane-name'>{html.escape(lane.name)}</div>{body}"
            f"<div class='lane-stats'>{foot}</div></div>")


def _board(lanes: list, decode) -> str:
    ar_tps = lanes[0].stats.tokens_per_second
    return LEGEND + "<div class='lanes'>" + "".join(_lane_html(x, decode, ar_tps) for x in lanes) + "</div>"


def _summary(lanes: list) -> list[list]:
    ar = lanes[0]
    ar_tps = ar.stats.tokens_per_second
    rows = []
    for lane in lanes:
        if (lane.error or not lane.done) and not lane.token_ids:
            continue
        stats = lane.stats
        same = "yes" if lane.token_ids == ar.token_ids else ("no" if lane.done and ar.done else "…")
        rows.append([lane.name, round(lane.seconds, 3), stats.forwards, round(stats.tau, 2),
                     round(stats.tokens_per_second, 1), round(stats.speedup(ar_tps) or 0.0, 2), same])
    return rows


def _verdict(lanes: list) -> str:
    ar, raced = lanes[0], [lane for lane in lanes[1:] if not lane.error]
    cut = [lane.name for lane in lanes[1:] if lane.error and lane.token_ids]
    cut_note = f" {', '.join(cut)} stopped early (see the lane)." if cut else ""
    if not raced:
        return "Only AR ran: pick at least one drafter with weights, or a vLLM lane, to race." + cut_note
    differ = [lane for lane in raced if lane.token_ids != ar.token_ids]
    if differ:
        engine = [lane.name for lane in differ if isinstance(lane, Lane)]
        vllm = [lane.name for lane in differ if isinstance(lane, ServedLane)]
        return " ".join(filter(None, [
            f"**Not lossless:** {', '.join(engine)} differ from AR's output. This is a bug in the engine." if engine
            else "",
            f"**vLLM differs:** {', '.join(vllm)} did not give the engine's AR tokens: the server runs another model "
            f"or another precision than the engine (core/serve/server.py serves the embedded target in float32)."
            if vllm else "", cut_note.strip()]))
    who = f"the {raced[0].name} lane" if len(raced) == 1 else f"all {len(raced)} lanes"
    return f"**Lossless:** {who} produced exactly AR's {len(ar.token_ids)} tokens (greedy decoding).{cut_note}"


@gpu
def run_race(image, prompt, drafters, gamma, max_new_tokens, drafting="chain", served=(), progress=gr.Progress()):
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
        waiting = [ServedLane(kind, None) for kind in served or []]  # placeholders until their turn
        for _ in race(lanes):
            progress((sum(lane.done for lane in lanes), len(lanes)), desc="racing", unit="lanes finished")
            yield _board(lanes + waiting, decode), "", _summary(lanes), *[gr.skip()] * 6
        AR_REFERENCE.record(lanes[0].seconds, len(lanes[0].token_ids))
        ran = [lane for lane in lanes if not lane.error]
        for i, kind in enumerate(served or []):  # after the engine's lanes, one at a time: no shared cores
            progress((i, len(served)), desc=f"{kind}: reaching its server (a first start takes about a minute)",
                     unit="vLLM lanes")
            waiting[i] = SERVED.lane(kind, gamma)
            for _ in waiting[i].stream(image, prompt, max_new_tokens):
                yield _board(lanes + waiting, decode), "", _summary(lanes + waiting), *[gr.skip()] * 6
        lanes += waiting
        events = {lane.name: events_of(lane.rounds, decode) for lane in ran}
        views = {lane.name: views_of(lane.rounds, events[lane.name], decode) for lane in ran}
        shown = ran[-1].name
        yield (_board(lanes, decode), _verdict(lanes), _summary(lanes), events, views,
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
            vllm_lanes = [served_lanes.PLAIN, served_lanes.EAGLE3]
            served = gr.CheckboxGroup(vllm_lanes, value=vllm_lanes if served_lanes.urls_given() else [],
                                      label="vLLM lanes", info=served_lanes.where(), elem_id="race-vllm")
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
    run.click(run_race, [image, prompt, drafters, gamma, max_new, drafting, served],
              [board, verdict, summary, events, views, replay.lane, replay.slider, replay.view, replay.tree],
              api_name="race", concurrency_id="decode", show_progress_on=[summary])
