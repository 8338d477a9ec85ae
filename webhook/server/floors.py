"""The benchmarks' floors: admission endpoints that answer without deciding, served only with ``--enable-noop``.

``/noop`` answers allowed; ``/noop-patch`` answers with the patch trainadmit gave the first object of each
kind, replayed as is. Against them a benchmark measures what the stack itself costs (TLS, HTTP, the
apiserver applying this policy's patch), so that the engine's share is what is left (``bench/serve.py``,
``bench/e2e.py``). They are not admission: a cluster must never be pointed at them, so the production app
does not have them unless asked (``install``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flask import Flask, Response, request

from ..engine import Request, decide
from .admission import BadReview, parse_review, response
from .cost import MemoryBudget
from .handler import Answer, floor_answer, refusal, within_limits
from .limits import ReadLimits
from .runtime import PolicyStore


class Floors:
    """The answers of both floors; ``replayed`` holds /noop-patch's first patch of each kind."""

    def __init__(self) -> None:
        self.replayed: dict[str, list | None] = {}

    def answer(self, webhook: str, body: bytes, policies: PolicyStore, limits: ReadLimits,
               memory: MemoryBudget) -> Answer:
        started = time.perf_counter()
        return within_limits(webhook, body, limits, memory, lambda: self._answer(webhook, body, policies, started))

    def _answer(self, webhook: str, body: bytes, policies: PolicyStore, started: float) -> Answer:
        try:
            review = parse_review(body)
        except BadReview as exc:
            return refusal(webhook, exc.status, exc.message)
        policy = policies.current
        if policy is None:
            result = response(review.uid, False, code=503, reason="ServiceUnavailable",
                              message="trainadmit has no policy loaded; refusing to admit without policy")
        elif review.problem:
            result = response(review.uid, False, code=400, reason="BadRequest", message=review.problem)
        elif webhook == "noop" or review.sub_resource or review.operation in ("DELETE", "CONNECT"):
            result = response(review.uid, True)
        else:
            kind = str(review.kind.get("kind") or "")
            if kind not in self.replayed:
                self.replayed[kind] = decide(policy, Request(review.obj, namespace=review.namespace)).patch or None
            result = response(review.uid, True, patch=self.replayed[kind])
        return floor_answer(webhook, review, result, started)


def install(app: Flask, policies: PolicyStore, limits: ReadLimits, memory: MemoryBudget,
            send: Callable[[Answer], Response]) -> None:
    """Add ``POST /noop`` and ``/noop-patch`` to ``app``; ``send`` writes an ``Answer`` as the app does."""
    floors = Floors()

    def route(webhook: str):
        def view() -> Response:
            return send(floors.answer(webhook, request.get_data(cache=False), policies, limits, memory))
        view.__name__ = webhook.replace("-", "_")
        return view

    for webhook in ("noop", "noop-patch"):
        app.post(f"/{webhook}")(route(webhook))
