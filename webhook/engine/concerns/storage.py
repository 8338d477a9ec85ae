"""Storage: datasets as read-only PVC mounts, the checkpoint class's volume and env, /dev/shm.

NCCL and PyTorch data loaders use /dev/shm; the container runtime's default is 64 MiB, which makes
multi-GPU jobs fail or crawl. A memory-backed emptyDir with a size limit fixes that; its usage
counts against the container's memory limit, so a limit below the /dev/shm size is warned about.
"""

from __future__ import annotations

import hashlib

from ...grammars.quantity import QuantityError, format_bytes, parse_quantity
from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..paths import as_dict, field_path
from ..reads import Reads
from ..rule import rule
from ..workloads import PodTemplate, Workload
from .enforced import conflict

MOUNT_CONFLICT = rule("storage.mount-conflict", Action.deny,
                      "a user mount where a dataset or the checkpoint volume goes")
SHM_EXCEEDS_MEMORY = rule("storage.shm-exceeds-memory", Action.warn,
                          "/dev/shm may grow beyond the container's memory limit")

SHM_VOLUME = "ta-dshm"
SHM_PATH = "/dev/shm"
CHECKPOINT_VOLUME = "ta-checkpoint"


def volume_name(prefix: str, name: str) -> str:
    """A DNS-label volume name; long names are shortened with a stable hash."""
    full = f"{prefix}-{name}".lower().replace(".", "-")
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[:54]}-{digest}"


class _Batch:
    """Volumes, mounts and env entries to add, collected first and written with few patch operations."""

    def __init__(self, ctx: Context, template: PodTemplate):
        self.ctx = ctx
        self.template = template
        self.volumes: list[tuple[object, Source]] = []
        self.lists: dict[tuple, list[tuple[object, Source]]] = {}

    def volume(self, volume: dict, source: Source) -> None:
        path = (*self.template.spec_path, "volumes")
        existing = self.ctx.patcher.get(path) or []
        if any(isinstance(v, dict) and v.get("name") == volume["name"] for v in existing):
            self.ctx.satisfied("storage")
        elif all(v["name"] != volume["name"] for v, _ in self.volumes):  # type: ignore[index]
            self.volumes.append((volume, source))

    def mount(self, container_path: tuple, mount: dict, source: Source) -> bool:
        """Queue a volumeMount unless the path is taken; a different volume there is a conflict (False)."""
        path = (*container_path, "volumeMounts")
        for m in self.ctx.patcher.get(path) or []:
            if not isinstance(m, dict) or m.get("mountPath") != mount["mountPath"]:
                continue
            if m.get("name") == mount["name"]:
                self.ctx.satisfied("storage")
                return True
            return False
        self.lists.setdefault(path, []).append((mount, source))
        return True

    def env(self, container_path: tuple, name: str, value: str, source: Source) -> None:
        path = (*container_path, "env")
        if any(isinstance(e, dict) and e.get("name") == name for e in self.ctx.patcher.get(path) or []):
            self.ctx.satisfied("storage")  # a user value for the same variable wins
        else:
            self.lists.setdefault(path, []).append(({"name": name, "value": value}, source))

    def flush(self) -> None:
        self.ctx.inject_extend((*self.template.spec_path, "volumes"), self.volumes, "storage")
        for path, items in self.lists.items():
            self.ctx.inject_extend(path, items, "storage")


def mutate(ctx: Context) -> None:
    for template in ctx.pool_templates:
        _mount(ctx, template)


