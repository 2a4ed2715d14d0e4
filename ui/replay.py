"""Replay of a finished run, round by round, and the draft tree of a round.

A run's rounds become JSON events (`events`: what each drafted token was, its draft probability q and target
probability p, whether it was accepted, rejected or not reached, and what the target emitted) and one pre-rendered
view per round (`views`: that round's draft above the tokens as of that round), so stepping the replay is a lookup
in the browser, not a server call. `tree_figure` draws a tree round's draft tree with plotly.

    events = events_of(rounds, decode); views = views_of(rounds, events, decode)
    controls = build("spec", events_json, views_json, pace)      # inside a gr.Blocks
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr
import plotly.graph_objects as go

from core.decoding.rounds import Round
from core.decoding.tree import depths
from ui.render import LABELS, tokens_html

STATUS_COLOURS = {"accepted": "#16a34a", "rejected": "#dc2626", "not reached": "#9ca3af"}
PACES = [("no pause", 0), ("150 ms", 150), ("500 ms", 500)]  # per round, live and in replay


def events_of(rounds: list[Round], decode: Callable[[int], str]) -> list[dict]:
    """Each round as plain data (the app's API returns these)."""
    return [{
        "index": r.index,
        "kind": r.kind,
        "drafted": [{"id": t, "text": decode(t), "q": round(q, 4), "p": round(p, 4), "status": status,
                     **({"parent": r.parents[i]} if r.parents is not None else {})}
                    for i, (t, q, p, status) in enumerate(zip(r.drafted, r.draft_probs, r.target_probs, r.statuses()))],
        "accepted": r.accepted,
        "emitted": [{"id": t, "text": decode(t)} for t in r.emitted],
        "tree": r.parents is not None,
    } for r in rounds]


def _draft_html(event: dict, total: int) -> str:
    chips = "".join(
        f"<span class='draft-tok {d['status'].replace(' ', '-')}' title='{html.escape(d['status'])}'>"
        f"<span class='draft-text'>{html.escape(d['text'])}</span>"
        f"<span class='draft-probs'>q {d['q']:.2f} · p {d['p']:.2f}</span></span>"
        for d in event["drafted"]
    ) or "<span class='draft-none'>no draft (the target decodes alone)</span>"
    emitted = html.escape("".join(e["text"] for e in event["emitted"]))
    how = LABELS.get(event["kind"], event["kind"])
    shape = f"a tree of {len(event['drafted'])} tokens" if event["tree"] else f"{len(event['drafted'])} drafted"
    return (f"<div class='replay-head'>Round {event['index']} of {total - 1}: {shape}, "
            f"{event['accepted']} accepted; the target emitted <b class='replay-emitted'>{emitted}</b> ({how})</div>"
            f"<div class='replay-draft'>{chips}</div>")


def views_of(rounds: list[Round], events: list[dict], decode: Callable[[int], str]) -> list[str]:
    """The replay's view of every round k (`events`: events_of the same rounds): round k's draft, then the tokens
    as of round k."""
    return [_draft_html(event, len(rounds)) + tokens_html(rounds[: k + 1], decode)
            for k, event in enumerate(events)]


def _tidy_rows(parents: list[int]) -> list[float]:
    """Vertical positions, root first: leaves one row apart in depth-first order, a parent level with the middle of
    its children, so every branch stays together."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    y: dict[int, float] = {}
    next_row = [0.0]

    def place(node: int) -> float:
        kids = children.get(node, [])
        if not kids:
            y[node], next_row[0] = -next_row[0], next_row[0] + 1
        else:
            y[node] = sum(place(k) for k in kids) / len(kids)
        return y[node]

    place(-1)
    return [y[-1]] + [y[i] for i in range(len(parents))]


def tree_figure(event: dict | None) -> go.Figure:
    """A round's draft: nodes = drafted tokens (x = depth, the newest committed token at 0), edges parent to child,
    colour by status, size by draft probability, the accepted path drawn thick."""
    fig = go.Figure()
    fig.update_layout(height=300, margin={"l": 10, "r": 10, "t": 36, "b": 10}, showlegend=False,
                      xaxis={"visible": False}, yaxis={"visible": False})
    drafted = (event or {}).get("drafted", [])
    if not drafted:
        where = f"round {event['index']}: " if event else ""
        fig.update_layout(title={"text": f"{where}no draft in this round", "font": {"size": 12}})
        return fig
    parents = [d.get("parent", i - 1) for i, d in enumerate(drafted)]
    depth = [0] + depths(parents)
    y = _tidy_rows(parents)
    for i, parent in enumerate(parents):
        accepted = drafted[i]["status"] == "accepted"
        fig.add_trace(go.Scatter(x=[depth[parent + 1], depth[i + 1]], y=[y[parent + 1], y[i + 1]], mode="lines",
                                 line={"color": STATUS_COLOURS["accepted"] if accepted else "#d1d5db",
                                       "width": 4 if accepted else 1.5}, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[0], y=[y[0]], mode="markers+text", text=["▶"], textposition="middle left",
                             marker={"size": 10, "color": "#111827"}, hovertext=["the newest committed token"],
                             hoverinfo="text", name="root"))
    fig.add_trace(go.Scatter(
        x=depth[1:], y=y[1:], mode="markers+text", text=[d["text"] for d in drafted], textposition="middle right",
        marker={"size": [10 + 26 * d["q"] for d in drafted], "color": [STATUS_COLOURS[d["status"]] for d in drafted],
                "line": {"width": 1, "color": "#111827"}},
        customdata=[[d["q"], d["p"], d["status"]] for d in drafted], name="drafted",
        hovertemplate="%{text}<br>q %{customdata[0]:.3f} · p %{customdata[1]:.3f}<br>%{customdata[2]}<extra></extra>",
    ))
    fig.update_xaxes(range=[-0.4, max(depth) + 0.9])  # room for the deepest tokens' labels
    kind = "tree" if event["tree"] else "chain"
    fig.update_layout(title={"text": f"round {event['index']}: the drafted {kind} ({len(drafted)} tokens)",
                             "font": {"size": 12}})
    return fig


def _of_lane(per_run, lane):
    """A run's list (views or events): the only one, or the lane's in a race."""
    return per_run if lane is None else (per_run or {}).get(lane, [])


def play(k, views, pace, lane=None):
    """The replay's round, advanced to the end at `pace` ms a round (from the start if it is at the end)."""
    n = len(_of_lane(views, lane))
    k = 0 if k is None or int(k) >= n - 1 else int(k)
    for nxt in range(k + 1, n):
        if pace:
            time.sleep(pace / 1000)
        yield nxt
    if n <= 1:
        yield 0


def tree_for(k, events, lane=None) -> go.Figure:
    events = _of_lane(events, lane)
    return tree_figure(events[int(k)] if events and k is not None and int(k) < len(events) else None)


@dataclass
class Controls:
    """What a run's outputs update (`shown` gives their values): the scrubber, the round's view and figure, and in a
    race the lane choice. The view is set with the run, not left to the scrubber's change event, which does not fire
    when a new run ends on the round the scrubber already shows."""

    slider: gr.Slider
    view: gr.HTML
    tree: gr.Plot
    lane: gr.Dropdown | None

    @staticmethod
    def shown(events: list[dict], views: list[str], k: int) -> tuple:
        """The scrubber at round k of a run, that round's view and its draft figure."""
        return (gr.Slider(maximum=max(len(views) - 1, 1), value=k), views[k] if views else "",
                tree_figure(events[k] if events else None))


def build(prefix: str, events: gr.JSON, views: gr.JSON, pace: gr.Radio, lanes: bool = False) -> Controls:
    """The replay panel (elem_id `{prefix}-replay`): step buttons, play at the pace, a round scrubber, the round's
    view and its draft tree (`{prefix}-tree`). `views` / `events` hold one list per run, or per lane."""
    with gr.Group(elem_id=f"{prefix}-replay"):
        with gr.Row():
            lane = gr.Dropdown([], label="Lane", elem_id=f"{prefix}-replay-lane", scale=1) if lanes else None
            prev = gr.Button("◀ step", size="sm", elem_id=f"{prefix}-replay-prev", scale=0, min_width=80)
            go_ = gr.Button("▶ play", size="sm", elem_id=f"{prefix}-replay-play", scale=0, min_width=80)
            nxt = gr.Button("step ▶", size="sm", elem_id=f"{prefix}-replay-next", scale=0, min_width=80)
        slider = gr.Slider(0, 1, value=0, step=1, label="Replay: round", elem_id=f"{prefix}-replay-round")
        view = gr.HTML("<div class='replay-empty'>Run first: then step through its rounds here.</div>",
                       elem_id=f"{prefix}-replay-view")
        tree = gr.Plot(tree_figure(None), label="This round's draft", elem_id=f"{prefix}-tree")
    # Stepping is a lookup in the browser (the views are on the page already); the tree is drawn on the server.
    lane_in = [lane] if lane is not None else []
    pick = "views[lane] || []" if lanes else "views || []"
    args = "(lane, k, views)" if lanes else "(k, views)"
    show = f"{args} => {{ const v = {pick}; return v[Math.min(Math.round(k), v.length - 1)] || ''; }}"
    slider.change(None, [*lane_in, slider, views], view, js=show)
    slider.change(tree_for, [slider, events, *lane_in], tree, queue=False, api_visibility="private")
    prev.click(None, slider, slider, js="k => Math.max(0, Math.round(k) - 1)")
    last = f"{args} => {{ const v = {pick}; return Math.min(Math.max(v.length - 1, 0), Math.round(k) + 1); }}"
    nxt.click(None, [*lane_in, slider, views], slider, js=last)
    go_.click(play, [slider, views, pace, *lane_in], slider, api_visibility="private", concurrency_limit=None)
    if lane is not None:
        lane.change(lambda name, v, e: Controls.shown(_of_lane(e, name), _of_lane(v, name), 0), [lane, views, events],
                    [slider, view, tree], queue=False, api_visibility="private")
    return Controls(slider, view, tree, lane)
