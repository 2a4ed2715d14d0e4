"""Every REAP computation puts its inputs where the model is. On the CPU this is checked by a model that reports
itself on the `meta` device: moving a tensor there marks it (and keeps its data on the CPU), and the model's forward
and generate refuse any unmarked input, so a call that forgets `.to(model.device)` fails here as it would on a GPU.
Where a GPU is present, the lab also runs on it.

    OMP_NUM_THREADS=1 python -m pytest -q tests/test_reap_device.py
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch
from torch.overrides import TorchFunctionMode

from core.models.loading import LoadOptions
from core.reap import data
from core.reap.checkpoint import load_model
from core.reap.embedded_moe import MOE_PATH
from core.reap.lab import Lab, LabConfig
from core.reap.observer import observe
from core.reap.prune import Selection
from core.reap.quality import QualityConfig, evaluate
from core.reap.scores import ScoreConfig

SMALL = LabConfig(score=ScoreConfig(tokens=512, sample_tokens=16), live_quality=QualityConfig(ppl_windows=1, task_items=2),
                  curve_ratios=(0.5,), subspace_tokens=128, sample_tokens=2)
META = torch.device("meta")


class _MarkMoves(TorchFunctionMode):
    """`tensor.to(meta)` returns a marked view of the tensor, still on the CPU; everything else runs as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to:
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(target, (str, torch.device)) and torch.device(target) == META:
                moved = args[0].view_as(args[0])
                moved.on_model_device = True
                return moved
        return func(*args, **kwargs)


def _check(args, kwargs, call):
    tensors = [v for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor)]
    left = [tuple(t.shape) for t in tensors if not getattr(t, "on_model_device", False)]
    assert not left, f"{call} got inputs of shape {left} that were never sent to model.device"


@contextlib.contextmanager
def reported_on_meta(model):
    """`model.device` says meta; forward and generate accept only inputs sent there."""
    real = model.__class__
    elsewhere = type(f"Elsewhere{real.__name__}", (real,), {"device": property(lambda self: META)})
    inside_generate = []

    def pre_hook(module, args, kwargs):
        if not inside_generate:  # generate's own forwards carry what generate made of its checked inputs
            _check(args, kwargs, "forward")

    def generate(*args, **kwargs):
        _check(args, kwargs, "generate")
        inside_generate.append(True)
        model.__class__ = real
        try:
            return real.generate(model, *args, **kwargs)
        finally:
            model.__class__ = elsewhere
            inside_generate.clear()

    handle = model.register_forward_pre_hook(pre_hook, with_kwargs=True)
    model.generate = generate
    model.__class__ = elsewhere
    try:
        with _MarkMoves():
            yield model
    finally:
        model.__class__ = real
        handle.remove()
        del model.generate


def test_the_check_catches_an_input_left_behind():
    model, tokenizer = load_model(str(MOE_PATH))
    ids = tokenizer("def f(x):", return_tensors="pt")["input_ids"]
    with reported_on_meta(model), pytest.raises(AssertionError, match="forward got inputs of shape"):
        model(input_ids=ids)
    with reported_on_meta(model), pytest.raises(AssertionError, match="generate got inputs of shape"):
        model.generate(input_ids=ids, max_new_tokens=1)
    with reported_on_meta(model):
        assert model(input_ids=ids.to(model.device)).logits.device.type == "cpu"


def test_scoring_quality_subspace_and_samples_send_inputs_to_the_models_device(tmp_path):
    lab = Lab("embedded", replace(SMALL, cache_dir=tmp_path))
    windows = data.windows(lab.tokenizer, "math", "train", 256, 128)
    with reported_on_meta(lab.model):
        assert len(observe(lab.model, windows)) == 4
        evaluate(lab.model, lab.tokenizer, SMALL.live_quality, domains=("math",))
        view = lab.view("math", "reap", 0.5, selection=Selection("global", 2))
        assert sum(map(len, view.kept)) == 32
        lab.subspace("math", "hc-smoe", 0.5)
        assert len(lab.samples("math", "reap", 0.5)) == 3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_lab_runs_on_a_gpu(tmp_path):
    lab = Lab("embedded", replace(SMALL, cache_dir=tmp_path), load=LoadOptions(dtype="bfloat16", device_map="cuda"))
    assert lab.model.device.type == "cuda"
    for method in ("reap", "m-smoe"):
        view = lab.view("code:0.5,math:0.5", method, 0.5)
        assert all(len(k) == 8 for k in view.kept) and view.quality != view.baseline
    lab.view("math", "reap", 0.5, selection=Selection("global", 2))
    lab.subspace("math", "reap", 0.5)
    lab.samples("math", "reap", 0.5)
    assert lab.model.dtype == torch.bfloat16
    path = lab.export("math", "reap", 0.5, tmp_path / "exports")
    assert path.is_file()
