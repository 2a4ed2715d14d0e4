"""One request through the engine from the command line.

    python -m core generate --image photo.png --prompt "Describe the image." --drafter text --gamma 4 --json
"""

from __future__ import annotations

import json

from core.decoding.engine import SpeculativeEngine
from core.decoding.limits import check_prompt, open_image
from core.decoding.sampling import SamplingConfig
from core.models.registry import load_drafter, load_target


def run(args) -> None:
    # The prompt and image are checked before a model loads; the token budget needs the model's context, so the
    # engine checks it (core.decoding.limits.check_new_tokens).
    prompt = check_prompt(args.prompt)
    image = None if args.image is None else open_image(args.image)
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    target = load_target(args.model)
    drafter = load_drafter(args.drafter, args.model)
    out = SpeculativeEngine(target).generate(
        image, prompt, drafter,
        gamma=args.gamma, sampling=sampling, max_new_tokens=args.max_new_tokens, seed=args.seed,
        min_draft_prob=args.min_draft_prob,
    )
    if args.json:
        print(json.dumps(out.to_json()))
    else:
        print(out.text)
        print(f"[{out.new_tokens} tokens, {out.target_forwards} target forwards, tau {out.tau:.2f}, {out.seconds:.2f}s]")
