"""Workload adapters: one module per kind, and the lookup from (apiVersion, kind) to its adapter.

Adding a kind is one module (its templates, Pod counts, gang per backend, child labels) plus its
line below and its tests; the engine, the webhook configuration test and the operator table of docs/workloads.md
read this list."""

from __future__ import annotations

from .base import (
    BACKEND_IDS,
    NATIVE_JOB_SCHEDULING,
    NATIVE_POD_GROUP,
    WORKLOAD_READS,
    Adapter,
    Aliased,
    ContainerRef,
    DefaultedGangSize,
    FieldType,
    Follow,
    Gang,
    GangFields,
    GangMethod,
    GangShape,
    GangShapeProblem,
    GroupedGangs,
    InheritedRef,
    InheritedTemplate,
    Inheriting,
    MountsElsewhere,
    Owner,
    OwnMinimums,
    PatchedTemplates,
    PodTemplate,
    ResourcesOutsideTemplates,
    RunLabelled,
    Scale,
    Skeleton,
    TemplateSpec,
    UntemplatedPods,
    Workload,
    capable,
    env_named,
    kube_controller,
    pod_resource_total,
    resource_count,
)
from .job import JobAdapter
from .jobset import JobSetAdapter
from .kubeflow import MPIJobV1Adapter, MPIJobV2Adapter, PaddleJobAdapter, PyTorchJobAdapter, TFJobAdapter
from .lws import LeaderWorkerSetAdapter
from .pod import PodAdapter
from .ray import RayClusterAdapter, RayJobAdapter
from .runtime import ClusterTrainingRuntimeAdapter, TrainingRuntimeAdapter
from .trainjob import TrainJobAdapter
from .volcano import VolcanoJobAdapter

ADAPTERS: tuple[Adapter, ...] = (
    JobAdapter(), PodAdapter(), PyTorchJobAdapter(), MPIJobV1Adapter(), MPIJobV2Adapter(), TFJobAdapter(),
    PaddleJobAdapter(), RayClusterAdapter(), RayJobAdapter(), VolcanoJobAdapter(), JobSetAdapter(),
    LeaderWorkerSetAdapter(), TrainJobAdapter(), TrainingRuntimeAdapter(), ClusterTrainingRuntimeAdapter(),
)
BY_KIND: dict[tuple[str, str], Adapter] = {(v, a.kind): a for a in ADAPTERS for v in a.api_versions}
HANDLED_KINDS: frozenset[str] = frozenset(a.kind for a in ADAPTERS)


def _owners() -> tuple[Owner, ...]:
    """Every kind whose children are left alone when their controller created them: the handled kinds
    whose operators create Pods or child objects (MPIJob v1 and v2beta1 merged under one resource), and the
    kinds between an operator and its Pods."""
    merged: dict[str, Owner] = {}
    for adapter in ADAPTERS:
        own = (adapter.owner,) if adapter.controllers else ()
        for owner in (*own, *adapter.intermediate_owners):
            known = merged.get(owner.resource)
            if known is None:
                merged[owner.resource] = owner
            else:
                merged[owner.resource] = Owner(tuple(dict.fromkeys((*known.api_versions, *owner.api_versions))),
                                               owner.kind, owner.resource,
                                               tuple(dict.fromkeys((*known.users, *owner.users))),
                                               known.decided and owner.decided)
    return tuple(merged.values())


OWNERS: tuple[Owner, ...] = _owners()
OWNER_BY_KIND: dict[tuple[str, str], Owner] = {(v, o.kind): o for o in OWNERS for v in o.api_versions}


def adapter_for(api_version: object, kind: object) -> Adapter | None:
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return BY_KIND.get((api_version, kind))


def workload_of(obj: dict) -> Workload | None:
    adapter = adapter_for(obj.get("apiVersion"), obj.get("kind"))
    return Workload(obj, adapter) if adapter is not None else None


__all__ = ["ADAPTERS", "BACKEND_IDS", "BY_KIND", "HANDLED_KINDS", "NATIVE_JOB_SCHEDULING", "NATIVE_POD_GROUP",
           "OWNERS", "OWNER_BY_KIND", "WORKLOAD_READS", "Adapter", "Aliased", "ContainerRef", "DefaultedGangSize",
           "FieldType", "Follow", "Gang", "GangFields", "GangMethod", "GangShape", "GangShapeProblem",
           "GroupedGangs", "InheritedRef", "InheritedTemplate", "Inheriting", "MountsElsewhere", "OwnMinimums",
           "Owner", "PatchedTemplates", "PodTemplate", "ResourcesOutsideTemplates", "RunLabelled", "Scale",
           "Skeleton", "TemplateSpec", "UntemplatedPods", "Workload", "adapter_for", "capable", "env_named",
           "kube_controller",
           "pod_resource_total", "resource_count", "workload_of"]
