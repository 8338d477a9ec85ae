"""The objects a submission carries with its workloads, as `trainadmit check` reads them from its input.

A Job's ResourceClaimTemplate is often in the Job's own file, a TrainingRuntime beside its TrainJobs; what the
workload's Pods ask for is in them (``engine.demand``, a TrainJob's runtime), and ``kubectl apply`` creates
them together. So `check` counts from them as a cluster would once they are applied: ``SubmittedView`` answers
the engine's questions about those kinds (``COMPANION_KINDS``) from the input first, and from the cluster view
(``--cluster``, ``--kubeconfig``, or none) for everything else.

Files are read for such objects before any object is decided (a cheap search of each file's text for the
kinds' names, then a parse of the files that mention one), so a workload before its template in a file, or in
a directory listed before the template's, is decided with it. Standard input is read once, as it comes: a
workload that names such an object the input has not yet given is decided again at the end of the input, with
every object it gave (its line then comes after the others).
"""

from __future__ import annotations

from typing import Any

from ..engine.clusterview import COMPANION_KINDS, ClusterView, Presence, RefKind
from .inputs import STDIN, InputError, _documents_of, _expand, read_bytes

_BY_KIND = {(k.group, k.kind): k for k in COMPANION_KINDS}
_NAMES = tuple(k.kind.encode() for k in COMPANION_KINDS)


def companion_kind(obj: Any) -> RefKind | None:
    """The companion kind of an object of the input, or None (any served version of the group: a
    ``resource.k8s.io/v1beta1`` template counts as the v1 one the apiserver would convert it to)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str):
        return None
    group = obj["apiVersion"].rsplit("/", 1)[0] if "/" in obj["apiVersion"] else ""
    return _BY_KIND.get((group, obj.get("kind")))


class SubmittedView:
    """A cluster view that also holds the objects a submission carries (see the module doc). ``missed``
    lists the companion objects asked for that the submission does not hold (yet)."""

    def __init__(self, base: ClusterView, namespace: str):
        self._base = base
        self._namespace = namespace
        self._held: dict[tuple[str, str, str], dict] = {}
        self.missed: list[tuple[str, str | None, str]] = []
        self.name = getattr(base, "name", "submitted")

    def add(self, kind: RefKind, obj: dict, namespace: str | None) -> None:
        from ..cluster.index import kept, slim

        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name")
        if not isinstance(name, str) or not name or not kept(kind, obj):
            return
        where = (meta.get("namespace") or namespace or self._namespace) if kind.namespaced else ""
        self._held[(kind.kind, str(where), name)] = slim(kind, {**obj, "apiVersion": kind.api_version,
                                                                "kind": kind.kind})

    @property
    def holds_any(self) -> bool:
        return bool(self._held)

    def reference(self, kind: RefKind, name: str, namespace: str | None = None) -> tuple[Presence, dict | None]:
        if kind in COMPANION_KINDS:
            found = self._held.get((kind.kind, (namespace or "") if kind.namespaced else "", name))
            if found is not None:
                return Presence.present, found
            self.missed.append((kind.kind, namespace, name))
        return self._base.reference(kind, name, namespace)

    def __getattr__(self, name: str) -> Any:  # every other question goes to the cluster view
        return getattr(self._base, name)


def scan_files(files: list[str], view: SubmittedView, namespace_of) -> None:
    """Add every companion object of ``files`` (not standard input) to ``view``; a file that cannot be read is
    left for the reading that decides it to report."""
    for file in files:
        if file == STDIN:
            continue
        try:
            raw = read_bytes(file)
        except OSError:
            continue
        if not any(name in raw for name in _NAMES):
            continue
        try:
            for source, index, doc in _documents_of(file):
                for item in _expand(source, index, doc):
                    kind = companion_kind(item.obj)
                    if kind is not None:
                        view.add(kind, item.obj, namespace_of(item))
        except (InputError, UnicodeDecodeError, RecursionError):
            continue
