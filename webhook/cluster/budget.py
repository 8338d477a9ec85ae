"""Each policy budget as a ResourceQuota: the apiserver's own quota admission is the hard stop for Pods.

Admission counts a namespace's unfinished workloads against ``Quota.spec.gpuQuota``, but two replicas
(or two worker processes of one) can admit two workloads in the same instant, each before it sees
the other, and together they may exceed the budget. A ResourceQuota cannot be raced that way: the
apiserver charges every Pod to it with a compare-and-swap on the quota's ``status.used``, so Pods
beyond the budget are refused at creation ("exceeded quota"), whichever workload they belong to.

So the reconciler writes, in every namespace whose Quota sets ``gpuQuota`` (and that is not exempt),
the ResourceQuota ``trainadmit-gpu-budget`` with ``requests.<gpu resource>: <gpuQuota>`` for each GPU
resource of the policy, labelled ``app.kubernetes.io/managed-by: trainadmit`` and annotated with the
Quota document and policy generation it comes from; it updates it when the policy changes and
deletes it when the policy no longer sets a budget there. It never touches a ResourceQuota it did not
write. (A ResourceQuota counts each resource on its own: a namespace allowed 64 GPUs may hold 64 of
each GPU resource there; admission's count is per resource too.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..policy import PolicySet
from .kube import Permission
from .reports import MANAGED_BY

BUDGET_NAME = "trainadmit-gpu-budget"
SOURCE_ANNOTATION = "trainadmit.io/budget"
PERMISSIONS: tuple[Permission, ...] = (
    Permission("", "namespaces", ("list",)),  # which namespaces a Quota's globs match
    Permission("", "resourcequotas", ("create",)),  # create cannot be limited by name
    Permission("", "resourcequotas", ("update", "delete"), (BUDGET_NAME,)),
)  # reading the quotas is the cluster view's (list + watch)


def gpu_resources(policy: PolicySet) -> list[str]:
    """The GPU resources a budget limits: those the policy's pools and Platform.spec.gpuResources name."""
    return sorted(r for r in policy.gpu_resources if not r.startswith("nvidia.com/mig-"))


def desired(policy: PolicySet, namespace: str) -> dict | None:
    """The ResourceQuota the policy's budget for ``namespace`` asks for, or None."""
    if policy.is_exempt(namespace):
        return None
    found = policy.quota_for(namespace)
    if found is None or found[1].gpuQuota is None:
        return None
    name, quota = found
    hard = {f"requests.{resource}": str(quota.gpuQuota) for resource in gpu_resources(policy)}
    if not hard:
        return None
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": BUDGET_NAME, "namespace": namespace, "labels": dict(MANAGED_BY),
                         "annotations": {SOURCE_ANNOTATION: f"Quota {name} spec.gpuQuota, policy generation "
                                                            f"{policy.generation}"}},
            "spec": {"hard": hard}}


def _ours(obj: dict | None) -> bool:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in MANAGED_BY.items())


def _same(want: dict, have: dict) -> bool:
    return ((want.get("spec") or {}).get("hard") == (have.get("spec") or {}).get("hard")
            and (want["metadata"].get("annotations") or {}) == ((have.get("metadata") or {}).get("annotations") or {}))


@dataclass
class BudgetQuotas:
    """One pass: every namespace's budget ResourceQuota made to match the policy."""

    core: object  # kubernetes.client.CoreV1Api
    quotas: Callable[[str], dict | None]  # the stored ResourceQuota BUDGET_NAME of a namespace (the cluster view)
    log: Callable[[str], None] = print
    ready: Callable[[], bool] = lambda: True  # the cluster view is synced and current: ``quotas`` can be trusted
    writes: list[str] = field(default_factory=list)
    on_write: Callable[[str, str, str], None] | None = None  # (kind "ResourceQuota", verb, ok | error): metrics

    def _namespaces(self) -> list[str]:
        names, token = [], None
        while True:
            kwargs = {"limit": 500, "_continue": token} if token else {"limit": 500}
            listed = self.core.list_namespace(**kwargs)
            names.extend(ns.metadata.name for ns in listed.items or [] if not ns.metadata.deletion_timestamp)
            token = listed.metadata._continue
            if not token:
                return names

    def step(self, policy: PolicySet) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        if not self.ready():
            return []
        out = []
        for namespace in self._namespaces():
            want, have = desired(policy, namespace), self.quotas(namespace)
            if have is not None and not _ours(have):
                continue  # someone else's object of that name: never ours to change
            verb = ""
            try:
                if want is None and have is not None:
                    verb = "delete"
                    self.core.delete_namespaced_resource_quota(BUDGET_NAME, namespace)
                    out.append(f"{namespace}/{BUDGET_NAME}: deleted (the policy sets no budget here)")
                elif want is not None and have is None:
                    verb = "create"
                    self.core.create_namespaced_resource_quota(namespace, want)
                    out.append(f"{namespace}/{BUDGET_NAME}: created ({_hard(want)})")
                elif want is not None and have is not None and not _same(want, have):
                    verb = "update"
                    version = (have.get("metadata") or {}).get("resourceVersion")
                    body = {**want, "metadata": {**want["metadata"], "resourceVersion": version}}
                    self.core.replace_namespaced_resource_quota(BUDGET_NAME, namespace, body)
                    out.append(f"{namespace}/{BUDGET_NAME}: updated ({_hard(want)})")
            except ApiException as exc:
                self._wrote(verb, "error")
                if exc.status in (404, 409):  # the view was behind: the next pass sees the change
                    continue
                raise
            if verb:
                self._wrote(verb, "ok")
        self.writes.extend(out)
        return out

    def _wrote(self, verb: str, result: str) -> None:
        if self.on_write is not None and verb:
            self.on_write("ResourceQuota", verb, result)


def _hard(quota: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(quota["spec"]["hard"].items()))


__all__ = ["BUDGET_NAME", "PERMISSIONS", "BudgetQuotas", "desired", "gpu_resources"]
