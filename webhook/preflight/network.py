"""NCCL's variables name devices that exist: NCCL_IB_HCA the node's HCAs, NCCL_SOCKET_IFNAME the Pod's
interfaces. A name that matches nothing does not stop NCCL: it falls back to another device or to
sockets without an error, which is the slowdown nobody sees until the job's throughput is compared."""

from __future__ import annotations

from ..grammars.nccl import parse_name_list
from ..grammars.preflight import Expectations
from .devices import IB_CLASS, hca_ports
from .host import Budget, CheckFailed, Host

NET_CLASS = "/sys/class/net"


def nccl(host: Host, expect: Expectations, budget: Budget) -> str:
    details = []
    if expect.nccl_ib_hca is not None:
        details.append(_hca(host, expect.nccl_ib_hca))
    if expect.nccl_socket_ifname is not None:
        details.append(_ifname(host, expect.nccl_socket_ifname))
    return "; ".join(details)


def _hca(host: Host, value: str) -> str:
    spec = parse_name_list(value)
    if spec is None:
        raise CheckFailed(f"NCCL_IB_HCA={value} is not NCCL syntax")
    present = host.listdir(IB_CLASS)
    have = ", ".join(present) or "none"
    if spec.exclude:
        left = [hca for hca in present if spec.selects(hca)]
        if not left:
            raise CheckFailed(f"NCCL_IB_HCA={value} excludes every RDMA device of this node ({have})")
        return f"NCCL_IB_HCA leaves {len(left)} HCAs"
    missing = []
    for entry, port in spec.items:
        hits = [hca for hca in present if spec.matches(hca, entry)]
        if not hits:
            missing.append(entry)
        elif port is not None and not any(hca_ports(host, hca, {port}) for hca in hits):
            missing.append(f"{entry}:{port}")
    if missing:
        raise CheckFailed(f"NCCL_IB_HCA names {', '.join(missing)}, which this node does not have (it has {have})")
    return f"NCCL_IB_HCA names {len(spec.items)} present HCAs"


def _ifname(host: Host, value: str) -> str:
    spec = parse_name_list(value)
    if spec is None:
        raise CheckFailed(f"NCCL_SOCKET_IFNAME={value} is not NCCL syntax")
    interfaces = host.listdir(NET_CLASS)
    chosen = [i for i in interfaces if spec.selects(i)]
    if not chosen:
        raise CheckFailed(f"NCCL_SOCKET_IFNAME={value} matches no network interface of this Pod "
                          f"({', '.join(interfaces) or 'none'})")
    return f"NCCL_SOCKET_IFNAME selects {', '.join(chosen)}"
