"""v1 Pod: its own metadata and spec are its one template; one Pod, never a gang by itself.

A bare Pod's siblings are unknown here, so its gang's size is too: gang intent on a Pod gets a warning
and no gang (the operator that creates such Pods forms their gang).
"""

from __future__ import annotations

from .base import NATIVE_POD_GROUP, Adapter, Gang, GangMethod, TemplateSpec

_UNSIZED = Gang(GangMethod.unsized, reason="trainadmit gangs Jobs; a Pod's gang size is not known here")


class PodAdapter(Adapter):
    group, versions, kind, plural = "", ("v1",), "Pod", "pods"
    operator = "the user"
    gangs = dict.fromkeys((NATIVE_POD_GROUP, "coscheduling", "volcano", "kueue", "kai"), _UNSIZED)
    template_patterns = ((),)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return [TemplateSpec((), "pod", 1, False, "the Pod")]
