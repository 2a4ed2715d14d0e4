"""Run at start-up by every Python that vLLM's server starts (core/serve/server.py puts this folder on their
PYTHONPATH): lets PyPI's CUDA-built torchvision import beside CPU torch (core/serve/cpu_wheels.py says why)."""

from core.serve.cpu_wheels import allow_torchvision

allow_torchvision()
