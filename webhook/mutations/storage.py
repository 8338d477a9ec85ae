"""Storage: datasets as read-only PVC mounts, the checkpoint class's volume and env, /dev/shm.

NCCL and PyTorch data loaders use /dev/shm; the container runtime's default is 64 MiB, which makes
multi-GPU jobs fail or crawl. A memory-backed emptyDir with a size limit fixes that (its usage
counts against the pod's memory limit, which rules/storage.py checks).
"""

from __future__ import annotations

import hashlib

from ..context import Context, field_path
from ..policy.models import Enforceable
from . import gpu_containers

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

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.volumes: list[tuple[dict, str]] = []
        self.lists: dict[tuple, list[tuple[object, str]]] = {}

    def volume(self, volume: dict, source: str) -> None:
        path = (*self.ctx.workload.pod_spec_path, "volumes")
        existing = self.ctx.patcher.get(path) or []
        if any(isinstance(v, dict) and v.get("name") == volume["name"] for v in existing):
            self.ctx._note(path, "storage", source)
        elif all(v["name"] != volume["name"] for v, _ in self.volumes):
            self.volumes.append((volume, source))

    def mount(self, container_path: tuple, mount: dict, source: str) -> bool:
        """Queue a volumeMount unless the path is taken; a different volume there is a conflict (False)."""
        path = (*container_path, "volumeMounts")
        for i, m in enumerate(self.ctx.patcher.get(path) or []):
            if not isinstance(m, dict) or m.get("mountPath") != mount["mountPath"]:
                continue
            if m.get("name") == mount["name"]:
                self.ctx._note((*path, i), "storage", source)
                return True
            return False
        self.lists.setdefault(path, []).append((mount, source))
        return True

    def env(self, container_path: tuple, name: str, value: str, source: str) -> None:
        path = (*container_path, "env")
        if any(isinstance(e, dict) and e.get("name") == name for e in self.ctx.patcher.get(path) or []):
            self.ctx._note(path, "storage", source)  # a user value for the same variable wins
        else:
            self.lists.setdefault(path, []).append(({"name": name, "value": value}, source))

    def flush(self) -> None:
        self.ctx.inject_extend((*self.ctx.workload.pod_spec_path, "volumes"), self.volumes, "storage")
        for path, items in self.lists.items():
            self.ctx.inject_extend(path, items, "storage")


def apply(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    containers = gpu_containers(ctx)
    if not containers:
        return
    batch = _Batch(ctx)
    for ds_name, ds in r.datasets:
        vol = volume_name("ta-dataset", ds_name)
        source = f"Dataset {ds_name}"
        batch.volume({"name": vol, "persistentVolumeClaim": {"claimName": ds.claimName, "readOnly": True}}, source)
        for ref in containers:
            mount = {"name": vol, "mountPath": ds.mountPath, "readOnly": True}
            if ds.subPath:
                mount["subPath"] = ds.subPath
            cpath = w.container_path(ref)
            if not batch.mount(cpath, mount, source):
                ctx.report("storage.mount-conflict", field_path((*cpath, "volumeMounts")),
                           f"container {ref.name} already mounts something at {ds.mountPath}, where dataset "
                           f"{ds_name} goes", "remove that mount or the dataset from trainadmit.io/datasets")
    if r.checkpoint is not None:
        ck_name, ck = r.checkpoint
        source = f"CheckpointClass {ck_name}"
        batch.volume({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": ck.claimName}}, source)
        for ref in containers:
            cpath = w.container_path(ref)
            if not batch.mount(cpath, {"name": CHECKPOINT_VOLUME, "mountPath": ck.mountPath}, source):
                ctx.report("storage.mount-conflict", field_path((*cpath, "volumeMounts")),
                           f"container {ref.name} already mounts something at {ck.mountPath}, where checkpoint "
                           f"class {ck_name} goes", "remove that mount or set trainadmit.io/checkpoint: none")
            for name, value in ck.env.items():
                batch.env(cpath, name, value, f"{source}: spec.env.{name}")
    _shm(ctx, containers, batch)
    batch.flush()


def _shm(ctx: Context, containers: list, batch: _Batch) -> None:
    w = ctx.workload
    size = ctx.policy.platform.shm.sizeLimit
    source = "Platform.spec.shm.sizeLimit"
    volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    for ref in containers:
        cpath = w.container_path(ref)
        mounts = ctx.patcher.get((*cpath, "volumeMounts")) or []
        theirs = next((m for m in mounts if isinstance(m, dict) and m.get("mountPath") == SHM_PATH
                       and m.get("name") != SHM_VOLUME), None)
        if theirs is not None:
            ctx.conflict(Enforceable.shm, (*cpath, "volumeMounts"), theirs.get("name"), SHM_VOLUME)
            continue
        batch.volume(volume, source)
        batch.mount(cpath, {"name": SHM_VOLUME, "mountPath": SHM_PATH}, source)
