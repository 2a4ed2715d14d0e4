"""scripts/soup.py: the weighted mean of two checkpoints, every weight file of them."""
import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

SPEC = importlib.util.spec_from_file_location("soup", Path(__file__).parents[1] / "scripts" / "soup.py")
soup = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(soup)


def checkpoint(path: Path, scale: float, files=("model.safetensors", "projector.safetensors")) -> Path:
    path.mkdir()
    for i, name in enumerate(files):
        save_file({"w": torch.full((2, 3), scale * (i + 1), dtype=torch.bfloat16)}, path / name)
    (path / "config.json").write_text(f'{{"scale": {scale}}}')
    return path


def test_every_weight_file_is_mixed_and_the_rest_is_b(tmp_path):
    a, b = checkpoint(tmp_path / "a", 1.0), checkpoint(tmp_path / "b", 5.0)
    soup.soup(a, b, 0.25, tmp_path / "out")
    assert torch.equal(load_file(tmp_path / "out" / "model.safetensors")["w"],
                       torch.full((2, 3), 2.0, dtype=torch.bfloat16))
    assert torch.equal(load_file(tmp_path / "out" / "projector.safetensors")["w"],
                       torch.full((2, 3), 4.0, dtype=torch.bfloat16))
    assert (tmp_path / "out" / "config.json").read_text() == '{"scale": 5.0}'


def test_checkpoints_of_other_files_or_a_weight_outside_0_1_are_refused(tmp_path):
    a, b = checkpoint(tmp_path / "a", 1.0), checkpoint(tmp_path / "b", 5.0, files=("model.safetensors",))
    with pytest.raises(ValueError, match="different weight files"):
        soup.soup(a, b, 0.5, tmp_path / "out")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        soup.soup(a, a, 1.5, tmp_path / "out2")
    assert not (tmp_path / "out").exists()
