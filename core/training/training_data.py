"""Where drafter training examples come from when they are the user's own (image, prompt[, answer]) examples
rather than the procedural world (core/world/scenes.py), so a drafter learns what a real target says about real images.

    python -m core train massv --phase 2 --data-dir DIR --target TARGET --out OUT     # a folder (ImageFolder layout)
    python -m core train dream --hf-dataset NAME[:SPLIT] --target TARGET --out OUT    # pip install datasets
    python -m core.training.training_data DIR                    # checks a folder and prints how many examples it holds

A folder follows Hugging Face's ImageFolder convention: DIR holds the images and a metadata.jsonl, one JSON object
per line with `file_name` (relative to DIR) and optionally `prompt` (default "Describe the image."), `answer` (the
ground truth; MASSV phase 1 trains on it), `task` (default "custom") and `has_text` (true / false: whether the image
holds text, which `eval-target --images` scores reading answers by, so a folder labelled for that needs no prompts).
Without metadata.jsonl, every image in DIR gets the prompt "Describe the image." and no answer. A dataset needs the
columns `image` and `prompt` (`answer`, `task` optional).

Examples are `scenes.Sample`s (answer None where unknown). Images are read when a sample is taken, not at load, so
a folder of large photos never sits in memory at once; at load every image is opened once (its header only), so
a missing or broken file is reported before any training. Each example keeps where its image is, which a
self-distillation set stores in its rows to find the image again (core/training/self_distill.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from core.models.loading import in_repo, repo_relative
from core.world import scenes

METADATA_FILE = "metadata.jsonl"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
DEFAULT_PROMPT = "Describe the image."
DEFAULT_TASK = "custom"


@dataclass(frozen=True)
class Example:
    """One example before its image is read. `image` says where the image is: {"data_dir", "file_name"} for a
    folder's file (data_dir relative to the repository inside it, so a set made on runs/X reads from any clone),
    {"hf_dataset", "split", "index"} for a dataset's row."""

    image: dict
    task: str
    prompt: str
    answer: str | None = None
    holds_text: bool | None = None  # the metadata's has_text, where given


@dataclass
class TrainingData(Sequence):
    """The examples of one source, as scenes.Samples; an image is read when its sample is taken."""

    source: str  # "data-dir:DIR" (repo_relative) or "hf-dataset:NAME:SPLIT", recorded with what is trained on it
    examples: list[Example]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        example = self.examples[index]
        return scenes.Sample(read_image(example.image), example.task, example.prompt, example.answer,
                             holds_text=example.holds_text)

    def require_answers(self, why: str) -> None:
        """Raise when some example has no ground-truth answer (`why`: what needs them)."""
        missing = [e for e in self.examples if e.answer is None]
        if missing:
            raise ValueError(f"{why}, but {len(missing)} of {len(self)} examples of {self.source} have no 'answer' "
                             f"(first: {describe(missing[0].image)})")


def load(data_dir: str = "", hf_dataset: str = "") -> TrainingData | None:
    """The examples of the source given; None when neither is (the trainers then use the procedural world)."""
    if data_dir and hf_dataset:
        raise ValueError("give --data-dir or --hf-dataset, not both")
    if data_dir:
        return from_folder(data_dir)
    if hf_dataset:
        return from_hf_dataset(hf_dataset)
    return None


def source_name(examples: TrainingData | None, mix: str) -> str:
    """What a trained drafter records as its data: the examples' source, or the procedural mix it drew (core/world/mix.py:
    "world" or "world,photos")."""
    return examples.source if examples is not None else mix


def from_folder(data_dir: str | Path) -> TrainingData:
    """A folder of images, with a metadata.jsonl or without (then every image gets the default prompt)."""
    folder = Path(data_dir).resolve()
    if not folder.is_dir():
        raise ValueError(f"data dir {data_dir}: no such directory")
    metadata = folder / METADATA_FILE
    if metadata.is_file():
        lines = metadata.read_text().splitlines()
        examples = [_metadata_example(folder, f"{metadata} line {n}", line)
                    for n, line in enumerate(lines, 1) if line.strip()]
        if not examples:
            raise ValueError(f"{metadata}: no examples (one JSON object per line: file_name, prompt, answer)")
    else:
        files = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ValueError(f"data dir {folder}: no {METADATA_FILE} and no images ({', '.join(IMAGE_SUFFIXES)})")
        for name in files:
            _check_image(folder / name, str(folder / name))
        examples = [Example({"data_dir": repo_relative(folder), "file_name": name}, DEFAULT_TASK, DEFAULT_PROMPT)
                    for name in files]
    return TrainingData(f"data-dir:{repo_relative(folder)}", examples)


