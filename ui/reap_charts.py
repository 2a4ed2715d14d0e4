"""The REAP tab's plotly figures, drawn from core/reap/lab.py's results: expert heatmaps with the removed experts
marked, quality against ratio for every method, and the experts' output subspace.

    python -m ui.reap_charts      # writes the three figures for the embedded MoE (REAP, 50 %) to /tmp/reap_*.html
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from core.reap.lab import ALL_METHODS
from core.reap.results import Curve, PruneView, Subspace

REMOVED = "#dc2626"
VARIANT_STYLE = {
    "original": {"symbol": "circle", "color": "#9ca3af", "size": 9},
    "pruned": {"symbol": "x", "color": REMOVED, "size": 9},
    "merged": {"symbol": "diamond", "color": "#2563eb", "size": 9},
}
MARGIN = {"l": 40, "r": 20, "t": 50, "b": 40}
# Perplexity ticks: plotly's own log ticks label most of them with a bare leading digit on short axes.
LOG_TICKS = [m * 10 ** e for e in range(5) for m in (1, 2, 3, 5)]


def placeholder(text: str) -> go.Figure:
    """An empty chart with a hint. Shown when the tab opens, it also has the page load plotly.js before the
    first result arrives rather than after."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(height=330, margin=MARGIN, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def heatmaps(view: PruneView) -> go.Figure:
    """Layers x experts: the method's saliency (scaled per layer, since each layer is pruned on its own) and the
    share of routed tokens, with every removed or merged-away expert crossed out on both and protected super experts
    starred."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        f"saliency ({view.saliency_method} score, per layer)", "routing frequency (share of the layer's tokens)"))
    experts = list(range(view.experts))
    scaled = [[s / (max(row) or 1.0) for s in row] for row in view.saliency]
    fig.add_trace(go.Heatmap(
        z=scaled, customdata=view.saliency, x=experts, coloraxis="coloraxis",
        hovertemplate="layer %{y}, expert %{x}<br>score %{customdata:.4g} (%{z:.0%} of the layer's best)<extra></extra>",
    ), row=1, col=1)
    fig.add_trace(go.Heatmap(z=view.frequency, x=experts, coloraxis="coloraxis2",
                             hovertemplate="layer %{y}, expert %{x}<br>%{z:.1%} of routed tokens<extra></extra>"),
                  row=1, col=2)
    gone = [(layer, j) for layer, keep in enumerate(view.kept) for j in experts if j not in keep]
    merged = any(view.merged_into)
    text = [f"merged into expert {view.merged_into[layer][j]}" if merged else "pruned" for layer, j in gone]
    for col in (1, 2):
        fig.add_trace(go.Scatter(
            x=[j for _, j in gone], y=[layer for layer, _ in gone], mode="markers", text=text,
            name="merged away" if merged else "pruned", legendgroup="removed", showlegend=col == 1,
            marker={"symbol": "x-thin", "size": 11, "line": {"width": 2.5, "color": REMOVED}},
            hovertemplate="layer %{y}, expert %{x}: %{text}<extra></extra>",
        ), row=1, col=col)
    guarded = [(layer, j) for layer, js in enumerate(view.protected) for j in js]
    for col in (1, 2) if guarded else ():
        fig.add_trace(go.Scatter(
            x=[j for _, j in guarded], y=[layer for layer, _ in guarded], mode="markers", name="protected super expert",
            legendgroup="protected", showlegend=col == 1,
            marker={"symbol": "star", "size": 12, "color": "#f59e0b", "line": {"width": 1, "color": "#111827"}},
            hovertemplate="layer %{y}, expert %{x}: protected super expert<extra></extra>",
        ), row=1, col=col)
    fig.update_layout(
        height=330, margin=MARGIN, legend={"orientation": "h", "y": -0.18, "x": 0},
        coloraxis={"colorscale": "Viridis", "colorbar": {"x": 0.45, "thickness": 10, "tickformat": ".0%"}},
        coloraxis2={"colorscale": "Blues", "colorbar": {"x": 1.0, "thickness": 10, "tickformat": ".0%"}},
    )
    fig.update_xaxes(title_text="expert", dtick=1, range=[-0.5, view.experts - 0.5])
    fig.update_yaxes(dtick=1, autorange="reversed")
    fig.update_yaxes(title_text="layer", col=1)  # the right map's title would sit on the left map's colour bar
    return fig


def curve_figure(curve: Curve, method: str, ratio: float) -> go.Figure:
    """Perplexity (log scale) and task accuracy against ratio per domain, one line per method, the chosen
    method drawn thicker and the current ratio marked."""
    domains = list(curve.baseline)
    fig = make_subplots(rows=2, cols=len(domains), vertical_spacing=0.18, horizontal_spacing=0.07,
                        subplot_titles=[f"{d} {m}" for m in ("perplexity", "accuracy") for d in domains])
    methods = [m for m in ALL_METHODS if any(p.method == m for p in curve.points)]
    for colour, m in zip(qualitative.Plotly, methods):
        points = sorted((p.ratio, p.quality) for p in curve.points if p.method == m)
        ratios = [0.0] + [r for r, _ in points]
        for row, metric in enumerate(("ppl", "acc"), start=1):
            for col, d in enumerate(domains, start=1):
                fig.add_trace(go.Scatter(
                    x=ratios, y=[curve.baseline[d][metric]] + [q[d][metric] for _, q in points], mode="lines+markers",
                    name=m, legendgroup=m, showlegend=row == col == 1, line={"color": colour, "width": 4 if m == method else 1.5},
                    hovertemplate=f"{m} at %{{x:.0%}}: %{{y:.3g}}<extra>{d}</extra>",
                ), row=row, col=col)
    fig.add_vline(x=ratio, line={"dash": "dash", "color": "#111827", "width": 1}, row="all", col="all")
    fig.update_layout(height=440, margin=MARGIN, title={"text": f"source: {curve.source}", "font": {"size": 11}},
                      legend={"orientation": "h", "y": -0.12, "x": 0})
    fig.update_xaxes(tickformat=".0%", range=[-0.03, max(0.9, ratio + 0.03)])
    fig.update_yaxes(type="log", tickvals=LOG_TICKS, row=1)
    fig.update_yaxes(range=[-0.03, 1.03], tickformat=".0%", row=2)
    return fig


def subspace_figure(sub: Subspace) -> go.Figure:
    """Per layer, every expert's mean routed output on the original's two principal axes."""
    titles = [f"layer {i}: spread {sub.spread['original'][i]:.3g} / {sub.spread['pruned'][i]:.3g} / "
              f"{sub.spread['merged'][i]:.3g}" for i in range(len(sub.layers))]
    fig = make_subplots(rows=1, cols=len(sub.layers), subplot_titles=titles, horizontal_spacing=0.05)
    names = {"original": "original", "pruned": f"pruned ({sub.pruned_method})", "merged": f"merged ({sub.merged_method})"}
    for i, layer in enumerate(sub.layers, start=1):
        for variant, points in layer.items():
            fig.add_trace(go.Scatter(
                x=[p[0] for p in points], y=[p[1] for p in points], mode="markers", name=names[variant],
                legendgroup=variant, showlegend=i == 1, marker=VARIANT_STYLE[variant],
                hovertemplate=f"{names[variant]}<br>PC1 %{{x:.3g}}, PC2 %{{y:.3g}}<extra>layer {i - 1}</extra>",
            ), row=1, col=i)
    fig.update_layout(height=320, margin=MARGIN, legend={"orientation": "h", "y": -0.15, "x": 0},
                      title={"text": f"at {sub.ratio:.0%}; spread = mean squared distance to the centroid "
                                     "(original / pruned / merged)", "font": {"size": 11}})
    fig.update_annotations(font_size=11)
    return fig


if __name__ == "__main__":
    from core.reap.lab import lab_for

    lab = lab_for("embedded")
    view = lab.view("mixed", "reap", 0.5, lambda f, d: print(d))
    for name, fig in (("heatmaps", heatmaps(view)), ("curve", curve_figure(lab.curve("mixed"), "reap", 0.5)),
                      ("subspace", subspace_figure(lab.subspace("mixed", "reap", 0.5)))):
        fig.write_html(f"/tmp/reap_{name}.html")
        print(f"/tmp/reap_{name}.html")
