"""The app's CSS: token colours (from ui/render.py's COLOURS), the strike-through animation of rejected drafts,
stat cards and race lanes. Kept in Python so an installed package needs no data files."""

from __future__ import annotations

from ui.render import COLOURS

# 0x2e alpha: pale backgrounds keep the text readable; the solid underline carries the colour. The newest round's
# rejected drafts (class `new`) appear unstruck and are struck through a moment later.
CSS = "\n".join(
    f".tok.{kind} {{ background: {colour}2e; border-bottom: 2px solid {colour}; }}" for kind, colour in COLOURS.items()
) + """
.tok { padding: 1px 1px; margin: 0 1px; border-radius: 3px; white-space: pre-wrap; font-family: monospace; }
.tok.rejected { text-decoration: line-through; text-decoration-color: #dc2626; text-decoration-thickness: 2px; }
.tok.rejected.new { animation: strike 0.6s ease-in forwards; }
@keyframes strike { 0%, 50% { text-decoration-color: transparent; } 100% { text-decoration-color: #dc2626; } }
.spec-legend { margin-bottom: 6px; font-size: 0.9em; }
.spec-text { line-height: 2; }
.stats { display: flex; flex-wrap: wrap; gap: 8px; }
.stat { flex: 1 1 0; min-width: 84px; border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 6px 10px; }
.stat-value { font-size: 1.3em; font-weight: 600; white-space: nowrap; }
.stat-label { font-size: 0.8em; opacity: 0.75; }
.stat-note { font-size: 0.8em; opacity: 0.75; margin-top: 4px; }
.lanes { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 10px; }
.lane { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 8px; }
.lane-name { font-weight: 600; margin-bottom: 4px; }
.lane-stats { font-size: 0.85em; opacity: 0.8; margin-top: 6px; padding-top: 4px;
              border-top: 1px solid var(--border-color-primary); }
.lane-error { color: #dc2626; }
.lane-wait { opacity: 0.7; font-style: italic; }
/* vLLM lanes stream chunks of tokens, not rounds: alternate shades tell one chunk from the next */
.tok.chunk0 { background: #6b72801f; } .tok.chunk1 { background: #6b728042; }
.replay-head { margin: 4px 0 6px; }
.replay-draft { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 8px; }
.draft-tok { display: inline-flex; flex-direction: column; align-items: center; padding: 2px 6px; border-radius: 6px;
             border: 2px solid; font-family: monospace; }
.draft-tok.accepted { border-color: #16a34a; background: #16a34a1a; }
.draft-tok.rejected { border-color: #dc2626; background: #dc26261a; }
.draft-tok.not-reached { border-color: #9ca3af; border-style: dashed; opacity: 0.7; }
.draft-text { white-space: pre; }
.draft-probs { font-size: 0.75em; opacity: 0.8; }
.draft-none, .replay-empty { opacity: 0.7; }
.inspect-head { margin: 4px 0 6px; }
.inspect-fate { font-weight: 600; }
.inspect-shares { font-size: 0.9em; margin-top: 6px; }
"""
