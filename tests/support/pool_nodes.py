"""Fake GPU Nodes made from a policy's pools, as a kubelet, GPU Feature Discovery, NFD and the device
plugins would report them: what the real scheduler places trainadmit's Pods on.

Why from the policy: an outcome test must put a Job's Pods on nodes the *policy under test* describes
(its node selector, the node facts its ``requiredNodeLabels`` ask for, its taints, GPUs per node, the
RDMA resources it injects, the node labels of its topology levels), or a change to the bundled pools
would silently leave the tests scheduling onto nodes nobody would build. Only the shape is the test's
own: which domains exist and how many nodes each has, which are cordoned or NotReady, and which ones
already hold a Pod's image (``status.images``: the scheduler's ImageLocality plugin then scores them
higher, which is how a test makes the first Pod of a gang prefer a domain that is too small).

Nodes are created with their status in one call (the node registry keeps status on create, as for a
kubelet's registration); the admission plugin TaintNodesByCondition adds ``node.kubernetes.io/not-ready``
to every new Node and the node-lifecycle controller lifts it at once for a Node that is not
``Ready=False`` (:func:`wait_schedulable`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from support.controlplane import KubeError, KubeHTTP, wait_until
from trainadmit.policy.models import NodeLabelRequirement, PoolSpec

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
IMAGE_BYTES = 2 * 1024**3  # above ImageLocality's 1000 MB ceiling: the largest score that plugin gives
RDMA_PER_NODE = 64  # devices a shared-RDMA device plugin advertises per node (more than any Pod asks for)


def _label_value(req: NodeLabelRequirement, per_node: int) -> str | None:
    """A node label value meeting one ``requiredNodeLabels`` requirement (In: its first value; Gt: one
    more than its bound, or the pool's GPU count when that is larger; Lt: one less; Exists: "true")."""
    op, values = req.operator, list(req.values)
    if op == "In":
        return values[0]
    if op == "Gt":
        return str(max(int(values[0]) + 1, per_node if req.key.endswith("gpu.count") else 0))
    if op == "Lt":
        return str(int(values[0]) - 1)
    return "true"


@dataclass(frozen=True)
class NodeShape:
    """One Node of a pool: its name, the domain it sits in for each topology level (level name ->
    label value; the smallest level's label, usually ``kubernetes.io/hostname``, is the node's name), and
    how it deviates from a healthy node."""

    name: str
    domains: Mapping[str, str] = field(default_factory=dict)
    cordoned: bool = False
    ready: bool = True
    images: tuple[str, ...] = ()


def pool_node(pool: PoolSpec, shape: NodeShape) -> dict:
    """The Node object for ``shape`` in ``pool``."""
    per = pool.gpu.perNode
    labels: dict[str, str] = {"kubernetes.io/hostname": shape.name, **pool.nodeSelector, **pool.healthSelector}
    if pool.gpu.product:
        labels["nvidia.com/gpu.product"] = pool.gpu.product
    for req in pool.requiredNodeLabels:
        value = _label_value(req, per)
        if value is not None:
            labels[req.key] = value
    for level in pool.topology.levels:
        labels[level.nodeLabel] = shape.name if level.maxNodes == 1 else shape.domains.get(level.name, "default")
    taints = []
    for tol in pool.tolerations:  # each toleration of the pool stands for a taint its nodes carry
        if tol.key and tol.effect in ("NoSchedule", "NoExecute"):
            taint = {"key": tol.key, "effect": tol.effect}
            taint["value"] = tol.value if tol.operator == "Equal" and tol.value else "present"
            taints.append(taint)
    resources = {"cpu": "190", "memory": "2000Gi", "pods": "110", "ephemeral-storage": "10Ti",
                 pool.gpu.resource: str(per)}
    for name in (pool.rdma.resources if pool.rdma else {}):
        resources[name] = str(RDMA_PER_NODE)
    ready = {"type": "Ready", "status": "True" if shape.ready else "False",
             "reason": "KubeletReady" if shape.ready else "KubeletNotReady", "message": "fake node"}
    status: dict = {"capacity": dict(resources), "allocatable": dict(resources), "conditions": [ready]}
    if shape.images:
        status["images"] = [{"names": list(shape.images), "sizeBytes": IMAGE_BYTES}]
    spec: dict = {"taints": taints}
    if shape.cordoned:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": shape.name, "labels": labels}, "spec": spec,
            "status": status}


def domains(prefix: str, level: str, sizes: Sequence[int], *, outer: Mapping[str, str] | None = None,
            cordoned: Iterable[str] = (), not_ready: Iterable[str] = (),
            images: Mapping[str, Sequence[str]] | None = None) -> list[NodeShape]:
    """Nodes in domains of ``level`` named ``<prefix>-a``, ``<prefix>-b``… (``-aa`` after ``-z``) with ``sizes[i]`` nodes each
    (``<prefix>-a0``…). ``outer`` puts them all in one domain of other levels (e.g. one zone);
    ``cordoned``/``not_ready`` name nodes; ``images`` maps a domain name to images its nodes hold."""
    cordoned, not_ready, images = set(cordoned), set(not_ready), dict(images or {})
    out = []
    for i, size in enumerate(sizes):
        domain = f"{prefix}-{_letters(i)}"
        for n in range(size):
            name = f"{domain}{n}"
            out.append(NodeShape(name, {**(outer or {}), level: domain}, cordoned=name in cordoned,
                                 ready=name not in not_ready, images=tuple(images.get(domain, ()))))
    return out


def _letters(i: int) -> str:
    """a, b, … z, aa, ab, …: domain names that stay valid label values for any number of domains."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def create_nodes(http: KubeHTTP, pool: PoolSpec, shapes: Iterable[NodeShape]) -> list[dict]:
    """Create the Nodes (with their status); return what was stored."""
    return [http.create(pool_node(pool, s)) for s in shapes]


def wait_schedulable(http: KubeHTTP, names: Iterable[str], timeout: float = 60.0) -> None:
    """Until the node-lifecycle controller has lifted the not-ready taint from every Ready Node named."""
    wanted = set(names)

    def lifted() -> bool:
        for node in http.list("v1", "Node")["items"]:
            if node["metadata"]["name"] not in wanted:
                continue
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
            if ready and any(t["key"] == NOT_READY_TAINT for t in node["spec"].get("taints") or []):
                return False
        return True

    wait_until(lifted, timeout=timeout, what="the not-ready taint lifted from new Nodes")


def delete_nodes(http: KubeHTTP, names: Iterable[str]) -> None:
    for name in names:
        with contextlib.suppress(KubeError):
            http.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def set_cordoned(http: KubeHTTP, name: str, cordoned: bool) -> None:
    """``kubectl cordon`` / ``uncordon``."""
    http.patch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, {"spec": {"unschedulable": cordoned}})
