"""HTML for a stream of speculative rounds: accepted drafts green, rejected red and struck, the target's own
correction orange, bonus blue, plain decoding grey. Hover shows the draft and target probabilities."""

from __future__ import annotations

import html

from core.engine import Round

LEGEND = (
    "<div class='spec-legend'>"
    "<span class='tok accepted'>accepted draft</span> <span class='tok rejected'>rejected draft</span> "
    "<span class='tok correction'>target correction</span> <span class='tok bonus'>bonus</span> "
    "<span class='tok plain'>target (no draft)</span></div>"
)

CSS = """
.tok { padding: 1px 2px; margin: 0 1px; border-radius: 3px; white-space: pre-wrap; font-family: monospace; }
.tok.accepted { background: #bbf7d0; } .tok.rejected { background: #fecaca; text-decoration: line-through; }
.tok.correction { background: #fed7aa; } .tok.bonus { background: #bfdbfe; } .tok.plain { background: #e5e7eb; }
.tok.prefill { background: #e5e7eb; }
"""


def _span(piece: str, kind: str, title: str) -> str:
    return f"<span class='tok {kind}' title='{html.escape(title, quote=True)}'>{html.escape(piece)}</span>"


def round_html(r: Round, decode) -> str:
    parts = []
    for i, token in enumerate(r.drafted):
        probs = f"draft p={r.draft_probs[i]:.2f}, target p={r.target_probs[i]:.2f}"
        if i < r.accepted and i < len(r.emitted):
            parts.append(_span(decode(token), "accepted", f"round {r.index}: accepted ({probs})"))
        elif i == r.accepted:
            parts.append(_span(decode(token), "rejected", f"round {r.index}: rejected ({probs})"))
    own = r.emitted[r.accepted:] if len(r.emitted) > r.accepted else []
    for token in own:
        parts.append(_span(decode(token), r.kind, f"round {r.index}: {r.kind} from the target"))
    return "".join(parts)


def stream_html(rounds: list[Round], decode) -> str:
    return LEGEND + "<div class='spec-text'>" + "".join(round_html(r, decode) for r in rounds) + "</div>"


def stats_markdown(rounds: list[Round], seconds: float, ar_tokens_per_s: float | None = None) -> str:
    tokens = sum(len(r.emitted) for r in rounds)
    drafted = sum(len(r.drafted) for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    tau = tokens / max(1, len(rounds))
    rate = f"{accepted / drafted:.0%}" if drafted else "n/a"
    tps = tokens / seconds if seconds > 0 else 0.0
    line = f"**τ** {tau:.2f} · **acceptance** {rate} · **tokens/s** {tps:.1f} · **target forwards** {len(rounds)}"
    if ar_tokens_per_s:
        line += f" · **speedup vs AR** {tps / ar_tokens_per_s:.2f}x"
    return line
