"""HTML for a stream of speculative rounds, in the conventions of existing visualisers: accepted drafts green,
rejected drafts red (shown, then struck through), the target's correction orange, the bonus token blue, plain
decoding grey. Hovering a token shows the round, the draft probability and the target probability.

The newest round's tokens carry the class `new`, so only they animate when the stream re-renders (ui/style.py).
"""

from __future__ import annotations

import html
from collections.abc import Callable

from core.decoding.metrics import near_tie
from core.decoding.rounds import Round

COLOURS = {
    "accepted": "#16a34a",
    "rejected": "#dc2626",
    "correction": "#ea580c",
    "bonus": "#2563eb",
    "plain": "#6b7280",
    "prefill": "#6b7280",
}
LABELS = {
    "accepted": "accepted draft",
    "rejected": "rejected draft",
    "correction": "target's correction",
    "bonus": "bonus token",
    "plain": "target (no draft)",
}
LEGEND = "<div class='spec-legend'>" + " ".join(
    f"<span class='tok {kind}'>{label}</span>" for kind, label in LABELS.items()
) + "</div>"


def _span(piece: str, kind: str, title: str, new: bool) -> str:
    classes = f"tok {kind} new" if new else f"tok {kind}"
    return f"<span class='{classes}' title='{html.escape(title, quote=True)}'>{html.escape(piece)}</span>"


def round_html(r: Round, decode: Callable[[int], str], new: bool = False) -> str:
    parts = []
    tree = f", the accepted branch of a {len(r.drafted)}-token tree" if r.parents is not None else ""
    for k, i in enumerate(r.branch()):
        probs = f"draft p={r.draft_probs[i]:.3f}, target p={r.target_probs[i]:.3f}"
        where = f"round {r.index}, position {k + 1}{tree}"
        if k < r.accepted and k < len(r.emitted):
            parts.append(_span(decode(r.drafted[i]), "accepted", f"{where}: accepted ({probs})", new))
        elif k == r.accepted:
            tie = ", a near-tie: the target nearly chose it" if near_tie(r.target_probs[i]) else ""
            parts.append(_span(decode(r.drafted[i]), "rejected", f"{where}: rejected ({probs}){tie}", new))
    for token in r.emitted[r.accepted:]:
        parts.append(_span(decode(token), r.kind, f"round {r.index}: {LABELS.get(r.kind, r.kind)}", new))
    return "".join(parts)


def tokens_html(rounds: list[Round], decode: Callable[[int], str], legend: bool = True) -> str:
    body = "".join(round_html(r, decode, new=i == len(rounds) - 1) for i, r in enumerate(rounds))
    return (LEGEND if legend else "") + f"<div class='spec-text'>{body}</div>"
