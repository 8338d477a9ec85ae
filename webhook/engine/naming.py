"""A ``generateName`` workload named during admission, as the apiserver would name it.

The apiserver gives a ``generateName`` object its name only after every mutating webhook ran, yet a gang's
PodGroup, its Pods' group key, the pod affinity that selects the workers by their workload's name and the
placement gate's gang are all named after the workload. So the mutating webhook names it first, in the same
patch (``metadata.name``), exactly as the apiserver would: ``generateName`` cut to 58 characters plus 5
characters of the apiserver's alphabet (``k8s.io/apiserver/pkg/storage/names``, ``utilrand.String``). The
apiserver keeps a name a webhook set (it generates one only for an object that has none). The one difference:
it retries its own generated names on a conflict, not one a webhook set, so a create whose drawn name is
taken fails with 409 AlreadyExists (``kubectl create`` again draws another); with 27^5 = 14.3 million names
per prefix, the chance is the number of same-prefix objects in the namespace over 14.3 million.

Invariants: an object that has a name is never renamed (a reinvoked ``/mutate`` sees the name of the first
pass and writes nothing); only a CREATE whose decision derives something from the name is named (a gang of
ours, or colocation by its workers); the suffix comes from the request (``Request.generated_name``: the server
draws it per request), so the engine stays pure; without one (``trainadmit check``, ``policy test``) the name
is the fixed ``<generateName>xxxxx`` (``PLACEHOLDER``), so a prediction is deterministic.
"""

from __future__ import annotations

from .plan import NoGang, Plan
from .request import Request
from .workloads import Workload

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's (no vowels, no 0, 1, 3: no words, no look-alikes)
SUFFIX_LENGTH = 5
MAX_PREFIX = 63 - SUFFIX_LENGTH  # the apiserver's maxGeneratedNameLength
PLACEHOLDER = "x" * SUFFIX_LENGTH  # check's suffix: a prediction names the object <generateName>xxxxx


def generated(prefix: str, suffix: str = PLACEHOLDER) -> str:
    """The name the apiserver would generate from ``prefix`` with ``suffix``."""
    return prefix[:MAX_PREFIX] + suffix


def needs_name(workload: Workload, plan: Plan, request: Request) -> bool:
    """Whether this decision names the workload: a CREATE of an object with only ``generateName`` whose gang
    (of any backend) or colocation is derived from its name."""
    if request.operation != "CREATE" or workload.name is not None or workload.generate_name is None:
        return False
    gang = plan.gang
    return gang.why_not is NoGang.name_required or gang.backend is not None or plan.colocation.applies


def name_for(workload: Workload, plan: Plan, request: Request) -> str | None:
    """The name this decision gives the workload, or None when it keeps the object's own (or none)."""
    if not needs_name(workload, plan, request):
        return None
    return request.generated_name or generated(workload.generate_name or "")


def named(obj: dict, name: str) -> dict:
    """``obj`` with ``metadata.name`` (a shallow copy: the received object is never changed)."""
    return {**obj, "metadata": {**(obj.get("metadata") or {}), "name": name}}


__all__ = ["ALPHABET", "MAX_PREFIX", "PLACEHOLDER", "SUFFIX_LENGTH", "generated", "name_for", "named", "needs_name"]
