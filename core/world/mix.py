"""The training mix: world scenes (core/world/scenes.py) and images beyond the world (core/world/photos.py) as one
space of tasks, so the target and every drafter learn from the same images. A photos task is named "photos/<task>"
(e.g. "photos/layout"), and "photos/<task>@<source>" asks it of one source's images (e.g. "photos/read@sign"), so a
trainer can weigh (task, source) pairs; a sample is a pure function of (split, index, task), which is all a saved
training set keeps.

    from core.world import mix
    mix.samples("train", 8, mix="world,photos")     # a list: alternating world scenes and other images
    mix.Samples("train", 19_200, mix="world,photos")     # the same, drawn when read
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from core.world import photos, scenes

PHOTOS = "photos/"
AT = "@"  # "photos/read@sign": the task asked of one source's images
MIXES = ("world", "world,photos")


def sources(mix: str) -> tuple[str, ...]:
    if mix not in MIXES:
        raise ValueError(f"the mix must be one of {MIXES}, got {mix!r}")
    return tuple(mix.split(","))


def tasks(mix: str, source: str | None = None, by_source: bool = False) -> tuple[str, ...]:
    """The mix's task names (one source's only, if given); `by_source`: each photos task once per image source."""
    if by_source:
        beyond = tuple(PHOTOS + t + AT + s for t in photos.TASKS for s in photos.SOURCES)
    else:
        beyond = tuple(PHOTOS + t for t in photos.TASKS)
    names = {"world": scenes.TASKS, "photos": beyond}
    return tuple(t for s in sources(mix) if source in (None, s) for t in names[s])


def sample(split: str, index: int, task: str) -> scenes.Sample:
    """The index-th sample of a task: a world scene, or (a photos/ task) an image beyond the world, of the source
    the task names or else the one the index cycles to. Its task is named without the source."""
    if task.startswith(PHOTOS):
        name, _, source = task.removeprefix(PHOTOS).partition(AT)
        return replace(photos.sample(split, index, name, source or None), task=PHOTOS + name)
    return scenes.sample(split, index, task)


class Samples(Sequence):
    """n samples alternating between the mix's sources, each source's tasks round-robin, counted from `start` as
    scenes.samples counts (the world mix gives exactly its samples); each drawn when read, so a long training run
    does not hold thousands of large images."""

    def __init__(self, split: str, n: int, start: int = 0, mix: str = "world"):
        self.split, self.n, self.start = split, n, start
        self.per_source = [tasks(mix, s) for s in sources(mix)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self.n))]
        if not -self.n <= k < self.n:
            raise IndexError(k)
        k %= self.n
        own = self.per_source[k % len(self.per_source)]
        return sample(self.split, self.start + k, own[k // len(self.per_source) % len(own)])


def partner(sample_: scenes.Sample, task: str, split: str, index: int) -> tuple[scenes.Sample, str] | None:
    """The same image asked its partner question (photos.PARTNER: reading <-> describing) and that task's name, of the
    same source; None for a task without a partner or an image without a sure answer to it."""
    name, at, source = task.removeprefix(PHOTOS).partition(AT)
    other = photos.PARTNER.get(name) if task.startswith(PHOTOS) else None
    asked = other and photos.ask(sample_, other, random.Random(f"partner/{split}/{task}/{index}"), split)
    return (replace(asked, task=PHOTOS + other), PHOTOS + other + at + source) if asked else None


# The same question typed another way (`train target --other-forms`): all lower or upper case, or without its closing
# mark. A target trained only on the canonical forms answers "describe the image" with nonsense (region agreement 0.12
# vs 0.73 on the held-out views).
FORMS = {"lower": str.lower, "upper": str.upper, "bare": lambda p: p.rstrip("?.!"),
         "lower-bare": lambda p: p.lower().rstrip("?.!")}


def form_drawer(weight: dict[str, float] | None = None):
    """`rng -> form`, each of FORMS drawn alike or, with {"upper": 3}, that one three times as often as each other."""
    weight = weight or {}
    if unknown := set(weight) - set(FORMS):
        raise ValueError(f"--form-weights: no form {sorted(unknown)}; the forms are {list(FORMS)}")
    forms = list(FORMS.values())
    if not weight:  # `choice`, so runs recorded before weights existed replay the same forms
        return lambda rng: rng.choice(forms)
    return lambda rng: rng.choices(forms, [weight.get(form, 1.0) for form in FORMS])[0]


def samples(split: str, n: int, start: int = 0, mix: str = "world") -> list[scenes.Sample]:
    return Samples(split, n, start, mix)[:]
