"""Who may read the metrics listener (``--metrics-auth``): the bearer token authenticated by the kube-apiserver
(a TokenReview), then authorized by it (a SubjectAccessReview of ``get`` on the non-resource URL ``/metrics``).

The convention platform teams know: controller-runtime's ``filters.WithAuthenticationAndAuthorization`` (what
kubebuilder scaffolds for ``--metrics-secure``) and kube-rbac-proxy before it. As there: no ``Authorization:
Bearer`` header, or a token the apiserver does not authenticate, is ``401``; an authenticated user the apiserver
does not authorize is ``403``; the apiserver unreachable is ``500`` (never a pass). A scraper needs a ClusterRole
with ``nonResourceURLs: [/metrics]``, ``verbs: [get]`` (deploy/monitoring's ``trainadmit-metrics-reader``).

One difference, on purpose: every path of the listener is authorized as ``/metrics``, the detailed ``/readyz``
too. The apiserver's discovery roles (``system:public-info-viewer``, ``system:discovery``) grant ``get`` on
``/readyz`` to every user, so authorizing that path would let anyone with a token read what it names.

Results are remembered per token (its SHA-256, never the token) for ``ALLOW_TTL`` / ``DENY_TTL`` seconds (as
controller-runtime's authenticator caches a minute): a scraper every 30 s costs two reviews a minute per replica.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..cluster.kube import Permission

# what the filter calls (deploy/base/rbac.yaml grants it; the can-i list in docs/security.md shows it)
PERMISSIONS: tuple[Permission, ...] = (
    Permission("authentication.k8s.io", "tokenreviews", ("create",)),
    Permission("authorization.k8s.io", "subjectaccessreviews", ("create",)),
)
AUTHORIZED_PATH, AUTHORIZED_VERB = "/metrics", "get"
ALLOW_TTL, DENY_TTL = 60.0, 10.0
CACHED = 256  # tokens remembered at most (the oldest forgotten first)


@dataclass(frozen=True)
class Outcome:
    """What the filter says of one request: ``status`` 0 lets it through; else the HTTP status and its text."""

    status: int
    message: str = ""
    user: str = ""


class ReviewError(Exception):
    """The apiserver could not be asked (unreachable, refused the review itself)."""


# token -> the user's info, or None when not authenticated; user info -> (allowed, reason)
Authenticate = Callable[[str], "dict | None"]
Authorize = Callable[[dict], "tuple[bool, str]"]


def kube_reviews() -> tuple[Authenticate, Authorize]:
    """The two reviews, asked of the apiserver with the server's own credentials (in-cluster or kubeconfig)."""
    from kubernetes import client

    from ..cluster.kube import load_config

    load_config()
    authn, authz = client.AuthenticationV1Api(), client.AuthorizationV1Api()

    def authenticate(token: str) -> dict | None:
        try:
            review = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)),
                                               _request_timeout=10)
        except Exception as exc:
            raise ReviewError(f"TokenReview failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from exc
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        return {"username": user.username or "", "uid": user.uid, "groups": list(user.groups or []),
                "extra": {k: list(v) for k, v in (user.extra or {}).items()}}

    def authorize(user: dict) -> tuple[bool, str]:
        spec = client.V1SubjectAccessReviewSpec(
            user=user["username"], uid=user.get("uid"), groups=user.get("groups") or None,
            extra=user.get("extra") or None,
            non_resource_attributes=client.V1NonResourceAttributes(path=AUTHORIZED_PATH, verb=AUTHORIZED_VERB))
        try:
            review = authz.create_subject_access_review(client.V1SubjectAccessReview(spec=spec), _request_timeout=10)
        except Exception as exc:
            raise ReviewError(f"SubjectAccessReview failed: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200]}") from exc
        status = review.status
        return bool(status and status.allowed and not status.denied), str(status.reason or "") if status else ""

    return authenticate, authorize


class Filter:
    """``check(authorization header)``: the outcome for one request, remembered per token for a while."""

    def __init__(self, authenticate: Authenticate, authorize: Authorize,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.authenticate, self.authorize, self.clock = authenticate, authorize, clock
        self._cache: OrderedDict[str, tuple[float, Outcome]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> Outcome:
        if not header or not header.startswith("Bearer ") or not header[len("Bearer "):].strip():
            return Outcome(401, "Unauthorized: a bearer token is needed")
        token = header[len("Bearer "):].strip()
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        try:
            outcome = self._review(token)
        except ReviewError as exc:
            return Outcome(500, f"cannot check the token: {exc}")  # not remembered: the next scrape asks again
        with self._lock:
            self._cache[key] = (now + (ALLOW_TTL if outcome.status == 0 else DENY_TTL), outcome)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        return outcome

    def _review(self, token: str) -> Outcome:
        user = self.authenticate(token)
        if user is None:
            return Outcome(401, "Unauthorized: the token is not authenticated")
        allowed, reason = self.authorize(user)
        if not allowed:
            return Outcome(403, f"Forbidden: user {user['username']} may not get {AUTHORIZED_PATH}"
                                + (f" ({reason})" if reason else ""), user["username"])
        return Outcome(0, "", user["username"])


__all__ = ["ALLOW_TTL", "AUTHORIZED_PATH", "DENY_TTL", "PERMISSIONS", "Filter", "Outcome", "ReviewError",
           "kube_reviews"]
