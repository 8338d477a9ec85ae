"""References: every object a decision names must exist, or the workload's Pods never start.

Admitting a Job is only half of starting it. The apiserver refuses each Pod of a Job whose
PriorityClass does not exist (``no PriorityClass with name … was found``) long after the Job was
stored; a Pod mounting a missing claim, attached to a missing Multus network, claiming DRA devices
through a missing ResourceClaimTemplate, ResourceClaim or DeviceClass, or queued to a missing
Volcano Queue / Kueue LocalQueue waits forever; a TrainJob whose runtime does not exist never gets
Pods; a PodGroup of a kind the cluster does not
serve is never created, so the gang never forms. With a cluster view each such object is looked up
and a missing one is a denial that names it and says how to create it; without a view, the
decision lists what it could not verify (``Decision.unverified``, printed by `trainadmit check`).

Claims are also checked for access modes: a dataset mounted by workers on several nodes needs
ReadOnlyMany or ReadWriteMany, a checkpoint volume written from several nodes ReadWriteMany.
"""

from __future__ import annotations

from ...grammars.lazydataclass import dataclass
from ...policy.vocab import Action
from ..clusterview import (
    DEVICE_CLASS,
    KUEUE_LOCAL_QUEUE,
    NETWORK_ATTACHMENT,
    PERSISTENT_VOLUME_CLAIM,
    PRIORITY_CLASS,
    RESOURCE_CLAIM_TEMPLATE,
    VOLCANO_QUEUE,
    Presence,
    RefKind,
    ref_kind,
)
from ..concern import Concern
from ..context import Context
from ..demand import claim_kind
from ..dra import claim_spec, device_classes, pod_claims
from ..network import MULTUS_NETWORKS
from ..paths import as_dict, as_list, field_path
from ..reads import Reads
from ..rule import Resize, RuleId, rule
from ..workloads import Inheriting, Workload, capable

PRIORITY_CLASS_MISSING = rule("references.priority-class-missing", Action.deny,
                              "a priorityClassName that names no PriorityClass: the apiserver refuses every Pod")
CLAIM_MISSING = rule("references.claim-missing", Action.deny,
                     "a dataset or checkpoint PersistentVolumeClaim that does not exist in the namespace")
CLAIM_ACCESS_MODE = rule("references.claim-access-mode", Action.deny,
                         "a dataset or checkpoint claim whose access modes do not let every worker mount it",
                         Resize.grow)
NETWORK_MISSING = rule("references.network-missing", Action.deny,
                       "a Multus NetworkAttachmentDefinition of the pool that does not exist")
QUEUE_MISSING = rule("references.queue-missing", Action.deny,
                     "the Volcano Queue or Kueue LocalQueue the workload is sent to does not exist")
DEVICE_CLAIM_MISSING = rule("references.device-claim-missing", Action.deny,
                            "a ResourceClaimTemplate or ResourceClaim a pod template's DRA claim names does not exist")
DEVICE_CLASS_MISSING = rule("references.device-class-missing", Action.deny,
                            "a DeviceClass a DRA claim's request names does not exist: the claim is never allocated")
RUNTIME_MISSING = rule("references.runtime-missing", Action.deny,
                       "the TrainingRuntime or ClusterTrainingRuntime a TrainJob names does not exist")

# access modes that let the workers mount a claim, by (purpose, several nodes)
READ_MANY = ("ReadOnlyMany", "ReadWriteMany")
ALLOWED_MODES: dict[tuple[str, bool], tuple[str, ...]] = {
    ("dataset", False): ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"),
    ("dataset", True): READ_MANY,
    ("checkpoint", False): ("ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"),
    ("checkpoint", True): ("ReadWriteMany",),
}


@dataclass(frozen=True)
class Reference:
    """One object the decision names, where it is named, and what a missing one means."""

    kind: RefKind
    name: str
    namespace: str | None
    rule: RuleId
    path: str
    purpose: str  # "dataset c4", "tier normal", …
    hint: str

    @property
    def display(self) -> str:
        return f"{self.kind.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def validate(ctx: Context, view: Workload) -> None:
    refs = _references(ctx, view)
    for ref in refs:
        presence, obj = ctx.cluster.reference(ref.kind, ref.name, ref.namespace)
        if presence is Presence.present and obj is not None and ref.kind.group == "resource.k8s.io" \
                and ref.kind is not DEVICE_CLASS:
            _classes_of(ctx, ref, obj, refs)
        if presence is Presence.unknown:
            ctx.unverified.append(ref.display)
        elif presence is Presence.not_served:
            # what a view saw, not a fact: a live view learns a new API within seconds, `check` when it reads
            ctx.report(ref.rule, ref.path,
                       f"{ref.display} ({ref.purpose}) cannot exist yet: trainadmit has not seen this cluster serve "
                       f"{ref.kind.api_version} {ref.kind.kind} (is {ref.kind.provided_by} installed? one installed "
                       "in the last seconds is not seen yet: retry)", ref.hint)
        elif presence is Presence.missing:
            ctx.report(ref.rule, ref.path, f"{ref.display} ({ref.purpose}) does not exist: {_consequence(ref)}",
                       ref.hint)
        elif ref.kind is PERSISTENT_VOLUME_CLAIM and obj is not None:
            _access_modes(ctx, ref, obj)
    for companion in ctx.companions:
        api_version = str(companion.get("apiVersion"))
        if ctx.cluster.serves(api_version) is None:
            ctx.unverified.append(f"API {api_version} (for the {companion.get('kind')} the reconciler creates)")


