"""One admission request answered: from the bytes of a review to the HTTP answer and what to log and count.

A plain function of its inputs (``answer_review``): no Flask, no request context, no module state, so that
what the server answers is tested by calling it. The app's routes only read the body, call it, and write
what it returns: the response, the log records, the metrics (``Answer``).

Every answer comes from one policy generation: the caller passes the generation's decision cache, read once.
"""

from __future__ import annotations

import json
import secrets
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine import Decision, Request, decide
from ..engine.clusterview import ClusterView
from ..engine.naming import ALPHABET, SUFFIX_LENGTH, generated
from ..engine.scale import replicas_of, scalable, scale_request
from .admission import BadReview, Review, decision_response, parse_review, response
from .cost import Busy, MemoryBudget, TooCostly, estimate
from .decisions import DecisionCache
from .limits import ReadLimits
from .logs import record


@dataclass(frozen=True)
class Answer:
    """What the server sends back for one request, and what it logs and counts about it."""

    status: int  # HTTP status
    body: dict  # the AdmissionReview, or {"error": message} for a request that is not one
    webhook: str
    records: tuple[dict[str, Any], ...] = ()  # log records, in order
    kind: str = ""  # request.kind.kind ("" when the review could not be read)
    operation: str = ""
    outcome: str | None = None  # allowed | patched | denied; None: refused before an AdmissionReview answer
    elapsed: float = 0.0
    denied: tuple[str, ...] = field(default=())  # rule ids that denied, each once
    warned: tuple[str, ...] = field(default=())  # rule ids that warned, each once
    counted: bool = False  # whether this answer's denials and warnings count for the submission (``counts``)


def refusal(webhook: str, status: int, message: str) -> Answer:
    """A request that gets no AdmissionReview back: an HTTP error with a message."""
    return Answer(status, {"error": message}, webhook,
                  (record("bad_request", webhook=webhook, code=status, error=message),))


def decide_review(decisions: DecisionCache, req: Request, cluster: ClusterView, large: bool) -> Decision:
    """The decision for one request: where the server meets the engine (the one call to it).

    A large object is decided from scratch: keying it would double its cost, for a shape that rarely repeats.
    """
    return decide(decisions.policy, req, cluster) if large else decisions.decide(req, cluster)


# (group, version, plural, namespace, name) -> the stored object, or None when it cannot be read
Fetch = Callable[[str, str, str, str, str], "dict | None"]


def answer_review(webhook: str, body: bytes, *, decisions: DecisionCache | None, cluster: ClusterView,
                  limits: ReadLimits, memory: MemoryBudget, fetch: Fetch | None = None) -> Answer:
    """The answer to ``body`` POSTed to ``/<webhook>`` (``mutate`` or ``validate``), decided with ``decisions``'
    policy generation (None: no policy loaded) within this process's memory budget. ``fetch`` reads the stored
    workload a ``/scale`` UPDATE resizes (its review carries only a Scale)."""
    started = time.perf_counter()
    return within_limits(webhook, body, limits, memory, lambda: _answer(
        webhook, body, decisions, cluster, limits.is_large(len(body)), started, fetch))


def scale_review(review: Review, fetch: Fetch | None) -> tuple[Request | None, str]:
    """The workload UPDATE a ``/scale`` UPDATE of a handled kind amounts to, or why it cannot be decided (then it is
    refused: the validating webhook fails closed); (None, "") for a subresource trainadmit does not decide."""
    group, version = str(review.resource.get("group") or ""), str(review.resource.get("version") or "")
    adapter = scalable(group, str(review.resource.get("resource") or ""))
    if review.sub_resource != "scale" or review.operation != "UPDATE" or adapter is None:
        return None, ""
    if replicas_of(review.obj) is None:
        return None, ""
    where = f"{adapter.kind} {review.namespace}/{review.name}"
    stored = fetch(group, version, adapter.plural, review.namespace or "", review.name or "") if fetch else None
    if not isinstance(stored, dict):
        return None, (f"trainadmit could not read {where} to decide this resize through /scale; retry, or resize it "
                      "with kubectl patch")
    req = scale_request(adapter, stored, review.obj, review.namespace, review.user, review.dry_run)
    return req, "" if req is not None else f"the Scale of {where} names no spec.replicas"


def within_limits(webhook: str, body: bytes, limits: ReadLimits, memory: MemoryBudget,
                  answer: Callable[[], Answer]) -> Answer:
    """``answer()``, if the body is within its path's limit and its estimated cost within the memory budget
    (it waits for the budget, and is refused with 503 when the wait is over)."""
    limit = limits.body_limit(f"/{webhook}")
    if len(body) > limit:
        return refusal(webhook, 413, f"request body is {len(body)} bytes; the limit is {limit}")
    try:
        with memory.hold(estimate(body)):
            return answer()
    except TooCostly as exc:
        return refusal(webhook, 413, str(exc))
    except Busy as exc:
        return refusal(webhook, 503, str(exc))


