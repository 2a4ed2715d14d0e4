"""Speculum's model logic (README, "How it works")."""

from core.serve.cpu_wheels import allow_torchvision

# before anything imports transformers' image processors: where the serve extra is installed, they import torchvision
allow_torchvision()
