"""A new vision tower for a trained target (core/training/tower.py) and the per-patch text labels it learns from
(core/training/target.py's PatchTextProbe and patch_states).

    python -m pytest -q tests/test_tower.py
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from helpers import TINY_TARGET
from PIL import Image
from safetensors.torch import load_file
from transformers import get_cosine_schedule_with_warmup

from core.__main__ import build_parser
from core.models.embedded import image_processor, new_target
from core.models.vlm import VisionLanguageModel
from core.training.target import PROBES, PatchTextProbe, TargetTrainConfig, patch_states
from core.training.target import train as train_target
from core.training.tower import TowerTrainConfig, config, draw_batch, fine_tower, lr_factor, torchvision_twin, train
from core.world import image_sources
from core.world.scenes import Sample

FINE = dataclasses.replace(TINY_TARGET, patch=8, merge=8, window=128, vision_depth=2)


def test_patch_states_are_the_patches_in_the_processors_order(tokenizer):
    """A tower whose blocks add nothing (their residual projections zero) passes its patch embeddings through, in its
    windows' order (windows of 2x2 regions here, so not the processor's); patch_states gives them back in the
    processor's order, the order PatchTextProbe's labels follow."""
    torch.manual_seed(0)
    visual = (vlm := new_target(FINE, tokenizer)).model.model.visual
    for block in visual.blocks:
        for layer in (block.attn.proj, block.mlp.down_proj):
            torch.nn.init.zeros_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (192, 192, 3), dtype=np.uint8))
    pixels = vlm.pixels([image])
    with torch.no_grad():
        out = vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"], return_dict=True)
        embedded = visual.patch_embed(pixels["pixel_values"])
    assert not torch.allclose(out.last_hidden_state, embedded)  # the windows reorder the patches
    assert torch.allclose(patch_states(visual, out, pixels["image_grid_thw"]), embedded)


def test_patch_text_labels_follow_the_ink():
    """A patch holds text where its share of ink passes PatchTextProbe.INK; labels run merged token by merged token
    (row-major), then row-major inside each; an image known to hold no text is all 0, one not known all -100."""
    mask = np.zeros((192, 192), np.uint8)
    mask[0:8, 8:16] = 255  # patch (0, 1): token 0, its patch 1
    mask[72:80, 0:2] = 255  # patch (9, 0), a quarter inked: token 3 (row 1, column 0), its patch (1, 0) = 8
    mask[100, 100] = 255  # one pixel of 64: below INK
    image = Image.new("RGB", (192, 192))
    inked = Sample(image, "photos/read", "", "", holds_text=True, text_regions=(True,) * 9,
                   text_mask=Image.fromarray(mask))
    empty = Sample(image, "photos/read", "", "", holds_text=False, text_regions=(False,) * 9)
    unknown = Sample(image, "photos/layout", "", "")
    labels = PatchTextProbe(8).targets([inked, empty, unknown], side=192, grid=24, merge=8).view(3, -1)
    assert labels[0].nonzero().view(-1).tolist() == [1, 3 * 64 + 8]
    assert (labels[1] == 0).all() and (labels[2] == -100).all()


def test_a_new_tower_learns_the_old_tokens_and_keeps_the_language_model(tmp_path, tiny_target_dir):
    """The new tower's checkpoint loads with from_pretrained, cuts 8-pixel patches merged 8x8 (still 3x3 tokens),
    carries the language model bit for bit, gets closer to the old tower's tokens on held-out world scenes as it
    trains, and `train target --init` continues it with its own tower."""
    out = tmp_path / "tower"
    train(TowerTrainConfig(init=str(tiny_target_dir), out=str(out), steps=40, batch=6, lr=1e-3, warmup=1, workers=1,
                           eval_every=20, heldout=2, size=FINE))
    written = json.loads((out / "training_log.json").read_text())
    log = written["log"]
    assert written["photo_packages"] == image_sources.summary() and written["device"] == "cpu"
    assert [row["step"] for row in log] == [20, 40]
    assert log[-1]["heldout"]["world_distill"] < log[0]["heldout"]["world_distill"] / 2
    assert set(log[-1]["heldout"]) >= {"world_distill", "document", "sign", "photo"}
    new = VisionLanguageModel.from_pretrained(out)
    vision = new.model.config.vision_config
    assert (vision.patch_size, vision.spatial_merge_size, new.model.config.image_side) == (8, 8, 192)
    assert new.pixels([Image.new("RGB", (300, 100))])["image_grid_thw"].tolist() == [[1, 24, 24]]
    before, after = load_file(tiny_target_dir / "model.safetensors"), load_file(out / "model.safetensors")
    language = [k for k in before if not k.startswith("visual.")]  # the saved names of the tower's weights
    assert language and all(torch.equal(before[k], after[k]) for k in language)
    continued = tmp_path / "continued"
    train_target(TargetTrainConfig(steps=1, batch=4, warmup=1, init=str(out), out=str(continued), eval_every=100,
                                   eval_n=2, mix="world,photos"))
    assert VisionLanguageModel.from_pretrained(continued).model.config.vision_config.patch_size == 8
    # --continue-tower starts from the checkpoint's own tower and probes, its starting tokens the teacher.
    again = tmp_path / "again"
    train(TowerTrainConfig(init=str(out), out=str(again), steps=0, workers=1, heldout=2, size=FINE,
                           continue_tower=True))
    start, same = load_file(out / "model.safetensors"), load_file(again / "model.safetensors")
    assert start.keys() == same.keys() and all(torch.equal(start[k], same[k]) for k in start)
    assert all(torch.equal(v, load_file(again / PROBES)[k]) for k, v in load_file(out / PROBES).items())


def test_the_command_line_sizes_the_new_tower(tiny_target_dir):
    """--vision-depth and --vision-hidden size the fresh tower (heads of 16 channels); without them it is the default
    fine tower; --init is required and must not be --out; --continue-tower trains init's own tower, of its size."""
    def cfg(*flags):
        return config(build_parser().parse_args(["train", "tower", *flags]))

    narrow = cfg("--init", "runs/a", "--out", "runs/b", "--vision-depth", "3", "--vision-hidden", "32")
    assert (narrow.size.vision_depth, narrow.size.vision_hidden, narrow.size.vision_heads) == (3, 32, 2)
    assert narrow.size.patch == fine_tower().patch and narrow.init == "runs/a"
    assert cfg("--init", "runs/a", "--out", "runs/b").size == fine_tower()
    leased = cfg("--init", "runs/a", "--out", "runs/b", "--device", "cuda", "--seconds", "420")
    assert (leased.device, leased.seconds) == ("cuda", 420.0)
    with pytest.raises(ValueError, match="--init is required"):
        cfg("--out", "runs/b")
    with pytest.raises(ValueError, match="must not be --init"):
        cfg("--init", "runs/a", "--out", "runs/a")
    resumed = cfg("--init", str(tiny_target_dir), "--out", "runs/b", "--continue-tower")
    assert resumed.continue_tower and resumed.init == str(tiny_target_dir)
    assert resumed.size == TINY_TARGET  # init's own tower, as its training log records it
    with pytest.raises(ValueError, match="own tower"):
        cfg("--init", str(tiny_target_dir), "--out", "runs/b", "--continue-tower", "--vision-hidden", "96")
    with pytest.raises(ValueError, match="run past the tower's"):
        cfg("--init", "runs/a", "--out", "runs/b", "--first-image", "999000", "--steps", "100")


