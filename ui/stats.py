"""The HTML stat cards of one run (core/decoding/metrics.py computes the numbers)."""

from __future__ import annotations

import html

from core.decoding.metrics import RunStats


def cards_html(stats: RunStats, ar_tokens_per_second: float | None, speedup_note: str) -> str:
    speedup = stats.speedup(ar_tokens_per_second)
    cards = [
        ("τ (tokens/forward)", f"{stats.tau:.2f}"),
        ("acceptance rate", "n/a" if stats.acceptance is None else f"{stats.acceptance:.0%}"),
        ("tokens/s", f"{stats.tokens_per_second:.1f}"),
        ("speedup vs AR", "n/a" if speedup is None else f"{speedup:.2f}x"),
        ("target forwards", str(stats.forwards)),
        ("rejected drafts (near-ties)", f"{stats.rejections} ({stats.near_tie_rejections})"),
        ("tokens", str(stats.tokens)),
        ("first token", "n/a" if stats.first_token_seconds is None else f"{stats.first_token_seconds * 1000:.0f} ms"),
    ]
    body = "".join(
        f"<div class='stat'><div class='stat-value'>{value}</div><div class='stat-label'>{label}</div></div>"
        for label, value in cards
    )
    return f"<div class='stats'>{body}</div><div class='stat-note'>{html.escape(speedup_note)}</div>"