def _answer(webhook: str, body: bytes, decisions: DecisionCache | None, cluster: ClusterView, large: bool,
            started: float, fetch: Fetch | None = None) -> Answer:
    try:
        review = parse_review(body)
    except BadReview as exc:
        return refusal(webhook, exc.status, exc.message)
    policy = decisions.policy if decisions is not None else None
    records: list[dict[str, Any]] = []
    decision: Decision | None = None
    req: Request | None = None
    if decisions is None:
        result = response(review.uid, False, code=503, reason="ServiceUnavailable",
                          message="trainadmit has no policy loaded; refusing to admit without policy")
    elif review.problem:
        result = response(review.uid, False, code=400, reason="BadRequest", message=review.problem)
    elif (scaled := scale_review(review, fetch) if webhook == "validate" else (None, ""))[1]:
        result = response(review.uid, False, code=503, reason="ServiceUnavailable", message=scaled[1])
    elif (review.sub_resource and scaled[0] is None) or review.operation in ("DELETE", "CONNECT"):
        result = response(review.uid, True)
    else:
        req = scaled[0] or Request(
            review.obj, operation=review.operation, old=review.old, namespace=review.namespace, user=review.user,
            dry_run=review.dry_run, phase=webhook,
            generated_name=draw_name(review.obj) if webhook == "mutate" and review.operation == "CREATE" else "")
        try:
            decision = decide_review(decisions, req, cluster, large)
        except Exception as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            records.append(record("engine_error", uid=review.uid, webhook=webhook, error=repr(exc),
                                  at=f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}"))
            result = response(review.uid, False, code=500, reason="InternalError",
                              message=f"trainadmit could not evaluate this object ({type(exc).__name__}: {exc}); "
                                      "please report it with the object")
        else:
            result = decision_response(review.uid, decision, with_patch=webhook == "mutate")
    outcome = _outcome(result)
    elapsed = time.perf_counter() - started
    denied = tuple(dict.fromkeys(v.rule for v in decision.denials)) if decision else ()
    warned = tuple(dict.fromkeys(v.rule for v in decision.warnings)) if decision else ()
    noted = list(dict.fromkeys(v.rule for v in decision.notes)) if decision else []
    records.append(record(
        "decision", uid=review.uid, webhook=webhook, kind=_kind(review), operation=review.operation,
        namespace=review.namespace, name=_named(decision, req) or _name(review), dry_run=review.dry_run,
        allowed=outcome != "denied", result=outcome, denied=list(denied), warned=list(warned), noted=noted,
        generation=policy.generation if policy else None, latency_ms=round(elapsed * 1000, 3)))
    return Answer(200, result, webhook, tuple(records), _kind(review), review.operation, outcome, elapsed,
                  denied, warned, counts(webhook, outcome))


def draw_name(obj: Any, choice: Callable[[str], str] = secrets.choice) -> str:
    """The name the apiserver would give ``obj`` if it has only ``generateName`` (its prefix cut to 58 characters
    and 5 random characters of its alphabet), "" when it has a name or no prefix. Drawn for every such CREATE on
    ``/mutate``; the engine uses it only when the decision names the object (``engine.naming``)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    prefix = meta.get("generateName") if isinstance(meta, dict) and not meta.get("name") else None
    if not isinstance(prefix, str) or not prefix:
        return ""
    return generated(prefix, "".join(choice(ALPHABET) for _ in range(SUFFIX_LENGTH)))


def counts(webhook: str, outcome: str | None) -> bool:
    """Whether an answer's denials and warnings are the submission's count.

    The apiserver asks both webhooks about one submission, and ``/mutate`` again when a later mutating webhook
    changed the object (``reinvocationPolicy: IfNeeded``); each answer carries the same warnings (the apiserver
    shows kubectl each text once). ``/validate`` is asked once, after every mutation, unless a mutating webhook
    refused: so a submission is counted by its ``/validate`` answer, or by the ``/mutate`` answer that refused
    it (the apiserver then asks nothing more). A submission a later mutating webhook of another party refuses
    after ``/mutate`` admitted it is not counted: it was not stored either."""
    return webhook == "validate" or outcome == "denied"


def _outcome(result: dict) -> str:
    answer = result["response"]
    return "denied" if not answer["allowed"] else ("patched" if answer.get("patch") else "allowed")


def _kind(review: Review) -> str:
    return str(review.kind.get("kind") or "")


def _name(review: Review) -> str | None:
    """The object's name, or its generateName prefix (a created object may have no name yet)."""
    meta = review.obj.get("metadata") if isinstance(review.obj, dict) else None
    return review.name or (meta.get("generateName") if isinstance(meta, dict) else None)


def _named(decision: Decision | None, req: Request | None) -> str | None:
    """The name the decision gave a ``generateName`` object (``engine.naming``), else None."""
    if decision is None or req is None or not req.generated_name:
        return None
    op = {"op": "add", "path": "/metadata/name", "value": req.generated_name}
    named = (json.dumps(op, separators=(",", ":")) in decision.patch_json if decision.patch_json
             else op in decision.patch)
    return req.generated_name if named else None


def floor_answer(webhook: str, review: Review, result: dict, started: float) -> Answer:
    """An answer given without a decision (the benchmark floors): counted, not logged."""
    return Answer(200, result, webhook, (), _kind(review), review.operation, _outcome(result),
                  time.perf_counter() - started)
