"""A client of vLLM's OpenAI-compatible server (core/serve/server.py) that sends what the engine's target sees.

The engine squares every image to the target's `image_side` before its processor (core/models/vlm.py, `model_input`);
vLLM's processor, like a bare `AutoProcessor`, keeps the aspect ratio and would see another grid of other pixels.
So this client sends the square, as a PNG data: URL: whatever the image, vLLM and the engine see the same pixels.
It asks greedy chat completions with their token ids, streams them, and reads vLLM's speculative decoding counters
from its Prometheus endpoint.

    client = VllmClient("http://127.0.0.1:8000", "embedded", image_side=192)
    done = client.complete(image, "Describe the image.", max_tokens=64); done.token_ids, done.text, done.seconds
    before = client.spec_metrics(); ...; (client.spec_metrics() - before).position_acceptance
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from PIL import Image

from core.models.vlm import model_input


def image_side(model_dir: str | Path) -> int | None:
    """The square a target's images are resized to (its config's `image_side`), None for a hub model."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return config.get("image_side")


@dataclass
class Completion:
    token_ids: list[int]
    text: str
    seconds: float


@dataclass
class SpecMetrics:
    """vLLM's counters since it started: drafting steps, drafted and accepted tokens, accepted per draft position."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_position: list[float]

    def __sub__(self, other: SpecMetrics) -> SpecMetrics:
        return SpecMetrics(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                           self.accepted - other.accepted,
                           [a - b for a, b in zip(self.per_position, other.per_position)])

    @property
    def position_acceptance(self) -> list[float]:
        """vLLM's acceptance at position i: drafting steps whose first i+1 drafts were accepted, over all steps."""
        return [n / self.drafts for n in self.per_position] if self.drafts else []

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None


class Refused(RuntimeError):
    """The server answered, with an error instead of tokens (a prompt too long for its context, ...)."""


def _message(body: str) -> str:
    try:
        error = json.loads(body).get("error", body)
    except ValueError:
        return body[:300]
    return str(error.get("message", error) if isinstance(error, dict) else error)[:300]


_SAMPLE = re.compile(r'^(vllm:spec_decode_num_[a-z_]+?)_total\{([^}]*)\}\s+(\S+)$')


class VllmClient:
    def __init__(self, url: str, model: str, image_side: int | None = None, timeout: float = 300.0):
        self.url, self.model, self.side = url.rstrip("/"), model, image_side
        self.http = httpx.Client(timeout=timeout)

    def _body(self, image: Image.Image | None, prompt: str, max_tokens: int, stream: bool = False) -> dict:
        content: list[dict] | str = prompt
        if image is not None:
            buf = io.BytesIO()
            model_input(image, self.side).save(buf, "PNG")
            data = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
            content = [{"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": prompt}]
        body = {"model": self.model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0.0, "return_token_ids": True, "stream": stream}
        return body | ({"stream_options": {"include_usage": True}} if stream else {})

    def complete(self, image: Image.Image | None, prompt: str, max_tokens: int = 64) -> Completion:
        start = time.perf_counter()
        response = self.http.post(f"{self.url}/v1/chat/completions", json=self._body(image, prompt, max_tokens))
        response.raise_for_status()
        choice = response.json()["choices"][0]
        return Completion(list(choice["token_ids"]), choice["message"]["content"] or "", time.perf_counter() - start)

    def stream(self, image: Image.Image | None, prompt: str, max_tokens: int = 64) -> Iterator[list[int]]:
        """The token ids of each streamed chunk, as they arrive. A request the server turns down raises Refused."""
        body = self._body(image, prompt, max_tokens, stream=True)
        with self.http.stream("POST", f"{self.url}/v1/chat/completions", json=body) as response:
            if response.is_error:
                response.read()
                raise Refused(f"{response.status_code}: {_message(response.text)}")
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: "):])
                if "error" in chunk:
                    raise Refused(_message(line[len("data: "):]))
                for choice in chunk.get("choices", []):
                    if choice.get("token_ids"):
                        yield list(choice["token_ids"])

    def spec_metrics(self) -> SpecMetrics:
        values: dict[str, float] = {}
        positions: dict[int, float] = {}
        for line in self.http.get(f"{self.url}/metrics").text.splitlines():
            if match := _SAMPLE.match(line):
                name, labels, value = match.groups()
                if name.endswith("per_pos"):
                    positions[int(re.search(r'position="(\d+)"', labels).group(1))] = float(value)
                else:
                    values[name] = values.get(name, 0.0) + float(value)
        get = lambda key: values.get(f"vllm:spec_decode_num_{key}", 0.0)  # noqa: E731
        return SpecMetrics(get("drafts"), get("draft_tokens"), get("accepted_tokens"),
                           [positions[i] for i in sorted(positions)])

    def close(self) -> None:
        self.http.close()
