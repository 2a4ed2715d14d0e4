"""Training drafters on the user's own images (core/training/training_data.py): folders with and without metadata.jsonl,
every bad input, datasets through the real datasets library (Dataset.from_dict with PIL images, saved as parquet and
loaded offline by load_dataset; skipped where the optional 'data' extra is not installed), self-distillation sets on
such examples (and world sets unchanged), and MASSV phases 1 and 2 and DREAM trained end to end on a folder for a
target loaded by path, whose drafters decode losslessly.

    OMP_NUM_THREADS=1 python -m pytest -q tests/test_training_data.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
import torch

from core.decoding.engine import SpeculativeEngine
from core.drafters.dream import DreamDrafter
from core.drafters.massv import MassvDrafter
from core.models.embedded import EMBEDDED_PATHS
from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel
from core.training import self_distill, training_data
from core.training.dream import DreamTrainConfig
from core.training.dream import train as train_dream
from core.training.massv import MassvTrainConfig
from core.training.massv import train as train_massv
from core.training.self_distill import DistillConfig, distillation_set, load_or_make, training_samples
from core.world import scenes

# Different sizes and aspect ratios, so one batch mixes image grids (9, 4 and 15 visual tokens for the shipped target,
# whose processor keeps aspect ratios; a target with `image_side`, like the tiny one, sees 9 each).
IMAGES = {"square.png": (96, 96), "wide.jpg": (160, 64), "tall.webp": (64, 128)}
ROWS = [
    {"file_name": "square.png", "prompt": "What is in this picture?", "answer": "two objects"},
    {"file_name": "wide.jpg", "prompt": "Describe the image.", "answer": "a wide scene", "task": "caption"},
    {"file_name": "tall.webp", "prompt": "What colour is the top?", "answer": "red"},
    {"file_name": "square.png", "prompt": "How many objects are there?", "answer": "two"},
]


def _write_images(folder, images=IMAGES):
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, size) in enumerate(images.items()):
        scenes.sample("heldout", i).image.resize(size).save(folder / name)
    return folder


def _write_metadata(folder, rows, extra_lines=()):
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    (folder / training_data.METADATA_FILE).write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Three images of different sizes and four rows with answers (one image asked twice)."""
    return _write_metadata(_write_images(tmp_path_factory.mktemp("my-images")), ROWS)


def test_folder_with_metadata(tmp_path):
    rows = [ROWS[0], {"file_name": "wide.jpg", "prompt": "Describe.", "task": "caption"}, ROWS[2]]
    data = training_data.from_folder(_write_metadata(_write_images(tmp_path), rows, extra_lines=["", "  "]))
    assert data.source == f"data-dir:{tmp_path.resolve()}"
    assert len(data) == 3  # blank lines are skipped
    samples = data[0:3]
    assert [s.image.size for s in samples] == [(96, 96), (160, 64), (64, 128)]
    assert all(s.image.mode == "RGB" for s in samples)
    assert [s.prompt for s in samples] == ["What is in this picture?", "Describe.", "What colour is the top?"]
    assert [s.answer for s in samples] == ["two objects", None, "red"]
    assert [s.task for s in samples] == ["custom", "caption", "custom"]
    assert data.examples[1].image == {"data_dir": str(tmp_path.resolve()), "file_name": "wide.jpg"}


def test_folder_without_metadata_gets_the_default_prompt(tmp_path):
    _write_images(tmp_path, {"c.png": (96, 96), "a.JPG": (64, 64), "b.bmp": (32, 48)})
    (tmp_path / "notes.txt").write_text("not an image, and not named like one")
    data = training_data.load(data_dir=str(tmp_path))
    assert [e.image["file_name"] for e in data.examples] == ["a.JPG", "b.bmp", "c.png"]
    assert {(e.prompt, e.answer, e.task) for e in data.examples} == {("Describe the image.", None, "custom")}
    assert [s.image.size for s in data] == [(64, 64), (32, 48), (96, 96)]


