"""The command line: generate's JSON schema (bad input: tests/test_bad_inputs.py)."""

from __future__ import annotations

import json

import pytest

from core.__main__ import main
from core.world import scenes


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "scene.png"
    scenes.sample("heldout", 0).image.save(path)
    return path


def test_generate_json_schema(tiny_target_dir, image_file, capsys):
    main(["generate", "--model", str(tiny_target_dir), "--image", str(image_file), "--prompt", "Describe the image.",
          "--max-new-tokens", "6", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"text", "token_ids", "new_tokens", "target_forwards", "tau", "rounds", "seconds"}
    assert out["new_tokens"] == len(out["token_ids"]) <= 6
    assert out["tau"] == out["new_tokens"] / out["target_forwards"]
    assert all(set(r) == {"drafted", "accepted", "emitted"} for r in out["rounds"])
    assert sum(r["emitted"] for r in out["rounds"]) == out["new_tokens"]
