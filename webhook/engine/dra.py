"""DRA (``resource.k8s.io``): the devices a Pod's claims ask for, counted as the scheduler allocates them.

A Pod asks for DRA devices in ``spec.resourceClaims``: each entry names a ResourceClaimTemplate
(``resourceClaimTemplateName``: a claim of its own is made from it for every Pod) or a ResourceClaim
(``resourceClaimName``: one claim, so one set of devices, shared by every Pod that names it). A claim's
``devices.requests`` must all be satisfied, and a claim is allocated whole whether or not a container lists it
in ``resources.claims``, so every request counts. Each request is one of:

- ``exactly``: ``deviceClassName``, ``allocationMode`` ``ExactCount`` (the default) with ``count`` devices (1
  when unset), or ``All``: every matching device of the pool the allocation comes from (a node's, for a
  node-local driver), a number not known before allocation;
- ``firstAvailable``: sub-requests, each with its own class, mode and count, of which the scheduler allocates
  the first it can satisfy, so only the range is known before allocation.

An allocated ResourceClaim says what it got (``status.allocation.devices.results``, one entry per device,
naming its request, ``<request>/<sub-request>`` for ``firstAvailable``). ``v1beta1`` puts the fields of
``exactly`` on the request itself. Source: kubernetes/api ``resource/v1/types.go`` (``DeviceClaim.Requests``,
``ExactDeviceRequest.AllocationMode``/``Count``, ``DeviceSubRequest``, ``DeviceRequestAllocationResult``),
``core/v1`` ``PodResourceClaim``.
"""

from __future__ import annotations

from typing import Any

from ..grammars.lazydataclass import dataclass
from .paths import as_dict, as_list

TEMPLATE_NAME = "resourceClaimTemplateName"
CLAIM_NAME = "resourceClaimName"
ALL = "All"


@dataclass(frozen=True)
class DeviceAsk:
    """One way a request can be satisfied: ``count`` devices of ``device_class`` (None: ``All`` of them)."""

    device_class: str
    count: int | None
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceRequest:
    """One request of a claim: its alternatives (one for ``exactly``, in order for ``firstAvailable``) and,
    for an allocated claim, how many devices it got."""

    name: str
    asks: tuple[DeviceAsk, ...]
    allocated: int | None = None


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod spec's ``resourceClaims``: the Pod's name for it and the object it comes from."""

    index: int
    name: str
    object_name: str
    shared: bool  # a ResourceClaim (one set of devices for every Pod naming it), not a template


def pod_claims(pod_spec: dict) -> list[PodClaim]:
    """The entries of ``spec.resourceClaims`` that name a template or a claim (the apiserver requires one)."""
    out = []
    for i, entry in enumerate(as_list(pod_spec.get("resourceClaims"))):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        template, claim = entry.get(TEMPLATE_NAME), entry.get(CLAIM_NAME)
        if isinstance(template, str) and template:
            out.append(PodClaim(i, entry["name"], template, False))
        elif isinstance(claim, str) and claim:
            out.append(PodClaim(i, entry["name"], claim, True))
    return out


def listed_claims(container: dict) -> frozenset[str]:
    """The claims a container lists in ``resources.claims`` (it gets their devices)."""
    claims = as_list(as_dict(container.get("resources")).get("claims"))
    return frozenset(c["name"] for c in claims if isinstance(c, dict) and isinstance(c.get("name"), str))


def claim_spec(kind: str, obj: dict) -> dict:
    """A ResourceClaim's spec, or the spec of the claims a ResourceClaimTemplate makes."""
    spec = as_dict(obj.get("spec"))
    return as_dict(spec.get("spec")) if kind == "ResourceClaimTemplate" else spec


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _ask(body: dict) -> DeviceAsk | None:
    device_class = body.get("deviceClassName")
    if not isinstance(device_class, str) or not device_class:
        return None
    selectors = tuple(" ".join(str(as_dict(s.get("cel")).get("expression", "")).split())
                      for s in as_list(body.get("selectors")) if isinstance(s, dict))
    count = None if body.get("allocationMode") == ALL else _count(body.get("count"))
    return DeviceAsk(device_class, count, selectors)


def requests(spec: dict, status: dict | None = None) -> list[DeviceRequest]:
    """The requests of a claim spec (``{devices: {requests: […]}}``), with what an allocation gave each."""
    allocated: dict[str, int] = {}
    for result in as_list(as_dict(as_dict(as_dict(status).get("allocation")).get("devices")).get("results")):
        name = as_dict(result).get("request")
        if isinstance(name, str):
            main = name.split("/", 1)[0]
            allocated[main] = allocated.get(main, 0) + 1
    out = []
    for request in as_list(as_dict(spec.get("devices")).get("requests")):
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            continue
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if isinstance(exactly, dict):
            asks = [_ask(exactly)]
        elif isinstance(first, list):
            asks = [_ask(sub) for sub in first if isinstance(sub, dict)]
        else:  # v1beta1: the fields of ``exactly`` on the request
            asks = [_ask(request)]
        found = tuple(a for a in asks if a is not None)
        if found:
            out.append(DeviceRequest(request["name"], found, allocated.get(request["name"])))
    return out


def device_classes(spec: dict) -> list[str]:
    """Every DeviceClass a claim spec names, in order."""
    return list(dict.fromkeys(a.device_class for r in requests(spec) for a in r.asks))
