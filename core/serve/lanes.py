"""The race's vLLM lanes: the embedded target served by vLLM, plain ("vLLM") and with its EAGLE-3 drafter
("vLLM · EAGLE-3"), each streamed as one request beside the engine's lanes (ui/race_tab.py).

    lane = SERVED.lane("vLLM · EAGLE-3", gamma=4)   # a ServedLane; its .error says why it cannot run
    for _ in lane.stream(image, prompt, max_tokens=128): lane.token_ids, lane.seconds
    lane.metrics.position_acceptance                # vLLM's own spec-decode counters over this request

Where the servers come from: SPECULUM_VLLM_URL (one or more URLs, comma-separated), each told plain or EAGLE-3 by
whether its /metrics carries spec-decode counters; otherwise, where vLLM is installed, one server per lane kind is
started on demand on a free port (about a minute on 2 cores) and kept for later races until the process exits. An
EAGLE-3 server runs one γ: a race at another γ restarts the one this module started, and a server given by URL is
raced at its own γ. A lane streams alone, after the engine's lanes have finished, so the two never share the cores
and each wall time is its own. Its acceptance is the difference of the server's counters over the request: exact
while nothing else sends requests to that server.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
from PIL import Image

from core.decoding.metrics import RunStats
from core.models.presets import EMBEDDED, vlm_preset
from core.serve.client import Refused, SpecMetrics, VllmClient, image_side
from core.serve.server import INSTALL, ServeConfig, VllmServer, free_port

URL_VARIABLE = "SPECULUM_VLLM_URL"
PLAIN, EAGLE3 = "vLLM", "vLLM · EAGLE-3"
DRAFTER = {PLAIN: "none", EAGLE3: "eagle3"}


@dataclass
class ServedLane:
    """One request through a vLLM server, as the race shows it: streamed chunks, wall time, vLLM's counters."""

    name: str
    client: VllmClient | None  # None: the lane cannot run (`error` says why)
    gamma: int = 0  # the server's speculative tokens per step, 0 for plain
    chunks: list[list[int]] = field(default_factory=list)  # token ids as streamed: about one chunk per engine step
    seconds: float = 0.0
    metrics: SpecMetrics | None = None  # EAGLE-3: the server's counters over this request
    error: str | None = None
    done: bool = False

    @property
    def token_ids(self) -> list[int]:
        return [t for chunk in self.chunks for t in chunk]

    @property
    def stats(self) -> RunStats:
        """The engine's statistics of this request, counted by vLLM: target steps are the prefill and one per
        verified draft with EAGLE-3 (one per token plain), acceptance per position over all drafting steps."""
        tokens, m = len(self.token_ids), self.metrics
        if m is None:  # plain, or an EAGLE-3 request cut short: one chunk per step
            forwards = len(self.chunks) if self.gamma else tokens
            return RunStats(tokens, forwards, 0, 0, 0, self.seconds, None, [])
        return RunStats(tokens, 1 + int(m.drafts), int(m.draft_tokens), int(m.accepted), int(m.drafts),
                        self.seconds, None, m.position_acceptance)

    def stream(self, image: Image.Image | None, prompt: str, max_tokens: int) -> Iterator[ServedLane]:
        """Yields itself after every streamed chunk. A server that stops answering ends the lane with an error,
        keeping the tokens it had sent."""
        if self.client is None:
            self.done = True
            return
        try:
            before = self.client.spec_metrics() if self.gamma else None
            start = time.perf_counter()
            for ids in self.client.stream(image, prompt, max_tokens):
                self.chunks.append(ids)
                self.seconds = time.perf_counter() - start
                yield self
            self.seconds = time.perf_counter() - start
            if before is not None:
                self.metrics = self.client.spec_metrics() - before
        except Refused as exc:
            self.error = f"vLLM turned the request down ({exc})"
        except httpx.HTTPError as exc:
            self.error = (f"the vLLM server at {self.client.url} stopped answering after {len(self.token_ids)} "
                          f"tokens ({type(exc).__name__}); the other lanes are not affected")
        finally:
            self.client.close()
        self.done = True
        yield self


