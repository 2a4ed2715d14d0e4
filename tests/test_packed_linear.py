"""PackedLinear: oneDNN's packed weights at CPU inference, nn.Linear everywhere else, one set of parameters."""

from __future__ import annotations

import copy

import pytest
import torch

from core.models.embedded import save_vlm
from core.models.packed_linear import PackedLinear, pack
from core.models.vlm import VisionLanguageModel


def _packed_pair(seed: int = 0) -> tuple[torch.nn.Sequential, torch.nn.Linear]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 192), torch.nn.GELU())
    dense = copy.deepcopy(model[0])
    pack(model, "0")
    return model, dense


def test_packed_inference_equals_the_dense_layer_and_follows_every_weight_update():
    model, dense = _packed_pair()
    assert isinstance(model[0], PackedLinear) and model.state_dict().keys() == {"0.weight", "0.bias"}
    x = torch.randn(9, 256)
    with torch.no_grad():
        torch.testing.assert_close(model[0](x), dense(x), atol=1e-4, rtol=1e-4)
    # Training goes through nn.Linear: gradients reach the shared parameters.
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model[0](x).square().sum().backward()
    dense(x).square().sum().backward()
    torch.testing.assert_close(model[0].weight.grad, dense.weight.grad)
    opt.step()  # updates the weight in place: the packed copy must not serve the old one
    with torch.no_grad():
        dense.weight.copy_(model[0].weight)
        dense.bias.copy_(model[0].bias)
        torch.testing.assert_close(model[0](x), dense(x), atol=1e-4, rtol=1e-4)
        # A copy made after inference packs afresh and answers the same.
        torch.testing.assert_close(copy.deepcopy(model)[0](x), dense(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_other_dtypes_keep_nn_linear(dtype):
    model = torch.nn.Sequential(torch.nn.Linear(16, 8, dtype=dtype))
    pack(model, "0")
    assert type(model[0]) is torch.nn.Linear


def test_a_loaded_target_packs_its_merger_and_saves_the_same_weights(tiny_target_dir, tmp_path):
    target = VisionLanguageModel.from_pretrained(tiny_target_dir)
    merger = target.model.get_submodule(target.family.packed_on_cpu[0])
    assert isinstance(merger, PackedLinear)
    save_vlm(target, tmp_path)
    again = VisionLanguageModel.from_pretrained(tmp_path)
    for (name, a), (_, b) in zip(target.model.state_dict().items(), again.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
