"""Workload adapters: one module per kind, and the lookup from (apiVersion, kind) to its adapter.

Adding a kind is one module (its templates, Pod counts, gang per backend, child labels) plus its
line below and its tests; the engine, the webhook configuration test and the README's operator table
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
    FieldType,
    Gang,
    GangFields,
    GangMethod,
    GangShape,
    GangShapeProblem,
    GroupedGangs,
    InheritedRef,
    InheritedTemplate,
    Inheriting,
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
    pod_resource_total,
    resource_count,
)
from .job import JobAdapter
from .jobset import JobSetAdapter
from .kubeflow import MPIJobV1Adapter, MPIJobV2Adapter, PyTorchJobAdapter
from .lws import LeaderWorkerSetAdapter
from .pod import PodAdapter
from .ray import RayClusterAdapter, RayJobAdapter
from .runtime import ClusterTrainingRuntimeAdapter, TrainingRuntimeAdapter
from .trainjob import TrainJobAdapter
from .volcano import VolcanoJobAdapter

ADAPTERS: tuple[Adapter, ...] = (
    JobAdapter(), PodAdapter(), PyTorchJobAdapter(), MPIJobV1Adapter(), MPIJobV2Adapter(), RayClusterAdapter(),
    RayJobAdapter(), VolcanoJobAdapter(), JobSetAdapter(), LeaderWorkerSetAdapter(), TrainJobAdapter(),
    TrainingRuntimeAdapter(), ClusterTrainingRuntimeAdapter(),
)
BY_KIND: dict[tuple[str, str], Adapter] = {(v, a.kind): a for a in ADAPTERS for v in a.api_versions}
HANDLED_KINDS: frozenset[str] = frozenset(a.kind for a in ADAPTERS)


def adapter_for(api_version: object, kind: object) -> Adapter | None:
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return BY_KIND.get((api_version, kind))


def workload_of(obj: dict) -> Workload | None:
    adapter = adapter_for(obj.get("apiVersion"), obj.get("kind"))
    return Workload(obj, adapter) if adapter is not None else None


__all__ = ["ADAPTERS", "BACKEND_IDS", "BY_KIND", "HANDLED_KINDS", "NATIVE_JOB_SCHEDULING", "NATIVE_POD_GROUP",
           "WORKLOAD_READS", "Adapter", "Aliased", "ContainerRef", "FieldType", "Gang", "GangFields", "GangMethod",
           "GangShape", "GangShapeProblem", "GroupedGangs", "InheritedRef", "InheritedTemplate",
           "Inheriting", "PatchedTemplates", "PodTemplate",
           "ResourcesOutsideTemplates", "RunLabelled", "Scale", "Skeleton", "TemplateSpec", "UntemplatedPods",
           "Workload", "adapter_for", "capable", "pod_resource_total", "resource_count", "workload_of"]
