"""The shipped embedded weights: the target answers the world, and every drafter decodes losslessly."""

from __future__ import annotations

import json

import pytest

from core.__main__ import main
from core.bench.evaluate import exact_match
from core.bench.spec import bench as bench_spec
from core.decoding.engine import SpeculativeEngine
from core.decoding.sampling import SamplingConfig
from core.models.registry import DRAFTERS, load_drafter, load_target
from core.world import scenes


@pytest.fixture(scope="module")
def engine():
    return SpeculativeEngine(load_target("embedded"))


def _exact(engine, samples) -> int:
    return sum(engine.generate(s.image, s.prompt).text == s.answer for s in samples)


def test_shipped_target_is_the_trained_one(engine):
    """A quick guard against shipping untrained or mismatched weights: the shipped target answers 28 of these 40
    vqa questions (an untrained one answers none)."""
    right = _exact(engine, scenes.samples("heldout", 40, ("vqa",), start=500))
    assert right >= 15, f"{right}/40 exact"


def test_target_meets_the_accuracy_goal():
    """The goal, measured as `python -m core eval-target --n 200` measures it: 0.85 exact match on the held-out
    answers of each task family."""
    result = exact_match(load_target("embedded"), scenes.samples("heldout", 200))
    assert all(acc >= 0.85 for acc in result["per_task"].values()), result


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_drafters_are_lossless_and_accepted(engine, name):
    drafter = load_drafter(name)
    drafted = accepted = 0
    for s in scenes.samples("heldout", 4, start=900):
        plain = engine.generate(s.image, s.prompt)
        spec = engine.generate(s.image, s.prompt, drafter, gamma=4)
        assert spec.token_ids == plain.token_ids
        drafted += sum(len(r.drafted) for r in spec.rounds)
        accepted += sum(r.accepted for r in spec.rounds)
    assert accepted / drafted > 0.3  # a trained drafter, not noise


def test_sampled_generation_is_reproducible(engine):
    s = scenes.sample("heldout", 3)
    cfg = SamplingConfig(temperature=1.0, top_p=0.95)
    a = engine.generate(s.image, s.prompt, load_drafter("text"), sampling=cfg, seed=11)
    b = engine.generate(s.image, s.prompt, load_drafter("text"), sampling=cfg, seed=11)
    assert a.token_ids == b.token_ids


def test_bench_spec_report_schema(tmp_path):
    path = tmp_path / "bench.json"
    main(["bench-spec", "--drafters", "text", "--n", "4", "--max-new-tokens", "24", "--repeats", "2",
          "--json", str(path)])
    report = json.loads(path.read_text())
    assert set(report) >= {"config", "ar", "drafters"} and report["ar"]["tokens_per_s"] > 0
    assert report["config"]["repeats"] == 2
    entry = report["drafters"]["text"]
    assert set(entry) >= {"tau", "acceptance_rate", "per_position_acceptance", "speedup", "tokens_per_s",
                          "lossless_mismatches", "per_task", "hf_assisted", "rejections", "near_tie_rejections"}
    assert entry["lossless_mismatches"] == 0 and entry["tau"] >= 1.0
    assert entry["near_tie_rejections"] is None or 0.0 <= entry["near_tie_rejections"] <= 1.0
    assert len(entry["per_position_acceptance"]) == 4
    assert set(entry["per_task"]) == set(scenes.TASKS)


def test_bench_spec_needs_at_least_one_repeat():
    with pytest.raises(ValueError, match="repeats"):
        bench_spec(["text"], n=1, repeats=0)


