"""EAGLE-3 drafter (arXiv 2503.01840), the feature-based drafter vLLM and SGLang serve for Qwen2.5-VL targets.

    drafter = Eagle3Drafter.from_pretrained("assets/models/eagle3", target)     # target: a VisionLanguageModel
    engine.generate(image, prompt, drafter)

  model.py     the draft model: fc over the target's low / middle / high layer states, one Llama decoder layer,
               an LM head over a reduced draft vocabulary (d2t / t2d)
  drafter.py   the drafter and one request's drafting, fed exactly as vLLM feeds an EAGLE-3 drafter
  formats.py   the speculators (vLLM) and SpecForge (SGLang) checkpoint formats, read and written;
               python -m core export eagle3
Training: core/training/eagle3.py.
"""
from core.drafters.eagle3.drafter import Eagle3Drafter
from core.drafters.eagle3.model import Eagle3Config, Eagle3Model

__all__ = ["Eagle3Config", "Eagle3Drafter", "Eagle3Model"]