def test_rows_without_a_prompt_get_the_default_one(tmp_path):
    # A folder labelled only with which images hold text (eval-target --images --prompt ...) needs no prompts.
    rows = [{"file_name": "square.png", "has_text": True}, {"file_name": "wide.jpg", "has_text": False}]
    data = training_data.from_folder(_write_metadata(_write_images(tmp_path), rows))
    assert [(s.prompt, s.holds_text) for s in data[0:2]] == [(training_data.DEFAULT_PROMPT, True),
                                                             (training_data.DEFAULT_PROMPT, False)]


def _bad_json(folder):
    _write_metadata(folder, [ROWS[0]], extra_lines=['{"file_name": "square.png", "prompt": '])


def _not_an_image(folder):
    (folder / "fake.png").write_text("hello")
    _write_metadata(folder, [ROWS[0], {"file_name": "fake.png", "prompt": "What is it?"}])


def _not_an_image_without_metadata(folder):
    (folder / "fake.png").write_text("hello")


BAD_FOLDERS = {
    "empty dir": (lambda f: None, r"no metadata.jsonl and no images"),
    "only other files": (lambda f: (f / "readme.txt").write_text("x"), r"no metadata.jsonl and no images"),
    "empty metadata": (lambda f: (f / "metadata.jsonl").write_text("\n"), r"metadata.jsonl: no examples"),
    "bad json line": (_bad_json, r"metadata.jsonl line 2: not valid JSON"),
    "not an object": (lambda f: _write_metadata(f, [], ['["square.png"]']), r"metadata.jsonl line 1: expected a JSON"),
    "missing file_name": (lambda f: _write_metadata(f, [ROWS[0], {"prompt": "Hi?"}]),
                          r"metadata.jsonl line 2: missing 'file_name'"),
    "blank prompt": (lambda f: _write_metadata(f, [{"file_name": "square.png", "prompt": " "}]),
                     r"metadata.jsonl line 1: 'prompt' must be a non-empty string"),
    "answer not a string": (lambda f: _write_metadata(f, [{**ROWS[0], "answer": 2}]),
                            r"metadata.jsonl line 1: 'answer' must be a string"),
    "image missing": (lambda f: _write_metadata(f, [ROWS[0], {"file_name": "gone.png", "prompt": "Hi?"}]),
                      r"metadata.jsonl line 2: gone.png: no such image file"),
    "not an image": (_not_an_image, r"metadata.jsonl line 2: fake.png: not an image"),
    "not an image, no metadata": (_not_an_image_without_metadata, r"fake.png: not an image"),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_bad_folders_are_reported_by_file_and_line(tmp_path, case):
    prepare, message = BAD_FOLDERS[case]
    folder = tmp_path / "data"
    folder.mkdir()
    if case not in ("empty dir", "only other files", "not an image, no metadata"):
        _write_images(folder)
    prepare(folder)
    with pytest.raises(ValueError, match=message):
        training_data.from_folder(folder)


def test_missing_dir_and_two_sources_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="nowhere: no such directory"):
        training_data.load(data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="not both"):
        training_data.load(data_dir=str(tmp_path), hf_dataset="someone/pictures")
    assert training_data.load() is None  # the trainers' procedural world


@pytest.fixture
def fresh_hf_cache():
    training_data._hf_split.cache_clear()
    yield
    training_data._hf_split.cache_clear()


def test_hf_dataset_without_the_datasets_library_says_how_to_install_it(monkeypatch, fresh_hf_cache):
    monkeypatch.setitem(sys.modules, "datasets", None)  # an import of it fails, installed or not
    with pytest.raises(ValueError, match="pip install datasets"):
        training_data.load(hf_dataset="someone/pictures:validation")


def _parquet_dataset(folder, split: str, columns: dict):
    """A real datasets.Dataset (PIL images become its Image feature), written where load_dataset finds it offline:
    a local directory is a dataset name, and a file named SPLIT.parquet in it is that split."""
    datasets = pytest.importorskip("datasets", reason="the datasets library (the 'data' extra) is not installed")
    datasets.Dataset.from_dict(columns).to_parquet(str(folder / f"{split}.parquet"))
    return str(folder)


