"""The Gradio app: renders what core/ returns. Run it with `python app.py`."""

from __future__ import annotations

import time

import gradio as gr

from core import world
from core.engine import SpeculativeEngine
from core.registry import DRAFTERS, NO_DRAFTER, load_drafter, load_target
from core.sampling import SamplingConfig
from ui.render import CSS, stats_markdown, stream_html

TASK_PROMPTS = {
    "caption": "Describe the image.",
    "vqa": "How many objects are in the image?",
    "ocr": "What does the text say?",
    "chart": "Which label has the highest value?",
}


def _examples() -> list[list]:
    return [[s.image, s.prompt] for s in world.samples("heldout", 8)]


def generate(image, prompt, drafter_name, gamma, temperature, top_p, seed, max_new_tokens):
    try:
        sampling = SamplingConfig(temperature=float(temperature), top_p=float(top_p))
        target = load_target("embedded")
        drafter = load_drafter(drafter_name)
        if not prompt or not prompt.strip():
            raise ValueError("the prompt is empty")
        stream = SpeculativeEngine(target).stream(
            image, prompt, drafter, gamma=int(gamma), sampling=sampling, max_new_tokens=int(max_new_tokens), seed=int(seed)
        )
        rounds, start = [], time.perf_counter()
        decode = lambda t: target.tokenizer.decode([t])  # noqa: E731
        for r in stream:
            rounds.append(r)
            yield stream_html(rounds, decode), stats_markdown(rounds, time.perf_counter() - start)
    except ValueError as exc:
        raise gr.Error(str(exc)) from None


def build() -> gr.Blocks:
    with gr.Blocks(title="Speculum") as demo:
        gr.Markdown("# Speculum\nSpeculative decoding of a vision-language model, token by token.")
        with gr.Tab("Speculative decoding"):
            with gr.Row():
                with gr.Column():
                    image = gr.Image(type="pil", label="Image")
                    prompt = gr.Textbox(label="Prompt", value=TASK_PROMPTS["caption"])
                    preset = gr.Radio(list(TASK_PROMPTS), label="Task preset")
                    drafter = gr.Dropdown([NO_DRAFTER, *DRAFTERS], value="text", label="Drafter")
                    gamma = gr.Slider(1, 8, value=4, step=1, label="Draft length γ")
                    temperature = gr.Slider(0, 1.5, value=0, step=0.05, label="Temperature (0 = greedy)")
                    top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
                    seed = gr.Number(0, precision=0, label="Seed")
                    max_new = gr.Slider(1, 128, value=64, step=1, label="Max new tokens")
                    run = gr.Button("Generate", variant="primary")
                with gr.Column():
                    tokens = gr.HTML(label="Tokens")
                    stats = gr.Markdown()
            gr.Examples(_examples(), [image, prompt])
            preset.change(lambda t: TASK_PROMPTS[t], preset, prompt)
            run.click(generate, [image, prompt, drafter, gamma, temperature, top_p, seed, max_new], [tokens, stats],
                      concurrency_limit=2)
    return demo


def launch(**kwargs) -> None:
    build().queue(default_concurrency_limit=2).launch(css=CSS, **kwargs)
