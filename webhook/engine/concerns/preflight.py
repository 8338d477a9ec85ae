"""Preflight: an init container that checks, on the node, what this decision expects the node to give.

"All Pods Running" does not mean a job will perform: a Pod can hold its GPUs while an HCA port is
down and NCCL silently falls back to TCP, or see a checkpoint directory the other workers do not. A
pool with ``spec.preflight.enabled`` gets, in every GPU pod template, an init container running
`trainadmit preflight` from the webhook's own image. Its arguments are what the decision injected
or kept: the GPUs of the Pod, the pool's RDMA link layer, the NCCL_IB_HCA / NCCL_SOCKET_IFNAME the
training container will read, the /dev/shm it mounts, the dataset and checkpoint mounts, and the gang
it must find on the shared checkpoint volume. It asks for the same GPUs and RDMA devices as the Pod's
training containers (the kubelet hands an init container's devices on to them, so the Pod asks for
no more) and mounts the same volumes, so it sees the node as the training process will. It runs last
among the init containers, right before training, and fails the Pod with one line naming the node
and what is wrong; the status reconciler gathers those lines onto the workload.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...grammars.preflight import (
    COMMAND,
    CONTAINER_NAME,
    ENV_NODE,
    ENV_POD,
    ENV_RUN,
    GPU_VENDORS,
    TERMINATION_LOG,
    Check,
    Expectations,
)
from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..dra import listed_claims
from ..paths import Path, as_dict, as_list, field_path, get_path
from ..reads import ALL, Reads
from ..rule import rule
from ..workloads import GroupedGangs, PatchedTemplates, PodTemplate, RunLabelled, Workload, capable
from .storage import SHM_PATH

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ...policy.models import PoolSpec

RESERVED_NAME = rule("preflight.reserved-name", Action.deny,
                     f"an init container named {CONTAINER_NAME} that is not the platform's preflight")
UNAVAILABLE = rule("preflight.unavailable", Action.note,
                   "the pool has the preflight on, but this kind's templates cannot take an init container (a note: "
                   "the runtime's)")

# what each skipped check removes from the expectations
_SKIP = {
    Check.gpus: {"gpus": None}, Check.rdma: {"rdma_link_layer": None}, Check.ports: {"active_ports": False},
    Check.nccl: {"nccl_ib_hca": None, "nccl_socket_ifname": None}, Check.shm: {"shm_size": None},
    Check.datasets: {"datasets": ()}, Check.checkpoint: {"checkpoint": None},
    Check.gang: {"gang_size": None, "gang_id": None},
}


def mutate(ctx: Context) -> None:
    pool = ctx.resolved.pool
    if pool is None or not pool.preflight.enabled:
        return
    templates = [t for t in ctx.pool_templates if ctx.gpu_containers(t)]
    workload = ctx.workload
    adapter = workload.adapter
    if templates and capable(adapter, PatchedTemplates) and "initContainers" in adapter.cannot_carry:
        runtime = "spec.runtimeRef" if get_path(workload.obj, ("spec", "runtimeRef")) is not None else "spec"
        ctx.report(UNAVAILABLE, runtime,
                   f"this {workload.kind} starts on nodes nobody checked: a {workload.kind} cannot add pool "
                   f"{ctx.resolved.pool_name}'s preflight init container",
                   f"put {CONTAINER_NAME} in the runtime {runtime} names (its Pods come from it)")
        return
    # the markers each worker waits for: its Pods that the operator starts together (an elastic job's
    # minimum, not its launcher, which runs no preflight)
    gang_size = min(sum(t.pods for t in templates), ctx.resolved.gang_size)
    for template in templates:
        _inject(ctx, pool, template, gang_size)


def _find(template_spec: dict) -> tuple[int, dict] | None:
    for i, c in enumerate(as_list(template_spec.get("initContainers"))):
        if isinstance(c, dict) and c.get("name") == CONTAINER_NAME:
            return i, c
    return None


def _inject(ctx: Context, pool: PoolSpec, template: PodTemplate, gang_size: int) -> None:
    source = ctx.pool_source("spec", "preflight")
    # the status reconciler finds the Pods by this label
    ctx.inject((*template.meta_path, "labels", ctx.policy.keys.preflight), "true", "preflight", source)
    spec_now = as_dict(ctx.patcher.get(template.spec_path))
    if _find(spec_now) is not None:
        ctx.satisfied("preflight")  # ours from an earlier pass (defaulted by the apiserver), or validate's problem
        return
    trainer = ctx.gpu_containers(template)[0]
    trainer_now = as_dict(ctx.patcher.get(template.container_path(trainer)))
    expect, mounts = _expectations(ctx, pool, template, spec_now, trainer_now, gang_size)
    container = _container(ctx, pool, trainer_now, expect, mounts, not ctx.plan.own_network(template))
    ctx.inject_extend((*template.spec_path, "initContainers"), [(container, source)], "preflight")


def _env_values(container: dict, names: tuple[str, ...]) -> dict[str, str | None]:
    """For each of ``names``, the value of the container's first entry of that name without ``valueFrom`` (None
    when that is not a string, or no entry is), in one pass over the env list (a trainer has dozens of entries)."""
    found: dict[str, str | None] = {}
    for entry in as_list(container.get("env")):
        if isinstance(entry, dict):
            name = entry.get("name")
            if name in names and name not in found and "valueFrom" not in entry:
                value = entry.get("value")
                found[name] = value if isinstance(value, str) else None
                if len(found) == len(names):
                    break
    return {name: found.get(name) for name in names}


def _mount_at(container: dict, path: str) -> dict | None:
    return next((m for m in as_list(container.get("volumeMounts"))
                 if isinstance(m, dict) and m.get("mountPath") == path and isinstance(m.get("name"), str)), None)


def _shm_size(spec: dict, mount: dict | None) -> str | None:
    """The sizeLimit of the memory-backed volume the training container has at /dev/shm, if any."""
    if mount is None:
        return None
    volume = next((v for v in as_list(spec.get("volumes")) if isinstance(v, dict) and v.get("name") == mount["name"]),
                  None)
    empty = as_dict(as_dict(volume).get("emptyDir"))
    size = empty.get("sizeLimit")
    return str(size) if empty.get("medium") == "Memory" and size is not None else None


def _expectations(ctx: Context, pool: PoolSpec, template: PodTemplate, spec: dict, trainer: dict,
                  gang_size: int) -> tuple[Expectations, list[dict]]:
    """What the preflight of this template checks, from what the training container ended up with,
    and the mounts it needs for that."""
    r, workload = ctx.resolved, ctx.workload
    gpus = next((n for t, n in r.gpu_templates if t.root == template.root), None)
    # DRA GPUs are the pool's: the device nodes of the pool's GPU resource's vendor
    vendor = GPU_VENDORS.get(r.gpu_resource or (r.pool.gpu.resource if r.pool is not None and r.gpu_classes else ""))
    mounts: list[dict] = []
    datasets = []
    for _, ds in r.datasets:
        mount = _mount_at(trainer, ds.mountPath)
        if mount is not None:
            datasets.append(ds.mountPath)
            mounts.append(mount)
    checkpoint = None
    if r.checkpoint is not None:
        mount = _mount_at(trainer, r.checkpoint[1].mountPath)
        if mount is not None:
            checkpoint = r.checkpoint[1].mountPath
            mounts.append(mount)
    shm_mount = _mount_at(trainer, SHM_PATH)
    shm = _shm_size(spec, shm_mount)
    if shm is not None:
        mounts.append(shm_mount)  # type: ignore[arg-type]
    # the pool's NICs, unless the template brought its own (then their link layer is not the pool's to check)
    rdma = pool.rdma is not None and not ctx.plan.own_network(template)
    gang_id = None
    run_label = workload.adapter.run_label if capable(workload.adapter, RunLabelled) else None
    if r.gang and gang_size > 1 and not capable(workload.adapter, GroupedGangs):
        # a generateName workload's gang is told apart by its run label (a Job's controller uid)
        name = workload.name or (workload.generate_name if run_label else None)
        gang_id = f"{ctx.namespace}/{name}" if name else None
    env = _env_values(trainer, ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"))
    expect = Expectations(
        gpus=gpus if vendor else None, gpu_vendor=vendor or "nvidia",
        rdma_link_layer=pool.rdma.linkLayer.value if rdma else None, active_ports=rdma,
        nccl_ib_hca=env["NCCL_IB_HCA"], nccl_socket_ifname=env["NCCL_SOCKET_IFNAME"],
        shm_size=shm, datasets=tuple(datasets), checkpoint=checkpoint,
        gang_size=gang_size if gang_id else None, gang_id=gang_id, timeout_seconds=pool.preflight.timeoutSeconds)
    for check in pool.preflight.skip:
        expect = dataclasses.replace(expect, **_SKIP[check])
    kept = {m["mountPath"] for m in mounts if _still_needed(expect, m["mountPath"])}
    return expect, [m for m in mounts if m["mountPath"] in kept]


def _still_needed(expect: Expectations, path: str) -> bool:
    return path in expect.datasets or path == expect.checkpoint or (path == SHM_PATH and expect.shm_size is not None)


def _container(ctx: Context, pool: PoolSpec, trainer: dict, expect: Expectations, mounts: list[dict],
               pool_nics: bool) -> dict:
    pf, r = pool.preflight, ctx.resolved
    devices: dict[str, object] = {}
    if expect.gpus is not None and r.gpu_resource:
        devices[r.gpu_resource] = expect.gpus
    if pool.rdma is not None and pool_nics:
        devices.update(pool.rdma.resources)
    env = [_field_env(ENV_NODE, "spec.nodeName"), _field_env(ENV_POD, "metadata.name")]
    adapter = ctx.workload.adapter
    if expect.gang_id is not None and capable(adapter, RunLabelled):
        env.append(_field_env(ENV_RUN, f"metadata.labels['{adapter.run_label}']"))
    security: dict = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "capabilities": {"drop": ["ALL"]}}
    theirs = as_dict(trainer.get("securityContext"))
    for key in ("runAsUser", "runAsGroup"):  # the checkpoint is written as the trainer writes it
        if isinstance(theirs.get(key), int) and not isinstance(theirs.get(key), bool):
            security[key] = theirs[key]
    claims = listed_claims(trainer)
    container = {
        "name": CONTAINER_NAME,
        "image": pf.image,
        "imagePullPolicy": pf.imagePullPolicy,
        "args": [COMMAND, *expect.to_args()],
        "env": env,
        "resources": {"limits": {**pf.resources.limits, **devices}, "requests": {**pf.resources.requests, **devices},
                      # the DRA devices the trainer gets (GPUs, the pool's NICs): a claim's devices are shared by the
                      # containers that list it
                      **({"claims": [{"name": n} for n in sorted(claims)]} if claims else {})},
        "securityContext": security,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",  # killed before writing: the log's last line
    }
    if mounts:
        container["volumeMounts"] = [dict(m) for m in mounts]
    return container


def _field_env(name: str, field: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field}}}


def validate(ctx: Context, view: Workload) -> None:
    pool = ctx.resolved.pool
    if pool is None or not pool.preflight.enabled:
        return
    for template in ctx.pool_templates_in(view):
        found = _find(template.pod_spec)
        if found is None:
            continue
        index, container = found
        args = as_list(container.get("args"))
        if container.get("image") != pool.preflight.image or args[:1] != [COMMAND]:
            path: Path = (*template.spec_path, "initContainers", index)
            ctx.report(RESERVED_NAME, field_path((*path, "name")),
                       f"init container {CONTAINER_NAME} is reserved for the preflight of pool "
                       f"{ctx.resolved.pool_name}, which checks each node before training starts",
                       "give your init container another name")


# describes the training container as the others configured it: its NCCL env, its mounts, its /dev/shm
CONCERN = Concern("preflight", rules=(RESERVED_NAME, UNAVAILABLE), mutate=mutate, validate=validate,
                  reads=Reads(metadata=("labels", "name", "generateName"), pod=("initContainers", "volumes"),
                              container=("securityContext", "env", "volumeMounts"), init_container=(ALL,),
                              env_values=("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")),
                  after=("rdma", "nccl", "storage"))