@pytest.fixture
def datasets_here(tmp_path, monkeypatch, fresh_hf_cache):
    """datasets, with its cache in tmp_path, and every load_dataset call recorded (the real one still runs)."""
    datasets = pytest.importorskip("datasets", reason="the datasets library (the 'data' extra) is not installed")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    calls, real = [], datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    return calls


def test_hf_dataset_examples_and_their_images(tmp_path, datasets_here):
    images = [scenes.sample("heldout", i).image.resize(size).convert("L") for i, size in enumerate(IMAGES.values())]
    name = _parquet_dataset(tmp_path / "pictures", "train", {"image": images,
                                                             "prompt": [f"Question {i}?" for i in range(3)],
                                                             "answer": [str(i) for i in range(3)]})
    data = training_data.load(hf_dataset=name)  # split defaults to train
    assert data.source == f"hf-dataset:{name}:train"
    assert [(e.prompt, e.answer, e.task) for e in data.examples] == \
        [(f"Question {i}?", str(i), "custom") for i in range(3)]
    assert data.examples[2].image == {"hf_dataset": name, "split": "train", "index": 2}
    samples = list(data)
    assert [(s.image.size, s.image.mode) for s in samples] == [(size, "RGB") for size in IMAGES.values()]
    assert samples[1].image.tobytes() == images[1].convert("RGB").tobytes()  # the pixels stored (PNG: lossless)
    assert datasets_here == [((name,), {"split": "train"})]  # loaded once, then read row by row


def test_hf_dataset_columns_and_rows_are_checked(tmp_path, datasets_here):
    image = scenes.sample("heldout", 0).image
    questions = _parquet_dataset(tmp_path / "questions", "test", {"image": [image], "question": ["Hi?"]})
    with pytest.raises(ValueError, match="no column prompt"):
        training_data.load(hf_dataset=f"{questions}:test")
    blank = _parquet_dataset(tmp_path / "blank", "train", {"image": [image, image], "prompt": ["Hi?", " "]})
    with pytest.raises(ValueError, match="row 1: missing 'prompt'"):
        training_data.load(hf_dataset=blank)
    tasks = _parquet_dataset(tmp_path / "tasks", "validation", {"image": [image], "prompt": ["Count."],
                                                                "task": ["counting"]})
    data = training_data.load(hf_dataset=f"{tasks}:validation")
    assert [(e.task, e.answer) for e in data.examples] == [("counting", None)]


def test_phase1_needs_ground_truth_answers(tmp_path):
    folder = _write_images(tmp_path / "unanswered")
    with pytest.raises(ValueError, match=r"ground-truth answers.*3 of 3 examples .* have no 'answer'"):
        train_massv(MassvTrainConfig(phase=1, data_dir=str(folder), out=str(tmp_path / "out")))


def test_own_data_or_target_needs_an_out_dir(folder, tiny_target_dir):
    """The default output is the shipped drafter's directory, which a drafter for other data must not replace."""
    with pytest.raises(ValueError, match="--out is required"):
        MassvTrainConfig(phase=2, data_dir=str(folder))
    with pytest.raises(ValueError, match="--out is required"):
        DreamTrainConfig(target=str(tiny_target_dir))
    assert DreamTrainConfig().out == str(EMBEDDED_PATHS["dream"])


