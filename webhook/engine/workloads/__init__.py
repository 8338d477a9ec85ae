"""Workload adapters: one module per kind, and the lookup from (apiVersion, kind) to its adapter."""

from __future__ import annotations

from .base import Adapter, ContainerRef, PodTemplate, TemplateSpec, Workload, pod_resource_total, resource_count
from .job import JobAdapter
from .pod import PodAdapter

ADAPTERS: tuple[Adapter, ...] = (JobAdapter(), PodAdapter())
BY_KIND: dict[tuple[str, str], Adapter] = {(v, a.kind): a for a in ADAPTERS for v in a.api_versions}


def adapter_for(api_version: object, kind: object) -> Adapter | None:
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return BY_KIND.get((api_version, kind))


def workload_of(obj: dict) -> Workload | None:
    adapter = adapter_for(obj.get("apiVersion"), obj.get("kind"))
    return Workload(obj, adapter) if adapter is not None else None


__all__ = ["ADAPTERS", "BY_KIND", "Adapter", "ContainerRef", "PodTemplate", "TemplateSpec", "Workload",
           "adapter_for", "pod_resource_total", "resource_count", "workload_of"]
