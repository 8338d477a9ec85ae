"""A cluster view from saved API objects: what `trainadmit check --cluster` reads.

`kubectl get nodes -o json`, `kubectl get resourcequotas,priorityclasses,pvc -A -o json` (and the
same for network-attachment-definitions, Volcano queues, Kueue localqueues) give lists of the
kinds the engine asks about; `kubectl get --raw /apis` gives the served API groups (an
``APIGroupList``) and `kubectl get --raw /version` the apiserver's version (what ``auto`` chooses from);
a recorded watch stream (``.jsonl``) works too. The answers come from the same
``ClusterIndex`` the live view uses, so CI and the server size pools, count usable nodes and look up
referenced objects the same way.

A kind counts as known (so a missing object is reported missing, not unverified) when the snapshot
holds at least one object of it, or a typed list of it (``PriorityClassList``, as the API returns,
even empty): a plain ``List`` with no items says nothing about which kind it was. Training workloads
(`kubectl get jobs,pytorchjobs,... -A -o json`) are known once the snapshot holds any of them, or a
typed list of one of their kinds: the namespace GPU budget then counts what they hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..engine.clusterview import REFERENCE_KINDS, RefKind
from .discovery import api_versions, is_version_document, parse_version
from .index import ClusterIndex
from .workloads import workload_kind

SOURCE = "snapshot"  # the workload index's one collection: every workload of the snapshot

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a 50,000-node list in well under a second


class SnapshotError(ValueError):
    pass


def _ref_kind(api_version: str, kind: str) -> RefKind | None:
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    for ref in REFERENCE_KINDS:
        if ref.kind == kind and (not api_version or ref.group == group):
            return ref
    return None


class SnapshotCluster(ClusterIndex):
    """A cluster view built from saved API objects (Nodes, ResourceQuotas, referenced kinds, their Lists)."""

    def __init__(self, objects: list[dict], name: str = "snapshot"):
        super().__init__()
        self.name = name
        self._has_nodes = False
        self._served_groups: set[str] = set()
        self._has_api_groups = False
        self._version: tuple[tuple[int, int] | None, str] = (None, "")
        for obj in objects:
            self.add(obj)
        self.finish()

    def add(self, obj: object) -> None:
        """One more saved object (objects may also come one at a time: then ``finish`` after the last)."""
        self._add(obj, self._served_groups)

    def finish(self) -> None:
        if self._has_api_groups:
            self.set_served(self._served_groups | {"v1"}, *self._version)

    def knows_nodes(self) -> bool:
        return self._has_nodes  # a snapshot of quotas alone says nothing about pools

    def _add(self, obj: object, served: set[str]) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError("a cluster snapshot holds Kubernetes objects (mappings)")
        if is_version_document(obj):
            self._version = parse_version(obj)
            return
        kind, api_version = str(obj.get("kind", "")), str(obj.get("apiVersion", ""))
        if kind == "APIGroupList":
            self._has_api_groups = True
            served.update(api_versions(obj))
        elif kind.endswith("List") and isinstance(obj.get("items"), list):
            item_kind = kind[: -len("List")]
            ref = _ref_kind(api_version, item_kind) if item_kind else None
            if ref is not None:  # a typed list: the whole kind, even when empty
                self.replace_refs(ref, [])
            elif workload_kind(api_version, item_kind) is not None:
                self.workloads.listed(SOURCE)
            elif item_kind == "Node":
                self._has_nodes = True
            for item in obj["items"]:
                if isinstance(item, dict) and "kind" not in item:
                    item = {**item, "kind": item_kind, "apiVersion": api_version}
                self._add(item, served)
        elif kind == "Node":
            self._has_nodes = True
            self.put_node(obj)
        elif kind == "ResourceQuota":
            self.put_quota(obj)
        elif kind == "Status":
            raise SnapshotError(f"snapshot holds an API error: {obj.get('message', obj.get('reason'))}")
        elif workload_kind(api_version, kind) is not None:
            self.workloads.listed(SOURCE)
            self.workloads.put(SOURCE, obj)
        else:
            ref = _ref_kind(api_version, kind)
            if ref is not None:
                self.put_ref(ref, obj)

    @classmethod
    def from_files(cls, paths: list[str]) -> SnapshotCluster:
        objects: list[dict] = []
        for path in paths:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise SnapshotError(f"{path}: not UTF-8 text: a snapshot is the JSON or YAML `kubectl get` "
                                    "prints") from exc
            try:
                if path.endswith(".jsonl"):
                    docs = [json.loads(line)["object"] for line in text.splitlines() if line.strip()]
                else:
                    docs = [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
            except (yaml.YAMLError, json.JSONDecodeError, KeyError, TypeError, RecursionError) as exc:
                raise SnapshotError(f"{path}: not a cluster snapshot: {exc}") from exc
            objects.extend(docs)
        try:
            return cls(objects, name=",".join(paths))
        except SnapshotError as exc:
            raise SnapshotError(f"{','.join(paths)}: {exc}") from exc