def test_world_sets_keep_their_rows_metadata_and_reuse(tmp_path, tiny_target_dir, tiny_target, folder, monkeypatch):
    shipped = json.loads((EMBEDDED_PATHS["massv"] / "distillation_set.json").read_text())
    cfg = DistillConfig(str(tiny_target_dir), prompts=2, max_new_tokens=4)
    made = distillation_set(tiny_target, cfg)
    assert set(made["metadata"]) == set(shipped["metadata"])
    assert [set(r) for r in made["rows"]] == [set(shipped["rows"][0])] * 2
    first = training_samples({"metadata": shipped["metadata"], "rows": shipped["rows"][:1]})[0]
    row = shipped["rows"][0]
    assert first.image.tobytes() == scenes.sample(row["split"], row["index"], row["task"]).image.tobytes()
    assert first.answer == row["response"]

    path = tmp_path / "world.json"
    path.write_text(json.dumps(made))
    monkeypatch.setattr(self_distill, "distillation_set", lambda *a, **k: "generated")
    assert load_or_make(str(path), tiny_target, cfg) == made
    assert load_or_make(str(path), tiny_target, replace(cfg, target="/a/clone/elsewhere")) == made  # same weights
    assert load_or_make(str(path), tiny_target, replace(cfg, max_new_tokens=5)) == "generated"
    assert load_or_make(str(path), tiny_target, cfg, training_data.from_folder(folder)) == "generated"


def test_a_target_trained_in_one_part_alone_gets_a_new_fingerprint(tiny_target_dir, tiny_target):
    """A tower-only run (`train target --freeze-language`) leaves the token embeddings as they were; its answers
    differ, so a set the earlier target made must not be reused for it, nor a drafter card call it the same target."""
    again = VisionLanguageModel.from_pretrained(tiny_target_dir)
    assert self_distill.fingerprint(again) == self_distill.fingerprint(tiny_target)
    for part in ("visual", "language_model"):
        changed = VisionLanguageModel.from_pretrained(tiny_target_dir)
        name, weight = next((n, w) for n, w in changed.model.named_parameters() if part in n and w.dim() == 2)
        with torch.no_grad():
            weight.add_(1e-3)
        assert self_distill.fingerprint(changed) != self_distill.fingerprint(tiny_target), name


def test_a_larger_world_set_gives_its_first_prompts_in_whole_batches(tmp_path, tiny_target, monkeypatch):
    cfg = DistillConfig(prompts=2 * self_distill.DISTILL_BATCH, max_new_tokens=2)
    path = tmp_path / "larger.json"
    path.write_text(json.dumps(distillation_set(tiny_target, cfg)))
    half = replace(cfg, prompts=self_distill.DISTILL_BATCH)
    made = distillation_set(tiny_target, half)
    monkeypatch.setattr(self_distill, "distillation_set", lambda *a, **k: "generated")
    assert load_or_make(str(path), tiny_target, half) == made  # rows and metadata as if generated alone
    assert load_or_make(str(path), tiny_target, replace(half, prompts=8)) == "generated"  # not whole batches
    assert load_or_make(str(path), tiny_target, replace(half, max_new_tokens=3)) == "generated"
    assert load_or_make(str(path), tiny_target, replace(cfg, prompts=3 * self_distill.DISTILL_BATCH)) == "generated"


def test_sets_on_own_images_hold_the_targets_answers_and_are_reused_only_for_them(tmp_path, monkeypatch):
    """One batch mixes three image sizes; each row must be what the target answers for that request alone. The
    embedded target is trained (the tiny random one answers "" to everything), so its answers depend on the image."""
    target = VisionLanguageModel.from_pretrained(EMBEDDED_PATHS["target"])
    folder = _write_metadata(_write_images(tmp_path / "mine"), ROWS)
    examples = training_data.from_folder(folder)
    cfg = DistillConfig(str(EMBEDDED_PATHS["target"]), prompts=3, max_new_tokens=6)  # the first 3 of 4 examples
    made = distillation_set(target, cfg, examples=examples)
    metadata, rows = made["metadata"], made["rows"]
    assert metadata["prompts"] == 3 and metadata["source"] == f"data-dir:{folder.resolve()}"
    assert [(r["image"]["file_name"], r["prompt"], r["ground_truth"]) for r in rows] == \
        [(r["file_name"], r["prompt"], r["answer"]) for r in ROWS[:3]]
    assert all("split" not in r for r in rows)
    engine = SpeculativeEngine(target)
    for row in rows:
        alone = engine.generate(training_data.read_image(row["image"]), row["prompt"], max_new_tokens=6).text
        assert row["response"] and row["response"] == alone
    assert metadata["agreement_with_ground_truth"] == sum(r["response"] == r["ground_truth"] for r in rows) / 3
    samples = training_samples(made)
    assert samples[2].image.size == IMAGES["tall.webp"] and samples[2].answer == rows[2]["response"]

    path = tmp_path / "mine.json"
    path.write_text(json.dumps(made))
    monkeypatch.setattr(self_distill, "distillation_set", lambda *a, **k: "generated")
    assert load_or_make(str(path), target, cfg, examples) == made
    assert load_or_make(str(path), target, cfg) == "generated"  # the world's prompts
    _write_metadata(folder, [{**ROWS[0], "prompt": "Count them."}] + ROWS[1:])  # same folder, an edited prompt
    assert load_or_make(str(path), target, cfg, training_data.from_folder(folder)) == "generated"