def _classes_of(ctx: Context, ref: Reference, claim: dict, refs: list[Reference]) -> None:
    """The DeviceClasses a claim's requests name: a missing one means the claim is never allocated."""
    known = {(r.kind.kind, r.name) for r in refs}
    for name in device_classes(claim_spec(ref.kind.kind, claim)):
        if ("DeviceClass", name) not in known:
            known.add(("DeviceClass", name))
            refs.append(Reference(DEVICE_CLASS, name, None, DEVICE_CLASS_MISSING, ref.path,
                                  f"named by {ref.display}",
                                  f"install the DRA driver that provides DeviceClass {name}, or name an existing "
                                  f"class in {ref.kind.kind} {ref.name} (kubectl get deviceclasses)"))


def _consequence(ref: Reference) -> str:
    if ref.kind is PRIORITY_CLASS:
        return f'the apiserver would refuse every Pod ("no PriorityClass with name {ref.name} was found")'
    if ref.kind in (PERSISTENT_VOLUME_CLAIM, RESOURCE_CLAIM_TEMPLATE) or ref.rule is DEVICE_CLAIM_MISSING:
        return "the Pods would stay Pending until it exists"
    if ref.kind is DEVICE_CLASS:
        return "the scheduler can never allocate the claim, so the Pods would stay Pending"
    if ref.rule is RUNTIME_MISSING:
        return "Trainer would never create the TrainJob's Pods"
    if ref.kind is NETWORK_ATTACHMENT:
        return "Multus would fail to attach the network and the Pods would never start"
    return "the workload would wait in a queue that never admits it"


def _inherited(ctx: Context, view: Workload, add) -> None:
    """A TrainJob's runtime: without it Trainer creates no Pods."""
    adapter = view.adapter
    ref = adapter.inherited_ref(view.obj) if capable(adapter, Inheriting) else None
    kind = ref_kind(ref.group, ref.kind) if ref is not None else None
    if ref is None or kind is None:
        return
    namespace = ctx.namespace if ref.namespaced else None
    add(Reference(kind, ref.name, namespace, RUNTIME_MISSING, field_path(ref.path), f"the {view.kind}'s runtime",
                  f"create {ref.kind} {ref.name} first (kubectl get {kind.plural}), or name an existing one in "
                  f"{field_path(ref.path)}"))


def _claims(ctx: Context, view: Workload, add) -> None:
    """The ResourceClaimTemplates and ResourceClaims the pod templates' DRA claims name (in the workload's
    namespace; a cluster-scoped template's claims are looked up where each workload that inherits it runs)."""
    if not view.adapter.namespaced:
        return
    for template in view.templates:
        for claim in pod_claims(template.pod_spec):
            kind = claim_kind(claim)
            path = field_path((*template.spec_path, "resourceClaims", claim.index))
            field = "resourceClaimName" if claim.shared else "resourceClaimTemplateName"
            add(Reference(kind, claim.object_name, ctx.namespace, DEVICE_CLAIM_MISSING, path,
                          f"DRA claim {claim.name} of {template.label}",
                          f"create {kind.kind} {claim.object_name} in namespace {ctx.namespace} before the "
                          f"{view.kind} (apply it first), or fix {field}"))


