"""The PodGroup reconciler: creates the PodGroups that gang backends need, after the Job exists.

Admission never creates objects (the Job may still be rejected after the mutating webhook ran, and
a generateName Job has no name yet). The mutating webhook marks Jobs that need a PodGroup with the
label ``trainadmit.io/podgroup`` and puts the PodGroup itself in the annotation of the same name;
this loop lists those Jobs and creates each PodGroup, owned by its Job, so that garbage collection
deletes it with the Job. Only the holder of the Lease ``trainadmit-reconciler`` writes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .lease import LeaderLease

PLURALS = {"PodGroup": "podgroups"}


@dataclass
class PodGroupReconciler:
    batch: object  # kubernetes.client.BatchV1Api
    custom: object  # kubernetes.client.CustomObjectsApi
    lease: LeaderLease | None = None
    key: str = "trainadmit.io/podgroup"
    log: Callable[[str], None] = print
    created: list[str] = field(default_factory=list)

    def desired(self, job) -> dict | None:
        """The PodGroup a Job asks for (from its annotation), owned by the Job."""
        meta = job.metadata
        raw = (meta.annotations or {}).get(self.key)
        if not raw:
            return None
        try:
            pg = json.loads(raw)
        except ValueError:
            self.log(f"reconciler: {meta.namespace}/{meta.name}: annotation {self.key} is not JSON")
            return None
        if not isinstance(pg, dict) or pg.get("kind") not in PLURALS or "/" not in str(pg.get("apiVersion")):
            return None
        pg.setdefault("metadata", {})
        pg["metadata"].update(namespace=meta.namespace, labels={"app.kubernetes.io/managed-by": "trainadmit"},
                              ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": meta.name,
                                                "uid": meta.uid, "controller": True, "blockOwnerDeletion": True}])
        return pg

    def ensure(self, pg: dict) -> str:
        from kubernetes.client.exceptions import ApiException

        group, version = pg["apiVersion"].split("/", 1)
        meta = pg["metadata"]
        try:
            self.custom.create_namespaced_custom_object(group, version, meta["namespace"], PLURALS[pg["kind"]], pg)
        except ApiException as exc:
            if exc.status == 409:
                return "exists"
            if exc.status == 404:
                return f"{pg['apiVersion']} {pg['kind']} is not served by this cluster (CRD or feature gate missing)"
            raise
        self.created.append(f"{meta['namespace']}/{meta['name']}")
        return "created"

    def step(self) -> list[str]:
        if self.lease is not None and not self.lease.hold():
            return []
        out = []
        jobs = self.batch.list_job_for_all_namespaces(label_selector=self.key)
        for job in jobs.items:
            if job.status is not None and (job.status.succeeded or 0) + (job.status.failed or 0) > 0 and \
                    job.status.active in (None, 0) and job.status.completion_time:
                continue  # finished: nothing will be scheduled any more
            pg = self.desired(job)
            if pg is None:
                continue
            result = self.ensure(pg)
            if result != "exists":
                out.append(f"{pg['metadata']['namespace']}/{pg['metadata']['name']}: {result}")
        return out

    def run(self, stop: threading.Event, interval: float = 5.0) -> None:
        while not stop.is_set():
            try:
                for line in self.step():
                    self.log(f"reconciler: {line}")
            except Exception as exc:
                self.log(f"reconciler: pass failed: {exc!r}")
            stop.wait(interval)