def _lossless(engine, drafter, folder):
    """Greedy decoding with the drafter gives the target's own tokens (on the image with the most visual tokens)."""
    image = training_data.read_image({"data_dir": str(folder), "file_name": "tall.webp"})
    plain = engine.generate(image, "Describe the image.", max_new_tokens=8)
    assert engine.generate(image, "Describe the image.", drafter, gamma=2, max_new_tokens=8).token_ids == plain.token_ids


@pytest.fixture(scope="module")
def massv_phase1(tmp_path_factory, folder, tiny_target_dir, tiny_text_drafter_dir):
    out = tmp_path_factory.mktemp("massv-phase1")
    train_massv(MassvTrainConfig(phase=1, steps=2, batch=3, target=str(tiny_target_dir), data_dir=str(folder),
                                 text_drafter=str(tiny_text_drafter_dir), out=str(out)))
    return out


def test_massv_phase1_trains_on_the_answers(massv_phase1, folder, tiny_target):
    log = json.loads((massv_phase1 / "training_log.json").read_text())
    # a log names a folder outside the repository by its name only (core/models/loading.py: recorded)
    assert log["data"] == f"data-dir:{folder.name}" and log["config"]["data_dir"] == folder.name
    assert json.loads((massv_phase1 / "massv_config.json").read_text())["data"] == log["data"]
    _lossless(SpeculativeEngine(tiny_target), MassvDrafter.from_pretrained(massv_phase1), folder)


def test_massv_phase2_distills_the_target_on_the_folder(tmp_path, massv_phase1, folder, tiny_target_dir, tiny_target):
    out = tmp_path / "massv"
    train_massv(MassvTrainConfig(phase=2, steps=2, batch=3, target=str(tiny_target_dir), phase1=str(massv_phase1),
                                 data="", data_dir=str(folder), out=str(out), max_new_tokens=8))
    data = json.loads((out / "distillation_set.json").read_text())
    assert data["metadata"]["source"] == f"data-dir:{folder.resolve()}"
    assert [(r["image"]["file_name"], r["prompt"]) for r in data["rows"]] == [(r["file_name"], r["prompt"]) for r in ROWS]
    assert json.loads((out / "training_log.json").read_text())["distillation"]["source"] == \
        recorded(data["metadata"]["source"]) == f"data-dir:{folder.name}"
    _lossless(SpeculativeEngine(tiny_target), MassvDrafter.from_pretrained(out), folder)


def test_dream_distills_the_target_on_the_folder(tmp_path, folder, tiny_target_dir, tiny_target):
    out = tmp_path / "dream"
    train_dream(DreamTrainConfig(steps=2, batch=3, target=str(tiny_target_dir), data="", data_dir=str(folder),
                                 out=str(out), intermediate="0.5", max_new_tokens=8))
    log = json.loads((out / "training_log.json").read_text())
    assert log["data"] == f"data-dir:{folder.name}" and [e["step"] for e in log["log"]] == [1, 2]
    config = json.loads((out / "dream_config.json").read_text())
    assert config["distillation"]["source"] == log["data"] and config["distillation"]["prompts"] == len(ROWS)
    _lossless(SpeculativeEngine(tiny_target), DreamDrafter.from_pretrained(out, tiny_target), folder)