def test_a_continued_tower_can_start_past_the_images_it_saw():
    """--first-image moves every batch along the tower's range: step s past 48 images is step s + 2 of batch 24."""
    later, same = draw_batch(1, TowerTrainConfig(batch=24, first_image=48)), draw_batch(3, TowerTrainConfig(batch=24))
    assert [s.prompt for s in later] == [s.prompt for s in same]
    assert [s.image.tobytes() for s in later] == [s.image.tobytes() for s in same]


def test_the_schedule_is_transformers_cosine_and_a_time_budget_ends_it_early(tmp_path, tiny_target_dir):
    """Without a time budget the learning rate follows transformers' warmup + cosine; with one (a GPU lease) the
    cosine runs over the budget when that ends first, and training stops there with its evaluation and checkpoint."""
    cfg = TowerTrainConfig(steps=50, warmup=5)
    reference = get_cosine_schedule_with_warmup(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), 5, 50)
    expected = []
    for _ in range(50):
        expected.append(reference.get_last_lr()[0])
        reference.optimizer.step()
        reference.step()
    assert [lr_factor(step, cfg, elapsed=1e9) for step in range(50)] == pytest.approx(expected)
    timed = dataclasses.replace(cfg, seconds=100.0)
    assert lr_factor(25, timed, elapsed=50.0) == pytest.approx(0.5)  # half the budget: half the cosine
    assert lr_factor(45, timed, elapsed=10.0) == pytest.approx(lr_factor(45, cfg, 0.0))  # the steps end first
    out = tmp_path / "timed"
    train(TowerTrainConfig(init=str(tiny_target_dir), out=str(out), steps=1000, batch=4, warmup=1, workers=1,
                           eval_every=500, heldout=2, size=FINE, seconds=1e-6, device="cpu"))
    log = json.loads((out / "training_log.json").read_text())["log"]
    assert [row["step"] for row in log] == [1]
    assert VisionLanguageModel.from_pretrained(out).model.config.vision_config.patch_size == 8


def test_on_a_gpu_the_squares_pixels_are_the_pil_processors():
    """Training on a GPU gives the tower the torchvision twin's tensors, computed there; on the squares the tower
    trains on they are the PIL processor's (what inference uses) within float rounding, for both patch sizes."""
    pytest.importorskip("torchvision")
    rng = np.random.default_rng(0)
    squares = [Image.fromarray(rng.integers(0, 256, (192, 192, 3), dtype=np.uint8)) for _ in range(3)]
    for size in (TINY_TARGET, FINE):
        processor = image_processor(size)
        pil = processor(images=squares, return_tensors="pt")
        twin = torchvision_twin(processor)(images=squares, return_tensors="pt", device="cpu")
        assert torch.equal(pil["image_grid_thw"], twin["image_grid_thw"])
        assert torch.allclose(pil["pixel_values"], twin["pixel_values"], atol=1e-5)
