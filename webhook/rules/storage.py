"""Storage: /dev/shm usage counts against the container's memory limit; warn when it cannot fit."""

from __future__ import annotations

from ..context import Context, field_path
from ..quantity import QuantityError, format_bytes, parse_quantity
from ..workloads import Workload, as_dict


def check(ctx: Context, view: Workload) -> None:
    volumes = {v.get("name"): v for v in view.pod_spec.get("volumes") or []
               if isinstance(v, dict) and isinstance(v.get("name"), str)}
    for ref in view.containers(include_init=False):
        memory = as_dict(as_dict(ref.body.get("resources")).get("limits")).get("memory")
        if memory is None:
            continue
        for mount in ref.body.get("volumeMounts") or []:
            if not isinstance(mount, dict) or mount.get("mountPath") != "/dev/shm":
                continue
            empty = as_dict(as_dict(volumes.get(mount.get("name"))).get("emptyDir"))
            if empty.get("medium") != "Memory" or empty.get("sizeLimit") is None:
                continue
            try:
                shm, limit = parse_quantity(empty["sizeLimit"]), parse_quantity(memory)
            except QuantityError:
                continue
            if shm > limit:
                ctx.report("storage.shm-exceeds-memory", field_path((*view.container_path(ref), "resources")),
                           f"/dev/shm may grow to {format_bytes(shm)} but container {ref.name} has a memory limit of "
                           f"{memory}; shared memory counts against it",
                           f"raise the memory limit above {format_bytes(shm)}")
