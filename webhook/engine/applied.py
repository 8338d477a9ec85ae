"""The provenance annotation (``trainadmit.io/applied``): what trainadmit applied when it decided a workload.

Written on the object and its pod templates when the workload is created (``concerns.final_state``), read
back where a later decision must know what the first one did: ``/validate`` (did the injections survive?)
and an UPDATE that resizes the workload (which gang did it get?).
"""

from __future__ import annotations

import json
from functools import lru_cache

from ..policy import PolicySet
from .paths import get_path


@lru_cache(maxsize=1024)
def applied_value(generation: str, pool: str | None, gang: str, topology: str | None, injected: tuple,
                  notes: tuple = ()) -> str:
    """The provenance annotation (with what the decision left to the user or another component); a handful of
    distinct values per policy generation, so cached."""
    value = {"generation": generation, "pool": pool, "gang": gang, "topology": topology, "injected": list(injected)}
    if notes:
        value["notes"] = list(notes)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def read_applied(obj: dict, policy: PolicySet) -> dict | None:
    """The annotation's value, or None when the object carries none (or one that is not a JSON object)."""
    raw = get_path(obj, ("metadata", "annotations", policy.keys.applied))
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