def _references(ctx: Context, view: Workload) -> list[Reference]:
    out: list[Reference] = []
    seen: set[tuple[str, str | None, str]] = set()

    def add(ref: Reference) -> None:
        key = (ref.kind.kind, ref.namespace, ref.name)
        if key not in seen:
            seen.add(key)
            out.append(ref)

    r, ns = ctx.resolved, ctx.namespace
    _inherited(ctx, view, add)
    _claims(ctx, view, add)
    tiers = ctx.policy.tier_by_class
    for template in view.templates:
        name = template.pod_spec.get("priorityClassName")
        if not isinstance(name, str) or not name:
            continue
        tier = tiers.get(name)
        if tier is not None:
            purpose = f"priority tier {tier[0]}"
            hint = (f"install deploy/base/priorityclasses.yaml (`trainadmit policy priorityclasses`), or: kubectl "
                    f"create priorityclass {name} --value={tier[1].value} "
                    f"--preemption-policy={tier[1].preemptionPolicy}")
        else:
            purpose = "set on the pod template"
            hint = f"create PriorityClass {name} or remove priorityClassName"
        add(Reference(PRIORITY_CLASS, name, None, PRIORITY_CLASS_MISSING,
                      field_path((*template.spec_path, "priorityClassName")), purpose, hint))
    if "storage" in ctx.concerns:
        path = f'metadata.annotations["{ctx.policy.keys.datasets}"]'
        for ds_name, ds in r.datasets:
            add(Reference(PERSISTENT_VOLUME_CLAIM, ds.claimName, ns, CLAIM_MISSING, path, f"dataset {ds_name}",
                          f"ask the platform team to provision dataset {ds_name} in namespace {ns} (a "
                          f"{' or '.join(READ_MANY)} PersistentVolumeClaim {ds.claimName}), or drop it from "
                          f"{ctx.policy.keys.datasets}"))
        if r.checkpoint is not None:
            ck_name, ck = r.checkpoint
            add(Reference(PERSISTENT_VOLUME_CLAIM, ck.claimName, ns, CLAIM_MISSING,
                          f'metadata.annotations["{ctx.policy.keys.checkpoint}"]', f"checkpoint class {ck_name}",
                          f"create a ReadWriteMany PersistentVolumeClaim {ck.claimName} in namespace {ns}, or set "
                          f"{ctx.policy.keys.checkpoint}: none"))
    pool = r.pool
    if "rdma" in ctx.concerns and pool is not None and pool.rdma is not None:
        for template in ctx.pool_templates:
            if not ctx.gpu_containers(template):
                continue
            path = field_path((*template.meta_path, "annotations", MULTUS_NETWORKS))
            for network in pool.rdma.networks:
                net_ns, _, rest = network.rpartition("/")
                net_name = rest.split("@", 1)[0]
                add(Reference(NETWORK_ATTACHMENT, net_name, net_ns or ns, NETWORK_MISSING, path,
                              f"RDMA network of pool {r.pool_name}",
                              f"create NetworkAttachmentDefinition {net_ns or ns}/{net_name} (Multus) or ask the "
                              f"platform team to fix pool {r.pool_name}'s rdma.networks"))
    queue = r.queue or "default"
    queue_path = f'metadata.labels["{ctx.policy.keys.queue}"]'
    backend = ctx.plan.gang.backend
    if backend == "volcano":
        add(Reference(VOLCANO_QUEUE, queue, None, QUEUE_MISSING, queue_path, "the workload's Volcano queue",
                      f"create Volcano Queue {queue}, or set {ctx.policy.keys.queue} to an existing queue"))
    elif backend == "kueue":
        add(Reference(KUEUE_LOCAL_QUEUE, queue, ns, QUEUE_MISSING, queue_path, "the workload's Kueue queue",
                      f"create Kueue LocalQueue {queue} in namespace {ns} (pointing at a ClusterQueue), or set "
                      f"{ctx.policy.keys.queue} to an existing one"))
    return out


def _access_modes(ctx: Context, ref: Reference, claim: dict) -> None:
    """A claim exists: do its access modes let every worker mount it the way trainadmit mounts it?"""
    status, spec = as_dict(claim.get("status")), as_dict(claim.get("spec"))
    modes = [m for m in as_list(status.get("accessModes") if status.get("phase") == "Bound" else None)
             or as_list(spec.get("accessModes")) if isinstance(m, str)]
    if not modes:
        return
    purpose = "dataset" if ref.purpose.startswith("dataset") else "checkpoint"
    several = ctx.resolved.gpu_pods > 1
    allowed = ALLOWED_MODES[(purpose, several)]
    if any(m in allowed for m in modes):
        return
    where = f"{ctx.resolved.gpu_pods} workers on separate nodes" if several else "the worker"
    use = "reads" if purpose == "dataset" else "writes"
    ctx.report(CLAIM_ACCESS_MODE, ref.path,
               f"{ref.display} ({ref.purpose}) has access modes {', '.join(modes)}; {where} {use} it, which needs "
               f"{' or '.join(allowed)}", "ask the platform team for a claim with a fitting access mode"
               + (", or run a single worker" if several else ""))


CONCERN = Concern("references", rules=(PRIORITY_CLASS_MISSING, CLAIM_MISSING, CLAIM_ACCESS_MODE, NETWORK_MISSING,
                                       QUEUE_MISSING, DEVICE_CLAIM_MISSING, DEVICE_CLASS_MISSING,
                                       RUNTIME_MISSING), validate=validate,
                  reads=Reads(pod=("priorityClassName", "resourceClaims")))
