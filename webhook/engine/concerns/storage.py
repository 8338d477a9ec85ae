"""Storage: datasets as read-only PVC mounts, the checkpoint class's volume and env, /dev/shm.

NCCL and PyTorch data loaders use /dev/shm; the container runtime's default is 64 MiB, which makes
multi-GPU jobs fail or crawl. A memory-backed emptyDir with a size limit fixes that; its usage counts
against the container's memory limit, so the one trainadmit injects is sized to fit: the policy's size,
or half the smallest memory limit of the containers that mount it when that is less (the process keeps
the other half), and none at all when that would not exceed the runtime's default (the decision says
so). A /dev/shm the user's own volume makes larger than the memory limit is warned about.

Never a second mount where the user already mounts something: in the same container, or where the kind
merges mounts from elsewhere (a TrainJob's other runtime patches, merged by ``mountPath``).
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from functools import lru_cache

from ...grammars.quantity import QuantityError, format_bytes, parse_quantity
from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..paths import as_dict
from ..reads import Reads
from ..rule import rule
from ..workloads import MountsElsewhere, PodTemplate, Workload, capable
from .enforced import conflict

MOUNT_CONFLICT = rule("storage.mount-conflict", Action.deny,
                      "a user mount where a dataset or the checkpoint volume goes")
SHM_EXCEEDS_MEMORY = rule("storage.shm-exceeds-memory", Action.warn,
                          "/dev/shm may grow beyond the container's memory limit")

SHM_VOLUME = "ta-dshm"
SHM_PATH = "/dev/shm"
CHECKPOINT_VOLUME = "ta-checkpoint"
RUNTIME_DEFAULT_SHM = 64 * 2**20  # the container runtime's /dev/shm without a volume (64 MiB)
MIB = 2**20


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

    def elsewhere(self, container: str, mount_path: str) -> str | None:
        """Where the kind mounts ``mount_path`` into ``container`` from outside this template, if it does."""
        adapter = self.ctx.workload.adapter
        if not capable(adapter, MountsElsewhere):
            return None
        return adapter.mounts_elsewhere(self.ctx.workload.obj, self.template, container).get(mount_path)

    def mount(self, container_path: tuple, mount: dict, source: Source, container: str = "") -> bool:
        """Queue a volumeMount unless the path is taken; a different volume there is a conflict (False)."""
        path = (*container_path, "volumeMounts")
        if self.elsewhere(container, mount["mountPath"]) is not None:
            return False
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
            if not batch.mount(cpath, mount, Source("Dataset", ds_name, ("spec", "mountPath")), ref.name):
                ctx.report(MOUNT_CONFLICT, batch.elsewhere(ref.name, ds.mountPath) or (*cpath, "volumeMounts"),
                           f"container {ref.name} already mounts something at {ds.mountPath}, where dataset "
                           f"{ds_name} goes", f"remove that mount or {ds_name} from {ctx.policy.keys.datasets}")
    if r.checkpoint is not None:
        ck_name, ck = r.checkpoint
        batch.volume({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": ck.claimName}},
                     Source("CheckpointClass", ck_name, ("spec", "claimName")))
        for ref in containers:
            cpath = w.container_path(ref)
            mount = {"name": CHECKPOINT_VOLUME, "mountPath": ck.mountPath}
            if not batch.mount(cpath, mount, Source("CheckpointClass", ck_name, ("spec", "mountPath")), ref.name):
                ctx.report(MOUNT_CONFLICT, batch.elsewhere(ref.name, ck.mountPath) or (*cpath, "volumeMounts"),
                           f"container {ref.name} already mounts something at {ck.mountPath}, where checkpoint "
                           f"class {ck_name} goes", f"remove that mount or set {ctx.policy.keys.checkpoint}: none")
            for name, value in ck.env.items():
                batch.env(cpath, name, value, Source("CheckpointClass", ck_name, ("spec", "env", name)))
    _shm(ctx, containers, batch)
    batch.flush()


def _shm(ctx: Context, containers: list, batch: _Batch) -> None:
    w = batch.template
    mounting = []
    for ref in containers:
        cpath = w.container_path(ref)
        mounts = ctx.patcher.get((*cpath, "volumeMounts")) or []
        theirs = next((m for m in mounts if isinstance(m, dict) and m.get("mountPath") == SHM_PATH
                       and m.get("name") != SHM_VOLUME), None)
        if theirs is not None:
            conflict(ctx, Enforceable.shm, (*cpath, "volumeMounts"), theirs.get("name"), SHM_VOLUME)
            continue
        where = batch.elsewhere(ref.name, SHM_PATH)
        if where is not None:
            conflict(ctx, Enforceable.shm, (*cpath, "volumeMounts"), where, SHM_VOLUME)
            ctx.note(f"{w.label}: container {ref.name} keeps its own /dev/shm ({where}); trainadmit added none")
            continue
        mounting.append(ref)
    if not mounting:
        return
    size, source, why = _shm_size(ctx, w, mounting)
    if size is None:
        ctx.note(f"{w.label}: no /dev/shm added: {why}")
        return
    batch.volume({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}, source)
    for ref in mounting:
        batch.mount(w.container_path(ref), {"name": SHM_VOLUME, "mountPath": SHM_PATH}, source, ref.name)


def _memory_limit(ref) -> Decimal | None:
    memory = as_dict(as_dict(ref.body.get("resources")).get("limits")).get("memory")
    try:
        return parse_quantity(memory) if memory is not None else None
    except QuantityError:
        return None


@lru_cache(maxsize=1024)
def _half(limit: Decimal) -> Decimal:
    """Half of a memory limit, rounded down to whole MiB: a corpus repeats a few limits ("160Gi") in every Job, and
    Decimal division is dear. Every use of the answer is numeric (compared, or whole units in ``format_bytes``)."""
    return (limit / 2 // MIB) * MIB


def _shm_size(ctx: Context, template: PodTemplate, containers: list) -> tuple[str | None, Source, str]:
    """The /dev/shm size for ``containers``: the policy's, or half the smallest memory limit among them when
    that is less (rounded down to whole MiB); None (and why) when that is not above the runtime's default."""
    size = ctx.policy.platform.shm.sizeLimit
    source = ctx.platform_source("spec", "shm", "sizeLimit")
    limits = [(limit, ref) for ref in containers if (limit := _memory_limit(ref)) is not None]
    if not limits:
        return size, source, ""
    limit, ref = limits[0] if len(limits) == 1 else min(limits, key=lambda item: item[0])
    half = _half(limit)
    if half >= parse_quantity(size):
        return size, source, ""
    memory = as_dict(as_dict(ref.body.get("resources")).get("limits")).get("memory")
    if half <= RUNTIME_DEFAULT_SHM:
        return None, source, (f"half of container {ref.name}'s memory limit {memory} is not more than the container "
                              f"runtime's own {format_bytes(Decimal(RUNTIME_DEFAULT_SHM))}")
    fitted = format_bytes(half)
    note = (f"{fitted}: half of container {ref.name}'s memory limit {memory}; Platform.spec.shm.sizeLimit {size} "
            "would not fit")
    return fitted, ctx.platform_source("spec", "shm", "sizeLimit", note=note), ""