class ServedTargets:
    """The servers behind the vLLM lanes: given by SPECULUM_VLLM_URL, or started here on first use."""

    def __init__(self):
        self.lock = threading.Lock()  # two races must not start the same server twice
        self.started: dict[str, VllmServer] = {}
        self.side = image_side(vlm_preset(EMBEDDED).target)
        atexit.register(self.stop)

    def _given(self) -> dict[str, tuple[str, str, int]]:
        """SPECULUM_VLLM_URL's servers by lane kind: (url, served model name, γ)."""
        found = {}
        for url in filter(None, (u.strip().rstrip("/") for u in os.environ.get(URL_VARIABLE, "").split(","))):
            probe = VllmClient(url, "", self.side, timeout=10)
            try:
                model = probe.http.get(f"{url}/v1/models").json()["data"][0]["id"]
                gamma = len(probe.spec_metrics().per_position)
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"{URL_VARIABLE}: no vLLM server answers at {url} ({type(exc).__name__})") from None
            finally:
                probe.close()
            found[EAGLE3 if gamma else PLAIN] = (url, model, gamma)
        return found

    def _start(self, kind: str, gamma: int) -> tuple[str, str, int]:
        server = self.started.get(kind)
        if server is not None and server.alive() and (kind == PLAIN or server.cfg.gamma == gamma):
            return server.url, server.cfg.name, server.cfg.gamma if kind == EAGLE3 else 0
        if server is not None:
            server.stop()
        cfg = ServeConfig(drafter=DRAFTER[kind], gamma=gamma, port=free_port())
        server = VllmServer(cfg)
        try:
            server.start()
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
        warm = VllmClient(server.url, cfg.name, self.side)  # a first request pays one-time setup: not the race's
        try:
            warm.complete(Image.new("RGB", (64, 64), "grey"), "Describe the image.", max_tokens=8)
        except httpx.HTTPError:
            pass  # the lane's own request says what is wrong
        finally:
            warm.close()
        self.started[kind] = server
        return server.url, cfg.name, gamma if kind == EAGLE3 else 0

    def lane(self, kind: str, gamma: int) -> ServedLane:
        """A lane ready to stream, or one whose error says why it cannot (vLLM missing, a server that does not
        answer or does not start)."""
        try:
            with self.lock:
                if urls_given():
                    servers = self._given()
                    if kind not in servers:
                        raise ValueError(f"{URL_VARIABLE} names no {'EAGLE-3' if kind == EAGLE3 else 'plain'} "
                                         f"server (only {', '.join(servers)}); give both, comma-separated")
                    url, model, served_gamma = servers[kind]
                elif importlib.util.find_spec("vllm") is None:
                    raise ValueError(f"vLLM is not installed here: {INSTALL}; or set {URL_VARIABLE} to a running "
                                     f"server (python -m core serve)")
                else:
                    url, model, served_gamma = self._start(kind, gamma)
        except ValueError as exc:
            return ServedLane(kind, None, error=str(exc), done=True)
        return ServedLane(kind, VllmClient(url, model, self.side), gamma=served_gamma)

    def stop(self) -> None:
        for server in self.started.values():
            server.stop()
        self.started.clear()


def urls_given() -> bool:
    """Whether SPECULUM_VLLM_URL names servers (then the race shows their lanes by default)."""
    return bool(os.environ.get(URL_VARIABLE, "").strip())


def where() -> str:
    """Where the lanes' servers come from, in one sentence for the race tab."""
    if urls_given():
        return f"The servers at {URL_VARIABLE}; each lane streams after the engine's lanes, alone."
    if importlib.util.find_spec("vllm") is None:
        return f"vLLM is not installed here: {INSTALL}; or set {URL_VARIABLE} to running servers."
    return ("vLLM serves the embedded target: each lane starts its server the first time (about a minute on "
            "2 cores), then keeps it; each streams after the engine's lanes, alone.")


SERVED = ServedTargets()
