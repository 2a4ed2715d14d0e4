"""Run at start-up by every Python that vLLM's server starts (core/serve/server.py puts this folder on their
PYTHONPATH): lets PyPI's CUDA-built torchvision import beside CPU torch (core/serve/cpu_wheels.py says why), and
fixes where vLLM's EAGLE drafter writes its KV on an M-RoPE target (core/serve/drafter_slots.py)."""

from core.serve.cpu_wheels import allow_torchvision
from core.serve.drafter_slots import watch

allow_torchvision()
watch()
