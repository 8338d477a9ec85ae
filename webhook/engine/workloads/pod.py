"""v1 Pod: its own metadata and spec are its one template; one Pod, never a gang by itself."""

from __future__ import annotations

from .base import Adapter, TemplateSpec


class PodAdapter(Adapter):
    group, versions, kind, plural = "", ("v1",), "Pod", "pods"
    operator = "the user"
    kueue_suspend = None
    template_patterns = ((),)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return [TemplateSpec((), "pod", 1, False, "the Pod")]
