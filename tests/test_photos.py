"""Images beyond the world (core/world/photos.py): deterministic per (split, index), answers that are what the
pixels say, images with text answered "I cannot read it" and others "There is no text.", collages whose regions differ, held-out
photographs only in the held-out split, many sizes and aspect ratios.

    python -m pytest -q tests/test_photos.py
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from core.world import image_sources, photographs, photos, text_images
from core.world.describe import answers, layout


def test_a_sample_is_a_pure_function_of_split_and_index():
    a, b = photos.sample("train", 7), photos.sample("train", 7)
    assert (a.prompt, a.answer) == (b.prompt, b.answer) and np.array_equal(np.asarray(a.image), np.asarray(b.image))
    held = photos.sample("heldout", 7)
    assert not np.array_equal(np.asarray(held.image), np.asarray(a.image))


@pytest.mark.parametrize("task", photos.TASKS)
@pytest.mark.parametrize("source", photos.SOURCES)
def test_answers_are_what_the_pixels_say(task, source):
    for index in range(3):
        s = photos.sample("train", index, task, source)
        found = answers(s.image)
        if task == "layout":
            assert s.prompt in photos.PARAPHRASES["layout"] + photos.MORE_WORDINGS["layout"]
            assert s.answer == found["Describe the image."]
        elif task == "region":
            position = max((p for p in photos.POSITIONS if p in s.prompt), key=len)  # "top left", not "left"
            assert s.answer == found[f"What colour is the {position}?"]
        elif task == "colours":
            assert s.answer == found["What are the main colours?"]
        elif task == "brightest":
            assert s.answer == found["Which region is the brightest?"]
        elif task == "read":
            assert s.prompt in photos.PARAPHRASES["read"] + photos.MORE_WORDINGS["read"]
            assert s.answer == (photos.CANNOT_READ if s.holds_text else photos.NO_TEXT)
            assert s.holds_text == (source in text_images.WITH_TEXT)  # a photograph that may show text is not asked
        else:
            assert s.answer == f"I can only describe colours and layout: {layout(s.image).description()}"


def test_the_reference_answers_every_paraphrase_the_models_learned():
    """photos.reference (the app's "what the pixels say") gives each training sample's own answer, whatever
    paraphrase it was asked in; reading text is not a pixel question."""
    for index in range(6 * len(photos.SOURCES)):
        task, source = photos.TASKS[index % 6], photos.SOURCES[index // 6]
        s = photos.sample("train", index, task, source)
        unclaimed = task == "read" or s.prompt in photos.WORLD_QUESTIONS
        assert photos.reference(s.image, f" {s.prompt} ") == (None if unclaimed else s.answer), (task, s.prompt)
    assert {photos.sample("heldout", i, "layout").prompt for i in range(40)} == set(photos.PARAPHRASES["layout"])
    assert photos.reference(Image.new("RGB", (30, 30)), "What is the meaning of life?") is None
    assert photos.asks_to_read("what does the text say") and not photos.asks_to_read("Describe the image.")


def test_training_asks_the_wordings_users_type_and_the_held_out_split_the_evals_questions():
    key = photos._question_key
    for task in ("layout", "colours", "read", "unknown"):
        trained = {photos.sample("train", i, task).prompt for i in range(120)}
        more = set(photos.MORE_WORDINGS[task]) | (set(photos.WORLD_QUESTIONS) if task == "unknown" else set())
        paraphrases = set(photos.PARAPHRASES[task])
        assert trained & more and trained & paraphrases and trained <= more | paraphrases
        assert {photos.sample("heldout", i, task).prompt for i in range(60)} <= paraphrases
        # eval-target --wordings asks what training never does
        assert not {key(p) for p in photos.HELDOUT_WORDINGS.get(task, ())} & {key(p) for p in more | paraphrases}
    image = photos.sample("train", 0, "layout").image
    assert photos.reference(image, "what colors do you see") == photos.reference(image, "What are the main colours?")
    assert photos.asks_to_read("Is there any text in this image?")
    # The world's own questions have the world's answers on a world scene: the reference does not claim them.
    assert all(photos.reference(image, q) is None for q in photos.WORLD_QUESTIONS)


def test_the_region_probe_knows_which_regions_hold_text():
    """Text sources say per region where ink of text is; photographs that may show text say nothing (None: the
    probe does not learn from them), the others that no region holds text."""
    for index in range(12):
        document = photos.sample("train", index, "layout", "document")
        assert document.holds_text and len(document.text_regions) == 9 and any(document.text_regions)
        assert document.text_mask.size == document.image.size and document.text_mask.getbbox()
        drawing = photos.sample("train", index, "layout", "drawing")
        assert not drawing.holds_text and drawing.text_regions == (False,) * 9
        collage = photos.sample("train", index, "layout", "collage")
        assert collage.holds_text is False and collage.text_regions == (False,) * 9


def test_collage_regions_are_not_one_colour():
    """A collage's cells come from different sources, so its regions rarely share one colour (a plain photograph's
    often do: 43 % of crops are one colour term throughout)."""
    import random

    uniform = [len({colour.split()[-1] for colour in layout(photos.collage(random.Random(seed), "train")).regions}) == 1
               for seed in range(20)]
    assert sum(uniform) <= 3


def test_held_out_photographs_are_never_trained_on():
    assert photographs.photo_names("heldout") == photographs.HELDOUT_PHOTOS
    assert not set(photographs.photo_names("train")) & set(photographs.HELDOUT_PHOTOS)
    assert set(photographs.photo_names("train")) | set(photographs.HELDOUT_PHOTOS) == set(photographs.PHOTOS)
    data = pytest.importorskip("skimage.data")
    import random

    assert all(np.asarray(getattr(data, name)()).ndim >= 2 for name in photographs.PHOTOS)  # all bundled: no download
    for split in photos.SPLITS:
        for seed in range(5):
            assert photographs.photo(random.Random(seed), split).mode == "RGB"


def test_sizes_and_aspect_ratios_vary():
    sizes = [photos.sample("train", i).image.size for i in range(60)]
    ratios = [w / h for w, h in sizes]
    assert min(ratios) < 0.6 and max(ratios) > 1.6 and len(set(sizes)) > 50


def test_the_target_trains_on_the_world_and_beyond(tmp_path, tokenizer):
    """Both probes run (vision-only warm-up, then the whole model) on batches of world scenes and other images; a
    checkpoint of target runs 1-15's 96x96 / 16-pixel tower continues as a 192x192 / 32-pixel one, the run is
    evaluated on both kinds of held-out images, and a run continuing it starts from its probe heads."""
    import dataclasses
    import json

    import torch
    from safetensors.torch import load_file
    from helpers import TINY_TARGET

    from core.models.embedded import new_target, save_vlm
    from core.models.vlm import VisionLanguageModel
    from core.training.target import PROBES, TargetTrainConfig, train

    old = tmp_path / "96-pixel"
    save_vlm(new_target(dataclasses.replace(TINY_TARGET, side=96, patch=16), tokenizer), old)
    out = tmp_path / "target"
    train(TargetTrainConfig(steps=2, vision_steps=2, batch=12, warmup=1, init=str(old), out=str(out), eval_every=100,
                            eval_n=2, mix="world,photos"), TINY_TARGET)
    written = json.loads((out / "training_log.json").read_text())
    log = written["log"][-1]
    assert np.isfinite(log["loss"]) and set(log["photos"]) == {"generated", "photographs"}
    assert written["photo_packages"] == image_sources.summary()  # which photographs this run learned from
    config = VisionLanguageModel.from_pretrained(out).model.config
    assert (config.image_side, config.vision_config.patch_size) == (192, 32)
    again = tmp_path / "continued"
    train(TargetTrainConfig(steps=0, init=str(out), out=str(again), mix="world,photos"))
    heads, continued = load_file(out / PROBES), load_file(again / PROBES)
    assert heads.keys() == continued.keys() and all(torch.equal(heads[k], continued[k]) for k in heads)
    # From a checkpoint without probes (as the shipped model), --probe-steps trains fresh heads alone: the model's
    # weights stay as they were.
    (again / PROBES).unlink()
    warmed = tmp_path / "warmed"
    train(TargetTrainConfig(steps=0, probe_steps=2, batch=12, init=str(again), out=str(warmed), mix="world,photos"))
    before, after = load_file(again / "model.safetensors"), load_file(warmed / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    probes = load_file(warmed / PROBES)
    assert probes.keys() == heads.keys() and not torch.equal(probes["beyond.heads.term.weight"],
                                                             heads["beyond.heads.term.weight"])


def test_other_forms_ask_the_same_question_and_a_frozen_tower_stays(tmp_path, tiny_target_dir, monkeypatch):
    """`--other-forms` asks prompts typed another way (the reference still answers them), `--freeze-vision` trains
    the language model alone: the tower's weights come out bit-identical, the LM's do not."""
    import torch
    from safetensors.torch import load_file

    from core.training import target
    from core.world import mix

    image = photos.sample("train", 0, "layout").image
    forms = {form("What colour is the top left?") for form in mix.FORMS.values()}
    assert forms == {"what colour is the top left?", "WHAT COLOUR IS THE TOP LEFT?", "What colour is the top left",
                     "what colour is the top left"}
    assert {photos.reference(image, f) for f in forms} == {photos.reference(image, "What colour is the top left?")}
    batches = []
    real_batch = target.answer_batch
    monkeypatch.setattr(target, "answer_batch", lambda tok, batch, vlm: batches.append(batch)
                        or real_batch(tok, batch, vlm))
    out = tmp_path / "lm-only"
    target.train(target.TargetTrainConfig(steps=2, batch=12, warmup=1, init=str(tiny_target_dir), out=str(out),
                                          eval_every=100, eval_n=2, mix="world,photos", other_forms=1.0, paired=1.0,
                                          freeze_vision=True))
    asked = [s.prompt for batch in batches for s in batch]
    assert asked and all(p != p.capitalize() or not p.endswith(("?", ".")) for p in asked)  # every one re-typed
    pairs = [(a.prompt, b.prompt) for batch in batches for a, b in zip(batch, batch[1:]) if a.image is b.image]
    assert pairs and all(a.isupper() == b.isupper() and a[-1].isalpha() == b[-1].isalpha() for a, b in pairs)
    before, after = load_file(tiny_target_dir / "model.safetensors"), load_file(out / "model.safetensors")
    tower = [k for k in before if ".visual." in k or k.startswith("visual.")]
    assert tower and all(torch.equal(before[k], after[k]) for k in tower)
    assert any(not torch.equal(before[k], after[k]) for k in before if k not in tower)


def test_a_frozen_language_model_teaches_the_tower_alone(tmp_path, tiny_target_dir):
    """`--freeze-language` trains the tower through the language model's answers: the language model's weights come
    out bit-identical, the tower's do not; both frozen is refused."""
    import torch
    from safetensors.torch import load_file

    from core.training import target

    out = tmp_path / "tower-only"
    target.train(target.TargetTrainConfig(steps=2, batch=12, warmup=1, init=str(tiny_target_dir), out=str(out),
                                          eval_every=100, eval_n=2, mix="world,photos", freeze_language=True))
    before, after = load_file(tiny_target_dir / "model.safetensors"), load_file(out / "model.safetensors")
    tower = [k for k in before if ".visual." in k or k.startswith("visual.")]
    assert tower and len(tower) < len(before)
    assert all(torch.equal(before[k], after[k]) for k in before if k not in tower)
    assert any(not torch.equal(before[k], after[k]) for k in tower)
    with pytest.raises(ValueError, match="nothing to train"):
        target.train(target.TargetTrainConfig(steps=1, init=str(tiny_target_dir), out=str(tmp_path / "none"),
                                              freeze_vision=True, freeze_language=True))


