"""The plotly figure beside the tokens: an acceptance gauge, tokens per round coloured by how the round ended,
and acceptance per draft position."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.decoding.metrics import RunStats
from core.decoding.rounds import Round
from ui.render import COLOURS


def figure(rounds: list[Round], stats: RunStats) -> go.Figure:
    fig = make_subplots(
        rows=1, cols=3, column_widths=[0.24, 0.46, 0.30], horizontal_spacing=0.08,
        specs=[[{"type": "domain"}, {"type": "xy"}, {"type": "xy"}]],
        subplot_titles=("acceptance", "tokens per round", "acceptance by position"),
    )
    drafted = stats.acceptance is not None
    fig.add_trace(go.Indicator(  # plain decoding drafts nothing: an empty gauge, not a misleading 0 %
        mode="gauge+number" if drafted else "gauge", value=100 * (stats.acceptance or 0.0), number={"suffix": "%"},
        gauge={"axis": {"range": [0, 100]}, "bar": {"color": COLOURS["accepted"]}},
    ), row=1, col=1)
    index = [r.index for r in rounds]
    accepted = [min(r.accepted, len(r.emitted)) for r in rounds]
    fig.add_trace(go.Bar(x=index, y=accepted, name="accepted drafts", marker_color=COLOURS["accepted"],
                         hovertemplate="round %{x}: %{y} accepted<extra></extra>"), row=1, col=2)
    fig.add_trace(go.Bar(
        x=index, y=[len(r.emitted) - a for r, a in zip(rounds, accepted)], name="target's own token",
        marker_color=[COLOURS[r.kind] for r in rounds], customdata=[r.kind for r in rounds],
        hovertemplate="round %{x}: %{customdata}<extra></extra>",
    ), row=1, col=2)
    fig.add_trace(go.Bar(
        x=list(range(1, len(stats.position_acceptance) + 1)), y=stats.position_acceptance, name="acceptance",
        marker_color=COLOURS["accepted"], hovertemplate="position %{x}: %{y:.0%}<extra></extra>",
    ), row=1, col=3)
    if not drafted:
        fig.add_annotation(text="no drafts<br>(plain decoding)", showarrow=False, xref="x2 domain", yref="y2 domain",
                           x=0.5, y=0.5)
    fig.update_layout(barmode="stack", height=260, margin={"l": 20, "r": 10, "t": 40, "b": 30}, showlegend=False,
                      bargap=0.15)
    fig.update_xaxes(title_text="round", row=1, col=2)
    fig.update_xaxes(title_text="position", dtick=1, row=1, col=3)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=3)
    return fig
