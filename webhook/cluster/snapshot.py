"""A cluster view from saved API objects: what `trainadmit check --cluster` reads.

`kubectl get nodes -o json` and `kubectl get resourcequotas -A -o json` give a NodeList and a
ResourceQuotaList; a recorded watch stream (``.jsonl``) works too. The answers come from the same
``ClusterIndex`` the live view uses, so CI and the server size pools and quotas the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .index import ClusterIndex


class SnapshotError(ValueError):
    pass


class SnapshotCluster(ClusterIndex):
    """A cluster view built from saved API objects (Node, NodeList, ResourceQuota, ResourceQuotaList, List)."""

    def __init__(self, objects: list[dict], name: str = "snapshot"):
        super().__init__()
        self.name = name
        self._has_nodes = False
        for obj in objects:
            self._add(obj)

    def knows_nodes(self) -> bool:
        return self._has_nodes  # a snapshot of quotas alone says nothing about pools

    def _add(self, obj: object) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError("a cluster snapshot holds Kubernetes objects (mappings)")
        kind = obj.get("kind", "")
        if kind.endswith("List") and isinstance(obj.get("items"), list):
            for item in obj["items"]:
                if isinstance(item, dict) and "kind" not in item:
                    item = {**item, "kind": kind[: -len("List")]}
                self._add(item)
        elif kind == "Node":
            self._has_nodes = True
            self.put_node(obj)
        elif kind == "ResourceQuota":
            self.put_quota(obj)
        elif kind == "Status":
            raise SnapshotError(f"snapshot holds an API error: {obj.get('message', obj.get('reason'))}")

    @classmethod
    def from_files(cls, paths: list[str]) -> SnapshotCluster:
        objects: list[dict] = []
        for path in paths:
            text = Path(path).read_text()
            try:
                if path.endswith(".jsonl"):
                    docs = [json.loads(line)["object"] for line in text.splitlines() if line.strip()]
                else:
                    docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except (yaml.YAMLError, json.JSONDecodeError, KeyError, TypeError) as exc:
                raise SnapshotError(f"{path}: not a cluster snapshot: {exc}") from exc
            objects.extend(docs)
        return cls(objects, name=",".join(paths))
