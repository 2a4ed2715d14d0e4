"""A Linear layer that, at inference on a CPU, multiplies through oneDNN's packed weights.

    python -m core.models.packed_linear     # times one 4096 x 4096 layer on 9 rows, both ways, on this CPU

The vision tower's merger ends in a 4096 x 4096 matrix applied to only 9 rows (one per visual token): the default
BLAS (MKL) takes 13-16 ms for it on this project's 2-core AMD machines, oneDNN with the weight packed once 5.5-6.6 ms,
so the embedded target's tower takes 22 ms a picture instead of 31 (docs/experiments.md, "the merger's matrix through
oneDNN"). Same parameters, same state dict, results equal to float32 rounding (9e-6 on the visual tokens, the same
answers on every eval): training, gradients, other devices and dtypes take `nn.Linear`'s own path. The packed copy
is rebuilt whenever the weight changes in place (an optimizer step).
"""

from __future__ import annotations

import time

import torch


class PackedLinear(torch.nn.Linear):
    @classmethod
    def sharing(cls, linear: torch.nn.Linear) -> PackedLinear:
        """A PackedLinear over `linear`'s own parameters (no copy)."""
        packed = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        packed.weight, packed.bias = linear.weight, linear.bias
        return packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32 or x.dim() != 2:
            return super().forward(x)
        return torch._C._nn.mkldnn_linear(x.contiguous().to_mkldnn(), *self._packed()).to_dense()

    def _packed(self) -> tuple[torch.Tensor, torch.Tensor]:
        version = (self.weight._version, self.weight.data_ptr())
        if getattr(self, "_packed_version", None) != version:
            bias = self.bias if self.bias is not None else torch.zeros(self.out_features)
            self._packed_weights = (self.weight.detach().to_mkldnn(), bias.detach().float().to_mkldnn())
            self._packed_version = version
        return self._packed_weights

    def __getstate__(self) -> dict:  # a copy (copy.deepcopy, pickle) packs afresh: oneDNN tensors have no storage
        return {k: v for k, v in self.__dict__.items() if k not in ("_packed_weights", "_packed_version")}


def pack(model: torch.nn.Module, path: str) -> None:
    """Make the float32 CPU Linear at `path` (e.g. "model.visual.merger.mlp.0") a PackedLinear, sharing its
    parameters; anything else (a GPU or quantized model, a build without oneDNN) stays as it is."""
    linear = model.get_submodule(path)
    if (type(linear) is not torch.nn.Linear or linear.weight.device.type != "cpu"
            or linear.weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available()):
        return
    model.set_submodule(path, PackedLinear.sharing(linear))


if __name__ == "__main__":
    torch.set_num_threads(2)
    dense = torch.nn.Linear(4096, 4096)
    packed = PackedLinear.sharing(dense)
    x = torch.randn(9, 4096)
    with torch.no_grad():
        for name, layer in (("nn.Linear", dense), ("PackedLinear", packed)):
            layer(x)
            start = time.perf_counter()
            for _ in range(20):
                layer(x)
            print(f"{name}: {(time.perf_counter() - start) / 20 * 1000:.1f} ms")
        print(f"largest difference: {(dense(x) - packed(x)).abs().max().item():.2e}")