def test_form_weights_draw_one_form_more_often_and_unweighted_draws_replay():
    """`--form-weights upper:3` draws upper case three times as often as each other form; without weights the draws
    are the `choice` ones runs recorded before weights existed; a form that does not exist is refused."""
    import random
    from collections import Counter

    from core.world import mix

    rng = random.Random(0)
    upper = Counter(mix.form_drawer({"upper": 3})(rng) is mix.FORMS["upper"] for _ in range(6000))
    assert abs(upper[True] / 6000 - 3 / 6) < 0.03
    drawn, replayed = random.Random(1), random.Random(1)
    assert all(mix.form_drawer()(drawn) is replayed.choice(list(mix.FORMS.values())) for _ in range(50))
    with pytest.raises(ValueError, match="title"):
        mix.form_drawer({"title": 2})


def test_the_task_sampler_weighs_tasks_by_source_and_boost():
    """Per-source tasks: the one still wrong gets the draws, and a boost names a task, a source or one pair."""
    from collections import Counter

    import torch

    from core.training.target import TaskSampler
    from core.world import mix

    arms = mix.tasks("world,photos", "photos", by_source=True)
    sampler = TaskSampler(arms, boost={"photos/read": 3, "@sign": 2, "photos/read@sign": 5})
    assert sampler.factor("photos/read@sign") == 30 and sampler.factor("photos/read@text") == 3
    assert sampler.factor("photos/layout@sign") == 2 and sampler.factor("photos/layout@text") == 1
    for _ in range(60):  # every answer right but the signs' reading ones
        sampler.update(list(arms), torch.tensor([5.0 if a == "photos/read@sign" else 0.0 for a in arms]))
    drawn = Counter(sampler.draw(2000))
    assert drawn["photos/read@sign"] > 0.6 * 2000 and drawn["photos/layout@text"] > 0  # the floor keeps every task