def _metadata_example(folder: Path, where: str, line: str) -> Example:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object with file_name (and prompt, answer, ...)")
    if not isinstance(row.get("file_name"), str) or not row["file_name"].strip():
        raise ValueError(f"{where}: missing 'file_name'")
    if "prompt" in row and (not isinstance(row["prompt"], str) or not row["prompt"].strip()):
        raise ValueError(f"{where}: 'prompt' must be a non-empty string (leave it out for \"{DEFAULT_PROMPT}\")")
    for key in ("answer", "task"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ValueError(f"{where}: '{key}' must be a string")
    if row.get("has_text") is not None and not isinstance(row["has_text"], bool):
        raise ValueError(f"{where}: 'has_text' must be true or false")
    _check_image(folder / row["file_name"], f"{where}: {row['file_name']}")
    return Example({"data_dir": repo_relative(folder), "file_name": row["file_name"]}, row.get("task") or DEFAULT_TASK,
                   row.get("prompt", DEFAULT_PROMPT), row.get("answer"), row.get("has_text"))


def _check_image(path: Path, where: str) -> None:
    if not path.is_file():
        raise ValueError(f"{where}: no such image file")
    try:
        with Image.open(path):  # reads the header only
            pass
    except UnidentifiedImageError:
        raise ValueError(f"{where}: not an image") from None


def from_hf_dataset(spec: str) -> TrainingData:
    """NAME[:SPLIT] (default split: train) of a datasets dataset with columns image, prompt, optional answer, task."""
    name, _, split = spec.partition(":")
    split = split or "train"
    dataset = _hf_split(name, split)
    missing = [c for c in ("image", "prompt") if c not in dataset.column_names]
    if missing:
        raise ValueError(f"hf dataset {name}:{split}: no column {', '.join(missing)} (needs image and prompt; "
                         f"answer and task are optional; it has {', '.join(dataset.column_names)})")
    if len(dataset) == 0:
        raise ValueError(f"hf dataset {name}:{split}: no rows")
    prompts = list(dataset["prompt"])  # one column at a time: no image is decoded here
    answers = list(dataset["answer"]) if "answer" in dataset.column_names else [None] * len(prompts)
    tasks = list(dataset["task"]) if "task" in dataset.column_names else [None] * len(prompts)
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"hf dataset {name}:{split} row {i}: missing 'prompt'")
    examples = [Example({"hf_dataset": name, "split": split, "index": i}, task or DEFAULT_TASK, prompt, answer)
                for i, (prompt, answer, task) in enumerate(zip(prompts, answers, tasks))]
    return TrainingData(f"hf-dataset:{name}:{split}", examples)


@lru_cache(maxsize=None)
def _hf_split(name: str, split: str):
    """One split of a dataset, loaded once per process (a distillation set's rows read its images one by one)."""
    try:
        import datasets
    except ImportError:
        raise ValueError("--hf-dataset needs the datasets library: pip install datasets") from None
    return datasets.load_dataset(name, split=split)


def read_image(image: dict) -> Image.Image:
    """The RGB image an example's `image` reference points at."""
    if "file_name" in image:
        with Image.open(in_repo(image["data_dir"]) / image["file_name"]) as opened:
            return opened.convert("RGB")
    return _hf_split(image["hf_dataset"], image["split"])[image["index"]]["image"].convert("RGB")


def describe(image: dict) -> str:
    """An image reference for a person: the file, or the dataset row."""
    if "file_name" in image:
        return (Path(image["data_dir"]) / image["file_name"]).as_posix()
    return f"{image['hf_dataset']}:{image['split']} row {image['index']}"


if __name__ == "__main__":
    data = from_folder(sys.argv[1] if len(sys.argv) > 1 else ".")
    answered = sum(e.answer is not None for e in data.examples)
    print(f"{data.source}: {len(data)} examples, {answered} with an answer")
    for example in data.examples[:5]:
        print(f"  [{example.task}] {describe(example.image)}: {example.prompt!r} -> {example.answer!r}")
