"""The command line: generate's JSON schema, clear errors for bad input."""

from __future__ import annotations

import json

import pytest

from core import world
from core.__main__ import main


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "scene.png"
    world.sample("heldout", 0).image.save(path)
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


@pytest.mark.parametrize("argv, message", [
    (["--image", "/nonexistent.png"], "image not found"),
    (["--drafter", "nope"], "unknown drafter"),
    (["--temperature", "nan"], "temperature"),
    (["--gamma", "0"], "gamma"),
])
def test_bad_input_gets_a_clear_error(tiny_target_dir, argv, message):
    with pytest.raises(ValueError, match=message):
        main(["generate", "--model", str(tiny_target_dir), "--prompt", "hi", "--max-new-tokens", "3", *argv])


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown model"):
        main(["generate", "--model", str(tmp_path / "missing"), "--prompt", "hi"])


def test_non_image_file_is_a_clear_error(tiny_target_dir, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("this is not an image")
    with pytest.raises(ValueError, match="not a readable image"):
        main(["generate", "--model", str(tiny_target_dir), "--image", str(bad), "--prompt", "hi"])
