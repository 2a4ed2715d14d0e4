"""Model cards: every shipped model directory carries a Hugging Face card that parses, whose metadata the hub needs
is there, that is what core/models/cards.py writes now (so no card goes stale), and whose figures are the results
JSON's; `export eagle3` and `reap prune` / `reap merge` write one beside what they write."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from test_shipped_files import ABSOLUTE_PATH, WORK_SESSION

from core.__main__ import build_parser, main
from core.models.cards import (BENCHED_DRAFTERS, CARD_FILE, DRAFTER_BENCHES, MODELS, RESULTS, TARGET_IMAGE_EVALS,
                               model_card, shipped_model_dirs)

PIPELINES = {"target": "image-text-to-text"}  # every other embedded model generates text
LIBRARIES = {"dream": "speculum", "eagle3": "speculators"}  # every other one is a transformers architecture


def _results(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _line_naming(card: str, file: str) -> str:
    (line,) = [line for line in card.splitlines() if line.startswith("|") and f"assets/results/{file}" in line]
    return line


def _check_card(path: Path) -> ModelCard:
    """The card at `path` parses, has the metadata the hub shows, and names no machine nor work session."""
    card = ModelCard.load(path)
    data = card.data
    assert data.license == "apache-2.0" and data.library_name and data.pipeline_tag
    assert "speculum" in data.tags and len(data.tags) >= 3
    assert data.to_dict().get("architectures"), "the base architecture, from config.json"
    text = path.read_text()
    assert not ABSOLUTE_PATH.search(text) and not WORK_SESSION.search(text)
    for title in ("What it is", "How to use it", "How it was trained", "Input contract", "Limitations"):
        assert f"\n## {title}\n" in card.content, title
    return card


def test_every_model_directory_is_carded():
    assert [p.name for p in shipped_model_dirs()] == sorted(p.name for p in MODELS.iterdir() if p.is_dir())
    assert {p.name for p in shipped_model_dirs()} >= {"target", "text-drafter", "massv", "dream", "eagle3", "moe"}


@pytest.mark.parametrize("directory", shipped_model_dirs(), ids=lambda p: p.name)
def test_shipped_card_is_valid_and_current(directory):
    card = _check_card(directory / CARD_FILE)
    assert card.data.pipeline_tag == PIPELINES.get(directory.name, "text-generation")
    assert card.data.library_name == LIBRARIES.get(directory.name, "transformers")
    assert card.content == model_card(directory).content, "stale: run python -m core.models.cards"


def test_every_training_command_parses():
    for directory in shipped_model_dirs():
        for command in re.findall(r"```\n(python -m core train [^\n]+)\n```", (directory / CARD_FILE).read_text()):
            build_parser().parse_args(command.split()[3:])


@pytest.mark.parametrize("directory", [MODELS / name for name in BENCHED_DRAFTERS], ids=lambda p: p.name)
def test_drafter_figures_are_the_benchmarks(directory):
    card, column = (directory / CARD_FILE).read_text(), BENCHED_DRAFTERS[directory.name]
    for file in DRAFTER_BENCHES:
        entry, line = _results(file)["drafters"][column], _line_naming(card, file)
        assert f"| {entry['tau']:.2f} |" in line and f"| {entry['speedup']:.2f}x |" in line, line


def test_target_figures_are_the_evaluations():
    card = (MODELS / "target" / CARD_FILE).read_text()
    world = _results("eval_target.json")
    assert f"exact match **{world['exact_match']:.3f}**" in card
    assert all(f"{task} {value:.2f}" in card for task, value in world["per_task"].items())
    photos = _results("eval_target_photos.json")
    rows = [line for line in card.splitlines() if "assets/results/eval_target_photos.json` |" in line]
    assert [f"| {photos[part]['region_agreement']:.2f} |" in row for part, row in zip(("generated", "photographs"), rows)] \
        == [True, True]
    for file in TARGET_IMAGE_EVALS:
        result = _results(file)
        assert f"| {result['exact_match']:.2f} | {result['region_agreement']:.2f} |" in _line_naming(card, file)
    config = json.loads((MODELS / "target" / "config.json").read_text())
    assert f"seen as a {config['image_side']}x{config['image_side']} square" in card


def test_moe_figures_are_the_reap_bench():
    card, bench = (MODELS / "moe" / CARD_FILE).read_text(), _results("reap_bench.json")
    reap_half = next(r for r in bench["results"] if (r["method"], r["ratio"], r["protect"]) == ("reap", 0.5, 0))
    assert f"| reap | 50% | {reap_half['quality']['code']['ppl']:.2f} / {reap_half['quality']['code']['acc']:.2f} |" \
        in card
    assert f"| unpruned | 0 | {bench['baseline']['code']['ppl']:.2f} /" in card


@pytest.mark.parametrize("layout,library", [("speculators", "speculators"), ("specforge", "sglang")])
def test_an_eagle3_export_writes_a_card(tmp_path, layout, library):
    out = tmp_path / f"eagle3-{layout}"
    main(["export", "eagle3", "--format", layout, "--out", str(out)])
    card = _check_card(out / CARD_FILE)
    assert card.data.library_name == library and "eagle3" in card.data.tags
    assert f"--weights assets/models/eagle3 --format {layout}" in card.content
    assert str(tmp_path) not in card.content and f"weights={out.name}" in card.content
    shipped = (MODELS / "eagle3" / CARD_FILE).read_text()
    assert _line_naming(card.content, DRAFTER_BENCHES[0]) == _line_naming(shipped, DRAFTER_BENCHES[0])


def test_a_prune_and_a_merge_write_a_card(tmp_path):
    main(["reap", "score", "--calib", "math", "--tokens", "512", "--out", str(tmp_path / "scores")])
    for verb, method in (("prune", "reap"), ("merge", "hc-smoe")):
        out = tmp_path / f"moe-{method}"
        main(["reap", verb, "--scores", str(tmp_path / "scores"), "--method", method, "--ratio", "0.5",
              "--out", str(out)])
        card = _check_card(out / CARD_FILE)
        assert card.data.library_name == "transformers" and "reap" in card.data.tags
        assert f"python -m core reap {verb} --method {method} --ratio 0.5" in card.content
        assert "`assets/models/moe` with 50% of its routed experts removed" in card.content
        assert str(tmp_path) not in card.content
