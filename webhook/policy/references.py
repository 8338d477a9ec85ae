"""Names one policy document gives another, checked the same way on every document that gives one.

Invariant: a reference is checked by what it names, never by which document holds it — a pool's fabric
is resolved the same way whether the pool has RDMA resources or not, so a typo is an error on any pool.
Each check returns ``CrossProblem`` tuples (the document, the field, the message, the fix); the loader
turns them into errors at the field's line, so `policy lint`, `policy test`, `check` and the server all
refuse the same policy.

- ``Pool.spec.fabric``: a fabric of ``Platform.spec.fabrics``, or one several RDMA pools share (their RDMA
  resources are what asks for it). A name only one pool uses and no Platform fabric has means nothing a
  workload can ask for by that name: a typo, or a pool's own fabric, which ``spec.fabric`` unset already is
  (the pool's name).
- ``PriorityTier.spec.className``: one tier per PriorityClass (a workload's class names its tier).
- ``Platform.spec.fabrics[*].deviceClasses``: not a DeviceClass the policy calls GPUs (a claim of it would
  be both the workload's GPUs and a fabric it asks for).
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

# (the document's kind and name, field location, message, fix): policyset.CrossProblem
CrossProblem = tuple[tuple[str, str], tuple, str, str]


class PolicySet(Protocol):
    """What the checks read of a ``policyset.PolicySet`` (which calls them: no import back)."""

    @property
    def platform(self) -> Any: ...

    @property
    def platform_name(self) -> str: ...

    pools: Mapping[str, Any]
    tiers: Mapping[str, Any]
    sources: Mapping[tuple[str, str], Any]
    gpu_device_classes: frozenset[str]


def reference_problems(policy: PolicySet, platform_loaded: bool = True) -> list[CrossProblem]:
    """Every reference problem of the set, each at the document and field that names the missing thing.

    ``platform_loaded`` False: the Platform document did not load (its own errors are reported) and the set holds
    a stand-in, whose fabrics are not the ones meant: what names a Platform fabric is not checked against them."""
    platform = [*pool_fabrics(policy), *fabric_device_classes(policy)] if platform_loaded else []
    return [*platform, *tier_classes(policy)]


def pool_fabrics(policy: PolicySet) -> list[CrossProblem]:
    platform_fabrics = set(policy.platform.fabrics)
    uses = Counter(p.fabric for p in policy.pools.values() if p.fabric is not None and p.rdma is not None)
    known = sorted(platform_fabrics | set(uses))
    out: list[CrossProblem] = []
    for name, pool in sorted(policy.pools.items()):
        fabric = pool.fabric
        if fabric is None or fabric in platform_fabrics:
            continue
        if pool.rdma is not None and uses[fabric] > 1:
            continue  # shared by RDMA pools: their RDMA resources ask for it
        close = difflib.get_close_matches(fabric, [k for k in known if k != fabric], n=1)
        if pool.rdma is None:
            message = f"no fabric {fabric!r} in Platform.spec.fabrics and the pool has no rdma resources to define it"
            fix = (f"did you mean {close[0]}? " if close else "") + \
                f"use one of: {', '.join(sorted(platform_fabrics))}, or give the pool rdma resources"
        else:
            message = (f"no fabric {fabric!r} in Platform.spec.fabrics, and no other RDMA pool names it: no "
                       "workload can ask for it by this name")
            fix = (f"did you mean {close[0]}? Or " if close else "") + \
                f"remove spec.fabric (the pool's own RDMA fabric is then named {name}), add {fabric} to " \
                "Platform.spec.fabrics, or name it on each RDMA pool that shares it"
        out.append((("Pool", name), ("spec", "fabric"), message, fix))
    return out


def tier_classes(policy: PolicySet) -> list[CrossProblem]:
    first: dict[str, str] = {}
    out: list[CrossProblem] = []
    def where(name: str) -> tuple:
        source = policy.sources.get(("PriorityTier", name))
        return (source.file, source.line) if source else ("", 0)

    for name, tier in sorted(policy.tiers.items(), key=lambda item: (where(item[0]), item[0])):  # the later one
        other = first.setdefault(tier.className, name)
        if other != name:
            out.append((("PriorityTier", name), ("spec", "className"),
                        f"PriorityClass {tier.className!r} is also the class of PriorityTier {other}: a workload "
                        "naming it could be either tier", f"give each tier its own className (or merge {other} "
                        f"and {name})"))
    return out


def fabric_device_classes(policy: PolicySet) -> list[CrossProblem]:
    platform_ref = ("Platform", policy.platform_name)
    out: list[CrossProblem] = []
    for name, fabric in sorted(policy.platform.fabrics.items()):
        for i, device_class in enumerate(fabric.deviceClasses):
            if device_class in policy.gpu_device_classes:
                out.append((platform_ref, ("spec", "fabrics", name, "deviceClasses", i),
                            f"DeviceClass {device_class!r} is a GPU class of this policy (Platform.spec."
                            "gpuDeviceClasses or a Pool's gpu.deviceClasses): its claims are GPUs, not a fabric",
                            "remove it from the fabric, or from the GPU classes"))
    return out
