"""The reports writer: each namespace's report rewritten when its workloads or the policy change, rate-limited.

It runs in the elected replica (``serve --reconcile``), on a live cluster view that keeps the
workloads whole (``LiveCluster(keep_workloads=True)``): a workload's change, or a ResourceQuota's,
marks its namespace dirty; a new policy generation, a switch of report API, or the periodic resync
(``resync`` seconds: node changes move capacity answers) marks every namespace. Each pass (the
reconciler's period) then re-judges at most ``max_namespaces`` dirty namespaces, oldest first, and
writes at most one report per namespace: created, replaced, or deleted once the namespace holds no
judged workload (its workloads were deleted or are being deleted, or the policy no longer matches them). A report whose
content did not change is not written at all. So a policy change over 2,000 workloads in 20
namespaces costs 20 writes in one pass, however often the workloads' status changes; Kyverno's
reports controller, which wrote a report per resource and an intermediate report per admission, is
what this shape avoids. Nothing is written while the view is stale or not synced (a decision made
without the cluster would be reported as the cluster's).

Each namespace's results also give the violations metric (``counts``): per rule and namespace, the
workloads a rule fails or warns about. Label values come from closed sets: the policy's declared rules
(anything else is ``other``) and at most ``MAX_NAMESPACE_LABELS`` namespaces (those with the most
violations; the rest add up under ``other``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine import RULES
from ..policy import PolicySet
from .judge import judge
from .kube import Permission
from .reports import MANAGED_BY, REPORT_APIS, REPORT_NAME, ReportAPI, build_report, choose_api, results_of, same_content
from .workloads import AsCreated, order_of

OTHER = "other"
MAX_NAMESPACE_LABELS = 200
SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
PERMISSIONS: tuple[Permission, ...] = tuple(
    p for api in REPORT_APIS for p in (Permission(api.group, api.plural, ("list", "create")),
                                       Permission(api.group, api.plural, ("update", "delete"), (REPORT_NAME,))))


@dataclass
class ReportWriter:
    custom: object  # kubernetes.client.CustomObjectsApi
    view: object  # cluster.live.LiveCluster with keep_workloads=True
    log: Callable[[str], None] = print
    max_namespaces: int = 50
    resync: float = 600.0
    clock: Callable[[], float] = time.time  # result timestamps
    monotonic: Callable[[], float] = time.monotonic
    on_counts: Callable[[dict[tuple[str, str], int]], None] | None = None
    on_write: Callable[[str, str, str], None] | None = None  # (kind "Report", verb, ok | error): metrics
    writes: Counter = field(default_factory=Counter)  # create / replace / delete calls made
    _dirty: dict[str, float] = field(default_factory=dict)  # namespace -> when it became dirty
    _stored: dict[str, dict] = field(default_factory=dict)  # namespace -> our report as the apiserver holds it
    _api: ReportAPI | None = None
    _generation: str | None = None
    _resynced: float | None = None
    _violations: dict[str, Counter] = field(default_factory=dict)  # namespace -> rule -> results
    _said: str = ""

    def mark(self, what: str, namespace: str) -> None:
        """A change the view saw (``what``: workloads, resourcequotas) in ``namespace``."""
        self._dirty.setdefault(namespace, self.monotonic())

    def _mark_all(self) -> None:
        now = self.monotonic()
        for namespace in self.view.workloads.namespaces() | set(self._stored):
            self._dirty.setdefault(namespace, now)

    def _say(self, message: str) -> None:
        if message != self._said:
            self._said = message
            self.log(message)

    # ---- the apiserver ----------------------------------------------------------------------------
    def _list_ours(self, api: ReportAPI) -> dict[str, dict]:
        out, token = {}, None
        while True:
            kwargs = {"label_selector": SELECTOR, "limit": 500}
            if token:
                kwargs["_continue"] = token
            listed = self.custom.list_cluster_custom_object(api.group, api.version, api.plural, **kwargs)
            for item in listed.get("items") or []:
                meta = item.get("metadata") or {}
                if meta.get("name") == REPORT_NAME:
                    out[meta.get("namespace", "")] = item
            token = (listed.get("metadata") or {}).get("continue")
            if not token:
                return out

    def _switch(self, api: ReportAPI) -> None:
        """Write ``api`` from now on: learn what of ours it holds, and remove ours from the other API."""
        old = self._api
        self._stored = self._list_ours(api)
        if old is not None and old != api:
            for namespace in self._list_ours(old):
                self._delete(old, namespace)
        self._api = api
        self.log(f"reports: writing {api.kind} {api.api_version} ({len(self._stored)} of ours found)")

    def _delete(self, api: ReportAPI, namespace: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(api.group, api.version, namespace, api.plural, REPORT_NAME)
            self.writes["delete"] += 1
            self._wrote("delete", "ok")
        except ApiException as exc:
            if exc.status != 404:
                self._wrote("delete", "error")
                raise

    def _wrote(self, verb: str, result: str) -> None:
        """One write, for the metrics (both report kinds count as ``Report``: the alerts' closed set)."""
        if self.on_write is not None:
            self.on_write("Report", verb, result)

    def _write(self, api: ReportAPI, namespace: str, report: dict | None) -> str:
        from kubernetes.client.exceptions import ApiException

        stored = self._stored.get(namespace)
        if report is None:
            if stored is None:
                return ""
            self._delete(api, namespace)
            self._stored.pop(namespace, None)
            return "deleted"
        if same_content(report, stored):
            return ""
        try:
            if stored is None:
                saved = self.custom.create_namespaced_custom_object(api.group, api.version, namespace, api.plural,
                                                                    report)
                self.writes["create"] += 1
                self._wrote("create", "ok")
                verb = "created"
            else:
                version = (stored.get("metadata") or {}).get("resourceVersion")
                body = {**report, "metadata": {**report["metadata"], "resourceVersion": version}}
                saved = self.custom.replace_namespaced_custom_object(api.group, api.version, namespace, api.plural,
                                                                     REPORT_NAME, body)
                self.writes["replace"] += 1
                self._wrote("update", "ok")
                verb = "replaced"
        except ApiException as exc:
            self._wrote("create" if stored is None else "update", "error")
            if exc.status in (404, 409):  # someone deleted or changed it: learn its state, try next pass
                self._stored.pop(namespace, None)
                if exc.status == 409:
                    self._stored.update({ns: r for ns, r in self._list_ours(api).items() if ns == namespace})
                self._dirty.setdefault(namespace, self.monotonic())
                return f"{exc.status}, retried next pass"
            raise
        self._stored[namespace] = saved if isinstance(saved, dict) else report
        return verb

    # ---- a pass -------------------------------------------------------------------------------------
    def _judge(self, policy: PolicySet, api: ReportAPI, namespace: str) -> str:
        results, rules = [], Counter()
        index = self.view.workloads
        for obj in index.objects(namespace):
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue  # being deleted: it has no results (its GPUs still count until it is gone)
            verdict = judge(policy, obj, AsCreated(self.view, index, order_of(obj)))
            for result in results_of(verdict):
                results.append(result)
                if result["result"] in ("fail", "warn"):
                    rules[result["rule"]] += 1
        if rules:
            self._violations[namespace] = rules
        else:
            self._violations.pop(namespace, None)
        report = build_report(api, namespace, results, policy.generation, int(self.clock()),
                              self._stored.get(namespace)) if results else None
        return self._write(api, namespace, report)

    def step(self, policy: PolicySet | None) -> list[str]:
        """One pass: returns what was written (``namespace/name: verb``)."""
        view = self.view
        if policy is None:
            return []
        if not view.synced.is_set() or view.stale():
            self._say("reports: the cluster view is not current; no report is written until it is")
            return []
        api = choose_api(view.serves)
        if api is None:
            self._say("reports: neither openreports.io/v1alpha1 nor wgpolicyk8s.io/v1alpha2 is served (install "
                      "one of the report CRDs); no report is written")
            return []
        self._said = ""
        now = self.monotonic()
        if api != self._api:
            self._switch(api)
            self._mark_all()
        if policy.generation != self._generation:
            self._generation = policy.generation
            self._mark_all()
        if self._resynced is None or now - self._resynced >= self.resync:
            self._resynced = now
            self._stored = self._list_ours(api)
            self._mark_all()
        out = []
        for namespace in sorted(self._dirty, key=self._dirty.__getitem__)[: self.max_namespaces]:
            del self._dirty[namespace]
            verb = self._judge(policy, api, namespace)
            if verb:
                out.append(f"{namespace}/{REPORT_NAME}: {verb}")
        if self.on_counts is not None:
            self.on_counts(self.counts(policy))
        return out

    def counts(self, policy: PolicySet) -> dict[tuple[str, str], int]:
        """Violations by (rule, namespace), with closed label sets (see the module doc)."""
        known = set(RULES) | {f"custom.{name}" for name in policy.rules}
        by_namespace = sorted(self._violations.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        out: Counter = Counter()
        for i, (namespace, rules) in enumerate(by_namespace):
            label = namespace if i < MAX_NAMESPACE_LABELS else OTHER
            for rule, count in rules.items():
                out[(rule if rule in known else OTHER, label)] += count
        return dict(out)


__all__ = ["PERMISSIONS", "ReportWriter"]
