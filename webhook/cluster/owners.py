"""The stored owners a judged Pod's controller may name: StatefulSets, and the leader Pods that own a
LeaderWorkerSet group's workers' StatefulSet (``cluster.judge.Owners``, read by ``engine.provenance.vouched``).

Two sources: objects already read (``StoredOwners``: saved lists, read once when first asked, keeping only the
ownership of each StatefulSet and of each Pod a StatefulSet controls), or the apiserver (``ApiOwners``: a ``get``
of each named object, once). An object that is not found, or whose uid is not the reference's, is None: the Pod it
would vouch for is then decided one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..engine.provenance import controller_ref, undecided_owner

POD = ("v1", "Pod")


def _stub(obj: dict) -> dict:
    """What ownership needs of ``obj``: its kind, name, uid and ownerReferences."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "ownerReferences") if k in meta}}


def _named(found: dict | None, ref: dict) -> dict | None:
    """``found`` when it is the object ``ref`` names (the same uid, when both say one)."""
    if found is None:
        return None
    uid, ref_uid = (found.get("metadata") or {}).get("uid"), ref.get("uid")
    return None if uid and ref_uid and uid != ref_uid else found


class StoredOwners:
    """Owners among objects already read; ``load()`` yields them (called once, on the first question)."""

    def __init__(self, load: Callable[[], Iterable[Any]]) -> None:
        self._load = load
        self._index: dict[tuple, dict] | None = None
        self._lock = threading.Lock()

    def _built(self) -> dict[tuple, dict]:
        with self._lock:
            if self._index is None:
                index: dict[tuple, dict] = {}
                for obj in self._load():
                    if not isinstance(obj, dict):
                        continue
                    kind = (obj.get("apiVersion"), obj.get("kind"))
                    ref = controller_ref(obj)
                    keep = undecided_owner(obj) is not None or (
                        kind == POD and ref is not None and undecided_owner(
                            {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind")}) is not None)
                    meta = obj.get("metadata") or {}
                    if keep and isinstance(meta, dict) and meta.get("name"):
                        index[(str(meta.get("namespace") or ""), *kind, meta["name"])] = _stub(obj)
                self._index = index
            return self._index

    def __call__(self, namespace: str, ref: dict) -> dict | None:
        index = self._built()
        found = index.get((namespace, ref.get("apiVersion"), ref.get("kind"), ref.get("name"))) or index.get(
            ("", ref.get("apiVersion"), ref.get("kind"), ref.get("name")))
        return _named(found, ref)


class ApiOwners:
    """Owners read from the apiserver (``get`` on StatefulSets and Pods), each once."""

    def __init__(self, client_api) -> None:
        self.client_api = client_api
        self._cache: dict[tuple, dict | None] = {}

    def __call__(self, namespace: str, ref: dict) -> dict | None:
        key = (namespace, ref.get("apiVersion"), ref.get("kind"), ref.get("name"))
        if key not in self._cache:
            self._cache[key] = self._get(namespace, ref)
        return _named(self._cache[key], ref)

    def _get(self, namespace: str, ref: dict) -> dict | None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        name, kind = str(ref.get("name") or ""), (ref.get("apiVersion"), ref.get("kind"))
        if not name:
            return None
        if kind == POD:
            call = client.CoreV1Api(self.client_api).read_namespaced_pod
        elif kind == ("apps/v1", "StatefulSet"):
            call = client.AppsV1Api(self.client_api).read_namespaced_stateful_set
        else:
            return None
        try:
            found = self.client_api.sanitize_for_serialization(call(name, namespace, _request_timeout=(10, 60)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            from .listed import ListError

            raise ListError(f"{'pods' if kind == POD else 'statefulsets.apps'} {namespace}/{name}: {exc.status} "
                            f"{exc.reason}") from exc
        found.setdefault("apiVersion", kind[0])
        found.setdefault("kind", kind[1])
        return _stub(found)


__all__ = ["ApiOwners", "StoredOwners"]
