"""The devices the node gives the Pod: GPUs, RDMA devices and their link layer, RDMA port states.

A Pod can hold its GPUs while an HCA port is down: NCCL then falls back to sockets (or to fewer
rails) and the job runs at a fraction of its speed with every container healthy. These checks read
what the kernel reports: device nodes in ``/dev`` (the device plugins put the allocated ones into the
container), and ``/sys/class/infiniband/<hca>/ports/<n>/{state,link_layer}``.
"""

from __future__ import annotations

import re

from ..grammars.nccl import parse_name_list
from ..grammars.preflight import Expectations
from .host import Budget, CheckFailed, Host

IB_CLASS = "/sys/class/infiniband"
VERBS_DIR = "/dev/infiniband"
_GPU_DEVICES = {"nvidia": ("/dev", re.compile(r"^nvidia(\d+)$")), "amd": ("/dev/dri", re.compile(r"^renderD(\d+)$"))}


def gpus(host: Host, expect: Expectations, budget: Budget) -> str:
    directory, pattern = _GPU_DEVICES[expect.gpu_vendor]
    found = sorted((m for m in map(pattern.match, host.listdir(directory)) if m), key=lambda m: int(m.group(1)))
    names = [m.group(0) for m in found]
    wanted = expect.gpus or 0
    shown = ", ".join(names) or "none"
    if len(names) < wanted:
        raise CheckFailed(f"sees {len(names)} of its {wanted} GPUs in {directory} ({shown}): a GPU is missing from "
                          "the node or its driver")
    if len(names) > wanted:
        raise CheckFailed(f"sees {len(names)} GPUs in {directory} but was given {wanted}: the GPUs are not isolated "
                          "(a privileged container or NVIDIA_VISIBLE_DEVICES=all?)")
    return f"{len(names)} GPUs ({shown})"


def hcas_in_scope(host: Host, expect: Expectations) -> list[tuple[str, set[int] | None]]:
    """The node's RDMA devices NCCL will use (those NCCL_IB_HCA selects, or all), with the ports named."""
    present = host.listdir(IB_CLASS)
    spec = parse_name_list(expect.nccl_ib_hca) if expect.nccl_ib_hca else None
    if spec is None:
        return [(hca, None) for hca in present]
    return [(hca, spec.ports(hca)) for hca in present if spec.selects(hca)]


def hca_ports(host: Host, hca: str, only: set[int] | None = None) -> list[str]:
    """An HCA's port numbers, in order, limited to ``only`` (the ports NCCL_IB_HCA names) when given."""
    ports = [p for p in host.listdir(f"{IB_CLASS}/{hca}/ports") if p.isdigit()]
    return sorted((p for p in ports if only is None or int(p) in only), key=int)


def rdma(host: Host, expect: Expectations, budget: Budget) -> str:
    present = host.listdir(IB_CLASS)
    if not present:
        raise CheckFailed(f"no RDMA device in {IB_CLASS}: the node has no HCA, or its driver is not loaded")
    scope = hcas_in_scope(host, expect)
    wrong = []
    for hca, only in scope:
        for port in hca_ports(host, hca, only):
            layer = host.read(f"{IB_CLASS}/{hca}/ports/{port}/link_layer")
            if layer != expect.rdma_link_layer:
                wrong.append(f"{hca} port {port} is {layer or 'of unknown link layer'}")
    if wrong:
        raise CheckFailed(f"{', '.join(wrong)}; the pool's fabric is {expect.rdma_link_layer}")
    verbs = [d for d in host.listdir(VERBS_DIR) if d.startswith("uverbs")]
    if not verbs:
        raise CheckFailed(f"no RDMA verbs device in {VERBS_DIR}: the pool's RDMA resource gave this container none")
    return f"{len(scope)} of {len(present)} HCAs in use, {expect.rdma_link_layer}, {len(verbs)} verbs devices"


def ports(host: Host, expect: Expectations, budget: Budget) -> str:
    """Every port of the HCAs in use ACTIVE (``state`` reads ``4: ACTIVE``); all the others in one line."""
    down, active = [], 0
    for hca, only in hcas_in_scope(host, expect):
        for port in hca_ports(host, hca, only):
            state = host.read(f"{IB_CLASS}/{hca}/ports/{port}/state")
            name = state.partition(":")[2].strip() or state or "of unknown state"
            if name == "ACTIVE":
                active += 1
            else:
                down.append(f"{hca} port {port} {name}")
    if down:
        raise CheckFailed(", ".join(down))
    return f"{active} ports ACTIVE"
