"""The questions the engine asks about the cluster, and the answer "unknown".

The engine never lists nodes itself: it asks through ``ClusterView``. ``NoCluster`` answers
"unknown" (the policy's own figures are used); ``trainadmit.cluster`` implements the protocol from
saved objects (`check --cluster`) and from a live list + watch (`serve --cluster-live`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import NodeLabelRequirement, PoolSpec, TopologyLevel


class ClusterView(Protocol):
    name: str

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        """Nodes of the pool, or None when unknown."""

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        """Pool nodes in the largest domain of ``level``, or None when unknown."""

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        """(hard, used) of the namespace's binding ResourceQuota on ``requests.<resource>``."""

    def pool_nodes_matching(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement]) -> int | None:
        """Nodes of the pool whose labels meet every one of ``requirements``, or None when unknown."""


class NoCluster:
    name = "none"

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        return None

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        return None

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        return None

    def pool_nodes_matching(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement]) -> int | None:
        return None