def test_the_vision_probe_skips_facts_no_sample_has(tiny_target):
    import torch

    from core.training.target import VisionProbe
    from core.world import scenes

    probe = VisionProbe(tiny_target.text_config.hidden_size)
    captions = [scenes.sample("train", i, "caption") for i in range(2)]  # no chart: no chart label or value
    losses = probe.losses(torch.randn(2 * 9, tiny_target.text_config.hidden_size), captions)
    assert set(losses) == {"patches", "cell"} and all(torch.isfinite(v) for v in losses.values())


def test_the_embedded_target_sees_any_image_as_3x3_tokens_that_are_its_regions(tiny_target):
    """With `image_side`, any aspect ratio becomes 3 x 3 merged tokens; the region probe's targets per token are the
    reference's answer for that region: in an image whose left third is red and the rest blue, 64 x 192 pixels
    (the processor alone would make it 2 x 6 tokens), the left column of tokens says red, the others blue."""
    import torch

    from core.training.target import RegionProbe
    from core.world.describe import TERMS
    from core.world.scenes import Sample

    pixels = np.zeros((64, 192, 3), dtype=np.uint8)
    pixels[:, :64] = (220, 20, 20)
    pixels[:, 64:] = (20, 40, 220)
    image = Image.fromarray(pixels)
    assert tiny_target.model.config.image_side == 192
    assert tiny_target.pixels([image])["image_grid_thw"].tolist() == [[1, 6, 6]]
    assert tiny_target.image_processor(images=[image], return_tensors="pt")["image_grid_thw"].tolist() != [[1, 6, 6]]
    probe = RegionProbe(tiny_target.text_config.hidden_size)
    unknown = Sample(image, "layout", "Describe the image.", "")  # whether it holds text is not known
    targets = probe.targets([unknown])
    red, blue = TERMS.index("red"), TERMS.index("blue")
    assert targets["term"].tolist() == [red, blue, blue] * 3 and targets["cell"].tolist() == list(range(9))
    assert targets["text"].tolist() == [-100] * 9
    features = torch.randn(9, tiny_target.text_config.hidden_size, requires_grad=True)
    losses = probe.losses(features, [unknown])
    sum(losses.values()).backward()
    assert set(losses) == {"cell", "term", "shade", "lightness"} and features.grad.abs().sum() > 0
    left_column = tuple(column == 0 for _ in range(3) for column in range(3))
    known = Sample(image, "layout", "Describe the image.", "", holds_text=True, text_regions=left_column)
    assert probe.targets([known])["text"].tolist() == [1, 0, 0] * 3
    assert set(probe.losses(features, [known])) == {"cell", "term", "shade", "lightness", "text"}
    with pytest.raises(ValueError, match="3x3"):
        probe.losses(torch.randn(12, tiny_target.text_config.hidden_size), [unknown])


