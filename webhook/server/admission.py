"""admission.k8s.io/v1 AdmissionReview in and out.

Parsing is strict about the envelope (what we must have to answer at all: apiVersion, kind,
request.uid) and tolerant about the object (anything inside is the engine's business, and the
engine never crashes on it). Problems with the envelope are HTTP 400 with a message; problems with
the request that still let us echo the uid become a well-formed AdmissionReview that denies.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from ..engine import Decision
from .jsonbody import JSONRejected, parse_json

API_VERSION = "admission.k8s.io/v1"


class BadReview(Exception):
    """The body is not an AdmissionReview we can answer; ``status`` is the HTTP code to send."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Review:
    uid: str
    operation: str
    kind: dict
    resource: dict
    sub_resource: str
    namespace: str | None
    name: str | None
    obj: Any
    old: Any
    dry_run: bool
    user: dict
    problem: str | None = None  # set when the request can be answered but not evaluated


def parse_review(body: bytes) -> Review:
    try:
        data = parse_json(body)
    except JSONRejected as exc:
        raise BadReview(exc.message) from None
    if not isinstance(data, dict):
        raise BadReview("request body must be a JSON object (an AdmissionReview)")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != "AdmissionReview":
        raise BadReview(f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
                        f"{data.get('apiVersion')!r} {data.get('kind')!r}")
    req = data.get("request")
    if not isinstance(req, dict):
        raise BadReview("AdmissionReview has no request")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 256:
        raise BadReview("AdmissionReview request.uid is missing or not a string")

    def text(key: str) -> str | None:
        value = req.get(key)
        return value if isinstance(value, str) else None

    def mapping(key: str) -> dict:
        value = req.get(key)
        return value if isinstance(value, dict) else {}

    operation = text("operation") or ""
    review = Review(
        uid=uid, operation=operation, kind=mapping("kind"), resource=mapping("resource"),
        sub_resource=text("subResource") or "", namespace=text("namespace"), name=text("name"),
        obj=req.get("object"), old=req.get("oldObject"), dry_run=req.get("dryRun") is True, user=mapping("userInfo"),
    )
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        review.problem = f"request.operation must be CREATE, UPDATE, DELETE or CONNECT, got {req.get('operation')!r}"
    elif operation in ("CREATE", "UPDATE") and not isinstance(review.obj, dict):
        review.problem = f"request.object must be an object for {operation}, got {type(review.obj).__name__}"
    elif operation == "UPDATE" and not isinstance(review.old, dict):
        review.problem = "request.oldObject must be an object for UPDATE"
    return review


def response(uid: str, allowed: bool, *, patch: list[dict] | str | None = None, message: str = "",
             code: int | None = None, reason: str = "", warnings: list[str] | None = None) -> dict:
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        resp["status"] = {"code": code or 403, "reason": reason or "Forbidden", "message": message}
    elif message:
        resp["status"] = {"code": 200, "message": message}
    if patch:
        resp["patchType"] = "JSONPatch"
        serialized = patch if isinstance(patch, str) else json.dumps(patch, separators=(",", ":"))
        resp["patch"] = base64.b64encode(serialized.encode()).decode()
    if warnings:
        resp["warnings"] = warnings
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": resp}


# The apiserver relays a webhook's warnings to kubectl whole while their total stays within 4096 characters, and
# cuts every one of them to 256 once it does not (k8s.io/apiserver's warning recorder): the part a warning ends
# with, what to do, would be lost. So each is bounded, and whole warnings are sent while the total fits.
WARNING_CHARS = 1024
WARNINGS_TOTAL_CHARS = 4096


def _warning_text(v, prefix: str = "trainadmit") -> str:
    text = f"{prefix} [{v.rule}] {v.path}: {v.message}" + (f" ({v.hint})" if v.hint else "")
    return text if len(text) <= WARNING_CHARS else text[:WARNING_CHARS - 3] + "..."


# kubectl shows every warning alike: a note (Action.note: the platform's, which the workload need not change) says so
NOTE_PREFIX = "trainadmit note"


def _warnings(decision: Decision) -> list[str]:
    texts = [_warning_text(v) for v in decision.warnings] + [_warning_text(v, NOTE_PREFIX) for v in decision.notes]
    out: list[str] = []
    total = 0
    for i, text in enumerate(texts):
        more = f"trainadmit: {len(texts) - i} more warnings (trainadmit check shows all of them)"
        if total + len(text) + (len(more) if i + 1 < len(texts) else 0) > WARNINGS_TOTAL_CHARS:
            out.append(more)
            break
        out.append(text)
        total += len(text)
    return out


def decision_response(uid: str, decision: Decision, with_patch: bool) -> dict:
    warnings = _warnings(decision)
    if not decision.allowed:
        return response(uid, False, message=decision.denial_message(), warnings=warnings)
    patch = (decision.patch_json or decision.patch) if with_patch else None
    return response(uid, True, patch=patch, warnings=warnings)
