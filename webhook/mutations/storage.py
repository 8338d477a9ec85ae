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


def _ensure_volume(ctx: Context, volume: dict, concern: str, source: str) -> None:
    path = (*ctx.workload.pod_spec_path, "volumes")
    volumes = ctx.patcher.get(path) or []
    if any(isinstance(v, dict) and v.get("name") == volume["name"] for v in volumes):
        ctx._note(path, concern, source)
    else:
        ctx.inject_append(path, volume, concern, source)


def _ensure_mount(ctx: Context, container_path: tuple, mount: dict, concern: str, source: str) -> bool:
    """Add a volumeMount unless the path is taken; a different volume there is a conflict (False)."""
    path = (*container_path, "volumeMounts")
    mounts = ctx.patcher.get(path) or []
    for i, m in enumerate(mounts):
        if not isinstance(m, dict) or m.get("mountPath") != mount["mountPath"]:
            continue
        if m.get("name") == mount["name"]:
            ctx._note((*path, i), concern, source)
            return True
        return False
    ctx.inject_append(path, mount, concern, source)
    return True


def _ensure_env(ctx: Context, container_path: tuple, name: str, value: str, concern: str, source: str) -> None:
    path = (*container_path, "env")
    env = ctx.patcher.get(path) or []
    if any(isinstance(e, dict) and e.get("name") == name for e in env):
        ctx._note(path, concern, source)  # a user value for the same variable wins
    else:
        ctx.inject_append(path, {"name": name, "value": value}, concern, source)


def apply(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    containers = gpu_containers(ctx)
    if not containers:
        return
    for ds_name, ds in r.datasets:
        vol = volume_name("ta-dataset", ds_name)
        source = f"Dataset {ds_name}"
        _ensure_volume(ctx, {"name": vol, "persistentVolumeClaim": {"claimName": ds.claimName, "readOnly": True}},
                       "storage", source)
        for ref in containers:
            mount = {"name": vol, "mountPath": ds.mountPath, "readOnly": True}
            if ds.subPath:
                mount["subPath"] = ds.subPath
            cpath = w.container_path(ref)
            if not _ensure_mount(ctx, cpath, mount, "storage", source):
                ctx.report("storage.mount-conflict", field_path((*cpath, "volumeMounts")),
                           f"container {ref.name} already mounts something at {ds.mountPath}, where dataset "
                           f"{ds_name} goes", "remove that mount or the dataset from trainadmit.io/datasets")
    if r.checkpoint is not None:
        ck_name, ck = r.checkpoint
        source = f"CheckpointClass {ck_name}"
        _ensure_volume(ctx, {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": ck.claimName}},
                       "storage", source)
        for ref in containers:
            cpath = w.container_path(ref)
            if not _ensure_mount(ctx, cpath, {"name": CHECKPOINT_VOLUME, "mountPath": ck.mountPath},
                                 "storage", source):
                ctx.report("storage.mount-conflict", field_path((*cpath, "volumeMounts")),
                           f"container {ref.name} already mounts something at {ck.mountPath}, where checkpoint "
                           f"class {ck_name} goes", "remove that mount or set trainadmit.io/checkpoint: none")
            for name, value in ck.env.items():
                _ensure_env(ctx, cpath, name, value, "storage", f"{source}: spec.env.{name}")
    _shm(ctx, containers)


def _shm(ctx: Context, containers: list) -> None:
    w = ctx.workload
    size = ctx.policy.platform.shm.sizeLimit
    source = "Platform.spec.shm.sizeLimit"
    volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    added_volume = False
    for ref in containers:
        cpath = w.container_path(ref)
        mounts = ctx.patcher.get((*cpath, "volumeMounts")) or []
        theirs = next((m for m in mounts if isinstance(m, dict) and m.get("mountPath") == SHM_PATH
                       and m.get("name") != SHM_VOLUME), None)
        if theirs is not None:
            ctx.conflict(Enforceable.shm, (*cpath, "volumeMounts"), theirs.get("name"), SHM_VOLUME)
            continue
        if not added_volume:
            _ensure_volume(ctx, volume, "storage", source)
            added_volume = True
        _ensure_mount(ctx, cpath, {"name": SHM_VOLUME, "mountPath": SHM_PATH}, "storage", source)