def test_the_heldout_photographs_are_written_whole(tmp_path):
    pytest.importorskip("skimage", reason="scikit-image is not installed (the photos extra)")
    from skimage import data

    paths = photos.write_heldout_photos(str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in paths] == [f"{name}.png" for name in photographs.HELDOUT_PHOTOS]
    astronaut = Image.open(tmp_path / "astronaut.png")
    assert astronaut.size == data.astronaut().shape[1::-1] and astronaut.mode == "RGB"


def test_the_heldout_views_are_views_of_the_heldout_photographs(tmp_path):
    pytest.importorskip("skimage", reason="scikit-image is not installed (the photos extra)")
    paths = photos.write_heldout_views(str(tmp_path), 3)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["view000.png", "view001.png", "view002.png"]
    for i, path in enumerate(paths):
        view = Image.open(path)
        assert view.tobytes() == photos.sample("heldout", i, "layout", "photo").image.tobytes()
    assert len({Image.open(p).size for p in paths}) > 1  # random crops and aspect ratios, not one size


def test_a_boost_that_weighs_no_task_is_refused():
    """A misspelt --boost name, or a source's task without --by-source, would train as if it were not there."""
    from core.training.target import check_boost

    check_boost({"photos/read": 3, "@sign": 2, "photos/read@chart": 4, "ocr": 3}, "world,photos", by_source=True)
    with pytest.raises(ValueError, match="photos/raed"):
        check_boost({"photos/raed": 3}, "world,photos", by_source=True)
    with pytest.raises(ValueError, match="--by-source"):
        check_boost({"photos/read@sign": 3}, "world,photos", by_source=False)
    with pytest.raises(ValueError, match="photos/read"):  # the world mix has no photos tasks
        check_boost({"photos/read": 3}, "world", by_source=False)
