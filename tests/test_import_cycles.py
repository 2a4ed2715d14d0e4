"""core/ has no import cycle, counting imports inside functions too (a deferred import hides a cycle, it does not
break it): each module's `core.*` imports form a graph, and a depth-first search finds no back edge."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"


def _module(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in CORE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = [f"{node.module}.{a.name}" for a in node.names]
                edges |= {m for m in named if m in modules} or ({node.module} & modules.keys())
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names} & modules.keys()
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_core_has_no_import_cycle():
    graph = _graph()
    assert "core.models.registry" in graph["core.drafters.eagle3.export"]  # the graph sees imports at all
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
