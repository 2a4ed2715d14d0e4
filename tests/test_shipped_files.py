"""What ships names no machine and tells nothing of how the work was organised.

Every JSON file under assets/ (models, tokenizers, results), walked key by key and value by value, and every model
card (assets/models/*/README.md) may not hold an absolute path (POSIX with a directory, `~/`, a Windows drive): a
path of the machine that trained or benched a model means nothing in a clone. Neither they nor the docstrings and
comments of the code may speak of work sessions ("session 17", "this session", "sessions so far"); a decoding
session of the engine is the domain's word and stays.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tempfile
import tokenize
from pathlib import Path

import pytest
from PIL import Image

from core.drafters.eagle3 import export
from core.models.embedded import EMBEDDED_PATHS
from core.models.loading import recorded
from core.training.training_data import from_folder

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "assets"
SHIPPED_JSON = sorted(ASSETS.rglob("*.json"))
MODEL_CARDS = sorted(ASSETS.glob("models/*/README.md"))
CODE = sorted(p for d in ("core", "ui", "scripts") for p in (REPO / d).rglob("*.py")) + [REPO / "app.py"]

# A path at the start of a string or after a space, '=', ':', a quote or a bracket ("data-dir:/x/y", "--out /x/y");
# a URL's "//" is not one, nor a lone "/" or "/word" (tokenizer pieces, "km/h").
ABSOLUTE_PATH = re.compile(r"(?:^|(?<=[\s=:(\[\"'`]))(?:/(?!/)[^\s/\"'`]+/[^\s\"'`]*|~/|[A-Za-z]:[\\/])")
# Work-organisation phrases, not the engine's sessions (DecodingSession, "one engine session", scope="session").
WORK_SESSION = re.compile(
    r"\bsessions?\s+\d+"
    r"|\b(?:this|that|last|next|previous|prior|earlier|later|current|past|future|several|many|few|all)\s+sessions?\b"
    r"|\bsessions?\s+(?:so far|ago|before|earlier|later)\b"
    r"|\bsession'?s'?\s+(?:work|end|start|notes|log)\b"
    r"|\bsession's\b(?!\s+(?:cache|context|request|rounds?|drafter|state)\b)",
    re.IGNORECASE)


def strings(value, where: str = ""):
    """(where, text) for every key and string in a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}/{key} (key)", key
            yield from strings(item, f"{where}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from strings(item, f"{where}[{i}]")
    elif isinstance(value, str):
        yield where or "/", value


def prose(path: Path) -> list[tuple[int, str]]:
    """A Python file's comments and docstrings, with the line each starts on."""
    source = path.read_text()
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_the_checks_tell_paths_and_work_sessions_apart():
    for path in ("/work/main/assets/models/target", "data-dir:/tmp/views", "dream:weights=/tmp/train/abl",
                 "--out /home/me/runs", "~/models", "C:\\models\\x", "see (/srv/data)"):
        assert ABSOLUTE_PATH.search(path), path
    for fine in ("assets/models/target", "https://huggingface.co/Qwen/Qwen2.5", "/", "km/h", "Ġ/", "a / b", "/usr"):
        assert not ABSOLUTE_PATH.search(fine), fine
    for said in ("the target shipped until session 17", "in this session", "Sessions so far", "the session's work",
                 "(session 14, trained and not kept)", "an earlier session"):
        assert WORK_SESSION.search(said), said
    for domain in ("DecodingSession", "one engine session", 'scope="session"', "active_session()", "Ġsession",
                   "core/decoding/session.py", "no state bleeds between sessions", "the session's cache"):
        assert not WORK_SESSION.search(domain), domain


def test_there_is_something_to_check():
    assert len(SHIPPED_JSON) > 30 and MODEL_CARDS and len(CODE) > 50


@pytest.mark.parametrize("path", SHIPPED_JSON, ids=lambda p: str(p.relative_to(ASSETS)))
def test_shipped_json_names_no_machine_and_no_work_session(path):
    found = [(where, text[:120]) for where, text in strings(json.loads(path.read_text()))
             if ABSOLUTE_PATH.search(text) or WORK_SESSION.search(text)]
    assert not found, f"{path.relative_to(REPO)}: {found[:5]}"


@pytest.mark.parametrize("path", MODEL_CARDS, ids=lambda p: p.parent.name)
def test_model_cards_name_no_machine_and_no_work_session(path):
    found = [line for line in path.read_text().splitlines()
             if ABSOLUTE_PATH.search(line) or WORK_SESSION.search(line)]
    assert not found, f"{path.relative_to(REPO)}: {found[:5]}"


def test_code_prose_tells_nothing_of_work_sessions():
    found = [f"{path.relative_to(REPO)}:{line}: {m.group()!r}" for path in CODE for line, text in prose(path)
             for m in WORK_SESSION.finditer(text)]
    assert not found, found


def test_paths_recorded_relative_load_from_any_directory(tmp_path, monkeypatch):
    """What a trainer records is relative to the repository, and what reads it back resolves it there, wherever
    the reader runs: a folder of images a distillation set names, the verifier an EAGLE-3 config names."""
    assert recorded({"target": str(EMBEDDED_PATHS["target"]), "out": "/tmp/train/x"}) == \
        {"target": "assets/models/target", "out": "x"}
    with tempfile.TemporaryDirectory(dir=REPO) as inside:
        Image.new("RGB", (8, 8), "red").save(Path(inside) / "red.png")
        examples = from_folder(inside)
        assert examples.source == f"data-dir:{Path(inside).name}"
        monkeypatch.chdir(tmp_path)
        assert examples[0].image.getpixel((0, 0)) == (255, 0, 0)
    config = json.loads((EMBEDDED_PATHS["eagle3"] / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == "assets/models/target"
    assert export._verifier_layers(config) == \
        json.loads((EMBEDDED_PATHS["target"] / "config.json").read_text())["text_config"]["num_hidden_layers"]
