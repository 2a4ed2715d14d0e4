"""Training batches shared by every trainer: prompt + answer rows with loss only on the answer, and the loss.

    inputs = answer_batch(tokenizer, samples, vlm); loss = per_sample_loss(model(**inputs).logits, labels)
"""

from __future__ import annotations

import torch

from core.models.vlm import VisionLanguageModel, chat_prompt
from core.world import scenes


def answer_batch(tok, batch: list[scenes.Sample], vlm: VisionLanguageModel | None = None) -> dict:
    """Prompt + answer + end-of-turn, right-padded; labels only on the answer (what the model must produce).
    With a `vlm`, the images go in through its image processor; without, the prompts are text-only."""
    with_image = vlm is not None
    rows, labels, types = [], [], []
    if with_image:
        pixels = vlm.pixels([s.image for s in batch])
    for i, s in enumerate(batch):
        if with_image:
            text = vlm.image_prompt_text(s.prompt, pixels["image_grid_thw"][i])
        else:
            text = chat_prompt(tok, s.prompt, False)
        prompt_ids = tok(text)["input_ids"]
        answer_ids = tok(s.answer)["input_ids"] + [tok.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        labels.append([-100] * len(prompt_ids) + answer_ids)
        types.append([int(with_image and t == vlm.image_token_id) for t in prompt_ids] + [0] * len(answer_ids))
    width = max(map(len, rows))
    pad = lambda xs, v: [x + [v] * (width - len(x)) for x in xs]  # noqa: E731
    out = {
        "input_ids": torch.tensor(pad(rows, tok.pad_token_id)),
        "labels": torch.tensor(pad(labels, -100)),
        "attention_mask": torch.tensor(pad([[1] * len(r) for r in rows], 0)),
    }
    if with_image:
        out |= {
            "mm_token_type_ids": torch.tensor(pad(types, 0)),
            "pixel_values": pixels["pixel_values"],
            "image_grid_thw": pixels["image_grid_thw"],
        }
    return out


def per_sample_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    shift_logits, shift_labels = logits[:, :-1].float(), labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(
        shift_logits.transpose(1, 2), shift_labels, ignore_index=-100, reduction="none"
    )
    mask = shift_labels != -100
    return (loss * mask).sum(1) / mask.sum(1).clamp(min=1)