def _issue_image(size, lines, ink, paper, font_size):
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, paper)
    face = ImageFont.load_default(size=font_size)
    ImageDraw.Draw(image).multiline_text((size[0] // 2, size[1] // 2), "\n".join(lines), font=face, fill=ink,
                                         anchor="mm", align="center", spacing=font_size // 3)
    return image


ISSUE_IMAGES = [
    ((320, 120), ["OPEN 24 HOURS"], (20, 20, 20), (245, 243, 235), 30),
    ((200, 200), ["STOP"], (255, 255, 255), (30, 60, 200), 56),
    ((400, 300), ["Milk, eggs, bread", "call Anna at 5", "pay the rent!"], (40, 40, 50), (255, 255, 255), 28),
]


@pytest.mark.parametrize("size, lines, ink, paper, font_size", ISSUE_IMAGES)
def test_the_shipped_target_names_no_word_it_cannot_read(engine, size, lines, ink, paper, font_size):
    """Text drawn in Pillow's own font, in sizes and words the training data did not use: asked to read, the target
    answers one of its two honest sentences, never a word."""
    from core.world.reference import HONEST_READINGS

    image = _issue_image(size, lines, ink, paper, font_size)
    assert engine.generate(image, "What is written here?", max_new_tokens=16).text in HONEST_READINGS


@pytest.mark.parametrize("size, lines, ink, paper, font_size", ISSUE_IMAGES)
def test_the_shipped_target_says_it_cannot_read_text_it_cannot_read(engine, size, lines, ink, paper, font_size):
    """The same images: it says there is text it cannot read, and describes them by their colour layout, never with
    a world caption."""
    from core.bench.evaluate import LAYOUT_START
    from core.world.photos import CANNOT_READ

    image = _issue_image(size, lines, ink, paper, font_size)
    assert engine.generate(image, "What is written here?", max_new_tokens=16).text == CANNOT_READ
    assert LAYOUT_START.match(engine.generate(image, "Describe the image.", max_new_tokens=16).text)


def test_the_shipped_target_reads_no_world_word_into_a_notice(engine):
    """Real sign words dark on a light page look like the world's OCR scenes (target run 23 read `OPEN 24 HOURS` as
    CLOUD); the shipped target names none of the world's words on the notices of core/world/text_images.py."""
    from core.world.scenes import OCR_WORDS
    from core.world.text_images import notices

    said = [engine.generate(image, "What is written here?", max_new_tokens=16).text for _, image in notices(20)]
    assert not [s for s in said if set(s.split()) & set(OCR_WORDS)], said


def test_a_96_pixel_target_resized_to_32_pixel_patches_sees_the_same(tokenizer):
    """Target runs 1-15 saw 96x96 squares in 16-pixel patches; `resized_target` turns one into a 192x192 / 32-pixel
    target with the same visual tokens, so run 16 starts where run 15 ended."""
    import dataclasses

    import numpy as np
    import torch
    from helpers import TINY_TARGET
    from PIL import Image

    from core.models.embedded import new_target, resized_target

    torch.manual_seed(0)
    old = new_target(dataclasses.replace(TINY_TARGET, side=96, patch=16), tokenizer)
    new = resized_target(old, TINY_TARGET)
    assert (new.model.config.image_side, new.model.config.vision_config.patch_size) == (192, 32)
    assert new.pixels([Image.new("RGB", (50, 70))])["image_grid_thw"].tolist() == [[1, 6, 6]]
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (192, 192, 3), dtype=np.uint8))
    seen = [m.model.get_image_features(**m.pixels([image])).pooler_output[0]
            for m in (old, new)]
    # The 96x96 square is the 192x192 one's 2x2 means, up to rounding to whole pixel values.
    assert torch.allclose(seen[0], seen[1], atol=0.05 * seen[0].abs().max().item())
    with pytest.raises(ValueError, match="patch grid and merge must stay the same"):
        resized_target(old, dataclasses.replace(TINY_TARGET, side=160, patch=32))


def test_a_target_of_8_pixel_patches_merged_8x8_loads_and_sees_3x3_tokens(tokenizer, tmp_path):
    """The tower a next target run needs to see text (docs/experiments.md, "which vision tower can see a sign?"):
    a 24x24 patch grid of the same 192x192 square, windows of one region, still the 3x3 visual tokens."""
    import dataclasses

    import torch
    from helpers import TINY_TARGET
    from PIL import Image

    from core.decoding.engine import SpeculativeEngine
    from core.models.embedded import new_target, save_vlm, target_size
    from core.models.vlm import VisionLanguageModel

    size = dataclasses.replace(TINY_TARGET, patch=8, merge=8, window=64)
    save_vlm(new_target(size, tokenizer), tmp_path)
    target = VisionLanguageModel.from_pretrained(tmp_path)
    assert target_size(target.model.config) == size  # read back as built
    image = Image.new("RGB", (300, 200), (20, 120, 200))
    pixels = target.pixels([image])
    assert pixels["image_grid_thw"].tolist() == [[1, 24, 24]]
    assert target.model.get_image_features(**pixels).pooler_output[0].shape == (9, size.hidden)
    # The engine's explicit 3-D rotary positions over the 9 visual tokens agree with transformers' generate.
    request = target.prepare(image, "Describe the image.")
    plain = target.model.generate(input_ids=request.input_ids, attention_mask=torch.ones_like(request.input_ids),
                                  mm_token_type_ids=request.mm_token_type_ids, pixel_values=request.pixel_values,
                                  image_grid_thw=request.image_grid_thw, max_new_tokens=8, do_sample=False)
    said = SpeculativeEngine(target).generate(image, "Describe the image.", max_new_tokens=8).token_ids
    assert len(said) >= 2 and said == plain[0, request.input_ids.shape[1]:].tolist()