def validate(ctx: Context, view: Workload) -> None:
    for template in view.templates:
        _shm_fits(ctx, template)


def _shm_fits(ctx: Context, view: PodTemplate) -> None:
    """A /dev/shm the user's own volume lets grow beyond the container's memory limit (trainadmit's is sized to
    fit, so it is never reported)."""
    volumes = {v.get("name"): v for v in view.pod_spec.get("volumes") or []
               if isinstance(v, dict) and isinstance(v.get("name"), str) and v.get("name") != SHM_VOLUME}
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
                at = (*view.container_path(ref), "resources", "limits", "memory")
                ctx.report(SHM_EXCEEDS_MEMORY, at,
                           f"/dev/shm may grow to {format_bytes(shm)} but container {ref.name} has a memory limit of "
                           f"{memory}; shared memory counts against it",
                           f"set {ctx.user_field(at)} above {format_bytes(shm)}, or the sizeLimit of volume "
                           f"{mount.get('name')} below {memory}")


# appends to the env lists nccl appends to: after it, so that every order gives the containers one env order
CONCERN = Concern("storage", rules=(MOUNT_CONFLICT, SHM_EXCEEDS_MEMORY), mutate=mutate, validate=validate,
                  reads=Reads(pod=("volumes",), container=("volumeMounts", "env", "resources")), after=("nccl",))