def _mount(ctx: Context, w: PodTemplate) -> None:
    r = ctx.resolved
    containers = ctx.gpu_containers(w)
    if not containers:
        return
    batch = _Batch(ctx, w)
    for ds_name, ds in r.datasets:
        vol = volume_name("ta-dataset", ds_name)
        source = Source("Dataset", ds_name, ("spec", "claimName"))
        batch.volume({"name": vol, "persistentVolumeClaim": {"claimName": ds.claimName, "readOnly": True}}, source)
        for ref in containers:
            mount = {"name": vol, "mountPath": ds.mountPath, "readOnly": True}
            if ds.subPath:
                mount["subPath"] = ds.subPath
            cpath = w.container_path(ref)
            if not batch.mount(cpath, mount, Source("Dataset", ds_name, ("spec", "mountPath"))):
                ctx.report(MOUNT_CONFLICT, field_path((*cpath, "volumeMounts")),
                           f"container {ref.name} already mounts something at {ds.mountPath}, where dataset "
                           f"{ds_name} goes", "remove that mount or the dataset from trainadmit.io/datasets")
    if r.checkpoint is not None:
        ck_name, ck = r.checkpoint
        batch.volume({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": ck.claimName}},
                     Source("CheckpointClass", ck_name, ("spec", "claimName")))
        for ref in containers:
            cpath = w.container_path(ref)
            mount = {"name": CHECKPOINT_VOLUME, "mountPath": ck.mountPath}
            if not batch.mount(cpath, mount, Source("CheckpointClass", ck_name, ("spec", "mountPath"))):
                ctx.report(MOUNT_CONFLICT, field_path((*cpath, "volumeMounts")),
                           f"container {ref.name} already mounts something at {ck.mountPath}, where checkpoint "
                           f"class {ck_name} goes", "remove that mount or set trainadmit.io/checkpoint: none")
            for name, value in ck.env.items():
                batch.env(cpath, name, value, Source("CheckpointClass", ck_name, ("spec", "env", name)))
    _shm(ctx, containers, batch)
    batch.flush()


def _shm(ctx: Context, containers: list, batch: _Batch) -> None:
    w = batch.template
    size = ctx.policy.platform.shm.sizeLimit
    source = ctx.platform_source("spec", "shm", "sizeLimit")
    volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    for ref in containers:
        cpath = w.container_path(ref)
        mounts = ctx.patcher.get((*cpath, "volumeMounts")) or []
        theirs = next((m for m in mounts if isinstance(m, dict) and m.get("mountPath") == SHM_PATH
                       and m.get("name") != SHM_VOLUME), None)
        if theirs is not None:
            conflict(ctx, Enforceable.shm, (*cpath, "volumeMounts"), theirs.get("name"), SHM_VOLUME)
            continue
        batch.volume(volume, source)
        batch.mount(cpath, {"name": SHM_VOLUME, "mountPath": SHM_PATH}, source)


def validate(ctx: Context, view: Workload) -> None:
    for template in view.templates:
        _shm_fits(ctx, template)


def _shm_fits(ctx: Context, view: PodTemplate) -> None:
    volumes = {v.get("name"): v for v in view.pod_spec.get("volumes") or []
               if isinstance(v, dict) and isinstance(v.get("name"), str)}
    for ref in view.main_containers:
        memory = as_dict(as_dict(ref.body.get("resources")).get("limits")).get("memory")
        if memory is None:
            continue
        for mount in ref.body.get("volumeMounts") or []:
            if not isinstance(mount, dict) or mount.get("mountPath") != SHM_PATH:
                continue
            empty = as_dict(as_dict(volumes.get(mount.get("name"))).get("emptyDir"))
            if empty.get("medium") != "Memory" or empty.get("sizeLimit") is None:
                continue
            try:
                shm, limit = parse_quantity(empty["sizeLimit"]), parse_quantity(memory)
            except QuantityError:
                continue
            if shm > limit:
                ctx.report(SHM_EXCEEDS_MEMORY, field_path((*view.container_path(ref), "resources")),
                           f"/dev/shm may grow to {format_bytes(shm)} but container {ref.name} has a memory limit of "
                           f"{memory}; shared memory counts against it",
                           f"raise the memory limit above {format_bytes(shm)}")


# appends to the env lists nccl appends to: after it, so that every order gives the containers one env order
CONCERN = Concern("storage", rules=(MOUNT_CONFLICT, SHM_EXCEEDS_MEMORY), mutate=mutate, validate=validate,
                  reads=Reads(pod=("volumes",), container=("volumeMounts", "env", "resources")), after=("nccl",))
