"""What the cluster-facing parts of the server may call, as RBAC rules (``kube.Permission``).

deploy/base/rbac.yaml grants exactly the union of these, of ``live.PERMISSIONS`` (the cluster
view, workloads included), ``preflight_status.PERMISSIONS`` and ``certs.incluster.PERMISSIONS`` (the
certificate controller): tests/project/test_deploy.py compares the rendered rules with them, and the integration
tier runs the server as its ServiceAccount against a real authorizer. The reconciler's are here: the
PodGroups, the budgets' ResourceQuotas (``budget.PERMISSIONS``) and the reports
(``report_writer.PERMISSIONS``).
"""

from __future__ import annotations

from . import budget, placement, report_writer
from .kube import Permission
from .lease import CERTS_LEASE, PLACEMENT_LEASE, PREFLIGHT_STATUS_LEASE, RECONCILER_LEASE
from .reconciler import PLURALS, podgroup_kinds

# API groups of the PodGroups the engine asks the reconciler for (native, coscheduling, Volcano); a
# test checks every companion the engine emits against this list
PODGROUP_GROUPS = ("scheduling.k8s.io", "scheduling.x-k8s.io", "scheduling.volcano.sh")

LEASE_PERMISSIONS: tuple[Permission, ...] = (
    Permission("coordination.k8s.io", "leases", ("get", "update"), (CERTS_LEASE, RECONCILER_LEASE,
                                                                    PREFLIGHT_STATUS_LEASE, PLACEMENT_LEASE),
               namespaced=True),
    Permission("coordination.k8s.io", "leases", ("create",), namespaced=True),  # create cannot be limited by name
)


def reconciler_permissions() -> tuple[Permission, ...]:
    """List the workloads that may ask for a PodGroup (every kind, CRDs that are not installed included:
    a 404 is skipped, a 403 would stop the pass), create the PodGroups, and read and patch one whose
    workload was resized."""
    lists = sorted({(group, plural) for group, _, plural in podgroup_kinds()})
    plurals = sorted(set(PLURALS.values()))
    return (*(Permission(group, plural, ("list",)) for group, plural in lists),
            *(Permission(group, plural, ("create", "get", "patch")) for group in PODGROUP_GROUPS for plural in plurals),
            *budget.PERMISSIONS, *report_writer.PERMISSIONS, *placement.PERMISSIONS)
